"""The Typer app: parse options, call one core function, render. No math here.

The single error boundary is :func:`run`: a core ``FfnError`` becomes one ``error: ...`` line
on stderr and exit code 2; a failed check exits 1. Heavy modules (NumPy) are imported inside
the commands that need them, so ``ffncli params`` starts as fast as Typer does.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterator, Optional, TextIO

import typer

from ffncli.blas import quiet_idle_threads
from ffncli.errors import ExitCode, FfnError, InputError, Interrupted, OutputError, shown

if TYPE_CHECKING:
    from ffncli.spec import ModelSpec

app = typer.Typer(
    name="ffncli",
    help="Inspect, run and count the position-wise feed-forward network (FFN) of Transformers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# Options shared by every command that needs a spec.
PresetOpt = Annotated[Optional[str], typer.Option(
    "--preset", "-p", help="Built-in preset name (see `ffncli presets`) or a YAML file.")]
ConfigOpt = Annotated[Optional[Path], typer.Option(
    "--config", help="A Hugging Face config.json.", dir_okay=False)]
DModelOpt = Annotated[Optional[int], typer.Option("--d-model", help="What-if: model width.")]
DffOpt = Annotated[Optional[int], typer.Option("--d-ff", help="What-if: FFN hidden width.")]
ActOpt = Annotated[Optional[str], typer.Option(
    "--activation", help="What-if: relu, gelu, gelu_tanh, silu, swish, sigmoid, identity "
    "(keeps the gating), or glu, reglu, geglu, swiglu, bilinear (gated).")]
GatedOpt = Annotated[Optional[bool], typer.Option(
    "--gated/--no-gated", help="What-if: a gated (GLU) FFN with three matrices, or not.",
    show_default=False)]
ExpertsOpt = Annotated[Optional[int], typer.Option("--experts", help="What-if: experts.")]
TopKOpt = Annotated[Optional[int], typer.Option("--top-k", help="What-if: experts per token.")]
BetaOpt = Annotated[Optional[float], typer.Option(
    "--beta", help="Swish_beta: x * sigmoid(beta x) for silu/swish.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def resolve_spec(
    preset: str | None,
    config: Path | None,
    *,
    d_model: int | None = None,
    d_ff: int | None = None,
    activation: str | None = None,
    gated: bool | None = None,
    experts: int | None = None,
    top_k: int | None = None,
    beta: float | None = None,
    capacity_factor: float | None = None,
    match_params: bool = False,
    multiple_of: int = 1,
    default_preset: str | None = None,
) -> ModelSpec:
    from ffncli.spec import Overrides, apply_overrides, load_preset

    if preset is not None and config is not None:
        raise InputError("give --preset or --config, not both")
    if config is not None:
        from ffncli.hfconfig import load_config

        spec = load_config(config)
    elif preset is not None:
        spec = load_preset(preset)
    elif default_preset is not None:
        spec = load_preset(default_preset)
    else:
        raise InputError("give a model: --preset NAME|FILE or --config config.json")
    overrides = Overrides(d_model=d_model, d_ff=d_ff, activation=activation, gated=gated,
                          experts=experts, top_k=top_k, beta=beta,
                          capacity_factor=capacity_factor, match_params=match_params,
                          multiple_of=multiple_of)
    return apply_overrides(spec, overrides)


@app.command()
def params(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    d_model: DModelOpt = None,
    d_ff: DffOpt = None,
    activation: ActOpt = None,
    gated: GatedOpt = None,
    experts: ExpertsOpt = None,
    top_k: TopKOpt = None,
    match_params: Annotated[bool, typer.Option(
        "--match-params", help="Pick d_ff of a gated FFN so it has about the parameters of the "
        "two-matrix FFN of the given d_ff (the 2/3 rule, rounded to nearest).")] = False,
    multiple_of: Annotated[int, typer.Option(
        "--multiple-of", help="With --match-params: round d_ff up to a multiple of this "
        "(LLaMA uses 256).", min=1)] = 1,
    seq_len: Annotated[Optional[int], typer.Option(
        "--seq-len", help="Sequence length for attention-score FLOPs (default: the preset's).",
        min=1)] = None,
    batch: Annotated[int, typer.Option(
        "--batch", help="Sequences decoded at once, for the KV cache at --seq-len x --batch.",
        min=1)] = 1,
    weights: Annotated[Optional[Path], typer.Option(
        "--weights", help="A .safetensors file: count its parameters from the header alone "
        "and compare with the spec (exit 1 on a mismatch).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Count parameters, FLOPs per token, weight memory and KV cache: FFN, attention, norms."""
    from dataclasses import replace

    from ffncli import render
    from ffncli.counting import count, kv_cache
    from ffncli.hfconfig import UnsupportedModelType

    try:
        spec = resolve_spec(preset, config, d_model=d_model, d_ff=d_ff, activation=activation,
                            gated=gated, experts=experts, top_k=top_k,
                            match_params=match_params, multiple_of=multiple_of)
    except UnsupportedModelType as exc:
        if weights is None:
            raise
        from ffncli.checkpoint import count_file, read_header

        only = render.FileOnlyResult(count_file(read_header(weights)), str(weights), str(exc))
        if as_json:
            render.emit_json(render.file_only_json(only))
        else:
            render.print_file_only(only)
        return
    if seq_len is not None:
        spec = replace(spec, seq_len=seq_len)
    file_count = None
    if weights is not None:
        from ffncli.checkpoint import count_file, read_header

        file_count = count_file(read_header(weights))
    result = render.ParamsResult(count(spec), file_count, str(weights) if weights else None,
                                 kv_cache(spec, spec.seq_len, batch))
    if as_json:
        render.emit_json(render.params_json(result))
    else:
        render.print_params(result)
    if not result.matches:
        raise typer.Exit(ExitCode.CHECK_FAILED)


# Options of the commands that run an FFN.
WeightsOpt = Annotated[Optional[Path], typer.Option(
    "--weights", help="FFN weights: .npz (w1 b1 w2 b2; gated w b v c w2 b2) or a Hugging Face "
    ".safetensors checkpoint (with --layer). Default: random, from the preset's seed.",
    dir_okay=False)]
LayerOpt = Annotated[int, typer.Option("--layer", help="Layer of a .safetensors checkpoint.",
                                       min=0)]
InputOpt = Annotated[Optional[Path], typer.Option(
    "--input", "-i", help="Tokens: .npy (1-D, 2-D tokens x d_model, or 3-D batch x seq x "
    "d_model), or .txt/.csv with one token per row.", dir_okay=False)]
RandomOpt = Annotated[Optional[int], typer.Option(
    "--random", help="Instead of --input: N tokens drawn from normal(0, 1) with --seed.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of --random tokens.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="float32 or float64: the computation's "
                                                      "dtype.")]
MemOpt = Annotated[Optional[str], typer.Option(
    "--max-memory", help="Budget for random weights (default 2GB, never more than is free).")]
CapacityOpt = Annotated[Optional[float], typer.Option(
    "--capacity-factor", help="Mixture of experts: each expert takes at most "
    "ceil(cf * tokens * top_k / experts) tokens, in order; the rest are dropped.")]
NonfiniteOpt = Annotated[bool, typer.Option(
    "--allow-nonfinite", help="Compute with NaN and infinity instead of refusing them.")]


def _model(preset, config, weights, layer, dtype, max_memory, **overrides):
    """The spec (from --config, a config.json beside the weights, or --preset) and its FFN."""
    from ffncli import runner
    from ffncli.weights import default_config_beside, parse_size

    if config is None and preset is None and weights is not None:
        if weights.suffix.lower() == ".safetensors":
            config = default_config_beside(weights)
    if config is None and preset is None:
        raise InputError("give a model: --preset NAME|FILE, --config config.json, or "
                         "--weights model.safetensors with a config.json beside it")
    spec = resolve_spec(preset, config, **overrides)
    budget = parse_size(max_memory) if max_memory is not None else None
    return runner.build_model(spec, weights, layer, runner.parse_dtype(dtype), budget)


@contextmanager
def _progress(total: int, as_json: bool) -> Iterator[Callable[[int], None] | None]:
    """A progress callback drawing a bar on stderr for long work on a terminal, else None."""
    if as_json or not sys.stderr.isatty() or total < 200_000:
        yield None
        return
    from rich.progress import Progress

    from ffncli.render import console

    with Progress(console=console(stderr=True), transient=True) as bar:
        task = bar.add_task("tokens", total=total)
        yield lambda done: bar.update(task, completed=done)


@app.command("run")
def run_cmd(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    weights: WeightsOpt = None,
    layer: LayerOpt = 0,
    input: InputOpt = None,
    random: RandomOpt = None,
    seed: SeedOpt = 0,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Write the output to this .npy (atomically).", dir_okay=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
    residual: Annotated[bool, typer.Option("--residual", help="Return x + FFN(x).")] = False,
    dtype: DtypeOpt = "float32",
    precision: Annotated[int, typer.Option("--precision", help="Digits shown.", min=0,
                                           max=12)] = 4,
    allow_nonfinite: NonfiniteOpt = False,
    max_memory: MemOpt = None,
    d_model: DModelOpt = None,
    d_ff: DffOpt = None,
    activation: ActOpt = None,
    gated: GatedOpt = None,
    experts: ExpertsOpt = None,
    top_k: TopKOpt = None,
    beta: BetaOpt = None,
    capacity_factor: CapacityOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the FFN on token vectors: print the output, or stream it to a .npy file."""
    from ffncli import render, runner

    model = _model(preset, config, weights, layer, dtype, max_memory, d_model=d_model,
                   d_ff=d_ff, activation=activation, gated=gated, experts=experts,
                   top_k=top_k, beta=beta, capacity_factor=capacity_factor)
    tokens = runner.resolve_input(input, random, model.ffn.d_model, seed)
    if as_json and out is None and tokens.n_tokens > runner.SMALL_TOKENS:
        raise InputError(f"--json prints at most {runner.SMALL_TOKENS} output tokens; the input "
                         f"has {tokens.n_tokens:,}: add --out FILE.npy")
    with _progress(tokens.n_tokens, as_json) as progress:
        result = runner.run_ffn(model, tokens, out=out, force=force, residual=residual,
                                allow_nonfinite=allow_nonfinite, progress=progress)
    if as_json:
        render.emit_json(render.run_json(result))
    else:
        render.print_run(result, precision)


@app.command("permute-check")
def permute_check_cmd(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    weights: WeightsOpt = None,
    layer: LayerOpt = 0,
    impl: Annotated[Optional[str], typer.Option(
        "--impl", help="Check your own FFN: package.module:function, importable from the "
        "current directory, taking (tokens, d_model) and returning (tokens, d_out).")] = None,
    input: InputOpt = None,
    random: RandomOpt = None,
    seed: SeedOpt = 0,
    trials: Annotated[int, typer.Option("--trials", help="Random permutations, besides "
                                        "reverse, cyclic shift and first/last swap.", min=0)] = 8,
    dtype: DtypeOpt = "float32",
    rtol: Annotated[Optional[float], typer.Option(
        "--rtol", help="Relative tolerance (default: float32 1.3e-6, float64 1e-7).")] = None,
    atol: Annotated[Optional[float], typer.Option(
        "--atol", help="Absolute tolerance (default: float32 1e-5, float64 1e-7).")] = None,
    junit_xml: Annotated[Optional[Path], typer.Option(
        "--junit-xml", help="Also write a JUnit XML report (one testcase per property).",
        dir_okay=False)] = None,
    allow_nonfinite: NonfiniteOpt = False,
    max_memory: MemOpt = None,
    d_model: DModelOpt = None,
    d_ff: DffOpt = None,
    activation: ActOpt = None,
    gated: GatedOpt = None,
    experts: ExpertsOpt = None,
    top_k: TopKOpt = None,
    beta: BetaOpt = None,
    capacity_factor: CapacityOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check that an FFN is position-wise: exit 0 if every property holds, 1 if not."""
    from ffncli import checks, render, runner
    from ffncli.tokens import check_finite, from_array

    np_dtype = runner.parse_dtype(dtype)
    if impl is not None:
        if weights is not None:
            raise InputError("give --impl or --weights, not both")
        if d_model is None and preset is None and config is None:
            raise InputError("option --impl: give the width with --d-model N (or a --preset)")
        width = d_model if d_model is not None else resolve_spec(preset, config).d_model
        fn, target = checks.load_impl(impl), impl
    else:
        model = _model(preset, config, weights, layer, dtype, max_memory, d_model=d_model,
                       d_ff=d_ff, activation=activation, gated=gated, experts=experts,
                       top_k=top_k, beta=beta, capacity_factor=capacity_factor)
        width, fn, target = model.ffn.d_model, model.ffn, model.spec.name
    tokens = runner.resolve_input(input, random, width, seed)
    if tokens.n_tokens > 100_000:
        raise InputError(f"permute-check holds the input in memory and runs it many times; "
                         f"{tokens.n_tokens:,} tokens is too many (at most 100,000)")
    x = tokens.matrix(np_dtype)  # read once; checked in memory
    if not allow_nonfinite:
        in_memory = from_array(x)
        in_memory.path = tokens.path  # name the file in the error
        check_finite(in_memory, np_dtype, x.shape[0])
    report = checks.permute_check(checks.guarded(fn, target, np_dtype), x, target=target,
                                  input_shape=tokens.shape if len(tokens.shape) > 1 else
                                  (1, tokens.d_model), trials=trials, seed=seed, rtol=rtol,
                                  atol=atol)
    if junit_xml is not None:
        try:
            junit_xml.write_text(checks.junit_xml(report), encoding="utf-8")
        except OSError as exc:
            raise InputError(f"option --junit-xml: cannot write {junit_xml}: "
                             f"{exc.strerror}") from None
    if as_json:
        render.emit_json(render.check_json(report))
    else:
        render.print_check(report)
    if not report.passed:
        raise typer.Exit(ExitCode.CHECK_FAILED)


@app.command("relu-stats")
def relu_stats_cmd(
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    weights: WeightsOpt = None,
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
    d_model: DModelOpt = None,
    d_ff: DffOpt = None,
    activation: ActOpt = None,
    gated: GatedOpt = None,
    experts: ExpertsOpt = None,
    top_k: TopKOpt = None,
    beta: BetaOpt = None,
    capacity_factor: CapacityOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Activation sparsity of the hidden layer: per token, per unit, overlap, savings."""
    from ffncli import render, runner
    from ffncli.sparsity import relu_stats

    model = _model(preset, config, weights, layer, dtype, max_memory, d_model=d_model,
                   d_ff=d_ff, activation=activation, gated=gated, experts=experts,
                   top_k=top_k, beta=beta, capacity_factor=capacity_factor)
    tokens = runner.resolve_input(input, random, model.ffn.d_model, seed)
    with _progress(tokens.n_tokens, as_json) as progress:
        result = relu_stats(model.ffn, tokens, threshold=threshold,
                            target_sparsity=target_sparsity, allow_nonfinite=allow_nonfinite,
                            progress=progress)
    if as_json:
        render.emit_json(render.stats_json(result))
    else:
        render.print_stats(result)


@app.command()
def presets(as_json: JsonOpt = False) -> None:
    """List the built-in presets with their sizes."""
    from ffncli import render
    from ffncli.spec import load_preset, preset_names

    rows = render.presets_rows([load_preset(name) for name in preset_names()])
    if as_json:
        render.emit_json({"presets": rows})
    else:
        render.print_presets(rows)


def _usage_message(exc: typer.TyperException) -> str:
    """Click's usage error as one line in our style, without its usage banner."""
    if type(exc).__name__ == "NoSuchOption":  # name the closest options of the command
        option = str(getattr(exc, "option_name", ""))
        ctx = getattr(exc, "ctx", None)
        known = [o for p in (ctx.command.params if ctx else ()) for o in p.opts + p.secondary_opts
                 if o.startswith("--")]
        from ffncli.spec import suggest

        return f"no such option: {option}{suggest(option, known)}"
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    message = message.replace("Invalid value for '", "option '", 1)
    return message[:1].lower() + message[1:]


def run(argv: list[str] | None = None) -> int:
    """Run the app once and return its exit code: the one place user errors are caught.

    A core ``FfnError`` and Typer's own usage errors become one ``error: ...`` line on stderr
    (exit 2); NumPy and Python warnings never reach the user. Bugs keep their traceback."""
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = app(args=argv, prog_name="ffncli", standalone_mode=False)
            sys.stdout.flush()
    except FfnError as exc:
        return _fail(str(exc))
    except typer.TyperException as exc:  # Click's usage errors: bad option, value, command
        if type(exc).__name__ == "NoArgsIsHelpError":  # `ffncli` alone: the help, exit 0
            typer.echo(exc.ctx.get_help() if getattr(exc, "ctx", None) else str(exc))
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
    """sys.stdout, with a failed write (a full disk, a closed pipe) raised as OutputError:
    one ``error:`` line instead of a traceback, wherever the output is printed from."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _stdout_error(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise _stdout_error(exc) from None

    def __getattr__(self, name: str) -> Any:
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
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
