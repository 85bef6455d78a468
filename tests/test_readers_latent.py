"""Latent-attention variants (specs/readers/latent.py) and the counting parts they added: the
DeepSeek-V3.2 indexer, zero experts (an active range), a norm after the mixture, two attention
sublayers a layer; and Qwen2's sliding layers by max_window_layers. The expected values are
computed by hand from the shapes transformers 5.25 builds (the modeling_*.py named in each
test), not taken from ffncli."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.counting.kv import kv_cache
from ffncli.counting.model import count
from ffncli.errors import SpecError
from ffncli.specs.spec import spec_from_mapping

ZOO = DATA / "zoo" / "configs"


def _load(tmp_path, model_type, **changes):
    config = {**json.loads((ZOO / f"{model_type}.config.json").read_text()), **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return ffncli.load_spec(config=path)


def _rows(layer):
    return {r.name: r.params for r in layer.attention_rows}


def test_the_indexer_of_deepseek_v32_by_hand(tmp_path):
    """DeepseekV32Indexer: wq_b q_lora_rank 1536 -> 64 heads x 128, wk 7168 -> 128,
    weights_proj 7168 -> 64, k_norm a LayerNorm of 128 (weight and bias); no biases."""
    c = count(_load(tmp_path, "deepseek_v32"))
    rows = _rows(c.layers[0])
    assert rows["indexer W_Q"] == 1536 * 64 * 128 == 12_582_912
    assert rows["indexer W_K"] == 7168 * 128
    assert rows["indexer head weights"] == 7168 * 64
    v3 = count(_load(tmp_path, "deepseek_v3"))
    # the same MLA otherwise: attention + norms differ by the indexer alone
    added = (c.layers[0].attention + c.layers[0].norm) - (v3.layers[0].attention
                                                          + v3.layers[0].norm)
    assert added == 12_582_912 + 917_504 + 458_752 + 2 * 128 == 13_959_424


def test_the_indexer_key_is_cached_per_token(tmp_path):
    """DynamicIndexedLayer: the latent (kv_lora_rank 512), the rope key (64) and the indexer's
    key (index_head_dim 128) per token and layer; 61 layers."""
    kv = kv_cache(_load(tmp_path, "deepseek_v32"), 1000)
    assert kv.elements_per_token == 61 * (512 + 64 + 128)
    assert kv.elements(1000) == 61 * 704 * 1000


def test_glm5_shared_indexer_layers_have_no_indexer_and_cache_no_indexer_key(tmp_path):
    """GlmMoeDsaAttention: a "shared" layer of indexer_types builds no indexer."""
    n = 78
    types = ["full" if i % 4 == 0 else "shared" for i in range(n)]
    spec = _load(tmp_path, "glm_moe_dsa", indexer_types=types)
    c = count(spec)
    indexer = 2048 * 32 * 128 + 6144 * 128 + 6144 * 32 + 2 * 128  # wq_b, wk, weights, k_norm
    full = count(_load(tmp_path, "glm_moe_dsa"))
    assert full.total - c.total == 58 * indexer  # 78 layers, 20 of them full
    kv = kv_cache(spec, 10)
    held = {i: p.per_token for p in kv.parts for i in p.indices}
    assert [held[i] for i in range(4)] == [512 + 64 + 128, 576, 576, 576]


def test_axk1_norm_after_the_mixture_only_in_its_sparse_layers(tmp_path):
    """AXK1MoE adds post_mlp_layernorm (an RMSNorm of 7168): three norms of d_model in a sparse
    layer, two in the dense first layer, beside the latent norms (q 1536, kv 512)."""
    c = count(_load(tmp_path, "axk1"))
    dense, sparse = c.layers
    assert (dense.kind, dense.count, sparse.count) == ("dense decoder", 1, 60)
    assert dense.norm == 2 * 7168 + 1536 + 512
    assert sparse.norm == 3 * 7168 + 1536 + 512


def test_minicpm3_value_heads_default_to_hidden_over_heads(tmp_path):
    """MiniCPM3Config: v_head_dim null -> hidden_size / heads (2560 / 40 = 64): kv_b_proj
    256 -> 40 x (64 + 64), o_proj 40 x 64 -> 2560; q through 768."""
    spec = _load(tmp_path, "minicpm3", v_head_dim=None)
    rows = _rows(count(spec).layers[0])
    assert rows["W_KV_b"] == 256 * 40 * (64 + 64)
    assert rows["W_O"] == 40 * 64 * 2560
    assert rows["W_Q_b"] == 768 * 40 * (64 + 32)
    assert rows["W_KV_a"] == 2560 * (256 + 32)


def test_longcat_two_attention_sublayers_and_a_cache_each(tmp_path):
    """LongcatFlashDecoderLayer: two LongcatFlashMLA (q_a 6144 -> 1536, q_b -> 64 x 192, kv_a
    -> 512 + 64, kv_b -> 64 x (128 + 128), o 64 x 128 -> 6144), four RMSNorms; cache layers
    2i and 2i + 1 (layer_idx * 2 + i), 576 values a token each."""
    c = count(_load(tmp_path, "longcat_flash"))
    (layer,) = c.layers
    one = 6144 * 1536 + 1536 * 64 * 192 + 6144 * 576 + 512 * 64 * 256 + 64 * 128 * 6144
    assert layer.attention == 2 * one == 181_141_504
    assert layer.norm == 4 * 6144 + 2 * (1536 + 512)
    kv = kv_cache(_load(tmp_path, "longcat_flash"), 7)
    assert (kv.layers, kv.elements_per_token) == (56, 56 * 576)
    assert [p.indices[:4] for p in kv.parts] == [(0, 1, 2, 3)]


def test_zero_experts_make_the_active_count_a_range(tmp_path):
    """LongcatFlashTopkRouter scores 512 + 256 experts (classifier 6144 x 768, no bias); of the
    top 12, each on a zero expert saves one expert of 3 x 6144 x 2048: the range is 28 layers
    x 12 experts wide, its top the zoo's active count."""
    c = count(_load(tmp_path, "longcat_flash"))
    assert {r.name: r.params for r in c.layers[0].ffn_rows}["router"] == 6144 * 768
    expert = 3 * 6144 * 2048
    span = c.active_range
    assert span is not None and span.most == c.active == 32_182_654_976
    assert span.most - span.least == 28 * 12 * expert
    assert "12 of a token's top-12" in span.why and "256 zero" in span.why
    few = _load(tmp_path, "longcat_flash", zero_expert_num=5)
    assert count(few).active_range.most - count(few).active_range.least == 28 * 5 * expert


@pytest.mark.parametrize("model_type", ["deepseek_v3", "deepseek_v32", "minicpm3"])
def test_without_zero_experts_the_active_count_is_one_number(tmp_path, model_type):
    assert count(_load(tmp_path, model_type)).active_range is None


def test_params_json_and_text_give_the_range(cli):
    path = ZOO / "longcat_flash.config.json"
    doc = cli("params", "--config", path, "--json").json()
    assert doc["active_params_range"] == {
        "min": 19_499_079_680, "max": 32_182_654_976,
        "why": "up to 12 of a token's top-12 expert choices can fall on one of 256 zero "
               "(identity) experts, which use no parameters"}
    assert doc["active_params"] == 32_182_654_976
    out = cli("params", "--config", path).out
    assert "active per token is a range, 19,499,079,680 to 32,182,654,976: up to 12" in out
    dense = cli("params", "--config", ZOO / "deepseek_v32.config.json", "--json").json()
    assert dense["active_params_range"] is None


# --- Qwen2's sliding layers without layer_types (Qwen2Config.__post_init__) -------------------

def _qwen2(tmp_path, **keys):
    config = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
              "vocab_size": 128, "sliding_window": 4, "max_window_layers": 2, **keys}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return ffncli.load_spec(config=path)


def test_qwen2_slides_from_max_window_layers_with_use_sliding_window(tmp_path):
    """transformers 5.25 on this config (Qwen2ForCausalLM, 9 tokens): layers 0 and 1
    DynamicLayer, K and V (1, 2, 9, 16) = 576 values; layers 2 and 3 DynamicSlidingWindowLayer
    (1, 2, 3, 16) = 192 (window 4: the last 3 tokens kept). At 2 tokens 128 each."""
    kv = kv_cache(_qwen2(tmp_path, use_sliding_window=True), 9)
    per = {i: p.per_token * (min(9, p.cap) if p.cap else 9) for p in kv.parts for i in p.indices}
    assert [per[i] for i in range(4)] == [576, 576, 192, 192]
    assert kv.elements(2) == 4 * 128


@pytest.mark.parametrize("keys", [{"use_sliding_window": False}, {}])
def test_qwen2_without_use_sliding_window_attends_fully(tmp_path, keys):
    """Qwen2.5's configs set sliding_window (32768, 131072) with use_sliding_window false:
    transformers ignores the window, every layer full (ffncli read them all as sliding)."""
    kv = kv_cache(_qwen2(tmp_path, **keys), 9)
    assert [(p.kind, p.layers, p.cap) for p in kv.parts] == [("full", 4, 0)]


def test_qwen2_layer_types_still_win(tmp_path):
    kv = kv_cache(_qwen2(tmp_path, use_sliding_window=True,
                         layer_types=["sliding_attention"] + ["full_attention"] * 3), 9)
    assert sorted((p.kind, p.indices) for p in kv.parts) == [("full", (1, 2, 3)),
                                                              ("sliding", (0,))]


# --- hostile input ---------------------------------------------------------------------------

def _config(model_type, **changes):
    return {**json.loads((ZOO / f"{model_type}.config.json").read_text()), **changes}


HOSTILE = [
    (_config("glm4_moe_lite", mlp_layer_types=["dense"] * 46),
     "key 'mlp_layer_types': expected a list of 47 layer types (sparse, dense), got"),
    (_config("axk1", mlp_layer_types=["moe"] * 61),
     "key 'mlp_layer_types': expected a list of 61 layer types (sparse, dense), got"),
    (_config("glm_moe_dsa", indexer_types=["full"] * 77 + ["half"]),
     "key 'indexer_types': expected a list of 78 indexer types (full, shared), got"),
    (_config("deepseek_v32", q_lora_rank=None), "missing key 'q_lora_rank'"),
    (_config("deepseek_v32", index_n_heads=0),
     "key 'index_n_heads': expected a whole number >= 1, got 0"),
    (_config("longcat_flash", zero_expert_num=-1),
     "key 'zero_expert_num': expected a whole number >= 0, got -1"),
    (_config("minicpm3", kv_lora_rank=4096),
     "key 'kv_lora_rank': expected at most hidden_size (2,560), got 4096"),
    (_config("deepseek_v32", mlp_layer_types=None, first_k_dense_replace=62),
     "key 'first_k_dense_replace': expected at most num_hidden_layers (61), got 62"),
]


@pytest.mark.parametrize(("config", "message"), HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_configs_of_the_latent_readers(cli, tmp_path, config, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", "--config", path)
    assert (r.code, r.out) == (2, "") and r.err.count("\n") == 1
    assert r.err.startswith(f"error: {path}: {message}"), r.err


SPEC = {"d_model": 32, "ffn": {"d_ff": 64}, "layers": {"decoder": 1},
        "attention": {"heads": 4, "head_dim": 12, "kv_lora_rank": 8, "q_lora_rank": 8,
                      "rope_head_dim": 4, "index_heads": 2, "index_head_dim": 8}}


@pytest.mark.parametrize(("change", "message"), [
    ({"q_lora_rank": 0}, "key 'attention.index_heads': the indexer needs latent attention"),
    ({"index_head_dim": 0}, "key 'attention.index_heads': the indexer needs latent attention"),
    ({"kv_lora_rank": 0, "q_lora_rank": 0, "rope_head_dim": 0},
     "key 'attention.index_heads': the indexer needs latent attention"),
])
def test_a_spec_indexer_needs_latent_attention(change, message):
    spec_from_mapping(SPEC, "spec")  # valid as given
    data = {**SPEC, "attention": {**SPEC["attention"], **change}}
    with pytest.raises(SpecError, match=message):
        spec_from_mapping(data, "spec")


# --- the zoo's published flagship configs -----------------------------------------------------

def test_at_least_twenty_flagships_are_read_and_the_issue_names_them():
    """Every flagship config of the zoo is read (none refused: test_zoo_counts then holds each
    exact), at least 20, the 2025-26 ones issue 40 names among them."""
    doc = json.loads((DATA / "zoo" / "truths.json").read_text())
    flagships = doc["flagships"]
    for e in flagships.values():
        ffncli.load_spec(config=DATA / "zoo" / e["config"])  # raises if refused
    assert len(flagships) >= 20
    assert {"gemma-3-27b-it", "Llama-4-Scout-17B-16E-text", "GLM-4.5-Air", "Qwen3-Next-80B-A3B",
            "MiniMax-M2", "DeepSeek-V3.2-Exp", "Qwen3-235B-A22B", "gpt-oss-20b",
            "gpt-oss-120b"} <= set(flagships)


def test_dots3_gate_per_head_rope_key_norm_and_per_layer_sizes(tmp_path):
    """Dots3NoteTextAttention: g_proj 5120 -> heads, k_rope_only_layernorm of 64; layer 0
    (indexed: 128 heads, kv_lora_rank 512, nope 128) and layer 2 (per_layer_config: 64 heads,
    kv_lora_rank 1024, nope 192; sliding, no indexer)."""
    spec = _load(tmp_path, "dots3_note_text")
    c = count(spec)
    by_index = {i: layer for layer in c.layers for i in layer.indices}
    first, swa = _rows(by_index[0]), _rows(by_index[2])
    assert first["W_gate (a scalar per head)"] == 5120 * 128
    assert swa["W_gate (a scalar per head)"] == 5120 * 64
    assert swa["W_KV_b"] == 1024 * 64 * (192 + 128) and swa["W_KV_a"] == 5120 * (1024 + 64)
    assert "indexer W_Q" in first and "indexer W_Q" not in swa
    assert by_index[2].mixer == "sliding" and by_index[2].window == 512
    # norms: two of d_model, q and kv latents, the rope key (and layer 0's indexer key)
    assert by_index[2].norm == 2 * 5120 + 1024 + 1024 + 64
    assert by_index[0].norm == 2 * 5120 + 1024 + 512 + 64 + 2 * 128
    assert by_index[0].attention + by_index[0].norm == 144_060_224  # the zoo's layer 0 - FFN


def test_dots3_sliding_layers_cache_their_latent_up_to_the_window(tmp_path):
    spec = _load(tmp_path, "dots3_note_text")
    kv = kv_cache(spec, 10_000)
    held = {i: (p.per_token, p.cap) for p in kv.parts for i in p.indices}
    assert held[0] == (512 + 64 + 128, 0) and held[2] == (1024 + 64, 511)


DOTS3_HOSTILE = [
    (_config("dots3_note_text", per_layer_config={"x": {}}),
     "key 'per_layer_config': expected an object of layer numbers (below 46) to keys, got"),
    (_config("dots3_note_text", per_layer_config={"46": {}}),
     "key 'per_layer_config': expected an object of layer numbers (below 46) to keys, got"),
    (_config("dots3_note_text", layer_types=["linear_attention"] * 46),
     "key 'layer_types': expected a list of 46 layer types (indexed_attention, full_attention, "
     "sliding_attention), got"),
]


@pytest.mark.parametrize(("config", "message"), DOTS3_HOSTILE, ids=range(len(DOTS3_HOSTILE)))
def test_hostile_dots3_configs(cli, tmp_path, config, message):
    test_hostile_configs_of_the_latent_readers(cli, tmp_path, config, message)


@pytest.mark.parametrize("key", ["rope_key_norm"])  # head_gate: any attention (LFM3, Laguna)
def test_dots3_parts_belong_to_latent_attention(key):
    data = {**SPEC, "attention": {"heads": 4, key: True}}
    with pytest.raises(SpecError, match=f"key 'attention.{key}': belongs to latent attention"):
        spec_from_mapping(data, "spec")


def test_axk2_query_gate_and_gated_norms_by_hand(tmp_path):
    """AXK2Attention: q_gate_proj 2 x 384 -> 32 x (96 + 64) (queries and an output gate);
    AXK2GatedRMSNorm: fc1 2048 -> 16, fc2 16 -> 2048 on the input norm of every layer and on
    the post-attention norm of the sparse ones, counted as "other"."""
    c = count(_load(tmp_path, "axk2"))
    dense, sparse = c.layers
    assert _rows(dense)["W_Q_b (and output gate)"] == 768 * 32 * 160 == 3_932_160
    assert (dense.other, sparse.other) == (2 * 2048 * 16, 2 * 2 * 2048 * 16)
    assert c.groups["other"] == 65_536 + 47 * 131_072
    assert dense.total - dense.ffn == 10_916_608  # the zoo's layer 0 less its FFN


def test_query_gate_needs_the_query_latent():
    data = {**SPEC, "attention": {**SPEC["attention"], "index_heads": 0, "index_head_dim": 0,
                                  "q_lora_rank": 0, "query_gate": True}}
    with pytest.raises(SpecError, match="key 'attention.query_gate': belongs to latent"):
        spec_from_mapping(data, "spec")


def test_hy_v4_gate_sinks_and_hyper_connections_by_hand(tmp_path):
    """HYV4Attention: gate_proj 2816 -> 32 x 256, sinks (32); HYV4HyperConnection around
    attention and the FFN: fn (8, 4 x 2816), base (8), scale (2); HYV4HyperHead: hc_fn
    (4, 4 x 2816), hc_base (4), hc_scale (1); the indexer on layers 0, 1, 5, 9, ..."""
    c = count(_load(tmp_path, "hy_v4"))
    by_index = {i: layer for layer in c.layers for i in layer.indices}
    rows = _rows(by_index[0])
    assert rows["W_gate (output)"] == 2816 * 32 * 256 and rows["sinks"] == 32
    assert by_index[0].other == 2 * (8 * 11264 + 8 + 2) == 180_244
    assert {r.name: r.params for r in c.other_rows}["hyper-connection head"] == 4 * 11264 + 5
    assert by_index[0].total == 134_139_700  # HYV4DecoderLayer 0 on the meta device
    with_indexer = sorted(i for i, layer in by_index.items() if "indexer W_Q" in _rows(layer))
    assert with_indexer == [0, 1, 5, 9, 13, 17, 21, 25, 29, 33]
    assert by_index[1].total - by_index[2].total == 1743900468 - 1740348980  # the indexer


def test_glm5_indexer_layers_from_its_legacy_keys(tmp_path):
    """GlmMoeDsaConfig without indexer_types: index_topk_pattern, else every index_topk_freq-th
    layer counted from index_skip_topk_offset - 1."""
    pattern = "FFS" * 26
    spec = _load(tmp_path, "glm_moe_dsa", indexer_types=None, index_topk_pattern=pattern)
    full = [i for i, k in enumerate(spec.decoder_kinds()) if (k.attention or spec.attention)
            .index_heads]
    assert full == [i for i in range(78) if pattern[i] == "F"]
    spec = _load(tmp_path, "glm_moe_dsa", indexer_types=None, index_topk_freq=3,
                 index_skip_topk_offset=2)
    full = [i for i, k in enumerate(spec.decoder_kinds()) if (k.attention or spec.attention)
            .index_heads]
    assert full == [0] + list(range(1, 78, 3))


@pytest.mark.parametrize(("model_type", "keys", "sparse"), [
    # AXK1Config: i >= first_k_dense_replace and i % moe_layer_freq == 0
    ("axk1", {"first_k_dense_replace": 2, "moe_layer_freq": 3}, [3, 6, 9]),
    # DeepseekV32Config reads first_k_dense_replace alone
    ("deepseek_v32", {"first_k_dense_replace": 2, "moe_layer_freq": 3}, [2, 3, 4]),
    # Glm4MoeLiteConfig reads neither: one dense layer first
    ("glm4_moe_lite", {"first_k_dense_replace": 2, "moe_layer_freq": 3}, [1, 2, 3]),
])
def test_sparse_layers_without_mlp_layer_types_as_each_class_derives_them(
        tmp_path, model_type, keys, sparse):
    spec = _load(tmp_path, model_type, mlp_layer_types=None, **keys)
    got = [i for i, k in enumerate(spec.decoder_kinds()) if (k.ffn or spec.ffn).is_moe]
    assert got[:3] == sparse
