"""TODO: jobs.shards.tasks (from cluster)."""

from __future__ import annotations

import contextlib
import glob
import math
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.errors import FfnError, InputError, OutputError
from ffncli.jobs.choices import ModelChoice, TextChoice
from ffncli.specs.spec import Overrides

if TYPE_CHECKING:
    import numpy as np

    from ffncli.analysis.sparsity import Rule, SparsityResult, UnitStats
from ffncli.jobs.shards.inputs import (
    Shard,
    Skipped,
    TextShard,
    _named,
    read_shards,
    read_text_shards,
    shard_paths,
)
from ffncli.jobs.shards.manifest import (
    CAPTURE_MANIFEST,
    _entry,
    _jsonable,
    _manifest_entries,
    _text_entry,
    _write_manifest,
)
from ffncli.jobs.shards.pool import Pool, Progress, TreeMerge
from ffncli.jobs.shards.workers import (
    Job,
    ModelInfo,
    TextJob,
    _chunks,
    _open,
    describe,
    engine_for,
    forward_for,
    rooms,
    shard_demand,
)

STOP_WAIT = 10.0  # seconds the tasks still running after Ctrl-C get to remove their files


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

    from ffncli.analysis.sparsity import MAX_TOKENS_LISTED, merge

    if a is None or b is None:
        return b if a is None else a
    masks = a.masks if b.masks is None else b.masks if a.masks is None else \
        np.vstack([a.masks, b.masks])
    stats = [merge(x, y) for x, y in zip(a.stats, b.stats, strict=True)]
    return Partial(a.tokens + b.tokens, stats,
                   np.concatenate([a.per_token, b.per_token])[:MAX_TOKENS_LISTED], masks)


@dataclass(frozen=True)
class StatsTask:
    job: Job
    rule: Rule
    keep_masks: bool
    allow_nonfinite: bool


def shard_stats(task: StatsTask, shard: Shard, room: list[int] | None) -> Partial:
    """One shard's counters, as a single pass over the whole input counts them there."""
    import numpy as np

    from ffncli.analysis.sparsity import MAX_TOKENS_LISTED, SparsityAccumulator

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

    from ffncli.analysis.sparsity import CALIBRATION_TOKENS, calibrate_threshold

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
    from ffncli.analysis.sparsity import (
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

    from ffncli.formats.npy import AtomicNpyWriter

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


def _temporaries(out: Path, shards: Sequence[Shard]) -> list[str]:
    """AtomicNpyWriter's temporary files (``.<name>.<hex>.tmp``) of these shards."""
    return [tmp for shard in shards
            for tmp in glob.glob(glob.escape(str(out / f".{shard.path.stem}.npy")) + ".*.tmp")]




def _remove_temporaries(out: Path, shards: Sequence[Shard]) -> None:
    for tmp in _temporaries(out, shards):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def calibrate_text(job: TextJob, portions: Sequence[Sequence[np.ndarray]],
                   layers: Sequence[int], threshold: float | None, target: float | None
                   ) -> list[tuple[float, float | None]]:
    """Each layer's (CATS threshold at 50%, rule threshold) from the FFN inputs of the first
    CALIBRATION_TOKENS tokens of the whole corpus: ``portions`` are the first sequences of the
    first shards, each walked alone in the batches its shard's task walks them in."""
    import numpy as np

    from ffncli.analysis.sparsity import CALIBRATION_TOKENS
    from ffncli.compute.forward.walk import walk
    from ffncli.jobs.sweep import LayerSweep

    model = forward_for(job)
    parts: dict[int, list[np.ndarray]] = {i: [] for i in layers}
    for sequences in portions:
        walk(model, sequences, layers, lambda i, block, x: parts[i].append(x.copy()))
    out = []
    for i in layers:
        sample = np.concatenate(parts.pop(i))[:CALIBRATION_TOKENS]
        out.append(LayerSweep(model.layer(i), len(sample), threshold, target).calibrate(sample))
    return out


def _calibration_portions(shards: Sequence[TextShard]) -> list[tuple[np.ndarray, ...]]:
    """The first sequences of the first shards, whole batches of each, until they hold
    CALIBRATION_TOKENS tokens (or the corpus ends)."""
    from ffncli.analysis.sparsity import CALIBRATION_TOKENS
    from ffncli.compute.forward.walk import batches

    need = CALIBRATION_TOKENS
    portions = []
    for shard in shards:
        if need <= 0:
            break
        end = 0
        for a, b in batches([len(s) for s in shard.ids]):
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

    from ffncli.analysis.sparsity import MAX_TOKENS_LISTED
    from ffncli.compute.forward.walk import walk
    from ffncli.jobs.sweep import LayerSweep

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
        walk(forward_for(task.job), shard.ids, task.layers, visit)
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
    from ffncli.analysis.sparsity import SparsityResult, check_rule, pairwise_overlap
    from ffncli.jobs.choices import parse_layers
    from ffncli.jobs.sweep import LayerStats, SweepResult

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

    from ffncli.jobs.capture import capture

    out = Path(task.out)
    dest = out / shard.name
    tmp = out / f".{shard.name}.{secrets.token_hex(4)}.tmp"

    def check_stop(done: int) -> None:  # called after each batch of each layer
        if os.path.exists(task.stop):
            raise Stopped(shard.name)

    try:
        capture(forward_for(task.job), shard.sequences(), task.layers, tmp, force=True,
                progress=check_stop)
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


def capture_shards(model: ModelChoice, text: TextChoice, out: Path, pool: Pool, *,
                   force: bool = False, skip_bad: bool = False,
                   progress: Progress | None = None) -> ShardedCapture:
    """``capture`` over the shards of --text/--ids: ``out/<shard>/`` for each (its layer files
    and capture.json) and ``out/manifest.json`` listing the complete ones; a rerun skips those
    (unless ``force``), Ctrl-C removes the partial folders of unfinished shards."""
    from ffncli.jobs.choices import parse_layers

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
