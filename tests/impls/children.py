"""Misbehaving NumPy "FFNs" for testing the child-process sandbox of `permute-check`.

Each function first appends its pid (one line) to the file named by the environment variable
FFNCLI_TEST_PIDFILE, if set, so a test can check afterwards that no process is left behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

import numpy as np

D_MODEL, D_FF = 6, 10
_rng = np.random.default_rng(5)
W1 = _rng.normal(0, 0.5, (D_MODEL, D_FF))
B1 = _rng.normal(0, 0.1, D_FF)
W2 = _rng.normal(0, 0.5, (D_FF, D_MODEL))
B2 = _rng.normal(0, 0.1, D_MODEL)


def _record_pid(pid: int | None = None) -> None:
    """Appends a pid (this process's by default) to $FFNCLI_TEST_PIDFILE, if set."""
    path = os.environ.get("FFNCLI_TEST_PIDFILE")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid() if pid is None else pid}\n")


def _ffn(x):
    return np.maximum(0, x @ W1 + B1) @ W2 + B2


def hard_exit(x):
    """Calls the C library's _exit(0): no Python code (atexit, patched os._exit) runs."""
    _record_pid()
    ctypes.CDLL(None)._exit(0)


def segfault(x):
    """Reads address 0: the process dies of SIGSEGV."""
    _record_pid()
    ctypes.string_at(0)


def sleeps(x):
    _record_pid()
    time.sleep(10**6)


def stubborn(x):
    """Ignores SIGINT and SIGTERM and swallows every exception: only SIGKILL ends it."""
    _record_pid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        try:
            time.sleep(10**6)
        except BaseException:  # the misbehaviour under test
            pass


def spawns_and_hangs(x):
    """Starts a sleeping grandchild (same process group), records both pids, then hangs."""
    _record_pid()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10**6)"])
    _record_pid(child.pid)
    while True:
        time.sleep(10**6)


def prints(x):
    """The correct FFN, with noise on stdout and stderr."""
    _record_pid()
    print("noise")
    print("noise", file=sys.stderr)
    return _ffn(x)


def random_output(x):
    """The FFN plus fresh (unseeded) noise of scale 1e-3 on every call."""
    _record_pid()
    y = _ffn(x)
    return y + np.random.default_rng().normal(0, 1e-3, y.shape)


def _row(row):
    return _ffn(row[None])[0]


def forks_a_pool(x):
    """The correct FFN, one token per task in a pool of forked workers (which end with
    os._exit): position-wise, and must pass."""
    import multiprocessing

    _record_pid()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        return np.array(pool.map(_row, list(x)))


def forks_then_segfaults(x):
    """Forks a sleeping copy (which keeps ffncli's pipe open), then dies of SIGSEGV."""
    _record_pid()
    pid = os.fork()
    if pid == 0:
        time.sleep(10**6)
        os._exit(0)
    _record_pid(pid)
    ctypes.string_at(0)


def escapes_the_group(x):
    """The correct FFN, which on its first call starts a sleeping grandchild in a session of
    its own (setsid, out of the child's process group), and records its pid."""
    if not os.environ.get("FFNCLI_TEST_ESCAPED"):
        os.environ["FFNCLI_TEST_ESCAPED"] = "1"
        _record_pid()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10**6)"],
                                 start_new_session=True)
        _record_pid(child.pid)
    return _ffn(x)
