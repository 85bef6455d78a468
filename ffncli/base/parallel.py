"""Work shared out over the machine's cores: NumPy's ufuncs and BLAS release the GIL, so
tasks given to a few threads run side by side (the FFN's elementwise blocks, the attention's
sequences, a GGUF tensor's rows as it is dequantised)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

_THREADS = max(1, min(os.cpu_count() or 1, 8))
_pool: ThreadPoolExecutor | None = None
T = TypeVar("T")
_DONE = object()  # the end of each_in_parallel's tasks
_inside = threading.local()  # .part: this thread runs a part of each_in_parallel


def each_in_parallel(tasks: Sequence[T], part: Callable[[T, int], None]) -> None:
    """Run ``part(task, worker)`` for every task, on every core (worker 0 is the calling
    thread). Each worker takes the next task when it is done with one (a shared iterator: a
    core slowed by another process does less of the work, instead of holding everyone up at
    the end).

    A call from inside a part runs its tasks on the calling thread, in order: the cores are
    taken. When a part raises (or the calling thread is interrupted), no further task starts,
    and the call returns only once every part already started has ended (parts are short:
    a block of elementwise work, a sequence's attention, a group of rows), so that none still
    writes into buffers or files the caller is about to let go; it raises the calling
    thread's error, or else the first worker's."""
    global _pool
    workers = 1 if getattr(_inside, "part", False) else min(_THREADS, len(tasks))
    todo, lock = iter(tasks), threading.Lock()  # the lock: safe without a GIL too
    stop: list[bool] = []

    def run(worker: int) -> None:
        while True:
            with lock:
                task = _DONE if stop else next(todo, _DONE)
            if task is _DONE:
                return
            part(task, worker)  # type: ignore[arg-type]

    def inside(worker: int) -> None:
        _inside.part = True
        try:
            run(worker)
        except BaseException:
            stop.append(True)
            raise
        finally:
            _inside.part = False

    if workers <= 1:
        run(0)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="ffncli")
    futures = [_pool.submit(inside, w) for w in range(1, workers)]
    try:
        inside(0)  # the calling thread takes a share rather than wait
    finally:
        stop.append(True)  # a no-op when all went well: every task was taken
        _wait_all(futures)
    for future in futures:
        future.result()


def _wait_all(futures: Sequence[Future[None]]) -> None:
    """Wait until every future is done, even when a signal's exception (Ctrl-C) comes while
    waiting; that exception is raised once they are."""
    came: BaseException | None = None
    while True:
        try:
            wait(futures)
            break
        except BaseException as exc:  # noqa: BLE001 (raised below, once the parts are over)
            came = came or exc
    if came is not None:
        raise came

