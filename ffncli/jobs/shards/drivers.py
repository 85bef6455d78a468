"""The sharded jobs, as the client runs them: read the shards, send a task per shard to the
pool, and merge or record what comes back, through one pipeline (:mod:`.pipeline`).

- ``relu-stats --input``: :func:`relu_stats_shards`, counters merged in the fixed tree;
- ``run``: :func:`run_shards`, a file per shard and a manifest, resumable;
- ``relu-stats --text/--ids``: :func:`sweep_shards`, every layer's counters merged;
- ``capture``: :func:`capture_shards`, a folder per shard and a manifest, resumable;
- ``perplexity``: :func:`perplexity_shards`, one document's windows shared out, the sums
  (NLL, KL, top-1, cosines, each layer's cut counts) merged in the fixed tree.

Results do not depend on the number of workers or on the order tasks finish in:

- integer counters add exactly, in any order;
- the float sums of ``UnitStats`` (the Jaccard sums of consecutive tokens) change in their
  last digits with the order of the additions. So the partial results are merged in a tree
  whose shape is fixed by the shard indices alone (:class:`.pool.TreeMerge`), and the single
  process merges with the same tree: every addition happens in one order whoever computes
  it, and the result is the same to the last digit;
- each shard is cut into chunks of the same size everywhere: the engine's tokens per chunk
  are fixed once (:class:`.workers.Job`), not left to each machine's free memory; a text
  shard is walked in the forward's batches of ``BATCH_TOKENS``.

What a shard needs from the shards before it is known up front: its token offset (from the
headers, read once here), hence which of its tokens are listed per token; a mixture of experts
with a capacity also needs the places each expert has left, found by a first, cheap pass that
only routes (:func:`.workers.rooms`).
"""

from __future__ import annotations

import contextlib
import glob
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.base.files import output_folder
from ffncli.errors import FfnError, OutputError
from ffncli.jobs.choices import OPTIONS, ModelChoice, TextChoice, parse_layers
from ffncli.jobs.progress import Progress
from ffncli.jobs.shards import manifest as M
from ffncli.jobs.shards.inputs import (
    Shard,
    Skipped,
    TextShard,
    check_unique,
    every_shard_bad,
    named,
    read_shards,
    read_text_shards,
    shard_paths,
)
from ffncli.jobs.shards.pipeline import (
    Record,
    map_shards,
    read_by,
    remove,
    removed_on_failure,
    sorted_skipped,
    write_shards,
)
from ffncli.jobs.shards.pool import Pool, TreeMerge
from ffncli.jobs.shards.tasks import (
    CaptureTask,
    RunTask,
    StatsTask,
    SweepTask,
    calibrate,
    calibrate_text,
    shard_capture,
    shard_run,
    shard_stats,
    shard_sweep,
    sweep_part,
)
from ffncli.jobs.shards.workers import (
    Job,
    ModelInfo,
    TextJob,
    describe,
    forward_for,
    release_forwards,
    rooms,
    shard_demand,
)
from ffncli.jobs.targets import OUT_OPTIONS
from ffncli.jobs.thresholds import sweep_cuts
from ffncli.specs.spec import Overrides

if TYPE_CHECKING:
    import numpy as np

    from ffncli.analysis.sparsity import Partial, SparsityResult
    from ffncli.jobs.perplexity import Asked, PerplexityResult
    from ffncli.jobs.sweep import SweepResult

# ---------------------------------------------------------------------------------------------
# relu-stats over .npy shards.


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
    from ffncli.analysis.sparsity import (
        SMALL_OVERLAP,
        Rule,
        check_rule,
        describe_rule,
        merge_partials,
    )

    check_rule(threshold, target_sparsity, OPTIONS)
    paths = shard_paths(pattern)
    job = Job(model, overrides, allow_nonfinite=allow_nonfinite)
    first = pool.call(describe, job, 0)
    job = Job(model, overrides, first.rows, allow_nonfinite)
    shards, skipped = read_shards(paths, first.d_model, skip_bad)
    total = sum(s.tokens for s in shards)
    info = pool.call(describe, job, total)
    if target_sparsity is not None:
        threshold = pool.call(calibrate, job, shards, target_sparsity, allow_nonfinite,
                              skip_bad)
    rule = Rule(threshold, describe_rule(info.activation, threshold, target_sparsity, OPTIONS))
    task = StatsTask(job, rule, total <= SMALL_OVERLAP, allow_nonfinite)
    shard_rooms = _rooms(pool, job, info, shards, skip_bad, allow_nonfinite)
    tree = TreeMerge(len(shards), merge_partials)
    calls = [(task, s, shard_rooms[s.index]) for s in shards]
    for i, out in map_shards(pool, shard_stats, calls, shards, skip_bad=skip_bad,
                             skipped=skipped, progress=progress or Progress()):
        tree.add(i, out)
    part: Partial | None = tree.root
    if part is None:
        raise every_shard_bad("--input", skipped)
    return ShardedStats(part.result(), len(shards), sorted_skipped(skipped), tree.merges,
                        pool.dashboard)


def _rooms(pool: Pool, job: Job, info: ModelInfo, shards: list[Shard], skip_bad: bool,
           allow_nonfinite: bool) -> list[list[int] | None]:
    """Each shard's places left per expert (a capped mixture), else None for every shard."""
    if info.capacity is None:
        return [None] * len(shards)
    demands: list[list[int] | None] = [None] * len(shards)
    for i, out in pool.map(shard_demand, [(job, s, allow_nonfinite) for s in shards]):
        if isinstance(out, FfnError):
            if not skip_bad:
                raise type(out)(named(shards[i].path, out))
            continue  # its stats task fails the same way and lists it
        demands[i] = out
    if all(d is None for d in demands):
        return [None] * len(shards)
    return list(rooms(info.capacity, demands))


# ---------------------------------------------------------------------------------------------
# run over .npy shards: DIR/<shard stem>.npy each, a manifest, resumable.


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
    if out.suffix.lower() == ".npy":
        raise OutputError(f"option --out: run over shards (a glob, a folder, --workers or "
                          f"--scheduler) writes one .npy per shard into a folder, got {out}")
    created = output_folder(out, writer="run over shards", empty=False, names=OUT_OPTIONS,
                            inputs=read_by(model, tokens=pattern))
    with removed_on_failure(out, created):
        job = Job(model, overrides, allow_nonfinite=allow_nonfinite)
        first = pool.call(describe, job, 0)
        job = Job(model, overrides, first.rows, allow_nonfinite)
        shards, skipped = read_shards(paths, first.d_model, skip_bad)
        check_unique([(str(s.path), s.out_name) for s in shards], "option --input: ", "output")
        info = pool.call(describe, job, sum(s.tokens for s in shards))
    recipe = {"model": M.jsonable(model), "overrides": M.jsonable(overrides),
              "residual": residual, "source": info.source}
    record = Record.resume(out, recipe, M.RUN, M.entry, shards,
                           lambda s: (out / s.out_name).is_file(), force)
    todo = record.todo(shards)
    shard_rooms = _rooms(pool, job, info, shards, skip_bad, allow_nonfinite)
    task = RunTask(job, residual, allow_nonfinite)
    record.write()

    def temporaries(of: Sequence[Shard]) -> list[str]:  # AtomicNpyWriter's .<name>.<hex>.tmp
        return [tmp for s in of
                for tmp in glob.glob(glob.escape(str(out / f".{s.out_name}")) + ".*.tmp")]

    written = write_shards(pool, shard_run,
                           [(task, s, out / s.out_name, shard_rooms[s.index])
                            for s in todo], todo, out, skip_bad=skip_bad, skipped=skipped,
                           progress=progress or Progress(), finished=record.finished,
                           leftovers=lambda: temporaries(todo),
                           clean=lambda: remove(temporaries(shards)))
    return ShardedRun(str(out), len(shards), sorted(written),
                      sorted(s.name for s in shards if s not in todo), sorted_skipped(skipped),
                      sum(s.tokens for s in shards), info.source, pool.dashboard)


# ---------------------------------------------------------------------------------------------
# relu-stats --text/--ids over shards: the whole model on each shard.


def _calibration_portions(shards: Sequence[TextShard]) -> list[list[np.ndarray]]:
    """The first sequences of the first shards, whole batches of each, until they hold
    CALIBRATION_TOKENS tokens (or the corpus ends)."""
    from ffncli.analysis.calibration import first_batches

    need: int | None = None  # CALIBRATION_TOKENS
    portions = []
    for shard in shards:
        if need is not None and need <= 0:
            break
        portion, need = first_batches(shard.ids, need=need)
        portions.append(portion)
    return portions


def _merge_layers(a: list[Partial] | None, b: list[Partial] | None) -> list[Partial] | None:
    """a's tokens followed by b's, layer by layer (None: a shard skipped with --skip-bad)."""
    from ffncli.analysis.sparsity import merge_partials

    if a is None or b is None:
        return b if a is None else a
    merged = [merge_partials(x, y) for x, y in zip(a, b, strict=True)]
    return [m for m in merged if m is not None]


@dataclass(frozen=True)
class ShardedSweep:
    result: SweepResult
    shards: int
    skipped: list[Skipped]
    dashboard: str | None


def sweep_shards(model: ModelChoice, overrides: Overrides, text: TextChoice, pool: Pool, *,
                 threshold: float | None = None, target_sparsity: float | None = None,
                 thresholds: Path | None = None, skip_bad: bool = False,
                 progress: Progress | None = None) -> ShardedSweep:
    """``relu-stats --text/--ids`` over shards: a task per shard (the whole model, every
    selected layer), the per-layer counters merged in the fixed tree; equal, to the last
    digit, in this process and on any cluster. The CATS calibration is that of the corpus's
    first CALIBRATION_TOKENS tokens, computed once: first, when the rule's threshold needs it,
    else beside the shards (it only fills the CATS column). With ``thresholds`` (a file
    perplexity --save-thresholds wrote), each layer's own cats threshold, as in one process."""
    from ffncli.analysis.sparsity import check_rule

    if thresholds is None:  # else the file's cuts replace them (jobs.thresholds.sweep_cuts)
        check_rule(threshold, target_sparsity, OPTIONS)
    job = TextJob(model, overrides)
    with contextlib.ExitStack() as done:
        done.callback(release_forwards)  # the forward the client opens here is the job's
        return _sweep_shards(job, text, pool, (threshold, target_sparsity, thresholds),
                             skip_bad, progress or Progress())


def _sweep_shards(job: TextJob, text: TextChoice, pool: Pool,
                  rule: tuple[float | None, float | None, Path | None], skip_bad: bool,
                  progress: Progress) -> ShardedSweep:
    from ffncli.jobs.sweep import LayerStats, SweepResult

    threshold, target_sparsity, thresholds = rule
    forward = forward_for(job)  # here too: the tokenizer, the vocabulary, the layers
    layers = parse_layers(job.model.layer, forward.n_layers)
    cuts: dict[int, float] = {}
    if thresholds is not None:
        layers, cuts = sweep_cuts(thresholds, forward, job.model.layer, layers, threshold,
                                  target_sparsity)
        threshold = target_sparsity = None
    shards, skipped = read_text_shards(text, forward, skip_bad)
    total = sum(s.tokens for s in shards)
    calibration_call = (calibrate_text, job, _calibration_portions(shards), layers, threshold,
                        target_sparsity)
    calibration: list[tuple[float, float | None]] | None = None
    beside: tuple[Any, ...] | None = None
    if target_sparsity is not None:  # the rule's threshold: every task needs it first
        calibration = pool.call(*calibration_call)
        given = tuple(calibration)
    else:  # only the CATS column: calibrated beside the shards, as one more task
        beside = calibration_call
        given = tuple((math.nan, cuts.get(layer, threshold)) for layer in layers)
    task = SweepTask(job, layers, threshold, target_sparsity, given, total)
    tree = TreeMerge(len(shards), _merge_layers)
    counted: list[int] = []
    for i, out in map_shards(pool, sweep_part, [(shard_sweep, task, s) for s in shards], shards,
                             skip_bad=skip_bad, skipped=skipped, progress=progress,
                             beside=beside):
        if i < 0:
            calibration = out
            continue
        if out is not None:
            counted.append(i)
        tree.add(i, out)
    parts: list[Partial] | None = tree.root
    if parts is None:
        raise every_shard_bad("--text" if text.text is not None else "--ids", skipped)
    assert calibration is not None
    stats = tuple(LayerStats(layer, part.result(), cats)
                  for layer, part, (cats, _) in zip(layers, parts, calibration, strict=True))
    source = str(text.text if text.text is not None else text.ids)
    result = SweepResult(str(forward.weights), source, stats[0].stats.tokens,
                         sum(len(shards[i].ids) for i in counted),
                         stats[0].stats.rule.description, stats)
    return ShardedSweep(result, len(shards), sorted_skipped(skipped), pool.dashboard)


# ---------------------------------------------------------------------------------------------
# capture over shards: DIR/<shard>/layer{N}.npy + capture.json each, a manifest, resumable.


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


def capture_shards(model: ModelChoice, text: TextChoice, out: Path, pool: Pool, *,
                   force: bool = False, skip_bad: bool = False,
                   progress: Progress | None = None) -> ShardedCapture:
    """``capture`` over the shards of --text/--ids: ``out/<shard>/`` for each (its layer files
    and capture.json) and ``out/manifest.json`` listing the complete ones; a rerun skips those
    (unless ``force``), Ctrl-C removes the partial folders of unfinished shards."""

    job = TextJob(model, Overrides())
    with contextlib.ExitStack() as done:
        done.callback(release_forwards)  # the forward the client opens here is the job's
        return _capture_shards(job, text, out, pool, force, skip_bad, progress or Progress())


def _capture_shards(job: TextJob, text: TextChoice, out: Path, pool: Pool, force: bool,
                    skip_bad: bool, progress: Progress) -> ShardedCapture:
    model = job.model
    created = output_folder(out, writer="capture over shards", empty=False, names=OUT_OPTIONS,
                            inputs=read_by(model, text=text))
    with removed_on_failure(out, created):
        forward = forward_for(job)
        layers = parse_layers(model.layer, forward.n_layers)
        shards, skipped = read_text_shards(text, forward, skip_bad)
        check_unique([(str(s.path) if s.part is None else f"{s.path} (part {s.part})", s.name)
                      for s in shards], "", "folder")
    recipe = {"model": os.path.abspath(forward.weights), "dtype": model.dtype,
              "layers": list(layers),
              "input": "--text" if text.text is not None else "--ids"}
    record = Record.resume(out, recipe, M.CAPTURE, M.text_entry, shards,
                           lambda s: (out / s.name / "capture.json").is_file(), force)
    todo = record.todo(shards)
    task = CaptureTask(job, layers, str(out))
    record.write()

    def temporaries() -> list[str]:  # shard_capture's .<name>.<hex>.tmp folders
        return [p for p in glob.glob(glob.escape(str(out)) + "/.*.tmp") if os.path.isdir(p)]

    written = write_shards(pool, shard_capture, [(task, s) for s in todo], todo, out,
                           skip_bad=skip_bad, skipped=skipped, progress=progress,
                           finished=record.finished, leftovers=temporaries,
                           clean=lambda: remove(temporaries()))
    return ShardedCapture(str(out), len(shards), layers, sorted(written),
                          sorted(s.name for s in shards if s not in todo), sorted_skipped(skipped),
                          sum(s.tokens for s in shards), str(forward.weights), pool.dashboard)


# ---------------------------------------------------------------------------------------------
# perplexity over shards: one document's windows, a run of whole batches a task.


@dataclass(frozen=True)
class ShardedPerplexity:
    result: PerplexityResult
    shards: int
    dashboard: str | None


def perplexity_shards(model: ModelChoice, text: TextChoice, pool: Pool, asked: Asked, *,
                      progress: Progress | None = None) -> ShardedPerplexity:
    """``perplexity`` with its windows on the pool: the text read and tokenised here, the
    thresholds calibrated here once (the dense model on the first CALIBRATION_TOKENS tokens,
    in the walk's batches) and sent with every task; each task walks a run of whole batches of
    windows (the dense model and every variant) and returns its sums, merged in the fixed
    tree. The integer counts equal one walk's; the float sums (NLL, KL, the cosines, the FFN
    errors) are added in another order."""
    job = TextJob(model, Overrides())
    with contextlib.ExitStack() as done:
        done.callback(release_forwards)  # the forward the client opens here is the job's
        return _perplexity_shards(job, text, pool, asked, progress or Progress())


def _perplexity_shards(job: TextJob, text: TextChoice, pool: Pool, asked: Asked,
                       progress: Progress) -> ShardedPerplexity:
    from ffncli.jobs.perplexity import plan_job, with_thresholds
    from ffncli.jobs.shards.inputs import document_shards
    from ffncli.jobs.shards.tasks import PerplexityTask, shard_perplexity
    from ffncli.jobs.variants import calibrate, merge_parts

    forward = forward_for(job)
    plan = plan_job(forward, job.model, text, asked)
    variants = calibrate(forward, plan.calibrating, plan.variants, plan.layers)
    shards = document_shards(Path(plan.document.source), plan.sequences, plan.document.sha256)
    task = PerplexityTask(job, plan.layers, tuple(variants), plan.decoder)
    calls, start = [], 0
    for s in shards:
        firsts = plan.firsts[start:start + len(s.ids)] if plan.decoder else ()
        calls.append((task, s, firsts))
        start += len(s.ids)
    tree = TreeMerge(len(shards), merge_parts)
    for i, out in map_shards(pool, shard_perplexity, calls, shards, skip_bad=False,
                             skipped=[], progress=progress):
        tree.add(i, out)
    result = with_thresholds(asked.save is not None, forward, plan.result(tree.root))
    return ShardedPerplexity(result, len(shards), pool.dashboard)
