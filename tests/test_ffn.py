"""The FFN math (compute/ffn.py) and the engine that computes it fast (compute/engine.py),
against known answers and independent references (math.erf, PyTorch, loops)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import DATA

from ffncli.base import parallel
from ffncli.compute import engine as E
from ffncli.compute import ffn as F
from ffncli.compute.engine import Engine, activate_inplace
from ffncli.compute.weights import random_weights
from ffncli.specs.spec import FfnSpec, InitSpec, ModelSpec

TORCH = np.load(DATA / "torch_reference.npz", allow_pickle=False)
LESSON_Z = np.array([[0.8446, 0.5777, 0.8446, 0.5777],
                     [0.5777, 0.8446, 0.5777, 0.8446],
                     [0.7881, 0.7881, 0.7881, 0.7881]])
LESSON_OUT = np.array([[-0.8922, -0.1113, 1.1279, 0.9931],
                       [-0.7854, 0.1088, 0.9081, 1.2013],
                       [-0.9078, 0.0132, 1.1043, 1.2399]])
ACTS = ("relu", "gelu", "gelu_tanh", "silu", "swish", "sigmoid", "identity")


def test_lesson_output_from_its_own_code():
    rng = np.random.default_rng(42)
    w1, b1 = rng.normal(0, 0.5, (4, 16)), np.zeros(16)
    w2, b2 = rng.normal(0, 0.5, (16, 4)), np.zeros(4)
    for dtype in (np.float32, np.float64):
        p = F.DenseWeights(*(a.astype(dtype) for a in (w1, b1, w2, b2)))
        y = Engine(p, "relu")(LESSON_Z.astype(dtype))
        assert [[f"{v:.4f}" for v in row] for row in y] == [
            [f"{v:.4f}" for v in row] for row in LESSON_OUT]
        assert ((LESSON_Z @ w1 + b1) <= 0).sum(axis=1).tolist() == [8, 8, 7]


def test_activations_at_known_points():
    x = np.array([-2.0, 0.0, 3.0])
    np.testing.assert_array_equal(F.relu(x), [0, 0, 3])  # the seed: [-2, 3] -> [0, 3]
    assert F.gelu(np.array([1.0]))[0] == pytest.approx(0.8413447460685429, abs=1e-15)
    assert F.gelu_tanh(np.array([1.0]))[0] == pytest.approx(0.8411919906082768, abs=1e-15)
    assert F.silu(np.array([1.0]))[0] == pytest.approx(1 / (1 + math.exp(-1)), abs=1e-15)
    assert F.silu(np.array([1.0]), beta=2.0)[0] == pytest.approx(1 / (1 + math.exp(-2)))
    assert F.sigmoid(np.array([0.0]))[0] == 0.5
    assert F.sigmoid(np.array([-1000.0]))[0] == 0.0


def test_erf_against_math_erf():
    x = np.linspace(-7, 7, 20001)
    ref = np.array([math.erf(v) for v in x])
    assert np.abs(F.erf(x) - ref).max() < 1e-14  # float64: the Chebyshev series
    x32 = x.astype(np.float32)
    ref32 = np.array([math.erf(float(v)) for v in x32])
    assert np.abs(F.erf(x32) - ref32).max() <= 2**-24  # float32: correctly rounded near 1


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-6), (np.float64, 1e-13)])
@pytest.mark.parametrize("act", ACTS)
def test_inplace_activations_equal_the_formula_elementwise(act, dtype, tol):
    x = np.linspace(-9, 9, 4001).astype(dtype).reshape(1, -1)
    beta = 1.7 if act == "swish" else 1.0
    formula = {
        "relu": lambda v: max(v, 0.0),
        "gelu": lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))),
        "gelu_tanh": lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) *
                                                         (v + 0.044715 * v ** 3))),
        "silu": lambda v: v / (1 + math.exp(-v)),
        "swish": lambda v: v / (1 + math.exp(-beta * v)),
        "sigmoid": lambda v: 1 / (1 + math.exp(-v)),
        "identity": lambda v: v,
    }[act]
    expected = np.array([formula(float(v)) for v in x[0]])
    h = x.copy()
    activate_inplace(h, F.Activation(act, beta))
    assert h.dtype == dtype
    assert np.abs(h[0] - expected).max() <= tol * max(1.0, np.abs(expected).max())


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh", "silu", "sigmoid"])
@pytest.mark.parametrize("kind", ["dense", "gated"])
def test_against_pytorch_reference(act, kind):
    x = TORCH["x"]
    if kind == "dense":
        p = F.DenseWeights(TORCH["w1"], TORCH["b1"], TORCH["w2"], TORCH["b2"])
    else:
        p = F.GatedWeights(TORCH["w"], TORCH["b"], TORCH["v"], TORCH["c"], TORCH["w2"],
                           TORCH["b2"])
    expected = TORCH[f"{kind}_{act}"]
    np.testing.assert_allclose(Engine(p, act)(x), expected, rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(F.ffn(x, p, act), expected, rtol=1e-5, atol=2e-5)


def test_gated_swapping_w_and_v_changes_the_output():
    p = F.GatedWeights(TORCH["w"], TORCH["b"], TORCH["v"], TORCH["c"], TORCH["w2"], TORCH["b2"])
    swapped = F.GatedWeights(p.v, p.c, p.w, p.b, p.w2, p.b2)
    x = TORCH["x"]
    for act in ("silu", "gelu", "relu", "sigmoid"):
        assert not np.allclose(Engine(p, act)(x), Engine(swapped, act)(x))
    # bilinear (identity) is symmetric in W and V: the only variant where swapping is a no-op
    np.testing.assert_allclose(Engine(p, "identity")(x), Engine(swapped, "identity")(x),
                               rtol=1e-5, atol=1e-5)


def _spec(**ffn) -> ModelSpec:
    return ModelSpec(name="t", d_model=12, ffn=FfnSpec(**{"d_ff": 20, **ffn}),
                     init=InitSpec(std=0.5, seed=3))


def test_moe_against_a_loop_over_tokens():
    spec = _spec(activation="silu", gated=True, experts=5, top_k=2, bias=True)
    p = random_weights(spec, np.float64)
    x = np.random.default_rng(0).normal(size=(37, 12))
    expected = np.zeros((37, 12))
    for i, token in enumerate(x):
        logits = token @ p.router
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        top = np.argsort(-probs, kind="stable")[:2]
        weights = probs[top] / probs[top].sum()
        for e, wgt in zip(top, weights, strict=True):
            expected[i] += wgt * F.gated_ffn(token[None], p.experts[e], "silu")[0]
    np.testing.assert_allclose(Engine(p, "silu", chunk_tokens=8)(x), expected, rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(F.moe_ffn(x, p, "silu"), expected, rtol=1e-12, atol=1e-12)


def test_moe_capacity_drops_overflow_tokens_in_order():
    spec = _spec(activation="relu", experts=2, top_k=1, capacity_factor=0.5)
    p = random_weights(spec, np.float64)
    x = np.random.default_rng(1).normal(size=(16, 12))
    order, _ = F.route(x, p)
    y = F.moe_ffn(x, p, "relu")
    cap = F.capacity(p, 16)
    assert cap == 4
    for e in range(2):
        rows = np.nonzero(order[:, 0] == e)[0]
        assert np.all(y[rows[cap:]] == 0)  # dropped: no expert output at all
        assert np.all(np.any(y[rows[:cap]] != 0, axis=1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("kind", ["dense", "gated", "moe"])
def test_engine_equals_plain_path_across_chunk_boundaries(kind, act, dtype):
    spec = _spec(activation=act, gated=kind != "dense", experts=3 if kind == "moe" else 1,
                 top_k=2 if kind == "moe" else 1, beta=1.3 if act == "swish" else 1.0)
    p = random_weights(spec, dtype)
    x = np.random.default_rng(2).normal(size=(53, 12)).astype(dtype)  # 53 = 3 x 16 + 5
    x_before = x.copy()
    plain = F.ffn(x, p, F.Activation(act, spec.ffn.beta))
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for chunk in (1, 16, 53, 64):
        engine = Engine(p, F.Activation(act, spec.ffn.beta), chunk_tokens=chunk)
        y = engine(x)
        assert y.dtype == dtype
        np.testing.assert_allclose(y, plain, rtol=tol, atol=tol)
        np.testing.assert_allclose(engine(x), y, rtol=0, atol=0)  # buffers reused, same answer
    np.testing.assert_array_equal(x, x_before)  # the caller's array is never modified


def test_random_weights_follow_the_documented_draw_order():
    spec = _spec(activation="silu", gated=True, experts=2, top_k=1)
    p = random_weights(spec, np.float64)
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(p.router, rng.normal(0, 0.5, (12, 2)))
    for expert in p.experts:
        np.testing.assert_array_equal(expert.w, rng.normal(0, 0.5, (12, 20)))
        np.testing.assert_array_equal(expert.v, rng.normal(0, 0.5, (12, 20)))
        np.testing.assert_array_equal(expert.w2, rng.normal(0, 0.5, (20, 12)))


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("gated", [False, True])
def test_engine_blocks_and_threads_equal_plain_path(act, gated, monkeypatch):
    """d_ff 4096: the activation runs in 32-row cache blocks spread over worker threads."""
    spec = ModelSpec(name="wide", d_model=16, ffn=FfnSpec(d_ff=4096, activation=act,
                     gated=gated), init=InitSpec(std=0.3, seed=5))
    p = random_weights(spec, np.float32)
    x = np.random.default_rng(6).normal(size=(203, 16)).astype(np.float32)
    plain = F.ffn(x, p, act)
    assert len(E._blocks(203, 4096, 4)) > 2
    threaded = Engine(p, act, chunk_tokens=128)(x)
    scale = max(1.0, float(np.abs(plain).max()))  # float32 sums over 4096 terms
    np.testing.assert_allclose(threaded, plain, rtol=2e-5, atol=2e-6 * scale)
    monkeypatch.setattr(parallel, "_THREADS", 1)
    np.testing.assert_array_equal(Engine(p, act, chunk_tokens=128)(x), threaded)


# ---------------------------------------------------------------------------------------------
# Routing, capacity and dispatch against hand-computed values and a loop over tokens.


def _zero_experts(d_model: int, experts: int) -> tuple[F.DenseWeights, ...]:
    zero = F.DenseWeights(np.zeros((d_model, 1)), None, np.zeros((1, d_model)), None)
    return (zero,) * experts


def test_route_is_a_stable_softmax_over_the_top_k_logits():
    """Logits 1000 apart: the weights come from differences, never exp(1000)."""
    router = np.array([[1000.0, 999.0, 0.0, -1000.0]])  # d_model 1, 4 experts: logits = x r
    p = F.MoEWeights(router, None, _zero_experts(1, 4), top_k=2)
    order, weights = F.route(np.array([[1.0], [-1.0], [0.5], [0.0]]), p)
    assert order.tolist() == [[0, 1], [3, 2], [0, 1], [0, 1]]  # a tie goes to the lower index
    for row, gap in zip(weights, (1.0, 1000.0, 0.5, 0.0), strict=True):  # gap: logit 1 - logit 2
        assert row == pytest.approx([1 / (1 + math.exp(-gap)),
                                     math.exp(-gap) / (1 + math.exp(-gap))], rel=1e-12, abs=0)


@pytest.mark.parametrize("cf,n,k,experts,expected", [
    (0.5, 16, 1, 2, 4),  # 4 exactly
    (1.0, 15, 1, 2, 8),  # 7.5 -> 8
    (1.25, 10, 2, 4, 7),  # 6.25 -> 7: k tokens' worth of slots per token
    (1.0, 3, 2, 4, 2),  # 1.5 -> 2
    (2.0, 5, 1, 3, 4),  # 3.33 -> 4
    (None, 5, 1, 3, None),  # no capacity: every token kept
])
def test_capacity_is_the_ceiling_of_cf_n_k_over_experts(cf, n, k, experts, expected):
    p = F.MoEWeights(np.zeros((1, experts)), None, _zero_experts(1, experts), k, cf)
    assert F.capacity(p, n) == expected


def _kept_by_loop(order: np.ndarray, cap: int, experts: int) -> np.ndarray:
    """Tokens in order, each of a token's k choices kept while its expert has room."""
    kept = np.zeros(order.shape, dtype=bool)
    taken = [0] * experts
    for i, choices in enumerate(order):
        for s, e in enumerate(choices):
            if taken[e] < cap:
                kept[i, s] = True
                taken[e] += 1
    return kept


def test_capacity_keeps_tokens_in_token_order_against_a_loop():
    """top-2 of 4 experts, capacity ceil(0.6 * 25 * 2 / 4) = 8: some experts overflow."""
    spec = _spec(activation="gelu", experts=4, top_k=2, capacity_factor=0.6, bias=True)
    p = random_weights(spec, np.float64)
    x = np.random.default_rng(4).normal(size=(25, 12))
    order, _ = F.route(x, p)
    assert F.capacity(p, 25) == 8
    kept = _kept_by_loop(order, 8, 4)
    assert (~kept).any()  # the case under test: tokens are dropped
    groups = {e: (rows, slot) for e, rows, slot in F.dispatch(order, p)}
    for e in range(4):
        rows, slot = groups.get(e, (np.zeros(0, int), np.zeros(0, int)))
        expected_rows, expected_slot = np.nonzero(kept & (order == e))
        assert rows.tolist() == expected_rows.tolist()
        assert slot.tolist() == expected_slot.tolist()
    expected = np.zeros((25, 12))
    for i, token in enumerate(x):
        logits = token @ p.router
        probs = np.exp(logits - logits.max())
        for s, e in enumerate(order[i]):
            if kept[i, s]:
                gate = probs[e] / probs[order[i]].sum()
                expected[i] += gate * F.dense_ffn(token[None], p.experts[e], "gelu")[0]
    np.testing.assert_allclose(F.moe_ffn(x, p, "gelu"), expected, rtol=1e-12, atol=1e-12)
    out = np.full((25, 12), 7.0)  # a used buffer: dropped tokens must come out as zeros
    engine = Engine(p, "gelu", chunk_tokens=25)  # one chunk
    np.testing.assert_allclose(engine(x, out=out), expected, rtol=1e-12, atol=1e-12)
    # Chunks of 4 tokens: the capacity is still that of the whole input (8 per expert), used
    # up chunk by chunk, not ceil(0.6 * 4 * 2 / 4) = 2 per chunk, nor 8 afresh in each chunk.
    for chunk in (4, 7):
        np.testing.assert_allclose(Engine(p, "gelu", chunk_tokens=chunk)(x), expected,
                                   rtol=1e-12, atol=1e-12)
