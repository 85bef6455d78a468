"""DeepSeek-V4 (issue 40, DeepseekV4ForCausalLM): every layer's attention attends to a sliding
window and, beside it, to KV entries a compressor pools from the stream: every
compress_rates["compressed_sparse_attention"] tokens with overlapping windows and a lightning
indexer (CSA), or every compress_rates["heavily_compressed_attention"] tokens (HCA); each
layer's FFN a mixture of experts (hash-routed in the first ones) with one shared expert; the
stream hc_mult copies wide, mixed by hyper-connections around attention and the FFN. Built
from the kit of :mod:`ffncli.specs.hfconfig` and the parts of :mod:`ffncli.specs.layers`."""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import Config, _experts, gated_decoder_spec
from ffncli.specs.layers import CompressorSpec
from ffncli.specs.spec import AttentionSpec, LayerKind, ModelSpec

_CSA, _HCA, _SLIDING = ("compressed_sparse_attention", "heavily_compressed_attention",
                        "sliding_attention")
# The layer types of DeepseekV4Config, what each layer is called, and the per-layer
# compress_ratios older configs give instead (0: sliding alone)
# CSA: compressed sparse attention (overlapping windows, the indexer); HCA: heavily compressed
_NAMES = {_SLIDING: "sliding decoder", _CSA: "CSA decoder", _HCA: "HCA decoder"}
_RATIOS = {0: _SLIDING, 4: _CSA, 128: _HCA}
_RATES = {_CSA: 4, _HCA: 128}  # compress_rates' defaults


def v4_attention(c: Config) -> AttentionSpec:
    """DeepseekV4Attention: queries through q_lora_rank (q_a_proj, q_a_norm, q_b_proj), one
    head of head_dim (kv_proj, kv_norm) that is both key and value, a sink per head, and the
    grouped low-rank output (o_groups blocks to o_lora_rank each, o_b_proj); no biases."""
    d, heads, head_dim = c.int("hidden_size"), c.int("num_attention_heads"), c.int("head_dim")
    groups = c.int("o_groups")
    if heads * head_dim % groups:
        raise c.fail("o_groups", f"a divisor of num_attention_heads x head_dim "
                     f"({heads * head_dim:,})")
    return AttentionSpec(
        heads=heads, kv_heads=1, head_dim=head_dim, qkv_bias=False, out_bias=False,
        qk_norm="key", values_are_keys=True, sinks=True,
        q_lora_rank=c.at_most("q_lora_rank", c.int("q_lora_rank"), "hidden_size", d),
        o_groups=groups, o_lora_rank=c.int("o_lora_rank"))


def layer_types(c: Config, n: int) -> list[str]:
    """Each layer's attention: layer_types, else the older compress_ratios (0, 4 or 128
    each), else DeepseekV4Config's: two HCA layers, then HCA and CSA in turn."""
    types = c.names("layer_types", n, tuple(_NAMES))
    if types is not None:
        return types
    ratios = c.data.get("compress_ratios")
    if ratios is not None:
        if not isinstance(ratios, list) or len(ratios) < n or not all(
                type(r) is int and r in _RATIOS for r in ratios):
            raise c.fail("compress_ratios", f"a list of {n} compress ratios (0, 4, 128)")
        return [_RATIOS[r] for r in ratios[:n]]
    return [_HCA if i < 2 or i % 2 == 0 else _CSA for i in range(n)]


def hash_layers(c: Config, n: int) -> list[bool]:
    """Which layers route by token (hash_moe): mlp_layer_types, else the first num_hash_layers
    (default 3)."""
    kinds = c.names("mlp_layer_types", n, ("hash_moe", "moe"))
    if kinds is not None:
        return [k == "hash_moe" for k in kinds]
    first = c.int0("num_hash_layers", 3)
    return [i < first for i in range(n)]


def compress_rates(c: Config) -> dict[str, int]:
    """compress_rates (by layer type), each else the older compress_rate_csa and
    compress_rate_hca, else 4 and 128."""
    rates = c.data.get("compress_rates") or {}
    if not isinstance(rates, dict):
        raise c.fail("compress_rates", "an object of layer types to rates")
    sub = Config({**rates, **{k: c.data[f"compress_rate_{s}"] for k, s in
                             ((_CSA, "csa"), (_HCA, "hca"))
                             if c.data.get(f"compress_rate_{s}") is not None}},
                 f"{c.source}: compress_rates")
    return {k: sub.int(k, default) for k, default in _RATES.items()}


def compressor(c: Config, kind: str, rates: dict[str, int]) -> CompressorSpec | None:
    """The compressor of a layer of this type: CSA's (overlapping windows of head_dim, the
    indexer's of index_head_dim), HCA's, or none (a sliding layer)."""
    if kind == _SLIDING:
        return None
    head_dim = c.int("head_dim")
    if kind == _HCA:
        return CompressorSpec(rate=rates[_HCA], head_dim=head_dim)
    return CompressorSpec(rate=rates[_CSA], head_dim=head_dim, series=2,
                          index_heads=c.int("index_n_heads"),
                          index_head_dim=c.int("index_head_dim"),
                          q_lora_rank=c.int("q_lora_rank"))


def deepseek_v4_spec(c: Config) -> ModelSpec:
    """DeepseekV4ForCausalLM: v4_attention over a sliding window with each layer's compressor
    beside it; every layer n_routed_experts SwiGLU experts of moe_intermediate_size (top
    num_experts_per_tok, a router without bias: its score-correction bias and the hash
    layers' tid2eid table are buffers) and one shared expert as wide (transformers builds one
    whatever n_shared_experts says); two RMSNorms; hyper-connections over hc_mult streams
    around attention and the FFN, and their head before the final norm; an untied head.

    A hash-routed layer (hash_moe) uses the experts tid2eid lists for the token, a fixed
    num_experts_per_tok of them, as a learned router would: the same parameters a token."""
    width = c.int("moe_intermediate_size")
    experts = _experts(c, "n_routed_experts", "moe_intermediate_size", shared_d_ff=width)
    spec = gated_decoder_spec(c, "deepseek_v4", moe=lambda c, n: (experts, 0))
    n, rates, window = spec.layers.decoder, compress_rates(c), c.int("sliding_window")
    kinds = tuple(LayerKind(name=("hash-routed " if hashed else "") + _NAMES[t],
                            mixer="sliding", window=window, mixer_spec=compressor(c, t, rates))
                  for t, hashed in zip(layer_types(c, n), hash_layers(c, n), strict=True))
    return replace(spec, attention=v4_attention(c), pattern=kinds,
                   hyper_streams=c.int("hc_mult", 4), hyper_mixing=True)
