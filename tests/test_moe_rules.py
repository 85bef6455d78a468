"""The routing rules of compute/ffn.py (issue 42) against an oracle written token by token with
Python's math and sorted(), on hand-made logits: softmax and sigmoid scores, renormalised or
not, the softmax over the chosen logits, group-limited top-k (DeepSeek-V3's sum of the two best,
DeepSeek-V2's max), the score-correction bias for choosing only, the scaling factor, the weight
on the expert's input (Llama 4), shared experts behind a sigmoid gate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ffncli.compute import ffn as F
from ffncli.compute.engine import Engine

E = 8  # experts
# Hand-made logits, one token a row (x one-hot rows, the router the logits' table):
# distinct values, a tie (row 2: experts 1 and 5 equal), negative and large ones.
LOGITS = np.array([
    [0.3, -1.2, 2.5, 0.7, 1.9, -0.4, 0.1, 1.1],
    [-2.0, 0.5, -0.3, 3.1, -1.7, 2.2, 0.9, -0.8],
    [1.0, 2.0, 0.0, -1.0, 0.5, 2.0, 1.5, -2.0],
    [4.0, -4.0, 3.5, -3.5, 0.2, 0.25, -0.1, 0.15],
])
BIAS = np.array([0.0, 0.3, -0.2, 0.0, 0.5, -0.6, 0.1, 0.0])


def _weights(rule: F.Routing, top_k: int, bias: np.ndarray | None = None,
             experts: tuple[F.ExpertWeights, ...] | None = None, **extra: object
             ) -> F.MoEWeights:
    d = LOGITS.shape[0]
    zero = F.DenseWeights(np.zeros((d, 1)), None, np.zeros((1, d)), None)
    return F.MoEWeights(LOGITS.copy(), None, experts or (zero,) * E, top_k, rule=rule,
                        choice_bias=bias, **extra)  # type: ignore[arg-type]


def _x() -> np.ndarray:
    return np.eye(LOGITS.shape[0])  # token t one-hot: its logits x LOGITS = LOGITS[t]


def oracle(row: list[float], rule: F.Routing, k: int, bias: list[float] | None = None
           ) -> tuple[list[int], list[float]]:
    """One token, by the paper's words, in plain Python."""
    if rule.score == "softmax":
        top = max(row)
        exps = [math.exp(v - top) for v in row]
        score = [v / sum(exps) for v in exps]
    else:
        score = [1 / (1 + math.exp(-v)) for v in row]
    choice = [s + (bias[i] if bias else 0.0) for i, s in enumerate(score)]
    allowed = set(range(len(row)))
    if rule.groups > 1:
        size = len(row) // rule.groups
        group_scores = []
        for g in range(rule.groups):
            members = sorted(choice[g * size:(g + 1) * size], reverse=True)
            group_scores.append(members[0] if rule.group_score == "max"
                                else members[0] + members[1])
        best_groups = sorted(range(rule.groups), key=lambda g: (-group_scores[g], g))
        allowed = {e for g in best_groups[:rule.top_groups]
                   for e in range(g * size, (g + 1) * size)}
    chosen = sorted(allowed, key=lambda e: (-choice[e], e))[:k]
    if rule.over_chosen:
        top = max(row[e] for e in chosen)
        total = sum(math.exp(row[e] - top) for e in chosen)
        weights = [math.exp(row[e] - top) / total for e in chosen]
    else:
        weights = [score[e] for e in chosen]
        if rule.renormalise:
            weights = [w / sum(weights) for w in weights]
    return chosen, [w * rule.scale for w in weights]


RULES = {
    "mixtral": (F.Routing(), 2, False),
    "qwen, not renormalised": (F.Routing(renormalise=False), 2, False),
    "gpt-oss, softmax over the chosen": (F.Routing(over_chosen=True), 3, False),
    "deepseek-v3": (F.Routing(score="sigmoid", groups=4, top_groups=2, scale=2.5), 2, True),
    "deepseek-v3, one group": (F.Routing(score="sigmoid", renormalise=True), 3, True),
    "deepseek-v2 group_limited_greedy": (
        F.Routing(renormalise=False, groups=4, top_groups=2, group_score="max", scale=16.0),
        3, False),
    "glm-4.5 scaled, no renormalising": (
        F.Routing(score="sigmoid", renormalise=False, groups=2, top_groups=1, scale=1.8), 2,
        True),
    "llama 4": (F.Routing(score="sigmoid", renormalise=False, scales_input=True), 1, False),
}


@pytest.mark.parametrize("name", RULES)
def test_route_equals_the_token_by_token_oracle(name):
    rule, k, biased = RULES[name]
    bias = BIAS if biased else None
    order, weights = F.route(_x(), _weights(rule, k, bias))
    for t, row in enumerate(LOGITS.tolist()):
        chosen, expected = oracle(row, rule, k, bias.tolist() if bias is not None else None)
        assert order[t].tolist() == chosen, (name, t)
        np.testing.assert_allclose(weights[t], expected, rtol=1e-12, atol=0, err_msg=name)


def test_ties_go_to_the_lower_expert_index():
    order, _ = F.route(_x(), _weights(F.Routing(), 2))
    assert order[2].tolist() == [1, 5]  # logits 2.0 and 2.0: expert 1 before expert 5


def test_the_bias_chooses_but_does_not_weigh():
    rule = F.Routing(score="sigmoid", renormalise=False)
    plain = F.route(_x(), _weights(rule, 2))
    biased = F.route(_x(), _weights(rule, 2, BIAS))
    # token 0: sigmoid 0.924 (expert 2), 0.870 (4), 0.750 (7); with the bias 0.724, 1.370, 0.750
    assert plain[0][0].tolist() == [2, 4] and biased[0][0].tolist() == [4, 7]
    sig = 1 / (1 + np.exp(-LOGITS))
    np.testing.assert_allclose(biased[1], np.take_along_axis(sig, biased[0], 1), rtol=1e-12)


def test_groups_keep_the_choice_inside_the_best_groups():
    """Groups of two: (0,1) (2,3) (4,5) (6,7). Token 3's DeepSeek-V3 group scores (the sum of
    the two best sigmoids) put groups 0 and 1 first; its best single expert outside them would
    otherwise be chosen by a plain top-k."""
    rule = F.Routing(score="sigmoid", groups=4, top_groups=1)
    order, _ = F.route(_x(), _weights(rule, 2))
    sig = 1 / (1 + np.exp(-LOGITS))
    for t in range(LOGITS.shape[0]):
        pairs = sig[t].reshape(4, 2).sum(axis=1)
        g = int(np.argmax(pairs))
        assert sorted(order[t].tolist()) == [2 * g, 2 * g + 1]


@pytest.mark.parametrize("rule", [F.Routing(), F.Routing(score="sigmoid")])
def test_scores_are_a_distribution_over_all_experts(rule):
    s = F.scores(_x(), _weights(rule, 2))
    np.testing.assert_allclose(s.sum(axis=1), 1.0, rtol=1e-12)
    raw = np.exp(LOGITS) if rule.score == "softmax" else 1 / (1 + np.exp(-LOGITS))
    np.testing.assert_allclose(s, raw / raw.sum(axis=1, keepdims=True), rtol=1e-12)


@pytest.mark.parametrize("rule,top_k,biased,text", [
    (F.Routing(), 2, False, "softmax top-2, renormalised"),
    (F.Routing(renormalise=False), 8, False, "softmax top-8"),
    (F.Routing(score="sigmoid", groups=8, top_groups=4, scale=2.5), 8, True,
     "sigmoid + bias top-8, renormalised, 8 groups top-4, x2.5"),
    (F.Routing(over_chosen=True), 4, False, "softmax top-4, softmax over the chosen"),
    (F.Routing(score="sigmoid", renormalise=False, scales_input=True), 1, False,
     "sigmoid top-1, on the expert's input"),
    (F.Routing(groups=8, top_groups=3, group_score="max", renormalise=False, scale=16), 6,
     False, "softmax top-6, 8 groups top-3 by max, x16"),
])
def test_describe_names_the_rule(rule, top_k, biased, text):
    assert _weights(rule, top_k, BIAS if biased else None).describe() == text


@pytest.mark.parametrize("kwargs", [dict(score="tanh"), dict(group_score="mean"),
                                    dict(groups=4, top_groups=5), dict(groups=0)])
def test_a_rule_out_of_range_is_refused(kwargs):
    with pytest.raises(ValueError):
        F.Routing(**kwargs)


def _experts(rng: np.random.Generator, d: int, f: int, n: int) -> tuple[F.GatedWeights, ...]:
    return tuple(F.GatedWeights(rng.normal(0, 0.5, (d, f)), None, rng.normal(0, 0.5, (d, f)),
                                None, rng.normal(0, 0.5, (f, d)), None) for _ in range(n))


def _silu(z: np.ndarray) -> np.ndarray:
    return z / (1 + np.exp(-z))


@pytest.mark.parametrize("name", ["mixtral", "llama 4", "deepseek-v3", "qwen2-moe"])
def test_moe_ffn_and_the_engine_equal_a_loop_over_tokens(name):
    """Each token alone: sum over its chosen experts of weight x expert (Llama 4: expert of
    weight x input), plus the shared expert times sigmoid(x g) where gated."""
    rng = np.random.default_rng(7)
    d, f, n = 6, 5, 40
    rule, k, biased = RULES.get(name, (F.Routing(renormalise=False), 2, False))
    experts = _experts(rng, d, f, E)
    shared = _experts(rng, d, 7, 1)[0] if name in ("deepseek-v3", "qwen2-moe") else None
    gate = rng.normal(0, 1, d) if name == "qwen2-moe" else None
    p = F.MoEWeights(rng.normal(0, 1, (d, E)), None, experts, k, rule=rule,
                     choice_bias=BIAS if biased else None, shared=shared, shared_gate=gate)
    x = rng.normal(0, 1, (n, d))
    order, weights = F.route(x, p)
    expected = np.zeros_like(x)
    for t in range(n):
        for e, w in zip(order[t], weights[t], strict=True):
            ex = experts[e]
            xin = x[t] * w if rule.scales_input else x[t]
            y = (_silu(xin @ ex.w) * (xin @ ex.v)) @ ex.w2
            expected[t] += y if rule.scales_input else w * y
        if shared is not None:
            y = (_silu(x[t] @ shared.w) * (x[t] @ shared.v)) @ shared.w2
            expected[t] += y / (1 + math.exp(-(x[t] @ gate))) if gate is not None else y
    np.testing.assert_allclose(F.moe_ffn(x, p, "silu"), expected, rtol=1e-10, atol=1e-12)
    engine = Engine(p, "silu", chunk_tokens=7)  # chunks of 7: boundaries inside the input
    np.testing.assert_allclose(engine(x), expected, rtol=1e-10, atol=1e-12)


def test_random_weights_draw_the_shared_expert_and_its_gate_after_the_experts():
    """Qwen2-MoE's shape, random: the router, each expert (W, V, W2), then the shared expert
    (its own width) and its gate, from one generator, as compute/weights.py documents."""
    from ffncli.compute.weights import random_weights
    from ffncli.specs.spec import FfnSpec, InitSpec, ModelSpec

    ffn = FfnSpec(d_ff=3, activation="silu", gated=True, bias=False, experts=4, top_k=2,
                  shared_d_ff=5, shared_gate=True)
    spec = ModelSpec(name="t", d_model=6, ffn=ffn, init=InitSpec(std=0.5, seed=3))
    p = random_weights(spec, np.dtype(np.float64), rule=F.Routing(renormalise=False))
    assert isinstance(p, F.MoEWeights) and p.rule == F.Routing(renormalise=False)
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(p.router, rng.normal(0, 0.5, (6, 4)))
    for _ in range(4):
        for shape in ((6, 3), (6, 3), (3, 6)):
            rng.normal(0, 0.5, shape)
    assert isinstance(p.shared, F.GatedWeights) and p.shared_gate is not None
    for got, shape in ((p.shared.w, (6, 5)), (p.shared.v, (6, 5)), (p.shared.w2, (5, 6))):
        np.testing.assert_array_equal(got, rng.normal(0, 0.5, shape))
    np.testing.assert_array_equal(p.shared_gate, rng.normal(0, 0.5, 6))
