"""Is an FFN really position-wise? Property checks on any function of a token matrix.

The seeds state the properties: the same function is applied to every position on its own,
so (1) permuting the tokens only permutes the outputs, (2) each output row depends on its own
token alone (one position at a time equals all at once, and changing the other tokens leaves
it alone), and (3) identical tokens give identical outputs. With a batch (3-D input), (4)
batch rows do not affect each other either."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ffncli.analysis.compare import Comparison, column_scale, compare, first_overflow, tolerances
from ffncli.analysis.frameworks import RANDOM_HINT, RANDOM_OTHERWISE, Fn
from ffncli.analysis.guard import CallRaised
from ffncli.errors import InputError


@dataclass(frozen=True)
class PropertyResult:
    name: str
    passed: bool
    trials: int
    max_abs: float
    max_rel: float | None  # None: no |expected| compared was above its atol
    rtol: float
    atol: float  # as given; or the default, multiplied per output column (atol_scaled)
    worst_token: int
    bit_identical: bool
    counterexample: str | None
    seconds: float
    atol_scaled: bool = False  # atol * max(1, the largest |output| of each column)


@dataclass(frozen=True)
class CheckReport:
    target: str
    tokens: int
    input_shape: tuple[int, ...]
    d_model: int
    dtype: str
    properties: tuple[PropertyResult, ...]
    bitwise: bool = False  # bit-identity was required besides the tolerance
    skipped: tuple[str, ...] = ()  # properties not checked: the function is random
    framework: str = "numpy"  # numpy, torch, jax or flax
    mode: str | None = None  # eval or train, for a module
    notes: tuple[str, ...] = ()  # what was done to check it: eval mode, a cast on a copy

    @property
    def explanation(self) -> str | None:
        """The usual cause of what failed, from which properties failed (None when none did
        beyond the last bits)."""
        failed = {p.name for p in self.properties if not p.passed
                  and "not bit-identical, as --bitwise requires" not in (p.counterexample or "")}
        if "permutation_equivariance" in failed:
            return ("the outputs depend on the position: something is added or chosen by "
                    "position (a position embedding, a cumulative or causal operation, a "
                    "convolution along the sequence, an expert capacity filled in token order)")
        if "token_independence" in failed:
            return ("the outputs depend on the other tokens, whatever their order: something "
                    "pools or normalises along the sequence (a mean, a LayerNorm or softmax "
                    "over positions, BatchNorm in training mode, which mixes the batch)")
        return None

    @property
    def passed(self) -> bool:
        return all(p.passed for p in self.properties)


PROPERTIES = ("permutation_equivariance", "token_independence", "identical_tokens",
              "batch_independence")


@dataclass(frozen=True)
class Rule:
    """When two outputs count as equal: within the tolerance (atol multiplied by ``scale``:
    1, or per output column), and bit-identical too when ``bitwise``."""

    rtol: float
    atol: float
    bitwise: bool = False
    scale: np.ndarray | float = 1.0

    @property
    def scaled(self) -> bool:
        """Whether atol is multiplied per output column (the default atol)."""
        return isinstance(self.scale, np.ndarray)

    def compare(self, expected: np.ndarray, got: np.ndarray) -> Comparison:
        cmp = compare(expected, got, self.rtol, self.atol, self.scale)
        if self.bitwise and cmp.ok and not cmp.bit_identical:
            return replace(cmp, ok=False, worst_row=_first_unequal_row(expected, got),
                           bits_only=True)
        return cmp


def _first_unequal_row(expected: np.ndarray, got: np.ndarray) -> int:
    same = (expected == got) | (np.isnan(expected) & np.isnan(got))
    return int((~same.all(axis=1)).argmax())


def _differs(cmp: Comparison) -> str:
    """How a failed comparison failed: past the tolerance, or (bitwise) in its last bits."""
    if cmp.bits_only:
        return (f" (within the tolerance, but not bit-identical, as --bitwise requires: they "
                f"differ by up to {cmp.max_abs:.3g})")
    return ""


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
    swap = idx.copy()
    swap[[0, -1]] = swap[[-1, 0]]
    yield "swap of first and last", within(lambda: swap)
    for t in range(trials):
        yield f"random #{t + 1}", within(lambda: rng.permutation(seq))


def _fmt(row: np.ndarray) -> str:
    head = ", ".join(f"{v:.6g}" for v in row[:4])
    return f"[{head}{', ...' if row.size > 4 else ''}]"


class _Worst:
    """The worst comparison over several trials of one property. Its counterexample is the
    first trial that failed, but one whose output is finite comes before one that gave NaN or
    infinity for a finite token (one token alone, normalised by a deviation over the sequence
    of one: the comparison of many tokens says more)."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.max_abs = 0.0
        self.max_rel: float | None = None  # None until a comparison has one
        self.worst_token = 0
        self.bit_identical = True
        self.counterexample: str | None = None
        self.nonfinite: str | None = None  # the first trial that failed with NaN or infinity
        self.trials = 0

    def add(self, cmp: Comparison, token: int, counterexample: str | None) -> None:
        """One trial; ``counterexample`` says what went wrong when ``cmp`` failed (written
        only then: ``None if cmp.ok else f"..."``)."""
        self.trials += 1
        self.bit_identical &= cmp.bit_identical
        if cmp.max_abs >= self.max_abs:
            self.max_abs, self.worst_token = cmp.max_abs, token
        if cmp.max_rel is not None:
            self.max_rel = max(self.max_rel or 0.0, cmp.max_rel)
        if cmp.ok:
            return
        if cmp.nonfinite:
            self.nonfinite = self.nonfinite or counterexample
        elif self.counterexample is None:
            self.counterexample = f"{counterexample}{_differs(cmp)}"

    def raised(self, token: int, counterexample: str) -> None:
        """One trial on which the function raised (an ordinary exception) instead."""
        self.trials += 1
        self.bit_identical = False
        if self.counterexample is None:
            self.worst_token, self.counterexample = token, counterexample

    def overflowed(self, token: int, counterexample: str) -> None:
        """One trial on which the function gave NaN or infinity for a finite token, in outputs
        compared with one another."""
        self.trials += 1
        self.bit_identical = False
        if self.max_abs < np.inf:  # as a comparison with the first call's outputs says it
            self.max_abs, self.worst_token = np.inf, token
        self.nonfinite = self.nonfinite or counterexample

    def result(self, name: str, started: float) -> PropertyResult:
        counterexample = self.counterexample or self.nonfinite
        return PropertyResult(name, counterexample is None, self.trials, self.max_abs,
                              self.max_rel, self.rule.rtol, self.rule.atol, self.worst_token,
                              self.bit_identical, counterexample,
                              time.perf_counter() - started, self.rule.scaled)


def _call(f: Fn, x: np.ndarray) -> np.ndarray | str:
    """``f(x)``, or what it raised: on a call after the first, an ordinary exception is a
    failure of the property (BatchNorm in training mode refuses one token alone)."""
    try:
        return f(x)
    except CallRaised as exc:
        return str(exc)


def check_equivariance(f: Fn, x: np.ndarray, y: np.ndarray, seq: int, batch: int, trials: int,
                       rng: np.random.Generator, rule: Rule) -> PropertyResult:
    """f(P X) = P f(X) for named and random permutations along the sequence."""
    started, worst = time.perf_counter(), _Worst(rule)
    for name, perm in _permutations(seq, batch, trials, rng):
        got, expected = _call(f, x[perm]), y[perm]
        if isinstance(got, str):
            worst.raised(int(perm[0]), f"permutation {name}: {got}")
            continue
        cmp = rule.compare(expected, got)
        i = cmp.worst_row
        worst.add(cmp, int(perm[i]), None if cmp.ok else (
            f"permutation {name}: output row {i} (token {perm[i]}) expected "
            f"{_fmt(expected[i])}, got {_fmt(got[i])}"))
    return worst.result("permutation_equivariance", started)


def _sample_tokens(n: int, k: int, rng: np.random.Generator) -> list[int]:
    if n <= k:
        return list(range(n))
    return sorted({0, n - 1, n // 2, *rng.choice(n, k - 3, replace=False).tolist()})


def check_independence(f: Fn, x: np.ndarray, y: np.ndarray, rng: np.random.Generator,
                       rule: Rule) -> PropertyResult:
    """Row i of f(X) is f(token i alone), and stays put when the other tokens change."""
    started, worst = time.perf_counter(), _Worst(rule)
    n = x.shape[0]
    for i in _sample_tokens(n, 64, rng):
        alone = _call(f, x[i:i + 1])
        if isinstance(alone, str):
            worst.raised(i, f"token {i} alone: {alone}")
            continue
        cmp = rule.compare(y[i:i + 1], alone)
        worst.add(cmp, i, None if cmp.ok else (
            f"token {i} alone: expected {_fmt(y[i])} (as in the whole input), got "
            f"{_fmt(alone[0])}"))
    scale = float(np.std(x)) or 1.0
    for i in _sample_tokens(n, 8, rng):
        other = rng.normal(0.0, scale, x.shape).astype(x.dtype)
        other[i] = x[i]
        got = _call(f, other)
        if isinstance(got, str):
            worst.raised(i, f"token {i} with the other tokens changed: {got}")
            continue
        cmp = rule.compare(y[i:i + 1], got[i:i + 1])
        worst.add(cmp, i, None if cmp.ok else (
            f"token {i} with the other tokens changed: expected {_fmt(y[i])}, got "
            f"{_fmt(got[i])}"))
    return worst.result("token_independence", started)


def _overflowed(x: np.ndarray, got: np.ndarray, rows: list[int]) -> int | None:
    """The first of ``rows`` whose output is NaN or infinity for a finite token: outputs
    compared with one another, not with the first call's, would be NaN equal to NaN."""
    row = first_overflow(x[rows], got[rows])
    return None if row is None else rows[row]


def check_identical(f: Fn, x: np.ndarray, rule: Rule) -> PropertyResult:
    """Identical tokens give identical outputs: all copies of one token, and one duplicate."""
    started, worst = time.perf_counter(), _Worst(rule)
    n = x.shape[0]
    same = np.repeat(x[:1], n, axis=0)
    got = _call(f, same)
    if isinstance(got, str):
        worst.raised(0, f"{n} copies of token 0: {got}")
    elif (row := _overflowed(same, got, list(range(n)))) is not None:
        worst.overflowed(row, f"{n} copies of token 0: row {row} is {_fmt(got[row])}, for "
                              "a finite token")
    else:
        cmp = rule.compare(np.repeat(got[:1], n, axis=0), got)
        worst.add(cmp, 0, None if cmp.ok else (
            f"{n} copies of token 0: row {cmp.worst_row} "
            f"{_fmt(got[cmp.worst_row])} differs from row 0 {_fmt(got[0])}"))
    dup = x.copy()
    dup[-1] = dup[0]
    got2 = _call(f, dup)
    if isinstance(got2, str):
        worst.raised(n - 1, f"token {n - 1} set equal to token 0: {got2}")
    elif (row := _overflowed(dup, got2, [0, n - 1])) is not None:
        worst.overflowed(row, f"token {n - 1} set equal to token 0: output row {row} is "
                              f"{_fmt(got2[row])}, for a finite token")
    else:
        cmp2 = rule.compare(got2[:1], got2[-1:])
        worst.add(cmp2, n - 1, None if cmp2.ok else (
            f"token {n - 1} set equal to token 0: output {_fmt(got2[-1])} differs from "
            f"{_fmt(got2[0])}"))
    return worst.result("identical_tokens", started)


def check_batches(f: Fn, x: np.ndarray, y: np.ndarray, seq: int, batch: int,
                  rule: Rule) -> PropertyResult:
    """Each batch row alone gives the rows it gets within the whole batch."""
    started, worst = time.perf_counter(), _Worst(rule)
    for b in range(batch):
        rows = slice(b * seq, (b + 1) * seq)
        got = _call(f, x[rows])
        if isinstance(got, str):
            worst.raised(b * seq, f"batch row {b} alone: {got}")
            continue
        cmp = rule.compare(y[rows], got)
        worst.add(cmp, b * seq + cmp.worst_row, None if cmp.ok else (
            f"batch row {b} alone: token {cmp.worst_row} expected "
            f"{_fmt(y[rows][cmp.worst_row])}, got {_fmt(got[cmp.worst_row])}"))
    return worst.result("batch_independence", started)


def check_deterministic(f: Fn, x: np.ndarray, y: np.ndarray, rule: Rule,
                        framework: str = "numpy") -> PropertyResult:
    """The same tokens twice give the same outputs: a random function (dropout in training
    mode, an unseeded sampler) fails here, once, and the properties are not checked on it."""
    started, worst = time.perf_counter(), _Worst(rule)
    again = f(x)
    cmp = rule.compare(y, again)
    i = cmp.worst_row
    worst.add(cmp, i, None if cmp.ok else (
        f"two calls on the same {x.shape[0]:,} tokens differ: token {i} gave {_fmt(y[i])}, "
        f"then {_fmt(again[i])}; the function is random: "
        f"{RANDOM_HINT.get(framework, RANDOM_OTHERWISE)}"))
    return worst.result("deterministic", started)


def _compared_dtype(x: np.ndarray, y: np.ndarray, came_as: str | None) -> tuple[str, str]:
    """The dtype whose tolerances compare the outputs: the tokens', or the outputs' when they
    come back coarser (float16; bfloat16, which NumPy lacks, converted to float32 on the way:
    ``came_as``), with the note saying so."""
    if came_as == "bfloat16":
        return came_as, ("the outputs come back in bfloat16, converted to float32: compared "
                         "with bfloat16's tolerances")
    if y.dtype.kind == "f" and y.dtype.itemsize < x.dtype.itemsize:
        return y.dtype.name, (f"the outputs come back in {y.dtype.name}: compared with "
                              f"{y.dtype.name}'s tolerances")
    return x.dtype.name, ""


def permute_check(f: Fn, x: np.ndarray, *, target: str, input_shape: tuple[int, ...],
                  trials: int = 8, seed: int = 0, rtol: float | None = None,
                  atol: float | None = None, bitwise: bool = False,
                  about: dict[str, Any] | None = None) -> CheckReport:
    """Run every property on ``x`` (tokens, d_model); ``input_shape`` tells the batch. Fewer
    than 2 tokens (in a sequence) are refused: they check nothing. First the same tokens go in
    twice: a function that is random is reported as that alone. ``f`` may say the dtype its
    outputs came in before they were converted (``f.came_as``, a guarded call's: bfloat16).
    ``about`` fills the report's framework, mode and notes."""
    dtype = x.dtype.name
    tolerances(dtype, rtol, atol)  # refuse bad values before any call
    if x.size and not np.isfinite(x).all(axis=1).any():  # NaN == NaN: all would pass
        raise InputError("tokens: NaN or infinity in every token; with no finite token every "
                         "property would hold whatever the function does")
    batch, seq = (input_shape[0], input_shape[1]) if len(input_shape) == 3 else (1, x.shape[0])
    if seq < 2:  # every permutation is the identity, and each token is alone already
        got = f"shape {tuple(input_shape)}" if len(input_shape) == 3 else f"{seq}"
        raise InputError(f"tokens: expected {'sequences of ' if len(input_shape) == 3 else ''}"
                         f"at least 2 tokens, got {got}; with one token every permutation is "
                         "the identity, and nothing would be checked")
    rng = np.random.default_rng(seed)
    y = f(x)
    about = dict(about or {})
    compared, note = _compared_dtype(x, y, getattr(f, "came_as", None))
    if note:
        about["notes"] = (*about.get("notes", ()), note)
    scale = column_scale(y) if atol is None else 1.0
    rule = Rule(*tolerances(compared, rtol, atol), bitwise, scale)
    names = PROPERTIES if batch > 1 else PROPERTIES[:-1]
    first = check_deterministic(f, x, y, rule, about.get("framework", "numpy"))
    if not first.passed:
        return CheckReport(target, x.shape[0], tuple(input_shape), x.shape[1], dtype, (first,),
                           bitwise, names, **about)
    props = [
        first,
        check_equivariance(f, x, y, seq, batch, trials, rng, rule),
        check_independence(f, x, y, rng, rule),
        check_identical(f, x, rule),
    ]
    if batch > 1:
        props.append(check_batches(f, x, y, seq, batch, rule))
    return CheckReport(target, x.shape[0], tuple(input_shape), x.shape[1], dtype, tuple(props),
                       bitwise, (), **about)
