"""``ffncli experts``: the routing profile of the Mixtral fixture against a NumPy oracle (the
recorded FFN inputs of transformers routed by a direct softmax and argsort), shards and a
cluster against one process, the placement plan against a hand count, the outputs, and the
table of hostile inputs."""

from __future__ import annotations

import json
import math
import shutil
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from test_report import check_report

from ffncli.jobs import experts as experts_job

FIXTURE = Path(__file__).parent / "data" / "forward" / "mixtral"
WEIGHTS = FIXTURE / "model.safetensors"
IDS = FIXTURE / "ids.txt"
E, K, LAYERS = 4, 2, 2  # the fixture's config.json: num_local_experts, num_experts_per_tok


# ---------------------------------------------------------------------------------------------
# The oracle: transformers' recorded FFN inputs, the router read straight from the file.


def _tensor(name: str) -> np.ndarray:
    """One float32 tensor of the fixture, read from the safetensors bytes by hand."""
    raw = WEIGHTS.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    info = json.loads(raw[8:8 + n])[name]
    assert info["dtype"] == "F32"
    a, b = info["data_offsets"]
    return np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(info["shape"])


def oracle(layer: int) -> tuple[np.ndarray, np.ndarray]:
    """(the top-k experts of every token (n, k), the softmax over all experts (n, E)) of the
    layer's recorded FFN input, in float64."""
    x = np.load(FIXTURE / "expected.npz")[f"layer{layer}"].astype(np.float64)
    gate = _tensor(f"model.layers.{layer}.block_sparse_moe.gate.weight").astype(np.float64)
    logits = x @ gate.T  # (n, d_model) @ (d_model, E): nn.Linear's x W^T
    ranked = np.argsort(-logits, axis=1, kind="stable")
    top = np.sort(logits, axis=1)[:, ::-1]
    assert (top[:, K - 1] - top[:, K] > 1e-4).all()  # no near-tie: the choice is well defined
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    return ranked[:, :K], probs / probs.sum(axis=1, keepdims=True)


@pytest.fixture
def seen(monkeypatch) -> dict[int, list[np.ndarray]]:
    """The chosen experts the job counts, layer by layer (a RoutingCounts that keeps them)."""
    found: dict[int, list[np.ndarray]] = {}

    class Keeping(experts_job.RoutingCounts):
        def update(self, chosen, positions, **kw):  # type: ignore[no-untyped-def]
            found.setdefault(id(self), []).append(chosen.copy())
            super().update(chosen, positions, **kw)

    monkeypatch.setattr(experts_job, "RoutingCounts", Keeping)
    return found


def test_chosen_experts_and_loads_equal_the_oracle(cli, seen):
    r = cli("experts", "--weights", WEIGHTS, "--ids", IDS, "--json", "--quiet")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["format"] == "ffncli-experts/1"
    assert (doc["tokens"], doc["sequences"], doc["dense_layers"]) == (21, 3, [])
    chosen = [np.concatenate(parts) for parts in seen.values()]  # layer 0, then layer 1
    assert len(chosen) == LAYERS
    for layer, got, summary in zip(range(LAYERS), chosen, doc["layers"], strict=True):
        want, probs = oracle(layer)
        assert np.array_equal(got, want), layer  # every token, in the router's order
        assert summary["layer"] == layer and summary["rule"] == "softmax top-2, renormalised"
        assert summary["load"] == np.bincount(want.ravel(), minlength=E).tolist()
        h = -(probs * np.log(probs)).sum(axis=1).mean() / math.log(E)
        assert summary["token_entropy"] == pytest.approx(h, rel=1e-5)
    first = [oracle(i)[0][:, 0] for i in range(LAYERS)]
    counts = np.zeros((E, E), dtype=int)
    np.add.at(counts, (first[0], first[1]), 1)
    t = doc["layers"][0]["transition"]
    assert t["to_layer"] == 1
    assert t["hit_rate"] == pytest.approx(counts.max(axis=1).sum() / 21)
    assert t["baseline"] == pytest.approx(counts.sum(axis=0).max() / 21)
    assert doc["layers"][1]["transition"] is None


def test_the_layer_option_profiles_one_layer(cli):
    r = cli("experts", "--weights", WEIGHTS, "--ids", IDS, "--layer", "1", "--json")
    assert r.code == 0, r.err
    (only,) = r.json()["layers"]
    assert only["layer"] == 1 and only["transition"] is None
    assert only["load"] == np.bincount(oracle(1)[0].ravel(), minlength=E).tolist()


# ---------------------------------------------------------------------------------------------
# Shards and a cluster: the counts are sums that merge exactly.


@pytest.fixture
def corpus(tmp_path) -> Path:
    """The fixture's three sequences, a file each."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i, line in enumerate(IDS.read_text().splitlines()):
        (folder / f"part{i}.txt").write_text(line + "\n")
    return folder


INTEGER_FIELDS = ("experts", "top_k", "shared_experts", "tokens", "load", "dead_experts",
                  "coverage", "neighbour_pairs", "co_selected")
FLOAT_FIELDS = ("coefficient_of_variation", "max_vio", "load_entropy", "neighbour_jaccard",
                "token_entropy", "switch_balance", "importance_cv")


def _same_profile(a: dict, b: dict) -> None:
    assert (a["tokens"], a["sequences"]) == (b["tokens"], b["sequences"])
    for x, y in zip(a["layers"], b["layers"], strict=True):
        for name in INTEGER_FIELDS:
            assert x[name] == y[name], name  # integer counts: exactly (co_selected's P too)
        for name in FLOAT_FIELDS:  # float32 forward of other batches: its last bits differ
            assert x[name] == pytest.approx(y[name], rel=1e-6), name
        assert x["transition"] == y["transition"]


def test_shards_equal_one_process(cli, corpus):
    one = cli("experts", "--weights", WEIGHTS, "--ids", IDS, "--json")
    many = cli("experts", "--weights", WEIGHTS, "--ids", corpus, "--json")
    assert one.code == many.code == 0, many.err
    assert many.json()["shards"] == 3 and one.json()["shards"] == 1
    _same_profile(one.json(), many.json())
    glob = cli("experts", "--weights", WEIGHTS, "--ids", f"{corpus}/part*.txt", "--json")
    assert glob.json()["layers"] == many.json()["layers"]  # the same shards: every bit


def test_merged_walks_equal_one_walk():
    """Three walks of one sequence each, merged, equal one walk over the three: the counts
    exactly, the router's float sums to the float32 forward's rounding (other batches)."""
    from ffncli.jobs.choices import ModelChoice, TextChoice
    from ffncli.jobs.resolve import open_text
    from ffncli.specs.spec import Overrides

    forward, seqs = open_text(ModelChoice(weights=WEIGHTS), TextChoice(ids=IDS), Overrides())
    with forward:
        whole = experts_job.profile_walk(forward, seqs.ids, (0, 1))
        parts = [experts_job.profile_walk(forward, seqs.ids[i:i + 1], (0, 1))
                 for i in range(3)]
    merged = experts_job.merge_profiles(experts_job.merge_profiles(parts[0], parts[1]),
                                        parts[2])
    assert merged is not None
    for i in (0, 1):
        a, b = whole.layers[i], merged.layers[i]
        for name in ("tokens", "load", "pairs", "overlaps"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert np.allclose(a.prob_sum, b.prob_sum, rtol=1e-6)
        assert a.entropy_sum == pytest.approx(b.entropy_sum, rel=1e-6)
    assert np.array_equal(whole.transitions[0].counts, merged.transitions[0].counts)


@pytest.mark.slow
def test_a_cluster_equals_one_process(cli, corpus):
    here = cli("experts", "--weights", WEIGHTS, "--ids", corpus, "--json")
    there = cli("experts", "--weights", WEIGHTS, "--ids", corpus, "--workers", "2", "--json")
    assert here.code == there.code == 0, there.err
    assert there.json() == here.json()  # the fixed merge tree: every bit


# ---------------------------------------------------------------------------------------------
# The placement plan against a hand count of the fixture.

D, FF, VOCAB, HEADS, KV_HEADS, HEAD = 64, 128, 128, 4, 2, 16
EXPERT = 3 * D * FF  # w1, w3 (d x ff) and w2 (ff x d), no biases
ATTENTION = D * HEADS * HEAD * 2 + D * KV_HEADS * HEAD * 2  # q, o; k, v
ALWAYS = VOCAB * D + LAYERS * (ATTENTION + 2 * D + D * E) + D  # tied embedding, final norm


def _loads() -> list[list[int]]:
    return [np.bincount(oracle(i)[0].ravel(), minlength=E).tolist() for i in range(LAYERS)]


def _fewest(load: list[int], share: Fraction) -> int:
    busiest = sorted(load, reverse=True)
    return next(m for m in range(E + 1) if sum(busiest[:m]) >= share * sum(load))


@pytest.mark.parametrize("fit, coverage, seq_len", [("1MB", "0.9", "10"), ("300KB", "0.5", None),
                                                    ("300KB", "1", "64")])
def test_the_plan_equals_a_hand_count(cli, fit, coverage, seq_len):
    args = ["--seq-len", seq_len] if seq_len else []
    r = cli("experts", "--weights", WEIGHTS, "--ids", IDS, "--fit", fit, "--coverage", coverage,
            *args, "--json")
    assert r.code == 0, r.err
    plan = r.json()["plan"]
    usable = {"1MB": 10**6, "300KB": 300_000}[fit]
    n = int(seq_len or 64)  # max_position_embeddings
    kv = LAYERS * 2 * KV_HEADS * HEAD * n * 2  # K and V, 16-bit
    loads = _loads()
    share = Fraction(coverage)
    resident = [_fewest(load, share) for load in loads]
    assert [len(x["experts"]) for x in plan["layers"]] == resident
    for x, load in zip(plan["layers"], loads, strict=True):  # the busiest first
        assert [load[e] for e in x["experts"]] == sorted(load, reverse=True)[:len(x["experts"])]
    assert plan["params"] == ALWAYS + LAYERS * E * EXPERT == 230_208
    assert (plan["always_on_params"], plan["resident_params"]) == (ALWAYS, sum(resident) * EXPERT)
    hits = sum(sum(sorted(load, reverse=True)[:m]) for load, m in zip(loads, resident,
                                                                      strict=True))
    assert plan["hit_rate"] == pytest.approx(hits / (LAYERS * 21 * K))
    for row in plan["rows"]:
        bits = {"float32": 32, "bfloat16": 16, "int8": 8, "int4": 4}[row["dtype"]]
        on, experts = ALWAYS * bits // 8, sum(resident) * EXPERT * bits // 8
        assert (row["always_on"], row["experts"], row["kv_cache"]) == (on, experts, kv)
        assert row["total"] == on + experts + kv
        assert row["fits"] is (on + experts + kv <= usable)
        if row["fits"]:
            assert row["largest_coverage"] is None
            continue
        best = _largest_by_hand(loads, (usable - on - kv) * 8 // bits // EXPERT)
        assert row["largest_coverage"] == pytest.approx(float(best))


def _largest_by_hand(loads: list[list[int]], room: int) -> Fraction:
    """The largest share c, the same for every layer, whose fewest experts number <= room:
    tried at every share some layer's busiest experts reach."""
    shares = {Fraction(sum(sorted(load, reverse=True)[:m]), sum(load))
              for load in loads for m in range(E + 1)}
    return max(c for c in shares if sum(_fewest(load, c) for load in loads) <= room)


def test_the_300kb_plan_in_numbers(cli):
    """bfloat16 on 300 KB: 300,000 - 67,200 - 16,384 = 216,416 bytes hold 4 experts of 49,152;
    a uniform 27/42 (64.3%) takes 2 + 2 of them, hitting 55 of 84 routings."""
    r = cli("experts", "--weights", WEIGHTS, "--ids", IDS, "--fit", "300KB", "--json")
    row = next(x for x in r.json()["plan"]["rows"] if x["dtype"] == "bfloat16")
    assert (row["always_on"], row["kv_cache"], row["fits"]) == (67_200, 16_384, False)
    assert row["largest_coverage"] == pytest.approx(27 / 42)
    assert row["largest_hit_rate"] == pytest.approx(55 / 84)
    assert _loads() == [[6, 9, 14, 13], [7, 7, 11, 17]]


def test_the_reserve_comes_off_the_budget(cli):
    r = cli("experts", "--weights", WEIGHTS, "--ids", IDS, "--fit", "1MB", "--reserve", "10%",
            "--json")
    plan = r.json()["plan"]
    assert (plan["usable"], plan["reserve"]) == (900_000, 100_000)
    assert next(x for x in plan["rows"] if x["dtype"] == "float32")["fits"] is False


# ---------------------------------------------------------------------------------------------
# The outputs.


def test_the_tables_name_the_rule_and_the_text(cli):
    r = cli("experts", "--weights", WEIGHTS, "--ids", IDS, "--fit", "300KB")
    assert r.code == 0, r.err
    assert "routing rule: softmax top-2, renormalised\n" in r.out
    assert "shared experts: none\n" in r.out
    assert r.out.rstrip().endswith(f"the plan holds for text like {IDS} (21 tokens)")


@pytest.mark.parametrize("fmt, line", [
    ("markdown", "| layer | experts | top-k | routings | CV | MaxVio | largest share | dead | "
                 "busiest (x even) | idlest (x even) |"),
    ("csv", "0,4,2,42,0.305,0.333,33.3%,0,2 (1.33),0 (0.57)"),
])
def test_formats(cli, fmt, line):
    r = cli("experts", "--weights", WEIGHTS, "--ids", IDS, "--format", fmt)
    assert r.code == 0, r.err
    assert line in r.out.splitlines()


def test_the_report_shows_its_document(cli, tmp_path):
    page = tmp_path / "experts.html"
    r = cli("experts", "--weights", WEIGHTS, "--ids", IDS, "--fit", "300KB", "--report", page,
            "--json")
    assert r.code == 0, r.err
    tables = check_report(page.read_text(), r.json())
    assert tables["load"] == [["0", "6", "9", "14", "13"], ["1", "7", "7", "11", "17"]]
    assert "plan-bytes" in tables and "coverage" in tables


# ---------------------------------------------------------------------------------------------
# Hostile inputs: one error line, exit 2.

DENSE = FIXTURE.parent / "gpt2"
COVERAGE = ("error: option --coverage: expected a share of routings above 0 and at most 1, such "
            "as 0.9, got {}")


@pytest.mark.parametrize("args, line", [
    (("--weights", DENSE, "--ids", IDS),
     f"error: experts: {DENSE} has a dense FFN in its layers, no mixture of experts: there is "
     "no router to profile"),
    (("--weights", DENSE, "--ids", IDS, "--layer", "1"),
     f"error: experts: {DENSE} has a dense FFN in layer 1, no mixture of experts: there is no "
     "router to profile"),
    (("--weights", WEIGHTS),
     "error: experts: give the text with --text FILE or its token ids with --ids FILE"),
    (("--weights", WEIGHTS, "--ids", IDS, "--coverage", "0.5"),
     "error: --coverage shapes the placement plan: give --fit too"),
    (("--weights", WEIGHTS, "--ids", IDS, "--coverage", "0.5", "--seq-len", "8"),
     "error: --coverage and --seq-len shape the placement plan: give --fit too"),
    (("--weights", WEIGHTS, "--ids", IDS, "--fit", "1GB", "--coverage", "0"),
     COVERAGE.format("0.0")),
    (("--weights", WEIGHTS, "--ids", IDS, "--fit", "1GB", "--coverage", "1.5"),
     COVERAGE.format("1.5")),
    (("--weights", WEIGHTS, "--ids", IDS, "--fit", "24"),
     "error: option --fit: expected a size with its unit, such as 24GB, 24GiB or 2x80GB "
     "(units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '24'"),
    (("--weights", WEIGHTS, "--ids", IDS, "--reserve", "10%"),
     "error: --reserve holds memory back from --fit: give --fit too"),
    (("--weights", WEIGHTS, "--ids", IDS, "--fit", "1GB", "--layer", "1"),
     "error: option --fit plans every layer's experts: leave --layer out"),
    (("--weights", WEIGHTS, "--ids", IDS, "--fit", "1GB", "--seq-len", "0"),
     "error: option --seq-len: expected a whole number >= 1, got 0"),
    (("--weights", WEIGHTS, "--ids", IDS, "--layer", "2"),
     "error: option --layer: expected layers of 0-1, got '2'"),
    (("--weights", WEIGHTS, "--ids", IDS, "--json", "--format", "csv"),
     "error: give --json or --format csv, not both"),
])
def test_hostile_inputs(cli, args, line):
    r = cli("experts", *args)
    assert (r.code, r.err, r.out) == (2, line + "\n", "")


def test_a_dense_shard_corpus_is_refused_too(cli, tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    shutil.copy(IDS, folder / "a.txt")
    r = cli("experts", "--weights", DENSE, "--ids", folder)
    assert (r.code, r.err) == (2, f"error: experts: {DENSE} has a dense FFN in its layers, no "
                                  "mixture of experts: there is no router to profile\n")


def test_skip_bad_leaves_a_bad_shard_out(cli, corpus):
    (corpus / "part9.txt").write_text("1 2 999\n")  # past the vocabulary of 128
    r = cli("experts", "--weights", WEIGHTS, "--ids", corpus, "--skip-bad", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert (doc["tokens"], doc["sequences"], doc["shards"]) == (21, 3, 3)
    assert [s["path"] for s in doc["skipped"]] == [str(corpus / "part9.txt")]
    assert r.err.startswith(f"skipped: {corpus / 'part9.txt'}: ")
    plain = cli("experts", "--weights", WEIGHTS, "--ids", corpus, "--json")
    assert plain.code == 2 and plain.err.startswith(f"error: {corpus / 'part9.txt'}: ")
