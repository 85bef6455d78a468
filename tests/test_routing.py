"""Routing statistics: each against a plain oracle written here (loops, sets, the standard
library) on a table of hand-made routings, exact values worked out by hand for small cases,
merge equals one pass, and a table of hostile inputs."""

from __future__ import annotations

import math
import statistics
from collections import Counter

import numpy as np
import pytest

from ffncli.analysis.routing import (
    LayerTransitions,
    RoutingCounts,
    co_selection,
    coverage,
    transition_baseline,
    transition_entropy,
    transition_hit_rate,
)
from ffncli.compute.ffn import MoEWeights, route
from ffncli.errors import InputError

# ---- the oracle: every statistic straight from the lists, by loops --------------------------


def positions_of(lengths: list[int]) -> np.ndarray:
    return np.concatenate([np.arange(n) for n in lengths])


def oracle(experts: int, chosen: list[list[int]], lengths: list[int]) -> dict:
    """Every statistic from a list of each token's chosen experts, the tokens cut into
    sequences of ``lengths``."""
    k = len(chosen[0])
    load = [sum(e in row for row in chosen) for e in range(experts)]
    total = sum(load)
    mean = total / experts
    shares = [n / total for n in load]
    ranked = sorted(load, reverse=True)
    cover = {p: next(m for m in range(1, experts + 1) if sum(ranked[:m]) * 100 >= p * total)
             for p in (50, 80, 90, 99)}
    jaccard, shared, start = [], [], 0
    for n in lengths:  # neighbours inside each sequence only
        for t in range(start, start + n - 1):
            a, b = set(chosen[t]), set(chosen[t + 1])
            jaccard.append(len(a & b) / len(a | b))
            shared.append(len(a & b))
        start += n
    both = Counter((a, b) for row in chosen for a in row for b in row if a != b)
    cond = sorted(((a, b, n / load[a], n) for (a, b), n in both.items()),
                  key=lambda r: (-r[2], -r[3], r[0], r[1]))
    return {
        "load": load,
        "over_ideal": [n / mean for n in load],
        "cv": statistics.pstdev(load) / mean,
        "max_vio": max(load) / mean - 1,
        "largest": max(load) / total,
        "dead": [e for e in range(experts) if load[e] == 0],
        "entropy": -sum(s * math.log(s) for s in shares if s) / math.log(experts),
        "coverage": cover,
        "pairs": len(jaccard),
        "jaccard": sum(jaccard) / len(jaccard) if jaccard else None,
        "shared": sum(shared) / len(shared) if shared else None,
        "co": cond[:10],
        "k": k,
    }


def oracle_token_entropy(probs: np.ndarray) -> float:
    """Mean over tokens of -sum p ln p of each row scaled to sum 1, over ln E."""
    total = 0.0
    for row in probs.tolist():
        s = sum(row)
        total -= sum(v / s * math.log(v / s) for v in row if v > 0)
    return total / len(probs) / math.log(probs.shape[1])


def oracle_switch(experts: int, chosen: list[list[int]], probs: np.ndarray) -> float:
    """transformers' load_balancing_loss_func without its coefficient: E sum_(j, e)
    mean_t[chosen_tj == e] mean_t[p_te] (one-hot of each of the k choices, averaged)."""
    t = len(chosen)
    rows = probs / probs.sum(axis=1, keepdims=True)
    mean_p = [sum(rows[i, e] for i in range(t)) / t for e in range(experts)]
    return experts * sum(sum(row[j] == e for row in chosen) / t * mean_p[e]
                         for j in range(len(chosen[0])) for e in range(experts))


def _ties(n: int) -> list[list[int]]:
    """Equal router logits for every expert but the third: the engine's route (a stable sort,
    the lower index first among equal scores, as TensorFlow's top_k documents it) picks 0 and
    1. torch.topk promises no order among ties (its docs; pytorch issues 27542, 133542 show
    CPU returning a higher index), so the statistics take the choices as given."""
    router = np.array([[0.0, 0.0, -1.0, 0.0]])
    p = MoEWeights(router=router, router_bias=None, experts=(), top_k=2)
    order, _ = route(np.ones((n, 1)), p)
    return order.tolist()


RNG = np.random.default_rng(7)
RANDOM = [sorted(RNG.choice(16, 4, replace=False).tolist()) for _ in range(60)]

TABLE = {  # name: (experts, each token's chosen experts, sequence lengths)
    "uniform top-1": (4, [[0], [1], [2], [3], [0], [1], [2], [3]], [8]),
    "uniform top-2": (4, [[0, 1], [2, 3], [1, 2], [3, 0]], [4]),
    "one hot expert": (4, [[2]] * 5, [5]),
    "one hot in top-2": (6, [[2, 0], [2, 5], [1, 2], [2, 3]], [4]),
    "dead experts": (8, [[0, 1], [1, 0], [2, 3], [3, 1], [0, 2]], [5]),
    "ties, lower index first": (4, _ties(6), [6]),
    "several sequences": (4, [[0, 1], [0, 1], [0, 1], [0, 1], [2, 3], [2, 3]], [3, 1, 2]),
    "top-1, sequences of one": (3, [[0], [0], [1]], [1, 1, 1]),
    "random top-4 of 16": (16, RANDOM, [20, 1, 39]),
}


def _counts(experts: int, chosen: list[list[int]], lengths: list[int]) -> RoutingCounts:
    acc = RoutingCounts(experts, len(chosen[0]), shared_experts=1)
    acc.update(np.array(chosen), positions_of(lengths))
    return acc


@pytest.mark.parametrize("name", TABLE)
def test_each_statistic_equals_the_oracle(name):
    experts, chosen, lengths = TABLE[name]
    want = oracle(experts, chosen, lengths)
    got = _counts(experts, chosen, lengths).summary()
    assert (got.tokens, got.top_k, got.shared_experts) == (len(chosen), want["k"], 1)
    assert got.load == want["load"]
    assert got.load_over_ideal == pytest.approx(want["over_ideal"])
    assert got.coefficient_of_variation == pytest.approx(want["cv"], abs=1e-12)
    assert got.max_vio == pytest.approx(want["max_vio"])
    assert got.largest_share == pytest.approx(want["largest"])
    assert got.dead_experts == want["dead"]
    assert got.load_entropy == pytest.approx(want["entropy"], abs=1e-12)
    assert got.coverage == want["coverage"]
    assert got.neighbour_pairs == want["pairs"]
    assert got.neighbour_jaccard == pytest.approx(want["jaccard"])
    assert got.neighbour_shared == pytest.approx(want["shared"])
    assert [(c.a, c.b, c.count) for c in got.co_selected] == [r[:2] + r[3:] for r in want["co"]]
    assert [c.p for c in got.co_selected] == pytest.approx([r[2] for r in want["co"]])
    assert got.importance is got.token_entropy is got.switch_balance is None


def test_the_table_holds_what_its_names_say():
    summary = {name: _counts(*case).summary() for name, case in TABLE.items()}
    assert summary["uniform top-1"].max_vio == 0 == summary["uniform top-2"].max_vio
    assert summary["uniform top-2"].load_entropy == pytest.approx(1.0)
    assert summary["one hot expert"].load_entropy == 0
    assert summary["one hot expert"].dead_experts == [0, 1, 3]
    assert summary["dead experts"].dead_experts == [4, 5, 6, 7]
    assert summary["ties, lower index first"].load == [6, 6, 0, 0]
    # three sequences of 3, 1 and 2 tokens: 2 + 0 + 1 neighbour pairs, none across a boundary
    assert summary["several sequences"].neighbour_pairs == 3
    assert summary["several sequences"].neighbour_jaccard == 1.0  # [0,1] [2,3] never meet
    assert summary["top-1, sequences of one"].neighbour_jaccard is None


def test_four_tokens_by_hand():
    """4 tokens, 4 experts, top-2: {0,1} {0,2} {0,1} {3,0}.
    load [4, 2, 1, 1], 8 routings, even share 2: over ideal [2, 1, .5, .5]; MaxVio 4/2 - 1 = 1;
    largest share 4/8; std sqrt((4 + 0 + 1 + 1) / 4) = sqrt(1.5), CV sqrt(1.5)/2.
    Shares [1/2, 1/4, 1/8, 1/8]: H = ln2 (1/2 + 2/4 + 6/8) = 1.75 ln2, over ln4: 0.875.
    Sorted loads 4 6 7 8 (cumulative): 50% (4) -> 1 expert, 80% (6.4) -> 3, 90%, 99% -> 4.
    Neighbours share one expert each, Jaccard 1/(2*2 - 1) = 1/3 each; positions 0 1 0 1 (two
    sequences) keep pairs (0,1) and (2,3) only.
    Pairs: n_01 = 2, n_02 = n_03 = 1: P(0|1) = 2/2, P(0|2) = P(0|3) = 1, P(1|0) = 2/4,
    P(2|0) = P(3|0) = 1/4.
    Weights [.6 .4] [.7 .3] [.5 .5] [.8 .2] (the first for the first expert named): importance
    [.6 + .7 + .5 + .2, .4 + .5, .3, .8] = [2, .9, .3, .8], mean 1, CV sqrt(1.54 / 4).
    Probabilities [.5 .5 0 0] [.5 0 .5 0] [.25 x4] [.5 0 0 .5]: entropies ln2 ln2 ln4 ln2 = 5 ln2,
    mean 1.25 ln2, over ln4: 0.625. Mean probabilities [1.75 .75 .75 .75]/4, token shares
    f = load/4 = [1 .5 .25 .25]: E sum f P = 4 (1.75 + .375 + .1875 + .1875)/4 = 2.5 (2 when
    even for top-2)."""
    chosen = np.array([[0, 1], [0, 2], [0, 1], [3, 0]])
    weights = np.array([[.6, .4], [.7, .3], [.5, .5], [.8, .2]])
    probs = np.array([[.5, .5, 0, 0], [.5, 0, .5, 0], [.25] * 4, [.5, 0, 0, .5]])
    acc = RoutingCounts(4, 2, shared_experts=2)
    acc.update(chosen, np.arange(4), weights=weights, probs=probs)
    s = acc.summary()
    assert s.load == [4, 2, 1, 1]
    assert s.load_over_ideal == [2.0, 1.0, 0.5, 0.5]
    assert s.max_vio == 1.0 and s.largest_share == 0.5 and s.dead_experts == []
    assert s.coefficient_of_variation == pytest.approx(math.sqrt(1.5) / 2)
    assert s.load_entropy == pytest.approx(0.875)
    assert s.coverage == {50: 1, 80: 3, 90: 4, 99: 4}
    assert (s.neighbour_pairs, s.neighbour_shared) == (3, 1.0)
    assert s.neighbour_jaccard == pytest.approx(1 / 3)
    assert [(c.a, c.b, c.p, c.count) for c in s.co_selected] == [
        (1, 0, 1.0, 2), (2, 0, 1.0, 1), (3, 0, 1.0, 1), (0, 1, 0.5, 2), (0, 2, 0.25, 1),
        (0, 3, 0.25, 1)]
    assert s.importance == pytest.approx([2.0, 0.9, 0.3, 0.8])
    assert s.importance_cv == pytest.approx(math.sqrt(1.54 / 4))
    assert s.token_entropy == pytest.approx(0.625)
    assert s.switch_balance == pytest.approx(2.5)
    assert s.shared_experts == 2
    two = RoutingCounts(4, 2)
    two.update(chosen, np.array([0, 1, 0, 1]))
    assert two.summary().neighbour_pairs == 2  # (0,1) and (2,3): not across the boundary


def test_coverage_compares_in_whole_numbers():
    """99% of 100 routings is 99 exactly: 0.99 * 100 in floats is 98.99999999999999."""
    assert coverage(np.array([99, 1])) == {50: 1, 80: 1, 90: 1, 99: 1}
    assert coverage(np.array([98, 2])) == {50: 1, 80: 1, 90: 1, 99: 2}


def test_co_selection_keeps_the_top_pairs():
    pairs = np.array([[0, 3, 1], [3, 0, 0], [1, 0, 0]])
    load = np.array([4, 3, 1])
    assert [(c.a, c.b) for c in co_selection(pairs, load, top=2)] == [(1, 0), (2, 0)]


@pytest.mark.parametrize("seed", [0, 1])
def test_probabilities_and_weights_against_the_oracle(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(50, 8))
    logits[::7, :3] = 0.0  # a few tokens with tied scores
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    chosen = np.argsort(-probs, axis=1, kind="stable")[:, :2]
    weights = np.take_along_axis(probs, chosen, axis=1)
    acc = RoutingCounts(8, 2)
    acc.update(chosen, np.arange(50), weights=weights, probs=probs)
    s = acc.summary()
    assert s.token_entropy == pytest.approx(oracle_token_entropy(probs))
    assert s.switch_balance == pytest.approx(oracle_switch(8, chosen.tolist(), probs))
    importance = [sum(w for row, ws in zip(chosen.tolist(), weights.tolist(), strict=True)
                      for e2, w in zip(row, ws, strict=True) if e2 == e) for e in range(8)]
    assert s.importance == pytest.approx(importance)
    assert s.importance_cv == pytest.approx(statistics.pstdev(importance)
                                            / statistics.mean(importance))


def test_sigmoid_scores_are_scaled_to_sum_one():
    """DeepSeek-V3's and Llama 4's sigmoid scores do not sum to 1: each row is divided by its
    sum, so scores [.9 .9 .9 .9] are as even as [.25 x4]."""
    acc = RoutingCounts(4, 1)
    acc.update(np.array([[0]]), np.array([0]), probs=np.array([[.9, .9, .9, .9]]))
    assert acc.summary().token_entropy == pytest.approx(1.0)


def test_scores_given_for_part_of_the_tokens_give_no_figure():
    acc = RoutingCounts(4, 1)
    acc.update(np.array([[0]]), np.array([0]), probs=np.array([[1.0, 0, 0, 0]]),
               weights=np.array([[1.0]]))
    acc.update(np.array([[1]]), np.array([1]))
    s = acc.summary()
    assert s.token_entropy is s.switch_balance is s.importance is None


# ---- merge equals one pass -------------------------------------------------------------------

N = 120


def _random_input(seed: int):
    rng = np.random.default_rng(seed)
    chosen = np.array([rng.choice(12, 3, replace=False) for _ in range(N)])
    probs = rng.dirichlet(np.ones(12), size=N)
    weights = rng.random((N, 3))
    positions = positions_of([37, 1, 50, 32])  # boundaries at 37, 38, 88
    return chosen, positions, weights, probs


def _fed(cuts: list[int], seed: int = 3) -> RoutingCounts:
    """An accumulator per piece of the input cut at ``cuts``, merged left to right."""
    chosen, positions, weights, probs = _random_input(seed)
    total = RoutingCounts(12, 3, shared_experts=1)
    edges = [0, *cuts, N]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        part = RoutingCounts(12, 3, shared_experts=1)
        part.update(chosen[lo:hi], positions[lo:hi], weights=weights[lo:hi], probs=probs[lo:hi])
        total = total.merge(part)
    return total


INTEGERS = ("tokens", "load", "pairs", "overlaps", "weighted_tokens", "scored_tokens")
FLOATS = ("weight_sum", "prob_sum", "entropy_sum")


@pytest.mark.parametrize("cuts", [[60], [37], [38], [1], [119], [10, 37, 38, 88, 100]],
                         ids=str)
def test_merge_equals_one_pass(cuts):
    whole, merged = _fed([]), _fed(cuts)
    for name in INTEGERS:
        assert np.array_equal(getattr(merged, name), getattr(whole, name)), name
    for name in FLOATS:
        assert np.allclose(getattr(merged, name), getattr(whole, name), rtol=1e-12), name
    assert whole.first[0] == merged.first[0] and whole.last[0] == merged.last[0]
    assert np.array_equal(whole.first[1], merged.first[1])
    assert np.array_equal(whole.last[1], merged.last[1])


def test_chunks_fed_to_one_accumulator_equal_one_pass():
    chosen, positions, weights, probs = _random_input(3)
    acc = RoutingCounts(12, 3, shared_experts=1)
    for lo in range(0, N, 25):
        acc.update(chosen[lo:lo + 25], positions[lo:lo + 25], weights=weights[lo:lo + 25],
                   probs=probs[lo:lo + 25])
    whole = _fed([])
    for name in INTEGERS:
        assert np.array_equal(getattr(acc, name), getattr(whole, name)), name
    # 36 + 0 + 49 + 31 neighbour pairs: none across a boundary, every one across a chunk edge
    assert int(acc.overlaps.sum()) == 116


def test_merge_with_nothing_counted_changes_nothing():
    whole = _fed([])
    for merged in (whole.merge(RoutingCounts(12, 3, 1)), RoutingCounts(12, 3, 1).merge(whole)):
        for name in INTEGERS:
            assert np.array_equal(getattr(merged, name), getattr(whole, name)), name


# ---- layer-to-layer consistency ----------------------------------------------------------------


def test_transitions_by_hand():
    """First choices at layer l 0 0 1 1 2 2, at layer l+1 1 1 2 3 0 0: after 0 always 1, after
    2 always 0, after 1 half 2 half 3. Hit rate (2 + 1 + 2) / 6 = 5/6; the busiest expert of
    l+1 (0 or 1, 2 tokens each) alone: 2/6. H(B|A) = (2/6) ln 2 (expert 1's two tokens), over
    ln 4: 1/6."""
    t = LayerTransitions(4, 4)
    t.update(np.array([[0, 3], [0, 1], [1, 0], [1, 2], [2, 3], [2, 0]]),
             np.array([[1], [1], [2], [3], [0], [0]]))
    assert transition_hit_rate(t.counts) == pytest.approx(5 / 6)
    assert transition_baseline(t.counts) == pytest.approx(1 / 3)
    assert transition_entropy(t.counts) == pytest.approx(1 / 6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_transitions_against_the_oracle(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 6, size=80)
    b = (a * 2 + rng.integers(0, 2, size=80)) % 5  # b follows a, loosely
    pairs = Counter(zip(a.tolist(), b.tolist(), strict=True))
    after = {x: Counter({y: n for (x2, y), n in pairs.items() if x2 == x}) for x in set(a.tolist())}
    hit = sum(max(c.values()) for c in after.values()) / 80
    cond = sum(sum(c.values()) / 80 * -sum(n / sum(c.values()) * math.log(n / sum(c.values()))
                                           for n in c.values()) for c in after.values())
    base = max(Counter(b.tolist()).values()) / 80
    t1, t2 = LayerTransitions(6, 5), LayerTransitions(6, 5)
    t1.update(a[:30, None], b[:30, None])
    t2.update(a[30:, None], b[30:, None])
    t = t1.merge(t2)
    assert transition_hit_rate(t.counts) == pytest.approx(hit)
    assert transition_baseline(t.counts) == pytest.approx(base)
    assert transition_entropy(t.counts) == pytest.approx(cond / math.log(5))


# ---- hostile input ---------------------------------------------------------------------------

GOOD = {"chosen": np.array([[0, 1], [2, 3]]), "positions": np.array([0, 1])}


def _with(**changes):
    return {**GOOD, **changes}


HOSTILE = [
    (_with(chosen=np.array([[0.0, 1.0], [2.0, 3.0]])),
     "chosen experts: expected an integer array (tokens, 2), got float64 (2, 2)"),
    (_with(chosen=np.array([[True, False]])),
     "chosen experts: expected an integer array (tokens, 2), got bool (1, 2)"),
    (_with(chosen=[[0, 1]]), "chosen experts: expected an integer array (tokens, 2), got list"),
    (_with(chosen=np.array([0, 1])),
     "chosen experts: expected an integer array (tokens, 2), got int64 (2,)"),
    (_with(chosen=np.array([[0], [1]])),
     "chosen experts: expected an integer array (tokens, 2), got int64 (2, 1)"),
    (_with(chosen=np.array([[0, 1], [2, 4]])),
     "chosen experts: expected ids from 0 to 3, got 4 (token 1)"),
    (_with(chosen=np.array([[0, -1], [2, 3]])),
     "chosen experts: expected ids from 0 to 3, got -1 (token 0)"),
    (_with(chosen=np.array([[0, 1], [3, 3]])),
     "chosen experts: expected 2 different experts a token, got [3, 3] (token 1)"),
    (_with(chosen=np.zeros((0, 2), dtype=np.int64), positions=np.zeros(0, dtype=np.int64)),
     "chosen experts: expected at least one token, got 0"),
    (_with(positions=np.array([0, 1, 2])),
     "positions: expected an integer array (2,), got int64 (3,)"),
    (_with(positions=np.array([0.0, 1.0])),
     "positions: expected an integer array (2,), got float64 (2,)"),
    (_with(positions=np.array([-1, 0])), "positions: expected positions >= 0, got -1"),
    (_with(probs=np.array([[0.5, np.nan, 0.5, 0], [0.25] * 4])),
     "routing probabilities: expected finite numbers >= 0, got nan (token 0, expert 1)"),
    (_with(probs=np.array([[0.5, 0.5, 0, 0], [0, 0, 0, 0.0]])),
     "routing probabilities: expected a positive sum a token, got 0 (token 1)"),
    (_with(probs=np.array([[1, 0, 0, 0], [0, 1, 0, 0]])),
     "routing probabilities: expected a float array (2, 4), got int64 (2, 4)"),
    (_with(probs=np.ones((2, 5))),
     "routing probabilities: expected a float array (2, 4), got float64 (2, 5)"),
    (_with(weights=np.array([[0.5, -0.5], [1.0, 0.0]])),
     "routing weights: expected finite numbers >= 0, got -0.5 (token 0, expert 1)"),
    (_with(weights=np.array([[0.5, 0.5], [np.inf, 0.0]])),
     "routing weights: expected finite numbers >= 0, got inf (token 1, expert 0)"),
]


@pytest.mark.parametrize("kwargs, message", HOSTILE, ids=[m for _, m in HOSTILE])
def test_hostile_input_is_refused_in_one_line(kwargs, message):
    acc = RoutingCounts(4, 2)
    with pytest.raises(InputError) as e:
        acc.update(**kwargs)
    assert str(e.value) == message
    assert acc.tokens == 0 and not acc.load.any()  # nothing half-counted


def test_a_bad_argument_leaves_the_others_uncounted():
    acc = RoutingCounts(4, 2)
    with pytest.raises(InputError, match="routing probabilities"):
        acc.update(**GOOD, weights=np.ones((2, 2)), probs=np.full((2, 4), np.nan))
    assert acc.weighted_tokens == 0 and not acc.weight_sum.any()


@pytest.mark.parametrize("make, message", [
    (lambda: RoutingCounts(1, 1), "experts: expected a whole number >= 2, got 1"),
    (lambda: RoutingCounts(4, 5), "top_k: expected a whole number from 1 to 4, got 5"),
    (lambda: RoutingCounts(4, 0), "top_k: expected a whole number >= 1, got 0"),
    (lambda: RoutingCounts(4, 2, shared_experts=-1),
     "shared experts: expected a whole number >= 0, got -1"),
    (lambda: RoutingCounts(4, 2).summary(), "routing counts: expected at least one token, got 0"),
    (lambda: RoutingCounts(4, 2).merge(RoutingCounts(4, 1)),
     "routing counts: expected 4 experts, top-2, 0 shared, got 4, top-1, 0"),
    (lambda: LayerTransitions(4, 4).update(np.array([[0]]), np.array([[0], [1]])),
     "layer transitions: expected two (tokens, k) arrays of the same tokens, got int64 (1, 1) "
     "and int64 (2, 1)"),
    (lambda: LayerTransitions(4, 3).update(np.array([[0]]), np.array([[3]])),
     "chosen experts: expected ids from 0 to 2, got 3 (token 0)"),
    (lambda: LayerTransitions(4, 3).merge(LayerTransitions(4, 4)),
     "layer transitions: expected (4, 3) counts, got (4, 4)"),
])
def test_hostile_setup_is_refused_in_one_line(make, message):
    with pytest.raises(InputError) as e:
        make()
    assert str(e.value) == message
