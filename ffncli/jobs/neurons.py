"""``neurons``: what each FFN unit of a whole model does. Over a text: one walk of the model
(as ``relu-stats --text``), each selected layer's FFN the engine with a :class:`HiddenWatch`
that copies the asked units' hidden values of every batch (whole sequences) into one buffer and
feeds them to a :class:`~ffncli.analysis.neurons.UnitStats`. Weight-only: each unit's output
weights projected onto the vocabulary (:func:`~ffncli.analysis.neurons.project_vocabulary`).

Memory: one layer's weights and one batch of the walk (as every walk), plus that batch's
hidden values of the asked units (batch rows x units), plus what is kept of every asked unit of
every layer (docs/neurons.md gives the sum)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ffncli.analysis.neurons import (
    Asked,
    Projection,
    UnitStats,
    project_vocabulary,
    sample_positions,
)
from ffncli.base.validate import fail, whole
from ffncli.compute.engine import Hooks, Watch
from ffncli.compute.ffn import GatedWeights, MoEWeights
from ffncli.compute.forward.walk import Packing, walk_variants
from ffncli.errors import FfnError, InputError
from ffncli.formats.tokenizer import Tokenizer
from ffncli.jobs.progress import Callback
from ffncli.jobs.resolve import model_tokenizer

if TYPE_CHECKING:
    from ffncli.compute.engine import Engine
    from ffncli.compute.forward.layer import Block
    from ffncli.compute.forward.transformer import Transformer

FREQUENCY_RULE = "hidden value > 0 (the activated gate times the up projection when gated)"
PROJECTION_RULE = ("logits = W_U (g * w): down_proj's column w times the final norm's gain g, "
                   "through the unembedding W_U (the norm's centring and 1/RMS not applied)")


_UNITS = re.compile(r"([0-9]{1,18})(?:-([0-9]{1,18}))?")  # N or A-B, ASCII digits only


def parse_units(text: str | None, d_ff: int, where: str = "option --units") -> np.ndarray:
    """``--units``: ``all`` (the default), or a comma-separated list of ``N`` and ``A-B``
    (both included) of the ``d_ff`` units, in the order given, each once."""
    if text is None or text.strip() == "all":
        return np.arange(d_ff, dtype=np.int64)
    spans = [_UNITS.fullmatch(part.strip()) for part in text.split(",")]
    chosen: dict[int, None] = {}  # ordered, each once
    for m in spans:
        if m is None:
            raise fail(where, "all, or units N and ranges A-B separated by commas", text)
        a, b = int(m[1]), int(m[2] or m[1])
        if a > b:
            raise InputError(f"{where}: the range {m[0]} runs backwards; write {b}-{a}")
        if b >= d_ff:
            raise fail(where, f"units of 0-{d_ff - 1} (d_ff {d_ff:,})", text)
        chosen.update(dict.fromkeys(range(a, b + 1)))
    return np.array(list(chosen), dtype=np.int64)


def check_asked(top_k: int, window: int, samples: int, vocab_top: int) -> None:
    """The counts of ``neurons``, checked by the shared validators."""
    whole("option --top-k", top_k, 1)
    whole("option --window", window, 0, 1000)
    whole("option --samples", samples, 0, 100_000)
    whole("option --vocab-top", vocab_top, 1, 1000)


@dataclass(frozen=True)
class LayerNeurons:
    layer: int
    activation: str  # the layer's activation, "gated" when it is
    stats: UnitStats | None  # None: weight-only
    projection: Projection | None


@dataclass(frozen=True)
class NeuronsResult:
    model: str
    source: str | None  # the text (None: weight-only)
    tokens: int
    sequences: tuple[np.ndarray, ...]  # the text's ids, for the contexts
    lines: tuple[int, ...]
    units: np.ndarray
    asked: Asked
    layers: tuple[LayerNeurons, ...]
    pieces: Mapping[int, str] | None = None  # each token's text (None: ids alone)
    frequency_rule: str = FREQUENCY_RULE
    projection_rule: str = PROJECTION_RULE

    @property
    def starts(self) -> np.ndarray:
        """Where each sequence starts among the text's tokens."""
        return np.concatenate([[0], np.cumsum([len(s) for s in self.sequences])]).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# The walk: each selected layer's hidden values, batch by batch


def _dense(engine: Engine, layer: int) -> None:
    if isinstance(engine.weights, MoEWeights):
        raise InputError(f"layer {layer} is a mixture of experts: neurons reads the units of a "
                         "dense or gated FFN")


def _checked_units(units: np.ndarray, engine: Engine, layer: int) -> None:
    if units.size and int(units.max()) >= engine.d_ff:
        raise fail("option --units", f"units of 0-{engine.d_ff - 1} (layer {layer}'s d_ff)",
                   int(units.max()))


def describe(engine: Engine) -> str:
    gated = isinstance(engine.weights, GatedWeights)
    return f"{engine.act.name}{' (gated)' if gated else ''}"


class HiddenWatch(Watch):
    """One layer's FFN over the walk's batches (``watch(x, out)``): the engine's own, its
    chunks watched; each block's hidden values of the asked units copied (a gated FFN's
    after the engine's multiply, done here in the ``gate`` hook) into a buffer of the batch,
    which then goes to the layer's :class:`UnitStats` with the batch's sequence bounds."""

    def __init__(self, engine: Engine, stats: UnitStats, batches: Sequence[tuple[int, int]],
                 bounds: Callable[[int, int], list[tuple[int, int]]], first: Sequence[int]
                 ) -> None:
        self.engine, self.stats = engine, stats
        self.batches, self.bounds, self.first = batches, bounds, first
        self.every = stats.units.size == engine.d_ff and bool(
            (stats.units == np.arange(engine.d_ff)).all())
        self.gated = isinstance(engine.weights, GatedWeights)
        self.done = 0
        self.h = np.empty((0, stats.units.size), engine.dtype)
        self.row = 0

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        a, b = self.batches[self.done]
        self.done += 1
        if self.h.shape[0] < x.shape[0]:
            self.h = np.empty((x.shape[0], self.stats.units.size), self.engine.dtype)
        self.row = 0
        self.engine(x, out, watch=self)
        self.stats.update(self.h[:x.shape[0]], self.first[a], self.bounds(a, b))

    def hooks(self, x: np.ndarray) -> Hooks:
        base, h, units, every = self.row, self.h, self.stats.units, self.every
        self.row += x.shape[0]

        def take(lo: int, hi: int, a: np.ndarray, u: np.ndarray | None) -> None:
            h[base + lo:base + hi] = a if every else a[:, units]

        def gate(lo: int, hi: int, a: np.ndarray, u: np.ndarray) -> None:
            np.multiply(a, u, out=a)  # the engine's own product, then kept
            take(lo, hi, a, None)

        return Hooks(gate=gate) if self.gated else Hooks(after=take)


def text_stats(model: Transformer, ids: Sequence[np.ndarray], layers: Sequence[int],
               units: np.ndarray, asked: Asked, *, first: int = 0,
               batch_tokens: int | None = None, progress: Callback | None = None
               ) -> dict[int, tuple[str, UnitStats]]:
    """Each selected layer's (activation, :class:`UnitStats`) of ``units`` over the sequences
    ``ids``, whose first token is the text's ``first`` (a shard of a longer text: merge the
    shards' stats with :meth:`UnitStats.merge`). One walk of the model."""

    packing = Packing.of([len(s) for s in ids], batch_tokens)
    starts = [first + int(s) for s in packing.starts]
    found: dict[int, tuple[str, UnitStats]] = {}
    chosen = set(layers)

    def ffn(i: int, v: int, block: Block) -> HiddenWatch | None:
        if i not in chosen:  # a layer below the last asked: computed, not watched
            return None
        if i not in found:
            _dense(block.engine, i)
            _checked_units(units, block.engine, i)
            found[i] = describe(block.engine), UnitStats(units, asked)
        return HiddenWatch(block.engine, found[i][1], packing.batches, packing.bounds, starts)

    walk_variants(model, ids, 1, layers=layers, ffn=ffn, batch_tokens=batch_tokens,
                  progress=progress)
    return found


# ---------------------------------------------------------------------------------------------
# The vocabulary projection


def final_gain(model: Transformer) -> np.ndarray:
    """The gain (weight) of the final norm before the LM head: GPT-2's ln_f, a LLaMA-like
    model's norm (Gemma's 1 + weight, as it multiplies)."""
    gain = model.final_gain()
    if gain is None:
        raise InputError(f"{model.weights}: no final norm before an LM head")  # pragma: no cover
    return gain


def unembedding(model: Transformer) -> str:
    """The tensor of the LM head (its own, or the tied embeddings), or an error: an encoder
    has none."""
    stem = model.head_tensor() if model.has_head else None
    if stem is None:
        raise InputError(f"{model.weights}: an encoder has no unembedding (LM head) to project "
                         "the units' output weights onto; give --text or --ids for the "
                         "activation statistics alone, without --vocab")
    return stem


def projection(model: Transformer, engine: Engine, layer: int, units: np.ndarray, n: int
               ) -> Projection:
    """The vocabulary projection of ``units`` of one layer: down_proj's columns (rows of the
    engine's w2, stored [in, out]) through the final norm's gain and the unembedding, read
    VOCAB_ROWS rows at a time."""
    _dense(engine, layer)
    _checked_units(units, engine, layer)
    weights = engine.weights
    assert not isinstance(weights, MoEWeights)
    stem = unembedding(model)
    gain = final_gain(model)

    def rows(lo: int, hi: int) -> np.ndarray:
        return model.tensors.rows(stem, np.arange(lo, hi), model.dtype)

    return project_vocabulary(weights.w2[units], gain, rows, model.vocab, n)


# ---------------------------------------------------------------------------------------------
# The command's job


def neurons(model: Transformer, ids: Sequence[np.ndarray] | None, layers: Sequence[int],
            units: np.ndarray, asked: Asked, *, vocab_top: int | None,
            source: str | None = None, lines: Sequence[int] = (),
            batch_tokens: int | None = None, progress: Callback | None = None
            ) -> NeuronsResult:
    """``neurons``: with ``ids``, each selected layer's unit statistics over the text; with
    ``vocab_top``, each unit's ``vocab_top`` most promoted and suppressed tokens."""
    if vocab_top is not None:
        unembedding(model)  # an encoder refused before the walk
    stats = text_stats(model, ids, layers, units, asked, batch_tokens=batch_tokens,
                       progress=progress) if ids is not None else {}
    done = []
    for i in layers:
        engine = model.layer(i).engine if vocab_top is not None or i not in stats else None
        act = stats[i][0] if i in stats else describe(engine) if engine is not None else ""
        if engine is not None:
            _dense(engine, i)
            _checked_units(units, engine, i)
        proj = projection(model, engine, i, units, vocab_top) \
            if vocab_top is not None and engine is not None else None
        done.append(LayerNeurons(i, act, stats[i][1] if i in stats else None, proj))
        del engine
    seqs = tuple(np.asarray(s) for s in ids) if ids is not None else ()
    return NeuronsResult(str(model.weights), source, sum(len(s) for s in seqs), seqs,
                         tuple(lines), units, asked, tuple(done))


def with_pieces(result: NeuronsResult, model: Transformer, tokenizer: object | None = None
                ) -> NeuronsResult:
    """The result with the text of every token it shows (its contexts', its projection's),
    by ``tokenizer`` or the model's own; without one (``--ids`` and no tokenizer.json beside
    the weights), tokens are shown as ``#id``."""

    if not isinstance(tokenizer, Tokenizer):
        try:
            tokenizer = model_tokenizer(model)
        except FfnError:
            return result
    shown: set[int] = set()
    for s in result.sequences:
        shown.update(int(t) for t in np.unique(s))
    for layer in result.layers:
        if layer.projection is not None:
            p = layer.projection
            shown.update(int(t) for t in np.unique(np.concatenate([p.top_ids, p.bottom_ids])))
    ids = sorted(shown)
    return replace(result, pieces=dict(zip(ids, tokenizer.pieces(ids), strict=True)))


def asked_for(tokens: int, top_k: int, window: int, samples: int, seed: int) -> Asked:
    """What is kept of each unit of a text of ``tokens`` tokens."""
    return Asked(top_k, window, sample_positions(tokens, samples, seed))
