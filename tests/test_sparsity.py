"""relu-stats: the lesson's 8/8/7, every statistic against a direct NumPy computation,
chunked equals whole, merge equals one pass."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from ffncli.analysis.sparsity import (
    UnitStats,
    merge,
    pairwise_overlap,
    relu_stats,
)
from ffncli.compute import ffn as F
from ffncli.compute.engine import Engine
from ffncli.compute.weights import random_weights
from ffncli.formats.tokens import from_array
from ffncli.specs.spec import FfnSpec, InitSpec, ModelSpec

LESSON = "0.8446 0.5777 0.8446 0.5777\n0.5777 0.8446 0.5777 0.8446\n0.7881 0.7881 0.7881 0.7881\n"


def test_lesson_8_8_7(cli, tmp_path):
    path = tmp_path / "z.txt"
    path.write_text(LESSON)
    doc = cli("relu-stats", "--preset", "tiny", "--input", path, "--json").json()
    assert doc["inactive_per_token"] == [8, 8, 7]
    assert (doc["d_ff"], doc["tokens"]) == (16, 3)
    assert doc["mean_inactive_fraction"] == pytest.approx(23 / 48)
    r = cli("relu-stats", "--preset", "tiny", "--input", path)
    assert "inactive hidden units per token (of 16): [8 8 7]" in r.out
    # the lesson: "the three sets overlap ... but they are not identical"
    pairs = {(p["a"], p["b"]): p for p in doc["pairwise_overlap"]}
    assert all(0 < p["jaccard"] < 1 for p in pairs.values())


def _direct(mask: np.ndarray) -> dict:
    """Every statistic straight from an (n, U) inactive mask."""
    n, u = mask.shape
    active = ~mask
    counts = active.sum(axis=0)
    first = [next((t for t in range(n) if active[t, j]), None) for j in range(u)]
    agg = {t: np.mean([f is None or f >= t for f in first]) for t in range(1, n + 1)}
    order = np.sort(counts)[::-1]
    hot80 = next(k for k in range(1, u + 1) if order[:k].sum() >= 0.8 * counts.sum())
    jac = [(mask[i] & mask[i + 1]).sum() / max((mask[i] | mask[i + 1]).sum(), 1)
           for i in range(n - 1)]
    return {"per_token": mask.sum(axis=1).tolist(), "dead": np.nonzero(counts == 0)[0].tolist(),
            "always": np.nonzero(counts == n)[0].tolist(), "agg": agg, "hot80": hot80,
            "jaccard": (np.mean(jac), np.std(jac)), "fraction": mask.mean()}


def _spec(act="relu", gated=False, experts=1, top_k=1, d_ff=40):
    return ModelSpec(name="s", d_model=10, ffn=FfnSpec(d_ff=d_ff, activation=act, gated=gated,
                     experts=experts, top_k=top_k), init=InitSpec(std=0.5, seed=4))


@pytest.mark.parametrize("act,gated", [("relu", False), ("gelu", False), ("silu", True)])
def test_statistics_against_direct_numpy(act, gated):
    spec = _spec(act, gated)
    p = random_weights(spec, np.float64)
    x = np.random.default_rng(9).normal(size=(300, 10))
    x[:, 0] += 3.0  # make some units always or never active
    ffn = Engine(p, act, chunk_tokens=64)
    r = relu_stats(ffn, from_array(x))
    w, b = (p.w1, p.b1) if not gated else (p.w, p.b)
    mask = (x @ w + b) <= 0
    d = _direct(mask)
    s = r.stats[0]
    assert r.inactive_per_token == d["per_token"]
    assert (r.dead_units, r.always_active_units) == (d["dead"], d["always"])
    assert r.mean_inactive_fraction == pytest.approx(d["fraction"])
    for row in s.aggregated_sparsity():
        assert row["unused_share"] == pytest.approx(d["agg"][row["tokens"]])
    hot = {row["share"]: row["units"] for row in s.hot_unit_coverage()}
    assert hot[0.8] == d["hot80"]
    ov = s.overlap_summary()
    assert (ov["mean_jaccard"], ov["std_jaccard"]) == pytest.approx(d["jaccard"])
    assert r.w2_macs_saved_per_token == pytest.approx(mask.sum() * 10 / 300)


def test_a_chunk_counted_in_pieces_equals_one_pass(monkeypatch):
    """The accumulator counts a chunk STATS_ROWS rows at a time (memory): the same statistics,
    pairs across the pieces' edges included, as the chunk at once."""
    import ffncli.analysis.sparsity as S

    spec = _spec("relu", False)
    p = random_weights(spec, np.float64)
    x = np.random.default_rng(3).normal(size=(300, 10))
    whole = relu_stats(Engine(p, "relu", chunk_tokens=300), from_array(x))
    monkeypatch.setattr(S, "STATS_ROWS", 7)
    pieces = relu_stats(Engine(p, "relu", chunk_tokens=300), from_array(x))
    a, b = whole.stats[0], pieces.stats[0]
    assert pieces.inactive_per_token == whole.inactive_per_token
    assert (a.tokens, a.inactive_total, a.pairs) == (b.tokens, b.inactive_total, b.pairs) \
        == (300, a.inactive_total, 299)
    np.testing.assert_array_equal(a.active_count, b.active_count)
    np.testing.assert_array_equal(a.first_active, b.first_active)
    assert b.overlap_summary() == pytest.approx(a.overlap_summary())


def _chunked_and_merged(mask: np.ndarray, chunk: int, split: int) -> tuple[UnitStats, UnitStats]:
    """The statistics of ``mask`` fed in chunks, and merged from two halves cut at ``split``."""
    chunked = UnitStats(mask.shape[1])
    for start in range(0, mask.shape[0], chunk):
        chunked.update(mask[start:start + chunk])
    a, b = UnitStats(mask.shape[1]), UnitStats(mask.shape[1])
    a.update(mask[:split])
    b.update(mask[split:])
    return chunked, merge(a, b)


def test_chunked_equals_whole_and_merge_equals_one_pass():
    rng = np.random.default_rng(0)
    mask = rng.random((257, 33)) < 0.6
    mask[:, 5] = True  # dead
    whole = UnitStats(33)
    whole.update(mask)
    for s in _chunked_and_merged(mask, chunk=50, split=100):
        assert s.tokens == whole.tokens and s.inactive_total == whole.inactive_total
        np.testing.assert_array_equal(s.active_count, whole.active_count)
        np.testing.assert_array_equal(s.first_active, whole.first_active)
        assert s.pairs == whole.pairs == 256
        assert s.overlap_summary() == pytest.approx(whole.overlap_summary())
        assert s.aggregated_sparsity() == whole.aggregated_sparsity()
        assert s.hot_unit_coverage() == whole.hot_unit_coverage()
        assert s.dead_units == whole.dead_units == [5]


def test_threshold_and_target_sparsity(cli):
    base = cli("relu-stats", "--preset", "gpt2", "--d-model", "48", "--d-ff", "64", "--random",
               "500", "--json").json()
    assert base["definition"].startswith("inactive: pre-activation <= 0 (gelu_tanh")
    thr = cli("relu-stats", "--preset", "gpt2", "--d-model", "48", "--d-ff", "64", "--random",
              "500", "--threshold", "0.01", "--json").json()
    assert thr["threshold"] == 0.01 and thr["inactive_per_token"] != base["inactive_per_token"]
    cats = cli("relu-stats", "--preset", "gpt2", "--d-model", "48", "--d-ff", "64", "--random",
               "500", "--target-sparsity", "0.7", "--json").json()
    assert cats["mean_inactive_fraction"] == pytest.approx(0.7, abs=0.01)
    assert "--target-sparsity 0.7" in cats["definition"]


def test_moe_per_expert_on_routed_tokens():
    spec = _spec("relu", experts=3, top_k=2, d_ff=16)
    p = random_weights(spec, np.float64)
    x = np.random.default_rng(3).normal(size=(50, 10))
    r = relu_stats(Engine(p, "relu", chunk_tokens=16), from_array(x))
    order, _ = F.route(x, p)
    expected = np.zeros(50, dtype=int)
    for e, ex in enumerate(p.experts):
        rows = np.nonzero((order == e).any(axis=1))[0]
        mask = (x[rows] @ ex.w1 + ex.b1) <= 0
        expected[rows] += mask.sum(axis=1)
        assert r.stats[e].tokens == rows.size
        np.testing.assert_array_equal(r.stats[e].active_count, (~mask).sum(axis=0))
    assert r.inactive_per_token == expected.tolist()
    assert r.mean_inactive_fraction == pytest.approx(expected.sum() / (50 * 16 * 2))


def test_bad_stats_options(cli):
    r = cli("relu-stats", "--preset", "tiny", "--random", "5", "--threshold", "0.1",
            "--target-sparsity", "0.5")
    assert (r.code, r.err) == (2, "error: give --threshold or --target-sparsity, not both\n")
    r = cli("relu-stats", "--preset", "tiny", "--random", "5", "--target-sparsity", "1.5")
    assert (r.code, r.err) == (2, "error: option --target-sparsity: expected a share from 0 "
                                  "to below 1, got 1.5\n")


# ---------------------------------------------------------------------------------------------
# Hand-computed cases: pre-activations exactly at 0, thresholds exactly at a value.

# d_model 1, d_ff 3, W1 = [1, -1, 0], no bias: pre-activations x, -x, 0.
HAND_X = np.array([[2.0], [0.0], [-1.0]])  # pre: [2 -2 0], [0 0 0], [-1 1 0]


def _hand_ffn() -> Engine:
    p = F.DenseWeights(np.array([[1.0, -1.0, 0.0]]), None, np.ones((3, 1)), None)
    return Engine(p, "relu")


@pytest.mark.parametrize("threshold,expected", [
    (None, [2, 3, 2]),  # pre <= 0: a unit at exactly 0 is off (ReLU gives exactly 0)
    (0.0, [2, 3, 2]),  # |relu(pre)| <= 0: the same units
    (1.0, [2, 3, 3]),  # relu values [2 0 0], [0 0 0], [0 1 0]
    (2.0, [3, 3, 3]),
])
def test_inactive_at_exactly_zero_and_at_the_threshold(threshold, expected):
    r = relu_stats(_hand_ffn(), from_array(HAND_X), threshold=threshold)
    assert r.inactive_per_token == expected


def test_first_activity_found_in_a_later_chunk_and_a_later_merge():
    """Unit 2 first fires at token 23, unit 1 never: chunks of 7 and a merge at 10."""
    mask = np.ones((40, 4), dtype=bool)  # all inactive
    mask[:, 0] = False  # unit 0 always active
    mask[23, 2] = mask[31, 2] = False
    mask[12, 3] = False
    expected = [0, -1, 23, 12]
    for s in _chunked_and_merged(mask, chunk=7, split=10):
        assert s.first_active.tolist() == expected
        assert s.aggregated_sparsity() == [
            {"tokens": t, "unused_share": share} for t, share in
            [(1, 0.75), (2, 0.75), (4, 0.75), (8, 0.75), (16, 0.5), (32, 0.25), (40, 0.25)]]


def _pairs_direct(mask: np.ndarray) -> dict:
    """Consecutive tokens: shared inactive units, and what two random sets of those sizes share."""
    n, u = mask.shape
    shared = [(mask[i] & mask[i + 1]).sum() for i in range(n - 1)]
    chance = [mask[i].sum() * mask[i + 1].sum() / u for i in range(n - 1)]
    return {"mean_shared": np.mean(shared), "mean_shared_by_chance": np.mean(chance)}


def test_three_way_merge_equals_one_pass_and_chance_overlap_against_direct():
    rng = np.random.default_rng(8)
    mask = rng.random((90, 21)) < rng.random(21)  # units of different activity
    whole = UnitStats(21)
    whole.update(mask)
    parts = [UnitStats(21) for _ in range(3)]
    for s, (lo, hi) in zip(parts, [(0, 30), (30, 31), (31, 90)], strict=True):
        s.update(mask[lo:hi])
    merged = merge(merge(parts[0], parts[1]), parts[2])
    assert merged.pairs == whole.pairs == 89
    assert merged.overlap_summary() == pytest.approx(whole.overlap_summary())
    direct = _pairs_direct(mask)
    summary = whole.overlap_summary()
    assert summary["mean_shared"] == pytest.approx(direct["mean_shared"])
    assert summary["mean_shared_by_chance"] == pytest.approx(direct["mean_shared_by_chance"])


def test_two_tokens_with_no_inactive_units_are_identical_sets():
    """J(A, B) = 1 for A = B = {}, in the summary and in the pairwise table alike."""
    mask = np.zeros((2, 5), dtype=bool)
    s = UnitStats(5)
    s.update(mask)
    assert s.overlap_summary()["mean_jaccard"] == 1.0
    assert pairwise_overlap(mask, 5)[0]["jaccard"] == 1.0


def test_no_tokens_no_always_active_units():
    s = UnitStats(3)
    assert (s.always_active_units, s.activity_histogram(), s.aggregated_sparsity()) == ([], [], [])


def test_activity_histogram_against_integer_bins():
    """20 tokens; unit u is active for counts[u] of them. Bins: never, (k/10, (k+1)/10] for
    k < 9, (90%, 100%), always."""
    counts = [0, 1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 17, 18, 19, 19, 20, 20]
    n = 20
    mask = np.ones((n, len(counts)), dtype=bool)
    for u, c in enumerate(counts):
        mask[:c, u] = False
    s = UnitStats(len(counts))
    s.update(mask)
    expected = [0] * 12
    for c in counts:
        if c == 0:
            expected[0] += 1
        elif c == n:
            expected[11] += 1
        else:
            expected[1 + min(-(-10 * c // n) - 1, 9)] += 1  # ceil(10 c / n) - 1
    assert [row["units"] for row in s.activity_histogram()] == expected
    assert expected == [1, 2, 2, 1, 1, 1, 1, 1, 1, 2, 2, 2]  # by hand from the counts


def test_hot_unit_share_is_of_units():
    rng = np.random.default_rng(2)
    s = UnitStats(40)
    s.update(rng.random((60, 40)) < np.linspace(0.05, 0.95, 40))
    ranked = np.sort(s.active_count)[::-1]
    for row in s.hot_unit_coverage():
        share = Fraction(str(row["share"]))  # 0.8 exactly, not the float's rounding
        k = next(k for k in range(1, 41) if int(ranked[:k].sum()) >= share * int(ranked.sum()))
        assert (row["units"], row["unit_share"]) == (k, k / 40)


def test_moe_unit_ids_and_w2_macs():
    """A dead unit of expert 1 is unit 1 * d_ff + 3 of all experts' units."""
    spec = _spec("relu", experts=3, top_k=2, d_ff=16)
    p = random_weights(spec, np.float64)
    p.experts[1].b1[3] = -100.0  # never above zero for these tokens
    x = np.random.default_rng(3).normal(size=(50, 10))
    r = relu_stats(Engine(p, "relu", chunk_tokens=16), from_array(x))
    order, _ = F.route(x, p)
    dead = []
    for e, ex in enumerate(p.experts):
        rows = np.nonzero((order == e).any(axis=1))[0]
        pre = x[rows] @ ex.w1 + ex.b1
        dead += [e * 16 + u for u in np.nonzero((pre <= 0).all(axis=0))[0]]
    assert 1 * 16 + 3 in dead
    assert r.dead_units == dead
    assert r.w2_macs_per_token == 16 * 10 * 2  # two experts' W2 per token


@pytest.mark.parametrize("n,table", [(16, True), (17, False)])
def test_pairwise_table_for_up_to_16_tokens(n, table):
    x = np.random.default_rng(1).normal(size=(n, 10))
    r = relu_stats(Engine(random_weights(_spec(), np.float64), "relu"), from_array(x))
    assert (r.small_masks is not None) == table
    if table:
        p = random_weights(_spec(), np.float64)
        np.testing.assert_array_equal(r.small_masks, (x @ p.w1 + p.b1) <= 0)


def test_merged_shards_of_a_mixture_count_chance_over_every_expert_unit(cli, tmp_path):
    """A mixture's units are numbered expert * d_ff + unit: two random inactive sets of sizes
    a and b share a * b / (experts * d_ff) of them by chance, over shards as in one file."""
    acts = tmp_path / "acts"
    acts.mkdir()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((10, 4)).astype(np.float32)
    np.save(acts / "part-0.npy", x[:6])
    np.save(acts / "part-1.npy", x[6:])
    np.save(tmp_path / "all.npy", x)
    moe = ("--preset", "tiny", "--experts", "4", "--top-k", "2")
    sharded = cli("relu-stats", *moe, "--input", acts, "--json").json()
    whole = cli("relu-stats", *moe, "--input", tmp_path / "all.npy", "--json").json()
    units = sharded["experts"] * sharded["d_ff"]
    assert units == 64
    sizes = sharded["inactive_per_token"]
    assert len(sharded["pairwise_overlap"]) == 45
    for merged, alone in zip(sharded["pairwise_overlap"], whole["pairwise_overlap"],
                             strict=True):
        assert merged["by_chance"] == pytest.approx(sizes[merged["a"]] * sizes[merged["b"]] /
                                                    units, rel=1e-12)
        assert merged == pytest.approx(alone, rel=1e-12)
