"""Parameter counts against published exact totals (shared/reference/param-truth.md)."""

from __future__ import annotations

import json

import pytest
from conftest import CONFIGS

from ffncli.counting.model import attention_params, attention_widths, count, ffn_params, norm_params
from ffncli.errors import SpecError
from ffncli.specs.archs import load_config, spec_from_config
from ffncli.specs.spec import (
    AttentionSpec,
    FfnSpec,
    NormSpec,
    Overrides,
    apply_overrides,
    load_preset,
    match_gated_d_ff,
    spec_from_mapping,
)

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
    assert count(apply_overrides(base, Overrides(d_ff=1024))).layers[0].ffn == (
        2 * 512 * 1024 + 1024 + 512)
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


# ---------------------------------------------------------------------------------------------
# Attention widths: head_dim and kv_heads other than d_model / heads.

# gemma-7b: 16 heads of 256 = 4096 wide on a d_model of 3072 (not 3072 / 16 = 192). Published
# total 8,537,680,896 (safetensors index total_size 17,075,361,792 bytes of bf16); GemmaConfig
# ties the embeddings when the key is absent.
GEMMA_7B = {"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576,
            "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
            "num_hidden_layers": 28, "vocab_size": 256000, "hidden_act": "gelu"}


def test_head_dim_wider_than_d_model_over_heads():
    spec = spec_from_config(GEMMA_7B, "gemma-7b")
    c = count(spec)
    assert c.total == 8_537_680_896
    layer = c.layers[0]
    assert layer.attention == 4 * 3072 * 4096  # Q, K, V: 3072 x 4096; O: 4096 x 3072
    assert [r.shape for r in layer.attention_rows] == ["3072 x 4096"] * 3 + ["4096 x 3072"]
    assert layer.flops.attention_scores == 2 * 2 * spec.seq_len * 4096


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_attention_params_equals_the_breakdown(name):
    spec = load_preset(name)
    assert attention_params(spec.d_model, spec.attention) == LAYERS[name][0]


def test_attention_params_with_a_wide_head_dim_and_biases_on_q_k_v_only():
    spec = spec_from_config(GEMMA_7B, "gemma-7b")
    assert attention_params(3072, spec.attention) == 4 * 3072 * 4096
    # Qwen2: biases on Q, K, V (896 + 2 x 128), none on O.
    qwen = AttentionSpec(heads=14, kv_heads=2, qkv_bias=True, out_bias=False)
    assert attention_params(896, qwen) == 896 * 896 + 896 + 2 * (896 * 128 + 128) + 896 * 896


def test_grouped_query_flops_llama3():
    layer = count(load_preset("llama3-8b")).layers[0]  # Q, O 4096 wide; K, V 8 x 128 = 1024
    assert layer.flops.attention_projections == 2 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
    assert layer.flops.attention_scores == 2 * 2 * 8192 * 4096  # seq_len 8192, against Q's width


def test_cross_attention_doubles_the_decoder_score_flops():
    enc, dec = count(load_preset("base")).layers
    assert dec.flops.attention_scores == 2 * enc.flops.attention_scores == 2 * 2 * 2 * 512 * 512


def test_head_flops_use_the_embedding_width():
    """OPT-350m projects 1024 -> 512 before its tied head: 2 x 512 x 50272 per token."""
    assert count(load_config(CONFIGS / "opt-350m.config.json")).head_flops == 2 * 512 * 50272


@pytest.mark.parametrize("kind,bias,params", [("layernorm", True, 2 * 64),
                                              ("layernorm", False, 64),
                                              ("rmsnorm", False, 64), ("rmsnorm", True, 64)])
def test_norm_params_rmsnorm_has_no_bias(kind, bias, params):
    assert norm_params(64, NormSpec(kind=kind, bias=bias)) == params


def test_router_bias_is_its_own_flag():
    ffn = FfnSpec(d_ff=8, experts=4, top_k=2, bias=False, router_bias=True)
    assert ffn_params(6, ffn) == 4 * (6 * 8 + 8 * 6) + 6 * 4 + 4  # the router's 4 biases
    assert ffn_params(6, FfnSpec(d_ff=8, experts=4, top_k=2, bias=True)) == (
        4 * (6 * 8 + 8 + 8 * 6 + 6) + 6 * 4)


# ---------------------------------------------------------------------------------------------
# config.json keys left out take the reference class's defaults.


def _without(name: str, *keys: str) -> dict:
    data = json.loads((CONFIGS / name).read_text())
    for key in keys:
        data.pop(key)
    return data


@pytest.mark.parametrize("name,key", [
    ("llama-2-7b.config.json", "num_key_value_heads"),  # LlamaConfig: None -> heads
    ("mixtral-8x7b.config.json", "num_experts_per_tok"),  # MixtralConfig: 2
    ("bert-base-uncased.config.json", "type_vocab_size"),  # BertConfig: 2
])
def test_config_defaults_of_the_reference_classes(name, key):
    total, active = CONFIG_TOTALS[name]
    c = count(spec_from_config(_without(name, key), name))
    assert (c.total, c.active) == (total, active if active is not None else total)


def test_gpt2_medium_n_inner_null_is_4_d_model():
    """GPT2Config: n_inner None means 4 * n_embd. gpt2-medium: 354,823,168 parameters."""
    data = {**json.loads((CONFIGS / "gpt2.config.json").read_text()),
            "n_embd": 1024, "n_layer": 24, "n_head": 16, "n_inner": None}
    spec = spec_from_config(data, "gpt2-medium")
    assert spec.ffn.d_ff == 4096
    assert count(spec).total == 354_823_168


# ---------------------------------------------------------------------------------------------
# Overrides and validation.


def test_beta_override_reaches_the_spec():
    spec = apply_overrides(load_preset("base"), Overrides(activation="swish", beta=1.5))
    assert (spec.ffn.activation, spec.ffn.beta) == ("swish", 1.5)


def test_fewer_experts_than_top_k_clamps_top_k():
    """Mixtral with one expert is Mistral-7B, parameter for parameter."""
    spec = apply_overrides(load_preset("mixtral-8x7b"), Overrides(experts=1))
    assert (spec.ffn.experts, spec.ffn.top_k) == (1, 1)
    assert (count(spec).total, count(spec).active) == (7_241_732_096, 7_241_732_096)


def test_match_params_uses_the_overridden_d_model():
    # g = f (2d + 1) / (3d + 2) at d = 256: 2048 x 513 / 770 = 1364.45 -> 1364 (not d = 512's 1365)
    spec = apply_overrides(load_preset("base"), Overrides(d_model=256, activation="swiglu",
                                                          match_params=True))
    assert (spec.d_model, spec.ffn.d_ff) == (256, 1364)


def test_explicit_head_dim_needs_no_divisible_d_model():
    spec = spec_from_mapping({"d_model": 10, "ffn": {"d_ff": 4},
                              "attention": {"heads": 4, "head_dim": 8}}, "t")
    assert attention_widths(10, spec.attention) == (32, 32)
    with pytest.raises(SpecError, match="d_model 10 is not divisible by 4 heads"):
        spec_from_mapping({"d_model": 10, "ffn": {"d_ff": 4}, "attention": {"heads": 4}}, "t")
