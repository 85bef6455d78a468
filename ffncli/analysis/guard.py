"""Calling the user's code safely (``permute-check --impl``).

The code under test is the user's: it may exit, hang, raise anything, return NaN, hand back
a view of its input or one buffer it reuses, or change its input in place. None of these may
let the check pass: each is an ImplError (exit 2) naming the implementation. Only ffncli's own
Interrupted (SIGINT, SIGTERM, SIGHUP) goes through untouched."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ffncli.analysis.compare import first_overflow
from ffncli.analysis.frameworks import as_numpy, came_as, describe
from ffncli.base.signals import Alarm, time_limit
from ffncli.base.validate import PARAMETERS, Words, number
from ffncli.errors import ImplError, InputError, Interrupted

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


def check_timeout(seconds: float | None, where: str = "timeout") -> None:
    """Refuse a time limit that is not a positive finite number, or that this platform
    cannot enforce (it needs ``signal.setitimer``, which Windows lacks); errors begin with
    ``where`` (a command: ``option --timeout``)."""
    if seconds is None:
        return
    number(where, seconds, positive=True)
    if seconds < MIN_TIMEOUT:  # a timer this short fires again before its handler returns
        raise InputError(f"{where}: expected at least {MIN_TIMEOUT:g} seconds, "
                         f"got {seconds:g}")
    if not hasattr(signal, "setitimer"):
        raise InputError(f"{where}: not available on this platform (it needs "
                         "signal.setitimer)")
    import threading

    if threading.current_thread() is not threading.main_thread():  # SIGALRM's handler
        raise InputError(f"{where}: works in the main thread only (it needs "
                         "SIGALRM), not in this one")


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
    ``_exit`` itself cannot be stopped from Python). Only in this process: a process forked
    from it (a ``multiprocessing`` worker ends with ``os._exit``) exits for real, instead of
    unwinding into the caller's code and running it on as a copy."""
    real, here = os._exit, os.getpid()

    def refuse(code: int) -> None:
        if os.getpid() != here:
            real(code)
        raise _ExitCalled(code)

    os._exit = refuse  # type: ignore[assignment]
    try:
        yield
    finally:
        os._exit = real


def _time_limit(seconds: float | None) -> contextlib.AbstractContextManager[Alarm]:
    """Raise :class:`_TimedOut` in the main thread once ``seconds`` have passed, and again
    every ``seconds`` after, in case the code under test swallows it."""
    return time_limit(seconds, _TimedOut, repeat=True)


def _late(what: str, timeout: float | None, during: str, words: Words) -> str:
    return f"{what} did not finish within the {words.name('timeout')} of {timeout:g} s{during}"


def _what_it_raised(exc: BaseException) -> str:
    """``called sys.exit(0)``, ``raised KeyboardInterrupt``, ``raised ValueError: bad``."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({'' if exc.code is None else repr(exc.code)})"
    if isinstance(exc, _ExitCalled):
        return f"called os._exit({exc.code!r})"
    message = str(exc)
    return f"raised {type(exc).__name__}" + (f": {message}" if message else "")


def load_impl(target: str, words: Words = PARAMETERS) -> object:
    """``package.module:NAME``, importable from the current directory: the object it names (a
    function, a class, a module instance: :mod:`ffncli.analysis.frameworks` adapts it).
    Whatever the import raises (even ``sys.exit``) is an ImplError, except ffncli's own
    :class:`Interrupted`. It runs in the child process, whose parent bounds it in time
    (``--load-timeout``). Errors name the object under test as ``words`` say (a command:
    ``option --impl``)."""
    fn = words.where("fn")
    module_name, attr = split_target(target, words)
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        with _no_hard_exit():
            module = importlib.import_module(module_name)
    except Interrupted:
        raise
    except BaseException as exc:  # the user's module failed (or exited) while importing
        if isinstance(exc, ModuleNotFoundError):
            raise ImplError(f"{fn}: cannot import module {module_name!r} "
                            f"({exc}){_extra_for(exc.name)}") from None
        raise ImplError(f"{fn}: importing {module_name!r} "
                        f"{_what_it_raised(exc)}") from None
    obj = getattr(module, attr, None)
    if obj is None:
        raise ImplError(f"{fn}: module {module_name!r} has no attribute {attr!r}")
    if not callable(obj):
        raise ImplError(f"{fn}: {target} is not callable")
    return obj


EXTRAS = {"torch": "torch", "jax": "jax", "jaxlib": "jax", "flax": "jax"}


def _extra_for(missing: str | None) -> str:
    """What to install when the module missing is a framework ffncli has an extra for."""
    extra = EXTRAS.get((missing or "").partition(".")[0])
    return f"; install it with: pip install 'ffncli[{extra}]'" if extra else ""


def split_target(target: str, words: Words = PARAMETERS) -> tuple[str, str]:
    """``package.module:NAME`` as (module, name), refused in one line when it is not that:
    a file's path says the name to give instead."""
    module_name, sep, attr = target.partition(":")
    if "/" in module_name or os.sep in module_name or module_name.endswith(".py"):
        raise ImplError(f"{words.where('fn')}: expected package.module:NAME, got {target!r} "
                        f"({_as_import(module_name, attr or 'NAME', words)})")
    if not sep or not module_name or not attr:
        raise ImplError(f"{words.where('fn')}: expected package.module:NAME, got {target!r}")
    return module_name, attr


def _as_import(path: str, attr: str, words: Words) -> str:
    """How to name what the file at ``path`` defines: its import name, from the current
    directory when it lies below it, else from its own folder."""
    file = Path(path)
    kind = "a file" if file.is_file() else "a path"
    parts = file.with_suffix("").parts if file.suffix == ".py" else file.parts
    if not file.is_absolute() and parts and all(p.isidentifier() for p in parts):
        return f"{kind}: give it as {'.'.join(parts)}:{attr}, from the current directory"
    stem = file.stem if file.suffix == ".py" else file.name
    if stem.isidentifier():
        return f"{kind}: give it as {stem}:{attr}, from the folder it is in"
    return f"{kind}: {words.name('fn')} takes a module's import name, not its path"


def impl_path() -> list[str]:
    """Where ``--impl`` modules are imported from: the current directory, then ``sys.path``
    (the same for the files found here and for the child process that imports them)."""
    cwd = os.getcwd()
    return [cwd, *(p for p in sys.path if p not in ("", cwd))]


def module_files(module_name: str, path: list[str] | None = None) -> list[Path]:
    """The files importing ``module_name`` would run (its packages' ``__init__.py`` and the
    module), found as the import system would, but without running any of them: the inputs
    a report must not be written over, known before the user's code runs."""
    from importlib.machinery import PathFinder

    found: list[Path] = []
    search = impl_path() if path is None else path
    name = ""
    for part in module_name.split("."):
        name = f"{name}.{part}" if name else part
        try:
            spec = PathFinder.find_spec(part, search)
        except (ImportError, ValueError, OSError):
            break
        if spec is None:
            break
        if spec.origin and spec.has_location:
            found.append(Path(spec.origin))
        if not spec.submodule_search_locations:
            break
        search = list(spec.submodule_search_locations)
    return found


def impl_sources(target: str) -> list[Path]:
    """The source files of an imported ``module:NAME``: its module and, when the object is
    defined elsewhere, that file too (inputs a report must not be written over)."""
    module_name, _, attr = target.partition(":")
    module = sys.modules.get(module_name)
    found = [getattr(module, "__file__", None)]
    try:
        found.append(inspect.getsourcefile(getattr(module, attr)))
    except (TypeError, AttributeError):  # a builtin, a C function, a callable instance
        pass
    return list(dict.fromkeys(Path(f) for f in found if f))


# ---------------------------------------------------------------------------------------------
# One call, and what it did.


class CallRaised(ImplError):
    """The code under test raised an ordinary exception. On the first call it cannot be
    checked at all (exit 2); on a later one, on tokens it should handle like the first (one
    token alone, which BatchNorm in training mode refuses), a property fails."""


@dataclass
class Outcome:
    """What one call of the code under test did, in this process or in a child."""

    y: np.ndarray | None = None  # what it returned, when that was an array (or a tensor)
    returned: str = ""  # what it returned otherwise: "NoneType", "a tuple of 2 (Tensor, Tensor)"
    raised: str = ""  # "raised ValueError: bad", "called sys.exit(0)", "was killed by SIGSEGV"
    stopped: bool = False  # it exited (or its process ended) instead of returning
    exception: bool = False  # what it raised was an ordinary Exception
    mutated: bool = False  # it changed its input in place
    timed_out: bool = False
    came_as: str = ""  # the dtype it returned, when as_numpy converted it (bfloat16)


def call_here(fn: Callable[[np.ndarray], object], x: np.ndarray,
              timeout: float | None = None) -> Outcome:
    """Call ``fn`` on a copy of ``x`` in this process, under ``timeout`` seconds (if given),
    and say what it did; ffncli's own :class:`Interrupted` goes through."""
    given = x.copy()
    alarm = Alarm()
    try:
        with _time_limit(timeout) as alarm, _no_hard_exit():
            returned = fn(given)
            y = as_numpy(returned)
    except Interrupted:
        raise
    except BaseException as exc:  # sys.exit, KeyboardInterrupt: never a silent exit 0
        return Outcome(raised=_what_it_raised(exc), timed_out=alarm.fired,
                       stopped=isinstance(exc, (SystemExit, _ExitCalled)),
                       exception=isinstance(exc, Exception))
    if alarm.fired:  # it caught the timeout's exception and went on
        return Outcome(timed_out=True)
    mutated = not _same_bits(given, x)
    if isinstance(y, np.ndarray):
        return Outcome(y=y, mutated=mutated, came_as=came_as(returned) or "")
    return Outcome(returned=describe(y), mutated=mutated)


_UNPACKED_3D = "raised ValueError: not enough values to unpack (expected 3, got 2)"


class Judge:
    """The verdict on each call of one implementation: its output as the checks may use it
    (copied, (tokens, d_out) of real numbers, the same d_out every call, finite on the first
    call), or the ImplError saying what it did instead. ``rows_only``: a module given 2-D
    input (tokens, d_model), which may want 3-D. NaN or infinity on a later call, for tokens
    it should handle like the first's, is left to the property that asked, which fails."""

    def __init__(self, name: str, timeout: float | None = None, rows_only: bool = False,
                 words: Words = PARAMETERS) -> None:
        self.name, self.timeout, self.rows_only = name, timeout, rows_only
        self.words = words  # how its errors name timeout and the tokens (a command: options)
        self.width: int | None = None  # d_out of the first call
        self.came_as: str | None = None  # the dtype of the first call's output, if converted

    def __call__(self, x: np.ndarray, done: Outcome) -> np.ndarray:
        calling = f"a call on {x.shape[0]:,} tokens"
        self._returned(x, done, calling)
        y = done.y
        if y is None:
            raise ImplError(f"{self.name} returned {done.returned}; expected one array of shape "
                            f"({x.shape[0]}, d_out)")
        self._check_shape(x, y)
        if y.dtype.kind not in "fiu":
            raise ImplError(f"{self.name} returned dtype {y.dtype}; expected real numbers")
        row = first_overflow(x, y) if self.width is None else None
        if row is not None:  # NaN == NaN would let every property pass
            kind = "NaN" if np.isnan(y[row]).any() else "infinity"
            raise ImplError(f"{self.name} returned {kind} in output row {row} for a finite "
                            f"token ({calling}); the properties cannot be checked on it")
        if self.width is None:
            self.width, self.came_as = y.shape[1], done.came_as or None
        return np.array(y, copy=True)

    def _returned(self, x: np.ndarray, done: Outcome, calling: str) -> None:
        """The call returned in time, without raising, and left its input as it was."""
        name = self.name
        if done.timed_out:
            raise ImplError(_late(name, self.timeout, f" ({calling})", self.words))
        if done.raised:
            if self.rows_only and done.raised == _UNPACKED_3D:
                npy = f" (to {self.words.name('input')}, a .npy of that shape)" \
                    if self.words.options else ""  # a library call gives the array itself
                raise CallRaised(f"{name} {done.raised}, on 2-D input {x.shape}: it wants 3-D "
                                 f"input; give tokens of shape (batch, seq, d_model){npy}")
            if done.exception:
                raise CallRaised(f"{name} {done.raised}")
            instead = " instead of returning its output" if done.stopped else ""
            raise ImplError(f"{name} {done.raised}{instead}")
        if done.mutated:
            raise ImplError(f"{name} changed its input in place ({calling}); the caller's "
                            f"tokens would be lost: copy them before changing them")

    def _check_shape(self, x: np.ndarray, y: np.ndarray) -> None:
        """(tokens, d_out), d_out at least 1 and that of the first call."""
        name = self.name
        if y.ndim != 2 or y.shape[0] != x.shape[0]:
            raise ImplError(f"{name} returned shape {y.shape} for input {x.shape}; expected "
                            f"({x.shape[0]}, d_out)")
        if y.shape[1] == 0:  # every property would hold, vacuously
            raise ImplError(f"{name} returned shape {y.shape} for input {x.shape}; expected "
                            f"({x.shape[0]}, d_out) with d_out >= 1")
        if self.width is not None and y.shape[1] != self.width:
            raise ImplError(f"{name} returned shape {y.shape} for input {x.shape}; expected "
                            f"({x.shape[0]}, {self.width}), the d_out of its first call")


class Guarded:
    """The code under test as the checks call it: each call made by ``call`` (here, or in a
    child process), then judged; ``came_as`` tells the dtype its outputs came in when they
    were converted (bfloat16), for the tolerances."""

    def __init__(self, call: Callable[[np.ndarray], Outcome], judge: Judge) -> None:
        self._call, self.judge = call, judge

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.judge(x, self._call(x))

    @property
    def came_as(self) -> str | None:
        return self.judge.came_as


def guarded(fn: Callable[[np.ndarray], object], name: str, dtype: np.dtype, *,
            timeout: float | None = None, rows_only: bool = False,
            words: Words = PARAMETERS) -> Guarded:
    """``fn`` as the checks may call it in this process: each call gets its own copy of the
    input, runs under ``timeout`` seconds (if given), and is judged by a :class:`Judge`. The
    output is copied, so a view of the input or a buffer ``fn`` reuses cannot change it."""
    check_timeout(timeout)
    return Guarded(lambda x: call_here(fn, x, timeout), Judge(name, timeout, rows_only, words))


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shape, dtype and bits (so -0.0 is not 0.0, and an untouched NaN is itself)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.itemsize not in (1, 2, 4, 8):
        return bool(np.array_equal(a, b, equal_nan=True))
    as_int = np.dtype(f"u{a.itemsize}")
    return bool(np.array_equal(a.view(as_int), b.view(as_int)))
