"""``relu-stats --text``: one statistics accumulator per layer, fed by the walk as it goes, each
calibrated (the CATS threshold) on the text's first tokens whatever the batches."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ffncli.analysis.sparsity import (
    CALIBRATION_TOKENS,
    SMALL_OVERLAP,
    Rule,
    SparsityAccumulator,
    SparsityResult,
    calibrate_threshold,
    check_rule,
    describe_rule,
    mark_inactive,
    quantile,
)
from ffncli.compute.ffn import MoEWeights
from ffncli.compute.sparse import down
from ffncli.jobs.progress import Callback

if TYPE_CHECKING:
    from ffncli.compute.forward.families import Transformer
    from ffncli.compute.forward.layer import Block
    from ffncli.formats.text import Sequences

CATS_SHARE = 0.5  # the sweep's CATS column: the threshold that makes half the units inactive


# ---------------------------------------------------------------------------------------------
# relu-stats --text: one accumulator per layer, fed as the walk goes


@dataclass(frozen=True)
class LayerStats:
    layer: int
    stats: SparsityResult
    cats_threshold_50: float  # the |act| that half of the first tokens' units stay under


@dataclass(frozen=True)
class SweepResult:
    model: str
    source: str
    tokens: int
    sequences: int
    definition: str
    layers: tuple[LayerStats, ...]


class LayerSweep:
    """One layer's statistics on its real input, fed batch by batch in text order.

    A dense or gated FFN is counted as the walk computes it: the sweep is the layer's FFN
    (``sweep(x, out)``), each block's inactive mask taken from the engine's own pre-activation
    or activation on its threads (no second product of the gate), and the first tokens' |a|
    kept to calibrate. A mixture of experts is counted from its inputs (``update(x)``).

    The CATS column (and with ``target`` the rule's threshold) is calibrated on the text's
    first ``CALIBRATION_TOKENS`` tokens, whatever the batches; until the rule's threshold is
    known, those tokens' counting waits for it (a dense FFN computes them first, apart from
    the rest of their batch). ``calibration`` (cats, threshold) skips that, for a part of a
    text whose first tokens were calibrated elsewhere (a cluster's shards)."""

    def __init__(self, block: Block, tokens: int, threshold: float | None,
                 target: float | None,
                 calibration: tuple[float, float | None] | None = None) -> None:
        self.engine, self.tokens = block.engine, tokens
        self.threshold, self.target = threshold, target
        self.fused = not isinstance(self.engine.weights, MoEWeights)
        self.held: list[np.ndarray] = []  # the first tokens: |a| (fused) or the FFN inputs
        self.held_rows = 0
        self.left = 0 if calibration is not None else min(CALIBRATION_TOKENS, tokens)
        self.cats = float("nan")
        self.acc: SparsityAccumulator | None = None
        if calibration is not None:
            self._start(*calibration)
        elif self.fused and target is None:  # the counting needs no calibration
            self._start(float("nan"), threshold)

    def calibrate(self, sample: np.ndarray) -> tuple[float, float | None]:
        """(the CATS threshold at 50%, the rule's threshold) on these tokens."""
        sample = np.ascontiguousarray(sample[:CALIBRATION_TOKENS], dtype=self.engine.dtype)
        cats = calibrate_threshold(self.engine, sample, CATS_SHARE)
        threshold = self.threshold if self.target is None else \
            calibrate_threshold(self.engine, sample, self.target)
        return cats, threshold

    def _start(self, cats: float, threshold: float | None) -> None:
        self.cats = cats
        rule = Rule(threshold, describe_rule(self.engine.act.name, threshold, self.target))
        self.acc = SparsityAccumulator(self.engine, rule,
                                       keep_masks=self.tokens <= SMALL_OVERLAP)

    # -- a dense or gated FFN: counted as it is computed ----------------------------------

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        """The layer's FFN of ``x`` into ``out``, counting its hidden units."""
        e, start = self.engine, 0
        while start < x.shape[0]:
            end = min(x.shape[0], start + e.chunk_tokens)
            if self.acc is None:  # the rule waits for its threshold: the first tokens first
                end = min(end, start + self.left)
            self._piece(np.ascontiguousarray(x[start:end], dtype=e.dtype), out[start:end])
            start = end

    def _piece(self, x: np.ndarray, out: np.ndarray) -> None:
        e, acc = self.engine, self.acc
        p = e.weights
        assert not isinstance(p, MoEWeights)
        keep = min(self.left, x.shape[0])
        mags = np.empty((keep, e.d_ff), dtype=e.dtype) if keep else None
        mask = np.empty((x.shape[0], e.d_ff), dtype=bool) if acc is not None else None
        default = acc is not None and acc.rule.threshold is None  # counted before act

        def before(lo: int, hi: int, pre: np.ndarray, u: np.ndarray | None) -> None:
            assert acc is not None and mask is not None
            mark_inactive(acc.rule, pre, mask[lo:hi])

        def after(lo: int, hi: int, a: np.ndarray, u: np.ndarray | None) -> None:
            if mags is not None and lo < keep:
                np.abs(a[:min(hi, keep) - lo], out=mags[lo:min(hi, keep)])
            if acc is not None and mask is not None and not default:
                mark_inactive(acc.rule, a, mask[lo:hi])

        down(e.hidden(x, after, before if default else None), p, out)
        if mags is not None:
            self.held.append(mags)
            self.left -= keep
        if acc is not None and mask is not None:
            acc.count(mask)
        if self.held and not self.left:
            self._calibrated()

    def _calibrated(self) -> None:
        """The first tokens are in: the CATS column and the rule's threshold from their |a|
        (numpy's default quantile), and their counting if it waited."""
        held, self.held = self.held, []
        if len(held) == 1 and self.acc is not None:  # no counting waits: reorder them
            values = held[0]
        else:
            values = np.concatenate(held) if held else np.zeros(1, self.engine.dtype)
        shares = [CATS_SHARE] if self.target is None else [CATS_SHARE, self.target]
        found = [quantile(values, q) for q in shares]  # as calibrate_threshold
        if self.acc is not None:
            self.cats = found[0]
            return
        self._start(found[0], found[-1])
        assert self.acc is not None
        for mags in held:  # |a|, so the rule's |act| <= T as the walk's blocks would mark it
            self.acc.count(mark_inactive(self.acc.rule, mags, np.empty(mags.shape, bool)))

    # -- a mixture of experts: counted from its inputs ------------------------------------

    def update(self, x: np.ndarray) -> None:
        if self.acc is None:
            self.held.append(np.array(x, dtype=self.engine.dtype))  # the walk reuses x
            self.held_rows += x.shape[0]
            if self.held_rows >= min(CALIBRATION_TOKENS, self.tokens):
                self._release()
            return
        rows = self.engine.chunk_tokens
        for start in range(0, x.shape[0], rows):
            self.acc.update(x[start:start + rows])

    def _release(self) -> None:
        held = np.concatenate(self.held) if self.held else \
            np.empty((0, self.engine.d_model), self.engine.dtype)
        self.held, self.held_rows = [], 0
        self._start(*self.calibrate(held))
        self.update(held)

    def result(self, layer: int) -> LayerStats:
        if self.fused and (self.held or self.acc is None):
            self._calibrated()  # a text shorter than the calibration
        elif self.acc is None:
            self._release()
        assert self.acc is not None
        return LayerStats(layer, self.acc.result(), self.cats)


def count_walk(model: Transformer, ids: Sequence[np.ndarray], layers: Sequence[int],
               open_layer: Callable[[int, Block], LayerSweep],
               close_layer: Callable[[int, LayerSweep], None], *,
               batch_tokens: int | None = None, progress: Callback | None = None) -> None:
    """One walk that counts every selected layer: ``open_layer(i, block)`` makes layer i's
    sweep when the walk comes to it (a dense FFN's sweep is then the layer's FFN), and
    ``close_layer(i, sweep)`` is called when the walk has left it (its weights can go)."""
    from ffncli.compute.forward.walk import walk_variants

    chosen, current = set(layers), dict[int, LayerSweep]()

    def close() -> None:
        for i, s in list(current.items()):
            del current[i]
            close_layer(i, s)

    def ffn(i: int, v: int, block: Block) -> LayerSweep | None:
        if i not in chosen:
            return None
        close()
        s = current[i] = open_layer(i, block)
        return s if s.fused else None

    def visit(i: int, v: int, block: Block, x: np.ndarray) -> None:
        if not current[i].fused:
            current[i].update(x)

    walk_variants(model, ids, 1, visit, layers=layers, ffn=ffn, batch_tokens=batch_tokens,
                  progress=progress)
    close()


def sweep(model: Transformer, sequences: Sequences, layers: Sequence[int], *,
          threshold: float | None = None, target_sparsity: float | None = None,
          thresholds: Mapping[int, float] | None = None,
          batch_tokens: int | None = None, progress: Callback | None = None) -> SweepResult:
    """The sparsity statistics of every selected layer's FFN on its real input; with
    ``thresholds``, each layer's own threshold (a thresholds file's)."""
    check_rule(threshold, target_sparsity)
    if thresholds is not None and (threshold is not None or target_sparsity is not None):
        raise ValueError("per-layer thresholds replace threshold and target_sparsity")
    done: dict[int, LayerStats] = {}

    def open_layer(layer: int, block: Block) -> LayerSweep:
        cut = thresholds[layer] if thresholds is not None else threshold
        return LayerSweep(block, sequences.tokens, cut, target_sparsity)

    count_walk(model, sequences.ids, layers, open_layer,
               lambda layer, s: done.__setitem__(layer, s.result(layer)),
               batch_tokens=batch_tokens, progress=progress)
    results = tuple(done[i] for i in layers)
    definition = results[0].stats.rule.description if results else ""
    return SweepResult(str(model.weights), sequences.source, sequences.tokens, len(sequences.ids),
                       definition, results)
