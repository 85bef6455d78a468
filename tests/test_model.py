"""Counting a spec (counting/model.py): parameters against published exact totals
(shared/reference/param-truth.md), FLOPs and the KV cache against closed forms."""

from __future__ import annotations

import json

import pytest
from conftest import CONFIGS, DATA

from ffncli.counting.kv import kv_cache
from ffncli.counting.model import count
from ffncli.counting.parts import ffn_params, norm_params
from ffncli.counting.rows import attention_params
from ffncli.specs.archs import load_config, spec_from_config
from ffncli.specs.spec import (
    AttentionSpec,
    FfnSpec,
    NormSpec,
    Overrides,
    apply_overrides,
    load_preset,
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
# KV cache in `params`: closed forms per attention kind, the JSON keys, --batch.


MODELS = json.loads((DATA / "arch_totals.json").read_text())["models"]


def _spec(name):
    return spec_from_config(dict(MODELS[name]["config"]), name)


# name: (kind, values cached per token = layers x per-layer width), each a closed form.
CASES = {
    # LLaMA-2-7B, full multi-head: 32 layers x K and V x 4096. 2 bytes each: 0.5 MiB a token.
    "llama2-7b": ("mha", 32 * 2 * 4096),
    # LLaMA-3-8B, grouped queries: 32 layers x K and V x 8 kv heads x 128.
    "llama3-8b": ("gqa", 32 * 2 * 8 * 128),
    "mixtral-8x7b": ("gqa", 32 * 2 * 8 * 128),
    # T5: each decoder layer caches self- and cross-attention K and V (12 x 2 x 2 x 768).
    "t5-base": ("mha", 12 * 2 * 2 * 12 * 64),
    # BERT: an encoder keeps no cache.
    "bert-base": ("none", 0),
}

CONFIG_CASES = {
    # StarCoderBase, multi-query: 40 layers x K and V x one head of 128.
    "starcoderbase": ("mqa", 40 * 2 * 128),
    # Falcon-7B: multi-query, 32 layers x 2 x 64.
    "falcon-7b": ("mqa", 32 * 2 * 64),
    # DeepSeek-V3, latent attention: 61 layers x (kv_lora_rank 512 + rope key 64) = the
    # DeepSeek-V2 paper's (d_c + d_h^R) l, 576 per layer; 70,272 bytes a token in bf16.
    "DeepSeek-V3": ("mla", 61 * (512 + 64)),
    # Gemma-3-1B: one kv head of 256, 26 layers (sliding windows not modelled: an upper bound).
    "gemma-3-1b": ("mqa", 26 * 2 * 256),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_presets(name):
    kv = kv_cache(load_preset(name), seq_len=100, batch=3)
    assert (kv.kind, kv.elements_per_token) == CASES[name]
    assert kv.bytes_per_token() == {"float16": 2 * CASES[name][1], "bfloat16": 2 * CASES[name][1],
                                    "fp8": CASES[name][1], "int8": CASES[name][1]}
    assert kv.bytes()["bfloat16"] == 300 * 2 * CASES[name][1]


@pytest.mark.parametrize("name", sorted(CONFIG_CASES))
def test_configs(name):
    kv = kv_cache(_spec(name), seq_len=1, batch=1)
    assert (kv.kind, kv.elements_per_token) == CONFIG_CASES[name]


def test_published_per_token_figures():
    assert kv_cache(load_preset("llama2-7b"), 1).bytes_per_token()["float16"] == 2**19  # 0.5 MiB
    assert kv_cache(_spec("DeepSeek-V3"), 1).bytes_per_token()["bfloat16"] == 70_272


def test_params_json_keys_and_batch(cli):
    r = cli("params", "--preset", "llama3-8b", "--seq-len", "8192", "--batch", "4", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["kv_cache"] == {
        "kind": "gqa", "layers": 32, "elements_per_token": 65_536,
        "parts": [{"kind": "full", "layers": 32, "runs": 1, "indices": list(range(32)),
                   "per_token": 65_536
                   // 32, "cap": 0, "state": 0, "elements": 65_536 * 8192}],
        "elements": 65_536 * 8192,
        "bytes_per_token": {"float16": 131_072, "bfloat16": 131_072, "fp8": 65_536,
                            "int8": 65_536},
        "seq_len": 8192, "batch": 4,
        "bytes": {"float16": 4 * 2**30, "bfloat16": 4 * 2**30, "fp8": 2 * 2**30,
                  "int8": 2 * 2**30},
    }
    total = 8_030_261_248
    assert doc["memory_bytes"] == {"float32": 4 * total, "bfloat16": 2 * total, "int8": total,
                                   "int4": total // 2}
    one = cli("params", "--preset", "llama3-8b", "--seq-len", "8192", "--json").json()
    assert one["kv_cache"]["batch"] == 1 and one["kv_cache"]["bytes"]["fp8"] == 2**29


def test_params_table_shows_the_cache(cli):
    r = cli("params", "--preset", "mistral-7b", "--seq-len", "1000", "--batch", "2")
    assert r.code == 0
    assert "KV cache (grouped-query: K and V per kv head; 32 layers, 65,536 values per token)" \
        in r.out
    assert "262,144,000" in r.out  # 131,072 bytes x 1,000 x 2 in float16
    assert "int4" in r.out
    r = cli("params", "--preset", "bert-base")
    assert "KV cache: none (no decoder layers)" in r.out


def test_int4_rounds_up_to_whole_bytes():
    from ffncli.counting.model import count

    assert count(load_preset("tiny")).weight_bytes()["int4"] == (148 + 1) // 2


def test_batch_must_be_positive(cli):
    r = cli("params", "--preset", "tiny", "--batch", "0")
    assert r.code == 2 and r.err.startswith("error: ") and "--batch" in r.err
