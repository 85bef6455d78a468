"""The readers of older and odd decoders and of Gemma 4 (ffncli/specs/readers/classic.py and
gemma4.py), on tiny configs counted by hand from the shapes transformers 5.25 builds (its
modeling_*.py); the zoo (test_zoo_counts) checks them on every type's defaults."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

from ffncli.counting.parts import activation_params, expert_params
from ffncli.specs.spec import FfnSpec

ZOO = DATA / "zoo" / "configs"

# hidden 8, FFN 12, 2 heads of 4; vocabulary 10.
TINY = {"hidden_size": 8, "intermediate_size": 12, "num_attention_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 10}


def _params(cli, tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", "--config", path, "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_xielu_has_two_learned_scalars_in_each_ffn(cli, tmp_path):
    """Apertus: up_proj (12, 8), down_proj (8, 12), act_fn.alpha_p (1,) and alpha_n (1,): 194
    a FFN; q, k, v, o (8, 8) 256; q_norm and k_norm (4,) 8; two norms 16: 474 a layer; the
    word table, the untied head 80 each and the final norm 8: 2 x 474 + 168 = 1,116."""
    doc = _params(cli, tmp_path, {**TINY, "model_type": "apertus", "hidden_act": "xielu"})
    (layer,) = doc["layers"]
    assert (layer["ffn"], layer["attention"], layer["norm"]) == (194, 256, 24)
    assert {"name": "xielu scalars", "shape": "2", "params": 2} in layer["ffn_rows"]
    assert doc["total_params"] == 1_116
    relu2 = _params(cli, tmp_path, {**TINY, "model_type": "apertus", "hidden_act": "relu2"})
    assert relu2["layers"][0]["ffn"] == 192 and relu2["total_params"] == 1_112


def test_learned_activation_scalars_count_once_per_expert():
    ffn = FfnSpec(d_ff=12, activation="xielu", gated=False, bias=False)
    assert activation_params(ffn) == 2
    assert expert_params(8, ffn) == 8 * 12 + 12 * 8 + 2
    assert expert_params(8, FfnSpec(d_ff=12, activation="relu", bias=False)) == 192


def test_bitnet_sub_norms_are_norms_of_the_width_they_normalise(cli, tmp_path):
    """BitNet: gate, up, down 3 x 96 = 288; q (8, 8), k and v (4, 8), o 192; input and
    post-attention norms 16, attn_sub_norm (8,) and ffn_sub_norm (12,): 36 a layer, 516 in
    all; two layers, the table, the head and the final norm: 1,200."""
    doc = _params(cli, tmp_path, {**TINY, "model_type": "bitnet", "num_key_value_heads": 1})
    (layer,) = doc["layers"]
    assert (layer["ffn"], layer["attention"], layer["norm"], layer["total"]) == (288, 192, 36,
                                                                                   516)
    assert doc["total_params"] == 1_200
    arcee = _params(cli, tmp_path, {**TINY, "model_type": "arcee", "num_key_value_heads": 1})
    assert arcee["layers"][0]["norm"] == 16  # the same layers without sub-norms, ungated
    assert arcee["layers"][0]["ffn"] == 192


def test_differential_attention_has_four_lambda_vectors_a_layer(cli, tmp_path):
    """DiffLlama: q, k, v, o (8, 8) 256 and lambda_q1, lambda_k1, lambda_q2, lambda_k2 (4,)
    each: 272 a layer's attention (its group norm has no weights)."""
    doc = _params(cli, tmp_path, {**TINY, "model_type": "diffllama"})
    (layer,) = doc["layers"]
    assert layer["attention"] == 272
    assert layer["attention_rows"][-1] == {"name": "lambdas (q1, k1, q2, k2)", "shape": "4 x 4",
                                           "params": 16}
    llama = _params(cli, tmp_path, {**TINY, "model_type": "llama"})
    assert doc["total_params"] - llama["total_params"] == 2 * 16


def test_modernbert_decoder_prediction_head_by_hand(cli, tmp_path):
    """ModernBERT-decoder: q, k, v, Wo (8, 8) 256, Wi (24, 8) and Wo (8, 12) 288, two norms 16:
    560 a layer (the first's attention norm is the embedding norm); the word table 80, the
    final norm 8, the prediction head's dense (8, 8) 64 and norm 8, the tied decoder's bias 10:
    1,850 in all, as transformers 5.25 builds it. Layers 1 and 2 slide (full every third)."""
    doc = _params(cli, tmp_path, {**TINY, "model_type": "modernbert-decoder",
                                  "num_hidden_layers": 3})
    assert [(x["indices"], x["total"], x["window"]) for x in doc["layers"]] == [
        ([0], 560, 0), ([1, 2], 560, 64)]
    assert (doc["groups"]["head"], doc["total_params"]) == (64 + 8 + 10, 1_850)
    biased = _params(cli, tmp_path, {**TINY, "model_type": "modernbert-decoder",
                                     "classifier_bias": True, "decoder_bias": False})
    assert biased["groups"]["head"] == 64 + 8 + 8


def test_doge_dynamic_mask_and_residual_scales_by_hand(cli, tmp_path):
    """Doge: q (8, 8), k and v (4, 8), o (8, 8) 192, dt_proj (1, 4) 4 and A (1,) 1: 197;
    q_norm and k_norm 8, two norms 16 and input_residual, post_attention_residual (8,) 16:
    40; gate, up, down 288: 525 a layer, as transformers 5.25 builds it (1,218 for two)."""
    doc = _params(cli, tmp_path, {**TINY, "model_type": "doge", "num_key_value_heads": 1})
    (layer,) = doc["layers"]
    assert (layer["attention"], layer["norm"], layer["total"]) == (197, 40, 525)
    assert {"name": "dt_proj and A (dynamic mask)", "shape": "4 x 1 + 1", "params": 5} in \
        layer["attention_rows"]
    assert doc["total_params"] == 1_218


def test_xlnet_relative_attention_and_mask_embedding_by_hand(cli, tmp_path):
    """XLNet: q, k, v, o (8, 2, 4) 256, r (8, 2, 4) 64, r_r_bias, r_s_bias, r_w_bias (2, 4) 24,
    seg_embed (2, 2, 4) 16: 360; two LayerNorms 32; layer_1 (12, 8) and its bias 108, layer_2
    (8, 12) and its bias 104: 604 a layer. The word table 80, mask_emb (1, 1, 8) 8, lm_loss's
    bias 10 (its weight tied): 1,306 for two layers, as transformers 5.25 builds it."""
    doc = _params(cli, tmp_path, {"model_type": "xlnet", "d_model": 8, "d_inner": 12,
                                  "n_head": 2, "d_head": 4, "n_layer": 2, "vocab_size": 10})
    (layer,) = doc["layers"]
    assert (layer["attention"], layer["norm"], layer["ffn"]) == (360, 32, 212)
    assert doc["total_params"] == 1_306
    assert {"name": "mask embedding", "shape": "8", "params": 8} in doc["other"]


GEMMA4 = {**TINY, "model_type": "gemma4_text", "num_key_value_heads": 1, "head_dim": 4,
          "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4,
          "hidden_size_per_layer_input": 3, "vocab_size_per_layer_input": 5,
          "per_layer_config": {"1": {"head_dim": 6}}}


def test_gemma4_layers_and_per_layer_inputs_by_hand(cli, tmp_path):
    """Layer 0 (sliding, head_dim 4): q (8, 8), k and v (4, 8), o 192; q_norm and k_norm 8; four
    norms 32; per_layer_input_gate (3, 8), per_layer_projection (8, 3) and its norm 56; gate,
    up, down 288: 576. Layer 1 (full, head_dim 6 by per_layer_config): q (12, 8), k and v
    (6, 8), o (8, 12) 288; norms 12 + 32; 56; 288: 676. The model: the word table 80 (tied
    head), the per-layer table (5, 2 x 3) 30, per_layer_model_projection (6, 8) and its norm
    (3,) 51, the final norm 8. No AltUp, no LAuReL (Gemma 3n's)."""
    doc = _params(cli, tmp_path, GEMMA4)
    totals = {tuple(x["indices"]): x["total"] for x in doc["layers"]}
    assert totals == {(0,): 576, (1,): 676}
    assert all([r["name"] for r in x["other_rows"]] == ["per-layer input"]
               for x in doc["layers"])
    assert doc["groups"]["other"] == 2 * 56 + 51
    assert doc["total_params"] == 576 + 676 + 80 + 30 + 51 + 8


def test_gemma4_kv_sharing_and_double_wide_ffn(cli, tmp_path):
    """num_kv_shared_layers 1 of 3 (sliding, full, full): layer 2 has no k, v or k_norm
    (6 x 8 twice and 6) and keeps no cache; use_double_wide_mlp makes its FFN 24 wide."""
    config = {**GEMMA4, "num_hidden_layers": 3, "num_kv_shared_layers": 1,
              "use_double_wide_mlp": True, "per_layer_config": {"1": {"head_dim": 6},
                                                                "2": {"head_dim": 6}},
              "layer_types": ["sliding_attention", "full_attention", "full_attention"]}
    doc = _params(cli, tmp_path, config)
    by_layer = {i: x for x in doc["layers"] for i in x["indices"]}
    assert by_layer[1]["total"] - by_layer[2]["total"] == 2 * 48 + 6 - 288
    assert by_layer[2]["ffn"] == 3 * 8 * 24
    assert by_layer[2]["kind"] == "kv-sharing decoder"


# Gemma 4 26B-A4B's parts, small: the full layers' heads from global_head_dim and
# num_global_key_value_heads (no per_layer_config: the Hub's spelling), keys as values, the
# mixture-of-experts block, the last layer reusing K and V with a double-wide dense FFN.
GEMMA4_MOE = {**TINY, "model_type": "gemma4_text", "num_hidden_layers": 3,
              "num_key_value_heads": 2, "head_dim": 4, "sliding_window": 4,
              "layer_types": ["sliding_attention", "full_attention", "full_attention"],
              "hidden_size_per_layer_input": 3, "vocab_size_per_layer_input": 5,
              "global_head_dim": 6, "num_global_key_value_heads": 1, "attention_k_eq_v": True,
              "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2,
              "moe_intermediate_size": 5, "num_kv_shared_layers": 1,
              "use_double_wide_mlp": True}


def test_gemma4_moe_block_and_keys_as_values_by_hand(cli, tmp_path):
    """Layer 0 (sliding, head_dim 4, 2 KV heads): q, k, v, o (8, 8) 256; q_norm and k_norm 8;
    seven norms 56; per-layer input 56; the FFN: gate, up, down (12, 8) 288, router.proj (4, 8)
    32, router.scale (8,) and per_expert_scale (4,) 12, experts.gate_up_proj (4, 10, 8) 320 and
    down_proj (4, 8, 5) 160: 812; 1,188 in all. Layer 1 (full: head_dim 6, one KV head, no
    v_proj): q (12, 8) 96, k (6, 8) 48, o (8, 12) 96; q_norm and k_norm 12; 56; 56; 812:
    1,176. Layer 2 (reuses layer 1's K and V; dense FFN 24 wide): q 96, o 96, q_norm 6, 56,
    56, 576 + 44 + 480: 1,410. The model: the word table 80, the per-layer table (5, 9) 45,
    the projection (9, 8) 72 and its norm 3, the final norm 8. transformers 5.25 builds 3,982
    on the meta device; each token uses 2 of the 4 experts (120 each)."""
    doc = _params(cli, tmp_path, GEMMA4_MOE)
    by_layer = {i: x for x in doc["layers"] for i in x["indices"]}
    assert [(by_layer[i]["total"], by_layer[i]["ffn"]) for i in range(3)] == [
        (1_188, 812), (1_176, 812), (1_410, 1_100)]
    assert [r["name"] for r in by_layer[1]["attention_rows"]] == ["W_Q", "W_K", "W_O"]
    assert by_layer[1]["flops_per_token"]["attention_projections"] == 2 * (2 * 96 + 48)
    assert {"name": "router", "shape": "8 x 4 + 8 + 4", "params": 44} in by_layer[0]["ffn_rows"]
    assert (doc["total_params"], doc["active_params"]) == (3_982, 3_982 - 3 * 2 * 120)


HOSTILE = [
    ({**GEMMA4_MOE, "num_experts": None}, "missing key 'num_experts'"),
    ({**GEMMA4_MOE, "top_k_experts": 5},
     "key 'top_k_experts': expected at most num_experts (4), got 5"),
    ({**GEMMA4, "per_layer_config": {"last": {}}},
     "key 'per_layer_config': expected an object of layer numbers to objects, got "),
    ({**GEMMA4, "per_layer_config": {"1": {"head_dim": 0}}},
     "per_layer_config: 1: key 'head_dim': expected a whole number >= 1, got 0"),
    ({**GEMMA4, "num_kv_shared_layers": 1},
     "key 'num_kv_shared_layers': expected fewer, leaving a layer of each type of layer_types "
     "before the layers that reuse its K and V, got 1"),
    ({**GEMMA4, "num_kv_shared_layers": 3},
     "key 'num_kv_shared_layers': expected at most num_hidden_layers (2), got 3"),
    ({**TINY, "model_type": "arcee", "hidden_act": "relu3"},
     "key 'hidden_act': unsupported activation 'relu3'; supported: relu, gelu, gelu_new, "
     "gelu_fast, gelu_pytorch_tanh, silu, swish, sigmoid, linear, relu2, xielu"),
    ({"model_type": "fuyu", "text_config": [1]}, "key 'text_config': expected an object, got"),
    ({**TINY, "model_type": "doge", "is_moe": True},
     "key 'is_moe': expected false (Doge's cross-domain mixture of experts is not read), got "
     "True"),
]


@pytest.mark.parametrize(("config", "message"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_configs(cli, tmp_path, config, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", "--config", path)
    assert (r.code, r.out) == (2, "") and r.err.count("\n") == 1
    assert r.err.startswith(f"error: {path}: {message}"), r.err


def test_fuyu_counts_its_language_model_and_names_the_patch_projection(cli):
    doc = json.loads(cli("params", "--config", ZOO / "fuyu.config.json", "--json").out)
    persimmon = json.loads(cli("params", "--config", ZOO / "persimmon.config.json",
                               "--json").out)
    assert doc["uncounted"] == ["image patch projection (2,700 -> 4,096, with bias)"]
    assert doc["total_params"] == persimmon["total_params"] == 9_397_175_296


def test_gemma4_assistant_counts_its_language_model_and_names_the_projections(cli):
    doc = json.loads(cli("params", "--config", ZOO / "gemma4_unified_assistant.config.json",
                         "--json").out)
    assert doc["uncounted"] == [
        "projections from and to the target model (7,680 -> 2,304, 2,304 -> 3,840)"]
    assert {x["kind"] for x in doc["layers"]} == {"kv-sharing sliding decoder",
                                                  "kv-sharing decoder"}
    assert [p["elements"] for p in doc["kv_cache"]["parts"]] == [0, 0]


def test_the_engine_refuses_an_activation_it_does_not_compute(cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, "model_type": "arcee"}))
    r = cli("run", "--config", path, "--random", "2")
    assert (r.code, r.out) == (2, "")
    assert r.err == ("error: arcee: run, permute-check and relu-stats do not compute this "
                     "FFN yet (squared ReLU); params counts it exactly\n")


PRESET = ("d_model: 8\nffn: {d_ff: 12%s}\nattention: {heads: 2}\nnorm: {}\n"
          "embeddings: {vocab: 10%s}\n")


def test_a_preset_flag_that_would_change_nothing_is_refused(cli, tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(PRESET % (", router_scales: true", ""))
    r = cli("params", "--preset", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: key 'ffn.router_scales': only a "
                                      "mixture of experts (ffn.experts > 1) has a router\n")


def test_router_scales_count_a_scale_per_input_channel_and_per_expert(cli, tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(PRESET % (", experts: 4, router_scales: true", ""))
    moe = json.loads(cli("params", "--preset", path, "--json").out)
    path.write_text(PRESET % (", experts: 4", ""))
    plain = json.loads(cli("params", "--preset", path, "--json").out)
    assert moe["total_params"] - plain["total_params"] == 8 + 4


def test_a_gpt_sw3_config_is_counted_as_gpt2(cli, tmp_path):
    """GPT-SW3's checkpoints are GPT2LMHeadModel; a config that says model_type gpt-sw3 counts
    as the zoo's (which transformers writes as gpt2): 124,439,808."""
    config = {**json.loads((ZOO / "gpt-sw3.config.json").read_text()), "model_type": "gpt-sw3"}
    assert _params(cli, tmp_path, config)["total_params"] == 124_439_808
