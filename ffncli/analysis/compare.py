"""How two outputs are compared: dtype-aware tolerances scaled by the outputs' size, and a
comparison that reports the worst difference and bit-identity apart from the tolerance. One
definition for permute-check and for ``run``'s lesson checks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ffncli.base.validate import number

# Default tolerances: float32 as torch.testing.assert_close, float64 tighter.
TOLERANCES = {"float16": (1e-3, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}


def tolerances(dtype: npt.DTypeLike, rtol: float | None = None, atol: float | None = None,
               scale: float = 1.0) -> tuple[float, float]:
    """(rtol, atol) for results in ``dtype``: the caller's values, or the defaults above with
    atol scaled by the size of the results, ``max(1, scale)`` (``scale``: the largest finite
    |output|). Rounding errors grow with the values: a wide FFN (LLaMA's d_ff 14336) gives
    outputs near 10 whose one-token and many-token float32 results differ by 2e-5, which
    an atol of 1e-5 meant for values near 1 would call a failure."""
    default_rtol, default_atol = TOLERANCES.get(np.dtype(dtype).name, TOLERANCES["float64"])
    return (default_rtol if rtol is None else number("option --rtol", rtol),
            default_atol * max(1.0, scale) if atol is None else number("option --atol", atol))


def first_overflow(x: np.ndarray, y: np.ndarray) -> int | None:
    """The first finite token (row of ``x``) whose output (row of ``y``) holds NaN or
    infinity, or None. Comparisons then say nothing: NaN equals NaN."""
    bad = np.isfinite(x).all(axis=1) & ~np.isfinite(y).all(axis=1)
    return int(bad.argmax()) if bad.any() else None


def output_scale(y: np.ndarray) -> float:
    """The largest finite |value| of ``y`` (0 when there is none): what atol scales with."""
    finite = np.abs(y[np.isfinite(y)])
    return float(finite.max()) if finite.size else 0.0


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs: float
    max_rel: float
    worst_row: int
    bit_identical: bool


def compare(expected: np.ndarray, got: np.ndarray, rtol: float, atol: float) -> Comparison:
    """|got - expected| <= atol + rtol |expected| elementwise; NaN equals NaN."""
    close = np.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    with np.errstate(invalid="ignore"):
        diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    diff = np.where(np.isnan(diff) & np.isnan(got) & np.isnan(expected), 0.0, diff)
    diff = np.nan_to_num(diff, nan=np.inf)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        rel = diff / np.abs(expected.astype(np.float64))
    rel = np.where(diff == 0, 0.0, rel)
    per_row = diff.max(axis=1) if diff.size else np.zeros(0)
    return Comparison(
        ok=bool(close.all()),
        max_abs=float(diff.max()) if diff.size else 0.0,
        max_rel=float(np.nan_to_num(rel, nan=0.0).max()) if rel.size else 0.0,
        worst_row=int(per_row.argmax()) if per_row.size else 0,
        bit_identical=bool(np.array_equal(got, expected, equal_nan=True)),
    )
