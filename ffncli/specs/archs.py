"""The table of architectures (:mod:`ffncli.specs.table`) at work: a config.json read as a spec
by its model type's row (:func:`spec_from_config`, :func:`load_config`, a multimodal config's
language model), and what a spec's row says of its checkpoint (:func:`ffn_layout`,
:func:`fused`, :func:`not_run`). No NumPy here.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ffncli.base.validate import brief
from ffncli.errors import ConfigError
from ffncli.specs.hfconfig import Config, read_config
from ffncli.specs.layouts import Layout
from ffncli.specs.refused import LACKS
from ffncli.specs.spec import ModelSpec, check_spec
from ffncli.specs.table import ARCHS, SUPPORTED_MODEL_TYPES


def ffn_layout(spec: ModelSpec) -> Layout | None:
    """Where a checkpoint of the spec's family keeps a layer's FFN (None: not known). A spec's
    family is its config's model_type, except that BERT's relatives read as ``bert``; a
    preset's family may name no row (``transformer``: random weights only)."""
    row = ARCHS.get(spec.family)
    if row is None:
        return None
    return row.gated_ffn if spec.ffn.gated and row.gated_ffn is not None else row.ffn


def with_ffn_layout() -> list[str]:
    """The model types whose FFN ffncli reads from a checkpoint."""
    return [t for t, row in ARCHS.items() if row.ffn is not None]


def fused(spec: ModelSpec) -> frozenset[str]:
    """The projections the spec's family stores as one matrix: ``qkv`` (GPT-2's c_attn),
    ``gate_up`` (Phi-3's gate_up_proj). A LoRA adapter sees each as one linear layer."""
    row = ARCHS.get(spec.family)
    if row is None:
        return frozenset()
    layout = ffn_layout(spec)
    return frozenset({"qkv"} if row.fused_qkv else set()) | frozenset(
        {"gate_up"} if layout is not None and layout.gate_up else set())


def not_run(spec: ModelSpec) -> str | None:
    """Why the engine refuses the spec's FFN, or None."""
    row = ARCHS.get(spec.family)
    return row.not_run if row is not None else None


# ---------------------------------------------------------------------------------------------
# config.json -> spec.


class UnsupportedModelType(ConfigError):
    """A config.json of an architecture no reader knows (``params --weights`` can still count
    the file by tensor names)."""


def _same_type(name: str) -> str:
    """A supported model_type spelled differently (case, '-' or '_'), else ''. Nothing looser:
    a near miss such as qwen3 for qwen2 is another architecture, counted wrongly."""
    def key(text: str) -> str:
        return text.lower().replace("-", "").replace("_", "").strip()

    hits = [t for t in SUPPORTED_MODEL_TYPES if key(t) == key(name)]
    return f" (did you mean {hits[0]!r}?)" if hits else ""


def _supported(shown: int = 8) -> str:
    """The table's first types and how many more (the whole list is docs/specs.md's: two
    hundred names would not make one readable line)."""
    more = len(SUPPORTED_MODEL_TYPES) - shown
    return f"{', '.join(SUPPORTED_MODEL_TYPES[:shown])} and {more} more (docs/specs.md lists them)"


def spec_from_config(data: Any, source: str) -> ModelSpec:
    """A config.json's document as a spec, by its model_type's reader."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
    model_type = data.get("model_type")
    if model_type is None:
        raise ConfigError(f"{source}: missing key 'model_type'; supported: {_supported()}")
    if not isinstance(model_type, str):
        raise ConfigError(f"{source}: key 'model_type': expected a string such as 'llama', got "
                          f"{brief(model_type)}")
    row = ARCHS.get(model_type)
    if row is None and model_type in LACKS:
        raise UnsupportedModelType(f"{source}: unsupported model_type {brief(model_type)}: "
                                   f"ffncli lacks {LACKS[model_type]}")
    if row is None:
        raise UnsupportedModelType(
            f"{source}: unsupported model_type {brief(model_type)}"
            f"{_same_type(model_type)}; supported: {_supported()}"
        )
    return check_spec(row.reader(Config(data, source)), source)


# The sub-configs of a multimodal config that are not its language model.
TOWERS = ("vision_config", "audio_config", "speech_config", "vision_encoder_config",
          "audio_encoder_config", "encoder_config")


def _multimodal(c: Config, text_type: str) -> ModelSpec:
    """A multimodal config: its language model (``text_config``, read as ``text_type``)
    counted with its FFN breakdown; its towers named as not counted. The whole model's
    ``tie_word_embeddings`` ties the head when it says (transformers builds GLM-ASR's head
    tied and ModernVBERT's untied, whatever their text_config says)."""
    text = c.mapping("text_config") or {}
    tie = {"tie_word_embeddings": c.bool("tie_word_embeddings", False)} \
        if c.data.get("tie_word_embeddings") is not None else {}  # checked as the file's key
    data = {**text, **tie, "model_type": text_type}
    spec = ARCHS[text_type].reader(Config(data, f"{c.source}: text_config"))
    towers = tuple(f"{key.removesuffix('_config').replace('_', ' ')} tower ({kind})"
                   for key in TOWERS if isinstance(c.data.get(key), dict)
                   for kind in [str(c.data[key].get("model_type", "?"))[:40]])
    joins = ("what joins them to the language model",) if towers else ()
    return replace(spec, name=c.name(text_type), uncounted=towers + joins)


def load_config(path: Path) -> ModelSpec:
    """A config.json (:func:`ffncli.specs.hfconfig.read_config`), then
    :func:`spec_from_config`."""
    return spec_from_config(read_config(path), str(path))
