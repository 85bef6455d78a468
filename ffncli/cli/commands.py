"""The Typer app: parse options, call one core function, render. No math here.

Each command turns its options into one call of ``ffncli.jobs`` and hands the result to
``ffncli.present``, through ``ffncli.cli.single`` (one input file) or ``ffncli.cli.sharded``
(many, or a cluster), chosen in one place (:func:`_path`); the error boundary is
``ffncli.cli.main``. Heavy modules (NumPy, the shard machinery) are imported inside the
commands that need them, so ``ffncli params`` starts as fast as Typer does.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Annotated, Optional

import typer

from ffncli.base import CALIBRATION_TOKENS
from ffncli.cli.options import (
    CAPTURE_MODEL,
    COUNTING,
    DOCUMENT,
    MODEL,
    OUTLIERS_MODEL,
    PERPLEXITY_MODEL,
    RUNNING,
    SCALE,
    TEXT,
    TOKENS,
    TRAINING,
    ConfigOpt,
    FormatOpt,
    GgufFileOpt,
    HubModelOpt,
    JsonOpt,
    OfflineOpt,
    PresetOpt,
    QuietOpt,
    ReportOpt,
    epilog,
    grouped,
    one_line_summaries,
    parse_strictly,
    put_in_panels,
    shares,
)
from ffncli.cli.options import EXAMPLES as EXAMPLES  # re-exported: tests read them here
from ffncli.errors import ExitCode, FfnError, InputError
from ffncli.jobs.choices import (
    ModelChoice,
    ScaleChoice,
    TextChoice,
    TokenChoice,
    TrainChoice,
)
from ffncli.specs.spec import Overrides

app = typer.Typer(
    name="ffncli",
    help="Inspect, run and count the position-wise feed-forward network (FFN) of Transformers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _print_version(value: bool) -> None:
    if value:
        from ffncli.base.version import VERSION as __version__

        print(f"ffncli {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option(
        "--version", help="Print ffncli's version and exit.", is_eager=True,
        callback=_print_version)] = False,
) -> None:
    """Inspect, run and count the position-wise feed-forward network (FFN) of Transformers."""


# ---------------------------------------------------------------------------------------------
# The commands, each with one or two examples at the end of its --help (cli/options.py's
# EXAMPLES, checked against its options by tests/test_commands.py).


def _path(scale: ScaleChoice, tokens: TokenChoice | None = None,
          text: TextChoice | None = None) -> ModuleType:
    """The one fork of ``run``, ``relu-stats``, ``capture`` and ``perplexity``:
    :mod:`ffncli.cli.sharded` when the inputs are many (a glob, a folder) or a cluster is asked
    for (``--workers``, ``--scheduler``, ``--skip-bad``), else :mod:`ffncli.cli.single`. The
    two modules' functions take the same arguments."""
    name = "sharded" if scale.wanted(tokens, text) else "single"
    return import_module(f"ffncli.cli.{name}")



@app.command(epilog=epilog("params"))
@grouped(overrides=(Overrides, COUNTING), plan=(TrainChoice, TRAINING))
def params(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    batch: Annotated[int, typer.Option(
        "--batch", help="Sequences decoded at once, for the KV cache at --seq-len x --batch.")
    ] = 1,
    weights: Annotated[Optional[Path], typer.Option(
        "--weights", help="A .safetensors file, a model.safetensors.index.json, a model "
        "folder or a .gguf: count its parameters from the headers alone and compare with the "
        "spec (from --preset, --config or the config.json beside the weights; exit 1 on a "
        "mismatch).")] = None,
    hub_model: HubModelOpt = None,
    report_path: ReportOpt = None,
    as_json: JsonOpt = False,
    gguf_file: GgufFileOpt = None,
    offline: OfflineOpt = False,
    table_format: FormatOpt = "rich",
    *, overrides: Overrides, plan: TrainChoice,
) -> None:
    """Count parameters, FLOPs per token, weight memory and KV cache: FFN, attention, norms;
    the memory of fine-tuning it (--train) and what fits (--fit)."""
    from ffncli.jobs.params import count_model
    from ffncli.jobs.resolve import weights_to_count
    from ffncli.jobs.targets import report_target
    from ffncli.present.console import check_format
    from ffncli.present.params import emit_params

    check_format(table_format, as_json)
    target = report_target(report_path, ModelChoice(preset, config, weights, hub_model))
    counted = weights_to_count(weights, hub_model, gguf_file, offline)
    result = count_model(preset, config, overrides, counted, batch, plan.plan(),
                         plan.budget())
    if target is not None:  # the page's modules only for a page
        from ffncli.present.report import about
        from ffncli.present.report_params import save_params

        save_params(target, result, about(ModelChoice(preset, config, weights, hub_model)))
    emit_params(result, as_json, table_format)
    if not result.matches:
        raise typer.Exit(ExitCode.CHECK_FAILED)


@app.command("run", epilog=epilog("run"))
@grouped(model=(ModelChoice, MODEL), tokens=(TokenChoice, TOKENS), overrides=(Overrides, RUNNING),
         scale=(ScaleChoice, SCALE))
def run_cmd(
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Write the output to this .npy (atomically).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
    residual: Annotated[bool, typer.Option("--residual", help="Return x + FFN(x).")] = False,
    precision: Annotated[Optional[int], typer.Option(
        "--precision", help="Digits shown (0 to 12; default 4).")] = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    *, model: ModelChoice, tokens: TokenChoice, overrides: Overrides, scale: ScaleChoice,
) -> None:
    """Run the FFN on token vectors: print the output, or stream it to a .npy file."""
    _path(scale, tokens).run_command(model, tokens, overrides, scale, out=out, force=force,
                                     residual=residual, precision=precision, as_json=as_json,
                                     quiet=quiet)


@app.command("permute-check", epilog=epilog("permute-check"))
@grouped(model=(ModelChoice, MODEL), tokens=(TokenChoice, TOKENS), overrides=(Overrides, RUNNING))
def permute_check_cmd(
    impl: Annotated[Optional[str], typer.Option(
        "--impl", help="Check your own FFN: package.module:NAME, importable from the current "
        "directory: a function of a NumPy array (tokens, d_model) returning (tokens, d_out), a "
        "JAX function, a PyTorch or Flax module (a class, an instance, or a factory returning "
        "one). It runs in a process of its own.")] = None,
    impl_args: Annotated[Optional[str], typer.Option(
        "--impl-args", metavar="JSON", help="Keyword arguments for an --impl class or factory, "
        "as a JSON object, e.g. '{\"d_model\": 512, \"d_ff\": 2048}'.")] = None,
    train_mode: Annotated[bool, typer.Option(
        "--train-mode", help="Check a module as it is (default: in eval mode, dropout off).")
    ] = False,
    trials: Annotated[int, typer.Option("--trials", help="Random permutations, besides "
                                        "reverse, cyclic shift and first/last swap.")] = 8,
    rtol: Annotated[Optional[float], typer.Option(
        "--rtol", help="Relative tolerance (default: float32 1.3e-6, float64 1e-7).")] = None,
    atol: Annotated[Optional[float], typer.Option(
        "--atol", help="Absolute tolerance, as given (default: float32 1e-5, float64 1e-7, "
        "times max(1, the largest |output| of each output column, their lower median)).")
    ] = None,
    bitwise: Annotated[bool, typer.Option(
        "--bitwise", help="Also require bit-identical results (one token and many often "
        "differ in the last bits).")] = False,
    junit_xml: Annotated[Optional[Path], typer.Option(
        "--junit-xml", help="Also write a JUnit XML report (one testcase per property; an "
        "<error> when the check cannot run), atomically, never over an input of the command.")
    ] = None,
    timeout: Annotated[Optional[float], typer.Option(
        "--timeout", metavar="SECONDS", help="Limit on each call of the FFN (the check makes "
        "about 80 + --trials): one that takes longer is an error, exit 2. Default: no limit.",
        show_default=False)] = None,
    load_timeout: Annotated[Optional[float], typer.Option(
        "--load-timeout", metavar="SECONDS", help="Limit on importing and building the --impl "
        "(default: the larger of 120 s and 10 x --timeout, when --timeout is given).",
        show_default=False)] = None,
    as_json: JsonOpt = False,
    *, model: ModelChoice, tokens: TokenChoice, overrides: Overrides,
) -> None:
    """Check that an FFN is position-wise: exit 0 if every property holds, 1 if not."""
    from ffncli.jobs import permute as checks
    from ffncli.present.check import emit_check
    from ffncli.present.junit import junit_report

    report_path = checks.report_path(junit_xml, impl, model, tokens)
    name, safe = impl or model.preset or "ffn", report_path
    try:
        how = checks.ImplChoice(checks.parse_impl_args(impl_args), train_mode, tokens.seed,
                                load_timeout)
        with checks.open_target(impl, model, overrides, timeout,
                                allow_nonfinite=tokens.allow_nonfinite, how=how) as target:
            name, safe = target.name, None  # until it is known not to be the impl's source
            safe = checks.not_a_source(report_path, target)
            report = checks.check_command(target, tokens, trials=trials, rtol=rtol, atol=atol,
                                          bitwise=bitwise)
    except FfnError as exc:  # the check could not run: the report says so too, then exit 2
        junit_report(safe, name, exc)
        raise
    junit_report(report_path, target.name, report)
    emit_check(report, as_json)
    if not report.passed:
        raise typer.Exit(ExitCode.CHECK_FAILED)


@app.command("relu-stats", epilog=epilog("relu-stats"))
@grouped(model=(ModelChoice, MODEL), tokens=(TokenChoice, TOKENS), text=(TextChoice, TEXT),
         overrides=(Overrides, RUNNING), scale=(ScaleChoice, SCALE))
def relu_stats_cmd(
    threshold: Annotated[Optional[float], typer.Option(
        "--threshold", help="Count |act| <= T as inactive (default: pre-activation <= 0).")
    ] = None,
    target_sparsity: Annotated[Optional[float], typer.Option(
        "--target-sparsity", help="Pick T as this quantile of |act| on the first tokens (the "
        "CATS rule), e.g. 0.5.")] = None,
    thresholds: Annotated[Optional[Path], typer.Option(
        "--thresholds", metavar="FILE.json", help="With --text or --ids: each layer's cats "
        "threshold from a file perplexity --save-thresholds wrote (with several targets in it, "
        "--target-sparsity picks one).")] = None,
    report_path: ReportOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    table_format: FormatOpt = "rich",
    *, model: ModelChoice, tokens: TokenChoice, text: TextChoice, overrides: Overrides,
    scale: ScaleChoice,
) -> None:
    """Activation sparsity of the hidden layer: per token, per unit, overlap, savings."""
    from ffncli.present.console import check_format
    from ffncli.present.console import table_format as tables

    check_format(table_format, as_json)
    with tables(table_format):
        _relu_stats(threshold, target_sparsity, thresholds, report_path, as_json, quiet,
                    model, tokens, text, overrides, scale)


def _relu_stats(threshold: float | None, target_sparsity: float | None,
                thresholds: Path | None, report_path: Path | None, as_json: bool, quiet: bool,
                model: ModelChoice, tokens: TokenChoice, text: TextChoice,
                overrides: Overrides, scale: ScaleChoice) -> None:
    """``relu-stats``: on text (whole model), on shards, or on one token file."""
    if thresholds is not None and not text.given:
        raise InputError("option --thresholds: per-layer thresholds need the whole model: "
                         "give --text or --ids")
    if text.given:
        text.refuse(tokens)
    _path(scale, tokens, text).relu_stats_command(
        model, tokens, text, overrides, scale, threshold=threshold,
        target_sparsity=target_sparsity, thresholds=thresholds, report_path=report_path,
        as_json=as_json, quiet=quiet)


@app.command(epilog=epilog("capture"))
@grouped(model=(ModelChoice, CAPTURE_MODEL), text=(TextChoice, TEXT), scale=(ScaleChoice, SCALE))
def capture(
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="Folder for layer{N}.npy (float32, tokens x d_model: that layer's "
        "FFN input) and capture.json; created if missing, refused if not empty unless --force.")],
    force: Annotated[bool, typer.Option("--force", help="Write into a folder that is not "
                                        "empty, replacing files of the same names (a previous "
                                        "capture.json is removed before the first file is "
                                        "replaced).")] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    *, model: ModelChoice, text: TextChoice, scale: ScaleChoice,
) -> None:
    """Run real text through the whole model; save the input every layer's FFN receives."""
    if not text.given:
        raise InputError("capture: give the text with --text FILE or its token ids with --ids "
                         "FILE")
    _path(scale, text=text).capture_command(model, text, scale, out=out, force=force,
                                            as_json=as_json, quiet=quiet)


@app.command(epilog=epilog("perplexity"))
@grouped(model=(ModelChoice, PERPLEXITY_MODEL), text=(TextChoice, DOCUMENT),
         scale=(ScaleChoice, SCALE))
def perplexity(
    ctx: Annotated[Optional[int], typer.Option(
        "--ctx", help="Tokens per chunk (window): 512 by default, at most the model's "
        "positions.", show_default=False)] = None,
    stride: Annotated[Optional[int], typer.Option(
        "--stride", help="Hugging Face's protocol instead of llama.cpp's: windows of --ctx "
        "tokens every S tokens, each scoring the tokens the previous one did not.")] = None,
    score: Annotated[str, typer.Option(
        "--score", help="half: llama.cpp's, only the second half of each chunk is scored; "
        "all: every token but the first of each chunk.")] = "half",
    sparsify: Annotated[Optional[str], typer.Option(
        "--sparsify", help="Also the model with every selected layer's FFN sparsified: cats "
        "(zero |act| <= T of the gate), teal (zero |x| <= T1 of the FFN input and |h| <= T2 "
        "of the down projection's) or topk (keep the largest units per token).")] = None,
    target_sparsity: Annotated[Optional[str], typer.Option(
        "--target-sparsity", metavar="S[,S...]", parser=shares, help="With --sparsify: the "
        "shares to zero, from 0 to below 1, e.g. 0.25,0.5; each runs in the same walk as the "
        "dense model.")
    ] = None,
    calibration_text: Annotated[Optional[Path], typer.Option(
        "--calibration-text", help=f"Calibrate the thresholds on this text's first "
        f"{CALIBRATION_TOKENS:,} tokens (read as --text is) instead of the evaluated text's.")
    ] = None,
    thresholds: Annotated[Optional[Path], typer.Option(
        "--thresholds", metavar="FILE.json", help="Apply the thresholds a --save-thresholds "
        "run wrote (instead of --sparsify and --target-sparsity).")] = None,
    save_thresholds: Annotated[Optional[Path], typer.Option(
        "--save-thresholds", metavar="FILE.json", help="Write the calibrated per-layer "
        "thresholds, with the model, rule, targets and calibration text named.")] = None,
    report_path: ReportOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    *, model: ModelChoice, text: TextChoice, scale: ScaleChoice,
) -> None:
    """A decoder's perplexity on a text, protocol stated; with --sparsify, what skipping the
    FFN's small activations costs (perplexity, KL, top-1; an encoder: embedding fidelity)."""
    from ffncli.base.files import Outputs
    from ffncli.jobs.perplexity import Asked, parse_targets
    from ffncli.jobs.targets import output_target
    from ffncli.present.perplexity import emit_perplexity, save_perplexity
    from ffncli.present.report import about

    targets = parse_targets(target_sparsity)
    if thresholds is not None and (sparsify is not None or targets):
        raise InputError("option --thresholds replaces --sparsify and --target-sparsity: give "
                         "one or the other")
    if save_thresholds is not None and thresholds is not None:
        raise InputError("options --thresholds and --save-thresholds: nothing is calibrated "
                         "when the thresholds come from a file")
    asked = Asked(ctx, stride, score, sparsify, targets, calibration_text, thresholds,
                  save_thresholds)  # made checked
    if save_thresholds is not None and sparsify is None:
        raise InputError("option --save-thresholds needs --sparsify and --target-sparsity")
    more = (("--calibration-text", calibration_text), ("--thresholds", thresholds))
    report = output_target(report_path, "--report", model, text=text, more=more)
    saved = output_target(save_thresholds, "--save-thresholds", model, text=text,
                          more=(*more, ("--report", report)))
    with Outputs() as outputs:  # both written, or neither
        outputs.reserve(report, "--report")
        outputs.reserve(saved, "--save-thresholds")
        result = _path(scale, text=text).perplexity_command(model, text, scale, asked,
                                                            quiet=quiet)
        save_perplexity(outputs, report, saved, result, about(model, text=text))
    emit_perplexity(result, as_json)


@app.command(epilog=epilog("presets"))
def presets(as_json: JsonOpt = False) -> None:
    """List the built-in presets with their sizes."""
    from ffncli.counting.results import presets_summary
    from ffncli.present.params import emit_presets

    emit_presets(presets_summary(), as_json)


# ---------------------------------------------------------------------------------------------
# experts: the routing profile of a mixture of experts on a text, and the placement plan.

@app.command("experts", epilog=epilog("experts"))
@grouped(model=(ModelChoice, CAPTURE_MODEL), text=(TextChoice, TEXT), scale=(ScaleChoice, SCALE))
def experts_cmd(
    fit: Annotated[Optional[str], typer.Option(
        "--fit", metavar="SIZE", help="Plan what to keep in this memory: 24GB, 24GiB or 2x80GB "
        "(the sum): each layer's busiest experts covering --coverage of its routings, beside "
        "the always-on rest and the KV cache, for every weight dtype.", show_default=False)
    ] = None,
    reserve: Annotated[Optional[str], typer.Option(
        "--reserve", metavar="SHARE|SIZE", help="Memory held back from --fit: 10% or 2GB "
        "(default none).", show_default=False)] = None,
    coverage: Annotated[Optional[float], typer.Option(
        "--coverage", help="With --fit: the share of each layer's routings its resident "
        "experts must take, above 0 and at most 1 (default 0.9).", show_default=False)
    ] = None,
    seq_len: Annotated[Optional[int], typer.Option(
        "--seq-len", help="With --fit: the tokens of the KV cache (default: the model's "
        "positions).", show_default=False)] = None,
    report_path: ReportOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    table_format: FormatOpt = "rich",
    *, model: ModelChoice, text: TextChoice, scale: ScaleChoice,
) -> None:
    """Where a mixture of experts routes a text: load, concentration and locality per MoE
    layer; with --fit, which experts to keep on the device."""
    from ffncli.jobs.experts import Asked
    from ffncli.present.console import check_format
    from ffncli.present.console import table_format as tables

    check_format(table_format, as_json)
    if not text.given:
        raise InputError("experts: give the text with --text FILE or its token ids with --ids "
                         "FILE")
    asked = Asked.of(TrainChoice(fit=fit, reserve=reserve).budget(), coverage, seq_len)
    asked.check(model)
    with tables(table_format):
        _path(scale, text=text).experts_command(model, text, scale, asked,
                                                report_path=report_path, as_json=as_json,
                                                quiet=quiet)


# ---------------------------------------------------------------------------------------------
# neurons (issue 43 §2): what each FFN unit responds to and what it writes

@app.command("neurons", epilog=epilog("neurons"))
@grouped(model=(ModelChoice, CAPTURE_MODEL), text=(TextChoice, TEXT))
def neurons_cmd(
    units: Annotated[Optional[str], typer.Option(
        "--units", metavar="all|N,A-B", help="The units of each --layer: all (the default), "
        "or numbers and ranges separated by commas, e.g. 0-9,42.", show_default=False)
    ] = None,
    top_k: Annotated[int, typer.Option(
        "--top-k", help="With --text or --ids: each unit's top-activating contexts kept.")] = 10,
    window: Annotated[int, typer.Option(
        "--window", help="Tokens shown each side of a context's token (within its sequence).")] = 4,
    samples: Annotated[int, typer.Option(
        "--samples", help="Random contexts per unit: token positions drawn once from the "
        "whole text with --seed, the same for every unit.",)] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random contexts.")] = 0,
    vocab: Annotated[bool, typer.Option(
        "--vocab", help="Also project each unit's output weights onto the vocabulary (the "
        "default without --text/--ids): the tokens it promotes and suppresses.")] = False,
    vocab_top: Annotated[int, typer.Option(
        "--vocab-top", help="Tokens listed each way by the vocabulary projection.")] = 10,
    jsonl: Annotated[Optional[Path], typer.Option(
        "--jsonl", metavar="FILE", help="Also write one JSON record per unit, a line each "
        "(fields as OpenAI's NeuronRecord: docs/neurons.md), atomically.", show_default=False)
    ] = None,
    report_dir: Annotated[Optional[Path], typer.Option(
        "--report", metavar="DIR", help="Also write one HTML page per layer into DIR (made if "
        "missing; layer{N}.html replaced): the top contexts with their token highlighted, no "
        "scripts.", show_default=False)] = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    *, model: ModelChoice, text: TextChoice,
) -> None:
    """What each FFN unit responds to and what it writes: activation statistics and
    top contexts over a text, and its output weights projected onto the vocabulary."""
    from ffncli.cli.units import neurons_command

    neurons_command(units, top_k, window, samples, seed, vocab, vocab_top, jsonl, report_dir,
                    as_json, quiet, model, text)


# ---------------------------------------------------------------------------------------------
# outliers (issue 43): massive activations, super weights and super experts over a text.

@app.command(epilog=epilog("outliers"))
@grouped(model=(ModelChoice, OUTLIERS_MODEL), text=(TextChoice, TEXT))
def outliers(
    confirm: Annotated[bool, typer.Option(
        "--confirm", help="Also score each super-weight candidate zeroed and each massive "
        "channel set to its mean, against the dense model (perplexity and KL; an encoder: "
        "cosines), beside the same change made at random (the null), in one walk.")] = False,
    repeats: Annotated[int, typer.Option(
        "--repeats", help="With --confirm: the null's random draws per change (1 to 100).")
    ] = 5,
    seed: Annotated[int, typer.Option(
        "--seed", help="With --confirm: the seed of the null's draws.")] = 0,
    ctx: Annotated[Optional[int], typer.Option(
        "--ctx", help="With --confirm on a decoder: tokens per chunk, scored as perplexity "
        "scores them (llama.cpp's protocol; default 512).", show_default=False)] = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    *, model: ModelChoice, text: TextChoice,
) -> None:
    """Per layer, the largest |value| of the FFN's input, hidden layer and output and of the
    residual stream, where each is; massive activations, super weights, super experts."""
    from ffncli.cli.units import outliers_command

    outliers_command(model, text, confirm=confirm, repeats=repeats, seed=seed, ctx=ctx,
                     as_json=as_json, quiet=quiet)


put_in_panels(app)  # last: after every command is registered
parse_strictly(app)
one_line_summaries(app)
