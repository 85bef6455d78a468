"""What a worker process keeps between tasks: the model built from the job's options once (the
FFN of one layer, or the whole model with its built layers, up to LAYER_CACHE_BYTES), read
again when the weights file changes; and the first, cheap pass of a capped mixture of experts
(the places each expert has left when each shard starts)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ffncli.errors import InputError
from ffncli.jobs.choices import ModelChoice
from ffncli.jobs.resolve import ALLOW_OPTION
from ffncli.jobs.shards.inputs import Shard
from ffncli.specs.spec import Overrides

if TYPE_CHECKING:
    import numpy as np

    from ffncli.compute.engine import Engine

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
    allow_nonfinite: bool = False  # --allow-nonfinite: NaN or infinity in the weights too


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
    from ffncli.jobs.resolve import weights_of

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
    from ffncli.jobs.resolve import load_model

    key = (job.model, job.overrides, job.allow_nonfinite, _weights_stamp(job.model))
    with _cache_lock:
        model = _cache.get(key)
        if model is None:
            _cache.clear()  # one model at a time per worker
            model = _cache[key] = load_model(job.model, job.overrides,
                                             allow_nonfinite=job.allow_nonfinite)
    return model


def engine_for(job: Job) -> Engine:
    """A fresh engine (its own buffers: tasks may run on several threads) over the cached
    weights, cutting chunks of ``job.rows`` tokens."""
    from ffncli.compute.engine import Engine

    e = _model(job).engine
    return Engine(e.weights, e.act, job.rows or e.chunk_tokens)


def describe(job: Job, total: int) -> ModelInfo:
    """The model as the worker built it (and the chunk size every process will use)."""
    from ffncli.compute.ffn import MoEWeights, capacity

    model = _model(job)
    e = model.engine
    p = e.weights
    moe = isinstance(p, MoEWeights)
    return ModelInfo(e.d_model, e.d_ff, len(p.experts) if moe else 1, p.top_k if moe else 1,
                     e.act.name, e.dtype.name, job.rows or e.chunk_tokens, model.source,
                     capacity(p, total) if moe else None)


def open_shard(shard: Shard, d_model: int) -> Any:
    from ffncli.formats.tokens import open_input

    tokens = open_input(shard.path, d_model)
    tokens.allow = ALLOW_OPTION
    if tuple(tokens.shape) != shard.shape:
        raise InputError(f"{shard.path}: changed while the job ran: shape {tokens.shape}, "
                         f"was {shard.shape}")
    return tokens


def shard_chunks(ffn: Engine, shard: Shard, allow_nonfinite: bool) -> Iterator[np.ndarray]:
    for _, x in open_shard(shard, ffn.d_model).chunks(ffn.chunk_tokens, ffn.dtype,
                                                 finite=not allow_nonfinite):
        yield x


def shard_demand(job: Job, shard: Shard, allow_nonfinite: bool) -> list[int]:
    """Places each expert's router gives it in this shard (a capped mixture's first pass:
    with them, every shard knows the places left to it by the shards before)."""
    import numpy as np

    from ffncli.compute.ffn import MoEWeights, route

    ffn = engine_for(job)
    p = ffn.weights
    assert isinstance(p, MoEWeights)
    demand = np.zeros(len(p.experts), dtype=np.int64)
    for x in shard_chunks(ffn, shard, allow_nonfinite):
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
    from ffncli.jobs.resolve import open_forward

    model_key = (job.model, job.overrides, _weights_stamp(job.model))
    key = (*model_key, threading.get_ident())
    with _cache_lock:
        model = _forwards.get(key)
        if model is None:
            for old in [k for k in _forwards if k[:-1] != model_key]:
                _forwards.pop(old).close()  # one model at a time per worker
            model = _forwards[key] = KeptLayers(open_forward(job.model, job.overrides))
    return model


def release_forwards() -> None:
    """Close and forget the whole models this process keeps (the client, once its job is
    done: in this process its tasks were the job's, and their files need not stay open)."""
    with _cache_lock:
        while _forwards:
            _forwards.popitem()[1].close()


class KeptLayers:
    """A Transformer whose built layers (``layer(i)``: weights read, FFN engine built) are
    kept for the next task, while they fit in LAYER_CACHE_BYTES; the rest are read again by
    each task, as ``walk`` reads them. For MiniLM each layer takes 6 to 13 ms to read and
    build, about 10% of a task of 2,000 tokens: worth keeping (all six take 43 MB)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.kept: dict[int, Any] = {}
        self.kept_bytes = 0
        self._head: Any = None

    def head(self) -> Any:
        """The LM head, read once (perplexity's tasks score every shard with it)."""
        if self._head is None:
            self._head = self.model.head()
        return self._head

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
