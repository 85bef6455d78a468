"""relu-stats: the lesson's 8/8/7, every statistic against a direct NumPy computation,
chunked equals whole, merge equals one pass."""

from __future__ import annotations

import numpy as np
import pytest

from ffncli import ffn as F
from ffncli.sparsity import UnitStats, merge, relu_stats
from ffncli.spec import FfnSpec, InitSpec, ModelSpec
from ffncli.tokens import from_array
from ffncli.weights import random_weights

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
    ffn = F.Ffn(p, act, chunk_tokens=64)
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


def test_chunked_equals_whole_and_merge_equals_one_pass():
    rng = np.random.default_rng(0)
    mask = rng.random((257, 33)) < 0.6
    mask[:, 5] = True  # dead
    whole = UnitStats(33)
    whole.update(mask)
    chunked = UnitStats(33)
    for start in range(0, 257, 50):
        chunked.update(mask[start:start + 50])
    a, b = UnitStats(33), UnitStats(33)
    a.update(mask[:100])
    b.update(mask[100:])
    merged = merge(a, b)
    for s in (chunked, merged):
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
    r = relu_stats(F.Ffn(p, "relu", chunk_tokens=16), from_array(x))
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
    assert (r.code, r.err) == (2, "error: option --target-sparsity: expected a share between 0 "
                                  "and 1, got 1.5\n")
