"""How two outputs are compared: dtype-aware tolerances, the absolute one scaled per output
column, and a comparison that reports the worst difference and bit-identity apart from the
tolerance. One definition for permute-check and for ``run``'s lesson checks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ffncli.base.validate import number

# Default tolerances: float32, float16 and bfloat16 as torch.testing.assert_close, float64
# tighter.
TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
              "float64": (1e-7, 1e-7)}


def tolerances(dtype: npt.DTypeLike | str, rtol: float | None = None,
               atol: float | None = None, names: tuple[str, str] = ("rtol", "atol")
               ) -> tuple[float, float]:
    """(rtol, atol) for results in ``dtype`` (a NumPy dtype, or ``"bfloat16"``): the
    caller's values, checked, or the defaults above. The default atol is for values near 1:
    the comparison scales it per output column (:func:`column_scale`); a caller's is used as
    given. ``names``: how errors name them (a command: its options)."""
    name = "bfloat16" if isinstance(dtype, str) and dtype == "bfloat16" else np.dtype(dtype).name
    default_rtol, default_atol = TOLERANCES.get(name, TOLERANCES["float64"])
    return (default_rtol if rtol is None else number(names[0], rtol),
            default_atol if atol is None else number(names[1], atol))


def column_scale(y: np.ndarray) -> np.ndarray:
    """What the default atol is multiplied by, per output column (a row, (1, d_out)):
    ``max(1, c_j, m)``, ``c_j`` the largest finite |value| in column j of ``y``, ``m`` the
    lower median of the ``c_j`` (of an even number, the lower middle one).

    Rounding errors grow with the terms summed into an output: a wide FFN (LLaMA's d_ff
    14336) gives outputs near 10 whose one-token and many-token float32 results differ by
    2e-5, which an atol of 1e-5 meant for values near 1 would call a failure. Per column, not
    over the whole output: one channel of 1e6 (LLMs' massive activations) must not widen the
    others' tolerance. The median keeps a column whose few outputs happen to be small (8
    tokens) at the typical column's scale, as its terms are; the lower one, so that one
    outlier of two columns does not set it."""
    with np.errstate(invalid="ignore"):
        finite = np.where(np.isfinite(y), np.abs(y.astype(np.float64)), 0.0)
    largest = finite.max(axis=0, keepdims=True) if y.shape[0] else np.zeros((1, y.shape[1]))
    typical = float(np.quantile(largest, 0.5, method="lower")) if largest.size else 0.0
    return np.maximum(largest, max(1.0, typical))


def first_overflow(x: np.ndarray, y: np.ndarray) -> int | None:
    """The first finite token (row of ``x``) whose output (row of ``y``) holds NaN or
    infinity, or None. Comparisons then say nothing: NaN equals NaN."""
    bad = np.isfinite(x).all(axis=1) & ~np.isfinite(y).all(axis=1)
    return int(bad.argmax()) if bad.any() else None


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs: float
    max_rel: float | None  # None: no |expected| is above its atol, and no ratio means anything
    worst_row: int
    bit_identical: bool
    nonfinite: bool = False  # got NaN or infinity where expected is finite
    bits_only: bool = False  # within the tolerance, failed as not bit-identical (--bitwise)


def compare(expected: np.ndarray, got: np.ndarray, rtol: float, atol: float,
            scale: np.ndarray | float = 1.0) -> Comparison:
    """|got - expected| <= atol * scale + rtol * |expected| elementwise (``scale``: 1, or per
    output column from :func:`column_scale`); NaN equals NaN, and an infinity itself.
    ``max_rel``, the largest |got - expected| / |expected|, is taken over the elements whose
    finite |expected| is above their absolute tolerance: below it the absolute tolerance
    decides, and a ratio to a value near zero (or to an exact zero) means nothing."""
    e64, g64 = expected.astype(np.float64), got.astype(np.float64)
    bound_abs = atol * np.asarray(scale, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(g64 - e64)
        close = diff <= bound_abs + rtol * np.abs(e64)
    same = (g64 == e64) | (np.isnan(g64) & np.isnan(e64))  # infinities of one sign, NaNs
    close |= same
    diff = np.nan_to_num(np.where(same, 0.0, diff), nan=np.inf, posinf=np.inf)
    relevant = np.isfinite(e64) & (np.abs(e64) > bound_abs)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        rel = diff[relevant] / np.abs(e64[relevant])
    per_row = diff.max(axis=1) if diff.size else np.zeros(0)
    return Comparison(
        ok=bool(close.all()),
        max_abs=float(diff.max()) if diff.size else 0.0,
        max_rel=float(rel.max()) if rel.size else None,
        worst_row=int(per_row.argmax()) if per_row.size else 0,
        bit_identical=bool(np.array_equal(got, expected, equal_nan=True)),
        nonfinite=bool((np.isfinite(e64) & ~np.isfinite(g64)).any()),
    )
