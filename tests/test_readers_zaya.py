"""ZAYA (specs/readers/zaya.py) and the counting parts it added: the convolutions of its
compressed convolutional attention and their state, the router MLP, the skip expert (an active
range), the affine residuals. The expected values are computed by hand from the shapes
transformers 5.25 builds (transformers/models/zaya/modeling_zaya.py: ZayaCCAProjection,
ZayaQKNorm, ZayaRouter, ZayaRouterMLP, ZayaResidualScaling, ZayaModel), not taken from ffncli.
The zoo's config: hidden 2048, 8 heads and 2 KV heads of 128, 16 experts of 2048, top-1, a
router of 256, cca_time0 and cca_time1 2, 40 layers."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.counting.kv import kv_cache
from ffncli.counting.mixers import cca_matrices, cca_state_elements
from ffncli.counting.model import count
from ffncli.counting.parts import (
    input_affine_params,
    residual_affine_params,
    router_mlp_params,
    router_norm_params,
)
from ffncli.specs.layers import CcaSpec
from ffncli.specs.sections import FfnSpec, NormSpec

ZOO = DATA / "zoo" / "configs"
D, R, E = 2048, 256, 16
CONV = (8 + 2) * 128  # conv_channels: the queries' and the keys' widths, side by side


def _config(**changes):
    return {**json.loads((ZOO / "zaya.config.json").read_text()), **changes}


def _load(tmp_path, **changes):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config(**changes)))
    return ffncli.load_spec(config=path)


def _rows(rows):
    return {r.name: r.params for r in rows}


def test_the_convolutions_of_q_and_k_and_the_key_temperature_by_hand(tmp_path):
    """conv_qk_depthwise: Conv1d(1280, 1280, 2, groups=1280), weight (1280, 1, 2) and a bias;
    conv_qk_grouped: Conv1d(1280, 1280, 2, groups=8 + 2), weight (1280, 128, 2) and a bias;
    qk_norm.temp: one a KV head. W_V is v_proj_current and v_proj_delayed, 2048 -> 128 each."""
    layer = count(_load(tmp_path)).layers[1]
    rows = _rows(layer.attention_rows)
    assert rows["Q, K depthwise convolution"] == 1280 * 1 * 2 + 1280 == 3_840
    assert rows["Q, K grouped convolution"] == 1280 * 128 * 2 + 1280 == 328_960
    assert rows["key temperature"] == 2
    assert rows["W_V"] == 2 * 2048 * 128
    assert layer.attention == 2048 * 1024 + 2048 * 256 + 2 * 2048 * 128 + 1024 * 2048 \
        + 3_840 + 328_960 + 2
    # other kernel sizes: the depthwise kernel (1280, 1, 3), the grouped (1280, 128, 4)
    wider = CcaSpec(heads=8, kv_heads=2, head_dim=128, depthwise=3, grouped=4)
    assert [n for _, _, n in cca_matrices(wider)] == [CONV * 3 + CONV, CONV * 128 * 4 + CONV,
                                                       2]


def test_the_router_mlp_by_hand(tmp_path):
    """ZayaRouter: down_proj 2048 -> 256 with a bias; ZayaRouterMLP: fc1 and fc2 256 -> 256
    with biases, out_proj 256 -> 16 + 1 (the skip expert) without; router_states_scale (256)
    in every layer but the first (use_eda = layer_idx != 0); the MLP's RMSNorm (256) a norm."""
    first, rest = count(_load(tmp_path)).layers
    mlp = 2048 * 256 + 256 + 2 * (256 * 256 + 256) + 256 * 17
    assert _rows(first.ffn_rows)["router"] == mlp == 660_480
    assert _rows(rest.ffn_rows)["router"] == mlp + 256
    assert (first.indices, rest.indices) == ((0,), tuple(range(1, 40)))
    assert rest.ffn == 16 * 3 * 2048 * 2048 + mlp + 256 == 201_987_328
    ffn = FfnSpec(d_ff=64, gated=True, bias=False, experts=4, top_k=1, zero_experts=1,
                  router_mlp=8, router_states=True)
    assert router_mlp_params(32, ffn) == 32 * 8 + 8 + 2 * (8 * 8 + 8) + 8 * 5 + 8
    assert router_norm_params(ffn) == 8


def test_the_affine_residuals_and_the_input_scale_by_hand(tmp_path):
    """ZayaResidualScaling after attention and after the FFN: hidden_states_scale,
    hidden_states_bias, residual_scale, residual_bias (2048 each); with the two RMSNorms and
    the router's norm, a layer's norms. ZayaModel's input_hidden_states_scale and _bias (2048
    each) and the final norm: the truth's 6,144 outside the layers and embeddings."""
    c = count(_load(tmp_path))
    assert c.layers[1].norm == 2 * 2048 + 2 * 4 * 2048 + 256 == 20_736
    rows = _rows(c.other_rows)
    assert rows["input scale and bias"] + rows["final norm"] == 6_144
    norm = NormSpec(kind="rmsnorm", bias=False, residual_affine=True)
    assert (residual_affine_params(16, norm), input_affine_params(16, norm)) == (128, 32)
    assert residual_affine_params(16, NormSpec()) == input_affine_params(16, NormSpec()) == 0


def test_the_skip_expert_makes_the_active_count_a_range(tmp_path):
    """ZayaRouter scores 16 experts and a skip expert; a token routed to it (top-1) uses no
    expert: the range is 40 layers x one expert of 3 x 2048 x 2048 wide, its top the zoo's
    active count (one expert a layer)."""
    c = count(_load(tmp_path))
    span = c.active_range
    assert span is not None and span.most == c.active == 1_290_741_584
    assert span.most - span.least == 40 * 3 * 2048 * 2048
    assert span.why == ("a token's top-1 expert choice can fall on the skip (zero) expert, "
                        "which uses no parameters")


def test_the_cache_holds_k_and_v_and_the_cca_state_by_hand(tmp_path):
    """Each layer's LinearAttentionAndFullAttentionLayer: keys and values of 2 KV heads x 128 a
    token; conv_states (1, 1280, (2 - 1) + (2 - 1)); recurrent_states (1, 2 x 128 / 2), the
    previous token's delayed values. Sliding layers keep sliding_window - 1 tokens."""
    kv = kv_cache(_load(tmp_path), 9)
    (part,) = kv.parts[:1]
    assert (part.per_token, part.state) == (2 * 2 * 128, 1280 * 2 + 128)
    assert kv.elements(9) == 40 * (9 * 512 + 2688)
    small = CcaSpec(heads=4, kv_heads=2, head_dim=16, depthwise=2, grouped=2)
    assert cca_state_elements(small) == 96 * 2 + 16  # kv_cache.json: (1, 96, 2) and (1, 16)
    types = ["hybrid_sliding"] * 20 + ["hybrid"] * 20
    sliding = kv_cache(_load(tmp_path, layer_types=types, sliding_window=4), 9)
    assert sliding.elements(9) == 20 * (3 * 512 + 2688) + 20 * (9 * 512 + 2688)


HOSTILE = [
    (_config(layer_types=["hybrid"] * 39),
     "key 'layer_types': expected a list of 40 layer types (hybrid, hybrid_sliding), got"),
    (_config(layer_types=["full_attention"] * 40),
     "key 'layer_types': expected a list of 40 layer types (hybrid, hybrid_sliding), got"),
    (_config(layer_types=["hybrid_sliding"] * 40, sliding_window=None),
     "missing key 'sliding_window'"),
    (_config(router_hidden_size=0),
     "key 'router_hidden_size': expected a whole number >= 1, got 0"),
    (_config(cca_time1=0), "key 'cca_time1': expected a whole number >= 1, got 0"),
    (_config(num_experts_per_tok=17),
     "key 'num_experts_per_tok': expected at most num_experts (16), got 17"),
    (_config(num_experts_per_tok=2),
     "key 'num_experts_per_tok': expected 1 (ZAYA routes a token to one expert), got 2"),
    (_config(num_key_value_heads=1, head_dim=127),
     "key 'head_dim': expected values (1 KV heads x head_dim) that split into two halves, "
     "the current token's and the previous one's, got 127"),
]


@pytest.mark.parametrize(("config", "message"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_configs_of_the_zaya_reader(cli, tmp_path, config, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", "--config", path)
    assert (r.code, r.out) == (2, "") and r.err.count("\n") == 1
    assert r.err.startswith(f"error: {path}: {message}"), r.err


def test_fine_tuning_memory_is_refused_not_counted_wrongly(cli):
    """The tensor inventory (counting/tensors.py) does not itemise the router MLP, its state's
    scale or the affine residuals: --train refuses ZAYA in one line rather than count it short."""
    path = ZOO / "zaya.config.json"
    r = cli("params", "--config", path, "--train", "full")
    assert (r.code, r.out) == (2, "")
    assert r.err == ("error: zaya: option --train: the memory of fine-tuning it is not counted "
                     "yet (the tensor inventory lacks ffn.router_mlp, ffn.router_states, "
                     "norm.residual_affine); params counts its parameters exactly\n")


def test_the_router_mlp_s_flops_by_hand(tmp_path):
    """A token's FFN FLOPs (2 a multiply-add): its one expert (three 2048 x 2048 matrices) and
    the router's down_proj, fc1, fc2 and out_proj (2048 x 256, 256 x 256 twice, 256 x 17)."""
    layer = count(_load(tmp_path)).layers[1]
    assert layer.flops.ffn == 2 * (3 * 2048 * 2048 + 2048 * 256 + 2 * 256 * 256 + 256 * 17)
