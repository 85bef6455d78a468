"""LLaMA-shaped decoders (a gated FFN, pre-norms, grouped-query attention) and their twists:
biases, norms on Q and K, sliding windows by layer_types, sinks. The table also names the kit's
:func:`~ffncli.specs.hfconfig.gated_decoder_spec` here (LLaMA, Phi-3, OLMo, Granite, ...).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ffncli.specs.hfconfig import (
    COHERE_NORM,
    Config,
    gated_decoder_spec,
    layer_mixers,
    patterned_decoder,
    windowed,
    with_pattern,
    with_sinks,
)
from ffncli.specs.spec import ModelSpec


def windowed_decoder(c: Config, family: str, **options: Any) -> ModelSpec:
    """The gated decoder, its layers' windows as windowed reads them (Mistral, Qwen2, Qwen3)."""
    return windowed(lambda c: gated_decoder_spec(c, family, **options))(c)


def patterned(c: Config, family: str, **options: Any) -> ModelSpec:
    """The gated decoder, its layers' mixers by layer_types (patterned_decoder)."""
    return patterned_decoder(family, **options)(c)


def seed_oss_spec(c: Config) -> ModelSpec:
    """SeedOssForCausalLM: the patterned decoder, a bias on O by attention_out_bias."""
    return patterned(c, "seed_oss", out_bias=c.bool("attention_out_bias", False))


def cohere_spec(c: Config) -> ModelSpec:
    """CohereForCausalLM: one LayerNorm without bias a layer, the head tied, norms on each
    head's Q and K with use_qk_norm."""
    return gated_decoder_spec(c, "cohere", tie_default=True, norm=COHERE_NORM,
                              qk_norm="heads" if c.bool("use_qk_norm", False) else "none")


def granite_swa_spec(c: Config) -> ModelSpec:
    """Granite with sliding windows by layer_types and a learned sink logit per head."""
    return with_sinks(patterned_decoder("granite_swa"))(c)


def ernie4_5_spec(c: Config) -> ModelSpec:
    """Ernie4_5ForCausalLM: use_bias on every projection of attention and FFN."""
    bias = c.bool("use_bias", False)
    spec = gated_decoder_spec(c, "ernie4_5", qkv_bias=bias, out_bias=bias)
    return replace(spec, ffn=replace(spec.ffn, bias=bias))


def lfm2_ffn_width(c: Config) -> int:
    """LFM2's FFN width: with block_auto_adjust_ff_dim, 2/3 of intermediate_size (rounded
    down), times block_ffn_dim_multiplier (rounded down) and rounded up to block_multiple_of."""
    width = c.int("intermediate_size")
    if not c.bool("block_auto_adjust_ff_dim", True):
        return width
    width = int(2 * width / 3)
    if c.data.get("block_ffn_dim_multiplier") is not None:
        width = int(c.number("block_ffn_dim_multiplier") * width)
        multiple = c.int("block_multiple_of", 256)
        width = multiple * -(-width // multiple)
    return width


def lfm2_spec(c: Config) -> ModelSpec:
    """Lfm2ForCausalLM with attention layers (its short-convolution layers, "conv" in
    layer_types, are refused by name): norms on Q and K, the FFN width of lfm2_ffn_width."""
    spec = gated_decoder_spec(c, "lfm2", tie_default=True, qk_norm="head",
                              seq_default=128000)
    spec = replace(spec, ffn=replace(spec.ffn, d_ff=lfm2_ffn_width(c)))
    return with_pattern(spec, c, layer_mixers(c, spec.layers.decoder))


def emu3_spec(c: Config) -> ModelSpec:
    """Emu3ForCausalLM: LLaMA's layers, from transformers' Emu3Config's text_config (as
    AutoModelForCausalLM builds it), the VQ-VAE image tokenizer named as not counted; or from
    the keys at the top of a config that has them (BAAI/Emu3-Chat's config.json spells them so,
    and Emu3ForCausalLM reads them there)."""
    text = c.mapping("text_config")
    if "hidden_size" in c.data or text is None:
        return gated_decoder_spec(c, "emu3")
    spec = gated_decoder_spec(Config({**text, "model_type": "emu3"}, f"{c.source}: text_config"),
                              "emu3")
    return replace(spec, name=c.name("emu3"), uncounted=("VQ-VAE image tokenizer",))
