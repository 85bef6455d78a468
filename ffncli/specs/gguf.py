"""The spec a GGUF file's metadata implies: its keys read as the keys of a config.json with the
same meaning, counted by that model type's reader (the architecture table maps llama.cpp's
architectures to model types)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ffncli.base.validate import Keys, brief, whole
from ffncli.errors import WeightsError
from ffncli.formats.gguf import GgufArray, GgufHeader
from ffncli.specs.archs import GGUF_ARCHITECTURES, spec_from_config

if TYPE_CHECKING:
    from ffncli.specs.spec import ModelSpec

# ---------------------------------------------------------------------------------------------
# The spec the metadata implies, read as a config.json with the same keys would be.

class UnsupportedArchitecture(WeightsError):
    """A GGUF architecture no spec reader knows: ``params`` still counts the file."""


def spec_from_header(header: GgufHeader) -> ModelSpec:
    """``general.architecture`` and ``<arch>.embedding_length``, ``.feed_forward_length``,
    ``.block_count``, ``.attention.head_count(_kv)``, ``.expert_count`` ... as the keys of a
    config.json, counted by that model type's reader. The vocabulary is the tokenizer's token
    list (else ``<arch>.vocab_size``, else the embedding's rows); the head is tied when there
    is no ``output.weight``; biases are there when layer 0 has them."""
    path, meta, arch = header.path, header.metadata, header.architecture
    model_type = GGUF_ARCHITECTURES.get(arch)
    if model_type is None:
        raise UnsupportedArchitecture(
            f"{path}: GGUF architecture {brief(arch)} has no spec reader; supported: "
            f"{', '.join(GGUF_ARCHITECTURES)} (or give --preset or --config)")

    keys = Keys(meta, str(path), WeightsError, "metadata key")

    def need(key: str) -> int:
        return keys.required(f"{arch}.{key}")

    def maybe(key: str) -> int | None:
        return keys.whole(f"{arch}.{key}")

    d, heads = need("embedding_length"), need("attention.head_count")
    layers = need("block_count")
    kv = maybe("attention.head_count_kv") or heads
    if kv > heads or heads % kv:
        raise WeightsError(f"{path}: metadata key '{arch}.attention.head_count_kv': expected a "
                           f"divisor of {arch}.attention.head_count ({heads}), got {kv}")
    config: dict[str, Any] = {
        "model_type": model_type, "hidden_size": d, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv,
        "vocab_size": _vocab(header, arch),
        "tie_word_embeddings": "output.weight" not in header.tensors,
        "attention_bias": "blk.0.attn_q.bias" in header.tensors,
        "mlp_bias": "blk.0.ffn_up.bias" in header.tensors,
    }
    head_dim = maybe("attention.key_length")
    if head_dim is not None:
        config["head_dim"] = head_dim
    elif d % heads:
        raise WeightsError(f"{path}: metadata key '{arch}.attention.head_count': expected a "
                           f"divisor of {arch}.embedding_length ({d:,}), got {heads}")
    context = maybe("context_length")
    if context is not None:
        config["max_position_embeddings"] = context
    experts = maybe("expert_count")
    if model_type == "qwen3_moe":
        config.update(num_experts=experts,
                      moe_intermediate_size=need("expert_feed_forward_length"),
                      num_experts_per_tok=need("expert_used_count"))
    elif experts is not None and experts > 1:
        config.update(model_type="mixtral", num_local_experts=experts,
                      num_experts_per_tok=need("expert_used_count"))
    if model_type != "qwen3_moe":
        config["intermediate_size"] = need("feed_forward_length")
    name = meta.get("general.name")
    if isinstance(name, str) and name:
        config["_name_or_path"] = name
    return spec_from_config(config, f"{path} (GGUF metadata)")


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
