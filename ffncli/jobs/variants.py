"""The dense model and its sparsified variants in one walk (``perplexity --sparsify``): each
variant's cut in each selected layer, from a thresholds file, from the rule alone (topk) or
calibrated on the dense model's first CALIBRATION_TOKENS FFN inputs of the layer (their
magnitudes gathered by variant 0's FFN as the walk computes it), and the sums the walk adds up
(:class:`Part`: NLL, agreements, cosines, each layer's cut counts), which merge across the
walks of a sharded job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ffncli.analysis.calibration import Gathering, Magnitudes, cuts_from, first_batches
from ffncli.analysis.perplexity import Agreement, Cosines, Nll, add_cosines, score, scored_rows
from ffncli.compute.forward.walk import walk_variants
from ffncli.compute.sparse import Cut, SparseFfn, Tally
from ffncli.jobs.thresholds import Variant

if TYPE_CHECKING:
    from ffncli.compute.engine import Engine
    from ffncli.compute.forward.layer import Block, Ffn, Head
    from ffncli.compute.forward.transformer import Transformer


# ---------------------------------------------------------------------------------------------
# Each variant's cuts.


class Cuts:
    """Each variant's cut in each selected layer: from a file, from the rule alone (topk), or
    calibrated on the dense model's first CALIBRATION_TOKENS FFN inputs of the layer, their
    magnitudes kept by variant 0's FFN (a :class:`Gathering`) as the walk computes it."""

    def __init__(self, variants: Sequence[Variant]) -> None:
        self.variants = variants
        self.wanted = [(w.rule, w.target) for w in variants if w.cuts is None]
        self.gathering = needs_calibration(variants)
        self.gatherers: dict[int, Gathering] = {}
        self.cuts: dict[tuple[int, int], Cut] = {}

    def ffn(self, i: int, engine: Engine) -> Ffn | None:
        """Variant 0's FFN in selected layer i: the gathering one while layer i has no cuts."""
        for j in [j for j in self.gatherers if j < i]:
            self.finish(j, self.gatherers[j].d_ff)  # the walk has left layer j
        if not self.gathering or (i, 0) in self.cuts:
            return None
        g = self.gatherers.setdefault(i, Gathering(engine, self.wanted))
        g.engine = engine
        return g

    def finish(self, i: int, d_ff: int) -> None:
        """Every variant's cut in layer i, the calibrated ones from the magnitudes kept."""
        if (i, 0) in self.cuts:
            return
        calibrated = [n for n, w in enumerate(self.variants) if w.cuts is None]
        if calibrated:
            g = self.gatherers.pop(i, None)
            cuts = g.cuts() if g is not None else cuts_from(Magnitudes(), d_ff, self.wanted)
            self.cuts |= {(i, n): c for n, c in zip(calibrated, cuts, strict=True)}
        self.cuts |= {(i, n): w.cuts[i] for n, w in enumerate(self.variants)
                      if w.cuts is not None}

    def cut(self, i: int, v: int, d_ff: int) -> Cut:
        """Variant v's cut in layer i: the first call of a layer calibrates every variant's."""
        if (i, v) not in self.cuts:
            self.finish(i, d_ff)
        return self.cuts[i, v]


def needs_calibration(variants: Sequence[Variant]) -> bool:
    return any(v.cuts is None and v.rule != "topk" for v in variants)


def calibration_walk(model: Transformer, sequences: Sequence[np.ndarray],
                     variants: Sequence[Variant], layers: Sequence[int],
                     batch_tokens: int | None = None) -> Cuts:
    """Every variant's cut in every selected layer, calibrated on the dense model's first
    CALIBRATION_TOKENS tokens of ``sequences`` (in order): a walk of the first batches only,
    its FFNs computed and kept as in a walk over all of them."""
    cuts = Cuts(variants)
    selected = set(layers)
    d_ff: dict[int, int] = {}

    def ffn(i: int, v: int, block: Block) -> Ffn | None:
        if i not in selected:
            return None
        d_ff[i] = block.engine.d_ff
        return cuts.ffn(i, block.engine)

    walk_variants(model, first_batches(sequences, batch_tokens)[0], 1, layers=layers, ffn=ffn,
                  batch_tokens=batch_tokens)
    for i in layers:
        cuts.finish(i, d_ff[i])
    cuts.gathering = False
    return cuts


def calibrate(model: Transformer, sequences: Sequence[np.ndarray], variants: Sequence[Variant],
              layers: Sequence[int], batch_tokens: int | None = None) -> list[Variant]:
    """Each variant with its cut in every selected layer (a sharded job's, sent with its
    tasks): calibrated on the dense model's FFN inputs of the first CALIBRATION_TOKENS tokens
    of ``sequences``, as one walk over them calibrates them."""
    if all(v.cuts is not None for v in variants):
        return list(variants)
    cuts = calibration_walk(model, sequences, variants, layers, batch_tokens)
    return [v if v.cuts is not None else
            Variant(v.rule, v.target, {i: cuts.cuts[i, n] for i in layers})
            for n, v in enumerate(variants)]


# ---------------------------------------------------------------------------------------------
# The walk, and what it adds up.


@dataclass
class Part:
    """What the walk over some windows (an encoder: lines) adds up, for the dense model and
    each variant: sums that merge (:func:`merge_parts`), exactly for the counts."""

    nll: Nll
    agreements: list[Agreement]  # decoders: per variant
    cosines: list[Cosines]  # encoders: per variant
    tallies: list[list[Tally]]  # per variant, per selected layer


def merge_parts(a: Part, b: Part) -> Part:
    """a's sums with b's added (a is changed: it is the merge's own)."""
    a.nll.add(b.nll)
    for x, y in zip(a.agreements, b.agreements, strict=True):
        x.add(y)
    for c, d in zip(a.cosines, b.cosines, strict=True):
        c.add(d)
    for ts, us in zip(a.tallies, b.tallies, strict=True):
        for t, u in zip(ts, us, strict=True):
            t.add(u)
    return a


class Change(Protocol):
    """A changed model scored beside the sparsified variants (``outliers --confirm``): from
    layer ``first`` on, its FFN in layer i is ``ffn(i, block)`` (None: the layer's own) and
    ``after(i, output)`` may change layer i's output rows in place; ``dense(i, output)`` sees
    the dense model's output of layer i, all of it before any changed model's pass of layer
    i (the walk's order)."""

    first: int

    def ffn(self, i: int, block: Block) -> Ffn | None: ...

    def after(self, i: int, out: np.ndarray) -> None: ...

    def dense(self, i: int, out: np.ndarray) -> None: ...


def walk_part(model: Transformer, head: Callable[[], Head | None] | None,
              sequences: Sequence[np.ndarray], firsts: Sequence[int],
              variants: Sequence[Variant], layers: Sequence[int], *,
              calibrated: Cuts | None = None, batch_tokens: int | None = None,
              progress: Callable[[int], None] | None = None,
              changes: Sequence[Change] = ()) -> Part:
    """The dense model and every variant over ``sequences`` in one walk: decoders scored by
    their LM head at the positions ``firsts[j]`` .. end-2 of sequence j (``head()`` reads it
    when the walk has left its layers, so that the two are never in memory together);
    encoders (no head) by the cosines of their final hidden states. Cuts not given are those
    ``calibrated`` found or, without, calibrated on variant 0's first FFN inputs of this
    walk. ``changes``: more changed models, scored after the variants (their agreements and
    cosines follow the variants')."""
    cuts = calibrated if calibrated is not None else Cuts(variants)
    sparse: dict[tuple[int, int], SparseFfn] = {}
    selected = set(layers)
    n = len(variants)

    def layer_ffn(i: int, v: int, block: Block) -> Ffn | None:
        for (j, _), done in sparse.items():
            if j < i:
                done.release()  # the walk has left layer j: its weights can go
        if v > n:
            return changes[v - 1 - n].ffn(i, block)
        if i not in selected:
            return None
        if v == 0:  # the dense FFN, keeping what calibrates while it calibrates
            return cuts.ffn(i, block.engine)
        sparse[i, v] = SparseFfn(block.engine, cuts.cut(i, v - 1, block.engine.d_ff))
        return sparse[i, v]

    scored = len(variants) + len(changes)
    part = Part(Nll(), [Agreement() for _ in range(scored)], [Cosines() for _ in range(scored)],
                [])
    read: list[Head] = []  # the head, once the layers' weights are gone

    def final(bounds: Sequence[tuple[int, int]], first: int, states: list[np.ndarray]) -> None:
        if head is None:
            for v, c in enumerate(part.cosines):
                add_cosines(states[0], states[v + 1], bounds, c)
            return
        rows, nexts = scored_rows(bounds, firsts[first:first + len(bounds)])
        targets = np.concatenate(sequences[first:first + len(bounds)])[nexts]
        if not read:
            for done in sparse.values():
                done.release()  # the last layer's too: the walk has left them all
            lm = head()
            assert lm is not None  # a decoder's
            read.append(lm)
        score(read[0], states[0][rows], targets, part.nll, [s[rows] for s in states[1:]],
              part.agreements)

    def after(i: int, v: int, block: Block, out: np.ndarray) -> None:
        if v > n:
            changes[v - 1 - n].after(i, out)
        elif v == 0:
            for c in changes:
                c.dense(i, out)

    alike = [*selected] if variants else []
    walk_variants(model, sequences, 1 + scored, layers=layers, ffn=layer_ffn,
                  final=final, batch_tokens=batch_tokens,
                  alike=min([*alike, *(c.first for c in changes)], default=0),
                  progress=progress, after=after if changes else None)
    part.tallies = [[sparse[i, v + 1].tally() for i in layers] for v in range(len(variants))]
    return part
