"""The sparsified FFN (compute/sparse.py) against the plain formulas with the cut applied by
hand: cats, teal and topk on dense and gated weights, what it counts, and its error."""

from __future__ import annotations

import numpy as np
import pytest

from ffncli.compute.engine import Engine
from ffncli.compute.ffn import DenseWeights, GatedWeights, as_activation
from ffncli.compute.sparse import Cut, SparseFfn, gate_and_up, smallest

D, F = 16, 48


def _weights(gated: bool, rng: np.random.Generator) -> DenseWeights | GatedWeights:
    def m(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.3, shape)

    if gated:
        return GatedWeights(m(D, F), m(F), m(D, F), m(F), m(F, D), m(D))
    return DenseWeights(m(D, F), m(F), m(F, D), m(D))


def _reference(x, p, act, cut: Cut):
    """The cut applied by hand to the plain formula, float64: (y, zeroed, zeroed_in)."""
    act = as_activation(act)
    zeroed_in = 0
    if cut.rule == "teal":
        small = np.abs(x) <= cut.threshold
        zeroed_in = int(small.sum())
        x = np.where(small, 0.0, x)
    w, b = (p.w, p.b) if isinstance(p, GatedWeights) else (p.w1, p.b1)
    a = act(x @ w + b)
    if cut.rule == "cats":
        mask = np.abs(a) <= cut.threshold
    elif cut.rule == "topk":
        mask = np.zeros_like(a, dtype=bool)
        for row, values in enumerate(np.abs(a)):
            mask[row, np.argsort(values)[:F - cut.keep]] = True
    else:
        mask = np.zeros_like(a, dtype=bool)
    h = a * (x @ p.v + p.c) if isinstance(p, GatedWeights) else a
    if cut.rule == "teal":
        mask = np.abs(h) <= cut.down
    h = np.where(mask, 0.0, h)
    return h @ p.w2 + p.b2, int(mask.sum()), zeroed_in


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("cut", [Cut("cats", threshold=0.05), Cut("teal", threshold=0.4,
                                                                  down=0.03),
                                 Cut("topk", keep=20)], ids=lambda c: c.rule)
def test_each_rule_is_the_formula_with_the_cut_applied(gated, cut):
    rng = np.random.default_rng(7)
    p = _weights(gated, rng)
    x = rng.normal(0, 1, (37, D))
    ffn = SparseFfn(Engine(p, "silu", chunk_tokens=10), cut)  # chunks of 10 rows
    out = np.empty((37, D))
    ffn(x, out)
    want, zeroed, zeroed_in = _reference(x, p, "silu", cut)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    assert (ffn.counts.tokens, ffn.counts.zeroed, ffn.counts.zeroed_in) == \
        (37, zeroed, zeroed_in)
    assert 0 < zeroed < 37 * F
    dense = Engine(p, "silu")(x)
    assert ffn.counts.dense2 == pytest.approx(float((dense ** 2).sum()), rel=1e-12)
    assert ffn.counts.error2 == pytest.approx(float(((want - dense) ** 2).sum()), rel=1e-9)


@pytest.mark.parametrize("gated", [False, True])
def test_a_cut_that_zeroes_nothing_is_the_dense_ffn(gated):
    rng = np.random.default_rng(8)
    p = _weights(gated, rng)
    x = rng.normal(0, 1, (9, D))
    for cut in (Cut("topk", keep=F), Cut("cats", threshold=-1.0),
                Cut("teal", threshold=-1.0, down=-1.0)):
        ffn = SparseFfn(Engine(p, "gelu_tanh"), cut)
        out = np.empty((9, D))
        ffn(x, out)
        np.testing.assert_allclose(out, Engine(p, "gelu_tanh")(x), rtol=1e-12, atol=1e-13)
        assert ffn.counts.zeroed == ffn.counts.zeroed_in == 0 and ffn.counts.error2 < 1e-24


def test_keeping_no_unit_leaves_the_down_bias():
    rng = np.random.default_rng(9)
    p = _weights(True, rng)
    ffn = SparseFfn(Engine(p, "silu"), Cut("topk", keep=0))
    out = np.empty((4, D))
    ffn(rng.normal(0, 1, (4, D)), out)
    np.testing.assert_array_equal(out, np.broadcast_to(p.b2, (4, D)))
    assert ffn.counts.zeroed == 4 * F


def test_smallest_marks_each_rows_smallest_magnitudes():
    a = np.array([[3.0, -1.0, 0.5, -4.0], [0.0, 2.0, -2.5, 1.0]])
    np.testing.assert_array_equal(smallest(a, 2), [[False, True, True, False],
                                                    [True, False, False, True]])
    assert smallest(a, 4).sum() == 0 and smallest(a, 0).all()


def test_a_mixture_of_experts_cut_nowhere_is_the_dense_mixture():
    """Once refused; a cut below every |a| leaves each routed pair's units (its counts per
    pair), the output the engine's (the oracle of a real cut: tests/test_sparse_moe.py)."""
    from ffncli.compute.ffn import MoEWeights

    rng = np.random.default_rng(1)
    moe = MoEWeights(rng.normal(0, 1, (D, 3)), None,
                     tuple(_weights(True, rng) for _ in range(3)), 2)
    x = rng.normal(0, 1, (5, D))
    ffn, out = SparseFfn(Engine(moe, "silu"), Cut("cats", threshold=-1.0)), np.empty((5, D))
    ffn(x, out)
    np.testing.assert_allclose(out, Engine(moe, "silu")(x), rtol=1e-12, atol=1e-12)
    assert (ffn.counts.tokens, ffn.counts.zeroed) == (5 * 2, 0)


@pytest.mark.parametrize("gated", [False, True])
def test_a_value_at_the_threshold_is_zeroed(gated):
    """'at most the threshold': a calibrated threshold is often one of the values itself."""
    rng = np.random.default_rng(11)
    p = _weights(gated, rng)
    x = rng.normal(0, 1, (5, D))
    a, _ = gate_and_up(x, p, Engine(p, "silu"))  # as the cut computes it, to the last bit
    t = float(np.sort(np.abs(a).ravel())[40])  # the 41st smallest |a|, exactly
    ffn = SparseFfn(Engine(p, "silu"), Cut("cats", threshold=t))
    ffn(x, np.empty((5, D)))
    assert ffn.counts.zeroed == 41
    teal = SparseFfn(Engine(p, "silu"), Cut("teal", threshold=float(np.sort(np.abs(x).ravel())[9]),
                                            down=-1.0))
    teal(x, np.empty((5, D)))
    assert teal.counts.zeroed_in == 10
