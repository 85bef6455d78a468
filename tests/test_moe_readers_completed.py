"""DBRX, dots.llm1, HunYuan (dense and MoE) and LFM2-MoE (readers/moe.py, issue 40):
types whose defaults transformers 5.25 cannot build, checked in the zoo on their defaults
completed by published values (tests/fixtures/make_zoo.py's COMPLETED). Here: their layers
computed by hand from transformers' shapes, the published checkpoints' totals, the router of a
one-expert mixture, and their hostile configs (one error line, exit 2)."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from helpers.configs import assert_one_line

import ffncli
from ffncli.counting.flops import ffn_flops
from ffncli.counting.parts import ffn_active_params, ffn_params, router_params
from ffncli.counting.rows import ffn_block_rows
from ffncli.specs.spec import FfnSpec

ZOO = DATA / "zoo" / "configs"


def _config(name, **changes):
    return {**json.loads((ZOO / f"{name}.config.json").read_text()), **changes}


def _count(tmp_path, name, **changes):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config(name, **changes)))
    return ffncli.count(ffncli.load_spec(config=path))


def test_a_routed_block_of_one_expert_has_its_router():
    """HunYuan-MoE's default num_experts is 1, and its gate still scores it (wg: d x 1): d 16,
    a SwiGLU of 8 (3 x 16 x 8 = 384), a shared expert as wide: 384 + 16 + 384. Without
    ``routed`` one expert is a dense FFN, no router."""
    ffn = FfnSpec(d_ff=8, activation="silu", gated=True, bias=False, shared_d_ff=8, routed=True)
    assert ffn.is_moe
    assert router_params(16, ffn) == 16
    assert ffn_params(16, ffn) == ffn_active_params(16, ffn) == 384 + 16 + 384
    assert [(r.shape, r.params) for r in ffn_block_rows(16, ffn) if r.name == "router"] == [
        ("16 x 1", 16)]
    assert ffn_flops(16, ffn) == 2 * (384 + 16 + 384)
    dense = FfnSpec(d_ff=8, activation="silu", gated=True, bias=False, shared_d_ff=8)
    assert not dense.is_moe and ffn_params(16, dense) == 768


def test_hunyuan_layers_by_hand():
    """HunYuan's defaults (head_dim 128 completed): d 4096, 32 heads, as many KV heads,
    intermediate_size 11008; the dense layer a SwiGLU, the MoE layer one routed expert, its
    4096 x 1 gate and a shared expert as wide; Q and K norms of 128 beside two norms."""
    d, f = 4096, 11008
    attention, norms = 4 * d * d, 2 * d + 2 * 128
    dense = ffncli.count(ffncli.load_spec(config=ZOO / "hunyuan_v1_dense.config.json"))
    assert [(layer.ffn, layer.attention, layer.norm) for layer in dense.layers] == [
        (3 * d * f, attention, norms)]
    moe = ffncli.count(ffncli.load_spec(config=ZOO / "hunyuan_v1_moe.config.json"))
    assert [(layer.ffn, layer.attention, layer.norm) for layer in moe.layers] == [
        (3 * d * f + d + 3 * d * f, attention, norms)]
    assert moe.total == moe.active == 13_188_337_664  # the zoo's, as transformers builds it


def test_hunyuan_top_k_of_each_layer(tmp_path):
    """moe_topk as a list (Hunyuan-A13B writes one a layer): 4 experts of 3 x 4096 x 11008,
    top-1 to top-4 by layer; each layer's active FFN its own, the total unchanged."""
    d, expert = 4096, 3 * 4096 * 11008
    count = _count(tmp_path, "hunyuan_v1_moe", num_experts=4, moe_topk=[1, 2, 3, 4] * 8)
    assert [(layer.kind, layer.indices[:2], layer.ffn_active) for layer in count.layers] == [
        (f"top-{k} decoder", (k - 1, k + 3), k * expert + 4 * d + expert) for k in (1, 2, 3, 4)]
    assert {layer.ffn for layer in count.layers} == {4 * expert + 4 * d + expert}


def test_dbrx_layer_by_hand():
    """DBRX's defaults: d 2048, 16 heads of 128, one KV head (attn_config's kv_n_heads), Q, K
    and V in Wqkv (2048 x 2304); 4 experts of 3 x 2048 x 3584, top-1, a 2048 x 4 router; two
    LayerNorms without bias; the head untied."""
    count = ffncli.count(ffncli.load_spec(config=ZOO / "dbrx.config.json"))
    d, expert = 2048, 3 * 2048 * 3584
    (layer,) = count.layers
    assert (layer.ffn, layer.ffn_active) == (4 * expert + 4 * d, expert + 4 * d)
    assert (layer.attention, layer.norm) == (d * (d + 2 * 128) + d * d, 2 * d)
    assert count.groups["head"] == 32000 * d


def test_lfm2_moe_layers_by_hand():
    """LFM2-8B-A1B (the zoo's completion): d 2048; a conv layer's in_proj 2048 x 6144, depthwise
    conv of 3 taps, out_proj 2048 x 2048; attention 32 heads of 64, 8 KV heads, Q/K norms of
    64; 2 dense layers of 3 x 2048 x 7168, then 32 experts of 3 x 2048 x 1792, top-4, a
    2048 x 32 router; the head tied."""
    count = ffncli.count(ffncli.load_spec(config=ZOO / "lfm2_moe.config.json"))
    d = 2048
    conv, attention = d * 3 * d + d * 3 + d * d, 2 * d * d + 2 * d * 512
    dense, expert = 3 * d * 7168, 3 * d * 1792
    assert [(layer.kind, len(layer.indices), layer.ffn, layer.attention, layer.norm)
            for layer in count.layers] == [
        ("conv dense decoder", 2, dense, conv, 2 * d),
        ("decoder", 6, 32 * expert + 32 * d, attention, 2 * d + 2 * 64),
        ("conv decoder", 16, 32 * expert + 32 * d, conv, 2 * d)]
    assert [(layer.indices) for layer in count.layers][1] == (2, 6, 10, 14, 18, 21)
    assert count.layers[1].ffn_active == 4 * expert + 32 * d
    # LiquidAI's figures for LFM2-8B-A1B: 8.3B total, 1.5B active
    assert (round(count.total / 1e8), round(count.active / 1e8)) == (83, 16)


def test_published_totals(tmp_path):
    """Known answers: databricks/dbrx-instruct, 132B total and 36B active (d_model 6144, 48
    heads, 40 layers, 8 KV heads, 16 experts of 10752, top-4, vocabulary 100352); dots.llm1,
    142B total and 14B active (the zoo's completion with hidden_size 4096, the first layer
    dense, no sliding layers); Hunyuan-A13B, 80B and 13B."""
    dbrx = _count(tmp_path, "dbrx", d_model=6144, n_heads=48, n_layers=40, vocab_size=100352,
                  attn_config={"kv_n_heads": 8, "clip_qkv": 8, "rope_theta": 500000},
                  ffn_config={"ffn_hidden_size": 10752, "moe_num_experts": 16,
                              "moe_top_k": 4})
    assert (dbrx.total // 10**9, dbrx.active // 10**9) == (131, 36)  # 131.6B: "132B"
    dots1 = _count(tmp_path, "dots1", hidden_size=4096, first_k_dense_replace=1,
                   sliding_window=None, layer_types=None)
    assert (dots1.total // 10**9, dots1.active // 10**9) == (142, 14)
    # Hunyuan-A13B: 80B total, 13B active (64 experts of 3072, top-8 written a layer, 8 KV
    # heads, vocabulary 128167; its lists of moe_intermediate_size and num_shared_expert agree
    # with what transformers builds)
    a13b = _count(tmp_path, "hunyuan_v1_moe", num_experts=64, moe_topk=[8] * 32,
                  intermediate_size=3072, num_key_value_heads=8, vocab_size=128167,
                  moe_intermediate_size=[3072] * 32, num_shared_expert=[1] * 32)
    assert (a13b.total // 10**9, round(a13b.active / 1e9)) == (80, 13)


def test_dots1_layer_types_absent_slide_from_max_window_layers(tmp_path):
    """Without layer_types, Dots1Config slides the layers from max_window_layers on (default
    62, all 62 full) while sliding_window is set."""
    plain = _count(tmp_path, "dots1", layer_types=None)
    assert {layer.mixer for layer in plain.layers} == {"full"}
    slid = _count(tmp_path, "dots1", layer_types=None, max_window_layers=60)
    assert [(layer.mixer, layer.window, layer.indices) for layer in slid.layers][-1] == (
        "sliding", 4096, (60, 61))


@pytest.mark.parametrize(("config", "message"), [
    (_config("dbrx", tie_word_embeddings=True),
     "key 'tie_word_embeddings': expected false (DBRX never ties its head), got True"),
    (_config("dbrx", n_heads=12),
     "key 'n_heads': expected a divisor of d_model (2,048), got 12"),
    (_config("dbrx", attn_config={"kv_n_heads": 3}),
     "attn_config: key 'kv_n_heads': expected a divisor of n_heads (16), got 3"),
    (_config("dbrx", attn_config=3),
     "key 'attn_config': expected an object, got 3"),
    (_config("dbrx", ffn_config={"moe_top_k": 5}),
     "ffn_config: key 'moe_top_k': expected at most moe_num_experts (4), got 5"),
    (_config("dbrx", ffn_config={"ffn_act_fn": {"name": "mish"}}),
     "ffn_config: ffn_act_fn: key 'name': unsupported activation 'mish'; supported: relu, "
     "gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, silu, swish, sigmoid, linear"),
    (_config("dots1", n_shared_experts=None), "missing key 'n_shared_experts'"),
    (_config("dots1", num_experts_per_tok=None), "missing key 'num_experts_per_tok'"),
    (_config("hunyuan_v1_moe", moe_topk=[1] * 31),
     "key 'moe_topk': expected a top-k, or a list of 32 (each 1 to num_experts, 1), got "
     "[1, 1, 1, 1, 1, 1, ...]"),
    (_config("hunyuan_v1_moe", moe_topk=2),
     "key 'moe_topk': expected at most num_experts (1), got 2"),
    (_config("lfm2_moe", layer_types=None), "missing key 'layer_types'"),
    (_config("lfm2_moe", layer_types=["conv"] * 23 + ["sliding_attention"]),
     "key 'layer_types': expected a list of 24 layer types (conv, full_attention), got "
     "['conv', 'conv', 'conv', 'conv', 'conv', 'conv', ...]"),
])
def test_hostile_configs(cli, tmp_path, config, message):
    assert_one_line(cli, tmp_path, config, message)
