"""Is an FFN really position-wise? Property checks on any function of a token matrix.

The seeds state the properties: the same function is applied to every position on its own,
so (1) permuting the tokens only permutes the outputs, (2) each output row depends on its own
token alone (one position at a time equals all at once, and changing the other tokens leaves
it alone), and (3) identical tokens give identical outputs. With a batch (3-D input), (4)
batch rows do not affect each other either.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ffncli.errors import ImplError
from ffncli.validate import number

Fn = Callable[[np.ndarray], np.ndarray]

# Default tolerances: float32 as torch.testing.assert_close, float64 tighter.
TOLERANCES = {"float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}


def tolerances(dtype: np.dtype | str, rtol: float | None = None,
               atol: float | None = None) -> tuple[float, float]:
    """(rtol, atol) for results in ``dtype``: the defaults above, or the caller's values."""
    default_rtol, default_atol = TOLERANCES.get(np.dtype(dtype).name, TOLERANCES["float64"])
    return (default_rtol if rtol is None else number("--rtol", rtol),
            default_atol if atol is None else number("--atol", atol))


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


@dataclass(frozen=True)
class PropertyResult:
    name: str
    passed: bool
    trials: int
    max_abs: float
    max_rel: float
    rtol: float
    atol: float
    worst_token: int
    bit_identical: bool
    counterexample: str | None
    seconds: float


@dataclass(frozen=True)
class CheckReport:
    target: str
    tokens: int
    input_shape: tuple[int, ...]
    d_model: int
    dtype: str
    properties: tuple[PropertyResult, ...]

    @property
    def passed(self) -> bool:
        return all(p.passed for p in self.properties)


# ---------------------------------------------------------------------------------------------
# Calling the function under test safely.


def load_impl(target: str) -> Fn:
    """``package.module:function``, importable from the current directory."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ImplError(f"option --impl: expected module:function, got {target!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ImplError(f"option --impl: cannot import module {module_name!r} ({exc})") from None
    except Exception as exc:  # the user's module failed while importing
        raise ImplError(f"option --impl: importing {module_name!r} raised "
                        f"{type(exc).__name__}: {exc}") from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise ImplError(f"option --impl: module {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise ImplError(f"option --impl: {target} is not callable")
    return fn


def guarded(fn: Fn, name: str, dtype: np.dtype) -> Fn:
    """Call ``fn`` with a fresh copy of its input and check what it returns."""

    def call(x: np.ndarray) -> np.ndarray:
        try:
            y = fn(x.copy())
        except Exception as exc:
            raise ImplError(f"{name} raised {type(exc).__name__}: {exc}") from None
        if not isinstance(y, np.ndarray):
            raise ImplError(f"{name} returned {type(y).__name__}; expected a numpy array of "
                            f"shape ({x.shape[0]}, d_out)")
        if y.ndim != 2 or y.shape[0] != x.shape[0]:
            raise ImplError(f"{name} returned shape {y.shape} for input {x.shape}; expected "
                            f"({x.shape[0]}, d_out)")
        if y.dtype.kind not in "fiu":
            raise ImplError(f"{name} returned dtype {y.dtype}; expected real numbers")
        return y

    return call


# ---------------------------------------------------------------------------------------------
# The properties.


def _permutations(seq: int, batch: int, trials: int,
                  rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """Named permutations of the flattened (batch * seq) rows, each within its batch row."""
    def within(perm_of_seq: Callable[[], np.ndarray]) -> np.ndarray:
        return np.concatenate([b * seq + perm_of_seq() for b in range(batch)])

    idx = np.arange(seq)
    named = [("reverse", within(lambda: idx[::-1])),
             ("cyclic shift by 1", within(lambda: np.roll(idx, 1)))]
    if seq > 1:
        swap = idx.copy()
        swap[[0, -1]] = swap[[-1, 0]]
        named.append(("swap of first and last", within(lambda: swap)))
    named += [(f"random #{t + 1}", within(lambda: rng.permutation(seq))) for t in range(trials)]
    return named


def _fmt(row: np.ndarray) -> str:
    shown = ", ".join(f"{v:.6g}" for v in row[:4])
    return f"[{shown}{', ...' if row.size > 4 else ''}]"


class _Worst:
    """The worst comparison over several trials of one property."""

    def __init__(self) -> None:
        self.max_abs = self.max_rel = 0.0
        self.worst_token = 0
        self.bit_identical = True
        self.counterexample: str | None = None
        self.trials = 0

    def add(self, cmp: Comparison, token: int, describe: Callable[[], str]) -> None:
        self.trials += 1
        self.bit_identical &= cmp.bit_identical
        if cmp.max_abs >= self.max_abs:
            self.max_abs, self.worst_token = cmp.max_abs, token
        self.max_rel = max(self.max_rel, cmp.max_rel)
        if not cmp.ok and self.counterexample is None:
            self.counterexample = describe()

    def result(self, name: str, rtol: float, atol: float, started: float) -> PropertyResult:
        return PropertyResult(name, self.counterexample is None, self.trials, self.max_abs,
                              self.max_rel, rtol, atol, self.worst_token, self.bit_identical,
                              self.counterexample, time.perf_counter() - started)


def check_equivariance(f: Fn, x: np.ndarray, y: np.ndarray, seq: int, batch: int, trials: int,
                       rng: np.random.Generator, rtol: float, atol: float) -> PropertyResult:
    """f(P X) = P f(X) for named and random permutations along the sequence."""
    started, worst = time.perf_counter(), _Worst()
    for name, perm in _permutations(seq, batch, trials, rng):
        got, expected = f(x[perm]), y[perm]
        cmp = compare(expected, got, rtol, atol)
        i = cmp.worst_row
        worst.add(cmp, int(perm[i]), lambda: (
            f"permutation {name}: output row {i} (token {perm[i]}) expected "
            f"{_fmt(expected[i])}, got {_fmt(got[i])}"))
    return worst.result("permutation_equivariance", rtol, atol, started)


def _sample_tokens(n: int, k: int, rng: np.random.Generator) -> list[int]:
    if n <= k:
        return list(range(n))
    return sorted({0, n - 1, n // 2, *rng.choice(n, k - 3, replace=False).tolist()})


def check_independence(f: Fn, x: np.ndarray, y: np.ndarray, rng: np.random.Generator,
                       rtol: float, atol: float) -> PropertyResult:
    """Row i of f(X) is f(token i alone), and stays put when the other tokens change."""
    started, worst = time.perf_counter(), _Worst()
    n = x.shape[0]
    for i in _sample_tokens(n, 64, rng):
        alone = f(x[i:i + 1])
        cmp = compare(y[i:i + 1], alone, rtol, atol)
        worst.add(cmp, i, lambda: (f"token {i} alone: expected {_fmt(y[i])} (as in the whole "
                                   f"input), got {_fmt(alone[0])}"))
    scale = float(np.std(x)) or 1.0
    for i in _sample_tokens(n, 8, rng):
        other = rng.normal(0.0, scale, x.shape).astype(x.dtype)
        other[i] = x[i]
        got = f(other)
        cmp = compare(y[i:i + 1], got[i:i + 1], rtol, atol)
        worst.add(cmp, i, lambda: (f"token {i} with the other tokens changed: expected "
                                   f"{_fmt(y[i])}, got {_fmt(got[i])}"))
    return worst.result("token_independence", rtol, atol, started)


def check_identical(f: Fn, x: np.ndarray, rtol: float, atol: float) -> PropertyResult:
    """Identical tokens give identical outputs: all copies of one token, and one duplicate."""
    started, worst = time.perf_counter(), _Worst()
    n = x.shape[0]
    same = np.repeat(x[:1], max(n, 2), axis=0)
    got = f(same)
    cmp = compare(np.repeat(got[:1], got.shape[0], axis=0), got, rtol, atol)
    worst.add(cmp, 0, lambda: (f"{same.shape[0]} copies of token 0: row {cmp.worst_row} "
                               f"{_fmt(got[cmp.worst_row])} differs from row 0 {_fmt(got[0])}"))
    if n > 1:
        dup = x.copy()
        dup[-1] = dup[0]
        got2 = f(dup)
        cmp2 = compare(got2[:1], got2[-1:], rtol, atol)
        worst.add(cmp2, n - 1, lambda: (f"token {n - 1} set equal to token 0: output "
                                        f"{_fmt(got2[-1])} differs from {_fmt(got2[0])}"))
    return worst.result("identical_tokens", rtol, atol, started)


def check_batches(f: Fn, x: np.ndarray, y: np.ndarray, seq: int, batch: int,
                  rtol: float, atol: float) -> PropertyResult:
    """Each batch row alone gives the rows it gets within the whole batch."""
    started, worst = time.perf_counter(), _Worst()
    for b in range(batch):
        rows = slice(b * seq, (b + 1) * seq)
        got = f(x[rows])
        cmp = compare(y[rows], got, rtol, atol)
        worst.add(cmp, b * seq + cmp.worst_row, lambda: (
            f"batch row {b} alone: token {cmp.worst_row} expected "
            f"{_fmt(y[rows][cmp.worst_row])}, got {_fmt(got[cmp.worst_row])}"))
    return worst.result("batch_independence", rtol, atol, started)


def permute_check(f: Fn, x: np.ndarray, *, target: str, input_shape: tuple[int, ...],
                  trials: int = 8, seed: int = 0, rtol: float | None = None,
                  atol: float | None = None) -> CheckReport:
    """Run every property on ``x`` (tokens, d_model); ``input_shape`` tells the batch."""
    dtype = x.dtype.name
    rtol, atol = tolerances(dtype, rtol, atol)
    batch, seq = (input_shape[0], input_shape[1]) if len(input_shape) == 3 else (1, x.shape[0])
    rng = np.random.default_rng(seed)
    y = f(x)
    props = [
        check_equivariance(f, x, y, seq, batch, trials, rng, rtol, atol),
        check_independence(f, x, y, rng, rtol, atol),
        check_identical(f, x, rtol, atol),
    ]
    if batch > 1:
        props.append(check_batches(f, x, y, seq, batch, rtol, atol))
    return CheckReport(target, x.shape[0], tuple(input_shape), x.shape[1], dtype, tuple(props))


def junit_xml(report: CheckReport) -> str:
    """One testsuite, one testcase per property, a <failure> for each that failed."""
    import xml.etree.ElementTree as ET

    failures = sum(not p.passed for p in report.properties)
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="ffncli permute-check",
                          tests=str(len(report.properties)), failures=str(failures),
                          errors="0", time=f"{sum(p.seconds for p in report.properties):.6f}")
    for p in report.properties:
        case = ET.SubElement(suite, "testcase", classname=f"ffncli.permute-check.{report.target}",
                             name=p.name, time=f"{p.seconds:.6f}")
        if not p.passed:
            failure = ET.SubElement(case, "failure", message=p.counterexample or "failed",
                                    type="PropertyFailed")
            failure.text = (f"max abs deviation {p.max_abs:.3g}, max rel {p.max_rel:.3g}, "
                            f"rtol {p.rtol:g}, atol {p.atol:g}, worst token {p.worst_token}")
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)
