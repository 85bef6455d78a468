"""The mixtures of experts of readers/moe.py (issue 40): the counting parts they added, computed
by hand from transformers 5.25's shapes, and their hostile configs (one error line, exit 2)."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.counting.flops import attention_projection_flops, attention_score_flops
from ffncli.counting.kv import kv_cache, kv_elements_per_layer
from ffncli.counting.mixers import lightning_matrices, linear_state_elements
from ffncli.counting.parts import expert_norm_params
from ffncli.counting.rows import attention_params
from ffncli.specs.layers import LinearMixerSpec
from ffncli.specs.spec import AttentionSpec, FfnSpec

ZOO = DATA / "zoo" / "configs"


def test_values_narrower_than_queries_and_keys():
    """v_head_dim without a latent (MiMo-V2-Flash): d 16, 4 heads and 2 KV heads, Q and K heads
    6 wide, V heads 4: W_Q 16 x 24, W_K 16 x 12, W_V 16 x 8, W_O 16 x 16 (4 heads x 4)."""
    att = AttentionSpec(heads=4, kv_heads=2, head_dim=6, v_head_dim=4, qkv_bias=False,
                        out_bias=False)
    assert attention_params(16, att) == 384 + 192 + 128 + 256
    assert kv_elements_per_layer(16, att) == 12 + 8  # K and V of a token
    assert attention_projection_flops(16, att) == 2 * (384 + 192 + 128 + 256)
    assert attention_score_flops(16, att, 10) == 2 * 10 * (24 + 16)  # Q K^T, then weights V
    same = AttentionSpec(heads=4, kv_heads=2, head_dim=6, qkv_bias=False, out_bias=False)
    assert attention_params(16, same) == 384 + 192 + 192 + 384


def test_output_gates_of_one_scalar_per_head_and_their_bias():
    """Laguna's g_proj (d_model -> heads) and Beam's gate_bias (one per head): d 16, 4 heads of
    6, 2 KV heads, no biases: Q 16 x 24, K and V 16 x 12, O 24 x 16 = 960; Laguna adds a
    16 x 4 gate; Beam's gate is as wide as Q (fused with W_Q here) plus 4 biases."""
    plain = dict(heads=4, kv_heads=2, head_dim=6, qkv_bias=False, out_bias=False)
    assert attention_params(16, AttentionSpec(**plain)) == 384 + 192 + 192 + 384
    laguna = AttentionSpec(**plain, head_gate=True)
    assert attention_params(16, laguna) == 1152 + 16 * 4
    assert attention_projection_flops(16, laguna) == 2 * (1152 + 64)
    beam = AttentionSpec(**plain, output_gate=True, gate_bias=True)
    assert attention_params(16, beam) == 1152 + 16 * 24 + 4


def test_laguna_and_beam_layers_by_hand():
    """Laguna: d 2048, 48 heads of 128, 8 KV heads, a 2048 x 48 gate, Q/K norms (128 each),
    two norms; Beam: d 5120, 48 heads of 128, 8 KV heads, a 5120 x 6144 gate and 48 gate
    biases, Q/K norms, four norms."""
    laguna = ffncli.count(ffncli.load_spec(config=ZOO / "laguna.config.json"))
    d = 2048
    attention = d * 6144 + 2 * d * 1024 + 6144 * d + d * 48
    assert {layer.attention for layer in laguna.layers} == {attention}
    assert {layer.norm for layer in laguna.layers} == {2 * 128 + 2 * d}
    # the routed layers: 256 experts of 3 x 2048 x 512, a router and its score-correction
    # bias (a parameter in Laguna), a shared expert of 512
    assert laguna.layers[1].ffn == 256 * 3 * d * 512 + d * 256 + 256 + 3 * d * 512
    beam = ffncli.count(ffncli.load_spec(config=ZOO / "beam.config.json"))
    d = 5120
    attention = d * 6144 + 2 * d * 1024 + 6144 * d + d * 6144 + 48
    assert {layer.attention for layer in beam.layers} == {attention}
    assert {layer.norm for layer in beam.layers} == {2 * 128 + 4 * d}


def test_mimo_v2_flash_layers_by_hand():
    """MiMo-V2-Flash's defaults: d 4096, 64 heads, Q/K heads 192 wide, V heads 128; full
    layers 4 KV heads, sliding layers 8 and a sink logit per head; two RMSNorms a layer."""
    count = ffncli.count(ffncli.load_spec(config=ZOO / "mimo_v2_flash.config.json"))
    d, q, o = 4096, 64 * 192, 64 * 128
    full = d * q + d * 4 * 192 + d * 4 * 128 + o * d
    sliding = d * q + d * 8 * 192 + d * 8 * 128 + o * d + 64
    kinds = {(layer.mixer, layer.ffn_active != layer.ffn): layer for layer in count.layers}
    assert kinds["full", True].attention == full == 89_128_960
    assert kinds["sliding", True].attention == sliding == 94_371_904
    assert kinds["full", False].indices == (0,)  # the dense first layer
    assert kinds["full", False].ffn == 3 * d * 16384
    # a routed layer: 256 experts of 3 x 4096 x 2048, a 4096 x 256 router, no shared expert
    assert kinds["sliding", True].ffn == 256 * 3 * d * 2048 + d * 256


def test_lightning_attention_by_hand():
    """MiniMax's lightning attention, d 16, 4 heads of 4 (w 16): qkv_proj 16 x 48, output_gate
    16 x 16, a norm of 16, out_proj 16 x 16; its cache one 4 x 4 state per head, whatever the
    length. MiniMax-Text-01's defaults: d 4096, 32 heads of 128: 5 x 4096^2 + 4096."""
    mix = LinearMixerSpec("lightning", k_heads=4, v_heads=4, k_head_dim=4, v_head_dim=4,
                          conv_kernel=1)
    assert [n for _, _, n in lightning_matrices(16, mix)] == [768, 256, 16, 256]
    assert linear_state_elements(mix) == 4 * 4 * 4
    count = ffncli.count(ffncli.load_spec(config=ZOO / "minimax.config.json"))
    lightning = next(layer for layer in count.layers if layer.mixer == "linear")
    assert lightning.attention == 5 * 4096 * 4096 + 4096
    assert lightning.indices == tuple(range(1, 32, 2))
    kv = kv_cache(ffncli.load_spec(config=ZOO / "minimax.config.json"), 1000)
    states = [p for p in kv.parts if p.kind == "linear"]
    assert [(p.layers, p.per_token, p.state) for p in states] == [(16, 0, 32 * 128 * 128)]


def test_expert_norms_are_norms_active_with_their_expert():
    """Ergo: an RMSNorm of d_model after each of E routed experts and after the shared expert;
    d 16, 4 experts, top-2: 5 x 16 norm weights, a token uses 3 x 16 of them."""
    ffn = FfnSpec(d_ff=8, activation="relu2", bias=False, experts=4, top_k=2, shared_d_ff=8,
                  expert_norm=True)
    assert expert_norm_params(16, ffn) == (80, 48)
    assert expert_norm_params(16, FfnSpec(d_ff=8, experts=4, top_k=2)) == (0, 0)
    count = ffncli.count(ffncli.load_spec(config=ZOO / "ergo.config.json"))
    d, sparse = 8192, count.layers[-1]
    assert sparse.ffn_active != sparse.ffn
    # four RMSNorms and two residual gates, Q and K norms of 128, 256 expert norms, a shared one
    assert sparse.norm == 6 * d + 2 * 128 + 256 * d + d
    assert sparse.total - sparse.active == (sparse.ffn - sparse.ffn_active) + (256 - 8) * d
    # experts of an up and a down projection (no gate), 8192 x 4096 each, a 8192 x 256 router
    assert sparse.ffn == 256 * 2 * d * 4096 + d * 256 + 2 * d * 8192


def _config(name, **changes):
    data = json.loads((ZOO / f"{name}.config.json").read_text())
    return {**data, **changes}


@pytest.mark.parametrize(("config", "message"), [
    (_config("exaone_moe", mlp_layer_types=["sparse"] * 3),
     "key 'mlp_layer_types': expected a list of 32 layer types (sparse, dense), got "
     "['sparse', 'sparse', 'sparse']"),
    (_config("hy_v3", mlp_layer_types=["dense"] * 79 + ["moe"]),
     "key 'mlp_layer_types': expected a list of 80 layer types (sparse, dense), got "
     "['dense', 'dense', 'dense', 'dense', 'dense', 'dense', ...]"),
    (_config("minicpm5_moe", mlp_layer_types=["dense"] * 28),
     "key 'mlp_layer_types': expected at least one sparse layer, got "
     "['dense', 'dense', 'dense', 'dense', 'dense', 'dense', ...]"),
    (_config("minicpm5_moe", mlp_layer_types=None, first_k_dense_replace=28),
     "key 'first_k_dense_replace': expected at least one sparse layer, got 28"),
    (_config("exaone_moe", mlp_layer_types=None, first_k_dense_replace=33),
     "key 'first_k_dense_replace': expected at most num_hidden_layers (32), got 33"),
    (_config("aria_text", mlp_bias=True),
     "key 'mlp_bias': expected false (biases on the shared expert alone are not read), got "
     "True"),
    (_config("hy_v3", mlp_bias=True),
     "key 'mlp_bias': expected false (biases on the shared expert alone are not read), got "
     "True"),
    (_config("beam", attention_bias=True),
     "key 'attention_bias': expected false (biases on Q but not on its output gate are not "
     "read), got True"),
    (_config("laguna", attention_bias=True, gating="per-channel"),
     "key 'attention_bias': expected false (biases on Q but not on its output gate are not "
     "read), got True"),
    (_config("aria_text", moe_topk=9),
     "key 'moe_topk': expected at most moe_num_experts (8), got 9"),
    (_config("mimo_v2_flash", num_key_value_heads=64),
     "key 'num_key_value_heads': expected a divisor of num_attention_heads / 2 (32): sliding "
     "layers have 2 times as many, got 64"),
    (_config("laguna", num_attention_heads_per_layer=[48] * 39 + [44]),
     "key 'num_attention_heads_per_layer': expected a list of 40 head counts, each a multiple "
     "of num_key_value_heads (8), got [48, 48, 48, 48, 48, 48, ...]"),
    (_config("kolibri1_1", kv_source_layers=[0, 2] + list(range(2, 50))),
     "key 'kv_source_layers': expected a list of 50 layers, each itself or an earlier one, "
     "got [0, 2, 2, 3, 4, 5, ...]"),
    (_config("kolibri1_1", layer_types=["full_attention"] * 50),
     "key 'layer_types': expected a list of 50 layer types (indexed_attention, "
     "sliding_attention), got ['full_attention', 'full_attention', 'full_attention', "
     "'full_attention', 'full_attention', 'full_attention', ...]"),
    (_config("minimax_m3_vl_text", layer_types=["minimax_m3_sparse"] * 60),
     "key 'layer_types': expected full_attention layers only (the indexer of the "
     "minimax_m3_sparse layers is not read), got ['minimax_m3_sparse', 'minimax_m3_sparse', "
     "'minimax_m3_sparse', 'minimax_m3_sparse', 'minimax_m3_sparse', 'minimax_m3_sparse', ...]"),
    (_config("flint", mlp_only_layers=list(range(49))),
     "key 'mlp_only_layers': expected at least one sparse layer, got [0, 1, 2, 3, 4, 5, ...]"),
])
def test_hostile_configs(cli, tmp_path, config, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", "--config", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


def test_kolibri1_1_defaults_as_its_class_derives_them(tmp_path):
    """Without layer_types and kv_source_layers, Kolibri 1.1 makes every fifth layer indexed
    and the 2nd and 3rd indexed layers read the 1st's K and V (the 7th to 9th the 6th's, the
    10th the 1st's): the same count as the zoo's config, which writes them out."""
    data = _config("kolibri1_1")
    written = ffncli.count(ffncli.load_spec(config=ZOO / "kolibri1_1.config.json"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in data.items()
                                if k not in ("layer_types", "kv_source_layers")}))
    derived = ffncli.count(ffncli.load_spec(config=path))
    assert derived.total == written.total
    shared = [layer.indices for layer in derived.layers if layer.kind.startswith("kv-sharing")]
    assert shared == [(9, 14, 34, 39, 44, 49)]


@pytest.mark.parametrize("name", ["minimax", "exaone_moe", "flint", "kolibri1",
                                  "mimo_v2_flash", "beam", "ergo"])
def test_layer_types_absent_are_as_the_class_derives_them(tmp_path, name):
    """A config without layer_types counts as its class fills them in (the zoo's configs,
    written by transformers, spell them out): the same mixer for every layer and the same
    total (MiniMax's lightning layers and MiMo's sliding layers have parameters of their own)."""
    written = ffncli.load_spec(config=ZOO / f"{name}.config.json")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in _config(name).items() if k != "layer_types"}))
    derived = ffncli.load_spec(config=path)
    assert [k.mixer for k in derived.decoder_kinds()] == [k.mixer
                                                          for k in written.decoder_kinds()]
    assert ffncli.count(derived).total == ffncli.count(written).total


def test_mimo_v2_flash_head_widths_default_to_its_class(tmp_path):
    """MiMo-V2-Flash's class makes heads 192 wide and values 128 when a config omits head_dim
    and v_head_dim (not hidden_size / heads, 64)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in _config("mimo_v2_flash").items()
                                if k not in ("head_dim", "v_head_dim")}))
    att = ffncli.load_spec(config=path).attention
    assert att is not None and (att.head_dim, att.v_head_dim) == (192, 128)
