"""The Typer app: parse options, call one core function, render. No math here.

Each command turns its options into one call of the core (``ffncli.model``, ``runner``,
``checks``, ``sparsity``, ``counting``) and hands the result to ``render``. The single error
boundary is :func:`run`: a core ``FfnError`` becomes one ``error: ...`` line on stderr and
exit code 2; a failed check exits 1. Heavy modules (NumPy) are imported inside the commands
that need them, so ``ffncli params`` starts as fast as Typer does.
"""

from __future__ import annotations

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
from ffncli.errors import ExitCode, FfnError, ImplError, Interrupted, OutputError, shown
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
WeightsOpt = Annotated[Optional[Path], typer.Option(
    "--weights", help="FFN weights: .npz (w1 b1 w2 b2; gated w b v c w2 b2), a Hugging Face "
    "checkpoint (with --layer: a .safetensors file, a model.safetensors.index.json or a model "
    "folder; GPTQ and AWQ layers dequantised) or a llama.cpp .gguf (with --layer). Default: "
    "random, from the preset's seed.")]
HubModelOpt = Annotated[Optional[str], typer.Option(
    "--model", metavar="ORG/NAME[@REVISION]", help="Instead of --weights: a model in the "
    "local Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub; "
    "revision default main). Never downloads.", show_default=False)]
LayerOpt = Annotated[int, typer.Option("--layer", help="Layer of a checkpoint.")]
InputOpt = Annotated[Optional[Path], typer.Option(
    "--input", "-i", help="Tokens: .npy (1-D, 2-D tokens x d_model, or 3-D batch x seq x "
    "d_model), or .txt/.csv with one token per row.")]
RandomOpt = Annotated[Optional[int], typer.Option(
    "--random", help="Instead of --input: N tokens drawn from normal(0, 1) with --seed.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of --random tokens.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="float32 or float64: the computation's "
                                                      "dtype.")]
MemOpt = Annotated[Optional[str], typer.Option(
    "--max-memory", help="Budget for random weights (default 2GB, never more than is free).")]
NonfiniteOpt = Annotated[bool, typer.Option(
    "--allow-nonfinite", help="Compute with NaN and infinity instead of refusing them.")]

# The what-if options: each command declares the ones it uses, and receives them as one
# ``Overrides`` (see :func:`what_if`).
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
SHAPE = ("d_model", "d_ff", "activation", "gated", "experts", "top_k")
RUNNING = SHAPE + ("beta", "capacity_factor")
COUNTING = SHAPE + ("match_params", "multiple_of", "seq_len")

Command = TypeVar("Command", bound=Callable[..., None])


def what_if(*names: str) -> Callable[[Command], Command]:
    """Give a command the what-if options ``names`` and pass them as one ``overrides``.

    Typer reads a command's options from its signature, so the wrapper's signature is the
    command's own (less ``overrides``) followed by the chosen options."""
    def decorate(command: Command) -> Command:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values()
               if p.name != "overrides"]
        extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                   default=Overrides.__dataclass_fields__[name].default,
                                   annotation=WHAT_IF[name]) for name in names]

        @functools.wraps(command)
        def wrapper(**options: Any) -> None:
            overrides = Overrides(**{name: options.pop(name) for name in names})
            command(overrides=overrides, **options)

        wrapper.__signature__ = inspect.Signature(own + extra)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in own + extra}
        return wrapper  # type: ignore[return-value]

    return decorate


# ---------------------------------------------------------------------------------------------
# The commands.


@app.command()
@what_if(*COUNTING)
def params(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    batch: Annotated[int, typer.Option(
        "--batch", help="Sequences decoded at once, for the KV cache at --seq-len x --batch.")
    ] = 1,
    weights: Annotated[Optional[Path], typer.Option(
        "--weights", help="A .safetensors file, a model.safetensors.index.json or a model "
        "folder: count its parameters from the headers alone and compare with the spec (from "
        "--preset, --config or the config.json beside the weights; exit 1 on a mismatch).")
    ] = None,
    hub_model: HubModelOpt = None,
    as_json: JsonOpt = False,
    *, overrides: Overrides,
) -> None:
    """Count parameters, FLOPs per token, weight memory and KV cache: FFN, attention, norms."""
    from ffncli import render
    from ffncli.model import count_model, weights_of

    result = count_model(preset, config, overrides, weights_of(weights, hub_model), batch)
    render.emit_params(result, as_json)
    if not result.matches:
        raise typer.Exit(ExitCode.CHECK_FAILED)


@app.command("run")
@what_if(*RUNNING)
def run_cmd(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    weights: WeightsOpt = None,
    hub_model: HubModelOpt = None,
    layer: LayerOpt = 0,
    input: InputOpt = None,
    random: RandomOpt = None,
    seed: SeedOpt = 0,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Write the output to this .npy (atomically).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
    residual: Annotated[bool, typer.Option("--residual", help="Return x + FFN(x).")] = False,
    dtype: DtypeOpt = "float32",
    precision: Annotated[int, typer.Option("--precision", help="Digits shown (0 to 12).")] = 4,
    allow_nonfinite: NonfiniteOpt = False,
    max_memory: MemOpt = None,
    as_json: JsonOpt = False,
    *, overrides: Overrides,
) -> None:
    """Run the FFN on token vectors: print the output, or stream it to a .npy file."""
    from ffncli import render, runner
    from ffncli.model import load_model, weights_of

    whole("option --precision", precision, 0, 12)
    model = load_model(preset, config, overrides, weights_of(weights, hub_model), layer, dtype,
                       max_memory)
    tokens = runner.resolve_input(input, random, model.engine.d_model, seed)
    runner.check_printable(tokens, out, as_json)
    with render.progress(tokens.n_tokens, as_json) as progress:
        result = runner.run_ffn(model, tokens, out=out, force=force, residual=residual,
                                allow_nonfinite=allow_nonfinite, progress=progress)
    render.emit_run(result, as_json, precision)


@app.command("permute-check")
@what_if(*RUNNING)
def permute_check_cmd(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    weights: WeightsOpt = None,
    hub_model: HubModelOpt = None,
    layer: LayerOpt = 0,
    impl: Annotated[Optional[str], typer.Option(
        "--impl", help="Check your own FFN: package.module:function, importable from the "
        "current directory, taking (tokens, d_model) and returning (tokens, d_out).")] = None,
    input: InputOpt = None,
    random: RandomOpt = None,
    seed: SeedOpt = 0,
    trials: Annotated[int, typer.Option("--trials", help="Random permutations, besides "
                                        "reverse, cyclic shift and first/last swap.")] = 8,
    dtype: DtypeOpt = "float32",
    rtol: Annotated[Optional[float], typer.Option(
        "--rtol", help="Relative tolerance (default: float32 1.3e-6, float64 1e-7).")] = None,
    atol: Annotated[Optional[float], typer.Option(
        "--atol", help="Absolute tolerance (default: float32 1e-5, float64 1e-7).")] = None,
    junit_xml: Annotated[Optional[Path], typer.Option(
        "--junit-xml", help="Also write a JUnit XML report (one testcase per property; an "
        "<error> if the FFN misbehaves), atomically, never over an input of the command.")
    ] = None,
    timeout: Annotated[Optional[float], typer.Option(
        "--timeout", metavar="SECONDS", help="Limit on each call of the FFN (the check makes "
        "about 80 + --trials) and on importing the --impl module: one that takes longer is an "
        "error, exit 2. POSIX only. Default: no limit.", show_default=False)] = None,
    allow_nonfinite: NonfiniteOpt = False,
    max_memory: MemOpt = None,
    as_json: JsonOpt = False,
    *, overrides: Overrides,
) -> None:
    """Check that an FFN is position-wise: exit 0 if every property holds, 1 if not."""
    from ffncli import checks, render
    from ffncli.model import weights_of

    weights = weights_of(weights, hub_model, impl)
    target = checks.load_target(impl, preset, config, overrides, weights, layer, dtype,
                                max_memory, timeout)
    report_path = checks.report_path(junit_xml, target, input, preset, config, weights)
    try:
        report = checks.check_command(target, input, random, seed, trials=trials, rtol=rtol,
                                      atol=atol, allow_nonfinite=allow_nonfinite)
    except ImplError as exc:  # the FFN misbehaved: the report says so too, then exit 2
        render.junit_report(report_path, target.name, exc)
        raise
    render.junit_report(report_path, target.name, report)
    render.emit_check(report, as_json)
    if not report.passed:
        raise typer.Exit(ExitCode.CHECK_FAILED)


@app.command("relu-stats")
@what_if(*RUNNING)
def relu_stats_cmd(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    weights: WeightsOpt = None,
    hub_model: HubModelOpt = None,
    layer: LayerOpt = 0,
    input: InputOpt = None,
    random: RandomOpt = None,
    seed: SeedOpt = 0,
    threshold: Annotated[Optional[float], typer.Option(
        "--threshold", help="Count |act| <= T as inactive (default: pre-activation <= 0).")
    ] = None,
    target_sparsity: Annotated[Optional[float], typer.Option(
        "--target-sparsity", help="Pick T as this quantile of |act| on the first tokens (the "
        "CATS rule), e.g. 0.5.")] = None,
    dtype: DtypeOpt = "float32",
    allow_nonfinite: NonfiniteOpt = False,
    max_memory: MemOpt = None,
    as_json: JsonOpt = False,
    *, overrides: Overrides,
) -> None:
    """Activation sparsity of the hidden layer: per token, per unit, overlap, savings."""
    from ffncli import render, runner
    from ffncli.model import load_model, weights_of
    from ffncli.sparsity import relu_stats

    model = load_model(preset, config, overrides, weights_of(weights, hub_model), layer, dtype,
                       max_memory)
    tokens = runner.resolve_input(input, random, model.engine.d_model, seed)
    with render.progress(tokens.n_tokens, as_json) as progress:
        result = relu_stats(model.engine, tokens, threshold=threshold,
                            target_sparsity=target_sparsity, allow_nonfinite=allow_nonfinite,
                            progress=progress)
    render.emit_stats(result, as_json)


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


def _raise_interrupted(signum: int, frame: object) -> None:
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
