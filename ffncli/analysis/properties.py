"""Is an FFN really position-wise? Property checks on any function of a token matrix.

The seeds state the properties: the same function is applied to every position on its own,
so (1) permuting the tokens only permutes the outputs, (2) each output row depends on its own
token alone (one position at a time equals all at once, and changing the other tokens leaves
it alone), and (3) identical tokens give identical outputs. With a batch (3-D input), (4)
batch rows do not affect each other either."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ffncli.analysis.compare import Comparison, compare, output_scale, tolerances
from ffncli.analysis.guard import Fn


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
# The properties.


def _permutations(seq: int, batch: int, trials: int,
                  rng: np.random.Generator) -> Iterator[tuple[str, np.ndarray]]:
    """Named permutations of the flattened (batch * seq) rows, each within its batch row,
    drawn one at a time."""
    def within(perm_of_seq: Callable[[], np.ndarray]) -> np.ndarray:
        return np.concatenate([b * seq + perm_of_seq() for b in range(batch)])

    idx = np.arange(seq)
    yield "reverse", within(lambda: idx[::-1])
    yield "cyclic shift by 1", within(lambda: np.roll(idx, 1))
    if seq > 1:
        swap = idx.copy()
        swap[[0, -1]] = swap[[-1, 0]]
        yield "swap of first and last", within(lambda: swap)
    for t in range(trials):
        yield f"random #{t + 1}", within(lambda: rng.permutation(seq))


def _fmt(row: np.ndarray) -> str:
    head = ", ".join(f"{v:.6g}" for v in row[:4])
    return f"[{head}{', ...' if row.size > 4 else ''}]"


class _Worst:
    """The worst comparison over several trials of one property."""

    def __init__(self) -> None:
        self.max_abs = self.max_rel = 0.0
        self.worst_token = 0
        self.bit_identical = True
        self.counterexample: str | None = None
        self.trials = 0

    def add(self, cmp: Comparison, token: int, counterexample: str | None) -> None:
        """One trial; ``counterexample`` says what went wrong when ``cmp`` failed (written
        only then: ``None if cmp.ok else f"..."``)."""
        self.trials += 1
        self.bit_identical &= cmp.bit_identical
        if cmp.max_abs >= self.max_abs:
            self.max_abs, self.worst_token = cmp.max_abs, token
        self.max_rel = max(self.max_rel, cmp.max_rel)
        if not cmp.ok and self.counterexample is None:
            self.counterexample = counterexample

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
        worst.add(cmp, int(perm[i]), None if cmp.ok else (
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
        worst.add(cmp, i, None if cmp.ok else (
            f"token {i} alone: expected {_fmt(y[i])} (as in the whole input), got "
            f"{_fmt(alone[0])}"))
    scale = float(np.std(x)) or 1.0
    for i in _sample_tokens(n, 8, rng):
        other = rng.normal(0.0, scale, x.shape).astype(x.dtype)
        other[i] = x[i]
        got = f(other)
        cmp = compare(y[i:i + 1], got[i:i + 1], rtol, atol)
        worst.add(cmp, i, None if cmp.ok else (
            f"token {i} with the other tokens changed: expected {_fmt(y[i])}, got "
            f"{_fmt(got[i])}"))
    return worst.result("token_independence", rtol, atol, started)


def check_identical(f: Fn, x: np.ndarray, rtol: float, atol: float) -> PropertyResult:
    """Identical tokens give identical outputs: all copies of one token, and one duplicate."""
    started, worst = time.perf_counter(), _Worst()
    n = x.shape[0]
    same = np.repeat(x[:1], max(n, 2), axis=0)
    got = f(same)
    cmp = compare(np.repeat(got[:1], got.shape[0], axis=0), got, rtol, atol)
    worst.add(cmp, 0, None if cmp.ok else (
        f"{same.shape[0]} copies of token 0: row {cmp.worst_row} {_fmt(got[cmp.worst_row])} "
        f"differs from row 0 {_fmt(got[0])}"))
    if n > 1:
        dup = x.copy()
        dup[-1] = dup[0]
        got2 = f(dup)
        cmp2 = compare(got2[:1], got2[-1:], rtol, atol)
        worst.add(cmp2, n - 1, None if cmp2.ok else (
            f"token {n - 1} set equal to token 0: output {_fmt(got2[-1])} differs from "
            f"{_fmt(got2[0])}"))
    return worst.result("identical_tokens", rtol, atol, started)


def check_batches(f: Fn, x: np.ndarray, y: np.ndarray, seq: int, batch: int,
                  rtol: float, atol: float) -> PropertyResult:
    """Each batch row alone gives the rows it gets within the whole batch."""
    started, worst = time.perf_counter(), _Worst()
    for b in range(batch):
        rows = slice(b * seq, (b + 1) * seq)
        got = f(x[rows])
        cmp = compare(y[rows], got, rtol, atol)
        worst.add(cmp, b * seq + cmp.worst_row, None if cmp.ok else (
            f"batch row {b} alone: token {cmp.worst_row} expected "
            f"{_fmt(y[rows][cmp.worst_row])}, got {_fmt(got[cmp.worst_row])}"))
    return worst.result("batch_independence", rtol, atol, started)


def permute_check(f: Fn, x: np.ndarray, *, target: str, input_shape: tuple[int, ...],
                  trials: int = 8, seed: int = 0, rtol: float | None = None,
                  atol: float | None = None) -> CheckReport:
    """Run every property on ``x`` (tokens, d_model); ``input_shape`` tells the batch."""
    dtype = x.dtype.name
    tolerances(dtype, rtol, atol)  # refuse bad values before any call
    batch, seq = (input_shape[0], input_shape[1]) if len(input_shape) == 3 else (1, x.shape[0])
    rng = np.random.default_rng(seed)
    y = f(x)
    rtol, atol = tolerances(dtype, rtol, atol, output_scale(y))
    props = [
        check_equivariance(f, x, y, seq, batch, trials, rng, rtol, atol),
        check_independence(f, x, y, rng, rtol, atol),
        check_identical(f, x, rtol, atol),
    ]
    if batch > 1:
        props.append(check_batches(f, x, y, seq, batch, rtol, atol))
    return CheckReport(target, x.shape[0], tuple(input_shape), x.shape[1], dtype, tuple(props))
