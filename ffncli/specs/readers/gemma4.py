"""Gemma 4's language models (transformers' Gemma4TextConfig and Gemma4UnifiedTextConfig).

Gemma 3's layers (four norms, a norm on Q and on K, sliding or full by layer_types) with what
Gemma 4 adds:

- a head width and KV heads per layer: ``per_layer_config`` as transformers 5.25 writes it, else
  the full layers' ``global_head_dim`` (512) and, with ``attention_k_eq_v``,
  ``num_global_key_value_heads``;
- with ``attention_k_eq_v`` the full layers' keys are also their values (no W_V);
- the last ``num_kv_shared_layers`` layers reuse an earlier layer's K and V (no K or V
  projection, no K norm, no cache of their own); with ``use_double_wide_mlp`` their FFN is
  twice as wide;
- with ``enable_moe_block`` every layer adds a mixture of experts beside its dense FFN (counted
  with it, as a shared expert every token uses): ``num_experts`` experts of
  ``moe_intermediate_size``, ``top_k_experts`` a token, a router with scales, three more norms;
- the per-layer inputs of ``hidden_size_per_layer_input`` (Gemma 3n's, without its AltUp and
  LAuReL: :class:`ffncli.specs.spec.LayerExtrasSpec`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ffncli.specs.archs import _multimodal  # archs imports this module only to read a config
from ffncli.specs.hfconfig import GEMMA2_NORM, Config, gemma_spec, layer_mixers, with_pattern
from ffncli.specs.layers import LayerExtrasSpec
from ffncli.specs.spec import AttentionSpec, FfnSpec, LayerKind, ModelSpec

# The mixture-of-experts block's three norms (after the dense FFN, before and after the experts).
MOE_NORMS = replace(GEMMA2_NORM, per_layer=GEMMA2_NORM.per_layer + 3)


def gemma4_text_spec(c: Config, family: str = "gemma4_text",
                     per_layer_default: int = 256) -> ModelSpec:
    """Gemma4ForCausalLM (``gemma4_text``) and Gemma4UnifiedForCausalLM
    (``gemma4_unified_text``, no per-layer inputs by default)."""
    c = _window(c)
    moe = c.bool("enable_moe_block", False)
    spec = gemma_spec(c, family, norm=MOE_NORMS if moe else GEMMA2_NORM, qk_norm="head")
    if moe:
        spec = replace(spec, ffn=_moe_block(c, spec.ffn))
    n = spec.layers.decoder
    mixers = _gemma4_mixers(c, n)
    shared = c.at_most("num_kv_shared_layers", c.int0("num_kv_shared_layers", 0),
                       "num_hidden_layers", n)
    if 0 < shared < n and set(mixers[:n - shared]) != set(mixers):
        raise c.fail("num_kv_shared_layers", "fewer, leaving a layer of each type of "
                     "layer_types before the layers that reuse its K and V")
    reuses = [i >= n - shared for i in range(n)]
    wide = c.bool("use_double_wide_mlp", False)
    ffns = [_double_wide(spec.ffn) if wide and r else spec.ffn for r in reuses]
    width = c.int0("hidden_size_per_layer_input", per_layer_default)
    if width:
        spec = replace(spec, extras=LayerExtrasSpec(
            altup_inputs=0, laurel_rank=0, per_layer_width=width,
            per_layer_vocab=c.int("vocab_size_per_layer_input", 262144)))
    spec = with_pattern(spec, c, mixers, ffns, shares_kv=reuses)
    kinds = spec.pattern or (LayerKind(),) * n
    assert spec.attention is not None  # gemma_spec always builds it
    attention = _per_layer_attention(c, spec.attention, mixers)
    return replace(spec, pattern=tuple(
        replace(k, attention=None if a == spec.attention else a)
        for k, a in zip(kinds, attention, strict=True)))


def _window(c: Config) -> Config:
    """With use_bidirectional_attention "all", transformers attends sliding_window // 2 + 1
    tokens (its exclusive bounds)."""
    if c.data.get("use_bidirectional_attention") != "all" or c.data.get("sliding_window") is None:
        return c
    return Config({**c.data, "sliding_window": c.int("sliding_window") // 2 + 1}, c.source)


def _moe_block(c: Config, dense: FfnSpec) -> FfnSpec:
    """The dense FFN (every token's, as a shared expert) and the experts beside it: gate and up
    in one matrix and down, no biases; the router's projection, its input scale and a scale per
    expert."""
    experts = c.int("num_experts")
    top_k = c.at_most("top_k_experts", c.int("top_k_experts"), "num_experts", experts)
    return replace(dense, d_ff=c.int("moe_intermediate_size"), experts=experts, top_k=top_k,
                   shared_d_ff=dense.d_ff, router_scales=True)


def _double_wide(ffn: FfnSpec) -> FfnSpec:
    """A KV-sharing layer's dense FFN with use_double_wide_mlp: twice intermediate_size."""
    if ffn.is_moe:
        return replace(ffn, shared_d_ff=2 * ffn.shared_d_ff)
    return replace(ffn, d_ff=2 * ffn.d_ff)


def _gemma4_mixers(c: Config, n: int) -> list[str]:
    """layer_types, by default five sliding layers then a full one; the last layer always
    attends fully (transformers forces it)."""
    if c.data.get("layer_types") is None:
        return ["full" if (i + 1) % 6 == 0 or i == n - 1 else "sliding" for i in range(n)]
    return layer_mixers(c, n)[:-1] + ["full"]


def _overrides(c: Config, mixers: list[str]) -> dict[int, dict[str, Any]]:
    """Each layer's keys apart from the config's: per_layer_config (keys layer numbers, "05" or
    "5"; layers past the last ignored, as transformers does), else what transformers derives
    from global_head_dim and num_global_key_value_heads for the full layers."""
    given = c.mapping("per_layer_config")
    if given is None:
        keys: dict[str, Any] = {"head_dim": c.int("global_head_dim", 512)}
        if c.bool("attention_k_eq_v", False) and c.data.get(
                "num_global_key_value_heads") is not None:
            keys["num_key_value_heads"] = c.data["num_global_key_value_heads"]
        return {i: keys for i, m in enumerate(mixers) if m == "full"}
    overrides = {}
    for key, values in given.items():
        if not key.isascii() or not key.isdigit() or not isinstance(values, dict):
            raise c.fail("per_layer_config", "an object of layer numbers to objects")
        overrides[int(key)] = values
    return overrides


def _per_layer_attention(c: Config, att: AttentionSpec, mixers: list[str]
                         ) -> list[AttentionSpec]:
    """Each layer's attention: the config's with its layer's head_dim and num_key_value_heads;
    with attention_k_eq_v a full layer's keys are its values."""
    k_eq_v = c.bool("attention_k_eq_v", False)
    overrides = _overrides(c, mixers)
    layers = []
    for i, mixer in enumerate(mixers):
        layer = att
        if i in overrides:
            keys = Config({**c.data, **overrides[i]}, f"{c.source}: per_layer_config: {i}")
            head_dim = keys.int("head_dim")
            heads, kv = keys.heads(keys.int("hidden_size"), head_dim=head_dim)
            layer = replace(att, heads=heads, kv_heads=kv, head_dim=head_dim)
        layers.append(replace(layer, values_are_keys=k_eq_v and mixer == "full"))
    return layers


def gemma4_assistant_spec(c: Config, text_type: str = "gemma4_text",
                          backbone_default: int = 1536) -> ModelSpec:
    """Gemma4AssistantForCausalLM (and the unified one): a Gemma 4 language model (text_config;
    its layers reuse the target model's K and V) counted as ``text_type``; the projections from
    and to the target's backbone_hidden_size (and, with use_ordered_embeddings, the centroid
    table) named as not counted."""
    spec = _multimodal(c, text_type)
    d, backbone = spec.d_model, c.int("backbone_hidden_size", backbone_default)
    centroids = (f"centroids ({d:,} -> {c.int('num_centroids', 2048):,})",) \
        if c.bool("use_ordered_embeddings", False) else ()
    return replace(spec, uncounted=(
        f"projections from and to the target model ({2 * backbone:,} -> {d:,}, "
        f"{d:,} -> {backbone:,})",) + centroids)


def gemma4_unified_assistant_spec(c: Config) -> ModelSpec:
    """Gemma4UnifiedAssistantForCausalLM: gemma4_assistant_spec on gemma4_unified_text."""
    return gemma4_assistant_spec(c, "gemma4_unified_text", 3840)
