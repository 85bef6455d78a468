"""The FFN with its small activations skipped: the rules of CATS, TEAL and top-k.

One layer's FFN (dense or gated; the gate's activation is ``a = act(x W + b)``, the down
projection's input ``h = a * (x V + c)``, or ``h = a`` without a gate)::

    cats   a[|a| <= t] = 0                  the down column and up row of those units skipped
    teal   x[|x| <= t_in] = 0 before W (and V);  h[|h| <= t_down] = 0 before W2
    topk   per token, a keeps its ``keep`` largest |a| units

Zeroing an entry gives the product that skipping it would (a sum that leaves out a term is
the sum with a zero in its place), so the result is that of the sparse kernel, computed with
the dense matrix multiply. :class:`SparseFfn` also measures what it cut and, on the same
input, how far its output is from the dense FFN's.

A mixture of experts: the routing is the dense one (computed on the layer's input as it
comes), each chosen expert's hidden layer is cut by the layer's rule on the tokens routed to
it, the shared experts are left dense. Its counts are per routed (token, expert) pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ffncli.compute.engine import Engine, Hooks, Watch, activate_inplace
from ffncli.compute.ffn import (
    Array,
    DenseWeights,
    GatedWeights,
    MoEWeights,
    dispatch,
    route,
    sigmoid,
)
from ffncli.compute.forward.ops import dot_sum

RULES = ("cats", "teal", "topk")


@dataclass(frozen=True)
class Cut:
    """One layer's sparsification: ``rule`` with its thresholds (cats: ``threshold``; teal:
    ``threshold`` on the input, ``down`` on the down projection's input) or, for topk, the
    units ``keep`` kept per token."""

    rule: str
    threshold: float = 0.0
    down: float = 0.0
    keep: int = 0


@dataclass
class CutCounts:
    """What a layer's cut did, summed over the tokens it saw."""

    tokens: int = 0
    zeroed: int = 0  # hidden units (cats, topk) or down-projection inputs (teal) set to zero
    zeroed_in: int = 0  # teal: FFN input entries set to zero
    error2: float = 0.0  # sum of ||y_sparse - y_dense||^2
    dense2: float = 0.0  # sum of ||y_dense||^2

    def add(self, other: CutCounts) -> None:
        self.tokens += other.tokens
        self.zeroed += other.zeroed
        self.zeroed_in += other.zeroed_in
        self.error2 += other.error2
        self.dense2 += other.dense2


@dataclass
class Tally:
    """One layer's cut, the layer's shape and what the cut did: mergeable (the counts add)."""

    cut: Cut
    d_model: int
    d_ff: int
    first: int  # matrices before the hidden layer: 2 in a gated FFN, else 1
    counts: CutCounts

    @property
    def macs(self) -> tuple[int, int]:
        """Multiply-adds per token of the first matrices and of the down projection."""
        return self.first * self.d_model * self.d_ff, self.d_model * self.d_ff

    def add(self, other: Tally) -> None:
        if other.cut != self.cut:
            raise ValueError(f"cannot add the counts of {other.cut} to those of {self.cut}")
        self.counts.add(other.counts)


def gate_and_up(x: Array, p: DenseWeights | GatedWeights, engine: Engine, up: bool = True
                ) -> tuple[Array, Array | None]:
    """(a, u): the activated gate ``act(x W + b)`` (fresh) and the up projection (None without
    a gate, or without ``up``), for calibration."""
    if isinstance(p, GatedWeights):
        a = x @ p.w
        if p.b is not None:
            a += p.b
        u = x @ p.v if up else None
        if u is not None and p.c is not None:
            u += p.c
        u = None if u is None else engine.act.up(u)  # gpt-oss's clamp and + 1
    else:
        a, u = x @ p.w1, None
        if p.b1 is not None:
            a += p.b1
    activate_inplace(a, engine.act)
    return a, u


def smallest(a: Array, keep: int) -> Array:
    """A mask of each row's ``a.shape[1] - keep`` entries of smallest |a|."""
    units = a.shape[1]
    mask = np.zeros(a.shape, dtype=bool)
    if keep >= units:
        return mask
    if keep <= 0:
        mask[...] = True
        return mask
    order = np.argpartition(np.abs(a), units - keep - 1, axis=1)[:, :units - keep]
    np.put_along_axis(mask, order, True, axis=1)
    return mask


class SparseFfn(Watch):
    """Layer ``engine``'s FFN under ``cut``, as the forward's ``ffn(x, out)``; ``counts``
    accumulates what it cut and its error against the dense FFN on the same input.

    It watches the engine's own chunks (:class:`~ffncli.compute.engine.Watch`): the cut is made
    in the hidden layer's blocks as the engine computes them, and each chunk's error is summed
    once its output is in."""

    def __init__(self, engine: Engine, cut: Cut) -> None:
        if cut.rule not in RULES:
            raise ValueError(f"rule: expected one of {', '.join(RULES)}, got {cut.rule!r}")
        self.engine: Engine | None = engine
        self.cut, self.counts = cut, CutCounts()
        self.d_model, self.d_ff = engine.d_model, engine.d_ff
        p = engine.weights
        expert = p.experts[0] if isinstance(p, MoEWeights) else p
        self.first = 2 if isinstance(expert, GatedWeights) else 1  # matrices before h
        self._buffer: Array | None = None  # the zeroed part of the hidden layer, in a call
        self._zeroed: Array | None = None  # the current chunk's part of it (cats, topk)
        self._dense: Array | None = None  # teal: the dense FFN's output of the call's input
        self._row = 0  # teal: the current chunk's first row in the call
        self._found: list[int] = []  # zeroed per block of the current chunk

    def tally(self) -> Tally:
        return Tally(self.cut, self.d_model, self.d_ff, self.first, self.counts)

    def release(self) -> None:
        """Let the layer's weights and buffers go; the counts stay."""
        self.engine = self._buffer = None

    def __call__(self, x: Array, out: Array) -> None:
        engine = self.engine
        if engine is None:
            raise ValueError("this layer's cut was released")
        if isinstance(engine.weights, MoEWeights):
            self._mixture(engine, engine.weights, x, out)
            return
        try:
            if self.cut.rule == "teal":  # another input: the dense FFN on x, the sparse on x'
                x = np.ascontiguousarray(x, dtype=engine.dtype)
                self._dense, self._row = engine(x, out=np.empty_like(out)), 0
                small = np.abs(x) <= self.cut.threshold
                self.counts.zeroed_in += int(np.count_nonzero(small))
                x = np.where(small, 0, x).astype(x.dtype, copy=False)
            engine(x, out, watch=self)  # the dense FFN's chunks: its products as fast
        finally:  # the zeroed part goes with the call: a sweep's variants hold none between
            # their passes (made again at the next call, cheap against the batch's FFN)
            self._buffer = self._zeroed = self._dense = None

    def _mixture(self, engine: Engine, p: MoEWeights, x: Array, out: Array) -> None:
        """A mixture under the cut: the dense routing, each chosen expert's hidden layer cut
        (a :class:`SparseFfn` of the expert on its tokens), the shared experts dense; the
        error against the dense mixture on the same input."""
        x = np.ascontiguousarray(x, dtype=engine.dtype)
        dense = engine(x)  # the reference of the error, its capacity that of the whole x
        out[...] = 0
        for e, rows, xe, w in routed(x, p, engine.dtype):
            expert = SparseFfn(Engine(p.experts[e], engine.act, engine.chunk_tokens), self.cut)
            y = np.empty((rows.size, self.d_model), dtype=engine.dtype)
            expert(xe, y)
            if not p.rule.scales_input:
                np.multiply(y, w, out=y)
            out[rows] += y  # rows are distinct: a plain scatter-add
            self.counts.tokens += expert.counts.tokens
            self.counts.zeroed += expert.counts.zeroed
            self.counts.zeroed_in += expert.counts.zeroed_in
        if p.shared is not None:  # left dense, as the engine computes it
            shared = Engine(p.shared, engine.act, engine.chunk_tokens)(x)
            if p.shared_gate is not None:
                np.multiply(shared, sigmoid(x @ p.shared_gate)[:, None], out=shared)
            np.add(out, shared, out=out)
        self.counts.dense2 += dot_sum(dense, dense)
        error = np.subtract(out, dense, out=dense)
        self.counts.error2 += dot_sum(error, error)

    def hooks(self, x: Array) -> Hooks:
        """The cut of the chunk ``x``, made in the engine's blocks of its hidden layer."""
        cut, found = self.cut, list[int]()
        self._found = found  # zeroed per block (the blocks run on the engine's threads)
        if cut.rule == "teal":
            def small(h: Array) -> None:  # the down projection's small inputs, zeroed
                mask = np.abs(h) <= cut.down
                found.append(int(np.count_nonzero(mask)))
                np.multiply(h, ~mask, out=h)

            if self.first == 2:
                return Hooks(gate=lambda lo, hi, a, u: small(np.multiply(a, u, out=a)))
            return Hooks(after=lambda lo, hi, a, u: small(a))
        # cats, topk: the cut is of the gate a, so the dense FFN shares the sparse one's
        # products: h = a * u splits exactly into its kept part and its zeroed part z, and
        # y_dense - y_sparse = z W2 (no rounding of a difference of two outputs)
        zeroed = self._zeroed = self._zeroed_rows(x.shape[0])

        def inactive(a: Array) -> Array:  # the block's units cut, counted
            mask = np.abs(a) <= cut.threshold if cut.rule == "cats" else smallest(a, cut.keep)
            found.append(int(np.count_nonzero(mask)))
            return mask

        def split(h: Array, mask: Array, z: Array) -> None:  # h's cut part into z, out of h
            np.multiply(h, mask, out=z)
            np.subtract(h, z, out=h)  # h - h = 0 and h - 0 = h, exactly

        def after(lo: int, hi: int, a: Array, u: Array | None) -> None:  # no gate: h = a
            split(a, inactive(a), zeroed[lo:hi])

        def gate(lo: int, hi: int, a: Array, u: Array) -> None:  # u is zeroed[lo:hi]
            mask = inactive(a)
            np.multiply(a, u, out=a)  # h, as the dense FFN's
            split(a, mask, u)  # z where u was (in cache, no longer needed)

        if self.first == 2:
            return Hooks(gate=gate, up=zeroed)
        return Hooks(after=after)

    def seen(self, x: Array, out: Array) -> None:
        """The chunk's counts, and its error against the dense FFN on the same input."""
        counts, rows = self.counts, x.shape[0]
        counts.tokens += rows
        counts.zeroed += sum(self._found)
        if self._dense is not None:  # teal: the dense FFN's output of these rows, computed
            dense = self._dense[self._row:self._row + rows]
            self._row += rows
            counts.dense2 += dot_sum(dense, dense)
            error = np.subtract(out, dense, out=dense)
            counts.error2 += dot_sum(error, error)
            return
        assert self.engine is not None and self._zeroed is not None
        p = self.engine.weights
        assert not isinstance(p, MoEWeights)
        diff = np.matmul(self._zeroed, p.w2)
        counts.error2 += dot_sum(diff, diff)
        dense = np.add(diff, out, out=diff)
        counts.dense2 += dot_sum(dense, dense)

    def _zeroed_rows(self, rows: int) -> Array:
        assert self.engine is not None
        buf = self._buffer
        if buf is None or buf.shape[0] < rows:
            buf = self._buffer = np.empty((rows, self.d_ff), dtype=self.engine.dtype)
        return buf[:rows]


def routed(x: Array, p: MoEWeights, dtype: np.dtype
           ) -> list[tuple[int, Array, Array, Array]]:
    """Each chosen expert of the tokens ``x`` (one input, its capacity that of all of it):
    (expert, its token rows, their input as the expert takes it, the (rows, 1) weights its
    output adds with). The input is scaled by the weight for Llama 4's rule (its output then
    added as it is)."""
    order, gate = route(x, p)
    gate = gate.astype(dtype, copy=False)
    groups = []
    for e, rows, slot in dispatch(order, p):
        if rows.size == 0:
            continue
        xe, w = np.take(x, rows, axis=0), gate[rows, slot, None]
        if p.rule.scales_input:
            np.multiply(xe, w, out=xe)
        groups.append((e, rows, xe, w))
    return groups
