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

from ffncli.base.signals import signals_held
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
            for future in as_completed(futures, loop=self.client.loop):
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
            with _signals_held():
                cluster = stack.enter_context(distributed.LocalCluster(
                    n_workers=scale.workers, processes=True, threads_per_worker=1,
                    silence_logs=logging.WARNING if scale.verbose else _QUIET,
                    dashboard_address=_dashboard_address()))
            client = stack.enter_context(distributed.Client(cluster))
        else:
            assert scale.scheduler is not None
            client = stack.enter_context(_client(scale.scheduler, scale.verbose))
        yield DaskPool(client)


# While a local cluster starts, signals wait: Dask stopped half-way through its start leaves
# worker processes it has not handed over yet. SIGINT and SIGHUP reach the terminal's whole
# process group, so they are also kept from the workers (blocked: they inherit the mask) and
# this process answers them by shutting the workers down. SIGTERM is sent to one process, and
# Dask stops its workers with it: it stays theirs.
_KEPT_FROM_WORKERS = ("SIGINT", "SIGHUP")


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait while the body runs (the worker processes start), as
    :func:`ffncli.base.signals.signals_held` makes them: Ctrl-C in the first seconds is not
    lost, and it lands where the cluster is already in the ``with`` that shuts it down.

    The worker processes start with SIGINT and SIGHUP blocked (a signal mask outlives
    ``exec``, a handler does not): the terminal's Ctrl-C or hangup never ends one with a
    traceback or a half-closed queue; this process shuts them down."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {getattr(signal, name) for name in _KEPT_FROM_WORKERS if hasattr(signal, name)}
    with signals_held():
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, kept)  # threads started here inherit it
        if kept:  # multiprocessing's resource tracker, started on first use, unblocks SIGINT
            from multiprocessing import resource_tracker  # after it is spawned: start it first

            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, kept)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending one waits, held


def _dashboard_address() -> str | None:
    """A local cluster's dashboard on a free port, when its pages can be drawn (bokeh)."""
    import importlib.util

    return ":0" if importlib.util.find_spec("bokeh") is not None else None


@contextlib.contextmanager
def _client(address: str, verbose: bool) -> Iterator[Any]:
    """A client of the scheduler at ``address``, connected and with a worker, within
    CONNECT_TIMEOUT seconds in all: the TCP connection, Dask's handshake and the wait for a
    first worker. Dask bounds only parts of that: a peer that accepts and says nothing hangs
    its Client for ever, one that speaks another protocol fails deep in its frame reader (and
    the half-made Client hangs again as it is collected). So a first, private exchange asks
    the peer who it is, in a thread given up at the deadline; only a scheduler gets a Client.
    Whatever the peer did is one line. Closed on the way out."""
    import time

    if not verbose:  # our one line says what went wrong
        logging.getLogger("distributed").setLevel(_QUIET)
    deadline = time.monotonic() + CONNECT_TIMEOUT

    def within(call: Callable[[], Any]) -> Any:
        """``call()`` in a thread, its result or the reason it gave none by the deadline."""
        done: dict[str, Any] = {}

        def attempt() -> None:
            try:
                done["result"] = call()
            except BaseException as exc:  # handed to the thread that waits
                done["error"] = exc

        thread = threading.Thread(target=attempt, name="ffncli-connect", daemon=True)
        thread.start()
        thread.join(max(deadline - time.monotonic(), 0) + 1)  # Dask's timeout goes first
        if "result" not in done:
            raise InputError(f"cannot reach the Dask scheduler at {address}: "
                             f"{_unreachable(done.get('error'))}")
        return done["result"]

    identity = within(lambda: _identity(address, CONNECT_TIMEOUT))
    kind = identity.get("type") if isinstance(identity, dict) else None
    if kind != "Scheduler":
        what = f"it is a Dask {kind[:40]}," if isinstance(kind, str) else "it answers, but"
        raise InputError(f"cannot reach the Dask scheduler at {address}: {what} not a "
                         "scheduler")

    def client() -> Any:
        from distributed import Client

        return Client(address, timeout=max(deadline - time.monotonic(), 0.1),
                      set_as_default=False)

    with within(client) as connected:
        _first_worker(connected, address, deadline)
        yield connected


def _identity(address: str, timeout: float) -> Any:
    """What the Dask server at ``address`` says it is (its ``identity``), over a connection of
    its own in an event loop of its own; raises what the peer made Dask raise."""
    import asyncio

    from distributed.comm import connect

    async def ask() -> Any:
        comm = await connect(address, timeout=timeout)  # TCP, then Dask's handshake
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    return asyncio.run(asyncio.wait_for(ask(), timeout))


def _unreachable(exc: BaseException | None) -> str:
    """Why the connection to a --scheduler failed, in a few words."""
    if exc is None or isinstance(exc, TimeoutError) or "timed out" in str(exc).lower():
        return f"no answer within {CONNECT_TIMEOUT:g} s"  # Dask retries a refused one till then
    if not isinstance(exc, Exception):
        raise exc  # SystemExit or KeyboardInterrupt in the thread: not the peer's doing
    if type(exc).__name__ == "CommClosedError":  # Dask's; its text names a local port
        return "it closed the connection during Dask's handshake"
    if isinstance(exc, (OSError, ValueError, TypeError)) and str(exc):
        return str(exc).splitlines()[0]  # a connection closed, an address Dask cannot parse
    # not Dask: its bytes, read as Dask's frames, claim exabytes (MemoryError), do not
    # unpack (struct.error) or decode to something else
    return "it does not speak Dask's protocol (not a Dask scheduler?)"


def _first_worker(client: Any, address: str, deadline: float) -> None:
    """Wait until ``deadline`` for the cluster to have a worker: without one no task ever
    runs, and the job would wait in silence."""
    import time

    try:
        client.wait_for_workers(1, timeout=max(deadline - time.monotonic(), 0.05))
    except TimeoutError:
        raise InputError(f"the Dask scheduler at {address} has no workers: none joined within "
                         f"{CONNECT_TIMEOUT:g} s") from None


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
