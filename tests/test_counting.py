"""Parameter counts against published exact totals (shared/reference/param-truth.md)."""

from __future__ import annotations

import pytest

from ffncli.counting import count, ffn_params
from ffncli.hfconfig import load_config
from ffncli.spec import FfnSpec, Overrides, apply_overrides, load_preset, match_gated_d_ff

from conftest import CONFIGS

# preset: (total, active) from the reference table.
TOTALS = {
    "base": (63_082_496, 63_082_496),
    "big": (214_245_376, 214_245_376),
    "gpt2": (124_439_808, 124_439_808),
    "bert-base": (109_482_240, 109_482_240),
    "t5-base": (222_903_552, 222_903_552),
    "opt-125m": (125_239_296, 125_239_296),
    "llama2-7b": (6_738_415_616, 6_738_415_616),
    "llama3-8b": (8_030_261_248, 8_030_261_248),
    "mistral-7b": (7_241_732_096, 7_241_732_096),
    "mixtral-8x7b": (46_702_792_704, 12_879_925_248),
    "qwen2.5-0.5b": (494_032_768, 494_032_768),
    "gemma-2b": (2_506_172_416, 2_506_172_416),
    "minilm-l6": (22_713_216, 22_713_216),
    "tiny": (4 * 16 + 16 + 16 * 4 + 4, 148),
    "toy": (4 * 12 + 12 + 12 * 4 + 4, 112),
}

# preset: (attention, ffn, norms, layer, share) of one (encoder, or only) layer.
LAYERS = {
    "base": (1_050_624, 2_099_712, 2_048, 3_152_384, "66.6%"),
    "gpt2": (2_362_368, 4_722_432, 3_072, 7_087_872, "66.6%"),
    "bert-base": (2_362_368, 4_722_432, 3_072, 7_087_872, "66.6%"),
    "t5-base": (2_359_296, 4_718_592, 1_536, 7_079_424, "66.7%"),
    "llama2-7b": (67_108_864, 135_266_304, 8_192, 202_383_360, "66.8%"),
    "llama3-8b": (41_943_040, 176_160_768, 8_192, 218_112_000, "80.8%"),
    "mixtral-8x7b": (41_943_040, 1_409_318_912, 8_192, 1_451_270_144, "97.1%"),
    "qwen2.5-0.5b": (1_836_160, 13_074_432, 1_792, 14_912_384, "87.7%"),
    "gemma-2b": (9_437_184, 100_663_296, 4_096, 110_104_576, "91.4%"),
}


@pytest.mark.parametrize("name", sorted(TOTALS))
def test_preset_totals_match_reference(name):
    c = count(load_preset(name))
    assert (c.total, c.active) == TOTALS[name]


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_preset_layer_breakdown_matches_reference(name):
    layer = count(load_preset(name)).layers[0]
    attention, ffn, norms, total, share = LAYERS[name]
    assert (layer.attention, layer.ffn, layer.norm, layer.total) == (attention, ffn, norms, total)
    assert f"{layer.ffn_share:.1%}" == share


def test_lesson_figures_from_the_formula():
    """The NumPy lesson: 512 x 2048 + 2048 + 2048 x 512 + 512, and 4 (512^2 + 512) attention."""
    d_model, d_ff = 512, 2048
    lesson_ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model
    lesson_layer = 4 * (d_model * d_model + d_model) + lesson_ffn + 2 * 2 * d_model
    layer = count(load_preset("base")).layers[0]
    assert layer.ffn == lesson_ffn == 2_099_712
    assert layer.total == lesson_layer == 3_152_384
    assert f"{layer.ffn_share:.1%}" == "66.6%"


def test_mixtral_active_ffn_and_router():
    layer = count(load_preset("mixtral-8x7b")).layers[0]
    assert layer.ffn == 8 * 176_160_768 + 32_768
    assert layer.ffn_active == 352_354_304
    assert f"{layer.ffn_active_share:.1%}" == "89.4%"


def test_decoder_layer_of_encoder_decoder_adds_cross_attention_and_a_norm():
    enc, dec = count(load_preset("base")).layers
    assert dec.attention == 2 * enc.attention
    assert dec.norm == 3 * 2 * 512


# config.json: (total, active), published exact totals of the reference classes.
CONFIG_TOTALS = {
    "gpt2.config.json": (124_439_808, None),
    "bert-base-uncased.config.json": (109_482_240, None),
    "all-minilm-l6-v2.config.json": (22_713_216, None),
    "roberta-base.config.json": (124_645_632, None),
    "distilbert-base-uncased.config.json": (66_362_880, None),
    "t5-base.config.json": (222_903_552, None),
    "t5-v1_1-base.config.json": (247_577_856, None),
    "opt-350m.config.json": (331_196_416, None),
    "pythia-70m.config.json": (70_426_624, None),
    "llama-2-7b.config.json": (6_738_415_616, None),
    "llama3-8b.config.json": (8_030_261_248, None),
    "mistral-7b.config.json": (7_241_732_096, None),
    "mixtral-8x7b.config.json": (46_702_792_704, 12_879_925_248),
    "qwen2.5-0.5b.config.json": (494_032_768, None),
    "gemma-2b.config.json": (2_506_172_416, None),
    "phi-2.config.json": (2_779_683_840, None),
}


@pytest.mark.parametrize("name", sorted(CONFIG_TOTALS))
def test_config_totals_match_published(name):
    total, active = CONFIG_TOTALS[name]
    c = count(load_config(CONFIGS / name))
    assert c.total == total
    assert c.active == (active if active is not None else total)


def test_config_without_tie_key_takes_class_default():
    """gemma's config has no tie_word_embeddings: GemmaConfig ties (counting twice is a trap)."""
    spec = load_config(CONFIGS / "gemma-2b.config.json")
    assert spec.embeddings.head == "tied"
    assert spec.ffn.activation == "gelu_tanh" and spec.ffn.gated


def test_t5_v11_is_gated_tanh_gelu_and_v10_is_relu():
    v11 = load_config(CONFIGS / "t5-v1_1-base.config.json").ffn
    v10 = load_config(CONFIGS / "t5-base.config.json").ffn
    assert (v11.gated, v11.activation) == (True, "gelu_tanh")
    assert (v10.gated, v10.activation) == (False, "relu")


def test_match_params_two_thirds_rule():
    # Without biases, g = 2f/3: LLaMA's 4 * 4096 = 16384 -> 10923 (nearest), 11008 (mult. 256).
    assert match_gated_d_ff(4096, 16384, bias=False) == 10923
    assert match_gated_d_ff(4096, 16384, bias=False, multiple_of=256) == 11008
    # With biases, g = f (2d + 1) / (3d + 2): base -> 1365, within one unit of the 2-matrix FFN.
    g = match_gated_d_ff(512, 2048, bias=True)
    assert g == 1365
    dense = ffn_params(512, FfnSpec(d_ff=2048))
    gated = ffn_params(512, FfnSpec(d_ff=g, gated=True))
    assert abs(gated - dense) <= 3 * 512 + 2  # one unit of g is 3d + 2 parameters
    assert gated - dense == 170


def test_match_params_override_on_base():
    spec = apply_overrides(load_preset("base"), Overrides(activation="swiglu", match_params=True))
    assert (spec.ffn.gated, spec.ffn.activation, spec.ffn.d_ff) == (True, "silu", 1365)


def test_overrides_change_counts():
    base = load_preset("base")
    assert count(apply_overrides(base, Overrides(d_ff=1024))).layers[0].ffn == 2 * 512 * 1024 + 1024 + 512
    assert count(apply_overrides(base, Overrides(d_model=256))).layers[0].ffn == (
        2 * 256 * 2048 + 2048 + 256)
    moe = count(apply_overrides(base, Overrides(experts=4, top_k=2))).layers[0]
    assert moe.ffn == 4 * 2_099_712 + 512 * 4 and moe.ffn_active == 2 * 2_099_712 + 512 * 4
    gated = count(apply_overrides(base, Overrides(gated=True))).layers[0]
    assert gated.ffn == 3 * 512 * 2048 + 2 * 2048 + 512
    # A plain activation keeps the gating; it does not change the count.
    llama = apply_overrides(load_preset("llama2-7b"), Overrides(activation="gelu"))
    assert llama.ffn.gated and count(llama).total == 6_738_415_616


def test_flops_per_token_formulas():
    c = count(load_preset("base"))
    enc, dec = c.layers
    assert enc.flops.ffn == 2 * 2 * 512 * 2048
    assert enc.flops.attention_projections == 2 * 4 * 512 * 512
    assert enc.flops.attention_scores == 2 * 2 * 512 * 512  # seq_len 512, 8 heads x 64
    assert dec.flops.attention_projections == 2 * enc.flops.attention_projections
    assert c.head_flops == 2 * 512 * 37000
    mixtral = count(load_preset("mixtral-8x7b")).layers[0]
    assert mixtral.flops.ffn == 2 * (2 * 3 * 4096 * 14336 + 4096 * 8)


def test_memory_counts_all_experts():
    c = count(load_preset("mixtral-8x7b"))
    assert c.memory_bytes() == {"float32": 4 * 46_702_792_704, "bfloat16": 2 * 46_702_792_704,
                                "int8": 46_702_792_704}
