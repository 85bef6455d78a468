"""The sharded path of ``run``, ``relu-stats``, ``capture`` and ``perplexity`` (a glob or a
folder of inputs, ``--workers`` or ``--scheduler``): options to one job of
:mod:`ffncli.jobs.shards.drivers`, its result to :mod:`ffncli.present`. Imported only on that
path: ``params`` never loads it."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from ffncli.errors import InputError
from ffncli.jobs import experts as experts_job
from ffncli.jobs.choices import (
    ModelChoice,
    ScaleChoice,
    TextChoice,
    TokenChoice,
    is_many,
    usable_cores,
)
from ffncli.jobs.perplexity import Asked, PerplexityResult
from ffncli.jobs.shards.drivers import (
    capture_shards,
    perplexity_shards,
    relu_stats_shards,
    run_shards,
    sweep_shards,
)
from ffncli.jobs.shards.inputs import shard_paths
from ffncli.jobs.shards.pool import connect
from ffncli.jobs.targets import output_target, report_target
from ffncli.present.experts import emit_experts, experts_json
from ffncli.present.progress import Bar
from ffncli.present.report import about
from ffncli.present.report_experts import save_experts
from ffncli.present.report_stats import save_stats, save_sweep
from ffncli.present.run import emit_sharded_run
from ffncli.present.stats import (
    emit_sharded_capture,
    emit_sharded_stats,
    emit_sharded_sweep,
    sweep_json,
)
from ffncli.specs.spec import Overrides


def relu_stats_command(model: ModelChoice, tokens: TokenChoice, text: TextChoice,
                       overrides: Overrides, scale: ScaleChoice, *, threshold: float | None,
                       target_sparsity: float | None, thresholds: Path | None,
                       report_path: Path | None, as_json: bool, quiet: bool = False) -> None:
    """``relu-stats`` over shards: of text (:func:`sweep_command`) or of token vectors."""
    if text.given:
        sweep_command(model, text, overrides, scale, threshold=threshold,
                      target_sparsity=target_sparsity, thresholds=thresholds,
                      report_path=report_path, as_json=as_json, quiet=quiet)
        return
    target = report_target(report_path, model, tokens)
    pattern, model = _seen_from_workers(scale, _pattern(tokens), model)
    note_workers(scale)
    with connect(scale) as pool, Bar(enabled=not quiet) as bar:
        out = relu_stats_shards(model, overrides, pattern, pool, threshold=threshold,
                                target_sparsity=target_sparsity,
                                allow_nonfinite=tokens.allow_nonfinite, skip_bad=scale.skip_bad,
                                progress=bar)
    save_stats(target, out.result, about(model, tokens))
    emit_sharded_stats(out, as_json)


def run_command(model: ModelChoice, tokens: TokenChoice, overrides: Overrides,
                scale: ScaleChoice, *, out: Path | None, force: bool, residual: bool,
                precision: int | None, as_json: bool, quiet: bool = False) -> None:
    """``run`` over shards: a .npy per shard under --out."""
    if precision is not None:
        raise InputError("--precision sets the digits printed for one input file; run "
                         "over shards prints no values (it writes a .npy per shard)")
    pattern, model = _seen_from_workers(scale, _pattern(tokens), model)
    shard_paths(pattern)  # a glob that matches nothing says so first
    if out is None:
        raise InputError("run over shards (a glob, a folder, --workers or --scheduler) writes "
                         "one .npy per shard: add --out DIR")
    if scale.scheduler is not None:
        out = Path(os.path.abspath(out))
    note_workers(scale)
    with connect(scale) as pool, Bar(enabled=not quiet) as bar:
        done = run_shards(model, overrides, pattern, out, pool, residual=residual, force=force,
                          allow_nonfinite=tokens.allow_nonfinite, skip_bad=scale.skip_bad,
                          progress=bar)
    emit_sharded_run(done, as_json)


def sweep_command(model: ModelChoice, text: TextChoice, overrides: Overrides,
                  scale: ScaleChoice, *, threshold: float | None,
                  target_sparsity: float | None, thresholds: Path | None,
                  report_path: Path | None, as_json: bool, quiet: bool = False) -> None:
    """``relu-stats --text/--ids`` over shards (a glob, a folder, a cluster)."""
    target = output_target(report_path, "--report", model, text=text,
                           more=(("--thresholds", thresholds),))
    _, model = _seen_from_workers(scale, Path(), model)  # --text/--ids are read here
    note_workers(scale)
    with connect(scale) as pool, Bar(enabled=not quiet) as bar:
        out = sweep_shards(model, overrides, text, pool, threshold=threshold,
                           target_sparsity=target_sparsity, thresholds=thresholds,
                           skip_bad=scale.skip_bad, progress=bar)
    save_sweep(target, sweep_json(out.result), about(model, text=text))
    emit_sharded_sweep(out, as_json)


def capture_command(model: ModelChoice, text: TextChoice, scale: ScaleChoice, *, out: Path,
                    force: bool, as_json: bool, quiet: bool = False) -> None:
    """``capture`` over shards: a folder per shard under --out, a manifest, resumable."""
    _, model = _seen_from_workers(scale, Path(), model)  # --text/--ids are read here
    if scale.scheduler is not None:
        out = Path(os.path.abspath(out))
    note_workers(scale)
    with connect(scale) as pool, Bar(enabled=not quiet) as bar:
        done = capture_shards(model, text, out, pool, force=force, skip_bad=scale.skip_bad,
                              progress=bar)
    emit_sharded_capture(done, as_json)


def perplexity_command(model: ModelChoice, text: TextChoice, scale: ScaleChoice, asked: Asked,
                       *, quiet: bool = False) -> PerplexityResult:
    """``perplexity`` with its one document's windows on ``--workers`` or ``--scheduler``:
    the same result as one process (its outputs written by the command)."""
    given = text.text if text.text is not None else text.ids
    option = "--text" if text.text is not None else "--ids"
    if given is not None and is_many(given):
        raise InputError(f"option {option}: perplexity scores one document, got the glob or "
                         f"folder {given}; give one file (--workers and --scheduler share out "
                         "its windows)")
    if scale.skip_bad:
        raise InputError("option --skip-bad: perplexity's shards are the windows of one "
                         "document, and none is left out")
    _, model = _seen_from_workers(scale, Path(), model)  # the text is read here
    note_workers(scale)
    with connect(scale) as pool, Bar(enabled=not quiet) as bar:
        out = perplexity_shards(model, text, pool, asked, progress=bar)
    return out.result


def note_workers(scale: ScaleChoice) -> None:
    """One line on stderr when ``--workers`` asks for more processes than there are cores:
    at most one worker a core runs at a time."""
    cores = usable_cores()
    if scale.workers is not None and scale.workers > cores:
        print(f"note: --workers {scale.workers} on {cores} core{'s' * (cores != 1)}: at most "
              f"{cores} run at a time", file=sys.stderr)


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


def experts_command(model: ModelChoice, text: TextChoice, scale: ScaleChoice,
                    asked: experts_job.Asked, *,
                    report_path: Path | None, as_json: bool, quiet: bool = False) -> None:
    """``experts`` over shards (a glob, a folder, a cluster): the profiles merged."""
    target = output_target(report_path, "--report", model, text=text)
    _, model = _seen_from_workers(scale, Path(), model)  # --text/--ids are read here
    note_workers(scale)
    with connect(scale) as pool, Bar(enabled=not quiet) as bar:
        result = experts_job.experts_shards(model, text, pool, asked, skip_bad=scale.skip_bad,
                                progress=bar)
    save_experts(target, experts_json(result), about(model, text=text))
    emit_experts(result, as_json)
