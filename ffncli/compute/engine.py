"""The engine: the FFN of ``ffncli.compute.ffn``, at the speed of the machine's matrix multiply.

The same math as the plain formulas, over chunks of tokens with buffers reused between them:
biases, activations and gates applied in place (``np.add(h, b1, out=h)``), the elementwise
work done in cache-sized blocks on every core, so the time goes to the matrix products (see
``benchmarks/bench_ffn.py``). Tested against the plain formulas for every activation, dtype,
gated and MoE variant and chunk boundary.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ffncli.base.parallel import each_in_parallel
from ffncli.compute.ffn import (
    AS_A,
    AS_K,
    SQRT_2_OVER_PI,
    Activation,
    Array,
    ExpertWeights,
    GatedWeights,
    MoEWeights,
    Weights,
    as_activation,
    capacity,
    dispatch,
    gelu,
    route,
    sigmoid,
    weights_dtype,
    weights_shape,
)
from ffncli.specs.spec import ACTIVATIONS

# ---------------------------------------------------------------------------------------------
# In-place activations for the engine: they overwrite ``h`` and use only the scratch buffers
# they are given (``SCRATCH[name]`` of them, each shaped like ``h``).


@functools.lru_cache(maxsize=16)
def _zeros_row(cols: int, dtype: np.dtype) -> Array:
    row = np.zeros(cols, dtype=dtype)
    row.flags.writeable = False
    return row


def _relu_(h: Array, s: list[Array], beta: float) -> None:
    # A row of zeros, not the scalar 0: NumPy's maximum is faster against an array (the
    # figure: docs/measured.md, 2026-12-05, the engine's one watch).
    np.maximum(h, _zeros_row(h.shape[-1], h.dtype), out=h)


def _identity_(h: Array, s: list[Array], beta: float) -> None:
    pass


def _sigmoid_(h: Array, s: list[Array], beta: float) -> None:
    with np.errstate(over="ignore"):
        np.negative(h, out=h)
        np.exp(h, out=h)
    np.add(h, 1, out=h)
    np.reciprocal(h, out=h)


def _silu_(h: Array, s: list[Array], beta: float) -> None:
    e = s[0]
    np.multiply(h, -beta, out=e)  # x / (1 + exp(-beta x))
    with np.errstate(over="ignore"):
        np.exp(e, out=e)
    np.add(e, 1, out=e)
    np.divide(h, e, out=h)


def _gelu_tanh_(h: Array, s: list[Array], beta: float) -> None:
    """0.5 x (1 + tanh(z)) computed as x / (1 + exp(-2 z)): one exp instead of a slower tanh."""
    u = s[0]
    np.multiply(h, h, out=u)  # x^2, never x**3
    np.multiply(u, -2 * 0.044715 * SQRT_2_OVER_PI, out=u)
    np.add(u, -2 * SQRT_2_OVER_PI, out=u)
    np.multiply(u, h, out=u)  # -2 z = -2 sqrt(2/pi) (x + 0.044715 x^3)
    with np.errstate(over="ignore"):
        np.exp(u, out=u)
    np.add(u, 1, out=u)
    np.divide(h, u, out=h)


def _gelu_(h: Array, s: list[Array], beta: float) -> None:
    """x Phi(x) = max(x, 0) - |x| erfc(|x| / sqrt 2) / 2, erfc by A&S 7.1.26 in float32."""
    if h.dtype != np.float32:
        h[...] = gelu(h)  # float64: the accurate erf, out of place
        return
    ax, t, acc = s
    np.abs(h, out=ax)
    np.add(ax, 1 / AS_K, out=t)
    np.divide(1 / AS_K, t, out=t)  # t = 1 / (1 + k |x|) = (1/k) / (1/k + |x|): two passes
    np.multiply(t, 0.5 * AS_A[4], out=acc)
    for coef in AS_A[3::-1]:  # Horner: acc = t P(t) / 2
        np.add(acc, 0.5 * coef, out=acc)
        np.multiply(acc, t, out=acc)
    np.multiply(ax, -0.5, out=t)  # t no longer needed
    np.multiply(t, ax, out=t)
    np.exp(t, out=t)  # exp(-x^2 / 2)
    np.multiply(acc, t, out=acc)  # erfc(|x| / sqrt 2) / 2
    np.multiply(acc, ax, out=acc)
    _relu_(h, s, beta)
    np.subtract(h, acc, out=h)


InPlace = Callable[[Array, list[Array], float], None]

# One in-place version per name of spec.ACTIVATIONS, with the scratch buffers it needs.
_INPLACE: dict[str, tuple[InPlace, int]] = {
    "relu": (_relu_, 0), "gelu": (_gelu_, 3), "gelu_tanh": (_gelu_tanh_, 1), "silu": (_silu_, 1),
    "swish": (_silu_, 1), "sigmoid": (_sigmoid_, 0), "identity": (_identity_, 0),
}
assert tuple(_INPLACE) == ACTIVATIONS, "spec.ACTIVATIONS and the in-place versions disagree"


def activate_inplace(h: Array, act: Activation | str) -> None:
    """The engine's activation on ``h``, overwriting it (scratch allocated here)."""
    act = as_activation(act)
    fn, scratch = _INPLACE[act.name]
    if act.limit is not None:
        np.minimum(h, act.limit, out=h)
    fn(h, [np.empty_like(h) for _ in range(scratch)], act.beta)

# ---------------------------------------------------------------------------------------------
# What a caller watches of the hidden layer.

Visit = Callable[[int, int, Array, "Array | None"], None]  # rows lo..hi: the gate, the up
Gate = Callable[[int, int, Array, Array], None]  # rows lo..hi: the gate, the up


@dataclass(frozen=True)
class Hooks:
    """What a caller sees of one chunk's hidden layer, block of rows by block of rows, on the
    engine's worker threads (each block once, in any order):

    - ``before(lo, hi, pre, None)``: the block's pre-activation (its bias added), before the
      activation;
    - ``after(lo, hi, a, u)``: the activated gate ``a`` and the up projection ``u`` (None
      without a gate) before they multiply; it may change both in place;
    - ``gate(lo, hi, a, u)``: in a gated FFN, done instead of the multiply ``a *= u``; it
      leaves the block's hidden values in ``a`` (``u`` is then free);
    - ``up``: a (rows, d_ff) array that receives the up projection instead of the engine's
      buffer."""

    before: Visit | None = None
    after: Visit | None = None
    gate: Gate | None = None
    up: Array | None = None


NO_HOOKS = Hooks()


class Watch:
    """A caller's watch over the chunks the engine computes (``engine(x, out, watch=...)``):
    :meth:`hooks` gives a chunk's :class:`Hooks` before its hidden layer, :meth:`seen` is
    called once the chunk's output is in ``out``. The engine owns the chunking: a watch sees
    the chunks a plain call computes, so its FFN has the plain call's bits."""

    def hooks(self, x: Array) -> Hooks:
        """The hooks of the chunk ``x`` (its rows, contiguous, in the engine's dtype)."""
        return NO_HOOKS

    def seen(self, x: Array, out: Array) -> None:
        """The chunk ``x`` has its FFN output in ``out``."""


def down(h: Array, p: ExpertWeights, out: Array) -> None:
    """The down projection of the hidden layer ``h`` into ``out``: h W2 + b2."""
    np.matmul(h, p.w2, out=out)  # (n, f) -> (n, d)
    if p.b2 is not None:
        np.add(out, p.b2, out=out)


# ---------------------------------------------------------------------------------------------
# The engine.

DEFAULT_CHUNK_ELEMENTS = 1 << 23  # hidden-buffer elements per chunk: big products are fastest
BLOCK_BYTES = 1 << 19  # elementwise work goes block by block through the core's cache


def default_chunk_tokens(d_ff: int) -> int:
    """Tokens per chunk: a hidden buffer of about 8M elements, 256 to 8192 tokens."""
    return int(min(8192, max(256, DEFAULT_CHUNK_ELEMENTS // d_ff)))


def _blocks(rows: int, cols: int, itemsize: int) -> list[tuple[int, int]]:
    step = max(1, BLOCK_BYTES // (cols * itemsize))
    return [(lo, min(lo + step, rows)) for lo in range(0, rows, step)]


def _in_parallel(part: Callable[[int, int, int], None], rows: int, cols: int,
                 itemsize: int) -> None:
    """Run ``part(lo, hi, worker)`` over cache-sized row blocks, on every core.

    A multi-pass activation over a block that fits in the core's cache costs a fraction of the
    same passes over the whole hidden buffer. NumPy's ufuncs are single-threaded but release
    the GIL, so workers run side by side, as BLAS does; each has its own scratch buffers.
    """
    each_in_parallel(_blocks(rows, cols, itemsize), lambda block, worker: part(*block, worker))


class Engine:
    """The FFN as a function of token matrices, over chunks with buffers reused between them.

    ``ffn(x)`` takes (tokens, d_model) and returns (tokens, d_model) in the weights' dtype;
    ``ffn.chunk(x, out)`` does one chunk into ``out``. The caller's arrays are never modified.
    """

    def __init__(self, weights: Weights, act: Activation | str,
                 chunk_tokens: int | None = None) -> None:
        self.weights, self.act = weights, as_activation(act)
        self._inplace, self._scratch_count = _INPLACE[self.act.name]
        self.d_model, self.d_ff = weights_shape(weights)
        self.dtype = weights_dtype(weights)
        self.chunk_tokens = chunk_tokens or default_chunk_tokens(self.d_ff)
        self._buffers: dict[str, Array] = {}
        self.capacity_left: list[int] | None = None  # capped experts: places left

    def begin(self, n_tokens: int) -> Engine:
        """Start an input of ``n_tokens`` that will come chunk by chunk: an expert capacity
        is then that of the whole input, as ``moe_ffn`` on all of it, whatever the chunks."""
        p = self.weights
        self.capacity_left = None
        if isinstance(p, MoEWeights) and (cap := capacity(p, n_tokens)) is not None:
            self.capacity_left = [cap] * len(p.experts)
        return self

    def resume(self, left: list[int] | None) -> Engine:
        """Go on with a part of a longer input (a shard of a job): ``left`` is the places each
        expert still has when the part starts (None: no capacity)."""
        self.capacity_left = list(left) if left is not None else None
        return self

    # -- buffers ------------------------------------------------------------------------------

    def _buffer(self, name: str, rows: int, cols: int) -> Array:
        """A (rows, cols) view of a reusable buffer; grown, never shrunk."""
        buf = self._buffers.get(name)
        if buf is None or buf.shape[0] < rows or buf.shape[1] != cols:
            buf = np.empty((rows, cols), dtype=self.dtype)
            self._buffers[name] = buf
        return buf[:rows]

    def _scratch(self, worker: int, rows: int, cols: int) -> list[Array]:
        """A worker's scratch buffers for one block of rows of a hidden layer ``cols`` wide."""
        return [self._buffer(f"scratch{worker}.{i}/{cols}", rows, cols)
                for i in range(self._scratch_count)]

    # -- one chunk ----------------------------------------------------------------------------

    def hidden(self, x: Array, hooks: Hooks = NO_HOOKS) -> Array:
        """The hidden layer of a chunk of a dense or gated FFN (not a mixture): act(x W1 + b1),
        or act(x W + b) * (x V + c), in the engine's reused buffer (valid until its next
        call), the caller's :class:`Hooks` seeing its blocks."""
        p = self.weights
        if isinstance(p, MoEWeights):
            raise ValueError("a mixture of experts has a hidden layer per expert")
        return self._hidden_chunk(np.ascontiguousarray(x, dtype=self.dtype), p, hooks)

    def _hidden_chunk(self, x: Array, p: ExpertWeights, hooks: Hooks = NO_HOOKS) -> Array:
        """act(x W1 + b1), or act(x W + b) * (x V + c), into the reused hidden buffer."""
        rows, f = x.shape[0], p.w2.shape[0]  # f: d_ff, or a shared expert's own width
        v: Array | None
        if isinstance(p, GatedWeights):
            w, bias, v, up_bias = p.w, p.b, p.v, p.c
        else:
            w, bias, v, up_bias = p.w1, p.b1, None, None
        h = np.matmul(x, w, out=self._buffer(f"hidden/{f}", rows, f))  # (n, d) -> (n, f)
        up_out = hooks.up
        if v is not None and up_out is None:
            up_out = self._buffer(f"up/{f}", rows, f)
        u = np.matmul(x, v, out=up_out) if v is not None else None
        before, after, gate = hooks.before, hooks.after, hooks.gate
        limit = self.act.limit

        def part(lo: int, hi: int, worker: int) -> None:  # bias, activation, gate on a block
            hp = h[lo:hi]
            if bias is not None:
                np.add(hp, bias, out=hp)
            if before is not None:
                before(lo, hi, hp, None)
            if limit is not None:  # gpt-oss: the gate clamped above
                np.minimum(hp, limit, out=hp)
            self._inplace(hp, self._scratch(worker, hi - lo, f), self.act.beta)
            up = u[lo:hi] if u is not None else None
            if up is not None and up_bias is not None:
                np.add(up, up_bias, out=up)
            if up is not None and limit is not None:  # and the up clamped, plus 1
                np.clip(up, -limit, limit, out=up)
                np.add(up, 1, out=up)
            if after is not None:
                after(lo, hi, hp, up)
            if up is not None:
                if gate is not None:
                    gate(lo, hi, hp, up)
                else:
                    np.multiply(hp, up, out=hp)

        _in_parallel(part, rows, f, self.dtype.itemsize)
        return h

    def _expert_chunk(self, x: Array, p: ExpertWeights, out: Array,
                      watch: Watch | None = None) -> None:
        h = self._hidden_chunk(x, p, watch.hooks(x) if watch is not None else NO_HOOKS)
        down(h, p, out)
        if watch is not None:
            watch.seen(x, out)

    def _moe_chunk(self, x: Array, p: MoEWeights, out: Array) -> None:
        order, gate = route(x, p)
        gate = gate.astype(self.dtype, copy=False)
        on_input = p.rule.scales_input  # Llama 4: the weight scales the expert's input
        out[...] = 0
        for e, rows, slot in dispatch(order, p, self.capacity_left):
            if rows.size == 0:
                continue
            xe = np.take(x, rows, axis=0)  # one gather, a fresh array
            if on_input:
                np.multiply(xe, gate[rows, slot, None], out=xe)
            y = self._buffer("expert_out", rows.size, self.d_model)
            self._expert_chunk(xe, p.experts[e], y)
            if not on_input:
                np.multiply(y, gate[rows, slot, None], out=y)
            out[rows] += y  # rows are distinct: a plain scatter-add
        if p.shared is not None:
            self._shared_chunk(x, p, out)

    def _shared_chunk(self, x: Array, p: MoEWeights, out: Array) -> None:
        """out += the shared experts' output, times sigmoid(x g) where gated."""
        assert p.shared is not None
        y = self._buffer("expert_out", x.shape[0], self.d_model)
        self._expert_chunk(x, p.shared, y)
        if p.shared_gate is not None:
            np.multiply(y, sigmoid(x @ p.shared_gate)[:, None], out=y)  # (n, d) -> (n, 1)
        np.add(out, y, out=out)

    # -- whole inputs -------------------------------------------------------------------------

    def chunk(self, x: Array, out: Array) -> None:
        """FFN of one chunk (rows <= chunk_tokens, any rows really) into ``out``."""
        x = np.ascontiguousarray(x, dtype=self.dtype)
        if isinstance(self.weights, MoEWeights):
            self._moe_chunk(x, self.weights, out)
        else:
            self._expert_chunk(x, self.weights, out)

    def __call__(self, x: Array, out: Array | None = None, watch: Watch | None = None
                 ) -> Array:
        """The FFN of (tokens, d_model) ``x`` into ``out`` (made if None), chunk by chunk of
        ``chunk_tokens``; a dense or gated FFN's chunks seen by ``watch``."""
        if x.ndim != 2 or x.shape[1] != self.d_model:
            raise ValueError(f"expected (tokens, {self.d_model}), got {x.shape}")
        p = self.weights
        if watch is not None and isinstance(p, MoEWeights):
            raise ValueError("a mixture of experts has a hidden layer per expert")
        n = x.shape[0]
        if out is None:
            out = np.empty((n, self.d_model), dtype=self.dtype)
        step = self.chunk_tokens
        self.begin(n)
        for start in range(0, n, step):
            piece, into = x[start:start + step], out[start:start + step]
            if isinstance(p, MoEWeights):
                self.chunk(piece, into)
            else:
                self._expert_chunk(np.ascontiguousarray(piece, dtype=self.dtype), p, into, watch)
        self.capacity_left = None
        return out
