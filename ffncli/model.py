"""Which model a command means: the spec (a preset, a YAML file, a config.json, the config.json
beside a checkpoint) with its what-if overrides, and the FFN built from it.

Spec resolution does not import NumPy (``params`` stays integer arithmetic); building the FFN
does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ffncli.errors import InputError
from ffncli.spec import ModelSpec, Overrides, apply_overrides, load_preset
from ffncli.validate import whole

if TYPE_CHECKING:
    from ffncli.counting import FileOnlyResult, ParamsResult
    from ffncli.forward import Transformer
    from ffncli.runner import Model
    from ffncli.text import Sequences
    from ffncli.tokens import TokenInput

@dataclass(frozen=True)
class ModelChoice:
    """Which FFN a command runs: ``--preset`` or ``--config`` (or the config.json beside the
    weights), ``--weights`` or ``--model`` (else random weights from the spec's seed),
    ``--layer``, ``--dtype`` and ``--max-memory``."""

    preset: str | None = None
    config: Path | None = None
    weights: Path | None = None
    hub_model: str | None = None  # --model ORG/NAME[@REVISION], from the local cache
    layer: str | None = None  # N; with --text or --ids also A-B or all
    dtype: str = "float32"
    max_memory: str | None = None

    def index(self) -> int:
        """The one layer ``--layer`` names (default 0)."""
        if self.layer is None:
            return 0
        text = self.layer.strip()
        number = int(text) if text.lstrip("-").isdigit() and len(text) < 20 else self.layer
        return whole("option --layer", number, 0)


@dataclass(frozen=True)
class TokenChoice:
    """Which tokens: ``--input`` a file, or ``--random N`` drawn with ``--seed``; NaN and
    infinity refused unless ``--allow-nonfinite``."""

    input: Path | None = None
    random: int | None = None
    seed: int = 0
    allow_nonfinite: bool = False


@dataclass(frozen=True)
class TextChoice:
    """Real text through the whole model: ``--text`` (tokenised with the model's tokenizer)
    or ``--ids`` (token ids, no tokenizer)."""

    text: Path | None = None
    ids: Path | None = None

    @property
    def given(self) -> bool:
        return self.text is not None or self.ids is not None

    def refuse(self, tokens: TokenChoice) -> None:
        """Real text and token vectors are two ways to feed the FFN: not both."""
        if tokens != TokenChoice(seed=tokens.seed):
            raise InputError("give --text/--ids (real text through the model) or "
                             "--input/--random (tokens given to one layer's FFN), not both")


_NO_MODEL = "give a model: --preset NAME|FILE or --config config.json"
_NO_MODEL_OR_WEIGHTS = ("give a model: --preset NAME|FILE, --config config.json, or "
                        "--weights/--model with a config.json beside the weights")
_NO_CONFIG = "no --preset or --config, and no config.json beside the weights"


def config_beside(weights: Path) -> Path | None:
    """The readable ``config.json`` beside a checkpoint: in its folder (a ``save_pretrained``
    or cache snapshot folder), or beside its ``.safetensors`` file or index."""
    import os

    if os.path.isdir(weights):
        beside = weights / "config.json"
    elif weights.suffix.lower() in (".safetensors", ".json") and weights.name != "config.json":
        beside = weights.parent / "config.json"
    else:
        return None
    return beside if os.path.isfile(beside) and os.access(beside, os.R_OK) else None


def weights_of(weights: Path | None, hub_model: str | None,
               impl: str | None = None) -> Path | None:
    """What ``--weights`` or ``--model ORG/NAME[@REVISION]`` names: a file or folder, or the
    model's snapshot folder in the local Hugging Face cache."""
    if hub_model is None:
        return weights
    if weights is not None:
        raise InputError("give --weights or --model, not both")
    if impl is not None:
        raise InputError("give --impl or --model, not both")
    from ffncli.hub import snapshot

    return snapshot(hub_model)


def resolve_spec(preset: str | None, config: Path | None, overrides: Overrides | None = None,
                 *, weights: Path | None = None, weights_describe: bool = False) -> ModelSpec:
    """The spec of ``--preset`` or ``--config`` (never both), with ``overrides`` applied.

    With ``weights_describe`` (commands that run a checkpoint), the config.json beside a
    ``.safetensors`` file stands in for a missing ``--config``."""
    if preset is not None and config is not None:
        raise InputError("give --preset or --config, not both")
    if preset is None and config is None and weights is not None \
            and weights.suffix.lower() == ".gguf":  # a GGUF file describes itself
        from ffncli.gguf import read_header, spec_from_header

        return apply_overrides(spec_from_header(read_header(weights)), overrides or Overrides())
    if weights_describe and config is None and preset is None and weights is not None:
        config = config_beside(weights)
    if config is not None:
        from ffncli.hfconfig import load_config

        spec = load_config(config)
    elif preset is not None:
        spec = load_preset(preset)
    else:
        raise InputError(_NO_MODEL_OR_WEIGHTS if weights_describe else _NO_MODEL)
    return apply_overrides(spec, overrides or Overrides())


def load_model(choice: ModelChoice, overrides: Overrides) -> Model:
    """The spec and its FFN: random from the spec's seed, or one layer of a weights file."""
    from ffncli import runner
    from ffncli.weights import parse_size

    weights = weights_of(choice.weights, choice.hub_model)
    spec = resolve_spec(choice.preset, choice.config, overrides, weights=weights,
                        weights_describe=True)
    budget = parse_size(choice.max_memory) if choice.max_memory is not None else None
    return runner.build_model(spec, weights, choice.index(), runner.parse_dtype(choice.dtype),
                              budget)


def load_tokens(choice: TokenChoice, d_model: int) -> TokenInput:
    """The tokens of ``--input`` or ``--random N`` (streamed: nothing is read or drawn yet)."""
    from ffncli.runner import resolve_input

    return resolve_input(choice.input, choice.random, d_model, choice.seed)


def count_model(preset: str | None, config: Path | None, overrides: Overrides,
                weights: Path | None = None, batch: int = 1) -> ParamsResult | FileOnlyResult:
    """``params``: the spec's count and KV cache at its seq_len x ``batch``; with ``weights``
    (a .safetensors file, an index or a model folder) the count of every shard's header beside
    it (no tensor data is read), the spec from the config.json beside the weights unless one
    is given. A checkpoint without a config, or with a model type no reader knows, is still
    counted from the file's tensor names."""
    from ffncli.checkpoint import count_file, read_checkpoint
    from ffncli.counting import FileOnlyResult, ParamsResult, count, kv_cache
    from ffncli.hfconfig import UnsupportedModelType

    whole("option --batch", batch)
    if weights is not None and weights.suffix.lower() == ".gguf":
        return _count_gguf(preset, config, overrides, weights, batch)
    if weights is not None and preset is None and config is None:
        config = config_beside(weights)
        if config is None:
            if overrides != Overrides():
                raise InputError(f"the what-if options need a spec; {_NO_CONFIG}")
            return FileOnlyResult(count_file(read_checkpoint(weights)), str(weights), _NO_CONFIG)
    try:
        spec = resolve_spec(preset, config, overrides)
    except UnsupportedModelType as exc:
        if weights is None:
            raise
        return FileOnlyResult(count_file(read_checkpoint(weights)), str(weights), str(exc))
    file = count_file(read_checkpoint(weights)) if weights is not None else None
    return ParamsResult(count(spec), file, str(weights) if weights is not None else None,
                        kv_cache(spec, spec.seq_len, batch))


def _count_gguf(preset: str | None, config: Path | None, overrides: Overrides, weights: Path,
                batch: int) -> ParamsResult | FileOnlyResult:
    """``params --weights model.gguf``: its tensor infos counted, its metadata's spec (or the
    --preset / --config given) beside them; an architecture no reader knows is counted from
    the file alone."""
    from ffncli.counting import FileOnlyResult, ParamsResult, count, kv_cache
    from ffncli.gguf import UnsupportedArchitecture, count_file, read_header, spec_from_header

    header = read_header(weights)
    file = count_file(header)
    try:
        spec = (resolve_spec(preset, config, overrides) if preset or config else
                apply_overrides(spec_from_header(header), overrides))
    except UnsupportedArchitecture as exc:
        return FileOnlyResult(file, str(weights), str(exc))
    return ParamsResult(count(spec), file, str(weights), kv_cache(spec, spec.seq_len, batch))


def open_forward(choice: ModelChoice, overrides: Overrides) -> Transformer:
    """The whole model of ``--weights`` or ``--model``, for ``--text`` and ``--ids``."""
    weights = weights_of(choice.weights, choice.hub_model)
    if weights is None:
        raise InputError("--text and --ids run the whole model: give its checkpoint with "
                         "--weights or --model")
    from ffncli.forward import open_transformer
    from ffncli.runner import parse_dtype

    if overrides.capacity_factor is not None:
        raise InputError("option --capacity-factor: the whole-model forward runs the "
                         "checkpoint's own routing, which drops no tokens")
    spec = resolve_spec(choice.preset, choice.config, overrides, weights=weights,
                        weights_describe=True)
    return open_transformer(spec, weights, parse_dtype(choice.dtype), config=choice.config)


def load_sequences(choice: TextChoice, model: Transformer, weights: Path) -> Sequences:
    """The sequences of ``--text`` (the tokenizer beside ``weights``) or ``--ids``, each cut
    into windows of the model's maximum positions, every id checked against its vocabulary."""
    from ffncli.text import load_tokenizer, read_ids, read_text

    if choice.text is not None and choice.ids is not None:
        raise InputError("give --text or --ids, not both")
    if choice.ids is not None:
        return read_ids(choice.ids, model.vocab, model.max_positions)
    assert choice.text is not None
    tokenizer = load_tokenizer(weights)
    sequences = read_text(choice.text, tokenizer, model.max_positions)
    top = max(int(ids.max()) for ids in sequences.ids if ids.size)
    if top >= model.vocab:
        raise InputError(f"{tokenizer.source}: gives token id {top}, but the model's "
                         f"vocabulary has {model.vocab} rows; is it the model's tokenizer?")
    return sequences
