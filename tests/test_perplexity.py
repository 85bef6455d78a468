"""Perplexity's protocols and scores (analysis/perplexity.py): which windows run and which
positions each scores under llama.cpp's protocol, --score all and Hugging Face's stride; the
NLL, KL and top-1 agreement of a batch of final states; the cosines of an encoder's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ffncli.analysis import perplexity as P
from ffncli.compute.forward.layer import Head
from ffncli.errors import InputError

IDS = np.arange(100, 230)  # 130 ids


def _predicted(w: P.Windows, starts: list[int]) -> list[int]:
    """The document positions of the tokens each window's scored positions predict."""
    out = []
    for start, ids, first in zip(starts, w.ids, w.first, strict=True):
        out += [start + j + 1 for j in range(first, len(ids) - 1)]
    return out


def test_llama_cpp_scores_the_second_half_of_each_chunk_with_bos_first():
    w = P.windows(IDS, P.Protocol(32), bos=1)
    assert len(w.ids) == 4 and w.dropped == 130 - 128 and w.first == (16,) * 4
    for c, chunk in enumerate(w.ids):  # the first id of each chunk is the BOS
        assert chunk[0] == 1 and list(chunk[1:]) == list(IDS[32 * c + 1:32 * (c + 1)])
    assert w.scored == 4 * (32 - 1 - 16)
    assert _predicted(w, [0, 32, 64, 96]) == [s + j for s in (0, 32, 64, 96)
                                               for j in range(17, 32)]


def test_score_all_scores_every_token_but_the_first_of_each_chunk():
    w = P.windows(IDS, P.Protocol(32, score="all"), bos=None)
    assert w.first == (0,) * 4 and w.scored == 4 * 31
    assert [list(c) for c in w.ids] == [list(IDS[i:i + 32]) for i in (0, 32, 64, 96)]


def _hf_recipe(seq_len: int, max_length: int, stride: int) -> list[tuple[int, int, int]]:
    """Hugging Face's "perplexity of fixed-length models" loop, line for line: (begin_loc,
    end_loc, trg_len) of each window it runs. The oracle of the stride's windows."""
    out, prev_end_loc = [], 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc  # may be different from stride on last loop
        out.append((begin_loc, end_loc, trg_len))
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    return out


def _recipe_scored(seq_len: int, max_length: int, stride: int) -> list[int]:
    """The document positions of the tokens the recipe's loss scores: of each window's
    labels, the last trg_len not masked, less the first label, which the model's shift
    drops."""
    out = []
    for begin, end, trg in _hf_recipe(seq_len, max_length, stride):
        out += [p for p in range(end - trg, end) if p > begin]
    return out


@pytest.mark.parametrize("n, stride", [(32, 1), (32, 7), (32, 16), (32, 32), (32, 17),
                                       (33, 32), (65, 65), (64, 9)])
def test_a_stride_runs_hugging_faces_recipe_exactly(n, stride):
    """Every window of the recipe's loop (130 ids), the last one ending at the text's end
    (shorter than --ctx where 130 - ctx is no multiple of the stride: it was dropped), each
    scoring the tokens the recipe's loss scores: every token but the first, once, where
    windows overlap."""
    w = P.windows(IDS, P.Protocol(n, stride=stride), bos=1)  # no BOS under the stride
    recipe = _hf_recipe(130, n, stride)
    assert [list(x) for x in w.ids] == [list(IDS[b:e]) for b, e, _ in recipe]
    assert _predicted(w, [b for b, _, _ in recipe]) == _recipe_scored(130, n, stride)
    assert w.dropped == 0 and w.scored == len(_recipe_scored(130, n, stride))
    if stride < n:  # windows overlap: every token but the first
        assert w.scored == 129
    else:  # side by side: each window's first token predicted by none
        assert w.scored == 130 - len(recipe)


def test_a_strides_last_window_is_the_short_one_llama_cpp_drops():
    """ctx 32, stride 16, 130 ids: llama.cpp's chunks stop at 128; the recipe's last window
    is ids[112:130], 18 ids, scoring its last 2 targets (positions 15 and 16)."""
    w = P.windows(IDS, P.Protocol(32, stride=16), bos=None)
    assert len(w.ids) == 8 and list(w.ids[-1]) == list(IDS[112:130])
    assert w.first[-1] == 15 and w.scored == 31 + 6 * 16 + 2
    assert P.windows(IDS, P.Protocol(32), bos=None).dropped == 2


@pytest.mark.parametrize("protocol, match", [
    (P.Protocol(1), r"^ctx: expected a whole number >= 2, got 1$"),
    (P.Protocol(65), r"^ctx: 65 is more than the model's 64 positions$"),
    (P.Protocol(2), r"^ctx: 2 scores no token under llama.cpp's protocol \(positions "
                    r"1..0\); expected a whole number >= 3, or score=all$"),
    (P.Protocol(32, stride=33), r"^stride: expected a whole number from 1 to ctx \(32\), "
                                r"got 33$"),
    (P.Protocol(32, stride=0), r"^stride: .* got 0$"),
    (P.Protocol(32, score="most"), r"^score: expected half or all, got 'most'$"),
    (P.Protocol(32, stride=8, score="all"), r"^stride and score=all: give one"),
])  # the library's words (a command's: tests/test_option_words.py)
def test_bad_protocols_are_refused(protocol, match):
    with pytest.raises(InputError, match=match):
        P.check_protocol(protocol, 64)


def test_a_text_shorter_than_two_chunks_is_refused():
    with pytest.raises(InputError, match=r"the text has 63 tokens; perplexity with ctx=32 "
                                         r"needs at least 64 \(two chunks\)"):
        P.windows(IDS[:63], P.Protocol(32), None)


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-15), (np.float32, 1e-7)])
def test_log_softmax_is_exact_for_large_logits(dtype, rtol):
    z = np.array([[1000.0, 1001.0, 999.0], [0.0, 0.0, 0.0]], dtype=dtype)
    got = P.log_softmax(z)
    assert got.dtype == dtype
    np.testing.assert_allclose(np.exp(got.astype(np.float64)).sum(axis=1), 1.0, rtol=rtol)
    np.testing.assert_allclose(got[1], math.log(1 / 3), rtol=rtol)
    e = np.exp([-1.0, 0.0, -2.0])
    np.testing.assert_allclose(got[0], np.log(e / e.sum()), rtol=rtol)


def _head_and_states(rows: int = 11):
    rng = np.random.default_rng(3)
    return Head(rng.normal(0, 1, (50, 8))), rng.normal(0, 1, (rows, 8))


def test_nll_is_the_mean_negative_log_probability_of_the_targets(monkeypatch):
    head, states = _head_and_states()
    targets = np.arange(11) * 4 % 50
    monkeypatch.setattr(P, "LOGIT_ELEMENTS", 150)  # blocks of 3 rows
    nll = P.Nll()
    P.score(head, states, targets, nll)
    logits = states @ head.weight.T
    want = [np.log(np.exp(row).sum()) - row[t] for row, t in zip(logits, targets, strict=True)]
    assert nll.tokens == 11 and nll.mean == pytest.approx(np.mean(want), rel=1e-12)
    assert nll.perplexity == pytest.approx(math.exp(np.mean(want)), rel=1e-12)


def test_kl_and_top1_against_the_dense_predictions():
    head, dense = _head_and_states()
    targets = np.zeros(11, dtype=np.int64)
    same, other = P.Agreement(), P.Agreement()
    noisy = dense + np.random.default_rng(4).normal(0, 0.5, dense.shape)
    P.score(head, dense, targets, P.Nll(), [dense, noisy], [same, other])
    assert same.kl_mean == pytest.approx(0.0, abs=1e-12) and same.top1 == 1.0
    ld, ls = P.log_softmax(dense @ head.weight.T), P.log_softmax(noisy @ head.weight.T)
    want_kl = (np.exp(ld) * (ld - ls)).sum(axis=1).mean()
    assert other.kl_mean == pytest.approx(want_kl, rel=1e-12) and other.kl_mean > 0
    assert other.top1 == np.mean(ld.argmax(1) == ls.argmax(1))


def test_soft_capping_bounds_the_logits():
    head = Head(np.full((3, 2), 100.0), cap=30.0)
    logits = head(np.ones((1, 2)))
    np.testing.assert_allclose(logits, 30 * np.tanh(200 / 30))


def test_cosines_of_tokens_and_of_mean_pooled_lines():
    rng = np.random.default_rng(5)
    a = rng.normal(0, 1, (7, 4))
    b = a.copy()
    b[5:] *= -1  # the second line's tokens point the other way
    c = P.Cosines()
    P.add_cosines(a, b, [(0, 5), (5, 7)], c)
    assert c.token_mean == pytest.approx(3 / 7) and c.tokens == 7 and c.sentences == 2
    assert c.sentence_mean == pytest.approx(0.0) and c.worst_sentence == pytest.approx(-1.0)
