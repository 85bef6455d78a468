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


def test_emu3_read_from_its_top_keys_or_its_text_config(tmp_path):
    """Emu3ForCausalLM reads the keys at the top of its config (BAAI/Emu3-Chat's spelling);
    a config with its text_config alone is read there, alike, the VQ-VAE named as not
    counted."""
    config = _config("emu3")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: config[k] for k in ("model_type", "text_config",
                                                       "vq_config")}))
    top = ffncli.load_spec(config=ZOO / "configs" / "emu3.config.json")
    text = ffncli.load_spec(config=path)
    assert ffncli.count(top).total == ffncli.count(text).total == 8_492_011_520
    assert (top.uncounted, text.uncounted) == ((), ("VQ-VAE image tokenizer",))
    # both present: the top keys are what Emu3ForCausalLM builds
    path.write_text(json.dumps({**config, "text_config": {**config["text_config"],
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
