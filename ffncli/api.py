"""ffncli as a library: the same answers as the commands, for notebooks and programs.

    import ffncli
    spec = ffncli.load_spec(preset="base")            # or config="config.json", d_ff=4096 ...
    ffncli.count(spec).total                           # 63,082,496: integer arithmetic, no NumPy
    ffn = ffncli.build_ffn(spec)                       # random weights from the spec's seed
    y = ffn(x)                                         # (tokens, d_model) -> (tokens, d_model)
    ffncli.permute_check(ffn, x).passed                # True: the FFN is position-wise
    ffncli.relu_stats(ffn, x).mean_inactive_fraction   # the hidden layer's sparsity
    sweep = ffncli.layer_stats("model-folder", text="book.txt")  # every layer, real text
    ffncli.capture_inputs("model-folder", "out", text="book.txt")  # every layer's FFN input

Every function returns a frozen result object with the fields of the command's JSON output,
and raises an ``ffncli.errors.FfnError`` subclass with a one-line message for bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.specs.spec import ModelSpec, Overrides

if TYPE_CHECKING:
    import numpy as np

    from ffncli.analysis.properties import CheckReport
    from ffncli.analysis.sparsity import SparsityResult
    from ffncli.compute.engine import Engine
    from ffncli.counting.model import ModelCount
    from ffncli.formats.tokens import TokenInput
    from ffncli.jobs.capture import CaptureResult
    from ffncli.jobs.sweep import SweepResult


def load_spec(preset: str | None = None, config: str | Path | None = None,
              **overrides: Any) -> ModelSpec:
    """A model spec from a built-in preset or a YAML file (``preset``), or a Hugging Face
    ``config.json`` (``config``), with what-if ``overrides``: ``d_model``, ``d_ff``,
    ``activation``, ``gated``, ``experts``, ``top_k``, ``beta``, ``capacity_factor``,
    ``match_params``, ``multiple_of``, ``seq_len``."""
    import dataclasses

    from ffncli.errors import SpecError
    from ffncli.jobs.resolve import resolve_spec

    known = [f.name for f in dataclasses.fields(Overrides)]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise SpecError(f"load_spec: unknown override {unknown[0]!r}; known: {', '.join(known)}")
    return resolve_spec(preset, Path(config) if config is not None else None,
                        Overrides(**overrides))


def count(spec: ModelSpec) -> ModelCount:
    """Parameters per layer and part, FLOPs per token and weight memory (``params --json``)."""
    from ffncli.counting.model import count as count_spec

    return count_spec(spec)


def build_ffn(spec: ModelSpec, weights: str | Path | None = None, layer: int = 0, *,
              dtype: str = "float32", max_memory: str | None = None) -> Engine:
    """The FFN of ``spec``: random weights from its seed, or layer ``layer`` of a ``.npz`` or
    ``.safetensors`` file, a ``model.safetensors.index.json`` or a model folder (only the
    shards holding the layer are read). Call it on a (tokens, d_model) array: ``ffn(x)``."""
    from ffncli.compute.build import build_model, parse_dtype
    from ffncli.compute.memory import parse_size

    budget = parse_size(max_memory) if max_memory is not None else None
    path = Path(weights) if weights is not None else None
    return build_model(spec, path, layer, parse_dtype(dtype), budget).engine


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

    return check_here(fn, tokens, name=name, d_model=d_model, trials=trials, seed=seed,
                      rtol=rtol, atol=atol, timeout=timeout, bitwise=bitwise,
                      train_mode=train_mode, impl_args=impl_args)


def relu_stats(ffn: Engine, tokens: np.ndarray | str | Path, *,
               threshold: float | None = None, target_sparsity: float | None = None,
               allow_nonfinite: bool = False) -> SparsityResult:
    """Activation sparsity of ``ffn``'s hidden layer on ``tokens``: an array, or a ``.npy``,
    ``.txt`` or ``.csv`` file (streamed in chunks)."""
    from ffncli.analysis.sparsity import relu_stats as stats

    return stats(ffn, _tokens(tokens, ffn.d_model), threshold=threshold,
                 target_sparsity=target_sparsity, allow_nonfinite=allow_nonfinite)


def _tokens(tokens: np.ndarray | str | Path, d_model: int) -> TokenInput:
    """``tokens`` as the readers take them: a file streamed, an array in memory."""
    from ffncli.formats.tokens import from_array, open_input, token_array

    if isinstance(tokens, (str, Path)):
        return open_input(Path(tokens), d_model)
    return from_array(token_array(tokens, d_model))


def layer_stats(weights: str | Path, *, text: str | Path | None = None,
                ids: str | Path | None = None, layers: str = "all",
                threshold: float | None = None, target_sparsity: float | None = None,
                config: str | Path | None = None, dtype: str = "float32") -> SweepResult:
    """``relu-stats --text/--ids``: real text (or token ids) through the whole model of
    ``weights`` (a .safetensors file, an index, a model folder or a .gguf), and the sparsity
    statistics of each selected layer's FFN on its real input (``layers``: ``N``, ``A-B`` or
    ``all``). ``result.layers[i].stats`` is a ``SparsityResult``."""
    from ffncli.jobs.choices import parse_layers
    from ffncli.jobs.sweep import sweep

    forward, sequences = _text_run(weights, text, ids, config, dtype)
    with forward:
        return sweep(forward, sequences, parse_layers(layers, forward.n_layers),
                     threshold=threshold, target_sparsity=target_sparsity)


def capture_inputs(weights: str | Path, out: str | Path, *,
                   text: str | Path | None = None, ids: str | Path | None = None,
                   layers: str = "all", force: bool = False, config: str | Path | None = None,
                   dtype: str = "float32") -> CaptureResult:
    """``capture``: write ``out/layer{N}.npy``, the input each selected layer's FFN receives
    on real text (or token ids), and ``out/capture.json``."""
    from ffncli.jobs.capture import capture as capture_layers
    from ffncli.jobs.choices import parse_layers

    forward, sequences = _text_run(weights, text, ids, config, dtype)
    inputs = tuple(Path(p) for p in (text, ids) if p is not None) + (forward.weights,)
    with forward:
        return capture_layers(forward, sequences, parse_layers(layers, forward.n_layers),
                              Path(out), force=force, inputs=inputs)


def _text_run(weights: str | Path, text: str | Path | None, ids: str | Path | None,
              config: str | Path | None, dtype: str) -> tuple[Any, Any]:
    from ffncli.errors import InputError
    from ffncli.jobs.choices import ModelChoice, TextChoice
    from ffncli.jobs.resolve import open_text

    choice = TextChoice(Path(text) if text is not None else None,
                        Path(ids) if ids is not None else None)
    if not choice.given:
        raise InputError("give text=FILE or ids=FILE")
    model = ModelChoice(config=Path(config) if config is not None else None,
                        weights=Path(weights), dtype=dtype)
    return open_text(model, choice, Overrides())
