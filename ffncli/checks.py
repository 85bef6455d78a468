"""Is an FFN really position-wise? Property checks on any function of a token matrix.

The seeds state the properties: the same function is applied to every position on its own,
so (1) permuting the tokens only permutes the outputs, (2) each output row depends on its own
token alone (one position at a time equals all at once, and changing the other tokens leaves
it alone), and (3) identical tokens give identical outputs. With a batch (3-D input), (4)
batch rows do not affect each other either.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ffncli.errors import ImplError, InputError, Interrupted
from ffncli.files import check_output_path
from ffncli.model import ModelChoice, TokenChoice
from ffncli.spec import Overrides
from ffncli.validate import number, whole

Fn = Callable[[np.ndarray], np.ndarray]

# Default tolerances: float32 as torch.testing.assert_close, float64 tighter.
TOLERANCES = {"float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}


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
#
# The code under test is the user's: it may exit, hang, raise anything, return NaN, hand back
# a view of its input or one buffer it reuses, or change its input in place. None of these may
# let the check pass: each is an ImplError (exit 2) naming the implementation. Only
# ffncli's own Interrupted (SIGINT, SIGTERM, SIGHUP) goes through untouched.


class _TimedOut(BaseException):
    """Raised by the SIGALRM handler of :func:`_time_limit`; a BaseException, so that an
    implementation's ``except Exception`` does not swallow it."""


MIN_TIMEOUT = 1e-3  # seconds
_LONGEST_TIMER = 1e8  # seconds (three years): setitimer overflows time_t past about 1e11


def check_timeout(seconds: float | None) -> None:
    """Refuse a ``--timeout`` that is not a positive finite number, or that this platform
    cannot enforce (it needs ``signal.setitimer``, which Windows lacks)."""
    if seconds is None:
        return
    number("option --timeout", seconds, positive=True)
    if seconds < MIN_TIMEOUT:  # a timer this short fires again before its handler returns
        raise InputError(f"option --timeout: expected at least {MIN_TIMEOUT:g} seconds, "
                         f"got {seconds:g}")
    if not hasattr(signal, "setitimer"):
        raise InputError("option --timeout: not available on this platform (it needs "
                         "signal.setitimer)")


class _ExitCalled(BaseException):
    """Raised in place of ``os._exit`` while the code under test runs: ``os._exit`` ends
    the process at once, with no unwinding, so a CI gate would pass with whatever code the
    implementation gave."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def _no_hard_exit() -> Iterator[None]:
    """``os._exit`` raises :class:`_ExitCalled` for the duration (a C extension calling
    ``_exit`` itself cannot be stopped from Python)."""
    real = os._exit

    def refuse(code: int) -> None:
        raise _ExitCalled(code)

    os._exit = refuse  # type: ignore[assignment]
    try:
        yield
    finally:
        os._exit = real


class _Alarm:
    fired = False  # the limit passed, even if the code under test swallowed _TimedOut


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[_Alarm]:
    """Raise :class:`_TimedOut` in the main thread once ``seconds`` have passed.

    A real-time interval timer sends SIGALRM; its handler raises only while the limit is
    armed, so a signal that lands after the call has returned is ignored. The timer repeats
    and the alarm records that it fired, in case the code under test swallows the exception.
    The previous SIGALRM handler and timer are restored afterwards. Python runs the handler
    between bytecodes, so a single long NumPy call is stopped when it returns."""
    alarm = _Alarm()
    if seconds is None:
        yield alarm
        return
    armed = True

    def on_alarm(signum: int, frame: object) -> None:
        if armed:
            alarm.fired = True
            raise _TimedOut

    seconds = min(seconds, _LONGEST_TIMER)
    previous = signal.signal(signal.SIGALRM, on_alarm)
    started = time.monotonic()
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds, seconds)
    try:
        yield alarm
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if old_delay > 0:  # someone else's timer was running: let it go on
            left = max(old_delay - (time.monotonic() - started), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


def _late(what: str, timeout: float | None, during: str = "") -> str:
    return f"{what} did not finish within the --timeout of {timeout:g} s{during}"


def _what_it_raised(exc: BaseException) -> str:
    """``called sys.exit(0)``, ``raised KeyboardInterrupt``, ``raised ValueError: bad``."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({'' if exc.code is None else repr(exc.code)})"
    if isinstance(exc, _ExitCalled):
        return f"called os._exit({exc.code!r})"
    message = str(exc)
    return f"raised {type(exc).__name__}" + (f": {message}" if message else "")


def load_impl(target: str, *, timeout: float | None = None) -> Fn:
    """``package.module:function``, importable from the current directory. The import runs
    under ``timeout`` seconds, if given; whatever it raises (even ``sys.exit``) is an
    ImplError, except ffncli's own :class:`Interrupted`."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ImplError(f"option --impl: expected module:function, got {target!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    alarm = _Alarm()
    try:
        with _time_limit(timeout) as alarm, _no_hard_exit():
            module = importlib.import_module(module_name)
    except Interrupted:
        raise
    except BaseException as exc:  # the user's module failed (or exited) while importing
        if alarm.fired:
            raise ImplError(_late(f"option --impl: importing {module_name!r}", timeout)) from None
        if isinstance(exc, ModuleNotFoundError):
            raise ImplError(f"option --impl: cannot import module {module_name!r} "
                            f"({exc})") from None
        raise ImplError(f"option --impl: importing {module_name!r} "
                        f"{_what_it_raised(exc)}") from None
    if alarm.fired:  # it caught the timeout's exception and went on
        raise ImplError(_late(f"option --impl: importing {module_name!r}", timeout))
    fn = getattr(module, attr, None)
    if fn is None:
        raise ImplError(f"option --impl: module {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise ImplError(f"option --impl: {target} is not callable")
    return fn


def impl_sources(target: str) -> list[Path]:
    """The source files of an imported ``module:function``: its module and, when the function
    is defined elsewhere, that file too (inputs a report must not be written over)."""
    module_name, _, attr = target.partition(":")
    module = sys.modules.get(module_name)
    found = [getattr(module, "__file__", None)]
    try:
        found.append(inspect.getsourcefile(getattr(module, attr)))
    except (TypeError, AttributeError):  # a builtin, a C function, a callable instance
        pass
    return list(dict.fromkeys(Path(f) for f in found if f))


def guarded(fn: Fn, name: str, dtype: np.dtype, *, timeout: float | None = None) -> Fn:
    """``fn`` as the checks may call it: each call gets its own copy of the input, runs under
    ``timeout`` seconds (if given), and must leave that copy unchanged and return a finite
    (tokens, d_out) array of real numbers, with the same d_out every call. The output is
    copied, so a view of the input or a buffer ``fn`` reuses cannot change it later."""
    check_timeout(timeout)
    widths: list[int] = []  # d_out of the first call

    def call(x: np.ndarray) -> np.ndarray:
        given = x.copy()
        calling = f"a call on {x.shape[0]:,} tokens"
        alarm = _Alarm()
        try:
            with _time_limit(timeout) as alarm, _no_hard_exit():
                y = fn(given)
        except Interrupted:
            raise
        except BaseException as exc:  # sys.exit, KeyboardInterrupt: never a silent exit 0
            if alarm.fired:
                raise ImplError(_late(name, timeout, f" ({calling})")) from None
            instead = " instead of returning its output" \
                if isinstance(exc, (SystemExit, _ExitCalled)) else ""
            raise ImplError(f"{name} {_what_it_raised(exc)}{instead}") from None
        if alarm.fired:  # it caught the timeout's exception and went on
            raise ImplError(_late(name, timeout, f" ({calling})"))
        if not _same_bits(given, x):
            raise ImplError(f"{name} changed its input in place ({calling}); the caller's "
                            f"tokens would be lost: copy them before changing them")
        if not isinstance(y, np.ndarray):
            raise ImplError(f"{name} returned {type(y).__name__}; expected a numpy array of "
                            f"shape ({x.shape[0]}, d_out)")
        if y.ndim != 2 or y.shape[0] != x.shape[0]:
            raise ImplError(f"{name} returned shape {y.shape} for input {x.shape}; expected "
                            f"({x.shape[0]}, d_out)")
        if y.shape[1] == 0:  # every property would hold, vacuously
            raise ImplError(f"{name} returned shape {y.shape} for input {x.shape}; expected "
                            f"({x.shape[0]}, d_out) with d_out >= 1")
        if widths and y.shape[1] != widths[0]:
            raise ImplError(f"{name} returned shape {y.shape} for input {x.shape}; expected "
                            f"({x.shape[0]}, {widths[0]}), the d_out of its first call")
        if y.dtype.kind not in "fiu":
            raise ImplError(f"{name} returned dtype {y.dtype}; expected real numbers")
        row = first_overflow(x, y)
        if row is not None:  # NaN == NaN would let every property pass
            kind = "NaN" if np.isnan(y[row]).any() else "infinity"
            raise ImplError(f"{name} returned {kind} in output row {row} for a finite token "
                            f"({calling}); the properties cannot be checked on it")
        if not widths:
            widths.append(y.shape[1])
        return np.array(y, copy=True)

    return call


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shape, dtype and bits (so -0.0 is not 0.0, and an untouched NaN is itself)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.itemsize not in (1, 2, 4, 8):
        return bool(np.array_equal(a, b, equal_nan=True))
    as_int = np.dtype(f"u{a.itemsize}")
    return bool(np.array_equal(a.view(as_int), b.view(as_int)))


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


def check_report_path(path: Path, inputs: Iterable[tuple[str, Path | None]]) -> Path:
    """Where a ``--junit-xml`` report will go, refused before any work if it is one of the
    command's ``inputs``, a directory, a device, or in no folder."""
    return check_output_path(path, inputs, "--junit-xml")


# ---------------------------------------------------------------------------------------------
# permute-check as the command runs it.

MAX_TOKENS = 100_000  # the input is held in memory and run many times
MAX_TRIALS = 10_000  # random permutations: each is one more call of the FFN on every token


@dataclass(frozen=True)
class Target:
    """What is checked: a user's ``--impl`` function or the engine of a model, guarded."""

    fn: Fn
    name: str
    d_model: int
    dtype: np.dtype
    timeout: float | None
    sources: tuple[Path, ...] = ()  # files the implementation was read from
    weights: Path | None = None  # the weights file or folder of a model's FFN


def load_target(impl: str | None, choice: ModelChoice, overrides: Overrides,
                timeout: float | None) -> Target:
    """``--impl module:function`` (its width from ``--d-model`` or the spec), or the FFN of
    the spec and weights."""
    from ffncli.model import load_model, resolve_spec, weights_of
    from ffncli.runner import parse_dtype

    np_dtype = parse_dtype(choice.dtype)
    check_timeout(timeout)
    if impl is None:
        model = load_model(choice, overrides)
        return Target(model.engine, model.spec.name, model.engine.d_model, np_dtype, timeout,
                      weights=weights_of(choice.weights, choice.hub_model))
    weights_of(choice.weights, choice.hub_model, impl)  # refuses --model with --impl
    if choice.weights is not None:
        raise InputError("give --impl or --weights, not both")
    ignored = [name for name, given in (
        ("--layer", choice.index() != 0), ("--max-memory", choice.max_memory is not None),
        ("the what-if options but --d-model", replace(overrides, d_model=None) != Overrides()),
    ) if given]
    if ignored:  # they describe our FFN, not the user's function
        raise InputError(f"option --impl: checks your function as it is; {', '.join(ignored)} "
                         "would change nothing")
    if overrides.d_model is None and choice.preset is None and choice.config is None:
        raise InputError("option --impl: give the width with --d-model N (or a --preset)")
    width = whole("option --d-model", overrides.d_model) if overrides.d_model is not None \
        else resolve_spec(choice.preset, choice.config).d_model
    fn = load_impl(impl, timeout=timeout)
    return Target(fn, impl, width, np_dtype, timeout, tuple(impl_sources(impl)))


def report_path(path: Path | None, target: Target, choice: ModelChoice,
                tokens: TokenChoice) -> Path | None:
    """Where ``--junit-xml`` goes, refused before any work if it is an input of the command."""
    if path is None:
        return None
    from ffncli.model import config_beside

    weights = target.weights
    beside = None if weights is None else config_beside(weights) or weights.parent / "config.json"
    preset = choice.preset
    preset_file = Path(preset) if preset and Path(preset).is_file() else None
    inputs = [("--input file", tokens.input), ("--preset file", preset_file),
              ("--config file", choice.config), ("--weights file", weights),
              ("config.json beside the --weights", beside)]
    inputs += [("--impl module's source", source) for source in target.sources]
    return check_report_path(path, inputs)


def check_command(target: Target, choice: TokenChoice, *, trials: int = 8,
                  rtol: float | None = None, atol: float | None = None) -> CheckReport:
    """Read the tokens once (at most 100,000, refused when they would not fit in memory),
    refuse NaN and infinity, and check every property with each call guarded."""
    from ffncli.model import load_tokens
    from ffncli.runner import check_in_memory
    from ffncli.tokens import check_finite, from_array

    whole("option --trials", trials, 0, MAX_TRIALS)
    tokens = load_tokens(choice, target.d_model)
    if tokens.n_tokens > MAX_TOKENS:
        raise InputError(f"permute-check holds the input in memory and runs it many times; "
                         f"{tokens.n_tokens:,} tokens is too many (at most {MAX_TOKENS:,})")
    check_in_memory(tokens, target.dtype, 6, "permute-check")  # input, outputs, trials
    x = tokens.matrix(target.dtype)  # read once; checked in memory
    if not choice.allow_nonfinite:
        in_memory = from_array(x)
        in_memory.path = tokens.path  # name the file in the error
        check_finite(in_memory, target.dtype, x.shape[0])
    shape = tokens.shape if len(tokens.shape) > 1 else (1, tokens.d_model)
    return permute_check(guarded(target.fn, target.name, target.dtype, timeout=target.timeout),
                         x, target=target.name, input_shape=shape, trials=trials,
                         seed=choice.seed, rtol=rtol, atol=atol)
