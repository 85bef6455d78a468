"""The single-file path of ``run``, ``relu-stats``, ``capture`` and ``perplexity``: one input
file (or ``--random``), here, in this process. Each function takes exactly what its namesake
in :mod:`ffncli.cli.sharded` takes (a test holds the two signatures equal), so that an option
means the same on either path or is refused there in one line. Imported only on this path."""

from __future__ import annotations

from pathlib import Path

from ffncli.analysis.sparsity import relu_stats
from ffncli.base.validate import whole
from ffncli.jobs import experts as experts_job
from ffncli.jobs import run as run_job
from ffncli.jobs.capture import capture
from ffncli.jobs.choices import (
    OPTIONS,
    ModelChoice,
    ScaleChoice,
    TextChoice,
    TokenChoice,
    parse_layers,
)
from ffncli.jobs.perplexity import Asked, PerplexityResult, run_asked
from ffncli.jobs.resolve import captured_layer, load_model, load_tokens, open_text
from ffncli.jobs.sweep import sweep
from ffncli.jobs.targets import OUT_OPTIONS, output_target, report_target
from ffncli.jobs.thresholds import sweep_cuts
from ffncli.present.experts import emit_experts, experts_json
from ffncli.present.progress import Bar
from ffncli.present.report import about
from ffncli.present.report_experts import save_experts
from ffncli.present.report_stats import save_stats, save_sweep
from ffncli.present.run import emit_run
from ffncli.present.stats import emit_capture, emit_stats, emit_sweep, sweep_json
from ffncli.specs.spec import Overrides


def run_command(model: ModelChoice, tokens: TokenChoice, overrides: Overrides,
                scale: ScaleChoice, *, out: Path | None, force: bool, residual: bool,
                precision: int | None, as_json: bool, quiet: bool = False) -> None:
    """``run`` on one token file: print the output, or stream it to a .npy file."""
    precision = 4 if precision is None else precision
    whole("option --precision", precision, 0, 12)
    loaded = load_model(captured_layer(model, tokens), overrides,
                        allow_nonfinite=tokens.allow_nonfinite)
    inputs = load_tokens(tokens, loaded.engine.d_model)
    run_job.check_printable(inputs, out, as_json)
    with Bar(enabled=not quiet) as bar:
        bar.start(inputs.n_tokens)
        result = run_job.run_ffn(loaded, inputs, out=out, force=force, residual=residual,
                                allow_nonfinite=tokens.allow_nonfinite, progress=bar.update)
    emit_run(result, as_json, precision)


def relu_stats_command(model: ModelChoice, tokens: TokenChoice, text: TextChoice,
                       overrides: Overrides, scale: ScaleChoice, *, threshold: float | None,
                       target_sparsity: float | None, thresholds: Path | None,
                       report_path: Path | None, as_json: bool, quiet: bool = False) -> None:
    """``relu-stats`` on one text (:func:`_sweep_command`) or one token file."""
    if text.given:
        _sweep_command(model, text, overrides, threshold=threshold,
                       target_sparsity=target_sparsity, thresholds=thresholds,
                       report_path=report_path, as_json=as_json, quiet=quiet)
        return
    target = report_target(report_path, model, tokens)
    loaded = load_model(captured_layer(model, tokens), overrides,
                        allow_nonfinite=tokens.allow_nonfinite)
    inputs = load_tokens(tokens, loaded.engine.d_model)
    with Bar(enabled=not quiet) as bar:
        bar.start(inputs.n_tokens)
        result = relu_stats(loaded.engine, inputs, threshold=threshold,
                            target_sparsity=target_sparsity,
                            allow_nonfinite=tokens.allow_nonfinite, progress=bar.update,
                            words=OPTIONS)
    save_stats(target, result, about(model, tokens))
    emit_stats(result, as_json, loaded.source if model.weights or model.hub_model else None)


def _sweep_command(model: ModelChoice, text: TextChoice, overrides: Overrides, *,
                   threshold: float | None, target_sparsity: float | None,
                   thresholds: Path | None, report_path: Path | None, as_json: bool,
                   quiet: bool) -> None:
    """``relu-stats --text/--ids``: every selected layer's statistics on its real input."""
    target = output_target(report_path, "--report", model, text=text,
                           more=(("--thresholds", thresholds),))
    forward, sequences = open_text(model, text, overrides)
    with forward:
        layers = parse_layers(model.layer, forward.n_layers)
        cuts = None
        if thresholds is not None:
            layers, cuts = sweep_cuts(thresholds, forward, model.layer, layers, threshold,
                                      target_sparsity)
            target_sparsity = None
        with Bar(enabled=not quiet) as bar:
            bar.start(sequences.tokens * (layers[-1] + 1), "tokens x layers", per=layers[-1] + 1)
            result = sweep(forward, sequences, layers, threshold=threshold,
                           target_sparsity=target_sparsity, thresholds=cuts,
                           progress=bar.update)
    save_sweep(target, sweep_json(result), about(model, text=text))
    emit_sweep(result, as_json)


def capture_command(model: ModelChoice, text: TextChoice, scale: ScaleChoice, *, out: Path,
                    force: bool, as_json: bool, quiet: bool = False) -> None:
    """``capture`` of one text: every selected layer's FFN input, a .npy each."""
    forward, sequences = open_text(model, text, Overrides())
    with forward:
        layers = parse_layers(model.layer, forward.n_layers)
        with Bar(enabled=not quiet) as bar:
            bar.start(sequences.tokens * (layers[-1] + 1), "tokens x layers", per=layers[-1] + 1)
            result = capture(forward, sequences, layers, out, force=force,
                             inputs=(text.text, text.ids, forward.weights),
                             progress=bar.update, names=OUT_OPTIONS)
    emit_capture(result, as_json)


def perplexity_command(model: ModelChoice, text: TextChoice, scale: ScaleChoice, asked: Asked,
                       *, quiet: bool = False) -> PerplexityResult:
    """``perplexity`` of one document, here (its outputs written by the command)."""
    with Bar(enabled=not quiet) as bar:
        return run_asked(model, text, asked, bar=bar)


def experts_command(model: ModelChoice, text: TextChoice, scale: ScaleChoice,
                    asked: experts_job.Asked, *,
                    report_path: Path | None, as_json: bool, quiet: bool = False) -> None:
    """``experts`` of one text: the routing profile of one walk, and the plan asked for."""
    target = output_target(report_path, "--report", model, text=text)
    forward, sequences = open_text(model, text, Overrides())
    with forward:
        layers = parse_layers(model.layer, forward.n_layers)
        experts_job.check_moe(forward, layers)
        walked = experts_job.moe_layers(forward.spec, layers)[-1] + 1  # the last layer walked
        with Bar(enabled=not quiet) as bar:
            bar.start(sequences.tokens * walked, "tokens x layers", per=walked)
            result = experts_job.experts(forward, sequences, layers, asked, progress=bar.update)
    save_experts(target, experts_json(result), about(model, text=text))
    emit_experts(result, as_json)
