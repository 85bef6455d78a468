"""Inkling 2 and its looped variant (issue 40): each new part counted from the
shapes transformers 5.25 gives it (modeling_inkling2.py, modular_inkling2_loop.py), the loop's
cache layers and FLOPs, the loop_config spelling of a checkpoint, and hostile configs."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from helpers.configs import assert_one_line

ZOO = DATA / "zoo"
TRUTHS = json.loads((ZOO / "truths.json").read_text())["types"]


def _config(model_type, **changes):
    return {**json.loads((ZOO / "configs" / f"{model_type}.config.json").read_text()),
            **changes}


def _params(cli, tmp_path, config, *args):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", "--config", path, "--json", *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def _layer(doc, index):
    return next(x for x in doc["layers"] if index in x["indices"])


def test_a_full_layer_of_inkling2_from_transformers_shapes(cli, tmp_path):
    """Inkling2FullAttention at hidden 4608, 48 heads and 8 KV heads of 128, d_rel 16,
    rel_extent 1024, conv_kernel_size 4: q_proj.linear and o_proj.gate_proj 4608 -> 6144 each
    (one row), k_proj and v_proj.linear 4608 -> 1024, o_proj.linear 6144 -> 4608; sconv's
    static_weight (4, 1024) and weight_proj 4608 -> 8 x 4, for K and for V; the stream's two
    conv1d (4608, 1, 4); relative_position_bias.linear 4608 -> 48 x 16 and proj (16, 1024);
    the scales q_proj.norm (48, 128) and relative_position_bias.norm (48, 16); sink_proj
    4608 -> 48. Beside them attention_input.query (3, 4608) and mlp_input.query (4608,), and
    four RMSNorms (Q, K, V inputs and the FFN's)."""
    doc = _params(cli, tmp_path, _config("inkling2_text"))
    full = _layer(doc, 5)
    assert full["indices"] == [5, 11, 17, 23, 29, 35, 41, 47]
    assert [(r["name"], r["params"]) for r in full["attention_rows"]] == [
        ("W_Q (and output gate)", 2 * 4608 * 6144), ("W_K", 4608 * 1024),
        ("W_V", 4608 * 1024), ("W_O", 6144 * 4608),
        ("K, V short convolutions", 2 * 4 * 1024), ("stream short convolutions", 2 * 4608 * 4),
        ("relative logits", 4608 * 48 * 16 + 16 * 1024),
        ("K, V taps from x", 2 * 4608 * 8 * 4),
        ("Q and relative-state scales", 48 * 128 + 48 * 16),
        ("sink projection", 4608 * 48)]
    assert full["other_rows"] == [{"name": "block attention residual queries",
                                   "shape": "4 x 4608", "params": 4 * 4608}]
    assert full["norm"] == 4 * 4608
    stack = TRUTHS["inkling2_text"]["builds"]["causal_lm"]["stacks"]["model.layers"]
    assert full["total"] == stack["params"][5]


def test_inkling2_sliding_layers_and_the_parts_outside_them(cli, tmp_path):
    """A sliding layer: static K and V convolutions (conv1d (1024, 1, 4) each), no taps from x,
    relative logits over the window (proj (16, 1024)); attention_input.query (4608,) but in
    layer 0, mlp_input.query (4608,); two RMSNorms. Outside: embed_tokens (201024, 4608) and
    its embed_norm, final_input.query (4608,), the final norm, lm_head 4608 -> 200058
    (unpadded_vocab_size, never tied)."""
    doc = _params(cli, tmp_path, _config("inkling2_text"))
    first, sliding = _layer(doc, 0), _layer(doc, 1)
    assert "K, V taps from x" not in {r["name"] for r in sliding["attention_rows"]}
    assert [r["params"] for r in first["other_rows"]] == [4608]
    assert [r["params"] for r in sliding["other_rows"]] == [2 * 4608]
    assert sliding["norm"] == 2 * 4608
    assert sliding["total"] - first["total"] == 4608
    outside = {r["name"]: r["params"] for r in doc["other"]}
    assert outside == {"word embeddings": 201024 * 4608, "embedding norm": 4608,
                       "final norm": 4608, "output head": 200058 * 4608,
                       "block attention residual queries (outside the layers)": 4608}


def test_the_loop_s_message_gates_and_message_queries(cli, tmp_path):
    """Inkling2LoopMessageGate (hidden 2304, loop_gate_rank 64): down_proj 4608 -> 64,
    forget_gate_proj and message_gate_proj 64 -> 2304; four in each of the loop's 12 layers
    (6 to 17), none outside it. message_input.query (12, 4, 2304) beside final_input.query."""
    doc = _params(cli, tmp_path, _config("inkling2_loop_text"))
    gates = 4 * (4608 * 64 + 2 * 64 * 2304)
    for i in range(24):
        rows = {r["name"]: r["params"] for r in _layer(doc, i)["other_rows"]}
        assert rows.get("message gates", 0) == (gates if 6 <= i < 18 else 0), i
    outside = {r["name"]: r["params"] for r in doc["other"]}
    assert outside["block attention residual queries (outside the layers)"] == \
        2304 + 12 * 4 * 2304


def test_the_loop_keeps_a_cache_layer_and_runs_its_flops_each_pass(cli, tmp_path):
    """Inkling2LoopTextModel appends (passes - 1) copies of the loop's cache layers after the
    model's 24 (cache_offset = 24 + (pass - 1) x 12 - 6): layer 6's K, V and convolution
    states in cache layers 6, 24 and 36, 48 in all; the loop's 12 layers run three times, so
    the FFN's FLOPs are 48 layers' (each 2 x (8 experts x 3 x 2304 x 1152 + the router's
    2304 x 128))."""
    doc = _params(cli, tmp_path, _config("inkling2_loop_text"), "--seq-len", "9")
    held = sorted(i for p in doc["kv_cache"]["parts"] for i in p["indices"])
    assert held == list(range(48)) and doc["kv_cache"]["layers"] == 48
    sliding = next(p for p in doc["kv_cache"]["parts"] if 6 in p["indices"])
    assert {6, 24, 36, 7, 25, 37} <= set(sliding["indices"]) and 18 not in sliding["indices"]
    full = next(p for p in doc["kv_cache"]["parts"] if 11 in p["indices"])
    assert full["indices"] == [11, 17, 29, 35, 41, 47]
    per_layer = 2 * (8 * 3 * 2304 * 1152 + 2304 * 128)
    assert doc["flops_per_token"]["ffn"] == (24 + 2 * 12) * per_layer


def test_a_checkpoint_s_loop_config_is_read(cli, tmp_path):
    """loop_config (core_start 6, core_end 12, num_passes 2, gate_rank 32) over the flat keys,
    as Inkling2LoopTextConfig reads it: transformers 5.25 builds 26,046,867,456 parameters
    from it (on the meta device); six looped layers, 30 cache layers."""
    config = _config("inkling2_loop_text", loop_config={
        "core_start": 6, "core_end": 12, "num_passes": 2, "gate_rank": 32})
    doc = _params(cli, tmp_path, config, "--seq-len", "9")
    assert doc["total_params"] == 26_046_867_456
    assert {r["name"]: r["params"] for r in _layer(doc, 6)["other_rows"]}["message gates"] \
        == 4 * (4608 * 32 + 2 * 32 * 2304)
    assert "message gates" not in {r["name"] for r in _layer(doc, 12)["other_rows"]}
    assert doc["kv_cache"]["layers"] == 30


def test_fine_tuning_memory_is_refused_not_miscounted(cli, tmp_path):
    """The tensor inventory does not hold Inkling 2's parts (its unpadded head among them):
    --train says so rather than count it."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config("inkling2_text")))
    r = cli("params", "--config", path, "--train", "lora")
    assert (r.code, r.out) == (2, "")
    assert "the tensor inventory lacks embeddings.head_vocab" in r.err


HOSTILE = [
    (_config("inkling2_text", layer_types=["hybrid"] * 47),
     "key 'layer_types': expected a list of 48 layer types (hybrid, hybrid_sliding), got "
     "['hybrid', 'hybrid', 'hybrid', 'hybrid', 'hybrid', 'hybrid', ...]"),
    (_config("inkling2_loop_text", loop_layer_index_start=5),
     "key 'loop_layer_index_start': expected a multiple of n_layers_per_attn_res_block (6), "
     "got 5"),
    (_config("inkling2_loop_text", loop_layer_index_end=30),
     "key 'loop_layer_index_end': expected more than loop_layer_index_start (6) and at most "
     "num_hidden_layers (24), got 30"),
    (_config("inkling2_loop_text", loop_config=[1]),
     "key 'loop_config': expected an object, got [1]"),
    (_config("inkling2_loop_text", loop_config={"num_passes": 0}),
     "key 'loop_config.num_passes': expected a whole number >= 1, got 0"),
]


@pytest.mark.parametrize(("config", "message"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_inkling2_configs(cli, tmp_path, config, message):
    assert_one_line(cli, tmp_path, config, message)
