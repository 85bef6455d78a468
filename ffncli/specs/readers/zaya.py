"""ZAYA (Zyphra's ZAYA1, issue 40): attention whose queries and keys pass through convolutions
and whose values are half delayed by a token, a router that is an MLP with a skip expert, and
affine residuals. Built from the kit of :mod:`ffncli.specs.hfconfig`; it takes ZayaConfig's
defaults (transformers 5.25) for the keys a config omits."""

from __future__ import annotations

from dataclasses import replace

from ffncli.specs.hfconfig import Config, _experts, _with_defaults, gated_decoder_spec
from ffncli.specs.layers import CcaSpec
from ffncli.specs.spec import FfnSpec, LayerKind, ModelSpec

# ZayaConfig's defaults for the keys that size the model (Zyphra/ZAYA1-8B's)
_DEFAULTS = dict(vocab_size=262272, hidden_size=2048, num_hidden_layers=40,
                 num_attention_heads=8, num_key_value_heads=2, head_dim=128,
                 moe_intermediate_size=2048, num_experts=16, num_experts_per_tok=1,
                 router_hidden_size=256, cca_time0=2, cca_time1=2, tie_word_embeddings=True,
                 max_position_embeddings=131072)
# ZAYA's layer_types -> our mixers: every layer attention with the CCA beside it
_MIXERS = {"hybrid": "full", "hybrid_sliding": "sliding"}


def zaya_spec(c: Config) -> ModelSpec:
    """ZayaForCausalLM: each layer ZayaAttention, full ("hybrid") or over sliding_window
    tokens ("hybrid_sliding"), its Q, K and V from ZayaCCAProjection (W_Q, W_K, and W_V split
    into the current and the delayed halves; the convolutions over Q and K and the keys'
    temperature beside it: CcaSpec); a mixture of num_experts SwiGLU experts of
    moe_intermediate_size, one a token (num_experts_per_tok 1, as ZayaConfig requires), whose
    router (an MLP of router_hidden_size) also scores a skip expert that computes nothing (a
    zero expert: the active count is a range); two RMSNorms and two affine residuals a layer,
    and an affine scale on the embeddings. The first layer's router has no previous router
    state to scale."""
    c = _with_defaults(c, **_DEFAULTS)
    experts = _experts(c, "num_experts", "moe_intermediate_size", zero_experts=1,
                       router_mlp=c.int("router_hidden_size"), router_states=True)
    if experts.top_k != 1:  # as ZayaConfig refuses it
        raise c.fail("num_experts_per_tok", "1 (ZAYA routes a token to one expert)")
    spec = gated_decoder_spec(c, "zaya", tie_default=True, seq_default=131072,
                              moe=lambda c, n: (experts, 0))
    att, norm, emb = spec.attention, spec.norm, spec.embeddings
    assert att is not None and norm is not None and emb is not None  # always built
    kv_heads, head_dim = att.kv_heads or att.heads, att.head_dim or 0
    if kv_heads * head_dim % 2:
        raise c.fail("head_dim", f"values ({kv_heads} KV heads x head_dim) that split into "
                     "two halves, the current token's and the previous one's")
    cca = CcaSpec(heads=att.heads, kv_heads=kv_heads, head_dim=head_dim,
                  depthwise=c.int("cca_time0"), grouped=c.int("cca_time1"))
    kinds = tuple(_kind(c, t, cca, experts if i else replace(experts, router_states=False),
                        spec.ffn) for i, t in enumerate(_layer_types(c, spec.layers.decoder)))
    return replace(spec, pattern=kinds, norm=replace(norm, residual_affine=True),
                   embeddings=replace(emb, head_bias=c.bool("lm_head_bias", False)))


def _layer_types(c: Config, n: int) -> list[str]:
    """layer_types (every layer "hybrid" without it), checked."""
    return c.names("layer_types", n, tuple(_MIXERS)) or ["hybrid"] * n


def _kind(c: Config, layer_type: str, cca: CcaSpec, ffn: FfnSpec, common: FfnSpec) -> LayerKind:
    """A layer of this type, its FFN ``ffn`` (None where it is the spec's ``common``)."""
    mixer = _MIXERS[layer_type]
    sliding = mixer == "sliding"
    first = "" if ffn == common else "first "
    return LayerKind(name=f"{first}{'sliding ' if sliding else ''}decoder", mixer=mixer,
                     window=c.int("sliding_window") if sliding else 0, mixer_spec=cca,
                     ffn=None if ffn == common else ffn)
