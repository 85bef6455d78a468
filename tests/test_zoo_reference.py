"""The zoo (tests/data/zoo/, made by tests/fixtures/make_zoo.py with torch and transformers):
every language-model type of transformers, its config defaults and what its classes hold on
the meta device. These tests need no torch: they check the JSON is whole and consistent, that
its measures reproduce published totals, and compare ffncli's totals on the types it reads.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.errors import FfnError
from ffncli.specs.table import SUPPORTED_MODEL_TYPES

ZOO = DATA / "zoo"
DOC = json.loads((ZOO / "truths.json").read_text())
TYPES = DOC["types"]
FLAGSHIPS = DOC["flagships"]
ENTRIES = {**{t: e for t, e in TYPES.items()}, **{f"flagship:{n}": e for n, e in FLAGSHIPS.items()}}
BUILDS = [(name, kind) for name, e in ENTRIES.items() for kind in e["builds"]]


def test_every_type_of_the_three_mappings_is_listed():
    mapped = set().union(*DOC["mappings"].values())
    assert set(TYPES) == mapped
    assert {len(m) for m in DOC["mappings"].values()} and all(DOC["mappings"].values())
    for model_type, e in TYPES.items():
        kinds = {k for k, m in DOC["mappings"].items() if model_type in m}
        assert kinds <= set(e["builds"]), model_type
        if "masked_lm" in kinds and "base" not in e["builds"]:
            pytest.fail(f"{model_type}: no bare model built")


def test_configs_are_files_of_their_type():
    for name, e in ENTRIES.items():
        if e["config"].startswith("failed: "):
            assert all(b["status"].startswith("failed: config: ") for b in e["builds"].values())
            continue
        config = json.loads((ZOO / e["config"]).read_text())
        assert config["model_type"] == e["config_type"], name  # gpt-sw3's is gpt2
        assert config["transformers_version"] == DOC["transformers"], name


@pytest.mark.parametrize(("name", "kind"), BUILDS)
def test_each_build_is_whole_or_failed_with_a_reason(name, kind):
    b = ENTRIES[name]["builds"][kind]
    assert b["class"]
    if b["status"] != "built":
        assert b["status"].startswith("failed: ") and len(b["status"]) > len("failed: ") + 5
        return
    total, parts = b["total"], b["parts"]
    assert isinstance(total, int) and total > 0
    assert all(isinstance(v, int) and v >= 0 for v in parts.values())
    assert sum(parts.values()) == total
    assert sum(sum(s["params"]) for s in b["stacks"].values()) == parts["layers"]
    for s in b["stacks"].values():
        assert len(s["params"]) == len(s["ffn"]) > 0
        assert all(0 <= f <= p for f, p in zip(s["ffn"], s["params"], strict=True))
    if b["moe"] is None:
        assert b["active"] == total
    elif b["moe"]["error"] is None:
        kinds = b["moe"]["kinds"]
        assert sum(k["count"] for k in kinds) == b["moe"]["banks"] > 0
        assert all(0 < k["top_k"] <= k["experts"] and k["per_expert"] > 0 for k in kinds)
        unused = sum(k["count"] * (k["experts"] - k["top_k"]) * k["per_expert"] for k in kinds)
        assert b["active"] == total - unused
    else:
        assert b["active"] is None


def test_the_text_stack_holds_a_ffn_in_most_built_decoders():
    """The FFN rule finds a position-wise block in (nearly) every built causal LM."""
    built = [t for t, e in TYPES.items() if e["builds"].get("causal_lm", {}).get("status")
             == "built"]
    without = [t for t in built if not any(sum(s["ffn"]) for s in
                                           TYPES[t]["builds"]["causal_lm"]["stacks"].values())]
    assert len(built) > 150
    assert len(without) <= 10, without


# Published totals (param-truth.md, model cards, safetensors indexes less the buffers they
# also hold): the maker's measures reproduce them.
PUBLISHED = {
    ("gpt2", "causal_lm"): (124_439_808, 124_439_808),
    ("bert-base-uncased", "base"): (109_482_240, 109_482_240),
    ("Llama-2-7b-hf", "causal_lm"): (6_738_415_616, 6_738_415_616),
    ("Mixtral-8x7B-v0.1", "causal_lm"): (46_702_792_704, 12_879_925_248),
    ("gpt-oss-20b", "causal_lm"): (20_914_757_184, None),
    ("gpt-oss-120b", "causal_lm"): (116_829_156_672, None),
    # safetensors: 671,026,419,200 and 1,026,408,232,448 with e_score_correction_bias
    # (a buffer: 256 resp. 384 per MoE layer, 58 resp. 60 layers)
    ("DeepSeek-V3", "causal_lm"): (671_026_419_200 - 58 * 256, None),
    ("Kimi-K2-Instruct", "causal_lm"): (1_026_408_232_448 - 60 * 384, None),
}


@pytest.mark.parametrize(("name", "kind"), sorted(PUBLISHED))
def test_flagship_totals_match_published_figures(name, kind):
    total, active = PUBLISHED[name, kind]
    b = FLAGSHIPS[name]["builds"][kind]
    assert b["total"] == total
    if active is not None:
        assert b["active"] == active


# One layer's FFN and whole layer, param-truth.md's per-layer table (Mixtral: 8 experts and
# the router).
LAYERS = {
    ("Mixtral-8x7B-v0.1", "causal_lm", "model.layers"): (32, 8 * 176_160_768 + 32_768,
                                                         1_451_270_144),
    ("Llama-2-7b-hf", "causal_lm", "model.layers"): (32, 135_266_304, 202_383_360),
    ("gpt2", "causal_lm", "transformer.h"): (12, 4_722_432, 7_087_872),
    ("bert-base-uncased", "base", "encoder.layer"): (12, 4_722_432, 7_087_872),
}


@pytest.mark.parametrize(("name", "kind", "stack"), sorted(LAYERS))
def test_flagship_layer_ffn_matches_param_truth(name, kind, stack):
    n, ffn, layer = LAYERS[name, kind, stack]
    s = FLAGSHIPS[name]["builds"][kind]["stacks"][stack]
    assert (s["ffn"], s["params"]) == ([ffn] * n, [layer] * n)


def test_jetmoe_active_leaves_out_the_unrouted_experts_of_both_banks():
    """JetMoE routes its MLP's experts and its attention's (the Q and O projections): each
    layer leaves 8 - 2 of both unused. Per expert, from the config (hidden 2048, intermediate
    5632, kv_channels x kv heads 2048): the MLP's gated input (2 x 5632 x 2048) and output
    (5632 x 2048); the attention's input and output (2048 x 2048 each). The biases and
    routers beside them are active."""
    mlp, attention = 3 * 5632 * 2048, 2 * 2048 * 2048
    b = TYPES["jetmoe"]["builds"]["causal_lm"]
    assert [(k["experts"], k["per_expert"], k["top_k"], k["count"])
            for k in b["moe"]["kinds"]] == [(8, mlp, 2, 12), (8, attention, 2, 12)]
    assert b["active"] == b["total"] - 12 * 6 * (mlp + attention) == 1_198_491_648


# Supported types whose ffncli total differs from transformers' on the zoo's config
# (strict: a fix makes the test fail until the entry is removed).
DIFFERS: dict[str, str] = {}


def _kind(e):
    """The bare model of a masked-LM type (as ffncli counts BERT), the seq2seq class of a
    seq2seq type (Pegasus is also a causal LM: its decoder alone), else the causal LM."""
    return next(k for k in ("base", "seq2seq_lm", "causal_lm") if k in e["builds"])


SUPPORTED = sorted(n for n, e in ENTRIES.items() if e["model_type"] in SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(reason=DIFFERS[n], strict=True)) if n in DIFFERS
    else n for n in SUPPORTED])
def test_ffncli_total_matches_the_zoo(name):
    e = ENTRIES[name]
    truth = e["builds"][_kind(e)]
    if truth["status"] == "built" and truth["active"] is None:  # no top-k: not routable
        with pytest.raises(FfnError, match="missing key 'num_experts_per_tok'"):
            ffncli.load_spec(config=ZOO / e["config"])
        return  # counted with the published top-k in test_zoo_counts.py
    spec = ffncli.load_spec(config=ZOO / e["config"])
    counted = ffncli.count(spec)
    if truth["status"] != "built":  # transformers cannot build its own defaults (Llama 4)
        assert truth["status"].startswith("failed: ") and spec.uncounted
        return
    if spec.uncounted and truth.get("on") != "text_config":  # a multimodal config: its
        assert counted.total < truth["total"]  # language model alone (test_zoo_counts.py)
        return
    assert (counted.total, counted.active) == (truth["total"], truth["active"])


def test_every_supported_type_is_in_the_zoo():
    assert set(SUPPORTED_MODEL_TYPES) <= set(TYPES)
    assert set(DIFFERS) <= set(SUPPORTED)


# --- KV cache: what transformers' cache objects hold after a real forward of a small model of
# each decoder type (windows and chunks shrunk to 4), at 2 and 9 tokens, float32 ------------

KV = json.loads((ZOO / "kv_cache.json").read_text())
KV_BUILT = {t: e for t, e in KV["kv"].items() if e["status"] == "built"}


def _rows(kind):
    for model_type, e in KV_BUILT.items():
        for length, cache in e["lengths"].items():
            for i, row in enumerate(cache["layers"]):
                if row["kind"] == kind:
                    yield model_type, int(length), i, row


def test_kv_entries_are_whole_or_failed_with_a_reason():
    assert set(KV["kv"]) <= set(TYPES) and len(KV_BUILT) > 100
    for model_type, e in KV["kv"].items():
        if e["status"] != "built":
            assert e["status"].startswith("failed: ") and len(e["status"]) > 15, model_type
            continue
        assert set(e["lengths"]) == {str(n) for n in KV["lengths"]}, model_type
        counts = {len(c["layers"]) for c in e["lengths"].values()}
        assert len(counts) == 1 and counts.pop() > 0, model_type
        for cache in e["lengths"].values():
            for row in cache["layers"]:
                assert row["bytes"] == 4 * row["elements"] >= 0, model_type  # float32


def test_full_attention_holds_every_token():
    """CPM-Ant prepends its prompt_length (32) prompt tokens to every sequence."""
    rows = list(_rows("DynamicLayer"))
    assert len({t for t, *_ in rows}) > 80
    for model_type, length, i, row in rows:
        if "keys" in row["tensors"]:
            prompt = KV_BUILT[model_type]["config"].get("prompt_length", 32) \
                if model_type == "cpmant" else 0
            assert row["tensors"]["keys"][-2] == length + prompt, (model_type, i)


def test_window_and_chunk_layers_are_capped():
    """The window (or chunk) of 4: a sliding layer keeps at most the last 3 tokens."""
    rows = list(_rows("DynamicSlidingWindowLayer"))
    assert {"mistral", "gemma3_text", "gpt_oss", "llama4_text", "cohere2"} <= {t for t, *_ in rows}
    for model_type, length, i, row in rows:
        assert row["tensors"]["keys"][-2] == min(length, 3), (model_type, i)


def test_state_layers_hold_the_same_at_any_length():
    rows = list(_rows("LinearAttentionLayer"))
    assert {"mamba", "jamba", "qwen3_next", "falcon_mamba", "zamba2"} <= {t for t, *_ in rows}
    by_layer = {}
    for model_type, _, i, row in rows:
        by_layer.setdefault((model_type, i), []).append(row["tensors"])
    for key, shapes in by_layer.items():
        assert len(shapes) == 2 and shapes[0] == shapes[1], key


def test_layers_sharing_kv_hold_none_of_their_own():
    rows = list(_rows("DummyLayer"))
    assert {"gemma3n_text", "gemma4_text"} <= {t for t, *_ in rows}
    assert all(row["elements"] == 0 for *_, row in rows)
    for model_type in ("gemma3n_text", "gemma4_text"):  # num_kv_shared_layers=2 of 8
        kinds = [r["kind"] for r in KV_BUILT[model_type]["lengths"]["9"]["layers"]]
        assert kinds[-2:] == ["DummyLayer"] * 2 and "DummyLayer" not in kinds[:-2]


def test_mla_caches_the_latent_and_the_rope_key():
    e = KV_BUILT["deepseek_v3"]
    for length, cache in e["lengths"].items():
        for row in cache["layers"]:
            assert row["tensors"]["keys"] == [1, 1, int(length), e["config"]["kv_lora_rank"]]
            assert row["tensors"]["values"] == [1, 1, int(length),
                                                e["config"]["qk_rope_head_dim"]]
