"""Where a sharded job's tasks run: this process, in shard order (``InProcess``, no Dask needed),
or a Dask cluster (``DaskPool``: a local one of ``--workers`` processes, or ``--scheduler``'s).
Dask is imported only here, only when asked for. Also the fixed-shape merge tree that makes
the result independent of where and in which order tasks finish (``TreeMerge``)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Protocol

from ffncli.errors import FfnError, InputError
from ffncli.jobs.choices import ScaleChoice

CONNECT_TIMEOUT = 10.0  # seconds to reach a --scheduler before giving up


# ---------------------------------------------------------------------------------------------
# Where tasks run: this process, or a Dask cluster.


class Pool(Protocol):
    dashboard: str | None

    def call(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def map(self, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]]
            ) -> Generator[tuple[int, Any], None, None]:
        """(index into ``calls``, the result or the FfnError it raised), as tasks finish."""
        ...


class InProcess:
    """The single process: tasks run here, one after the other, in shard order."""

    dashboard: str | None = None

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def map(self, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]]
            ) -> Generator[tuple[int, Any], None, None]:
        for i, args in enumerate(calls):
            try:
                yield i, fn(*args)
            except FfnError as exc:
                yield i, exc


class DaskPool:
    """Tasks on a Dask cluster, through a ``distributed.Client``: one future per task,
    collected with ``as_completed``. Stopped early (an error, Ctrl-C), every future still
    pending is cancelled on the cluster."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.dashboard = _dashboard(client)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.client.submit(fn, *args, pure=False).result()

    def map(self, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]]
            ) -> Generator[tuple[int, Any], None, None]:
        from distributed import as_completed

        futures = [self.client.submit(fn, *args, pure=False) for args in calls]
        where = {f.key: i for i, f in enumerate(futures)}
        try:
            for future in as_completed(futures):
                i = where[future.key]
                if future.status == "error":
                    exc = future.exception()
                    if type(exc).__name__ == "KilledWorker":  # the task kills its workers
                        exc = InputError("the Dask workers running it died again and again "
                                         "(out of memory?): "
                                         f"{str(exc).splitlines()[0] if str(exc) else ''}")
                    elif not isinstance(exc, FfnError):
                        future.result()  # a bug: its traceback
                    yield i, exc
                else:
                    yield i, future.result()
                future.release()  # the worker may forget it: it is the client's now
        finally:
            pending = [f for f in futures if not f.done()]
            if pending:
                self.client.cancel(pending)


def _dashboard(client: Any) -> str | None:
    """The dashboard's address, when the scheduler can draw its pages (with bokeh; without
    it, the same port serves only health checks and metrics)."""
    if "dashboard" not in client.scheduler_info().get("services", {}):
        return None
    return client.dashboard_link if client.run_on_scheduler(_has_bokeh) else None


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


# Dask's log level in this process and its workers without --verbose: above CRITICAL, so
# nothing (a worker's heartbeat failing as the cluster shuts down logs an ERROR with a
# 30-line traceback, harmless); ffncli's own errors are its one line.
_QUIET = logging.CRITICAL + 1


@contextlib.contextmanager
def connect(scale: ScaleChoice) -> Iterator[Pool]:
    """The pool the options ask for: this process, a LocalCluster of ``--workers`` processes
    (one thread each: the engine's BLAS and NumPy are single-threaded in a Dask worker), or the
    cluster at ``--scheduler``. Closed (a local cluster shut down) on the way out."""
    if scale.workers is not None and scale.scheduler is not None:
        raise InputError("give --workers or --scheduler, not both")
    if scale.workers is None and scale.scheduler is None:
        yield InProcess()
        return
    option = "--workers" if scale.workers is not None else "--scheduler"  # checked: ScaleChoice
    try:
        import distributed
    except ImportError:
        raise InputError(f"{option} needs the dask package: pip install 'ffncli[dask]'") \
            from None
    cluster = None
    with contextlib.ExitStack() as stack:
        if scale.workers is not None:
            with _sigint_ignored():
                cluster = stack.enter_context(distributed.LocalCluster(
                    n_workers=scale.workers, processes=True, threads_per_worker=1,
                    silence_logs=logging.WARNING if scale.verbose else _QUIET,
                    dashboard_address=_dashboard_address()))
            client = stack.enter_context(distributed.Client(cluster))
        else:
            assert scale.scheduler is not None
            client = stack.enter_context(_client(scale.scheduler, scale.verbose))
        yield DaskPool(client)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while the worker processes start: they inherit it. Ctrl-C reaches the
    terminal's whole process group; only this process should answer it (cancel the job,
    then shut the workers down), not each worker with a KeyboardInterrupt traceback."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _dashboard_address() -> str | None:
    """A local cluster's dashboard on a free port, when its pages can be drawn (bokeh)."""
    import importlib.util

    return ":0" if importlib.util.find_spec("bokeh") is not None else None


def _client(address: str, verbose: bool) -> Any:
    from distributed import Client

    if not verbose:  # our one line says what went wrong
        logging.getLogger("distributed").setLevel(_QUIET)
    try:
        return Client(address, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "timed out" in reason.lower():  # Dask retries a refused connection until then
            reason = f"no answer within {CONNECT_TIMEOUT:g} s"
        raise InputError(f"cannot reach the Dask scheduler at {address}: {reason}") from None


# ---------------------------------------------------------------------------------------------
# Progress: one bar for the whole job.


class TreeMerge:
    """Merge n leaves, given in any order, in the one tree their indices define: node (l, i)
    is the merge of (l-1, 2i) and (l-1, 2i+1), or (l-1, 2i) alone when it is the last. A
    node is merged as soon as both its children are there, so the memory held is the
    unmerged frontier, and the additions happen in the same order whatever that order is."""

    def __init__(self, n: int, merge: Callable[[Any, Any], Any]) -> None:
        self.n, self.merge = n, merge
        self.nodes: dict[tuple[int, int], Any] = {}
        self.root: Any = None
        self.merges = 0

    def add(self, index: int, value: Any) -> None:
        level, i = 0, index
        while True:
            count = -(-self.n // 2 ** level)  # nodes at this level
            if count == 1:
                self.root = value
                return
            sibling = i ^ 1
            if sibling < count:
                other = self.nodes.pop((level, sibling), _MISSING)
                if other is _MISSING:
                    self.nodes[(level, i)] = value
                    return
                value = self.merge(other, value) if sibling < i else self.merge(value, other)
                self.merges += 1
            i, level = i // 2, level + 1


_MISSING = object()
