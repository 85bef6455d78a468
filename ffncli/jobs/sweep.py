"""``relu-stats --text``: one statistics accumulator per layer, fed by the walk as it goes, each
calibrated (the CATS threshold) on the text's first tokens whatever the batches."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ffncli.analysis.calibration import (
    Gathering,
    calibrate_threshold,
    calibration_rows,
    thresholds_from,
)
from ffncli.analysis.sparsity import (
    SMALL_OVERLAP,
    Rule,
    SparsityAccumulator,
    SparsityResult,
    check_rule,
    describe_rule,
    mark_inactive,
)
from ffncli.compute.engine import Hooks, Watch
from ffncli.compute.ffn import MoEWeights
from ffncli.compute.forward.walk import walk_variants
from ffncli.jobs.choices import OPTIONS
from ffncli.jobs.progress import Callback

if TYPE_CHECKING:
    from ffncli.base.validate import Words
    from ffncli.compute.engine import Engine
    from ffncli.compute.forward.layer import Block
    from ffncli.compute.forward.transformer import Transformer
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


def _shares(target: float | None) -> list[float]:
    """The shares a layer calibrates: the CATS column's, and the rule's target if any."""
    return [CATS_SHARE] if target is None else [CATS_SHARE, target]


def _calibrate_inputs(engine: Engine, sample: np.ndarray, threshold: float | None,
                      target: float | None) -> tuple[float, float | None]:
    """(the CATS threshold at 50%, the rule's threshold) on the first tokens of these FFN
    inputs (a mixture's: its experts' hidden layers computed again from them)."""
    sample = np.ascontiguousarray(sample[:calibration_rows(len(sample))], dtype=engine.dtype)
    cats = calibrate_threshold(engine, sample, CATS_SHARE)
    return cats, threshold if target is None else calibrate_threshold(engine, sample, target)


def calibrate_parts(model: Transformer, parts: Sequence[Sequence[np.ndarray]],
                    layers: Sequence[int], threshold: float | None, target: float | None
                    ) -> list[tuple[float, float | None]]:
    """Each layer's (CATS threshold at 50%, the rule's threshold) on the first
    CALIBRATION_TOKENS tokens of ``parts`` (a text's first sequences in parts, each walked
    alone: a corpus's first shards), as a sweep over the whole text calibrates them: a dense
    FFN's |a| kept by a :class:`Gathering` as the walk computes it (no second product of the
    gate), a mixture's inputs kept and calibrated. A layer's thresholds are found once the
    walk has left it with its tokens all kept."""
    tokens = sum(len(s) for part in parts for s in part)
    wanted = [("cats", s) for s in _shares(target)]
    kept: dict[int, Gathering | list[np.ndarray]] = {}  # a mixture's: its inputs
    found: dict[int, tuple[float, float | None]] = {}

    def finish(i: int) -> None:
        k = kept.pop(i)
        if isinstance(k, list):
            engine = model.layer(i).engine
            found[i] = _calibrate_inputs(engine, np.concatenate(k), threshold, target)
            return
        gate = k.magnitudes().gate
        cats = thresholds_from(gate if gate is not None else np.zeros(1, k.dtype),
                               _shares(target))
        found[i] = cats[0], threshold if target is None else cats[-1]

    def ffn(i: int, v: int, block: Block) -> Gathering | None:
        for j, k in list(kept.items()):
            if j < i and isinstance(k, Gathering) and not k.left:
                finish(j)  # the walk has left layer j with its tokens all kept
            elif j < i and isinstance(k, Gathering):
                k.release()  # the walk has left layer j: its weights can go till the next part
        if i not in layers or i in found:
            return None
        engine = block.engine
        if isinstance(engine.weights, MoEWeights):
            kept.setdefault(i, [])
            return None
        g = kept.setdefault(i, Gathering(engine, wanted, calibration_rows(tokens)))
        assert isinstance(g, Gathering)
        g.engine = engine
        return g

    def visit(i: int, v: int, block: Block, x: np.ndarray) -> None:
        k = kept.get(i)
        if isinstance(k, list):
            k.append(x.copy())

    for part in parts:
        walk_variants(model, part, 1, visit, layers=layers, ffn=ffn)
    for i in list(kept):
        finish(i)
    return [found[i] for i in layers]


class LayerSweep(Watch):
    """One layer's statistics on its real input, fed batch by batch in text order.

    A dense or gated FFN is counted as the walk computes it: the sweep is the layer's FFN
    (``sweep(x, out)``), a watch of the engine's chunks, each block's inactive mask taken from
    the engine's own pre-activation or activation on its threads (no second product of the
    gate), and the first tokens' |a| kept to calibrate. A mixture of experts is counted from
    its inputs (``update(x)``).

    The CATS column (and with ``target`` the rule's threshold) is calibrated on the text's
    first ``CALIBRATION_TOKENS`` tokens, whatever the batches; until the rule's threshold is
    known, those tokens' counting waits for it (a dense FFN computes them first, apart from
    the rest of their batch). ``calibration`` (cats, threshold) skips that, for a part of a
    text whose first tokens were calibrated elsewhere (a cluster's shards)."""

    def __init__(self, block: Block, tokens: int, threshold: float | None,
                 target: float | None,
                 calibration: tuple[float, float | None] | None = None,
                 words: Words = OPTIONS) -> None:  # the rule's line names the cut in words
        self.engine, self.tokens, self.words = block.engine, tokens, words
        self.threshold, self.target = threshold, target
        self.fused = not isinstance(self.engine.weights, MoEWeights)
        self.held: list[np.ndarray] = []  # a mixture's first FFN inputs
        self.held_rows = 0
        self.shares = _shares(target)
        self.gathering = Gathering(self.engine, [("cats", s) for s in self.shares],
                                   calibration_rows(tokens)) \
            if self.fused and calibration is None else None  # |a| of the first tokens
        self.cats = float("nan")
        self.acc: SparsityAccumulator | None = None
        self._mask: np.ndarray | None = None  # the chunk's inactive units, as counted
        if calibration is not None:
            self._start(*calibration)
        elif self.fused and target is None:  # the counting needs no calibration
            self._start(float("nan"), threshold)

    def calibrate(self, sample: np.ndarray) -> tuple[float, float | None]:
        """(the CATS threshold at 50%, the rule's threshold) on these tokens."""
        return _calibrate_inputs(self.engine, sample, self.threshold, self.target)

    def _start(self, cats: float, threshold: float | None) -> None:
        self.cats = cats
        rule = Rule(threshold, describe_rule(self.engine.act.name, threshold, self.target,
                                                self.words))
        self.acc = SparsityAccumulator(self.engine, rule,
                                       keep_masks=self.tokens <= SMALL_OVERLAP)

    # -- a dense or gated FFN: counted as it is computed ----------------------------------

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        """The layer's FFN of ``x`` into ``out``, counting its hidden units."""
        g, split = self.gathering, x.shape[0]
        if self.acc is None and g is not None:  # the rule waits: the first tokens first
            split = min(split, g.left)
        self.engine(x[:split], out[:split], watch=self)
        if split < x.shape[0]:
            self.engine(x[split:], out[split:], watch=self)

    def hooks(self, x: np.ndarray) -> Hooks:
        """A chunk's counting: its inactive mask from the engine's blocks, the first tokens'
        |a| kept."""
        acc, g = self.acc, self.gathering
        keep = g.keeper(x) if g is not None else None
        mask = self._mask = np.empty((x.shape[0], self.engine.d_ff), dtype=bool) \
            if acc is not None else None
        default = acc is not None and acc.rule.threshold is None  # counted before act

        def before(lo: int, hi: int, pre: np.ndarray, u: np.ndarray | None) -> None:
            assert acc is not None and mask is not None
            mark_inactive(acc.rule, pre, mask[lo:hi])

        def after(lo: int, hi: int, a: np.ndarray, u: np.ndarray | None) -> None:
            if keep is not None:
                keep(lo, hi, a, u)
            if acc is not None and mask is not None and not default:
                mark_inactive(acc.rule, a, mask[lo:hi])

        return Hooks(before=before if default else None, after=after)

    def seen(self, x: np.ndarray, out: np.ndarray) -> None:
        g = self.gathering
        if self.acc is not None and self._mask is not None:
            self.acc.count(self._mask)
        self._mask = None
        if g is not None and g.parts and not g.left:
            self._calibrated()

    def _calibrated(self) -> None:
        """The first tokens are in: the CATS column and the rule's threshold from their |a|
        (:func:`thresholds_from`), and their counting if it waited."""
        g, self.gathering = self.gathering, None
        assert g is not None
        held = [m.gate for m in g.parts if m.gate is not None]
        if len(held) == 1 and self.acc is not None:  # no counting waits: reorder them
            values = held[0]
        else:
            values = np.concatenate(held) if held else np.zeros(1, self.engine.dtype)
        found = thresholds_from(values, self.shares)
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
            if self.held_rows >= calibration_rows(self.tokens):
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
        g = self.gathering
        if self.fused and ((g is not None and g.parts) or self.acc is None):
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
          batch_tokens: int | None = None, progress: Callback | None = None,
          words: Words = OPTIONS) -> SweepResult:
    """The sparsity statistics of every selected layer's FFN on its real input; with
    ``thresholds``, each layer's own threshold (a thresholds file's); ``words`` name the cut
    (a library call: its parameters)."""
    check_rule(threshold, target_sparsity, words)
    if thresholds is not None and (threshold is not None or target_sparsity is not None):
        raise ValueError("per-layer thresholds replace threshold and target_sparsity")
    done: dict[int, LayerStats] = {}

    def open_layer(layer: int, block: Block) -> LayerSweep:
        cut = thresholds[layer] if thresholds is not None else threshold
        return LayerSweep(block, sequences.tokens, cut, target_sparsity, words=words)

    count_walk(model, sequences.ids, layers, open_layer,
               lambda layer, s: done.__setitem__(layer, s.result(layer)),
               batch_tokens=batch_tokens, progress=progress)
    results = tuple(done[i] for i in layers)
    definition = results[0].stats.rule.description if results else ""
    return SweepResult(str(model.weights), sequences.source, sequences.tokens, len(sequences.ids),
                       definition, results)
