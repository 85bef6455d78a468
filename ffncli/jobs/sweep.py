"""``relu-stats --text``: one statistics accumulator per layer, fed by the walk as it goes, each
calibrated (the CATS threshold) on the text's first tokens whatever the batches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
)
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

    The CATS column (and with ``target`` the rule's threshold) is calibrated on the text's
    first ``CALIBRATION_TOKENS`` tokens, whatever the batches: the first batches are held until
    that many have come, or the text has ended. ``calibration`` (cats, threshold) skips that,
    for a part of a text whose first tokens were calibrated elsewhere (a cluster's shards)."""

    def __init__(self, block: Block, tokens: int, threshold: float | None,
                 target: float | None,
                 calibration: tuple[float, float | None] | None = None) -> None:
        self.engine, self.tokens = block.engine, tokens
        self.threshold, self.target = threshold, target
        self.held: list[np.ndarray] = []
        self.held_rows = 0
        self.cats = float("nan")
        self.acc: SparsityAccumulator | None = None
        if calibration is not None:
            self._start(*calibration)

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
        if self.acc is None:
            self._release()
        assert self.acc is not None
        return LayerStats(layer, self.acc.result(), self.cats)


def sweep(model: Transformer, sequences: Sequences, layers: Sequence[int], *,
          threshold: float | None = None, target_sparsity: float | None = None,
          thresholds: Mapping[int, float] | None = None,
          batch_tokens: int | None = None, progress: Callback | None = None) -> SweepResult:
    """The sparsity statistics of every selected layer's FFN on its real input; with
    ``thresholds``, each layer's own threshold (a thresholds file's)."""
    from ffncli.compute.forward.walk import walk

    check_rule(threshold, target_sparsity)
    if thresholds is not None and (threshold is not None or target_sparsity is not None):
        raise ValueError("per-layer thresholds replace threshold and target_sparsity")
    done: dict[int, LayerStats] = {}
    current: list[tuple[int, LayerSweep]] = []  # the layer being walked

    def finish() -> None:  # the walk has left the layer: its weights can go
        if current:
            layer, open_sweep = current.pop()
            done[layer] = open_sweep.result(layer)

    def visit(layer: int, block: Block, x: np.ndarray) -> None:
        if not current or current[0][0] != layer:
            finish()
            cut = thresholds[layer] if thresholds is not None else threshold
            current.append((layer, LayerSweep(block, sequences.tokens, cut, target_sparsity)))
        current[0][1].update(x)

    walk(model, sequences.ids, layers, visit, batch_tokens=batch_tokens, progress=progress)
    finish()
    results = tuple(done[i] for i in layers)
    definition = results[0].stats.rule.description if results else ""
    return SweepResult(str(model.weights), sequences.source, sequences.tokens, len(sequences.ids),
                       definition, results)
