"""The tasks of a sharded job: what a worker does with one shard (in this process, or on a
Dask worker). Each task is a plain function of small, picklable arguments (a frozen task
record and a shard); the model comes from the worker's cache (:mod:`.workers`).

- ``relu-stats --input``: :func:`shard_stats`, a shard's mergeable counters;
- ``run``: :func:`shard_run`, a shard's output file;
- ``relu-stats --text/--ids``: :func:`shard_sweep`, every selected layer's counters;
- ``capture``: :func:`shard_capture`, a shard's folder of layer files;
- ``perplexity``: :func:`shard_perplexity`, a run of the document's windows scored.

The writing tasks watch a stop file (``--out``'s ``.stop-*``): Dask cannot stop a running
task, so on Ctrl-C or an error the client creates it and each task stops at its next chunk,
removing its partial output.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.errors import FfnError
from ffncli.jobs.shards.inputs import Shard, TextShard, named
from ffncli.jobs.shards.workers import (
    Job,
    TextJob,
    engine_for,
    forward_for,
    open_shard,
    shard_chunks,
)
from ffncli.jobs.targets import OUT_OPTIONS

if TYPE_CHECKING:
    import numpy as np

    from ffncli.analysis.sparsity import Partial, Rule
    from ffncli.jobs.perplexity import Part
    from ffncli.jobs.thresholds import Variant


class Stopped(Exception):
    """A writing task saw the job's stop file: its partial output is removed on the way out."""


def _stop_if(stop: str, shard: TextShard | Shard) -> None:
    if os.path.exists(stop):
        raise Stopped(shard.name)


# ---------------------------------------------------------------------------------------------
# relu-stats over .npy shards.


@dataclass(frozen=True)
class StatsTask:
    job: Job
    rule: Rule
    keep_masks: bool
    allow_nonfinite: bool


def shard_stats(task: StatsTask, shard: Shard, room: list[int] | None) -> Partial:
    """One shard's counters, as a single pass over the whole input counts them there."""
    from ffncli.analysis.sparsity import MAX_TOKENS_LISTED, SparsityAccumulator

    try:
        ffn = engine_for(task.job).resume(room)
        acc = SparsityAccumulator(ffn, task.rule, keep_masks=task.keep_masks)
        acc.listed = min(shard.offset, MAX_TOKENS_LISTED)  # the tokens listed before it
        for x in shard_chunks(ffn, shard, task.allow_nonfinite):
            acc.update(x)
    except FfnError as exc:
        raise type(exc)(named(shard.path, exc)) from None
    return acc.partial()


def calibrate(job: Job, shards: Sequence[Shard], target: float, allow_nonfinite: bool,
              skip_bad: bool = False) -> float:
    """The CATS threshold from the first tokens of the whole input, across shards (with
    ``skip_bad``, of the shards that can be read)."""
    import numpy as np

    from ffncli.analysis.calibration import calibrate_threshold, calibration_rows

    ffn = engine_for(job)
    need = calibration_rows(sum(s.tokens for s in shards))
    parts: list[np.ndarray] = []
    for shard in shards:
        if need <= 0:
            break
        try:
            _, x = next(open_shard(shard, ffn.d_model).chunks(min(need, shard.tokens), ffn.dtype,
                                                              finite=not allow_nonfinite))
        except FfnError as exc:
            if skip_bad:
                continue  # its own task fails the same way and lists it
            raise type(exc)(named(shard.path, exc)) from None
        parts.append(x.copy())
        need -= x.shape[0]
    return calibrate_threshold(ffn, np.concatenate(parts), target)


# ---------------------------------------------------------------------------------------------
# run over .npy shards: DIR/<shard stem>.npy each.


@dataclass(frozen=True)
class RunTask:
    job: Job
    residual: bool
    allow_nonfinite: bool


def shard_run(task: RunTask, shard: Shard, dest: Path, room: list[int] | None, stop: str) -> int:
    """The FFN of one shard's tokens into ``dest``, written atomically (a temporary file
    renamed into place: an interrupted task leaves no partial output under that name);
    ``stop``: the job's stop file."""
    import numpy as np

    from ffncli.formats.npy import AtomicNpyWriter

    try:
        ffn = engine_for(task.job).resume(room)
        out_shape = shard.shape[:-1] + (ffn.d_model,)
        buffers = [np.empty((ffn.chunk_tokens, ffn.d_model), dtype=ffn.dtype)
                   for _ in range(2)]  # one is written while the other is filled
        with AtomicNpyWriter(dest, out_shape, ffn.dtype, True, (shard.path,),
                             names=OUT_OPTIONS) as writer:
            for i, x in enumerate(shard_chunks(ffn, shard, task.allow_nonfinite)):
                _stop_if(stop, shard)  # and the writer removes its file
                writer.wait(buffers[i % 2])
                y = buffers[i % 2][: x.shape[0]]
                ffn.chunk(x, y)
                if task.residual:
                    np.add(y, x, out=y)
                writer.write(y)
    except FfnError as exc:
        raise type(exc)(named(shard.path, exc)) from None
    return shard.tokens


# ---------------------------------------------------------------------------------------------
# relu-stats --text/--ids over shards: the whole model on each.


def calibrate_text(job: TextJob, portions: Sequence[Sequence[np.ndarray]],
                   layers: Sequence[int], threshold: float | None, target: float | None
                   ) -> list[tuple[float, float | None]]:
    """Each layer's (CATS threshold at 50%, rule threshold) from the first CALIBRATION_TOKENS
    tokens of the whole corpus: ``portions`` are the first sequences of the first shards
    (:func:`ffncli.analysis.calibration.first_batches`), each walked alone in the batches its
    shard's task walks them in."""
    from ffncli.jobs.sweep import calibrate_parts

    return calibrate_parts(forward_for(job), portions, layers, threshold, target)


@dataclass(frozen=True)
class SweepTask:
    job: TextJob
    layers: tuple[int, ...]
    threshold: float | None
    target: float | None
    calibration: tuple[tuple[float, float | None], ...]  # per layer
    total: int  # tokens of the whole corpus (the pairwise table of tiny inputs)


def shard_sweep(task: SweepTask, shard: TextShard) -> list[Partial]:
    """One shard through the whole model: each selected layer's counters, as one walk over
    the whole corpus counts them on this shard's tokens."""
    from ffncli.analysis.sparsity import MAX_TOKENS_LISTED
    from ffncli.jobs.sweep import LayerSweep, count_walk

    done: dict[int, Partial] = {}

    def open_layer(layer: int, block: Any) -> LayerSweep:
        s = LayerSweep(block, task.total, task.threshold, task.target,
                       calibration=task.calibration[task.layers.index(layer)])
        assert s.acc is not None
        s.acc.listed = min(shard.offset, MAX_TOKENS_LISTED)  # the tokens listed before
        return s

    def close_layer(layer: int, s: LayerSweep) -> None:  # the walk has left the layer
        assert s.acc is not None
        done[layer] = s.acc.partial()

    try:
        count_walk(forward_for(task.job), shard.ids, task.layers, open_layer, close_layer)
    except FfnError as exc:
        raise type(exc)(named(shard.path, exc)) from None
    return [done[i] for i in task.layers]


def sweep_part(fn: Callable[..., Any], *args: Any) -> Any:
    """One task of a text sweep: a shard (:func:`shard_sweep`) or the calibration
    (:func:`calibrate_text`), mapped together when the counting does not wait for it."""
    return fn(*args)


# ---------------------------------------------------------------------------------------------
# capture over shards: DIR/<shard>/layer{N}.npy and capture.json each.


@dataclass(frozen=True)
class CaptureTask:
    job: TextJob
    layers: tuple[int, ...]
    out: str


def shard_capture(task: CaptureTask, shard: TextShard, stop: str) -> int:
    """One shard's capture (:func:`ffncli.jobs.capture.capture`) into a temporary folder
    ``DIR/.<name>.<hex>.tmp``, renamed to ``DIR/<name>`` once every file is written: a shard's
    folder under its own name is always complete. Stopped or failed, the temporary folder is
    removed."""
    from ffncli.jobs.capture import capture

    out = Path(task.out)
    dest = out / shard.name
    tmp = out / f".{shard.name}.{secrets.token_hex(4)}.tmp"
    try:
        capture(forward_for(task.job), shard.sequences(), task.layers, tmp, force=True,
                progress=lambda done: _stop_if(stop, shard))  # after each batch
        if os.path.lexists(dest):  # a folder a crash left before the manifest named it
            shutil.rmtree(dest) if os.path.isdir(dest) else os.unlink(dest)
        os.rename(tmp, dest)
    except FfnError as exc:
        raise type(exc)(named(shard.path, exc)) from None
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return shard.tokens


# ---------------------------------------------------------------------------------------------
# perplexity over shards: a run of one document's windows each.


@dataclass(frozen=True)
class PerplexityTask:
    job: TextJob
    layers: tuple[int, ...]
    variants: tuple[Variant, ...]  # each with its cut in every selected layer (calibrated)
    decoder: bool  # scored by the LM head; an encoder by the cosines of its hidden states


def shard_perplexity(task: PerplexityTask, shard: TextShard, firsts: tuple[int, ...]) -> Part:
    """One run of windows through the dense model and every variant (one walk): its sums, as
    the walk over the whole document adds them on these windows. ``firsts``: the first
    position each window scores."""
    from ffncli.jobs.perplexity import walk_part

    model = forward_for(task.job)
    try:
        return walk_part(model, model.head if task.decoder else None, shard.ids, firsts,
                         task.variants, task.layers)
    except FfnError as exc:
        raise type(exc)(named(shard.path, exc)) from None
