"""``neurons``' statistics against independent references: the moments against the direct
formulas on the whole array, the top-k against a sort of (value, index) pairs, the histogram
against a count by hand; on the tiny forward fixtures, every unit's statistics against the
hidden layer recomputed in the test from the recorded FFN inputs (``expected.npz``), and the
vocabulary projection against a direct NumPy logit-lens of the checkpoint's tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from ffncli.analysis.neurons import (
    EDGES,
    Asked,
    Moments,
    Top,
    UnitStats,
    merge_top,
    project_vocabulary,
    quantiles,
    sample_positions,
    top_rows,
)
from ffncli.compute.ffn import gelu_tanh, silu
from ffncli.jobs.choices import ModelChoice, TextChoice
from ffncli.jobs.neurons import neurons, text_stats
from ffncli.jobs.resolve import open_text
from ffncli.specs.spec import Overrides

FORWARD = Path(__file__).resolve().parent / "data" / "forward"


def direct_moments(x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Mean, population variance, skewness and excess kurtosis straight from the definitions."""
    x = x.astype(np.float64)
    mu = x.mean(axis=0)
    d = x - mu
    m2, m3, m4 = (d ** 2).mean(axis=0), (d ** 3).mean(axis=0), (d ** 4).mean(axis=0)
    return mu, m2, m3 / m2 ** 1.5, m4 / m2 ** 2 - 3


def reference_top(x: np.ndarray, k: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Each column's top k by a Python sort of (-value, index): (index, values), (k, units)."""
    idx, val = [], []
    for col in x.T:
        best = sorted(range(len(col)), key=lambda r: (-float(col[r]), r))[:k]
        idx.append([first + r for r in best])
        val.append([col[r] for r in best])
    return np.array(idx).T, np.array(val).T


# ---------------------------------------------------------------------------------------------
# Moments


@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_merged_moments_equal_the_direct_formulas_on_the_whole_array(offset):
    rng = np.random.default_rng(1)
    x = offset + rng.gamma(2.0, 1.0, size=(3001, 7)) * np.arange(1, 8)  # skewed, scaled
    m = Moments.empty(7)
    for lo, hi in [(0, 1), (1, 400), (400, 2999), (2999, 3001)]:  # uneven parts, one row too
        m = m.merge(Moments.of(x[lo:hi]))
    mu, var, skew, kurt = direct_moments(x)
    np.testing.assert_allclose(m.mean, mu, rtol=1e-12)
    np.testing.assert_allclose(m.variance(), var, rtol=1e-9)
    np.testing.assert_allclose(m.skewness(), skew, rtol=1e-7)
    np.testing.assert_allclose(m.kurtosis(), kurt, rtol=1e-7)


def test_a_constant_unit_has_no_skew_nor_kurtosis():
    m = Moments.empty(2).add(np.array([[1.0, 0.0], [1.0, 2.0]]))
    assert m.variance()[0] == 0 and np.isnan(m.skewness()[0]) and np.isnan(m.kurtosis()[0])
    assert m.skewness()[1] == 0 and m.kurtosis()[1] == pytest.approx(-2.0)


# ---------------------------------------------------------------------------------------------
# Top-k: exact, ties to the earlier token


def test_top_rows_breaks_ties_by_the_earlier_token_like_a_sort():
    rng = np.random.default_rng(2)
    x = np.maximum(rng.integers(-3, 3, size=(200, 9)), 0).astype(np.float32)  # many ties
    local, values = top_rows(x, 1000, 5)
    idx, val = reference_top(x, 5, 1000)
    np.testing.assert_array_equal(local + 1000, idx)
    np.testing.assert_array_equal(values, val)


@pytest.mark.parametrize("cuts", [[], [1], [7, 8, 50], list(range(1, 60, 3))])
def test_top_of_parts_merged_is_the_top_of_the_whole(cuts):
    rng = np.random.default_rng(3)
    x = np.round(rng.standard_normal((60, 4)), 1).astype(np.float32)  # ties across parts
    top = Top(np.empty((0, 4), np.float32), np.empty((0, 4), np.int64))
    for lo, hi in zip([0, *cuts], [*cuts, 60], strict=True):
        local, values = top_rows(x[lo:hi], lo, 6)
        top = merge_top(top, Top(values, local + lo), 6)
    idx, val = reference_top(x, 6)
    np.testing.assert_array_equal(top.index, idx)
    np.testing.assert_array_equal(top.values, val)


# ---------------------------------------------------------------------------------------------
# Histogram and quantiles


def test_histogram_counts_each_value_in_its_fixed_bin():
    rng = np.random.default_rng(4)
    h = (rng.standard_normal((500, 3)) * [1e-3, 1.0, 300.0]).astype(np.float32)
    h[:5] = 0.0
    s = UnitStats(np.arange(3), Asked(top_k=1, window=0))
    s.update(h[:123], 0, [(0, 123)])
    s.update(h[123:], 123, [(0, 377)])
    for j in range(3):
        expected = np.zeros(EDGES.size + 1, np.int64)
        for v in h[:, j]:
            expected[sum(1 for e in EDGES if e <= v)] += 1  # bin b: EDGES[b-1] <= v < EDGES[b]
        np.testing.assert_array_equal(s.hist[:, j], expected)
    assert s.hist.sum() == 1500 and s.active.tolist() == np.count_nonzero(h > 0, 0).tolist()


def test_a_quantile_from_the_histogram_lies_in_the_closed_bin_of_the_exact_one():
    rng = np.random.default_rng(5)
    h = rng.lognormal(0, 2, size=(4000, 3)) * [1, -1, 1]
    s = UnitStats(np.arange(3), Asked(top_k=1, window=0))
    s.update(h, 0, [(0, 4000)])
    probs = (0.01, 0.5, 0.9, 0.999)
    q = quantiles(s.hist, s.low, s.high, probs)
    for j in range(3):
        exact = np.quantile(h[:, j], probs, method="inverted_cdf")
        b = np.searchsorted(EDGES, exact, "right")  # the exact quantile's bin, closed
        lo = np.concatenate([[-np.inf], EDGES])[b]
        hi = np.concatenate([EDGES, [np.inf]])[b]
        assert ((lo <= q[j]) & (q[j] <= hi)).all(), (q[j], exact)


# ---------------------------------------------------------------------------------------------
# On the tiny fixtures: the hidden layer recomputed here, from the recorded FFN inputs


def _hidden(case: str, layer: int) -> np.ndarray:
    """Layer ``layer``'s hidden layer (tokens, d_ff) of every token, from the FFN input torch
    recorded and the checkpoint's own tensors, by the plain formulas (float64)."""
    x = np.load(FORWARD / case / "expected.npz")[f"layer{layer}"].astype(np.float64)
    w = {k: v.astype(np.float64) for k, v in load_file(FORWARD / case / "model.safetensors")
         .items()}
    if case == "gpt2":
        p = f"transformer.h.{layer}.mlp.c_fc"
        return gelu_tanh(x @ w[p + ".weight"] + w[p + ".bias"])  # Conv1D: [in, out]
    p = f"model.layers.{layer}.mlp."
    return silu(x @ w[p + "gate_proj.weight"].T) * (x @ w[p + "up_proj.weight"].T)


def _lengths(case: str) -> list[int]:
    return [len(line.split()) for line in (FORWARD / case / "ids.txt").read_text().splitlines()
            if line.strip()]


def _opened(case: str):
    d = FORWARD / case
    return open_text(ModelChoice(weights=d / "model.safetensors"), TextChoice(ids=d / "ids.txt"),
                     Overrides())


def _windows_of(h: np.ndarray, index: np.ndarray, unit: int, lengths: list[int], w: int
                ) -> np.ndarray:
    """The unit's activations around each token of ``index``, NaN past its sequence."""
    starts = np.concatenate([[0], np.cumsum(lengths)])
    out = np.full((len(index), 2 * w + 1), np.nan)
    for r, i in enumerate(index):
        s = np.searchsorted(starts, i, "right") - 1
        for o in range(-w, w + 1):
            if starts[s] <= i + o < starts[s + 1]:
                out[r, o + w] = h[i + o, unit]
    return out


@pytest.mark.parametrize("case", ["llama", "gpt2", "qwen2"])
def test_every_units_statistics_equal_the_hidden_layer_recomputed_from_the_recorded_inputs(case):
    forward, seqs = _opened(case)
    asked = Asked(top_k=4, window=2, sample=sample_positions(seqs.tokens, 3, 0))
    with forward:
        found = text_stats(forward, seqs.ids, [0, 1], np.arange(128), asked)
    lengths = _lengths(case)
    for layer in (0, 1):
        h = _hidden(case, layer)
        s = found[layer][1]
        mu, var, skew, kurt = direct_moments(h)
        assert s.count == h.shape[0] == sum(lengths)
        np.testing.assert_allclose(s.moments.mean, mu, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(s.moments.variance(), var, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(s.moments.skewness(), skew, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(s.moments.kurtosis(), kurt, rtol=1e-3, atol=1e-4)
        # > 0 counted alike, but for a value within float32's error of 0 (our forward's FFN
        # input is not torch's bit for bit): bracketed by the counts at -tol and +tol
        tol = 1e-5 * np.abs(h).max()
        assert (np.count_nonzero(h > tol, axis=0) <= s.active).all()
        assert (s.active <= np.count_nonzero(h > -tol, axis=0)).all()
        assert (s.active == np.count_nonzero(h > 0, axis=0)).mean() > 0.95
        idx, val = reference_top(h, 4)
        np.testing.assert_array_equal(s.top.index, idx)
        np.testing.assert_allclose(s.top.values, val, rtol=1e-4, atol=1e-5)
        for unit in (0, 63, 127):
            np.testing.assert_allclose(s.top.extra[:, unit],
                                       _windows_of(h, idx[:, unit], unit, lengths, 2),
                                       rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(s.sampled[:, unit],
                                       _windows_of(h, asked.sample, unit, lengths, 2),
                                       rtol=1e-4, atol=1e-5)


def test_a_gated_units_watch_sees_the_product_not_the_gate():
    """The hidden value of a gated FFN is act(x W) * (x V): the gate alone differs."""
    forward, seqs = _opened("llama")
    with forward:
        s = text_stats(forward, seqs.ids, [0], np.arange(128), Asked(top_k=1, window=0))[0][1]
    x = np.load(FORWARD / "llama" / "expected.npz")["layer0"].astype(np.float64)
    gate = silu(x @ load_file(FORWARD / "llama" / "model.safetensors")[
        "model.layers.0.mlp.gate_proj.weight"].T.astype(np.float64))
    assert not np.allclose(s.moments.mean, gate.mean(axis=0), rtol=1e-3)
    np.testing.assert_allclose(s.moments.mean, _hidden("llama", 0).mean(axis=0), rtol=1e-4,
                               atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Streaming: batches and shards give the records of one pass


def _same(a: UnitStats, b: UnitStats, rtol: float = 0.0) -> None:
    """Equal records: bit for bit (``rtol`` 0), or with the values within ``rtol`` (the
    forward's own bits differ with its batches) and the same tokens chosen."""
    assert a.count == b.count
    np.testing.assert_array_equal(a.top.index, b.top.index)
    np.testing.assert_array_equal(a.active, b.active)
    for x, y in ((a.top.values, b.top.values), (a.top.extra, b.top.extra),
                 (a.sampled, b.sampled), (a.low, b.low), (a.high, b.high)):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol)
    if rtol == 0:
        np.testing.assert_array_equal(a.hist, b.hist)
    for name in ("mean", "m2", "m3", "m4"):
        np.testing.assert_allclose(getattr(a.moments, name), getattr(b.moments, name),
                                   rtol=max(rtol, 1e-9), atol=max(rtol, 1e-9))


@pytest.mark.parametrize("cuts", [[1], [5, 9], list(range(1, 21))])
def test_the_same_hidden_values_in_any_batches_and_shards_give_the_same_records(cuts):
    rng = np.random.default_rng(7)
    h = np.round(rng.standard_normal((21, 5)), 1).astype(np.float32)  # ties across parts
    asked = Asked(top_k=4, window=2, sample=sample_positions(21, 6, 0))
    bounds = list(zip([0, *cuts], [*cuts, 21], strict=True))  # a sequence between cuts
    one = UnitStats(np.arange(5), asked)
    one.update(h, 0, bounds)
    parts = []
    for lo, hi in zip([0, *cuts], [*cuts, 21], strict=True):
        part = UnitStats(np.arange(5), asked)
        part.update(h[lo:hi], lo, [(0, hi - lo)])  # each part one sequence: windows cut there
        parts.append(part)
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    streamed = UnitStats(np.arange(5), asked)
    for lo, hi in zip([0, *cuts], [*cuts, 21], strict=True):
        streamed.update(h[lo:hi], lo, [(0, hi - lo)])
    _same(merged, streamed)
    _same(one, streamed)


def test_batches_and_shards_of_the_walk_give_the_records_of_one_pass():
    forward, seqs = _opened("gpt2")
    asked = Asked(top_k=3, window=1, sample=sample_positions(seqs.tokens, 5, 1))
    units = np.array([3, 0, 77, 127])
    with forward:
        found = text_stats(forward, seqs.ids, [1], units, asked)
        assert set(found) == {1}  # layer 0 computed, not watched
        whole = found[1][1]
        batched = text_stats(forward, seqs.ids, [1], units, asked, batch_tokens=8)[1][1]
        first = len(seqs.ids[0])  # shards as the batches of 8: the same bits
        a = text_stats(forward, seqs.ids[:1], [1], units, asked, batch_tokens=8)[1][1]
        b = text_stats(forward, seqs.ids[1:], [1], units, asked, first=first,
                       batch_tokens=8)[1][1]
    _same(batched, a.merge(b))
    _same(batched, b.merge(a))
    _same(whole, batched, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# The vocabulary projection: a direct logit-lens


@pytest.mark.parametrize("case", ["llama", "gpt2", "qwen2"])
def test_the_projection_equals_a_direct_logit_lens_of_down_projs_columns(case):
    w = load_file(FORWARD / case / "model.safetensors")
    if case == "gpt2":
        down = w["transformer.h.1.mlp.c_proj.weight"].T  # Conv1D (in, out): columns are rows
        gain, table = w["transformer.ln_f.weight"], w["transformer.wte.weight"]
    else:
        down = w["model.layers.1.mlp.down_proj.weight"]  # (d_model, d_ff)
        gain, table = w["model.norm.weight"], w["model.embed_tokens.weight"]  # tied
    logits = table.astype(np.float64) @ (gain[:, None] * down).astype(np.float64)  # (V, d_ff)
    forward, _ = _opened(case)
    units = np.array([0, 5, 127])
    with forward:
        result = neurons(forward, None, [1], units, Asked(), vocab_top=5)
    p = result.layers[0].projection
    assert p is not None
    for j, unit in enumerate(units):
        col = logits[:, unit]
        order = sorted(range(col.size), key=lambda t: (-col[t], t))
        np.testing.assert_array_equal(p.top_ids[j], order[:5])
        np.testing.assert_allclose(p.top_logits[j], col[order[:5]], rtol=1e-5)
        low = sorted(range(col.size), key=lambda t: (col[t], t))
        np.testing.assert_array_equal(p.bottom_ids[j], low[:5])
        np.testing.assert_allclose(p.bottom_logits[j], col[low[:5]], rtol=1e-5)


def test_the_projection_in_chunks_equals_it_at_once():
    rng = np.random.default_rng(6)
    table, cols, gain = rng.standard_normal((50, 8)), rng.standard_normal((3, 8)), \
        rng.uniform(0.5, 1.5, 8)
    whole = project_vocabulary(cols, gain, lambda lo, hi: table[lo:hi], 50, 4, chunk=50)
    parts = project_vocabulary(cols, gain, lambda lo, hi: table[lo:hi], 50, 4, chunk=7)
    np.testing.assert_array_equal(whole.top_ids, parts.top_ids)
    np.testing.assert_array_equal(whole.bottom_ids, parts.bottom_ids)
    direct = table @ (gain * cols).T
    np.testing.assert_allclose(parts.top_logits[:, 0], np.sort(direct, axis=0)[::-1][0])


def test_more_units_than_a_block_of_columns_keep_each_units_own_top_and_windows():
    from ffncli.analysis.neurons import COLUMNS

    rng = np.random.default_rng(8)
    units = 2 * COLUMNS + 7
    h = np.round(rng.standard_normal((40, units)), 1).astype(np.float32)
    s = UnitStats(np.arange(units), Asked(top_k=3, window=1))
    s.update(h, 0, [(0, 15), (15, 40)])
    idx, val = reference_top(h, 3)
    np.testing.assert_array_equal(s.top.index, idx)
    np.testing.assert_array_equal(s.top.values, val)
    for unit in (0, COLUMNS, units - 1):
        np.testing.assert_array_equal(s.top.extra[:, unit],
                                      _windows_of(h, idx[:, unit], unit, [15, 25], 1))
