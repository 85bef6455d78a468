"""The spec a GGUF file's metadata implies: its keys read as the keys of a config.json with the
same meaning, counted by that model type's reader (the architecture table maps llama.cpp's
architectures to model types; READINGS, in :mod:`ffncli.specs.gguf_readings`, says per
architecture which metadata key is which config key, as llama.cpp's convert_hf_to_gguf.py
writes them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ffncli.base.validate import brief, whole
from ffncli.errors import WeightsError
from ffncli.formats.gguf import GgufArray, GgufHeader
from ffncli.specs.archs import spec_from_config
from ffncli.specs.gguf_readings import BASE_KEYS, BASE_TENSORS, READINGS, Metadata, Reading
from ffncli.specs.rules import MAX_LAYERS
from ffncli.specs.spec import SPEC_PARAMETERS
from ffncli.specs.table import GGUF_ARCHITECTURES

if TYPE_CHECKING:
    from ffncli.specs.spec import ModelSpec

# ---------------------------------------------------------------------------------------------
# The spec the metadata implies, read as a config.json with the same keys would be.

class UnsupportedArchitecture(WeightsError):
    """A GGUF architecture no spec reader knows: ``params`` still counts the file."""


def spec_from_header(header: GgufHeader, names: Mapping[str, str] = SPEC_PARAMETERS
                     ) -> ModelSpec:
    """``general.architecture`` and ``<arch>.embedding_length``, ``.feed_forward_length``,
    ``.block_count``, ``.attention.head_count(_kv)``, ``.expert_count`` ... as the keys of a
    config.json (READINGS), counted by that model type's reader. The vocabulary is the
    tokenizer's token list (else ``<arch>.vocab_size``, else the embedding's rows); the head is
    tied when there is no ``output.weight``; biases are there when layer 0 has them. An
    architecture no reader knows is refused, naming what else describes the model as ``names``
    says (its "model")."""
    path, meta, arch = header.path, header.metadata, header.architecture
    model_type = _model_type(header, names["model"])
    reading = READINGS.get(arch, Reading())
    m = Metadata(header, arch)
    d, layers = _need(m, "embedding_length"), _need(m, "block_count")
    if layers > MAX_LAYERS:  # as a config's count (specs/rules.py), named as the file has it
        raise WeightsError(f"{path}: metadata key '{arch}.block_count': expected at most "
                           f"{MAX_LAYERS:,} layers, got {layers}")
    heads = _need(m, "attention.head_count") if reading.attention else 0
    kv = _kv_heads(m, heads) if reading.attention else 0
    for key in reading.required:
        _need(m, key)
    config: dict[str, Any] = {
        "model_type": model_type, "hidden_size": d, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv,
        "vocab_size": _vocab(header, arch),
        "tie_word_embeddings": "output.weight" not in header.tensors,
    }
    config.update(_read(m, reading, layers))
    if heads and "head_dim" not in config and "kv_lora_rank" not in config and d % heads:
        raise WeightsError(f"{path}: metadata key '{arch}.attention.head_count': expected a "
                           f"divisor of {arch}.embedding_length ({d:,}), got {heads}")
    experts = m.get("expert_count")
    if reading.moe_type is not None and experts is not None and experts > 1:
        config.update(model_type=reading.moe_type, num_local_experts=experts,
                      num_experts_per_tok=_need(m, "expert_used_count"))
    name = meta.get("general.name")
    if isinstance(name, str) and name:
        config["_name_or_path"] = name
    return spec_from_config(config, f"{path} (GGUF metadata)")


def _model_type(header: GgufHeader, other: str) -> str:
    """The config.json model type of the file's architecture; refused when none reads it."""
    arch = header.architecture
    model_type = GGUF_ARCHITECTURES.get(arch)
    if model_type is None:
        raise UnsupportedArchitecture(
            f"{header.path}: GGUF architecture {brief(arch)} has no spec reader; supported: "
            f"{', '.join(GGUF_ARCHITECTURES)} (or give {other})")
    return model_type


def _need(m: Metadata, key: str) -> int:
    """A required whole-number key; 0 for a per-layer array (there, and read by the reading)."""
    if m.values(key) is not None:
        return 0
    return m.keys.required(f"{m.arch}.{key}")


def _kv_heads(m: Metadata, heads: int) -> int:
    """The key-value heads (the query heads when absent), a divisor of the query heads; an
    array of them, one a layer (Jamba's, 0 on its Mamba layers), gives its attention layers'."""
    arch, keys = m.arch, m.keys
    per_layer = m.values("attention.head_count_kv")
    kv = (max(whole(f"{m.header.path}: metadata key '{arch}.attention.head_count_kv'", v,
                    minimum=0, error=WeightsError) for v in per_layer)
          if per_layer is not None else keys.whole(f"{arch}.attention.head_count_kv")) or heads
    if kv > heads or heads % kv:
        raise WeightsError(f"{m.header.path}: metadata key '{arch}.attention.head_count_kv': "
                           f"expected a divisor of {arch}.attention.head_count ({heads}), "
                           f"got {kv}")
    return kv


def _read(m: Metadata, reading: Reading, layers: int) -> dict[str, Any]:
    """The config keys the tensors, the metadata keys, the defaults and the derivations give."""
    config: dict[str, Any] = {}
    for key, tensor in {**BASE_TENSORS, **reading.tensors}.items():
        config[key] = tensor in m.header.tensors
    for key, names in {**BASE_KEYS, **reading.keys}.items():
        value = next((v for name in names if (v := m.get(name)) is not None), None)
        if value is not None:
            config[key] = value
    for key, value in reading.absent.items():
        config.setdefault(key, value)
    for key, derive in reading.derived.items():
        value = derive(m, layers)
        if value is not None:
            config[key] = value
    return config


def _vocab(header: GgufHeader, arch: str) -> int:
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, GgufArray) and tokens.length:
        return tokens.length
    key = f"{arch}.vocab_size"
    if key in header.metadata:
        return whole(f"{header.path}: metadata key '{key}'", header.metadata[key],
                     error=WeightsError)
    embedding = header.tensors.get("token_embd.weight")
    if embedding is None or len(embedding.dims) != 2:
        raise WeightsError(f"{header.path}: no vocabulary size: no metadata key "
                           f"'tokenizer.ggml.tokens' or '{key}', no tensor 'token_embd.weight'")
    return embedding.dims[1]
