"""ffncli as a library: the same answers as the commands, for notebooks and programs.

    import ffncli
    spec = ffncli.load_spec(preset="base")            # or config="config.json", d_ff=4096 ...
    ffncli.count(spec).total                           # 63,082,496: integer arithmetic, no NumPy
    ffncli.params(spec, train="lora", fit="24GB")      # params --train lora --fit 24GB
    ffn = ffncli.build_ffn(spec)                       # random weights from the spec's seed
    y = ffn(x)                                         # (tokens, d_model) -> (tokens, d_model)
    ffncli.permute_check(ffn, x).passed                # True: the FFN is position-wise
    ffncli.relu_stats(ffn, x).mean_inactive_fraction   # the hidden layer's sparsity
    sweep = ffncli.layer_stats("model-folder", text="book.txt")  # every layer, real text
    ffncli.capture_inputs("model-folder", "out", text="book.txt")  # every layer's FFN input
    ffncli.perplexity("model.gguf", text="book.txt", sparsify="cats", target_sparsity=0.5)
    print(ffncli.render(sweep, "markdown"))            # as --format markdown prints it

Every function returns a frozen result object with the fields of the command's JSON output,
and raises an ``ffncli.errors.FfnError`` subclass with a one-line message for bad input: its
arguments are checked here, by name, before anything is read (``spec: expected a ModelSpec
(from ffncli.load_spec), got None``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.base.validate import (
    PARAMETERS,
    brief,
    fail,
    flag,
    number,
    reserve,
    share,
    size,
    whole,
)
from ffncli.base.validate import name as named
from ffncli.counting.fit import Budget
from ffncli.counting.model import ModelCount
from ffncli.counting.model import count as count_spec
from ffncli.counting.results import ParamsResult, PresetSummary, presets_summary
from ffncli.counting.training import MODES, PLAN_PARAMETERS, Plan
from ffncli.errors import InputError, SpecError
from ffncli.jobs.choices import ModelChoice, TextChoice, parse_layers
from ffncli.jobs.params import count_spec_planned
from ffncli.jobs.resolve import open_text, resolve_spec
from ffncli.specs.spec import SPEC_PARAMETERS, ModelSpec, Overrides

if TYPE_CHECKING:
    import numpy as np

    from ffncli.analysis.properties import CheckReport
    from ffncli.analysis.sparsity import SparsityResult
    from ffncli.compute.engine import Engine
    from ffncli.compute.forward.transformer import Transformer
    from ffncli.formats.text import Sequences
    from ffncli.formats.tokens import TokenInput
    from ffncli.jobs.capture import CaptureResult
    from ffncli.jobs.perplexity import PerplexityResult
    from ffncli.jobs.sweep import SweepResult

DTYPES = ("float32", "float64")

# ---------------------------------------------------------------------------------------------
# The arguments, checked by the names the caller gave them.


def _path(where: str, value: Any) -> Path:
    """A file or folder given as a str or a path."""
    if isinstance(value, (str, os.PathLike)) and not isinstance(value, bytes) and str(value):
        return Path(value)
    raise fail(where, "a path (a str or a pathlib.Path)", value)


def _maybe_path(where: str, value: Any) -> Path | None:
    return None if value is None else _path(where, value)


def _spec(value: Any) -> ModelSpec:
    if not isinstance(value, ModelSpec):
        raise SpecError(f"spec: expected a ModelSpec (from ffncli.load_spec), got "
                        f"{brief(value)}")
    return value


def _engine(value: Any) -> Engine:
    from ffncli.compute.engine import Engine

    if not isinstance(value, Engine):
        raise InputError(f"ffn: expected an FFN from ffncli.build_ffn, got {brief(value)}")
    return value


def _maybe_number(where: str, value: Any) -> float | None:
    return None if value is None else number(where, value)


def _maybe_share(where: str, value: Any) -> float | None:
    return None if value is None else share(where, value)


def _layers(value: Any) -> str:
    """``layers``: ``N``, ``A-B`` or ``all`` (an int is ``N``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(whole("layers", value, 0))
    return named("layers", value)


# ---------------------------------------------------------------------------------------------
# Specs and counts (no NumPy).


def load_spec(preset: str | Path | None = None, config: str | Path | None = None,
              **overrides: Any) -> ModelSpec:
    """A model spec from a built-in preset or a YAML file (``preset``), or a Hugging Face
    ``config.json`` (``config``), with what-if ``overrides``: ``d_model``, ``d_ff``,
    ``activation``, ``gated``, ``experts``, ``top_k``, ``beta``, ``capacity_factor``,
    ``match_params``, ``multiple_of``, ``seq_len``."""
    known = [f.name for f in dataclasses.fields(Overrides)]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise SpecError(f"load_spec: unknown override {unknown[0]!r}; known: {', '.join(known)}")
    if preset is None and config is None:
        raise SpecError("load_spec: give preset=NAME|FILE or config=config.json")
    if preset is not None:
        preset = str(_path("preset", preset))
    return resolve_spec(preset, _maybe_path("config", config), Overrides(**overrides),
                        names=SPEC_PARAMETERS)


def count(spec: ModelSpec) -> ModelCount:
    """Parameters per layer and part, FLOPs per token and weight memory (``params --json``)."""
    return count_spec(_spec(spec))


def training_plan(mode: str = "full", *, optimizer: str = "adamw",
                  precision: str = "bf16-mixed", lora_rank: int = 8,
                  lora_targets: str | Sequence[str] = ("all-linear",),
                  flash_attention: bool = False, recompute: bool = False,
                  dropout: bool = True) -> Plan:
    """``params --train MODE`` and its options: a checked :class:`Plan` for :func:`params`
    (its ``seq_len`` and ``batch`` are the spec's and the call's)."""
    named("mode", mode, MODES)
    targets = tuple(t.strip() for t in lora_targets.split(",") if t.strip()) \
        if isinstance(lora_targets, str) else lora_targets
    if not isinstance(targets, tuple | list) or not all(isinstance(t, str) for t in targets):
        raise fail("lora_targets", "a comma-separated str or a sequence of str", lora_targets)
    if mode == "full" and (lora_rank != Plan.lora_rank or targets != Plan.lora_targets):
        raise InputError("lora_rank and lora_targets need mode 'lora' or 'qlora'")
    for where, value in (("flash_attention", flash_attention), ("recompute", recompute),
                         ("dropout", dropout)):
        flag(where, value)
    return Plan(mode, optimizer, precision, lora_rank, tuple(targets),
                flash_attention=flash_attention, recompute=recompute, dropout=dropout).check()


def params(spec: ModelSpec, *, batch: int = 1, train: Plan | str | None = None,
           fit: str | None = None, reserve_memory: str | None = None) -> ParamsResult:
    """What ``params`` answers: the count, the KV cache at the spec's ``seq_len`` x ``batch``;
    with ``train`` (a :func:`training_plan`, or its mode: ``full``, ``lora``, ``qlora``) the
    memory of training it (``--train``); with ``fit`` (``24GB``, ``2x80GB``) what fits in that
    memory, ``reserve_memory`` (``10%``, ``2GB``) held back (``--fit``, ``--reserve``)."""
    spec = _spec(spec)
    whole("batch", batch)
    plan = training_plan(train) if isinstance(train, str) else train
    if plan is not None and not isinstance(plan, Plan):
        raise fail("train", "a mode (full, lora, qlora) or a training_plan(...)", train)
    return count_spec_planned(spec, batch, plan, _budget(fit, reserve_memory), PLAN_PARAMETERS)


def _budget(fit: str | None, held: str | None) -> Budget | None:
    if fit is None:
        if held is not None:
            raise InputError("reserve_memory holds memory back from fit: give fit too")
        return None
    total, devices = size("fit", named("fit", fit))
    kept = reserve("reserve_memory", named("reserve_memory", held), total) if held else 0
    return Budget(fit.strip(), total, devices, kept)


def list_presets() -> tuple[PresetSummary, ...]:
    """``presets``: every built-in preset in a line (name, family, sizes, description)."""
    return presets_summary()


# ---------------------------------------------------------------------------------------------
# One FFN (NumPy).


def build_ffn(spec: ModelSpec, weights: str | Path | None = None, layer: int = 0, *,
              dtype: str = "float32", max_memory: str | None = None) -> Engine:
    """The FFN of ``spec``: random weights from its seed, or layer ``layer`` of a ``.npz`` or
    ``.safetensors`` file, a ``model.safetensors.index.json`` or a model folder (only the
    shards holding the layer are read). Call it on a (tokens, d_model) array: ``ffn(x)``."""
    from ffncli.compute.build import build_model, parse_dtype
    from ffncli.compute.memory import parse_size

    spec = _spec(spec)
    budget = parse_size(named("max_memory", max_memory)) if max_memory is not None else None
    return build_model(spec, _maybe_path("weights", weights), whole("layer", layer, 0),
                       parse_dtype(named("dtype", dtype)), budget).engine


def permute_check(fn: Any, tokens: Any = None, *, trials: int = 8, seed: int = 0,
                  rtol: float | None = None, atol: float | None = None,
                  timeout: float | None = None, name: str | None = None, bitwise: bool = False,
                  train_mode: bool = False, d_model: int | None = None,
                  impl_args: dict[str, Any] | None = None) -> CheckReport:
    """Is ``fn`` position-wise on ``tokens`` (tokens x d_model, or batch x seq x d_model; a
    NumPy array or a framework tensor; None: 32 random tokens)? ``fn`` is a function of
    arrays (NumPy, JAX), a PyTorch or Flax module, or a class or factory of one (called with
    ``impl_args``). It runs in this process. The report holds each property's result
    (``report.passed``, ``report.properties``)."""
    from ffncli.jobs.permute import check_here

    if not callable(fn):
        raise fail("fn", "a function, a module, or a class or factory of one", fn)
    whole("seed", seed, 0)
    for where, value in (("bitwise", bitwise), ("train_mode", train_mode)):
        flag(where, value)
    return check_here(fn, tokens, name=name, d_model=d_model, trials=trials, seed=seed,
                      rtol=rtol, atol=atol, timeout=timeout, bitwise=bitwise,
                      train_mode=train_mode, impl_args=impl_args)


def relu_stats(ffn: Engine, tokens: np.ndarray | str | Path, *,
               threshold: float | None = None, target_sparsity: float | None = None,
               allow_nonfinite: bool = False) -> SparsityResult:
    """Activation sparsity of ``ffn``'s hidden layer on ``tokens``: an array, or a ``.npy``,
    ``.txt`` or ``.csv`` file (streamed in chunks)."""
    from ffncli.analysis.sparsity import relu_stats as stats

    ffn = _engine(ffn)
    threshold, target_sparsity = _cut(threshold, target_sparsity)
    return stats(ffn, _tokens(tokens, ffn.d_model), threshold=threshold,
                 target_sparsity=target_sparsity,
                 allow_nonfinite=flag("allow_nonfinite", allow_nonfinite))


def _cut(threshold: Any, target_sparsity: Any) -> tuple[float | None, float | None]:
    """``threshold`` or ``target_sparsity`` (relu-stats' cut on the activated value)."""
    if threshold is not None and target_sparsity is not None:
        raise InputError("give threshold or target_sparsity, not both")
    return _maybe_number("threshold", threshold), _maybe_share("target_sparsity",
                                                              target_sparsity)


def _tokens(tokens: np.ndarray | str | Path, d_model: int) -> TokenInput:
    """``tokens`` as the readers take them: a file streamed, an array in memory."""
    from ffncli.formats.tokens import from_array, open_input, token_array

    if isinstance(tokens, (str, os.PathLike)):
        return open_input(_path("tokens", tokens), d_model)
    return from_array(token_array(tokens, d_model))


# ---------------------------------------------------------------------------------------------
# Real text through the whole model (NumPy).


def layer_stats(weights: str | Path, *, text: str | Path | None = None,
                ids: str | Path | None = None, layers: str | int = "all",
                threshold: float | None = None, target_sparsity: float | None = None,
                config: str | Path | None = None, dtype: str = "float32") -> SweepResult:
    """``relu-stats --text/--ids``: real text (or token ids) through the whole model of
    ``weights`` (a .safetensors file, an index, a model folder or a .gguf), and the sparsity
    statistics of each selected layer's FFN on its real input (``layers``: ``N``, ``A-B`` or
    ``all``). ``result.layers[i].stats`` is a ``SparsityResult``."""
    from ffncli.jobs.sweep import sweep

    asked = _layers(layers)
    threshold, target_sparsity = _cut(threshold, target_sparsity)
    forward, sequences = _text_run(weights, text, ids, config, dtype)
    with forward:
        return sweep(forward, sequences, parse_layers(asked, forward.n_layers, "layers"),
                     threshold=threshold, target_sparsity=target_sparsity, words=PARAMETERS)


def capture_inputs(weights: str | Path, out: str | Path, *,
                   text: str | Path | None = None, ids: str | Path | None = None,
                   layers: str | int = "all", force: bool = False,
                   config: str | Path | None = None, dtype: str = "float32") -> CaptureResult:
    """``capture``: write ``out/layer{N}.npy``, the input each selected layer's FFN receives
    on real text (or token ids), and ``out/capture.json``."""
    from ffncli.jobs.capture import capture as capture_layers

    asked, folder = _layers(layers), _path("out", out)
    force = flag("force", force)
    forward, sequences = _text_run(weights, text, ids, config, dtype)
    inputs = tuple(Path(p) for p in (text, ids) if p is not None) + (forward.weights,)
    with forward:
        return capture_layers(forward, sequences, parse_layers(asked, forward.n_layers, "layers"),
                              folder, force=force, inputs=inputs)


def perplexity(weights: str | Path, *, text: str | Path | None = None,
               ids: str | Path | None = None, ctx: int | None = None,
               stride: int | None = None, score: str = "half", sparsify: str | None = None,
               target_sparsity: float | Sequence[float] = (), layers: str | int | None = None,
               calibration_text: str | Path | None = None,
               thresholds: str | Path | None = None, config: str | Path | None = None,
               dtype: str = "float32") -> PerplexityResult:
    """``perplexity``: a decoder's perplexity on ``text`` (or ``ids``) under llama.cpp's
    protocol (``ctx`` tokens a chunk, the second half scored; ``score="all"``; ``stride`` for
    Hugging Face's), ``result.protocol`` stating it; with ``sparsify`` (``cats``, ``teal``,
    ``topk``) and ``target_sparsity`` (one share or several), the model with the FFN of every
    selected layer sparsified, each target a ``result.variants`` entry, in the same walk as the
    dense model. An encoder has no perplexity: its variants give the fidelity of its hidden
    states. ``thresholds``: a file ``perplexity --save-thresholds`` wrote, instead."""
    from ffncli.jobs.perplexity import RULES, run_perplexity

    targets = (target_sparsity,) if isinstance(target_sparsity, int | float) \
        else target_sparsity
    if not isinstance(targets, Sequence) or isinstance(targets, str):
        raise fail("target_sparsity", "a share or a sequence of shares", target_sparsity)
    targets = tuple(dict.fromkeys(share("target_sparsity", s) for s in targets))
    if sparsify is not None:
        named("sparsify", sparsify, RULES)
    if (sparsify is None) != (not targets):
        raise InputError("sparsify and target_sparsity go together: give both, or neither")
    if thresholds is not None and sparsify is not None:
        raise InputError("thresholds replaces sparsify and target_sparsity: give one or the "
                         "other")
    for where, value in (("ctx", ctx), ("stride", stride)):
        if value is not None:
            whole(where, value)
    model = _model(weights, config, dtype, None if layers is None else _layers(layers))
    return run_perplexity(model, _text(text, ids), ctx=ctx, stride=stride,
                          score=named("score", score, ("half", "all")), rule=sparsify,
                          targets=targets,
                          calibration_text=_maybe_path("calibration_text", calibration_text),
                          thresholds=_maybe_path("thresholds", thresholds), words=PARAMETERS)


def _model(weights: str | Path, config: str | Path | None, dtype: str,
           layers: str | None = None) -> ModelChoice:
    return ModelChoice(config=_maybe_path("config", config), weights=_path("weights", weights),
                       layer=layers, dtype=named("dtype", dtype, DTYPES))


def _text(text: str | Path | None, ids: str | Path | None) -> TextChoice:
    choice = TextChoice(_maybe_path("text", text), _maybe_path("ids", ids))
    if not choice.given:
        raise InputError("give text=FILE or ids=FILE")
    choice.one(PARAMETERS)
    return choice


def _text_run(weights: str | Path, text: str | Path | None, ids: str | Path | None,
              config: str | Path | None, dtype: str) -> tuple[Transformer, Sequences]:
    choice = _text(text, ids)
    return open_text(_model(weights, config, dtype), choice, Overrides(), PARAMETERS)


# ---------------------------------------------------------------------------------------------
# What the commands print.


def render(result: Any, format: str = "rich") -> str:
    """``result`` (of any function above) as its command prints it: ``rich`` tables, as
    ``--format markdown`` or ``csv`` prints them, or its ``--json`` document (``json``)."""
    from ffncli.present.render import render as render_result

    return render_result(result, named("format", format))
