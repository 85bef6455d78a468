"""The Typer app: parse options, call one core function, render. No math here.

Each command turns its options into one call of the core (``ffncli.model``, ``runner``,
``checks``, ``sparsity``, ``counting``) and hands the result to ``render``. The single error
boundary is :func:`run`: a core ``FfnError`` becomes one ``error: ...`` line on stderr and
exit code 2; a failed check exits 1. Heavy modules (NumPy) are imported inside the commands
that need them, so ``ffncli params`` starts as fast as Typer does.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import signal
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional, TextIO, TypeVar

import typer

from ffncli.blas import quiet_idle_threads
from ffncli.cluster import ScaleChoice
from ffncli.errors import (
    ExitCode,
    FfnError,
    ImplError,
    InputError,
    Interrupted,
    OutputError,
    shown,
)
from ffncli.model import ModelChoice, TextChoice, TokenChoice
from ffncli.spec import ACTIVATIONS, GLU_VARIANTS, Overrides
from ffncli.validate import whole

app = typer.Typer(
    name="ffncli",
    help="Inspect, run and count the position-wise feed-forward network (FFN) of Transformers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# ---------------------------------------------------------------------------------------------
# Options shared by the commands.

PresetOpt = Annotated[Optional[str], typer.Option(
    "--preset", "-p", help="Built-in preset name (see `ffncli presets`) or a YAML file.")]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="A Hugging Face config.json.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
HubModelOpt = Annotated[Optional[str], typer.Option(
    "--model", metavar="ORG/NAME[@REVISION]", help="Instead of --weights: a model in the "
    "local Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub; "
    "revision default main). Never downloads.", show_default=False)]
ReportOpt = Annotated[Optional[Path], typer.Option(
    "--report", metavar="FILE.html", help="Also write the results as one self-contained HTML "
    "page (SVG charts, each with its numbers in a table; no scripts, nothing fetched), "
    "atomically, never over an input of the command.", show_default=False)]

# Options that travel together: each group reaches a command as one frozen object (see
# :func:`grouped`), so the model, token and what-if options are declared once, here.
MODEL: dict[str, Any] = {
    "preset": PresetOpt,
    "config": ConfigOpt,
    "weights": Annotated[Optional[Path], typer.Option(
        "--weights", help="FFN weights: .npz (w1 b1 w2 b2; gated w b v c w2 b2), a Hugging "
        "Face checkpoint (with --layer: a .safetensors file, a model.safetensors.index.json or "
        "a model folder; GPTQ and AWQ from a file or a folder holding one) or a llama.cpp .gguf "
        "(with --layer). "
        "Default: random, from the preset's seed.")],
    "hub_model": HubModelOpt,
    "layer": Annotated[Optional[str], typer.Option(
        "--layer", metavar="N", help="Layer of a checkpoint (default 0; with --text or --ids: "
        "N, A-B or all, the default).", show_default=False)],
    "dtype": Annotated[str, typer.Option(
        "--dtype", help="float32 or float64: the computation's dtype.")],
    "max_memory": Annotated[Optional[str], typer.Option(
        "--max-memory", help="Budget for random weights (default 2GB, never more than is "
        "free).")],
}
TOKENS: dict[str, Any] = {
    "input": Annotated[Optional[Path], typer.Option(
        "--input", "-i", help="Tokens: .npy (1-D, 2-D tokens x d_model, or 3-D batch x seq x "
        "d_model), or .txt/.csv with one token per row. run and relu-stats also take many .npy "
        "shards: a quoted glob ('acts/*.npy') or a folder, in name order.")],
    "random": Annotated[Optional[int], typer.Option(
        "--random", help="Instead of --input: N tokens drawn from normal(0, 1) with --seed.")],
    "seed": Annotated[int, typer.Option("--seed", help="Seed of --random tokens.")],
    "allow_nonfinite": Annotated[bool, typer.Option(
        "--allow-nonfinite", help="Compute with NaN and infinity instead of refusing them.")],
}
WHAT_IF: dict[str, Any] = {
    "d_model": Annotated[Optional[int], typer.Option("--d-model", help="What-if: model width.")],
    "d_ff": Annotated[Optional[int], typer.Option("--d-ff", help="What-if: FFN hidden width.")],
    "activation": Annotated[Optional[str], typer.Option(
        "--activation", help=f"What-if: {', '.join(ACTIVATIONS)} (keeps the gating), or "
        f"{', '.join(GLU_VARIANTS)} (gated).")],
    "gated": Annotated[Optional[bool], typer.Option(
        "--gated/--no-gated", help="What-if: a gated (GLU) FFN with three matrices, or not.",
        show_default=False)],
    "experts": Annotated[Optional[int], typer.Option("--experts", help="What-if: experts.")],
    "top_k": Annotated[Optional[int], typer.Option("--top-k", help="What-if: experts per token.")],
    "beta": Annotated[Optional[float], typer.Option(
        "--beta", help="Swish_beta: x * sigmoid(beta x) for silu/swish.")],
    "capacity_factor": Annotated[Optional[float], typer.Option(
        "--capacity-factor", help="Mixture of experts: each expert takes at most "
        "ceil(cf * tokens * top_k / experts) tokens, in order; the rest are dropped.")],
    "match_params": Annotated[bool, typer.Option(
        "--match-params", help="Pick d_ff of a gated FFN so it has about the parameters of the "
        "two-matrix FFN of the given d_ff (the 2/3 rule, rounded to nearest).")],
    "multiple_of": Annotated[int, typer.Option(
        "--multiple-of", help="With --match-params: round d_ff up to a multiple of this "
        "(LLaMA uses 256).")],
    "seq_len": Annotated[Optional[int], typer.Option(
        "--seq-len", help="Sequence length for attention-score FLOPs (default: the preset's).")],
}
TEXT: dict[str, Any] = {
    "text": Annotated[Optional[Path], typer.Option(
        "--text", help="Real text through the whole model: UTF-8, each non-empty line one "
        "sequence, tokenised with the tokenizer.json beside the weights (or a GGUF's own). "
        "Needs pip install 'ffncli[text]'. relu-stats and capture also take many files: a "
        "quoted glob ('corpus/*.txt') or a folder, in name order.")],
    "ids": Annotated[Optional[Path], typer.Option(
        "--ids", help="Instead of --text: token ids, an integer .npy (1-D one sequence, 2-D "
        "sequences x length) or a .txt with one sequence of space-separated ids per line; "
        "also a quoted glob or a folder (its .npy and .txt files).")],
}
SCALE: dict[str, Any] = {
    "workers": Annotated[Optional[int], typer.Option(
        "--workers", help="Run the shards on a local Dask cluster of N worker processes "
        "(pip install 'ffncli[dask]'). Default: this process.")],
    "scheduler": Annotated[Optional[str], typer.Option(
        "--scheduler", metavar="ADDRESS", help="Run the shards on the Dask cluster of this "
        "scheduler, e.g. tcp://10.0.0.5:8786 (the workers read --weights and --input from the "
        "same paths).")],
    "skip_bad": Annotated[bool, typer.Option(
        "--skip-bad", help="With many shards: leave a bad shard out (listed on stderr) and go "
        "on, instead of stopping at it.")],
}
SHAPE = ("d_model", "d_ff", "activation", "gated", "experts", "top_k")
RUNNING = {name: WHAT_IF[name] for name in SHAPE + ("beta", "capacity_factor")}
COUNTING = {name: WHAT_IF[name] for name in SHAPE + ("match_params", "multiple_of", "seq_len")}

Command = TypeVar("Command", bound=Callable[..., None])


def grouped(**groups: tuple[type, dict[str, Any]]) -> Callable[[Command], Command]:
    """Give a command each group's options and pass each group as one object:
    ``grouped(model=(ModelChoice, MODEL))`` adds --preset, --config, ... and calls the command
    with ``model=ModelChoice(preset=..., config=..., ...)``.

    Typer reads a command's options from its signature, so the wrapper's signature is the
    command's own (less the group parameters) followed by every group's options, with the
    defaults of the group's dataclass (one place for each default)."""
    def decorate(command: Command) -> Command:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values()
               if p.name not in groups]
        extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                   default=_defaults(cls)[name], annotation=annotation)
                 for cls, options in groups.values() for name, annotation in options.items()]

        @functools.wraps(command)
        def wrapper(**values: Any) -> None:
            objects = {group: cls(**{name: values.pop(name) for name in options})
                       for group, (cls, options) in groups.items()}
            command(**values, **objects)

        wrapper.__signature__ = inspect.Signature(own + extra)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in own + extra}
        return wrapper  # type: ignore[return-value]

    return decorate


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls)}


# ---------------------------------------------------------------------------------------------
# The commands.


@app.command()
@grouped(overrides=(Overrides, COUNTING))
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
    *, overrides: Overrides,
) -> None:
    """Count parameters, FLOPs per token, weight memory and KV cache: FFN, attention, norms."""
    from ffncli import render, report
    from ffncli.model import count_model, weights_of

    result = count_model(preset, config, overrides, weights_of(weights, hub_model), batch)
    report.save_params(report_path, result, preset, config, weights_of(weights, hub_model))
    render.emit_params(result, as_json)
    if not result.matches:
        raise typer.Exit(ExitCode.CHECK_FAILED)


@app.command("run")
@grouped(model=(ModelChoice, MODEL), tokens=(TokenChoice, TOKENS), overrides=(Overrides, RUNNING),
         scale=(ScaleChoice, SCALE))
def run_cmd(
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Write the output to this .npy (atomically).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
    residual: Annotated[bool, typer.Option("--residual", help="Return x + FFN(x).")] = False,
    precision: Annotated[int, typer.Option("--precision", help="Digits shown (0 to 12).")] = 4,
    as_json: JsonOpt = False,
    *, model: ModelChoice, tokens: TokenChoice, overrides: Overrides, scale: ScaleChoice,
) -> None:
    """Run the FFN on token vectors: print the output, or stream it to a .npy file."""
    if scale.wanted(tokens):  # many shards, or a cluster: ffncli/cluster.py
        from ffncli.cluster import run_command

        run_command(model, tokens, overrides, scale, out=out, force=force, residual=residual,
                    as_json=as_json)
        return
    from ffncli import render, runner
    from ffncli.model import load_model, load_tokens

    whole("option --precision", precision, 0, 12)
    loaded = load_model(model, overrides)
    inputs = load_tokens(tokens, loaded.engine.d_model)
    runner.check_printable(inputs, out, as_json)
    with render.progress(inputs.n_tokens, as_json) as progress:
        result = runner.run_ffn(loaded, inputs, out=out, force=force, residual=residual,
                                allow_nonfinite=tokens.allow_nonfinite, progress=progress)
    render.emit_run(result, as_json, precision)


@app.command("permute-check")
@grouped(model=(ModelChoice, MODEL), tokens=(TokenChoice, TOKENS), overrides=(Overrides, RUNNING))
def permute_check_cmd(
    impl: Annotated[Optional[str], typer.Option(
        "--impl", help="Check your own FFN: package.module:function, importable from the "
        "current directory, taking (tokens, d_model) and returning (tokens, d_out).")] = None,
    trials: Annotated[int, typer.Option("--trials", help="Random permutations, besides "
                                        "reverse, cyclic shift and first/last swap.")] = 8,
    rtol: Annotated[Optional[float], typer.Option(
        "--rtol", help="Relative tolerance (default: float32 1.3e-6, float64 1e-7).")] = None,
    atol: Annotated[Optional[float], typer.Option(
        "--atol", help="Absolute tolerance (default: float32 1e-5, float64 1e-7, times the "
        "largest |output| when that is above 1).")] = None,
    junit_xml: Annotated[Optional[Path], typer.Option(
        "--junit-xml", help="Also write a JUnit XML report (one testcase per property; an "
        "<error> if the FFN misbehaves), atomically, never over an input of the command.")
    ] = None,
    timeout: Annotated[Optional[float], typer.Option(
        "--timeout", metavar="SECONDS", help="Limit on each call of the FFN (the check makes "
        "about 80 + --trials) and on importing the --impl module: one that takes longer is an "
        "error, exit 2. POSIX only. Default: no limit.", show_default=False)] = None,
    as_json: JsonOpt = False,
    *, model: ModelChoice, tokens: TokenChoice, overrides: Overrides,
) -> None:
    """Check that an FFN is position-wise: exit 0 if every property holds, 1 if not."""
    from ffncli import checks, render

    target = checks.load_target(impl, model, overrides, timeout)
    report_path = checks.report_path(junit_xml, target, model, tokens)
    try:
        report = checks.check_command(target, tokens, trials=trials, rtol=rtol, atol=atol)
    except ImplError as exc:  # the FFN misbehaved: the report says so too, then exit 2
        render.junit_report(report_path, target.name, exc)
        raise
    render.junit_report(report_path, target.name, report)
    render.emit_check(report, as_json)
    if not report.passed:
        raise typer.Exit(ExitCode.CHECK_FAILED)


@app.command("relu-stats")
@grouped(model=(ModelChoice, MODEL), tokens=(TokenChoice, TOKENS), text=(TextChoice, TEXT),
         overrides=(Overrides, RUNNING), scale=(ScaleChoice, SCALE))
def relu_stats_cmd(
    threshold: Annotated[Optional[float], typer.Option(
        "--threshold", help="Count |act| <= T as inactive (default: pre-activation <= 0).")
    ] = None,
    target_sparsity: Annotated[Optional[float], typer.Option(
        "--target-sparsity", help="Pick T as this quantile of |act| on the first tokens (the "
        "CATS rule), e.g. 0.5.")] = None,
    report_path: ReportOpt = None,
    as_json: JsonOpt = False,
    *, model: ModelChoice, tokens: TokenChoice, text: TextChoice, overrides: Overrides,
    scale: ScaleChoice,
) -> None:
    """Activation sparsity of the hidden layer: per token, per unit, overlap, savings."""
    if text.given:
        text.refuse(tokens)
        if scale.wanted_text(text):  # text shards, or a cluster: ffncli/cluster.py
            from ffncli.cluster import sweep_command

            sweep_command(model, text, overrides, scale, threshold=threshold,
                          target_sparsity=target_sparsity, report_path=report_path,
                          as_json=as_json)
        else:
            _relu_stats_text(model, text, overrides, threshold, target_sparsity, report_path,
                             as_json)
        return
    if scale.wanted(tokens):  # many shards, or a cluster: ffncli/cluster.py
        from ffncli.cluster import relu_stats_command

        relu_stats_command(model, tokens, overrides, scale, threshold=threshold,
                           target_sparsity=target_sparsity, as_json=as_json)
        return
    from ffncli import render, report
    from ffncli.model import load_model, load_tokens
    from ffncli.sparsity import relu_stats

    loaded = load_model(model, overrides)
    inputs = load_tokens(tokens, loaded.engine.d_model)
    with render.progress(inputs.n_tokens, as_json) as progress:
        result = relu_stats(loaded.engine, inputs, threshold=threshold,
                            target_sparsity=target_sparsity,
                            allow_nonfinite=tokens.allow_nonfinite, progress=progress)
    report.save_stats(report_path, result, model, tokens)
    render.emit_stats(result, as_json)


def _relu_stats_text(model: ModelChoice, text: TextChoice, overrides: Overrides,
                     threshold: float | None, target_sparsity: float | None,
                     report_path: Path | None, as_json: bool) -> None:
    """``relu-stats --text/--ids``: every selected layer's statistics on its real input."""
    from ffncli import render, report
    from ffncli.capture import parse_layers, sweep
    from ffncli.model import load_sequences, open_forward

    forward = open_forward(model, overrides)
    sequences = load_sequences(text, forward, forward.weights)
    layers = parse_layers(model.layer, forward.n_layers)
    with render.progress(sequences.tokens * (layers[-1] + 1), as_json) as progress:
        result = sweep(forward, sequences, layers, threshold=threshold,
                       target_sparsity=target_sparsity, progress=progress)
    report.save_sweep(report_path, render.sweep_json(result), report.command_inputs(
        model.preset, model.config, forward.weights, text=text.text, ids=text.ids))
    render.emit_sweep(result, as_json)


CAPTURE_MODEL = {name: MODEL[name] for name in ("config", "weights", "hub_model", "layer",
                                                 "dtype")}


@app.command()
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
    *, model: ModelChoice, text: TextChoice, scale: ScaleChoice,
) -> None:
    """Run real text through the whole model; save the input every layer's FFN receives."""
    from ffncli import render
    from ffncli.capture import capture as capture_layers
    from ffncli.capture import parse_layers
    from ffncli.model import load_sequences, open_forward

    if not text.given:
        raise InputError("capture: give the text with --text FILE or its token ids with --ids "
                         "FILE")
    if scale.wanted_text(text):  # text shards, or a cluster: ffncli/cluster.py
        from ffncli.cluster import capture_command

        capture_command(model, text, scale, out=out, force=force, as_json=as_json)
        return
    forward = open_forward(model, Overrides())
    sequences = load_sequences(text, forward, forward.weights)
    layers = parse_layers(model.layer, forward.n_layers)
    with render.progress(sequences.tokens * (layers[-1] + 1), as_json) as progress:
        result = capture_layers(forward, sequences, layers, out, force=force,
                                inputs=(text.text, text.ids, forward.weights),
                                progress=progress)
    render.emit_capture(result, as_json)


@app.command()
def presets(as_json: JsonOpt = False) -> None:
    """List the built-in presets with their sizes."""
    from ffncli import render
    from ffncli.counting import presets_summary

    render.emit_presets(presets_summary(), as_json)


# ---------------------------------------------------------------------------------------------
# The one error boundary.


def _usage_message(exc: typer.TyperException) -> str:
    """Click's usage error as one line in our style, without its usage banner."""
    if type(exc).__name__ == "NoSuchOption":  # name the closest options of the command
        option = str(getattr(exc, "option_name", ""))
        ctx = getattr(exc, "ctx", None)
        known = [o for p in (ctx.command.params if ctx else ()) for o in p.opts + p.secondary_opts
                 if o.startswith("--")]
        from ffncli.validate import suggest

        return f"no such option: {option}{suggest(option, known)}"
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    message = message.replace("Invalid value for '", "option '", 1)
    return message[:1].lower() + message[1:]


def run(argv: list[str] | None = None) -> int:
    """Run the app once and return its exit code: the one place user errors are caught.

    A core ``FfnError`` and Typer's own usage errors become one ``error: ...`` line on stderr
    (exit 2); NumPy and Python warnings never reach the user. Bugs keep their traceback."""
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = app(args=argv, prog_name="ffncli", standalone_mode=False)
            sys.stdout.flush()
    except FfnError as exc:
        return _fail(str(exc))
    except typer.TyperException as exc:  # Click's usage errors: bad option, value, command
        if type(exc).__name__ == "NoArgsIsHelpError":  # `ffncli` alone: the help, exit 0
            ctx = getattr(exc, "ctx", None)  # Click's UsageError, vendored by Typer
            typer.echo(ctx.get_help() if ctx else str(exc))
            return int(ExitCode.OK)
        return _fail(_usage_message(exc))
    except typer.Abort:
        return _fail("aborted")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.stdout = stdout
    return code if isinstance(code, int) else int(ExitCode.OK)


def _fail(message: str) -> int:
    typer.echo(f"error: {shown(message)}", err=True)
    return int(ExitCode.USAGE)


class _GuardedStdout:
    """sys.stdout, with a failed write (a full disk, a closed pipe, a descriptor closed
    before we started: ``ffncli ... >&-``) raised as OutputError: one ``error:`` line instead
    of a traceback, wherever the output is printed from."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if self._stream is None:
            raise OutputError("cannot write to standard output: it is closed")
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _stdout_error(exc) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            raise _stdout_error(exc) from None

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise OutputError("cannot write to standard output: it is closed")
        return getattr(self._stream, name)


def _stdout_error(exc: OSError) -> OutputError:
    return OutputError(f"cannot write to standard output: {exc.strerror or exc}")


_interrupted: list[int] = []  # the first signal, once it has been raised


def _raise_interrupted(signum: int, frame: object) -> None:
    """The first signal unwinds the work (removing temporary files); one that comes while
    that cleanup runs is ignored, so it cannot cut the cleanup short."""
    if _interrupted:
        return
    _interrupted.append(signum)
    raise Interrupted(signum)


def main() -> None:
    """The console script: set up the process, run once, exit with the code.

    SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted`, so that every ``with`` block
    unwinds (a half-written ``--out`` is removed); the process then exits 128 + signum."""
    quiet_idle_threads()  # before anything imports NumPy: see ffncli/blas.py
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _raise_interrupted)
    try:
        code = run()
    except Interrupted as exc:
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # a second signal now ends it at once
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        _quiet_stdout()
        typer.echo(f"error: interrupted by {signal.Signals(exc.signum).name}", err=True)
        code = 128 + exc.signum
    if code == ExitCode.USAGE:
        _quiet_stdout()
    sys.exit(code)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a full or closed stdout
    cannot print a second error."""
    if sys.stdout is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
