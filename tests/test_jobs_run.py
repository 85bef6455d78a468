"""`run` as a library call (jobs/run.py, run_ffn): the inactive counts, the residual and the
printed head rows, for inputs held whole and inputs streamed chunk by chunk, against the plain
formula."""

from __future__ import annotations

import numpy as np
import pytest

from ffncli.compute import ffn as F
from ffncli.compute.build import Model, build_model
from ffncli.compute.engine import Engine
from ffncli.formats.tokens import from_array
from ffncli.jobs.run import SMALL_TOKENS, run_ffn
from ffncli.specs.spec import FfnSpec, ModelSpec, load_preset

F32 = np.dtype(np.float32)


def _toy(chunk_tokens: int | None = None) -> Model:
    return build_model(load_preset("toy"), None, 0, F32, chunk_tokens=chunk_tokens)


def _tokens(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 4))


def test_inactive_counts_units_at_exactly_zero():
    """d_model 1, W1 = [1, -1, 0], W2 = ones: pre-activations x, -x, 0 (the lesson's rule:
    at or below zero is inactive)."""
    p = F.DenseWeights(np.array([[1.0, -1.0, 0.0]], F32), None, np.ones((3, 1), F32), None)
    model = Model(ModelSpec(name="hand", d_model=1, ffn=FfnSpec(d_ff=3)), Engine(p, "relu"), "hand")
    r = run_ffn(model, from_array(np.array([[2.0], [0.0], [-1.0]])))
    assert r.inactive_per_token == [2, 3, 2]
    assert r.head[:, 0].tolist() == [2.0, 0.0, 1.0]  # relu(x) + relu(-x) + relu(0)


@pytest.mark.parametrize("n", [5, SMALL_TOKENS + 76])  # held whole, and streamed
def test_residual_adds_the_input(n, tmp_path):
    model = _toy(chunk_tokens=256)
    x = _tokens(n)
    r = run_ffn(model, from_array(x), residual=True, out=tmp_path / "y.npy")
    x32 = x.astype(np.float32)
    expected = F.ffn(x32, model.engine.weights, "relu") + x32
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r.head, expected[:r.head.shape[0]], rtol=1e-5, atol=1e-6)
    assert r.residual


def test_streamed_head_is_the_first_rows_across_chunk_boundaries():
    model = _toy(chunk_tokens=3)  # the first 8 rows span three chunks
    x = _tokens(SMALL_TOKENS + 1, seed=1)
    r = run_ffn(model, from_array(x), head_rows=8)
    expected = F.ffn(x[:8].astype(np.float32), model.engine.weights, "relu")
    assert r.head.shape == (8, 4)
    np.testing.assert_allclose(r.head, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n,small", [(SMALL_TOKENS, True), (SMALL_TOKENS + 1, False)])
def test_up_to_1024_tokens_are_held_whole(n, small):
    """Up to SMALL_TOKENS: every output row and the inactive counts; above: 8 rows, streamed."""
    model = _toy()
    x = _tokens(n, seed=2)
    r = run_ffn(model, from_array(x))
    p = model.engine.weights
    if small:
        x32 = x.astype(np.float32)
        assert r.inactive_per_token == ((x32 @ p.w1 + p.b1) <= 0).sum(axis=1).tolist()
        assert r.head.shape == (n, 4)
    else:
        assert r.inactive_per_token is None
        assert r.head.shape == (8, 4)


def test_streamed_moe_capacity_is_that_of_the_whole_input(tmp_path):
    """A capped MoE streamed in chunks of 256: each expert takes ceil(0.5 * 1100 / 4) = 138
    tokens of the whole input, in token order, as the plain formula on all of it does (not
    ceil(0.5 * 256 / 4) = 32 per chunk)."""
    ffn = FfnSpec(d_ff=8, activation="relu", experts=4, top_k=1, capacity_factor=0.5)
    spec = ModelSpec(name="capped", d_model=4, ffn=ffn)
    model = build_model(spec, None, 0, np.dtype(np.float64), chunk_tokens=256)
    x = _tokens(SMALL_TOKENS + 76, seed=3)
    assert F.capacity(model.engine.weights, x.shape[0]) == 138
    run_ffn(model, from_array(x), out=tmp_path / "y.npy")
    expected = F.moe_ffn(x, model.engine.weights, "relu")
    assert (np.abs(expected).sum(axis=1) == 0).sum() > 0  # tokens are dropped
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-12, atol=1e-12)
