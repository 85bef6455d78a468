"""base.parallel: tasks shared out over threads; a nested call runs on its caller's thread; a
failing part stops the rest and the call waits for the parts already started."""

from __future__ import annotations

import threading
import time

import pytest

from ffncli.base import parallel


@pytest.fixture
def two_threads(monkeypatch):
    """Two workers whatever the machine's cores, on a pool of their own."""
    monkeypatch.setattr(parallel, "_THREADS", 2)
    monkeypatch.setattr(parallel, "_pool", None)
    yield
    if parallel._pool is not None:
        parallel._pool.shutdown(wait=True)


def test_every_task_runs_once(two_threads):
    seen: list[int] = []
    lock = threading.Lock()

    def part(task: int, worker: int) -> None:
        with lock:
            seen.append(task)

    parallel.each_in_parallel(list(range(50)), part)
    assert sorted(seen) == list(range(50))


def test_a_nested_call_runs_in_order_on_the_calling_thread(two_threads):
    inner: dict[int, list[tuple[int, int, int]]] = {}  # outer task: (inner task, worker, thread)

    def outer(task: int, worker: int) -> None:
        got = inner.setdefault(task, [])
        parallel.each_in_parallel([0, 1, 2], lambda t, w: got.append(
            (t, w, threading.get_ident())))
        assert {thread for _, _, thread in got} == {threading.get_ident()}

    parallel.each_in_parallel([0, 1], outer)
    assert {task: [(t, w) for t, w, _ in got] for task, got in inner.items()} == {
        0: [(0, 0), (1, 0), (2, 0)], 1: [(0, 0), (1, 0), (2, 0)]}
    # the calling thread is not left marked as inside: its next call shares out again
    threads: set[int] = set()
    barrier = threading.Barrier(2, timeout=10)

    def meet(task: int, worker: int) -> None:
        threads.add(threading.get_ident())
        barrier.wait()  # both tasks at once: only two threads can pass

    parallel.each_in_parallel([0, 1], meet)
    assert len(threads) == 2


@pytest.mark.slow
def test_a_failing_part_stops_the_rest_and_the_started_ones_end_first(two_threads):
    """'slow' is under way when 'bad' raises: the call raises bad's error only after slow has
    ended, and no 'later' task starts."""
    ended: list[str] = []
    started = threading.Event()

    def part(task: str, worker: int) -> None:
        if task == "slow":
            started.set()
            time.sleep(0.3)
            ended.append("slow")
        elif task == "bad":
            started.wait(10)
            raise ValueError("bad task")
        else:
            ended.append("later")

    with pytest.raises(ValueError, match="bad task"):
        parallel.each_in_parallel(["slow", "bad", "later", "later", "later"], part)
    assert ended == ["slow"]

