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
from ffncli.specs.archs import SUPPORTED_MODEL_TYPES

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


def test_mixtral_layer_ffn_is_eight_experts_and_router():
    stack = FLAGSHIPS["Mixtral-8x7B-v0.1"]["builds"]["causal_lm"]["stacks"]["model.layers"]
    assert stack["ffn"] == [8 * 176_160_768 + 32_768] * 32  # param-truth.md


# Supported types whose ffncli total differs from transformers' on the zoo's config
# (strict: a fix makes the test fail until the entry is removed).
DIFFERS = {
    "qwen3_moe": "transformers 5.25 saves num_experts as num_local_experts (attribute_map); "
                 "ffncli reads only num_experts",
    "flagship:Qwen3-30B-A3B": "same: num_local_experts in the saved config",
}


def _kind(e):
    return next(k for k in ("base", "causal_lm", "seq2seq_lm") if k in e["builds"])


SUPPORTED = sorted(n for n, e in ENTRIES.items() if e["model_type"] in SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(reason=DIFFERS[n], strict=True)) if n in DIFFERS
    else n for n in SUPPORTED])
def test_ffncli_total_matches_the_zoo(name):
    e = ENTRIES[name]
    truth = e["builds"][_kind(e)]
    counted = ffncli.count(ffncli.load_spec(config=ZOO / e["config"]))
    assert (counted.total, counted.active) == (truth["total"], truth["active"])


def test_every_supported_type_is_in_the_zoo():
    assert set(SUPPORTED_MODEL_TYPES) <= set(TYPES)
    assert set(DIFFERS) <= set(SUPPORTED)
