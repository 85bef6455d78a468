"""``--stride``: Hugging Face's "perplexity of fixed-length models" recipe to its end, against
a second implementation of it: the recipe's loop written out here, each of its windows run
alone through the whole-model forward (``hidden_states``), its logits in float64, and the
loss summed over the labels the recipe leaves unmasked, less the first (the model's shift).
On a tiny LLaMA checkpoint and on SmolLM2-135M, whose last window is shorter than --ctx."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers.installed_models import smollm2

from ffncli.analysis.perplexity import Protocol
from ffncli.compute.forward.walk import hidden_states
from ffncli.formats.text import Sequences
from ffncli.jobs.choices import ModelChoice
from ffncli.jobs.perplexity import perplexity
from ffncli.jobs.resolve import load_document, open_forward
from ffncli.specs.spec import Overrides

pytestmark = pytest.mark.slow  # among the slowest (docs/development.md)

ROOT = Path(__file__).parents[1]
FORWARD = ROOT / "tests" / "data" / "forward"


def recipe_nll(model, ids: np.ndarray, max_length: int, stride: int) -> tuple[float, int, int]:
    """(NLL summed, tokens scored, windows) of Hugging Face's loop, window by window."""
    head = model.head()
    seq_len, prev_end_loc, nll, scored, windows = len(ids), 0, 0.0, 0, 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc
        window = ids[begin_loc:end_loc]
        labels = window.copy()
        labels[:-trg_len] = -100
        _, final = hidden_states(model, [window], [])
        logits = head(final).astype(np.float64)  # (len, vocab)
        logp = logits - logits.max(axis=1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
        shifted = labels[1:]  # position j predicts label j + 1
        for j in np.flatnonzero(shifted != -100):
            nll -= logp[j, shifted[j]]
            scored += 1
        windows += 1
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    return nll, scored, windows


def _check(model, doc: Sequences, ctx: int, stride: int) -> int:
    """ffncli's perplexity under --ctx, --stride is the recipe's; the tokens it scored."""
    nll, scored, windows = recipe_nll(model, doc.ids[0], ctx, stride)
    r = perplexity(model, doc, Protocol(ctx, stride))
    assert (r.tokens_scored, r.windows, r.dropped) == (scored, windows, 0)
    assert r.perplexity == pytest.approx(math.exp(nll / scored), rel=1e-6)
    return r.tokens_scored


@pytest.mark.parametrize("stride", [12, 24])
def test_a_stride_is_the_recipe_on_a_tiny_llama(stride):
    ids = np.random.default_rng(3).integers(0, 128, 203)  # 203 - 32: no multiple of 12, 24
    doc = Sequences((ids,), (1,), "ids", "0" * 64)
    with open_forward(ModelChoice(weights=FORWARD / "llama" / "model.safetensors"),
                      Overrides()) as m:
        _check(m, doc, 32, stride)


def test_a_stride_is_the_recipe_on_smollm2(tmp_path):
    """The opening of Alice (793 tokens), ctx 128, stride 64: 12 windows, the last ids
    704..792 (89 ids) scoring its last 25 targets, which ffncli used to drop (767 scored,
    now 792: every token but the first)."""
    text = tmp_path / "opening.txt"
    lines = (ROOT / "examples" / "texts" / "alice_chapter1.txt").read_text().splitlines(True)
    text.write_text("".join(lines[:8]))
    with open_forward(ModelChoice(weights=smollm2()), Overrides()) as m:
        doc, bos = load_document(text, None, m)
        assert len(doc.ids[0]) == 793 and bos is None
        assert _check(m, doc, 128, 64) == 792
