"""Layers whose weights run several times a token, each run with a KV cache layer of its own
(issue 40, ffncli/specs/readers/loops.py): Dory's recurrent loops and HRM-Text's cycles. The
values are computed by hand from transformers 5.25's shapes (DoryForCausalLM,
HrmTextForCausalLM) at the zoo's configs (the config classes' defaults)."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.counting.kv import cache_layers, kv_cache

ZOO = DATA / "zoo" / "configs"
DORY = json.loads((ZOO / "dory.config.json").read_text())
HRM = json.loads((ZOO / "hrm_text.config.json").read_text())


def _spec(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return ffncli.load_spec(config=path)


def _layer(doc, kind):
    return next(x for x in doc["layers"] if x["kind"] == kind)


# --- Dory: hidden 2560, intermediate 7168, 16 heads and 4 KV heads of 256, vocab 131072; 36
# layers (its config.json says 72: an attention and an "mlp" block each), 8 in, 20 recurrent
# run twice, 8 out; every fourth layer full, the others sliding over 1024 ------------------------


def test_dory_parts_from_transformers_shapes(cli):
    """DoryMLP: gate_proj, up_proj (2560 x 7168), down_proj and suv_gate, suv_up (7168 each);
    DoryAttention: q_proj and gate_proj (2560 x 4096 each: "W_Q (and output gate)"), k_proj and
    v_proj (2560 x 1024), o_proj, sqk and s_gate (4096 each), with the layer's lambda_1 and
    lambda_2 (2560 each) its learned scalars; DoryLMHead: 2560 x 131072 and logit_scale
    (131072); DoryL2Norm has no weight."""
    doc = json.loads(cli("params", "--config", ZOO / "dory.config.json", "--json").out)
    layer = _layer(doc, "recurrent sliding decoder")
    assert {"name": "hidden scales", "shape": "2 x 7168", "params": 2 * 7168} in \
        layer["ffn_rows"]
    assert layer["ffn"] == 3 * 2560 * 7168 + 2 * 7168
    assert {"name": "W_Q (and output gate)", "shape": "2560 x 8192",
            "params": 2 * 2560 * 4096} in layer["attention_rows"]
    assert {"name": "learned scalars", "shape": "13312", "params": 2 * 4096 + 2 * 2560} in \
        layer["attention_rows"]
    assert layer["norm"] == 0 and doc["groups"]["norms"] == 0
    assert doc["groups"]["head"] == 2560 * 131072 + 131072
    assert {"name": "logit scale", "shape": "131072", "params": 131072} in doc["other"]
    assert [(x["kind"], x["count"]) for x in doc["layers"]] == [
        ("sliding decoder", 12), ("decoder", 4), ("recurrent sliding decoder", 15),
        ("recurrent decoder", 5)]


def test_dory_recurrent_layers_keep_a_cache_layer_a_loop(tmp_path):
    """DoryModel.forward (per_loop): layer i keeps cache layer i; the recurrent layers' second
    loop writes copies appended after the 36 (loop l of recurrent layer i: 36 + (l - 1) x 20 +
    i - 8): 56 cache layers of 2 x 4 x 256 values a token; the sliding ones (12 outside the
    loops, 15 x 2 inside) keep the last 1023 tokens."""
    spec = _spec(tmp_path, DORY)
    assert [cache_layers(spec, i) for i in (0, 7, 8, 27, 28, 35)] == [
        (0,), (7,), (8, 36), (27, 55), (28,), (35,)]
    per_token = 2 * 4 * 256
    assert kv_cache(spec, 9).elements(9) == 56 * per_token * 9
    assert kv_cache(spec, 2000).elements(2000) == (12 + 30) * per_token * 1023 \
        + (4 + 10) * per_token * 2000
    parts = kv_cache(spec, 9).parts
    assert [(p.kind, p.layers, p.runs) for p in parts] == [
        ("sliding", 12, 1), ("full", 4, 1), ("sliding", 30, 2), ("full", 10, 2)]


def test_dory_last_loop_keeps_one_cache_layer_a_recurrent_layer(tmp_path):
    """recurrent_kv_cache_mode "last_loop": the loops before the last read the cache without
    writing it (DoryPastReader): 36 cache layers, the recurrent layers still run 3 times
    (their FLOPs)."""
    spec = _spec(tmp_path, {**DORY, "recurrent_kv_cache_mode": "last_loop",
                            "n_recurrent_loops": 3})
    assert kv_cache(spec, 9).elements(9) == 36 * 2 * 4 * 256 * 9
    assert all(p.runs == 1 for p in kv_cache(spec, 9).parts)
    count = ffncli.count(spec)
    assert [(x.kind, x.repeats) for x in count.layers] == [
        ("sliding decoder", 1), ("decoder", 1), ("recurrent sliding decoder", 3),
        ("recurrent decoder", 3)]


def test_dory_flops_count_each_loop(tmp_path):
    """One more loop adds one pass over the 20 recurrent layers' FLOPs; the parameters stay."""
    two, three = (ffncli.count(_spec(tmp_path, {**DORY, "n_recurrent_loops": n}))
                  for n in (2, 3))
    layers = {x.kind: x for x in two.layers}
    one_pass = 15 * layers["recurrent sliding decoder"].flops.total \
        + 5 * layers["recurrent decoder"].flops.total
    assert three.flops_total - two.flops_total == one_pass
    assert three.total == two.total == 3_975_229_440


def test_dory_reads_its_config_in_layers_or_in_blocks(tmp_path):
    """DoryConfig takes the layers as they are (layer_types without "mlp") or as released
    (each layer an attention and an "mlp" block, every count doubled), and derives
    n_recurrent_layers and layer_types when null."""
    in_layers = {**DORY, "layer_types": DORY["layer_types"][::2], "num_hidden_layers": 36,
                 "n_input_layers": 8, "n_recurrent_layers": 20, "n_output_layers": 8}
    derived = {**in_layers, "layer_types": None, "n_recurrent_layers": None}
    want = _spec(tmp_path, DORY)
    for config in (in_layers, derived):
        spec = _spec(tmp_path, config)
        assert (spec.pattern, spec.loops) == (want.pattern, want.loops)


# --- HRM-Text: hidden 1536, intermediate 4096, 12 heads of 128, vocab 151808; two stacks of 16
# layers (num_layers_per_stack; num_hidden_layers 128 = 16 x 2 x (3 + 1) cache layers);
# H_cycles 2, L_cycles 3 -------------------------------------------------------------------------


def test_hrm_text_parts_from_transformers_shapes(cli):
    """HrmTextAttention: q_proj and gate_proj (1536 x 1536 each), k_proj, v_proj, o_proj (no
    GQA); HrmTextMLP 3 x 1536 x 4096; HrmTextRMSNorm has no weight; z_L_init (1536) beside
    the stacks; untied embeddings and head of 151808 x 1536."""
    doc = json.loads(cli("params", "--config", ZOO / "hrm_text.config.json", "--json").out)
    assert [(x["kind"], x["count"], x["runs"], x["indices"]) for x in doc["layers"]] == [
        ("L-module decoder", 16, 6, list(range(16))),
        ("H-module decoder", 16, 2, list(range(16, 32)))]
    layer = doc["layers"][0]
    assert [(r["name"], r["params"]) for r in layer["attention_rows"]] == [
        ("W_Q (and output gate)", 2 * 1536 * 1536), ("W_K", 1536 * 1536),
        ("W_V", 1536 * 1536), ("W_O", 1536 * 1536)]
    assert layer["ffn"] == 3 * 1536 * 4096 and layer["norm"] == 0
    assert doc["groups"]["other"] == 1536
    assert doc["groups"]["embeddings"] == doc["groups"]["head"] == 151808 * 1536


def test_hrm_text_cache_layers_are_transformers_slots(tmp_path):
    """HrmTextModel.forward: the L stack's layer j at (h, l) writes slot (h x 4 + l) x 16 + j,
    the H stack's at (h, 3): 6 runs of each L layer, 2 of each H layer, 128 slots, each
    2 x 12 x 128 values a token (multi-head attention)."""
    spec = _spec(tmp_path, HRM)
    assert cache_layers(spec, 0) == (0, 16, 32, 64, 80, 96)
    assert cache_layers(spec, 15) == (15, 31, 47, 79, 95, 111)
    assert cache_layers(spec, 16) == (48, 112)  # the H stack's first layer
    assert cache_layers(spec, 31) == (63, 127)
    assert sorted(i for j in range(32) for i in cache_layers(spec, j)) == list(range(128))
    kv = kv_cache(spec, 9)
    assert kv.layers == 128 and kv.elements(9) == 128 * 2 * 12 * 128 * 9
    assert [(p.layers, p.runs) for p in kv.parts] == [(96, 6), (32, 2)]


def test_hrm_text_flops_count_each_run(tmp_path):
    """Each token goes through the L stack 6 times and the H stack twice: 128 layer passes,
    then the head (2 x 1536 x 151808)."""
    count = ffncli.count(_spec(tmp_path, HRM))
    (low, high) = count.layers
    assert (low.repeats, high.repeats) == (6, 2)
    assert count.flops_total == 128 * low.flops.total + 2 * 1536 * 151808


def test_hrm_text_reads_a_config_without_num_layers_per_stack(tmp_path):
    """A config older than transformers' cache layers: num_hidden_layers is one stack's."""
    old = {k: v for k, v in HRM.items() if k != "num_layers_per_stack"}
    spec, want = _spec(tmp_path, {**old, "num_hidden_layers": 16}), _spec(tmp_path, HRM)
    assert (spec.pattern, spec.loops) == (want.pattern, want.loops)
    assert ffncli.count(spec).total == 1_447_822_848


def test_the_params_tables_say_the_runs(cli):
    out = cli("params", "--config", ZOO / "hrm_text.config.json").out
    assert "layers 0-15; each run 6 times a token\n" in out
    assert "KV cache (one K and V per head; 128 cache layers, 393,216 values per token)" in out
    assert "96 (16 x 6 runs)" in out and "32 (16 x 2 runs)" in out
    doc = json.loads(cli("params", "--config", ZOO / "dory.config.json", "--json").out)
    assert [(p["layers"], p["runs"]) for p in doc["kv_cache"]["parts"]] == [
        (12, 1), (4, 1), (30, 2), (10, 2)]
    sliding = [i for i in range(8, 28) if (i + 1) % 4]  # the recurrent sliding layers
    assert doc["kv_cache"]["parts"][2]["indices"] == sliding + [36 + i - 8 for i in sliding]


def test_training_memory_is_refused_not_miscounted(cli):
    """The tensor inventory (--train, LoRA) does not list a layer's runs: refused, one line."""
    r = cli("params", "--config", ZOO / "hrm_text.config.json", "--train", "full")
    assert (r.code, r.out) == (2, "")
    assert r.err.startswith("error: ") and "lacks loops" in r.err and r.err.count("\n") == 1


HOSTILE = [
    (DORY, dict(layer_types=["sliding_attention"] * 70),
     "key 'layer_types': expected a list of 72 layer types"),
    (DORY, dict(layer_types=["mlp", "sliding_attention"] * 36),
     "key 'layer_types': expected a list of 72 blocks, an attention block then an \"mlp\" "
     "block a layer, got"),
    (DORY, dict(layer_types=DORY["layer_types"][:-2]),
     "key 'layer_types': expected a list of 72 blocks"),
    (DORY, dict(n_recurrent_layers=30),
     "key 'n_recurrent_layers': expected n_input_layers + n_recurrent_layers + "
     "n_output_layers equal to num_hidden_layers (72), got 30"),
    (DORY, dict(n_recurrent_layers=None, n_input_layers=60),
     "key 'n_input_layers': expected n_input_layers + n_recurrent_layers + n_output_layers "
     "equal to num_hidden_layers (72), got 60"),
    (DORY, dict(n_recurrent_loops=0), "key 'n_recurrent_loops': expected a whole number >= 1"),
    (DORY, dict(recurrent_kv_cache_mode="every"),
     "key 'recurrent_kv_cache_mode': expected 'per_loop' or 'last_loop', got 'every'"),
    (DORY, dict(attention_bias=True), "key 'attention_bias': expected false"),
    (HRM, dict(H_cycles=0), "key 'H_cycles': expected a whole number >= 1, got 0"),
    (HRM, dict(L_cycles="3"), "key 'L_cycles': expected a whole number >= 1, got '3'"),
    (HRM, dict(num_layers_per_stack=-1),
     "key 'num_layers_per_stack': expected a whole number >= 1, got -1"),
]


@pytest.mark.parametrize(("base", "changes", "message"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_configs_of_the_looped_readers(cli, tmp_path, base, changes, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, **changes}))
    r = cli("params", "--config", path)
    assert (r.code, r.out) == (2, "") and r.err.count("\n") == 1
    assert r.err.startswith(f"error: {path}: {message}"), r.err
