"""OpenBLAS's threads: told to sleep sooner when idle (before NumPy is first imported), and
held to one around many small products.

After a multithreaded matrix product, OpenBLAS's worker threads spin, waiting for the next
one, for 2^28 CPU cycles (about 0.1 s) before they sleep. The FFN's elementwise work (bias,
activation, gate) runs between two products on the same cores, so by default those spinning
threads take CPU from it. ``OPENBLAS_THREAD_TIMEOUT=18`` lets them sleep after 2^18 cycles
(about 0.1 ms): long enough that back-to-back products do not pay for waking them, short
enough that the activation gets the cores. Measured on this project's machine (2 cores,
OpenBLAS 0.3.31), the tanh GELU went from 0.73-0.79 of the matrix products' speed to
0.83-0.86 and the exact GELU from 0.65-0.71 to 0.73-0.79; the products alone are unchanged.

The variable is read once, when NumPy loads OpenBLAS, so the ``ffncli`` command sets it first
thing; a value the user set wins. MKL and other BLAS libraries ignore it.

The attention's per-sequence products (L x d_head x L per head) are 6% of a forward's FLOPs,
but OpenBLAS shares each one out over every thread: each waits for the slowest, and with
another process on a core they ran below 1 GFLOP/s, most of the forward's time. Inside
``one_thread()`` every product runs on the thread that calls it, and the forward runs the
sequences side by side on its own threads instead (``base.parallel.each_in_parallel``), so a
slowed core simply does fewer of them. threadpoolctl sets the limit (NumPy cannot); it is
imported only when first needed, after NumPy.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

THREAD_TIMEOUT_VAR = "OPENBLAS_THREAD_TIMEOUT"
THREAD_TIMEOUT = "18"  # log2 of the CPU cycles an idle OpenBLAS thread spins before sleeping


def quiet_idle_threads() -> None:
    """Set OPENBLAS_THREAD_TIMEOUT for this process unless the user already has."""
    os.environ.setdefault(THREAD_TIMEOUT_VAR, THREAD_TIMEOUT)


# ---------------------------------------------------------------------------------------------
# One BLAS thread for many small products.

_lock = threading.Lock()
_holders = 0  # threads inside one_thread(); the first sets the limit, the last restores it
_limiter: Any = None


@functools.cache
def _controller() -> Any:
    """threadpoolctl's view of the BLAS libraries loaded now (made once, after NumPy is)."""
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

    return ThreadpoolController()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """BLAS on one thread per call inside the block (the process's setting: OpenBLAS has no
    per-thread one), for products too small to share out, which the caller runs side by side
    on its own threads instead. Nested and concurrent uses are counted: the limit ends when
    the last one leaves. OpenBLAS 0.3.31 ignores a setting from any other thread once the
    main thread has made one (measured): from another thread then, this changes nothing and
    the products share out as before (a Dask worker's task thread, whose main thread never
    sets it, does get the limit)."""
    global _holders, _limiter
    with _lock:
        if _holders == 0:
            _limiter = _controller().limit(limits=1, user_api="blas")
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                _limiter.restore_original_limits()
                _limiter = None
