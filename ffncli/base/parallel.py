"""Work shared out over the machine's cores: NumPy's ufuncs and BLAS release the GIL, so
tasks given to a few threads run side by side (the FFN's elementwise blocks, the attention's
sequences, a GGUF tensor's rows as it is dequantised)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

_THREADS = max(1, min(os.cpu_count() or 1, 8))
_pool: ThreadPoolExecutor | None = None
T = TypeVar("T")
_DONE = object()  # the end of each_in_parallel's tasks


def each_in_parallel(tasks: Sequence[T], part: Callable[[T, int], None]) -> None:
    """Run ``part(task, worker)`` for every task, on every core (worker 0 is the calling
    thread). Each worker takes the next task when it is done with one (a shared iterator: a
    core slowed by another process does less of the work, instead of holding everyone up at
    the end)."""
    global _pool
    workers = min(_THREADS, len(tasks))
    todo, lock = iter(tasks), threading.Lock()  # the lock: safe without a GIL too

    def run(worker: int) -> None:
        while True:
            with lock:
                task = next(todo, _DONE)
            if task is _DONE:
                return
            part(task, worker)  # type: ignore[arg-type]

    if workers <= 1:
        run(0)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="ffncli")
    futures = [_pool.submit(run, w) for w in range(1, workers)]
    run(0)  # the calling thread takes a share rather than wait
    for future in futures:
        future.result()
