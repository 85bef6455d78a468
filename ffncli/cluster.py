"""Many input files as one job: shards in a stable order, mapped in this process or on a Dask
cluster, their statistics merged exactly as one pass over all of them would count.

The work is a map over shards. A *task* takes one :class:`Shard` (a file, with the index of
its first token in the whole input) and gives back either its mergeable counters
(``relu-stats``: a :class:`Partial`, one ``UnitStats`` per expert) or a file it wrote
(``run``: ``DIR/<shard stem>.npy``). What a shard needs from the shards before it is known up
front: its token offset (from the .npy headers, read once here), hence which of its tokens
are listed per token and whether it keeps masks; a mixture of experts with a capacity also
needs the places each expert has left, found by a first, cheap pass that only routes.

Results do not depend on the number of workers or on the order tasks finish in:

- integer counters add exactly, in any order;
- the float sums of ``UnitStats`` (the Jaccard sums of consecutive tokens) change in their
  last digits with the order of the additions. So the partial results are merged in a tree
  whose shape is fixed by the shard indices alone (:class:`TreeMerge`: node (l, i) merges the
  nodes (l-1, 2i) and (l-1, 2i+1)), and the single process merges with the same tree. Every
  addition then happens in one order whoever computes it, and the result is the same to the
  last digit. (Exact sums would need a change in how ``UnitStats`` adds, in sparsity.py; the
  fixed tree needs none, and costs nothing: a merge is a few vector additions.)
- each shard is cut into chunks of the same size everywhere: the engine's tokens per chunk
  are fixed once (:class:`Job`), not left to each machine's free memory.

With ``--text`` or ``--ids`` a shard is a :class:`TextShard` (a file's sequences, or a run
of a long file's) and a task runs it through the whole model: ``relu-stats`` gets back every
selected layer's counters (calibrated first, once, on the corpus's first tokens), ``capture``
a folder of layer files per shard.

Dask is imported only here, and only when ``--workers`` or ``--scheduler`` is given; NumPy is
imported inside the functions, so that importing this module (the CLI does, for its options)
costs nothing.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import math
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ffncli.errors import FfnError, InputError, OutputError
from ffncli.model import ModelChoice, TextChoice, TokenChoice
from ffncli.spec import Overrides

if TYPE_CHECKING:
    import numpy as np

    from ffncli.engine import Engine
    from ffncli.sparsity import Rule, SparsityResult, UnitStats

CONNECT_TIMEOUT = 10.0  # seconds to reach a --scheduler before giving up
STOP_WAIT = 10.0  # seconds the tasks still running after Ctrl-C get to remove their files
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "ffncli-run-shards/1"
_GLOB_MAGIC = ("*", "?", "[")


@dataclass(frozen=True)
class ScaleChoice:
    """Where the work runs: this process (the default), ``--workers N`` local processes, or
    the Dask cluster at ``--scheduler ADDRESS``; ``--skip-bad`` goes on past a bad shard."""

    workers: int | None = None
    scheduler: str | None = None
    skip_bad: bool = False

    def wanted(self, tokens: TokenChoice) -> bool:
        """Whether the command takes the sharded path: a glob or a folder for --input, or a
        cluster asked for."""
        return self.workers is not None or self.scheduler is not None or self.skip_bad or (
            tokens.input is not None and is_many(tokens.input))

    def wanted_text(self, text: TextChoice) -> bool:
        """Whether ``--text``/``--ids`` take the sharded path: a glob or a folder, or a cluster
        asked for. (One file alone is the sweep of ffncli.capture: one walk.)"""
        given = text.text if text.text is not None else text.ids
        return self.workers is not None or self.scheduler is not None or self.skip_bad or (
            given is not None and is_many(given))


def is_many(path: Path) -> bool:
    """A folder, or a glob (a name with * ? [ that is not itself a file)."""
    if os.path.isdir(path):
        return True
    return any(c in str(path) for c in _GLOB_MAGIC) and not os.path.lexists(path)


# ---------------------------------------------------------------------------------------------
# Shards: the files of --input, in a stable order, with their token offsets.


@dataclass(frozen=True)
class Shard:
    """One input file of the job. ``offset``: the index of its first token in the whole
    input (the shards before it, in order). Later kinds of shard (``--text``, ``--ids``) carry
    the same index and offset."""

    index: int
    path: Path
    shape: tuple[int, ...]  # as stored: (d,), (n, d) or (b, s, d)
    offset: int
    size: int
    mtime_ns: int

    @property
    def tokens(self) -> int:
        return math.prod(self.shape[:-1]) if len(self.shape) > 1 else 1

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class Skipped:
    """A shard left out with --skip-bad, and why."""

    path: str
    error: str


def shard_paths(pattern: Path, option: str = "--input",
                suffixes: tuple[str, ...] = (".npy",)) -> list[Path]:
    """The files of --input (or --text, --ids): a glob's matches or a folder's files of these
    suffixes, sorted by name (so number shards with leading zeros: ``part-0002`` sorts before
    ``part-0010``); one file is one shard."""
    text = str(pattern)
    if is_many(pattern) and not os.path.isdir(pattern):
        paths = [Path(p) for p in glob.glob(text) if not os.path.isdir(p)]
        if not paths:
            raise InputError(f"option {option}: no file matches {text}")
    elif os.path.isdir(pattern):
        paths = [p for p in pattern.iterdir()
                 if p.suffix.lower() in suffixes and not p.is_dir()]
        if not paths:
            raise InputError(f"option {option}: {text} is a folder without "
                             f"{' or '.join(suffixes)} files")
    else:
        paths = [pattern]
    return sorted(paths, key=str)


def read_shards(paths: Sequence[Path], d_model: int,
                skip_bad: bool) -> tuple[list[Shard], list[Skipped]]:
    """Each shard's header, read and checked once, and the offsets they give."""
    shards: list[Shard] = []
    skipped: list[Skipped] = []
    offset = 0
    for path in paths:
        try:
            shard = _read_shard(path, d_model, len(shards), offset)
        except FfnError as exc:
            if not skip_bad:
                raise
            skipped.append(Skipped(str(path), _named(path, exc)))
            continue
        shards.append(shard)
        offset += shard.tokens
    if not shards:
        raise InputError(f"option --input: every shard is bad ({len(skipped)} skipped)")
    return shards, skipped


def _read_shard(path: Path, d_model: int, index: int, offset: int) -> Shard:
    from ffncli.files import open_file
    from ffncli.tokens import _check_dtype, _check_shape, read_npy_header

    if path.suffix.lower() != ".npy":
        raise InputError(f"{path}: expected .npy shards (tokens x d_model)")
    with open_file(path, "input file", InputError) as f:
        info = os.fstat(f.fileno())
        header = read_npy_header(f, info.st_size, str(path), InputError)
        _check_dtype(path, header.dtype)
        _check_shape(path, header.shape, d_model)
        header.check_size(info.st_size, str(path), InputError)
    return Shard(index, path, header.shape, offset, info.st_size, info.st_mtime_ns)


def _named(path: Path | str, exc: BaseException) -> str:
    """The error's message, starting with the shard's path."""
    message = str(exc)
    return message if message.startswith(str(path)) else f"{path}: {message}"


# ---------------------------------------------------------------------------------------------
# The model on the workers: built from the options, once per worker process.


@dataclass(frozen=True)
class Job:
    """What a task needs to build the FFN: the options (small, shipped with each task), not
    the weights. Each worker reads the weights from the path (shared storage) or draws random
    ones from the seed, once, and keeps them (:func:`engine_for`)."""

    model: ModelChoice
    overrides: Overrides
    rows: int = 0  # the engine's tokens per chunk, fixed for every process (0: not yet)


@dataclass(frozen=True)
class ModelInfo:
    d_model: int
    d_ff: int
    experts: int
    top_k: int
    activation: str
    dtype: str
    rows: int
    source: str
    capacity: int | None  # places per expert over the whole input (a capped mixture)


_cache: dict[tuple[Any, ...], Any] = {}
_cache_lock = threading.Lock()


def _weights_stamp(choice: ModelChoice) -> tuple[Any, ...]:
    from ffncli.model import weights_of

    path = weights_of(choice.weights, choice.hub_model)
    if path is None:
        return ()
    try:
        info = os.stat(path)
    except OSError:
        return (str(path),)  # the loader says what is wrong with it
    return (str(path), info.st_size, info.st_mtime_ns)


def _model(job: Job) -> Any:
    """The job's Model, built once per process and kept (keyed by the options and the
    weights' size and mtime: a changed file is read again)."""
    from ffncli.model import load_model

    key = (job.model, job.overrides, _weights_stamp(job.model))
    with _cache_lock:
        model = _cache.get(key)
        if model is None:
            _cache.clear()  # one model at a time per worker
            model = _cache[key] = load_model(job.model, job.overrides)
    return model


def engine_for(job: Job) -> Engine:
    """A fresh engine (its own buffers: tasks may run on several threads) over the cached
    weights, cutting chunks of ``job.rows`` tokens."""
    from ffncli.engine import Engine

    e = _model(job).engine
    return Engine(e.weights, e.act, job.rows or e.chunk_tokens)


def describe(job: Job, total: int) -> ModelInfo:
    """The model as the worker built it (and the chunk size every process will use)."""
    from ffncli.ffn import MoEWeights, capacity

    model = _model(job)
    e = model.engine
    p = e.weights
    moe = isinstance(p, MoEWeights)
    return ModelInfo(e.d_model, e.d_ff, len(p.experts) if moe else 1, p.top_k if moe else 1,
                     e.act.name, e.dtype.name, job.rows or e.chunk_tokens, model.source,
                     capacity(p, total) if moe else None)


def _open(shard: Shard, d_model: int) -> Any:
    from ffncli.tokens import open_input

    tokens = open_input(shard.path, d_model)
    if tuple(tokens.shape) != shard.shape:
        raise InputError(f"{shard.path}: changed while the job ran: shape {tokens.shape}, "
                         f"was {shard.shape}")
    return tokens


def _chunks(ffn: Engine, shard: Shard, allow_nonfinite: bool) -> Iterator[np.ndarray]:
    for _, x in _open(shard, ffn.d_model).chunks(ffn.chunk_tokens, ffn.dtype,
                                                 finite=not allow_nonfinite):
        yield x


def shard_demand(job: Job, shard: Shard, allow_nonfinite: bool) -> list[int]:
    """Places each expert's router gives it in this shard (a capped mixture's first pass:
    with them, every shard knows the places left to it by the shards before)."""
    import numpy as np

    from ffncli.ffn import MoEWeights, route

    ffn = engine_for(job)
    p = ffn.weights
    assert isinstance(p, MoEWeights)
    demand = np.zeros(len(p.experts), dtype=np.int64)
    for x in _chunks(ffn, shard, allow_nonfinite):
        order, _ = route(np.ascontiguousarray(x, dtype=ffn.dtype), p)
        demand += np.bincount(order.ravel(), minlength=len(p.experts))
    return demand.tolist()


def rooms(capacity: int, demands: Sequence[Sequence[int] | None]) -> list[list[int]]:
    """The places each expert has left when each shard starts: an expert takes tokens in
    order until full (``ffn.dispatch``), so after a shard it has max(room - demand, 0).
    A skipped shard (None) takes none."""
    room = [capacity] * len(next(d for d in demands if d is not None))
    out = []
    for demand in demands:
        out.append(list(room))
        if demand is not None:
            room = [max(r - d, 0) for r, d in zip(room, demand, strict=True)]
    return out


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


@contextlib.contextmanager
def connect(scale: ScaleChoice) -> Iterator[Pool]:
    """The pool the options ask for: this process, a LocalCluster of ``--workers`` processes
    (one thread each: the engine's BLAS and NumPy are single-threaded in a Dask worker), or the
    cluster at ``--scheduler``. Closed (a local cluster shut down) on the way out."""
    from ffncli.validate import whole

    if scale.workers is not None and scale.scheduler is not None:
        raise InputError("give --workers or --scheduler, not both")
    if scale.workers is None and scale.scheduler is None:
        yield InProcess()
        return
    option = "--workers" if scale.workers is not None else "--scheduler"
    if scale.workers is not None:
        whole("option --workers", scale.workers, 1)
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
                    silence_logs=logging.ERROR, dashboard_address=_dashboard_address()))
            client = stack.enter_context(distributed.Client(cluster))
        else:
            assert scale.scheduler is not None
            client = stack.enter_context(_client(scale.scheduler))
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


def _client(address: str) -> Any:
    from distributed import Client

    logging.getLogger("distributed").setLevel(logging.CRITICAL)  # our one line says it
    try:
        return Client(address, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "timed out" in reason.lower():  # Dask retries a refused connection until then
            reason = f"no answer within {CONNECT_TIMEOUT:g} s"
        raise InputError(f"cannot reach the Dask scheduler at {address}: {reason}") from None


# ---------------------------------------------------------------------------------------------
# Progress: one bar for the whole job.


class Progress:
    """What a job reports: ``start`` once the shards are read and the tasks go out,
    ``advance`` after each finished task. This one reports nothing (library calls, tests)."""

    def start(self, tasks: int, dashboard: str | None) -> None:
        pass

    def advance(self, tokens: int) -> None:
        pass


class Bar(Progress):
    """One Rich bar on stderr for the whole job (tasks done / total, tokens per second) when
    stderr is a terminal; the dashboard's address, when the cluster has one, on stderr too
    (never on stdout, which --json keeps for its one document)."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._bar: Any = None
        self._start = time.perf_counter()
        self._tokens = 0

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def start(self, tasks: int, dashboard: str | None) -> None:
        if dashboard:
            print(f"Dask dashboard: {dashboard}", file=sys.stderr)
        if not sys.stderr.isatty():
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
        from rich.progress import Progress as RichProgress

        from ffncli.render import console

        self._bar = self._stack.enter_context(RichProgress(
            TextColumn("shards"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), console=console(stderr=True), transient=True))
        self._task = self._bar.add_task("shards", total=tasks, rate="")
        self._start = time.perf_counter()

    def advance(self, tokens: int) -> None:
        if self._bar is None:
            return
        self._tokens += tokens
        rate = self._tokens / max(time.perf_counter() - self._start, 1e-9)
        self._bar.update(self._task, advance=1, rate=f"{rate:,.0f} tokens/s")


# ---------------------------------------------------------------------------------------------
# relu-stats over shards.


@dataclass
class Partial:
    """The mergeable counters of consecutive shards: what a relu-stats task returns."""

    tokens: int
    stats: list[UnitStats]  # one per expert
    per_token: np.ndarray  # inactive units of the tokens among the first MAX_TOKENS_LISTED
    masks: np.ndarray | None  # small inputs: every token's mask, for the pairwise table


def merge_partials(a: Partial | None, b: Partial | None) -> Partial | None:
    """a's tokens followed by b's (None: a shard skipped with --skip-bad)."""
    import numpy as np

    from ffncli.sparsity import MAX_TOKENS_LISTED, merge

    if a is None or b is None:
        return b if a is None else a
    masks = a.masks if b.masks is None else b.masks if a.masks is None else \
        np.vstack([a.masks, b.masks])
    stats = [merge(x, y) for x, y in zip(a.stats, b.stats, strict=True)]
    return Partial(a.tokens + b.tokens, stats,
                   np.concatenate([a.per_token, b.per_token])[:MAX_TOKENS_LISTED], masks)


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


@dataclass(frozen=True)
class StatsTask:
    job: Job
    rule: Rule
    keep_masks: bool
    allow_nonfinite: bool


def shard_stats(task: StatsTask, shard: Shard, room: list[int] | None) -> Partial:
    """One shard's counters, as a single pass over the whole input counts them there."""
    import numpy as np

    from ffncli.sparsity import MAX_TOKENS_LISTED, SparsityAccumulator

    try:
        ffn = engine_for(task.job)
        ffn.capacity_left = list(room) if room is not None else None
        acc = SparsityAccumulator(ffn, task.rule, keep_masks=task.keep_masks)
        acc.listed = min(shard.offset, MAX_TOKENS_LISTED)  # the tokens listed before it
        for x in _chunks(ffn, shard, task.allow_nonfinite):
            acc.update(x)
    except FfnError as exc:
        raise type(exc)(_named(shard.path, exc)) from None
    per_token = np.concatenate(acc.per_token) if acc.per_token else np.zeros(0, np.int64)
    masks = np.vstack(acc.masks) if acc.masks else None
    return Partial(acc.tokens, acc.stats, per_token, masks)


def calibrate(job: Job, shards: Sequence[Shard], target: float, allow_nonfinite: bool,
              skip_bad: bool = False) -> float:
    """The CATS threshold from the first tokens of the whole input, across shards (with
    ``skip_bad``, of the shards that can be read)."""
    import numpy as np

    from ffncli.sparsity import CALIBRATION_TOKENS, calibrate_threshold

    ffn = engine_for(job)
    need = min(CALIBRATION_TOKENS, sum(s.tokens for s in shards))
    parts: list[np.ndarray] = []
    for shard in shards:
        if need <= 0:
            break
        try:
            _, x = next(_open(shard, ffn.d_model).chunks(min(need, shard.tokens), ffn.dtype,
                                                         finite=not allow_nonfinite))
        except FfnError as exc:
            if skip_bad:
                continue  # its own task fails the same way and lists it
            raise type(exc)(_named(shard.path, exc)) from None
        parts.append(x.copy())
        need -= x.shape[0]
    return calibrate_threshold(ffn, np.concatenate(parts), target)


@dataclass(frozen=True)
class ShardedStats:
    result: SparsityResult
    shards: int
    skipped: list[Skipped]
    merges: int
    dashboard: str | None


def relu_stats_shards(model: ModelChoice, overrides: Overrides, pattern: Path, pool: Pool, *,
                      threshold: float | None = None, target_sparsity: float | None = None,
                      allow_nonfinite: bool = False, skip_bad: bool = False,
                      progress: Progress | None = None) -> ShardedStats:
    """``relu-stats`` over the shards of ``pattern``: a task per shard, merged in the fixed
    tree; equal, to the last digit, in this process and on any cluster.

    With ``skip_bad``, a shard whose header is refused is left out before the offsets are
    set: the result is exactly that of the other shards. One that fails while it is read (a
    NaN, a file changed since) is found only then: its tokens are missing from every count,
    and the per-token list (first 10,000 tokens) skips them."""
    from ffncli.sparsity import (
        SMALL_OVERLAP,
        Rule,
        SparsityResult,
        check_rule,
        describe_rule,
        pairwise_overlap,
    )

    check_rule(threshold, target_sparsity)
    paths = shard_paths(pattern)
    job = Job(model, overrides)
    first = pool.call(describe, job, 0)
    job = Job(model, overrides, first.rows)
    shards, skipped = read_shards(paths, first.d_model, skip_bad)
    total = sum(s.tokens for s in shards)
    info = pool.call(describe, job, total)
    if target_sparsity is not None:
        threshold = pool.call(calibrate, job, shards, target_sparsity, allow_nonfinite,
                              skip_bad)
    rule = Rule(threshold, describe_rule(info.activation, threshold, target_sparsity))
    task = StatsTask(job, rule, total <= SMALL_OVERLAP, allow_nonfinite)
    shard_rooms = _rooms(pool, job, info, shards, skip_bad, allow_nonfinite)
    tree = TreeMerge(len(shards), merge_partials)
    calls = [(task, s, shard_rooms[s.index]) for s in shards]
    progress = progress or Progress()
    progress.start(len(calls), pool.dashboard)
    for i, out in pool.map(shard_stats, calls):
        if isinstance(out, FfnError):
            _failed(shards[i].path, out, skip_bad, skipped)
            out = None
        tree.add(i, out)
        progress.advance(shards[i].tokens)
    part: Partial | None = tree.root
    if part is None:
        raise InputError(f"option --input: every shard is bad ({len(skipped)} skipped)")
    units = info.experts * info.d_ff
    pairs = pairwise_overlap(part.masks, units) if part.masks is not None else None
    result = SparsityResult(info.d_ff, info.d_model, info.experts, info.top_k, info.activation,
                            rule, part.tokens, part.per_token.tolist(), part.stats, part.masks,
                            pairs)
    return ShardedStats(result, len(shards), sorted(skipped, key=lambda s: s.path),
                        tree.merges, pool.dashboard)


def _rooms(pool: Pool, job: Job, info: ModelInfo, shards: list[Shard], skip_bad: bool,
           allow_nonfinite: bool) -> list[list[int] | None]:
    """Each shard's places left per expert (a capped mixture), else None for every shard."""
    if info.capacity is None:
        return [None] * len(shards)
    demands: list[list[int] | None] = [None] * len(shards)
    for i, out in pool.map(shard_demand, [(job, s, allow_nonfinite) for s in shards]):
        if isinstance(out, FfnError):
            if not skip_bad:
                raise type(out)(_named(shards[i].path, out))
            continue  # its stats task fails the same way and lists it
        demands[i] = out
    if all(d is None for d in demands):
        return [None] * len(shards)
    return list(rooms(info.capacity, demands))


# ---------------------------------------------------------------------------------------------
# run over shards: DIR/<shard stem>.npy each, a manifest, resumable.


@dataclass(frozen=True)
class RunTask:
    job: Job
    residual: bool
    allow_nonfinite: bool
    stop: str  # a file the client creates to stop the tasks still running (Ctrl-C, an error)


class Stopped(Exception):
    """A run task saw the job's stop file: its partial output is removed on the way out."""


def shard_run(task: RunTask, shard: Shard, dest: Path, room: list[int] | None) -> int:
    """The FFN of one shard's tokens into ``dest``, written atomically (a temporary file
    renamed into place: an interrupted task leaves no partial output under that name)."""
    import numpy as np

    from ffncli.tokens import AtomicNpyWriter

    try:
        ffn = engine_for(task.job)
        ffn.capacity_left = list(room) if room is not None else None
        out_shape = shard.shape[:-1] + (ffn.d_model,)
        buffers = [np.empty((ffn.chunk_tokens, ffn.d_model), dtype=ffn.dtype)
                   for _ in range(2)]  # one is written while the other is filled
        with AtomicNpyWriter(dest, out_shape, ffn.dtype, True, (shard.path,)) as writer:
            for i, x in enumerate(_chunks(ffn, shard, task.allow_nonfinite)):
                if os.path.exists(task.stop):  # Dask cannot stop a running task: it stops
                    raise Stopped(shard.name)  # itself, and the writer removes its file
                writer.wait(buffers[i % 2])
                y = buffers[i % 2][: x.shape[0]]
                ffn.chunk(x, y)
                if task.residual:
                    np.add(y, x, out=y)
                writer.write(y)
    except FfnError as exc:
        raise type(exc)(_named(shard.path, exc)) from None
    return shard.tokens


@dataclass(frozen=True)
class ShardedRun:
    out: str
    shards: int
    written: list[str]
    already: list[str]  # complete from an earlier run: skipped
    skipped: list[Skipped]
    tokens: int
    source: str
    dashboard: str | None


def run_shards(model: ModelChoice, overrides: Overrides, pattern: Path, out: Path, pool: Pool,
               *, residual: bool = False, force: bool = False, allow_nonfinite: bool = False,
               skip_bad: bool = False, progress: Progress | None = None) -> ShardedRun:
    """``run`` over the shards of ``pattern``: ``out/<stem>.npy`` for each, and
    ``out/manifest.json`` listing the complete ones; a rerun skips those (unless ``force``)."""
    paths = shard_paths(pattern)
    job = Job(model, overrides)
    first = pool.call(describe, job, 0)
    job = Job(model, overrides, first.rows)
    shards, skipped = read_shards(paths, first.d_model, skip_bad)
    names = [s.path.stem for s in shards]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})[0]
        raise InputError(f"option --input: two shards are named {twice}.npy; their outputs "
                         "would collide in --out")
    info = pool.call(describe, job, sum(s.tokens for s in shards))
    _out_folder(out)
    recipe = {"model": _jsonable(model), "overrides": _jsonable(overrides),
              "residual": residual, "source": info.source}
    done = {} if force else _manifest_entries(out, recipe)
    entries = {s.name: e for s in shards if (e := done.get(s.name)) is not None
               and e == _entry(s) and (out / f"{s.path.stem}.npy").is_file()}
    todo = [s for s in shards if s.name not in entries]
    shard_rooms = _rooms(pool, job, info, shards, skip_bad, allow_nonfinite)
    stop = out / f".stop-{secrets.token_hex(4)}"
    task = RunTask(job, residual, allow_nonfinite, str(stop))
    _write_manifest(out, recipe, entries)
    calls = [(task, s, out / f"{s.path.stem}.npy", shard_rooms[s.index]) for s in todo]

    def finished(shard: Shard) -> None:
        entries[shard.name] = _entry(shard)
        _write_manifest(out, recipe, entries)

    written = _write_shards(pool, shard_run, calls, todo, stop, skip_bad, skipped,
                            progress or Progress(), finished,
                            lambda: _temporaries(out, todo),
                            lambda: _remove_temporaries(out, shards))
    return ShardedRun(str(out), len(shards), sorted(written),
                      sorted(s.name for s in shards if s not in todo),
                      sorted(skipped, key=lambda s: s.path), sum(s.tokens for s in shards),
                      info.source, pool.dashboard)


def _failed(path: Path, error: FfnError, skip_bad: bool, skipped: list[Skipped]) -> None:
    """A shard's error, named by its shard: raised, or with ``skip_bad`` listed and passed."""
    named = type(error)(_named(path, error))
    if not skip_bad:
        raise named
    skipped.append(Skipped(str(path), str(named)))


def _write_shards(pool: Pool, fn: Callable[..., Any], calls: list[Any], todo: Sequence[Any],
                  stop: Path, skip_bad: bool, skipped: list[Skipped], progress: Progress,
                  finished: Callable[[Any], None], leftovers: Callable[[], list[str]],
                  clean: Callable[[], None]) -> list[str]:
    """Map ``fn`` over the shards that write files (``calls[i]`` is ``todo[i]``'s task) and
    return the names written. ``finished(shard)`` records each complete shard (the manifest);
    a bad shard stops the job, or is skipped with ``skip_bad``. On any way out, running tasks
    are told to stop (the ``stop`` file, before the futures are cancelled), their temporary
    files are waited for, and ``clean`` removes them (and a killed worker's)."""
    written: list[str] = []
    progress.start(len(calls), pool.dashboard)
    try:
        with contextlib.closing(pool.map(fn, calls)) as results:  # closed: cancelled
            try:
                for i, result in results:
                    shard = todo[i]
                    if isinstance(result, FfnError):
                        _failed(shard.path, result, skip_bad, skipped)
                        continue
                    written.append(shard.name)
                    finished(shard)
                    progress.advance(shard.tokens)
            except BaseException:
                with contextlib.suppress(OSError):
                    stop.touch()  # before the futures are cancelled: running tasks stop
                raise
    finally:
        if stop.exists():
            _wait_for(leftovers)
        clean()
        with contextlib.suppress(OSError):
            stop.unlink()
    return written


def _out_folder(out: Path) -> None:
    if out.suffix.lower() == ".npy":
        raise OutputError(f"option --out: run over shards (a glob, a folder, --workers or "
                          f"--scheduler) writes one .npy per shard into a folder, got {out}")
    _make_folder(out)


def _make_folder(out: Path) -> None:
    if os.path.isdir(out):
        return
    if os.path.exists(out):
        raise OutputError(f"option --out: {out} exists and is not a folder")
    try:
        os.mkdir(out)
    except OSError as exc:
        raise OutputError(f"option --out: cannot create the folder {out}: "
                          f"{exc.strerror or exc}") from None


def _entry(shard: Shard) -> dict[str, Any]:
    return {"name": shard.name, "input": str(shard.path), "tokens": shard.tokens,
            "size": shard.size, "mtime_ns": shard.mtime_ns}


def _jsonable(options: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()}


@dataclass(frozen=True)
class ManifestKind:
    """Whose manifest: its format, the command that writes it, the options its recipe holds."""

    format: str
    command: str
    options: str


RUN_MANIFEST = ManifestKind(MANIFEST_FORMAT, "run", "model, overrides, --residual")
CAPTURE_MANIFEST = ManifestKind("ffncli-capture-shards/1", "capture",
                                "model, --layer, --dtype, --text or --ids")


def _manifest_entries(out: Path, recipe: dict[str, Any], kind: ManifestKind = RUN_MANIFEST
                      ) -> dict[str, dict[str, Any]]:
    """The complete shards of an earlier run into ``out`` (none if it has no manifest). One
    made with other options is refused: its outputs are not this run's."""
    from ffncli.files import open_file

    path = out / MANIFEST
    if not path.exists():
        if any(out.iterdir()):
            raise OutputError(f"option --out: {out} is not empty and has no {MANIFEST}; "
                              "choose an empty folder or pass --force")
        return {}
    with open_file(path, "manifest", OutputError, 64 * 2**20) as f:
        try:
            doc = json.loads(f.read().decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise OutputError(f"{path}: not a manifest of ffncli (not JSON); pass --force to "
                              "start again") from None
    if not isinstance(doc, dict) or doc.get("format") != kind.format or \
            not isinstance(doc.get("shards"), list):
        raise OutputError(f"{path}: not a manifest of ffncli {kind.command} (format "
                          f"{kind.format}); pass --force to start again")
    if doc.get("job") != recipe:
        raise OutputError(f"{path}: written by a {kind.command} with other options "
                          f"({kind.options}); pass --force to start again, or choose another "
                          "--out")
    return {e["name"]: e for e in doc["shards"] if isinstance(e, dict) and "name" in e}


def _write_manifest(out: Path, recipe: dict[str, Any], entries: dict[str, dict[str, Any]],
                    kind: ManifestKind = RUN_MANIFEST) -> None:
    from ffncli.files import write_text_atomically

    doc = {"format": kind.format, "job": recipe,
           "shards": [entries[k] for k in sorted(entries)]}
    write_text_atomically(out / MANIFEST, json.dumps(doc, indent=1) + "\n", "--out")


def _temporaries(out: Path, shards: Sequence[Shard]) -> list[str]:
    """AtomicNpyWriter's temporary files (``.<name>.<hex>.tmp``) of these shards."""
    return [tmp for shard in shards
            for tmp in glob.glob(glob.escape(str(out / f".{shard.path.stem}.npy")) + ".*.tmp")]




def _remove_temporaries(out: Path, shards: Sequence[Shard]) -> None:
    for tmp in _temporaries(out, shards):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


# ---------------------------------------------------------------------------------------------
# --text and --ids over shards: the whole model on each shard (relu-stats, capture).
#
# A shard is a text (or ids) file, or for a long one a run of its sequences. Each task walks
# its shard's sequences through the model (ffncli.forward.walk, layer-major) in batches of
# BATCH_TOKENS, as the one-file sweep does; a long file is cut only between those batches,
# so its shards compute exactly the batches (hence the bits) of one walk over the file.


BATCH_TOKENS = 4096  # the walk's batch (capture's and the sweep's default)
SHARD_TOKENS = 65_536  # a longer file is cut into runs of whole batches of about this many


@dataclass(frozen=True)
class TextShard:
    """A run of one file's sequences: the whole file, or (a long one) part ``part`` of it.
    ``offset``: the index of its first token in the whole corpus."""

    index: int
    name: str  # its folder under capture's --out: the file's stem, or stem-partNNNN
    path: Path
    part: int | None
    ids: tuple[np.ndarray, ...]
    lines: tuple[int, ...]
    offset: int
    sha256: str

    @property
    def tokens(self) -> int:
        return sum(len(s) for s in self.ids)

    def sequences(self) -> Any:
        from ffncli.text import Sequences

        return Sequences(self.ids, self.lines, str(self.path), self.sha256)


@dataclass(frozen=True)
class TextJob:
    """What a task needs to open the whole model (once per worker: :func:`forward_for`)."""

    model: ModelChoice
    overrides: Overrides


LAYER_CACHE_BYTES = 1 << 30  # built layers a worker keeps between tasks, per model and thread

_forwards: dict[tuple[Any, ...], Any] = {}


def forward_for(job: TextJob) -> Any:
    """The job's Transformer, opened once per worker process and thread (its scratch buffers
    are the thread's) and kept for every later task and job; a changed weights file (size,
    mtime) is opened again. Its built layers are kept too (:class:`KeptLayers`)."""
    from ffncli.model import open_forward

    model_key = (job.model, job.overrides, _weights_stamp(job.model))
    key = (*model_key, threading.get_ident())
    with _cache_lock:
        model = _forwards.get(key)
        if model is None:
            for old in [k for k in _forwards if k[:-1] != model_key]:
                del _forwards[old]  # one model at a time per worker
            model = _forwards[key] = KeptLayers(open_forward(job.model, job.overrides))
    return model


class KeptLayers:
    """A Transformer whose built layers (``layer(i)``: weights read, FFN engine built) are
    kept for the next task, while they fit in LAYER_CACHE_BYTES; the rest are read again by
    each task, as ``walk`` reads them. For MiniLM each layer takes 6 to 13 ms to read and
    build, about 10% of a task of 2,000 tokens: worth keeping (all six take 43 MB)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.kept: dict[int, Any] = {}
        self.kept_bytes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def layer(self, i: int) -> Any:
        block = self.kept.get(i)
        if block is None:
            block = self.model.layer(i)
            size = _nbytes(block)
            if self.kept_bytes + size <= LAYER_CACHE_BYTES:
                self.kept[i] = block
                self.kept_bytes += size
        return block


def _nbytes(obj: Any, seen: set[int] | None = None) -> int:
    """The bytes of the NumPy arrays an object holds (its attributes, lists, dicts)."""
    import numpy as np

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return obj.nbytes if obj.base is None else 0 if id(obj.base) in seen else \
            _nbytes(obj.base, seen)
    if isinstance(obj, dict):
        return sum(_nbytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v, seen) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return sum(_nbytes(v, seen) for v in vars(obj).values())
    return 0


def read_text_shards(choice: TextChoice, model: Any, skip_bad: bool
                     ) -> tuple[list[TextShard], list[Skipped]]:
    """The files of --text or --ids in name order, each read (tokenised) once here, cut into
    shards; the offsets they give. A file that cannot be read is an error naming it, or with
    ``skip_bad`` a skipped shard."""
    from ffncli.forward import _batches

    if choice.text is not None and choice.ids is not None:
        raise InputError("give --text or --ids, not both")
    option, pattern = ("--text", choice.text) if choice.text is not None else \
        ("--ids", choice.ids)
    assert pattern is not None
    suffixes = (".txt",) if option == "--text" else (".npy", ".txt")
    paths = shard_paths(pattern, option, suffixes)
    read = _ids_reader(model) if option == "--ids" else _text_reader(model)
    shards: list[TextShard] = []
    skipped: list[Skipped] = []
    offset = 0
    for path in paths:
        try:
            seqs = read(path)
        except FfnError as exc:
            if not skip_bad:
                raise type(exc)(_named(path, exc)) from None
            skipped.append(Skipped(str(path), _named(path, exc)))
            continue
        runs = _runs(_batches([len(s) for s in seqs.ids], BATCH_TOKENS), seqs.ids)
        for part, (a, b) in enumerate(runs):
            name = path.stem if len(runs) == 1 else f"{path.stem}-part{part:04d}"
            shard = TextShard(len(shards), name, path, part if len(runs) > 1 else None,
                              seqs.ids[a:b], seqs.lines[a:b], offset, seqs.sha256)
            shards.append(shard)
            offset += shard.tokens
    if not shards:
        raise InputError(f"option {option}: every shard is bad ({len(skipped)} skipped)")
    return shards, skipped


def _ids_reader(model: Any) -> Callable[[Path], Any]:
    from ffncli.text import read_ids

    return lambda path: read_ids(path, model.vocab, model.max_positions)


def _text_reader(model: Any) -> Callable[[Path], Any]:
    """Each text file tokenised by the model's tokenizer, loaded once for all the files."""
    from ffncli.text import load_tokenizer, read_text

    tokenizer = load_tokenizer(model.weights)

    def read(path: Path) -> Any:
        sequences = read_text(path, tokenizer, model.max_positions)
        top = max(int(ids.max()) for ids in sequences.ids if ids.size)
        if top >= model.vocab:  # as ffncli.model.load_sequences says it
            raise InputError(f"{tokenizer.source}: gives token id {top}, but the model's "
                             f"vocabulary has {model.vocab} rows; is it the model's "
                             "tokenizer?")
        return sequences

    return read


def _runs(batches: Sequence[tuple[int, int]], ids: Sequence[Any]) -> list[tuple[int, int]]:
    """Consecutive whole batches grouped into runs of at most SHARD_TOKENS tokens (a longer
    batch is a run of its own): (first, end) sequence indices."""
    runs: list[tuple[int, int]] = []
    first, tokens = 0, 0
    for a, b in batches:
        n = sum(len(s) for s in ids[a:b])
        if tokens and tokens + n > SHARD_TOKENS:
            runs.append((first, a))
            first, tokens = a, 0
        tokens += n
    if tokens:
        runs.append((first, batches[-1][1]))
    return runs


def calibrate_text(job: TextJob, portions: Sequence[Sequence[np.ndarray]],
                   layers: Sequence[int], threshold: float | None, target: float | None
                   ) -> list[tuple[float, float | None]]:
    """Each layer's (CATS threshold at 50%, rule threshold) from the FFN inputs of the first
    CALIBRATION_TOKENS tokens of the whole corpus: ``portions`` are the first sequences of the
    first shards, each walked alone in the batches its shard's task walks them in."""
    import numpy as np

    from ffncli.capture import LayerSweep
    from ffncli.forward import walk
    from ffncli.sparsity import CALIBRATION_TOKENS

    model = forward_for(job)
    parts: dict[int, list[np.ndarray]] = {i: [] for i in layers}
    for sequences in portions:
        walk(model, sequences, layers, lambda i, block, x: parts[i].append(x.copy()),
             batch_tokens=BATCH_TOKENS)
    out = []
    for i in layers:
        sample = np.concatenate(parts.pop(i))[:CALIBRATION_TOKENS]
        out.append(LayerSweep(model.layer(i), len(sample), threshold, target).calibrate(sample))
    return out


def _calibration_portions(shards: Sequence[TextShard]) -> list[tuple[np.ndarray, ...]]:
    """The first sequences of the first shards, whole batches of each, until they hold
    CALIBRATION_TOKENS tokens (or the corpus ends)."""
    from ffncli.forward import _batches
    from ffncli.sparsity import CALIBRATION_TOKENS

    need = CALIBRATION_TOKENS
    portions = []
    for shard in shards:
        if need <= 0:
            break
        end = 0
        for a, b in _batches([len(s) for s in shard.ids], BATCH_TOKENS):
            if need <= 0:
                break
            need -= sum(len(s) for s in shard.ids[a:b])
            end = b
        portions.append(shard.ids[:end])
    return portions


@dataclass(frozen=True)
class SweepTask:
    job: TextJob
    layers: tuple[int, ...]
    threshold: float | None
    target: float | None
    calibration: tuple[tuple[float, float | None], ...]  # per layer
    total: int  # tokens of the whole corpus (the pairwise table of tiny inputs)


LayerMeta = tuple[int, int, int, int, str, Any]  # d_ff, d_model, experts, top_k, act, Rule


def shard_sweep(task: SweepTask, shard: TextShard) -> list[tuple[LayerMeta, Partial]]:
    """One shard through the whole model: each selected layer's counters, as one walk over
    the whole corpus counts them on this shard's tokens."""
    import numpy as np

    from ffncli.capture import LayerSweep
    from ffncli.forward import walk
    from ffncli.sparsity import MAX_TOKENS_LISTED

    sweeps: dict[int, LayerSweep] = {}
    done: dict[int, tuple[LayerMeta, Partial]] = {}

    def finish() -> None:  # the walk has left the layer: its FFN can go
        for i, s in list(sweeps.items()):
            acc = s.acc
            assert acc is not None
            per_token = np.concatenate(acc.per_token) if acc.per_token else \
                np.zeros(0, np.int64)
            masks = np.vstack(acc.masks) if acc.masks else None
            meta = (acc.ffn.d_ff, acc.ffn.d_model, acc.experts, acc.top_k, acc.ffn.act.name,
                    acc.rule)
            done[i] = (meta, Partial(acc.tokens, acc.stats, per_token, masks))
            del sweeps[i]

    def visit(layer: int, block: Any, x: np.ndarray) -> None:
        if layer not in sweeps:
            finish()
            at = task.layers.index(layer)
            s = sweeps[layer] = LayerSweep(block, task.total, task.threshold, task.target,
                                           calibration=task.calibration[at])
            assert s.acc is not None
            s.acc.listed = min(shard.offset, MAX_TOKENS_LISTED)  # the tokens listed before
        sweeps[layer].update(x)

    try:
        walk(forward_for(task.job), shard.ids, task.layers, visit, batch_tokens=BATCH_TOKENS)
    except FfnError as exc:
        raise type(exc)(_named(shard.path, exc)) from None
    finish()
    return [done[i] for i in task.layers]


Layers = list[tuple[LayerMeta, Partial]]


def sweep_part(fn: Callable[..., Any], *args: Any) -> Any:
    """One task of a text sweep: a shard (:func:`shard_sweep`) or the calibration
    (:func:`calibrate_text`), mapped together when the counting does not wait for it."""
    return fn(*args)


def _merge_layers(a: Layers | None, b: Layers | None) -> Layers | None:
    """a's tokens followed by b's, layer by layer (None: a shard skipped with --skip-bad)."""
    if a is None or b is None:
        return b if a is None else a
    out = []
    for (meta, x), (_, y) in zip(a, b, strict=True):
        merged = merge_partials(x, y)
        assert merged is not None
        out.append((meta, merged))
    return out


@dataclass(frozen=True)
class ShardedSweep:
    result: Any  # ffncli.capture.SweepResult
    shards: int
    skipped: list[Skipped]
    dashboard: str | None


def sweep_shards(model: ModelChoice, overrides: Overrides, text: TextChoice, pool: Pool, *,
                 threshold: float | None = None, target_sparsity: float | None = None,
                 skip_bad: bool = False, progress: Progress | None = None) -> ShardedSweep:
    """``relu-stats --text/--ids`` over shards: a task per shard (the whole model, every
    selected layer), the per-layer counters merged in the fixed tree; equal, to the last
    digit, in this process and on any cluster. The CATS calibration is that of the corpus's
    first 4,096 tokens, computed once, first, and given to every task."""
    from ffncli.capture import LayerStats, SweepResult, parse_layers
    from ffncli.sparsity import SparsityResult, check_rule, pairwise_overlap

    check_rule(threshold, target_sparsity)
    job = TextJob(model, overrides)
    forward = forward_for(job)  # here too: the tokenizer, the vocabulary, the layers
    layers = parse_layers(model.layer, forward.n_layers)
    shards, skipped = read_text_shards(text, forward, skip_bad)
    total = sum(s.tokens for s in shards)
    calibrate = (calibrate_text, job, _calibration_portions(shards), layers, threshold,
                 target_sparsity)
    calibration: list[tuple[float, float | None]] | None = None
    if target_sparsity is not None:  # the rule's threshold: every task needs it first
        calibration = pool.call(*calibrate)
        given = tuple(calibration)
    else:  # only the CATS column: calibrated beside the shards, as one more task
        given = tuple((math.nan, threshold) for _ in layers)
    task = SweepTask(job, layers, threshold, target_sparsity, given, total)
    tree = TreeMerge(len(shards), _merge_layers)
    progress = progress or Progress()
    progress.start(len(shards), pool.dashboard)
    counted: list[int] = []
    calls = [(shard_sweep, task, s) for s in shards]
    first = 0 if calibration is not None else 1  # else the calibration is the first call
    for i, out in pool.map(sweep_part, [calibrate, *calls][1 - first:]):
        if i < first:
            if isinstance(out, FfnError):
                raise out
            calibration = out
            continue
        i -= first
        if isinstance(out, FfnError):
            _failed(shards[i].path, out, skip_bad, skipped)
            out = None
        else:
            counted.append(i)
        tree.add(i, out)
        progress.advance(shards[i].tokens)
    parts: Layers | None = tree.root
    if parts is None:
        raise InputError(f"every shard is bad ({len(skipped)} skipped)")
    assert calibration is not None
    stats = []
    for layer, (meta, part), (cats, _) in zip(layers, parts, calibration, strict=True):
        d_ff, d_model, experts, top_k, activation, rule = meta
        pairs = pairwise_overlap(part.masks, experts * d_ff) if part.masks is not None \
            else None
        stats.append(LayerStats(layer, SparsityResult(
            d_ff, d_model, experts, top_k, activation, rule, part.tokens,
            part.per_token.tolist(), part.stats, part.masks, pairs), cats))
    source = str(text.text if text.text is not None else text.ids)
    result = SweepResult(str(forward.weights), source, stats[0].stats.tokens,
                         sum(len(shards[i].ids) for i in counted), stats[0].stats.rule.description,
                         tuple(stats))
    return ShardedSweep(result, len(shards), sorted(skipped, key=lambda s: s.path),
                        pool.dashboard)


# capture over shards: DIR/<shard>/layer{N}.npy + capture.json each, a manifest, resumable.


@dataclass(frozen=True)
class CaptureTask:
    job: TextJob
    layers: tuple[int, ...]
    out: str
    stop: str  # a file the client creates to stop the tasks still running (Ctrl-C, an error)


def shard_capture(task: CaptureTask, shard: TextShard) -> int:
    """One shard's capture (ffncli.capture.capture) into a temporary folder
    ``DIR/.<name>.<hex>.tmp``, renamed to ``DIR/<name>`` once every file is written: a shard's
    folder under its own name is always complete. Stopped or failed, the temporary folder is
    removed."""
    import shutil

    from ffncli.capture import capture

    out = Path(task.out)
    dest = out / shard.name
    tmp = out / f".{shard.name}.{secrets.token_hex(4)}.tmp"

    def check_stop(done: int) -> None:  # called after each batch of each layer
        if os.path.exists(task.stop):
            raise Stopped(shard.name)

    try:
        capture(forward_for(task.job), shard.sequences(), task.layers, tmp, force=True,
                batch_tokens=BATCH_TOKENS, progress=check_stop)
        if os.path.lexists(dest):  # a folder a crash left before the manifest named it
            shutil.rmtree(dest) if os.path.isdir(dest) else os.unlink(dest)
        os.rename(tmp, dest)
    except FfnError as exc:
        raise type(exc)(_named(shard.path, exc)) from None
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return shard.tokens


@dataclass(frozen=True)
class ShardedCapture:
    out: str
    shards: int
    layers: tuple[int, ...]
    written: list[str]
    already: list[str]  # complete from an earlier run: skipped
    skipped: list[Skipped]
    tokens: int
    model: str
    dashboard: str | None


def _text_entry(shard: TextShard) -> dict[str, Any]:
    return {"name": shard.name, "input": os.path.abspath(shard.path), "part": shard.part,
            "lines": [shard.lines[0], shard.lines[-1]], "sequences": len(shard.ids),
            "tokens": shard.tokens, "sha256": shard.sha256}


def capture_shards(model: ModelChoice, text: TextChoice, out: Path, pool: Pool, *,
                   force: bool = False, skip_bad: bool = False,
                   progress: Progress | None = None) -> ShardedCapture:
    """``capture`` over the shards of --text/--ids: ``out/<shard>/`` for each (its layer files
    and capture.json) and ``out/manifest.json`` listing the complete ones; a rerun skips those
    (unless ``force``), Ctrl-C removes the partial folders of unfinished shards."""
    from ffncli.capture import parse_layers

    job = TextJob(model, Overrides())
    forward = forward_for(job)
    layers = parse_layers(model.layer, forward.n_layers)
    shards, skipped = read_text_shards(text, forward, skip_bad)
    names = [s.name for s in shards]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})[0]
        raise InputError(f"two shards are named {twice}; their folders would collide in --out")
    _make_folder(out)
    recipe = {"model": os.path.abspath(forward.weights), "dtype": model.dtype,
              "layers": list(layers),
              "input": "--text" if text.text is not None else "--ids"}
    done = {} if force else _manifest_entries(out, recipe, CAPTURE_MANIFEST)
    entries = {s.name: e for s in shards if (e := done.get(s.name)) is not None
               and e == _text_entry(s) and (out / s.name / "capture.json").is_file()}
    todo = [s for s in shards if s.name not in entries]
    stop = out / f".stop-{secrets.token_hex(4)}"
    task = CaptureTask(job, layers, str(out), str(stop))
    _write_manifest(out, recipe, entries, CAPTURE_MANIFEST)

    def finished(shard: Any) -> None:
        entries[shard.name] = _text_entry(shard)
        _write_manifest(out, recipe, entries, CAPTURE_MANIFEST)

    written = _write_shards(pool, shard_capture, [(task, s) for s in todo], todo, stop,
                            skip_bad, skipped, progress or Progress(), finished,
                            lambda: _temporary_folders(out),
                            lambda: _remove_temporary_folders(out))
    return ShardedCapture(str(out), len(shards), layers, sorted(written),
                          sorted(s.name for s in shards if s not in todo),
                          sorted(skipped, key=lambda s: s.path),
                          sum(s.tokens for s in shards), str(forward.weights), pool.dashboard)


def _temporary_folders(out: Path) -> list[str]:
    return [p for p in glob.glob(glob.escape(str(out)) + "/.*.tmp") if os.path.isdir(p)]


def _wait_for(pending: Callable[[], list[str]]) -> None:
    """Give the tasks still running after a stop (they see the stop file at their next chunk
    or batch) up to STOP_WAIT seconds to remove their own temporary files."""
    deadline = time.monotonic() + STOP_WAIT
    while pending() and time.monotonic() < deadline:
        time.sleep(0.05)


def _remove_temporary_folders(out: Path) -> None:
    import shutil

    for tmp in _temporary_folders(out):
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The commands' sharded path (cli.py calls these).


def relu_stats_command(model: ModelChoice, tokens: TokenChoice, overrides: Overrides,
                       scale: ScaleChoice, *, threshold: float | None,
                       target_sparsity: float | None, as_json: bool) -> None:
    from ffncli import render

    pattern, model = _seen_from_workers(scale, _pattern(tokens), model)
    with connect(scale) as pool, Bar() as bar:
        out = relu_stats_shards(model, overrides, pattern, pool, threshold=threshold,
                                target_sparsity=target_sparsity,
                                allow_nonfinite=tokens.allow_nonfinite, skip_bad=scale.skip_bad,
                                progress=bar)
    if as_json:
        doc = render.stats_json(out.result)
        doc.update(shards=out.shards, skipped=[vars(s) for s in out.skipped])
        render.emit_json(doc)
    else:
        render.print_stats(out.result)
    _report_skipped(out.skipped)


def run_command(model: ModelChoice, tokens: TokenChoice, overrides: Overrides,
                scale: ScaleChoice, *, out: Path | None, force: bool, residual: bool,
                as_json: bool) -> None:
    from ffncli import render

    pattern, model = _seen_from_workers(scale, _pattern(tokens), model)
    shard_paths(pattern)  # a glob that matches nothing says so first
    if out is None:
        raise InputError("run over shards (a glob, a folder, --workers or --scheduler) writes "
                         "one .npy per shard: add --out DIR")
    if scale.scheduler is not None:
        out = Path(os.path.abspath(out))
    with connect(scale) as pool, Bar() as bar:
        done = run_shards(model, overrides, pattern, out, pool, residual=residual, force=force,
                          allow_nonfinite=tokens.allow_nonfinite, skip_bad=scale.skip_bad,
                          progress=bar)
    if as_json:
        render.emit_json({"out": done.out, "shards": done.shards, "tokens": done.tokens,
                          "weights": done.source, "written": done.written,
                          "already_complete": done.already,
                          "skipped": [vars(s) for s in done.skipped]})
    else:
        print(f"{done.out}: {len(done.written):,} shard(s) written, {len(done.already):,} "
              f"already complete, of {done.shards:,} ({done.tokens:,} tokens); weights "
              f"{done.source}")
    _report_skipped(done.skipped)


def sweep_command(model: ModelChoice, text: TextChoice, overrides: Overrides,
                  scale: ScaleChoice, *, threshold: float | None,
                  target_sparsity: float | None, report_path: Path | None,
                  as_json: bool) -> None:
    """``relu-stats --text/--ids`` over shards (a glob, a folder, a cluster)."""
    from ffncli import render, report

    _, model = _seen_from_workers(scale, Path(), model)  # --text/--ids are read here
    with connect(scale) as pool, Bar() as bar:
        out = sweep_shards(model, overrides, text, pool, threshold=threshold,
                           target_sparsity=target_sparsity, skip_bad=scale.skip_bad,
                           progress=bar)
    doc = render.sweep_json(out.result)
    report.save_sweep(report_path, doc, report.command_inputs(
        model.preset, model.config, model.weights, text=text.text, ids=text.ids))
    if as_json:
        doc.update(shards=out.shards, skipped=[vars(s) for s in out.skipped])
        render.emit_json(doc)
    else:
        render.emit_sweep(out.result, False)
    _report_skipped(out.skipped)


def capture_command(model: ModelChoice, text: TextChoice, scale: ScaleChoice, *, out: Path,
                    force: bool, as_json: bool) -> None:
    """``capture`` over shards: a folder per shard under --out, a manifest, resumable."""
    from ffncli import render

    _, model = _seen_from_workers(scale, Path(), model)  # --text/--ids are read here
    if scale.scheduler is not None:
        out = Path(os.path.abspath(out))
    with connect(scale) as pool, Bar() as bar:
        done = capture_shards(model, text, out, pool, force=force, skip_bad=scale.skip_bad,
                              progress=bar)
    if as_json:
        render.emit_json({"out": done.out, "shards": done.shards, "tokens": done.tokens,
                          "model": done.model, "layers": list(done.layers),
                          "written": done.written, "already_complete": done.already,
                          "skipped": [vars(s) for s in done.skipped]})
    else:
        print(f"{done.out}: {len(done.written):,} shard(s) written, {len(done.already):,} "
              f"already complete, of {done.shards:,} ({done.tokens:,} tokens, layers "
              f"{done.layers[0]}-{done.layers[-1]}); model {done.model}")
    _report_skipped(done.skipped)


def _pattern(tokens: TokenChoice) -> Path:
    if tokens.input is None:
        raise InputError("--workers, --scheduler and --skip-bad take --input files (a file, a "
                         "glob such as 'acts/*.npy', or a folder), not --random")
    return tokens.input


def _seen_from_workers(scale: ScaleChoice, pattern: Path, model: ModelChoice
                       ) -> tuple[Path, ModelChoice]:
    """The paths as workers elsewhere must see them: absolute (their working folder is not
    ours). A local cluster's workers share ours, and errors keep the paths as typed."""
    if scale.scheduler is None:
        return pattern, model

    def absolute(path: Path | None) -> Path | None:
        return Path(os.path.abspath(path)) if path is not None else None

    preset = model.preset
    if preset is not None and os.path.isfile(preset):  # a YAML file, not a preset's name
        preset = os.path.abspath(preset)
    return Path(os.path.abspath(pattern)), replace(
        model, preset=preset, config=absolute(model.config), weights=absolute(model.weights))


def _report_skipped(skipped: Sequence[Skipped]) -> None:
    for s in skipped:
        print(f"skipped: {s.error}", file=sys.stderr)
