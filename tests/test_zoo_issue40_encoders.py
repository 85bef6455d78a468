"""The counting parts issue 40's encoders and seq2seq types added, each against a value computed
by hand from the shapes transformers 5.25 builds (modeling_*.py), not only the zoo's totals:
ALBERT's shared layers, DeBERTa's bias-free key, Longformer's global projections, RoFormer's
rotary table, GTE's down-only bias, TrOCR's cross-attention without an encoder."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.counting.model import count

CONFIGS = DATA / "zoo" / "configs"


def _spec(model_type, tmp_path=None, **changes):
    path = CONFIGS / f"{model_type}.config.json"
    if changes:
        assert tmp_path is not None
        path, config = tmp_path / "config.json", json.loads(path.read_text())
        path.write_text(json.dumps({**config, **changes}))
    return ffncli.load_spec(config=path)


def _layer(counted, kind="encoder"):
    (layer,) = [x for x in counted.layers if x.kind == kind]
    return layer


# AlbertLayer, 4096 wide, FFN 16384: Q, K, V, dense with biases; ffn and ffn_output; 2 norms.
ALBERT_LAYER = 4 * (4096 * 4096 + 4096) + (2 * 4096 * 16384 + 16384 + 4096) + 2 * 2 * 4096
ALBERT_REST = 30000 * 128 + 512 * 128 + 2 * 128 + 2 * 128 + (128 * 4096 + 4096) \
    + (4096 * 4096 + 4096)  # word, positions, token types, norm, projection, pooler


def test_albert_counts_its_shared_layer_once_and_runs_it_every_time():
    counted = count(_spec("albert"))
    layer = _layer(counted)
    assert (layer.count, layer.repeats, layer.total) == (1, 12, ALBERT_LAYER)
    assert ALBERT_LAYER == 201_379_840  # the zoo's one layer
    assert counted.total == ALBERT_LAYER + ALBERT_REST == 222_595_584
    assert counted.flops_ffn == 12 * 2 * 2 * 4096 * 16384


def test_albert_groups_each_hold_their_own_layers(tmp_path):
    counted = count(_spec("albert", tmp_path, num_hidden_groups=2, inner_group_num=2))
    layer = _layer(counted)
    assert (layer.count, layer.repeats) == (4, 6)  # 12 runs of 2 layers over 4 distinct
    assert counted.total == 4 * ALBERT_LAYER + ALBERT_REST


def test_deberta_v1_has_no_key_bias():
    layer = _layer(count(_spec("deberta")))
    # in_proj 768 -> 3 x 768 without bias, q_bias and v_bias, the output dense with bias
    assert layer.attention == 3 * 768 * 768 + 2 * 768 + 768 * 768 + 768
    assert {r.name: r.params for r in layer.attention_rows}["W_K"] == 768 * 768


def test_deberta_v1_relative_table(tmp_path):
    plain = count(_spec("deberta")).total
    relative = count(_spec("deberta", tmp_path, relative_attention=True, pos_att_type=[],
                           max_relative_positions=-1)).total
    assert relative - plain == 2 * 512 * 768  # 2 x max_position_embeddings rows


def test_longformer_layers_have_global_q_k_and_v():
    layer = _layer(count(_spec("longformer")))
    assert layer.attention == 7 * (768 * 768 + 768)
    assert layer.total == 8_859_648  # the zoo's layer


def test_roformer_rotary_table_is_head_dim_wide():
    rows = {r.name: (r.shape, r.params) for r in count(_spec("roformer")).other_rows}
    assert rows["position embeddings"] == ("1536 x 64", 1536 * 64)


def test_gte_ffn_has_a_bias_on_its_down_projection_only():
    layer = _layer(count(_spec("gte")))
    assert layer.ffn == 2 * 768 * 3072 + 3072 * 768 + 768
    assert [r.name for r in layer.ffn_rows] == ["W (gate, activated)", "V (up, linear)", "W2",
                                                "b2"]


def test_bert_generation_with_cross_attention(tmp_path):
    plain = count(_spec("bert-generation"))
    cross = count(_spec("bert-generation", tmp_path, add_cross_attention=True))
    # BertAttention again (Q, K, V, dense with biases) and its output LayerNorm, 24 layers
    assert cross.total - plain.total == 24 * (4 * (1024 * 1024 + 1024) + 2 * 1024)


HOSTILE = [
    ("albert", {"num_hidden_groups": 5},
     "key 'num_hidden_groups': expected a divisor of num_hidden_layers (12), got 5"),
    ("deberta", {"relative_attention": True, "pos_att_type": ["c2p"]},
     "key 'pos_att_type': expected empty (its per-layer position projections are not read), "
     "got ['c2p']"),
    ("deberta", {"talking_head": True},
     "key 'talking_head': expected false (the talking-head projections are not read), got "
     "True"),
]


@pytest.mark.parametrize(("model_type", "changes", "message"), HOSTILE,
                         ids=[m for m, _, _ in HOSTILE])
def test_configs_these_readers_refuse(cli, tmp_path, model_type, changes, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads((CONFIGS / f"{model_type}.config.json")
                                             .read_text()), **changes}))
    r = cli("params", "--config", path)
    assert (r.code, r.out) == (2, "")
    assert r.err == f"error: {path}: {message}\n"
