"""The code under test in a child process of its own (``permute-check --impl``).

Its import, its construction and every call run in a child, in a process group of its own, so
nothing it does can make the gate pass or take it down: a C-level ``_exit``, a segfault, a hang
past the limit, an exception swallowed in a loop that ignores SIGINT and SIGTERM. Each is an
ImplError; the whole group is killed with SIGKILL when the check ends, however it ends.
What the child prints goes nowhere (``--json`` stays one document).

The two talk over a pair of pipes of their own, in frames: two 8-byte big-endian lengths, a
JSON header, and the raw bytes of at most one array (its dtype and shape in the header). No
pickle: the child's replies are read as data."""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ffncli.analysis.guard import Guarded, Judge, Outcome
from ffncli.base.validate import PARAMETERS, Words
from ffncli.errors import ImplError

LOAD_LIMIT = 120.0  # seconds for importing and building, at least, when --timeout is given
EXIT_GRACE = 2.0  # seconds a child that closed its pipe gets to end, for its exit status
_CHUNK = 1 << 20
_KINDS = "biufc"  # dtypes an array in a frame may have: plain numbers, no objects


class Ended(Exception):
    """The other end closed its pipe (its process ended) before a whole frame came."""


class Late(Exception):
    """The deadline passed before a whole frame was read or written."""


# ---------------------------------------------------------------------------------------------
# Frames


def _left(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise Late
    return left


_LONGEST_WAIT = 1e6  # seconds: select() overflows time_t near 1e10 (--timeout 1e9 and more)
_LOOK_EVERY = 0.25  # seconds between looks at whether the process at the other end is there


def _wait(fd: int, writing: bool, deadline: float | None,
          ended: Callable[[], bool] | None) -> None:
    """Until ``fd`` is ready: Late once the deadline has passed, Ended once ``ended()`` says
    the other end's process is gone and nothing more is there. A process it forked may hold
    the pipe open after it died (a segfault), and would otherwise keep this waiting for
    ever."""
    fds = ([], [fd]) if writing else ([fd], [])
    while True:
        left = _left(deadline)
        wait = min(w for w in (left, _LONGEST_WAIT, _LOOK_EVERY if ended else None)
                   if w is not None)
        ready = select.select(*fds, [], wait)
        if ready[0] or ready[1]:
            return
        if ended is not None and ended():
            ready = select.select(*fds, [], 0)  # what it wrote before it went
            if ready[0] or ready[1]:
                return
            raise Ended


def _write_all(fd: int, data: bytes | memoryview, deadline: float | None,
               ended: Callable[[], bool] | None = None) -> None:
    view = memoryview(data).cast("B")
    while view:
        _wait(fd, True, deadline, ended)
        try:
            view = view[os.write(fd, view[:_CHUNK]):]
        except BlockingIOError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            raise Ended from None


def _read_exact(fd: int, n: int, deadline: float | None,
                ended: Callable[[], bool] | None = None) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        _wait(fd, False, deadline, ended)
        try:
            k = os.readv(fd, [view[got:got + _CHUNK]])
        except BlockingIOError:
            continue
        except ConnectionResetError:
            raise Ended from None
        if k == 0:
            raise Ended
        got += k
    return buf


def send(fd: int, header: dict[str, Any], array: np.ndarray | None = None,
         deadline: float | None = None, ended: Callable[[], bool] | None = None) -> None:
    """One frame: ``header`` and, if given, ``array`` (its dtype and shape go in the header)."""
    payload: bytes | memoryview = b""
    if array is not None:
        array = np.ascontiguousarray(array)
        header = {**header, "array": {"dtype": array.dtype.str, "shape": list(array.shape)}}
        payload = array.data.cast("B") if array.size else b""
    head = json.dumps(header).encode()
    _write_all(fd, len(head).to_bytes(8, "big") + len(payload).to_bytes(8, "big") + head,
               deadline, ended)
    if len(payload):
        _write_all(fd, payload, deadline, ended)


MAX_HEADER = 1 << 24


def receive(fd: int, deadline: float | None = None, ended: Callable[[], bool] | None = None
            ) -> tuple[dict[str, Any], np.ndarray | None]:
    """One frame: its header and its array (read-only), checked before it is believed;
    ``ended()`` (if given) says whether the process sending it has gone."""
    lengths = _read_exact(fd, 16, deadline, ended)
    n_head, n_payload = int.from_bytes(lengths[:8], "big"), int.from_bytes(lengths[8:], "big")
    if n_head > MAX_HEADER:
        raise ValueError(f"a header of {n_head:,} bytes")
    try:
        header = json.loads(bytes(_read_exact(fd, n_head, deadline, ended)))
    except RecursionError:
        raise ValueError("a header nested too deep") from None
    if not isinstance(header, dict):
        raise ValueError("a header that is not a JSON object")
    meta = header.pop("array", None)
    if meta is None:
        if n_payload:
            raise ValueError("bytes with no array")
        return header, None
    dtype, shape = np.dtype(meta["dtype"]), tuple(int(n) for n in meta["shape"])
    if dtype.kind not in _KINDS or dtype.hasobject or any(n < 0 for n in shape):
        raise ValueError(f"an array of dtype {dtype} and shape {shape}")
    if math.prod(shape) * dtype.itemsize != n_payload:  # Python ints: no overflow
        raise ValueError(f"{n_payload:,} bytes for an array of shape {shape}, {dtype}")
    data = _read_exact(fd, n_payload, deadline, ended) if n_payload else bytearray()
    array = np.frombuffer(data, dtype).reshape(shape)
    array.flags.writeable = False  # data, to be judged and copied
    return header, array


# ---------------------------------------------------------------------------------------------
# The parent's end


def load_limit(timeout: float | None, given: float | None = None) -> float | None:
    """The limit on importing and building (``--load-timeout``, ``given``): by default its
    own, generous one, as ``import torch`` alone takes seconds (minutes from a cold disk):
    the larger of LOAD_LIMIT and ten calls' worth; none without --timeout."""
    if given is not None:
        return given
    return None if timeout is None else max(LOAD_LIMIT, 10 * timeout)


# The child's start: not ``-m``, which puts the current directory (the user's project) first
# on sys.path before ffncli's own imports, so a json.py or copy.py of theirs replaced the
# standard library's under ffncli. The code under test is imported from there afterwards.
_START = ("import sys; del sys.path[0]; from ffncli.analysis.child import main; "
          "sys.exit(main(sys.argv[1:]))")


class Child:
    """One child process running the code under test; a context manager that kills its whole
    process group on the way out."""

    def __init__(self, name: str, timeout: float | None, *, load_timeout: float | None = None,
                 x64: bool = False, words: Words = PARAMETERS) -> None:
        """Start the child: each call limited to ``timeout`` seconds, importing and building
        to :func:`load_limit`; ``x64`` turns on JAX's 64-bit mode in it (float64 checks).
        Errors, here and in the child, name the options as ``words`` say."""
        self.name, self.timeout, self.words = name, timeout, words
        self.load_timeout = load_limit(timeout, load_timeout)
        env = {**os.environ, "JAX_ENABLE_X64": "1"} if x64 else None
        to_child, self._out = _pipe()
        self._in, from_child = _pipe()
        for fd in (self._out, self._in):
            os.set_blocking(fd, False)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _START, str(to_child), str(from_child), str(os.getpid())],
                pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                env=env)
        except OSError as exc:
            self._close_fds()
            raise ImplError(f"cannot start a process for {name}: {exc.strerror or exc}") from None
        finally:
            os.close(to_child)
            os.close(from_child)

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        """Import and build the code under test; the child's account of it (``ok``, or the
        ``error`` line it gave)."""
        deadline = _deadline(self.load_timeout)
        what = f"{self.words.where('fn')}: importing and building {self.name}"
        words = {"options": self.words.options, "renamed": self.words.renamed}
        try:
            send(self._out, {"op": "load", "words": words, **request}, deadline=deadline,
                 ended=self._gone)
            reply, _ = receive(self._in, deadline, self._gone)
        except Late:
            self.close()
            raise ImplError(f"{what} did not finish within the "
                            f"{self.words.name('load_timeout')} of {self.load_timeout:g} s") \
                from None
        except Ended:
            raise ImplError(f"{what}: {self._ending()}") from None
        except (ValueError, KeyError, TypeError) as exc:
            self.close()
            raise ImplError(f"{what}: its process sent what is not ffncli's reply ({exc})") \
                from None
        if not reply.get("ok"):
            self.close()
            raise ImplError(str(reply.get("error")))
        return reply

    def call(self, x: np.ndarray, seq: int | None) -> Outcome:
        """One call of the code under test on ``x``, as an :class:`Outcome`; a hang past the
        timeout, or a process that ends, is one too."""
        deadline = _deadline(self.timeout)
        try:
            send(self._out, {"op": "call", "seq": seq}, x, deadline, self._gone)
            reply, y = receive(self._in, deadline, self._gone)
        except Late:
            self.close()
            return Outcome(timed_out=True)
        except Ended:
            return Outcome(raised=self._ending(), stopped=True)
        except (ValueError, KeyError, TypeError) as exc:
            self.close()
            return Outcome(raised=f"sent what is not ffncli's reply ({exc}) from its process")
        fields = {k: reply[k] for k in ("returned", "raised", "stopped", "exception", "mutated",
                                        "came_as") if k in reply}
        return Outcome(y=y, **fields)

    def _gone(self) -> bool:
        """Whether the child has ended (its pipe may outlive it, held by a process it
        forked)."""
        return self.process.poll() is not None

    def _ending(self) -> str:
        """Why the child's pipe closed: how its process ended (after EXIT_GRACE, killed)."""
        try:
            code = self.process.wait(EXIT_GRACE)
        except subprocess.TimeoutExpired:
            code = None
        self.close()
        if code is None:
            return "closed ffncli's pipe to its process"
        if code >= 0:
            return f"ended its process with exit code {code} (os._exit, or C code calling exit)"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        what = signal.strsignal(-code) or name
        return f"crashed: its process was killed by {name} ({what.lower()})"

    def close(self) -> None:
        """Kill the child's whole process group (SIGKILL: nothing can ignore it), and first
        every process below it, even one that left the group (``setsid``, a daemon's double
        fork: the child is their subreaper); reap the child and close the pipes; safe to
        call twice."""
        if self.process.returncode is None or self._in >= 0:
            if self.process.poll() is None:  # alive, a subreaper: all it started is below it
                _kill_below(self.process.pid)
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.wait()
        self._close_fds()

    def _close_fds(self) -> None:
        for attr in ("_out", "_in"):
            fd = getattr(self, attr)
            if fd >= 0:
                os.close(fd)
                setattr(self, attr, -1)


def _below(pid: int) -> list[int]:
    """The live processes descended from ``pid`` (zombies aside), from /proc; none where
    there is no /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if fields[0] not in "ZX":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def _kill_below(pid: int, rounds: int = 20) -> None:
    """SIGKILL every process below ``pid`` until none is left (one forked meanwhile is
    reparented to ``pid``, a subreaper, and found the next round)."""
    for _ in range(rounds):
        left = _below(pid)
        if not left:
            return
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def _pipe() -> tuple[int, int]:
    """``os.pipe()``, its two ends numbered 3 or more: with ffncli's stdin (or stdout) closed
    (``<&-``), a pipe would take fd 0, and the child's /dev/null stdin would replace it."""
    import fcntl

    ends = []
    for fd in os.pipe():
        if fd < 3:
            fd, low = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3), fd
            os.close(low)
        ends.append(fd)
    return ends[0], ends[1]


def _deadline(seconds: float | None) -> float | None:
    return None if seconds is None else time.monotonic() + seconds


def isolated(child: Child, judge: Judge, seq: int | None) -> Guarded:
    """The code under test as the checks call it: each call in the child, then judged."""
    return Guarded(lambda x: child.call(x, seq), judge)
