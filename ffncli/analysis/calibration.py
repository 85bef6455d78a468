"""Calibration: the thresholds that zero a share S of a layer's |a| (cats), or of its |x| and
|h| (teal), over the first CALIBRATION_TOKENS tokens of its input, in walk order.

Its one home: which tokens calibrate (:func:`calibration_rows` of a token input,
:func:`first_batches` of a text's sequences), the magnitudes they give (:class:`Gathering`,
fed by the engine's own hidden blocks as the walk computes the layer, or
:func:`calibration_magnitudes` of the tokens' inputs), and the thresholds found from them
(:func:`thresholds_from` for relu-stats' CATS rule, :func:`cuts_from` for perplexity's cuts).
A change of the rule is a change of this file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ffncli.analysis.experts import expert_activation, expert_inputs
from ffncli.analysis.quantiles import quantile, quantiles
from ffncli.base import CALIBRATION_TOKENS as CALIBRATION_TOKENS  # stated there, read here
from ffncli.compute.engine import NO_HOOKS, Engine, Hooks, Visit, Watch
from ffncli.compute.ffn import DenseWeights, ExpertWeights, MoEWeights, pre_activation
from ffncli.compute.sparse import Cut, gate_and_up, routed


def calibration_rows(n_tokens: int) -> int:
    """How many of an input's first tokens calibrate: CALIBRATION_TOKENS, or all of a shorter
    input."""
    return min(CALIBRATION_TOKENS, n_tokens)


def first_batches(sequences: Sequence[np.ndarray], batch_tokens: int | None = None,
                  need: int | None = None) -> tuple[list[np.ndarray], int]:
    """The sequences of the walk's first batches, until they hold ``need`` tokens (default
    CALIBRATION_TOKENS): walked alone, they are batched (hence rounded) as in a walk over all
    of them; and the tokens still needed after them (<= 0 once enough), for the next part of
    a text split in parts (a corpus's shards)."""
    from ffncli.compute.forward.walk import batches

    need = CALIBRATION_TOKENS if need is None else need
    end = 0
    for a, b in batches([len(s) for s in sequences], batch_tokens):
        if need <= 0:
            break
        need -= sum(len(s) for s in sequences[a:b])
        end = b
    return list(sequences[:end]), need


def thresholds_from(values: np.ndarray, shares: Sequence[float]) -> list[float]:
    """relu-stats' CATS thresholds: for each share S, the T such that a share S of ``values``
    (|a|, reordered here) is <= T, as ``np.quantile(values, S)`` (the default, linear; S a
    float, so interpolated in the values' own dtype)."""
    return [quantile(values, s) for s in shares]


def calibrate_threshold(ffn: Engine, x: np.ndarray, target: float) -> float:
    """The CATS rule: T such that a share ``target`` of |act(x W + b)| is <= T."""
    if isinstance(ffn.weights, DenseWeights):
        values = _dense_magnitudes(ffn, x)
    else:
        values = np.concatenate([
            np.abs(expert_activation(ffn, pre_activation(x[rows], p))).ravel()
            for _, p, rows in expert_inputs(ffn, x)])
    return thresholds_from(values, [target])[0]


def _dense_magnitudes(ffn: Engine, x: np.ndarray) -> np.ndarray:
    """|act(x W1 + b1)| of a dense FFN, flat, a fresh array: the engine's hidden layer (the
    same values as the plain formula, its activation in cache-sized blocks on every core)."""
    out = np.empty((x.shape[0], ffn.d_ff), dtype=ffn.dtype)

    def visit(lo: int, hi: int, a: np.ndarray, u: np.ndarray | None) -> None:
        np.abs(a, out=out[lo:hi])

    ffn.hidden(x, Hooks(after=visit))
    return out.reshape(-1)


def calibrate_cut(ffn: Engine, x: np.ndarray, rule: str, target: float) -> Cut:
    """The cut that zeroes a share ``target`` of these tokens' values: :func:`calibrate_cuts`
    of one target."""
    return calibrate_cuts(ffn, x, [(rule, target)])[0]

@dataclass
class Magnitudes:
    """What calibrates one layer's cuts, over the same tokens: |a| = |act(x W + b)| (cats),
    |x| and |h| (teal: the FFN input and the down projection's). Fresh arrays, reordered when
    the cuts are found; None where no rule asked."""

    gate: np.ndarray | None = None
    inputs: np.ndarray | None = None
    hidden: np.ndarray | None = None

    @staticmethod
    def join(parts: Sequence[Magnitudes]) -> Magnitudes:
        """The parts' tokens in order (the parts of a layer's batches)."""
        def rows(arrays: list[np.ndarray | None]) -> np.ndarray | None:
            kept = [a for a in arrays if a is not None]
            if len(kept) == 1:  # one batch: its own array, not a copy
                return kept[0]
            return np.concatenate(kept) if kept else None

        return Magnitudes(rows([m.gate for m in parts]), rows([m.inputs for m in parts]),
                          rows([m.hidden for m in parts]))


def calibration_rules(wanted: Sequence[tuple[str, float]]) -> tuple[bool, bool]:
    """Whether (rule, S) pairs need |a| (cats) and |x|, |h| (teal)."""
    rules = {r for r, _ in wanted}
    return "cats" in rules, "teal" in rules


def calibration_magnitudes(ffn: Engine, x: np.ndarray, wanted: Sequence[tuple[str, float]]
                           ) -> Magnitudes:
    """The magnitudes of these tokens that the rules of ``wanted`` calibrate on (a mixture:
    :func:`routed_magnitudes` of all of them)."""
    if isinstance(ffn.weights, MoEWeights):
        return routed_magnitudes(ffn, x, x.shape[0], wanted)
    return _magnitudes(ffn, ffn.weights, x, wanted)


def _magnitudes(ffn: Engine, p: ExpertWeights, x: np.ndarray,
                wanted: Sequence[tuple[str, float]]) -> Magnitudes:
    """The magnitudes of the FFN ``p`` (the layer's, or an expert's) on these tokens."""
    cats, teal = calibration_rules(wanted)
    if not (cats or teal):
        return Magnitudes()
    a, u = gate_and_up(x, p, ffn, up=teal)  # cats needs no up projection
    m = Magnitudes()
    if teal:
        m.inputs, m.hidden = np.abs(x), np.abs(a if u is None else a * u)
    if cats:
        m.gate = np.abs(a, out=a)  # a is ours: its last use
    return m


class Gathering(Watch):
    """A layer's dense FFN, as the forward's ``ffn(x, out)``, that keeps the magnitudes of its
    first ``tokens`` inputs (default CALIBRATION_TOKENS) which calibrate ``wanted``: it watches
    the engine's chunks (the same products, so the same bits), |a| and |h| read from the
    engine's own hidden layer (no second product of the gate, as
    :func:`calibration_magnitudes` makes). Another watch of the layer (the sweep's counting)
    passes the visits of :meth:`keeper` to the engine in its own hooks instead.

    A mixture of experts: one cut per layer, calibrated on the magnitudes of every routed
    expert's hidden layer on the tokens routed to it (:func:`routed_magnitudes`), the shared
    experts left out (they are not cut)."""

    def __init__(self, engine: Engine, wanted: Sequence[tuple[str, float]],
                 tokens: int | None = None) -> None:
        self.engine: Engine | None = engine
        self.d_ff, self.dtype, self.wanted = engine.d_ff, engine.dtype, list(wanted)
        self.left = CALIBRATION_TOKENS if tokens is None else tokens  # rows still to keep
        self.cats, self.teal = calibration_rules(wanted)
        self.parts: list[Magnitudes] = []

    def magnitudes(self) -> Magnitudes:
        return Magnitudes.join(self.parts)

    def cuts(self) -> list[Cut]:
        """The cuts of ``wanted`` from the magnitudes kept (which it reorders)."""
        return cuts_from(self.magnitudes(), self.d_ff, self.wanted)

    def release(self) -> None:
        """Let the layer's weights go; the magnitudes stay."""
        self.engine = None

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        if self.engine is None:
            raise ValueError("this layer's calibration was released")
        if not isinstance(self.engine.weights, MoEWeights):
            self.engine(x, out, watch=self)
            return
        self.engine(x, out)
        rows = min(self.left, x.shape[0])
        if rows > 0 and (self.cats or self.teal):
            self.left -= rows
            self.parts.append(routed_magnitudes(self.engine, x, rows, self.wanted))

    def hooks(self, x: np.ndarray) -> Hooks:
        keep = self.keeper(x)
        return NO_HOOKS if keep is None else Hooks(after=keep)

    def keeper(self, x: np.ndarray) -> Visit | None:
        """The engine's visit of a chunk's hidden blocks that keeps what is still wanted."""
        rows = min(self.left, x.shape[0])
        if rows <= 0 or not (self.cats or self.teal):
            return None
        dtype, f = x.dtype, self.d_ff
        m = Magnitudes(np.empty((rows, f), dtype) if self.cats else None,
                       np.abs(x[:rows]) if self.teal else None,
                       np.empty((rows, f), dtype) if self.teal else None)
        self.parts.append(m)
        self.left -= rows

        def keep(lo: int, hi: int, a: np.ndarray, u: np.ndarray | None) -> None:
            end = min(hi, rows)
            if end <= lo:
                return
            a = a[:end - lo]
            if m.gate is not None:
                np.abs(a, out=m.gate[lo:end])
            if m.hidden is not None:
                h = m.hidden[lo:end]
                if u is None:
                    np.abs(a, out=h)
                else:
                    np.abs(np.multiply(a, u[:end - lo], out=h), out=h)  # h = a * u, as the FFN

        return keep


def routed_magnitudes(ffn: Engine, x: np.ndarray, rows: int,
                      wanted: Sequence[tuple[str, float]]) -> Magnitudes:
    """A mixture's magnitudes of its first ``rows`` tokens that ``wanted`` calibrates on:
    every chosen expert's, on the tokens routed to it (routed as in the whole ``x``), one
    (token, expert) pair a row, expert by expert."""
    p = ffn.weights
    assert isinstance(p, MoEWeights)
    x = np.ascontiguousarray(x, dtype=ffn.dtype)
    parts = []
    for e, kept, xe, _ in routed(x, p, ffn.dtype):
        first = kept < rows  # the pairs of the calibrating tokens
        if first.any():
            parts.append(_magnitudes(ffn, p.experts[e], xe[first], wanted))
    return Magnitudes.join(parts)


def calibrate_cuts(ffn: Engine, x: np.ndarray, wanted: Sequence[tuple[str, float]]
                   ) -> list[Cut]:
    """The cuts that zero a share S of these tokens' values, for each (rule, S): cats, the
    S-quantile of |act(x W + b)|; teal, of |x| (the input) and of |h| (the down projection's
    input); topk, round((1 - S) d_ff) units kept per token (no calibration)."""
    return cuts_from(calibration_magnitudes(ffn, x, wanted), ffn.d_ff, wanted)


def cuts_from(m: Magnitudes, d_ff: int, wanted: Sequence[tuple[str, float]]) -> list[Cut]:
    """The cuts of ``wanted`` from a layer's magnitudes (reordered here): numpy's default
    (linear) quantile, each set of magnitudes partitioned at every target's index."""
    def of(values: np.ndarray | None, rule: str) -> dict[float, float]:
        targets = sorted({s for r, s in wanted if r == rule})
        if not targets or values is None:
            return {}
        return dict(zip(targets, quantiles(values, targets), strict=True))

    cats = of(m.gate, "cats")
    teal_in, teal_down = of(m.inputs, "teal"), of(m.hidden, "teal")
    cuts = []
    for rule, s in wanted:
        if rule == "topk":
            cuts.append(Cut("topk", keep=round((1 - s) * d_ff)))
        elif rule == "cats":
            cuts.append(Cut("cats", threshold=cats[s]))
        else:
            cuts.append(Cut("teal", threshold=teal_in[s], down=teal_down[s]))
    return cuts

