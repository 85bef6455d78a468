"""The command line's options, declared once: the model, token, text, what-if and scale groups,
each reaching a command as one frozen record (:func:`grouped`)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import typer

from ffncli.jobs.choices import not_shares
from ffncli.specs.spec import ACTIVATIONS, GLU_VARIANTS

# ---------------------------------------------------------------------------------------------
# Options shared by the commands.

PresetOpt = Annotated[Optional[str], typer.Option(
    "--preset", "-p", help="Built-in preset name (see `ffncli presets`) or a YAML file.")]
ConfigOpt = Annotated[Optional[Path], typer.Option("--config", help="A Hugging Face config.json.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
HubModelOpt = Annotated[Optional[str], typer.Option(
    "--model", metavar="ORG/NAME[@REVISION]", help="Instead of --weights: a model in the "
    "local Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub; "
    "revision default main). Never downloads weights: params counts a model that is not "
    "cached from the Hub by its headers (see --offline).", show_default=False)]
GgufFileOpt = Annotated[Optional[str], typer.Option(
    "--gguf-file", metavar="NAME", help="With --model: the .gguf file of the repository to "
    "count (default: its safetensors weights, else its only .gguf).", show_default=False)]
OfflineOpt = Annotated[bool, typer.Option(
    "--offline", help="With --model: the local Hugging Face cache only, as HF_HUB_OFFLINE=1 "
    "(default: a model whose weights are not cached is counted from the Hub by its headers, "
    "with pip install 'ffncli\\[hub]'; HF_ENDPOINT and HF_TOKEN as huggingface_hub reads "
    "them).")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress bar (it is drawn on stderr, when that is a terminal, "
    "for work that runs longer than about two seconds).")]
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
        "--allow-nonfinite", help="Compute with NaN and infinity (in the tokens or the "
        "weights) instead of refusing them.")],
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
        "Needs pip install 'ffncli\\[text]'. relu-stats and capture also take many files: a "
        "quoted glob ('corpus/*.txt') or a folder, in name order.")],
    "ids": Annotated[Optional[Path], typer.Option(
        "--ids", help="Instead of --text: token ids, an integer .npy (1-D one sequence, 2-D "
        "sequences x length) or a .txt with one sequence of space-separated ids per line; "
        "also a quoted glob or a folder (its .npy and .txt files).")],
}
DOCUMENT: dict[str, Any] = {
    "text": Annotated[Optional[Path], typer.Option(
        "--text", help="The text to score: UTF-8, tokenised whole as one document (newlines "
        "are text; the tokenizer's BOS first where it adds one) with the tokenizer.json beside "
        "the weights (or a GGUF's own). An encoder's text: each non-empty line one sequence. "
        "Needs pip install 'ffncli\\[text]'.")],
    "ids": Annotated[Optional[Path], typer.Option(
        "--ids", help="Instead of --text: token ids (.npy or .txt as relu-stats reads them), "
        "all sequences joined into one document (no BOS put first).")],
}
SCALE: dict[str, Any] = {
    "workers": Annotated[Optional[int], typer.Option(
        "--workers", help="Run the shards on a local Dask cluster of N worker processes "
        "(pip install 'ffncli\\[dask]'). Default: this process.")],
    "scheduler": Annotated[Optional[str], typer.Option(
        "--scheduler", metavar="ADDRESS", help="Run the shards on the Dask cluster of this "
        "scheduler, e.g. tcp://10.0.0.5:8786 (the workers read --weights and --input from the "
        "same paths).")],
    "skip_bad": Annotated[bool, typer.Option(
        "--skip-bad", help="With many shards: leave a bad shard out (listed on stderr) and go "
        "on, instead of stopping at it.")],
    "verbose": Annotated[bool, typer.Option(
        "--verbose", help="With --workers or --scheduler: show Dask's own log lines (warnings "
        "and errors of the scheduler and workers) on stderr. Default: only ffncli's.")],
}
TRAINING: dict[str, Any] = {
    "train": Annotated[Optional[str], typer.Option(
        "--train", metavar="full|lora|qlora", help="The memory of fine-tuning: weights, "
        "gradients, fp32 master weights, optimizer states and activations (an estimate), at "
        "--seq-len x --batch; LoRA's adapters counted exactly, QLoRA's base in NF4.",
        show_default=False)],
    "optimizer": Annotated[Optional[str], typer.Option(
        "--optimizer", help="adamw (default), adam, sgd, sgd-momentum, adafactor or adamw-8bit "
        "(bitsandbytes).", show_default=False)],
    "precision": Annotated[Optional[str], typer.Option(
        "--precision", help="bf16-mixed (default), fp16-mixed, fp32 or bf16 (pure).",
        show_default=False, rich_help_panel="Training and fit")],  # run's --precision: Output
    "lora_rank": Annotated[Optional[int], typer.Option(
        "--lora-rank", metavar="R", help="LoRA's rank (default 8).", show_default=False)],
    "lora_targets": Annotated[Optional[str], typer.Option(
        "--lora-targets", metavar="LIST", help="Projections LoRA adapts, comma-separated: q, "
        "k, v, o, gate, up, down, router, or attention, ffn, all-linear (the default; every "
        "linear layer but the output head, as peft's).", show_default=False)],
    "flash_attention": Annotated[bool, typer.Option(
        "--flash-attention", help="Attention that keeps no seq_len^2 scores (FlashAttention).")],
    "recompute": Annotated[bool, typer.Option(
        "--recompute", help="Full activation recomputation: keep each layer's input only.")],
    "dropout": Annotated[bool, typer.Option(
        "--dropout/--no-dropout", help="Count dropout's masks and outputs among the "
        "activations (the paper's formula does; models trained without dropout keep none).")],
    "fit": Annotated[Optional[str], typer.Option(
        "--fit", metavar="SIZE", help="What fits in this memory: 24GB, 24GiB or 2x80GB (the "
        "sum): the longest --seq-len at --batch and the largest --batch at --seq-len for "
        "inference, for every weight and cache dtype; with --train, whether the plan fits.",
        show_default=False)],
    "reserve": Annotated[Optional[str], typer.Option(
        "--reserve", metavar="SHARE|SIZE", help="Memory held back from --fit: 10% or 2GB "
        "(default none).", show_default=False)],
}
FormatOpt = Annotated[str, typer.Option(
    "--format", help="Tables as rich (for a terminal), markdown or csv (to paste into an issue, "
    "a paper or a spreadsheet; --json has every field).")]
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


CAPTURE_MODEL = {name: MODEL[name] for name in ("config", "hub_model", "layer", "dtype")}
CAPTURE_MODEL["weights"] = Annotated[Optional[Path], typer.Option(
    "--weights", help="The checkpoint the whole model runs from: a .safetensors file, a "
    "model.safetensors.index.json, a model folder (with its config.json) or a llama.cpp .gguf. "
    "Required, or --model.")]

PERPLEXITY_MODEL = {**CAPTURE_MODEL, "layer": Annotated[Optional[str], typer.Option(
    "--layer", metavar="N", help="The layers whose FFN --sparsify sparsifies: N, A-B or all "
    "(the default); the model always runs whole.", show_default=False)]}

OUTLIERS_MODEL = {name: CAPTURE_MODEL[name] for name in ("weights", "hub_model", "config",
                                                          "dtype")}

# Each command's one or two examples, at the end of its --help (checked against its options
# by tests/test_commands.py); a new command's in a block of its own below.
EXAMPLES = {
    "params": ("ffncli params --preset base",
               "ffncli params --config config.json --seq-len 4096 --json"),
    "presets": ("ffncli presets",),
    "run": ("ffncli run --preset tiny --input the_cat_sat.txt",
            "ffncli run --weights model.safetensors --layer 3 --input acts.npy --out out.npy"),
    "permute-check": ("ffncli permute-check --preset base --random 64",
                      "ffncli permute-check --impl mymodel.layers:feed_forward --d-model 512 "
                      "--random 256 --junit-xml permute-check.xml"),
    "relu-stats": ("ffncli relu-stats --preset gpt2 --random 500",
                   "ffncli relu-stats --weights all-MiniLM-L6-v2/ --text alice.txt --report "
                   "sparsity.html"),
    "capture": ("ffncli capture --weights all-MiniLM-L6-v2/ --text alice.txt --out alice-acts",),
    "perplexity": ("ffncli perplexity --weights SmolLM2-135M-Instruct.Q4_1.gguf --text alice.txt",
                   "ffncli perplexity --weights SmolLM2-135M-Instruct.Q4_1.gguf --text alice.txt "
                   "--sparsify cats --target-sparsity 0.25,0.5 --report cats.html"),
}
EXAMPLES["experts"] = (
    "ffncli experts --weights Qwen3-30B-A3B/ --text alice.txt --report routing.html",
    "ffncli experts --weights gpt-oss-20b/ --text alice.txt --fit 16GB --coverage 0.95")
EXAMPLES["neurons"] = (
    "ffncli neurons --weights SmolLM2-135M-Instruct.Q4_1.gguf --text alice.txt --layer 3 "
    "--units 0-9 --report neurons/",
    "ffncli neurons --weights SmolLM2-135M-Instruct.Q4_1.gguf --layer 3 --units 42")
EXAMPLES["outliers"] = (
    "ffncli outliers --weights SmolLM2-135M-Instruct.Q4_1.gguf --text alice.txt",
    "ffncli outliers --weights SmolLM2-135M-Instruct.Q4_1.gguf --text alice.txt --confirm --json")


def epilog(command: str) -> str:
    """The end of ``command``'s --help: its EXAMPLES."""
    return "Examples:\n\n" + "\n\n".join(f"  $ {line}" for line in EXAMPLES[command])


# Each option under its heading in --help (Typer's rich_help_panel), by its name; the options
# of one command alone (--threshold, --trials, ...) stay under "Options".
PANELS = {
    "Model": ("--preset", "--config", "--weights", "--model", "--gguf-file", "--offline",
              "--layer", "--dtype", "--max-memory"),
    "Tokens": ("--input", "--random", "--seed", "--allow-nonfinite", "--text", "--ids"),
    "What-if": (*(f"--{name.replace('_', '-')}" for name in WHAT_IF), "--gated", "--batch"),
    "Protocol": ("--ctx", "--stride", "--score"),
    "Sparsify": ("--sparsify", "--target-sparsity", "--calibration-text", "--thresholds",
                 "--save-thresholds"),
    "Your FFN (--impl)": ("--impl", "--impl-args", "--train-mode", "--timeout",
                          "--load-timeout"),
    "Training and fit": ("--train", "--optimizer", "--lora-rank",
                         "--lora-targets", "--flash-attention", "--recompute", "--dropout",
                         "--fit", "--reserve"),
    "Scale-out": ("--workers", "--scheduler", "--skip-bad", "--verbose"),
    "Output": ("--out", "--force", "--residual", "--precision", "--json", "--report",
               "--junit-xml", "--quiet", "--format"),
}


def put_in_panels(app: typer.Typer) -> None:
    """Give every option of ``app``'s commands its heading of PANELS."""
    panel_of = {option: panel for panel, options in PANELS.items() for option in options}
    for info, _ in _options_of(app):
        # Annotated[T, typer.Option("--out", "-o")]: the first name is Typer's "default"
        first = info.default if isinstance(info.default, str) else ""
        for name in (first, *(info.param_decls or ())):
            if name.split("/")[0] in panel_of and info.rich_help_panel is None:
                info.rich_help_panel = panel_of[name.split("/")[0]]


def _options_of(app: typer.Typer) -> Iterator[tuple[typer.models.OptionInfo, Any]]:
    """Each option of ``app``'s commands: its OptionInfo and its type (``Optional`` unwrapped)."""
    for command in app.registered_commands:
        assert command.callback is not None
        for param in inspect.signature(command.callback, eval_str=True).parameters.values():
            info = next((a for a in typing.get_args(param.annotation)
                         if isinstance(a, typer.models.OptionInfo)), param.default)
            if isinstance(info, typer.models.OptionInfo):
                kind = typing.get_args(param.annotation)[0]
                kinds = [k for k in typing.get_args(kind) if k is not type(None)] or [kind]
                yield info, kinds[0]


# ---------------------------------------------------------------------------------------------
# One parser per kind of value: Click's own take what Python's float() and int() take ('0_5'
# is 5, '1_0' is 10, ' 1 ', 'nan', 'infinity') and read an empty path as the current folder.

_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # ASCII digits
_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")  # past 30 digits every count is refused anyway


def _int(text: str) -> int:
    """A whole number as people write it: 12, -1; nothing else (no '1_0', which int() reads
    as 10, no spaces, no 1e3); the checks of its option bound it."""
    if isinstance(text, int):  # a default, already a number
        return text
    if not _INTEGER.fullmatch(text):
        raise typer.BadParameter(f"expected a whole number such as 12, got {text!r}")
    return int(text)


def _float(text: str) -> float:
    """A number as people write it: 0.5, -2, .5, 1e-6; nothing else (no '0_5', no spaces,
    no nan or inf); one too large for a float is refused too."""
    if isinstance(text, float):  # a default, already a number
        return text
    if not _DECIMAL.fullmatch(text):
        raise typer.BadParameter(f"expected a number such as 0.5 or 1e-6, got {text!r}")
    value = float(text)
    if not math.isfinite(value):
        raise typer.BadParameter(f"{text!r} is too large for a float")
    return value


def shares(text: str) -> str:
    """``S[,S...]`` (perplexity's --target-sparsity): each share a number as :func:`_float`
    reads one (a space after a comma allowed), the text passed on as typed. Its line is the
    one the job's own reader gives (ffncli.jobs.perplexity.parse_targets), which then reads it."""
    for part in text.split(","):
        if not _DECIMAL.fullmatch(part.strip()):
            raise not_shares(part)
    return text


def _path(text: str) -> Path:
    """A path; an empty one (what an unset variable gives: --weights "$MINILM") is refused
    rather than read as the current folder."""
    if isinstance(text, Path):
        return text
    if not text:
        raise typer.BadParameter("expected a path, got an empty value")
    return Path(text)


# their metavars in --help: <float>, <integer>, <path>
_float.__name__, _int.__name__, _path.__name__ = "float", "integer", "path"
PARSERS: dict[Any, Callable[[Any], Any]] = {float: _float, int: _int, Path: _path}


def parse_strictly(app: typer.Typer) -> None:
    """Give every float, integer and path option of ``app``'s commands its parser of
    PARSERS."""
    for info, kind in _options_of(app):
        if kind in PARSERS and info.parser is None and info.click_type is None:
            info.parser = PARSERS[kind]


def one_line_summaries(app: typer.Typer) -> None:
    """Each command's line in ``ffncli --help``: its docstring's first paragraph as one line
    (Rich keeps the docstring's line breaks there, and would break a sentence in two)."""
    for command in app.registered_commands:
        if command.short_help is None and command.callback is not None:
            first = (inspect.getdoc(command.callback) or "").split("\n\n")[0]
            command.short_help = " ".join(first.split())
