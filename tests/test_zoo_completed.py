"""Types whose defaults transformers 5.25 cannot build, read on their defaults completed by
published values (tests/fixtures/make_zoo.py's COMPLETED): parts computed by hand from
transformers' shapes, and the ways a config of the type is spelled."""

from __future__ import annotations

import json

from conftest import DATA

import ffncli

ZOO = DATA / "zoo"


def _config(model_type):
    return json.loads((ZOO / "configs" / f"{model_type}.config.json").read_text())


def test_nemotron_layer_from_transformers_shapes(cli):
    """NemotronDecoderLayer (hidden 6144, 48 heads of 128, 8 KV heads as Minitron-8B's,
    intermediate 24576): up and down without bias around a squared ReLU; Q, O 6144 x 6144 and
    K, V 6144 x 1024 without bias; two LayerNorm1P of weight and bias."""
    doc = json.loads(cli("params", "--config", ZOO / "configs" / "nemotron.config.json",
                         "--json").out)
    (layer,) = doc["layers"]
    assert layer["ffn"] == 2 * 6144 * 24576
    assert layer["total"] == 2 * 6144 * 24576 + 2 * 6144 * 6144 + 2 * 6144 * 1024 + 4 * 6144
    assert doc["kv_cache"]["elements_per_token"] == 32 * 2 * 8 * 128


def test_emu3_read_from_its_text_config_or_its_top_keys(tmp_path):
    """transformers' Emu3Config: the text_config, as AutoModelForCausalLM builds it (the VQ-VAE
    named as not counted); BAAI/Emu3-Chat's config.json spells the same keys at its top, where
    Emu3ForCausalLM then reads them, the VQ-VAE not part of it."""
    config = _config("emu3")
    text = ffncli.load_spec(config=ZOO / "configs" / "emu3.config.json")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config["text_config"], "model_type": "emu3"}))
    top = ffncli.load_spec(config=path)
    assert ffncli.count(top).total == ffncli.count(text).total == 8_492_011_520
    assert (top.uncounted, text.uncounted) == ((), ("VQ-VAE image tokenizer",))
    # both present: the top keys are what Emu3ForCausalLM builds
    path.write_text(json.dumps({**config["text_config"], "model_type": "emu3",
                                "text_config": {**config["text_config"],
                                                "num_hidden_layers": 1}}))
    assert ffncli.load_spec(config=path).layers.decoder == 32

def test_gemma4_assistant_counts_its_language_model_and_names_the_projections(cli):
    """Gemma4AssistantForCausalLM (text_config completed without per-layer inputs, as its
    validator demands): every one of its 30 layers reuses the target model's K and V (no W_K,
    W_V, K norm, no cache); the projections pre (2 x 1536 -> 2304) and post (2304 -> 1536), both
    without bias, are what transformers' total holds beside the language model."""
    doc = json.loads(cli("params", "--config", ZOO / "configs" / "gemma4_assistant.config.json",
                         "--json").out)
    assert doc["uncounted"] == ["projections from and to the target model (3,072 -> 2,304, "
                                "2,304 -> 1,536)"]
    assert all(x["kind"].startswith("kv-sharing") for x in doc["layers"])
    assert sum(x["count"] for x in doc["layers"]) == 30
    assert doc["kv_cache"]["elements"] == 0
    truth = json.loads((ZOO / "truths.json").read_text())["types"]["gemma4_assistant"]
    assert doc["total_params"] + 2 * 1536 * 2304 + 2304 * 1536 == \
        truth["builds"]["causal_lm"]["total"]


def test_gated_residual_rows_from_transformers_shapes():
    """Qwen4ExpTextGatedResidual over n = 4 streams of d = 2048, rank 320: hc_norm (8192),
    input_mix_weight_down (8192 -> 320), input_mix_weight_up (320 -> 8192), block_inject_weight
    (8192 -> 4); two a layer. The head (hyper_connection_mixer) has no block_inject_weight."""
    from ffncli.counting.rows import gated_residual_head_rows, gated_residual_rows

    (row,) = gated_residual_rows(2048, 4, 320)
    assert row.params == 2 * (8192 + 8192 * 320 + 320 * 8192 + 8192 * 4) == 10_567_680
    (head,) = gated_residual_head_rows(2048, 4, 320)
    assert head.params == 8192 + 2 * 8192 * 320 == 5_251_072


def test_qsa_indexer_rows_and_cache_from_transformers_shapes():
    """Qwen4ExpTextQSAIndexer (4 index heads and 1 key of 128, hidden 2048): index_qk_proj
    2048 -> 5 x 128, q_layernorm and k_layernorm of 128; its cache the raw key, 128 a token,
    beside K and V (2 KV heads of 256 each)."""
    from ffncli.counting.kv import kv_elements_per_layer
    from ffncli.counting.rows import qsa_indexer_rows
    from ffncli.specs.spec import AttentionSpec

    att = AttentionSpec(heads=16, kv_heads=2, head_dim=256, qsa_heads=4, qsa_head_dim=128)
    assert [r.params for r in qsa_indexer_rows(2048, att, "")] == [2048 * 5 * 128, 2 * 128]
    assert kv_elements_per_layer(2048, att) == 2 * 2 * 256 + 128


def test_qwen4_exp_text_parts(cli):
    """Qwen4ExpForCausalLM completed with Qwen4-Exp's QSA keys: 30 Gated DeltaNet layers and
    10 indexed ones; no norm of d_model in a layer nor after the last (the gated residuals' own
    norms instead); its KV cache at 9 tokens: 10 layers x 9 x (K and V of 2 x 256 and the QSA
    key of 128) and 30 fixed states (conv 8192 x 4, recurrent 32 x 128 x 128)."""
    doc = json.loads(cli("params", "--config", ZOO / "configs" / "qwen4_exp_text.config.json",
                         "--seq-len", "9", "--json").out)
    assert [(x["kind"], x["count"]) for x in doc["layers"]] == [("linear decoder", 30),
                                                                 ("decoder", 10)]
    assert doc["groups"]["norms"] == 10 * 2 * 256
    assert doc["groups"]["other"] == 40 * 10_567_680 + 5_251_072
    assert doc["kv_cache"]["elements"] == 10 * 9 * (2 * 2 * 256 + 128) + 30 * (
        8192 * 4 + 32 * 128 * 128)

