"""The engine (compute/engine.py): the default chunk of tokens and the cache blocks of the
activation. Its outputs are checked against the plain formulas in tests/test_ffn.py."""

from __future__ import annotations

import numpy as np
import pytest

from ffncli.compute import engine as E
from ffncli.compute import ffn as F
from ffncli.compute.engine import Engine


@pytest.mark.parametrize("d_ff,tokens", [(1, 8192), (1024, 8192), (2048, 4096), (3072, 2730),
                                         (32768, 256), (1 << 20, 256)])
def test_default_chunk_holds_about_8m_hidden_values_within_256_to_8192_tokens(d_ff, tokens):
    assert E.default_chunk_tokens(d_ff) == tokens  # min(8192, max(256, 2**23 // d_ff))
    p = F.DenseWeights(np.zeros((2, d_ff), np.float32), None, np.zeros((d_ff, 2), np.float32),
                       None)
    assert Engine(p, "relu").chunk_tokens == tokens


@pytest.mark.parametrize("rows,cols,itemsize", [(203, 4096, 4), (203, 4096, 8), (7, 16, 4),
                                                (1000, 100_000, 8), (1, 3, 4)])
def test_blocks_cover_the_rows_once_and_fit_the_cache(rows, cols, itemsize):
    blocks = E._blocks(rows, cols, itemsize)
    assert [lo for lo, _ in blocks] == [0] + [hi for _, hi in blocks[:-1]]  # contiguous
    assert blocks[-1][1] == rows
    row_bytes = cols * itemsize
    for lo, hi in blocks:  # each block fits in 512 KiB, unless one row alone does not
        assert (hi - lo) * row_bytes <= E.BLOCK_BYTES or hi - lo == 1
    for lo, hi in blocks[:-1]:  # and is as large as fits: one row more would not
        assert (hi - lo + 1) * row_bytes > E.BLOCK_BYTES


@pytest.mark.parametrize("gated", [False, True])
def test_hidden_shows_each_block_its_pre_activation_then_its_activation(gated):
    """``before`` sees x W + b (the gate's, with a gate) and ``visit`` act of it, block by
    block over every row once, as the plain formulas compute them; the hidden layer is then
    act(x W + b) (times the up projection)."""
    rng = np.random.default_rng(3)
    d, f, n = 8, 300, 700  # 300 float32 columns: blocks of 436 rows, so two blocks
    w, b = rng.standard_normal((d, f), np.float32), rng.standard_normal(f, np.float32)
    w2 = rng.standard_normal((f, d), np.float32)
    p = F.GatedWeights(w, b, rng.standard_normal((d, f), np.float32), None, w2, None) \
        if gated else F.DenseWeights(w, b, w2, None)
    x = rng.standard_normal((n, d), np.float32)
    pre, act = np.full((n, f), np.nan, np.float32), np.full((n, f), np.nan, np.float32)
    seen: list[tuple[int, int]] = []

    def before(lo, hi, a, u):
        assert u is None
        pre[lo:hi] = a
        seen.append((lo, hi))

    def after(lo, hi, a, u):
        act[lo:hi] = a

    h = Engine(p, "silu").hidden(x, E.Hooks(before=before, after=after))
    assert sorted(seen) == E._blocks(n, f, 4) and len(seen) == 2
    np.testing.assert_allclose(pre, F.pre_activation(x, p), rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(act, F.silu(F.pre_activation(x, p)), rtol=1e-5, atol=1e-5)
    up = x @ p.v if gated else 1
    np.testing.assert_allclose(h, F.silu(F.pre_activation(x, p)) * up, rtol=1e-5, atol=1e-4)


def test_a_gated_hidden_layer_takes_the_callers_gate_and_up_buffer():
    """``gate`` replaces a *= u block by block, ``up`` receives the up projection: a gate that
    writes a + u gives that, and the caller's buffer holds x V + c."""
    rng = np.random.default_rng(4)
    d, f, n = 8, 300, 700
    p = F.GatedWeights(rng.standard_normal((d, f), np.float32), None,
                       rng.standard_normal((d, f), np.float32),
                       rng.standard_normal(f, np.float32),
                       rng.standard_normal((f, d), np.float32), None)
    x = rng.standard_normal((n, d), np.float32)
    seen: list[tuple[int, int]] = []

    def gate(lo, hi, a, u):
        np.add(a, u, out=a)
        seen.append((lo, hi))

    up = np.full((n, f), np.nan, np.float32)
    h = Engine(p, "silu").hidden(x, E.Hooks(gate=gate, up=up))
    assert sorted(seen) == E._blocks(n, f, 4)
    np.testing.assert_allclose(up, x @ p.v + p.c, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, F.silu(F.pre_activation(x, p)) + up, rtol=1e-5, atol=1e-5)


def test_a_watch_sees_the_plain_calls_chunks_in_order_and_changes_no_bit():
    """``engine(x, out, watch=...)`` computes the chunks a plain call computes (chunk_tokens
    rows each, in order): each chunk's hidden layer goes through the watch's hooks, its output
    to ``seen``, and the output is the plain call's, bit for bit."""
    rng = np.random.default_rng(5)
    d, f, n = 8, 64, 50
    p = F.DenseWeights(rng.standard_normal((d, f), np.float32), rng.standard_normal(f, np.float32),
                       rng.standard_normal((f, d), np.float32), rng.standard_normal(d, np.float32))
    x = rng.standard_normal((n, d), np.float32)
    engine = Engine(p, "relu", chunk_tokens=16)

    class Seeing(E.Watch):
        def __init__(self) -> None:
            self.rows: list[int] = []
            self.hidden: list[np.ndarray] = []
            self.outs: list[np.ndarray] = []

        def hooks(self, x: np.ndarray) -> E.Hooks:
            self.rows.append(x.shape[0])
            a_seen = np.full((x.shape[0], f), np.nan, np.float32)
            self.hidden.append(a_seen)
            return E.Hooks(after=lambda lo, hi, a, u: a_seen.__setitem__(slice(lo, hi), a))

        def seen(self, x: np.ndarray, out: np.ndarray) -> None:
            self.outs.append(out.copy())

    watch = Seeing()
    plain, watched = engine(x), engine(x, watch=watch)
    assert watch.rows == [16, 16, 16, 2]
    assert np.array_equal(watched, plain)
    assert np.array_equal(np.concatenate(watch.outs), plain)
    np.testing.assert_allclose(np.concatenate(watch.hidden),
                               np.maximum(F.pre_activation(x, p), 0), rtol=1e-6, atol=1e-5)


def test_a_mixture_of_experts_takes_no_watch():
    rng = np.random.default_rng(6)
    d, f = 4, 8
    experts = tuple(F.DenseWeights(rng.standard_normal((d, f), np.float32), None,
                                   rng.standard_normal((f, d), np.float32), None)
                    for _ in range(2))
    p = F.MoEWeights(rng.standard_normal((d, 2), np.float32), None, experts, 1)
    with pytest.raises(ValueError, match="a mixture of experts has a hidden layer per expert"):
        Engine(p, "relu")(rng.standard_normal((3, d), np.float32), watch=E.Watch())
