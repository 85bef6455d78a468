"""Gemma 4's language models (transformers' Gemma4TextConfig and Gemma4UnifiedTextConfig).

Gemma 3's layers (four norms, a norm on Q and on K, sliding or full by layer_types) with three
additions read here: a head width (and KV heads) per layer from ``per_layer_config`` (the full
layers' 512-wide heads), the last ``num_kv_shared_layers`` layers reusing an earlier layer's K
and V (no K or V projection, no K norm, no cache of their own; with ``use_double_wide_mlp``
their FFN twice as wide), and the per-layer inputs of ``hidden_size_per_layer_input`` (Gemma
3n's, without its AltUp and LAuReL: :class:`ffncli.specs.spec.LayerExtrasSpec`).
"""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import GEMMA2_NORM, Config, gemma_spec, layer_mixers, with_pattern
from ffncli.specs.spec import AttentionSpec, LayerExtrasSpec, LayerKind, ModelSpec

# What transformers' Gemma 4 builds that ffncli does not read: refused by key, in one line.
_NOT_READ = {
    "enable_moe_block": "false (Gemma 4's mixture-of-experts block is not read)",
    "attention_k_eq_v": "false (keys reused as values are not read)",
}


def gemma4_text_spec(c: Config, family: str = "gemma4_text",
                     per_layer_default: int = 256) -> ModelSpec:
    """Gemma4ForCausalLM (``gemma4_text``) and Gemma4UnifiedForCausalLM
    (``gemma4_unified_text``, no per-layer inputs by default)."""
    for key, expected in _NOT_READ.items():
        if c.bool(key, False):
            raise c.fail(key, expected)
    spec = gemma_spec(c, family, norm=GEMMA2_NORM, qk_norm="head")
    n = spec.layers.decoder
    mixers = _gemma4_mixers(c, n)
    shared = c.at_most("num_kv_shared_layers", c.int0("num_kv_shared_layers", 0),
                       "num_hidden_layers", n)
    reuses = [i >= n - shared for i in range(n)]
    if 0 < shared < n and set(mixers[:n - shared]) != set(mixers):
        raise c.fail("num_kv_shared_layers", "fewer, leaving a layer of each type of "
                     "layer_types before the layers that reuse its K and V")
    wide = c.bool("use_double_wide_mlp", False)
    ffns = [replace(spec.ffn, d_ff=2 * spec.ffn.d_ff) if wide and r else spec.ffn
            for r in reuses]
    width = c.int0("hidden_size_per_layer_input", per_layer_default)
    if width:
        spec = replace(spec, extras=LayerExtrasSpec(
            altup_inputs=0, laurel_rank=0, per_layer_width=width,
            per_layer_vocab=c.int("vocab_size_per_layer_input", 262144)))
    spec = with_pattern(spec, c, mixers, ffns, shares_kv=reuses)
    kinds = spec.pattern or (LayerKind(),) * n
    assert spec.attention is not None  # gemma_spec always builds it
    attention = _per_layer_attention(c, spec.attention, n)
    return replace(spec, pattern=tuple(
        replace(k, attention=None if a == spec.attention else a)
        for k, a in zip(kinds, attention, strict=True)))


def _gemma4_mixers(c: Config, n: int) -> list[str]:
    """layer_types, by default five sliding layers then a full one; the last layer always
    attends fully (transformers forces it)."""
    if c.data.get("layer_types") is None:
        return ["full" if (i + 1) % 6 == 0 or i == n - 1 else "sliding" for i in range(n)]
    return layer_mixers(c, n)[:-1] + ["full"]


def _per_layer_attention(c: Config, att: AttentionSpec, n: int) -> list[AttentionSpec]:
    """Each layer's attention: the config's, with the head_dim and num_key_value_heads that
    per_layer_config gives its layer (keys are layer numbers, "05" or "5"; layers past the
    last are ignored, as transformers does)."""
    overrides = c.mapping("per_layer_config") or {}
    layers = [att] * n
    for key, values in overrides.items():
        if not key.isascii() or not key.isdigit() or not isinstance(values, dict):
            raise c.fail("per_layer_config", "an object of layer numbers to objects")
        i = int(key)
        if i >= n:
            continue
        layer = Config({**c.data, **values}, f"{c.source}: per_layer_config: {key}")
        head_dim = layer.int("head_dim")
        heads, kv = layer.heads(layer.int("hidden_size"), head_dim=head_dim)
        layers[i] = replace(att, heads=heads, kv_heads=kv, head_dim=head_dim)
    return layers
