"""The FFN math: activations, the dense FFN, the gated (GLU) FFN and the mixture of experts.

Row vectors, weights stored ``[in, out]``, exactly as in the NumPy lesson::

    ffn(x) = act(x @ w1 + b1) @ w2 + b2                       # dense
    ffn(x) = (act(x @ w + b) * (x @ v + c)) @ w2 + b2         # gated: W is activated, V is not

Each formula has a plain function (``dense_ffn``, ``gated_ffn``, ``moe_ffn``) that reads like
the paper and is the reference for the tests. :class:`Ffn` is the engine the commands use: the
same math over chunks of tokens with preallocated buffers, biases and activations applied in
place, so the time goes to the matrix products (see ``benchmarks/bench_ffn.py``).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

Array = np.ndarray

# ---------------------------------------------------------------------------------------------
# Activations: the plain formulas.

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def relu(x: Array) -> Array:
    return np.maximum(x, 0)


def gelu(x: Array) -> Array:
    """Exact GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1 + erf(x * _INV_SQRT2))


def gelu_tanh(x: Array) -> Array:
    """GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def sigmoid(x: Array) -> Array:
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def silu(x: Array, beta: float = 1.0) -> Array:
    """Swish_beta(x) = x * sigmoid(beta x); beta = 1 is SiLU."""
    return x * sigmoid(beta * x)


def identity(x: Array) -> Array:
    return x


def activate(x: Array, name: str, beta: float = 1.0) -> Array:
    if name in ("silu", "swish"):
        return silu(x, beta)
    return _PLAIN[name](x)


_PLAIN: dict[str, Callable[[Array], Array]] = {
    "relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh, "sigmoid": sigmoid, "identity": identity,
}

# ---------------------------------------------------------------------------------------------
# erf, vectorised. The plain path: a Chebyshev series fitted to math.erf on [0, 6] and
# evaluated in float64 (|error| < 1e-14; erf(6) rounds to 1). The engine's float32 GELU uses
# Abramowitz & Stegun 7.1.26 in place (|error| <= 1.5e-7 in exact arithmetic, ~5e-7 evaluated
# in float32), which is about three times cheaper.

_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_AS_K = _AS_P * _INV_SQRT2  # t = 1 / (1 + p z) with z = |x| / sqrt 2


@functools.cache
def _erf_chebyshev() -> np.ndarray:
    nodes = 3 + 3 * np.cos(np.pi * (np.arange(2000) + 0.5) / 2000)
    values = np.array([math.erf(v) for v in nodes])
    return np.polynomial.chebyshev.chebfit((nodes - 3) / 3, values, 40)


def erf(x: Array) -> Array:
    """erf computed in float64 (|error| < 1e-14), returned in the input's float dtype."""
    x = np.asarray(x)
    z = np.minimum(np.abs(x.astype(np.float64, copy=False)), 6.0)
    result = np.copysign(np.polynomial.chebyshev.chebval((z - 3) / 3, _erf_chebyshev()), x)
    return result.astype(x.dtype if x.dtype.kind == "f" else np.float64, copy=False)


# ---------------------------------------------------------------------------------------------
# Weights.


@dataclass(frozen=True)
class DenseWeights:
    w1: Array  # (d_model, d_ff)
    b1: Array | None  # (d_ff,)
    w2: Array  # (d_ff, d_model)
    b2: Array | None  # (d_model,)


@dataclass(frozen=True)
class GatedWeights:
    w: Array  # (d_model, d_ff), activated (the gate)
    b: Array | None
    v: Array  # (d_model, d_ff), linear (the "up" projection)
    c: Array | None
    w2: Array  # (d_ff, d_model)
    b2: Array | None


ExpertWeights = Union[DenseWeights, GatedWeights]


@dataclass(frozen=True)
class MoEWeights:
    router: Array  # (d_model, experts)
    router_bias: Array | None
    experts: tuple[ExpertWeights, ...]
    top_k: int
    capacity_factor: float | None = None  # tokens past ceil(cf * n * k / E) per expert dropped


Weights = Union[DenseWeights, GatedWeights, MoEWeights]


def weights_shape(weights: Weights) -> tuple[int, int]:
    """(d_model, d_ff) of the weights."""
    first = weights.experts[0] if isinstance(weights, MoEWeights) else weights
    return first.w2.shape[1], first.w2.shape[0]


def weights_dtype(weights: Weights) -> np.dtype:
    first = weights.experts[0] if isinstance(weights, MoEWeights) else weights
    return first.w2.dtype


# ---------------------------------------------------------------------------------------------
# The formulas, plainly: the reference the engine is tested against.


def _affine(x: Array, w: Array, b: Array | None) -> Array:
    y = x @ w  # a fresh array: adding the bias in place saves a second one
    if b is not None:
        y += b
    return y


def dense_ffn(x: Array, p: DenseWeights, act: str, beta: float = 1.0) -> Array:
    h = activate(_affine(x, p.w1, p.b1), act, beta)  # (n, d_model) -> (n, d_ff)
    return _affine(h, p.w2, p.b2)  # (n, d_ff) -> (n, d_model)


def gated_ffn(x: Array, p: GatedWeights, act: str, beta: float = 1.0) -> Array:
    h = activate(_affine(x, p.w, p.b), act, beta) * _affine(x, p.v, p.c)  # (n, d_ff)
    return _affine(h, p.w2, p.b2)  # (n, d_ff) -> (n, d_model)


def pre_activation(x: Array, p: ExpertWeights) -> Array:
    """x W1 + b1, or for a gated FFN the gate's x W + b: what the activation is applied to."""
    if isinstance(p, GatedWeights):
        return _affine(x, p.w, p.b)  # (n, d_model) -> (n, d_ff)
    return _affine(x, p.w1, p.b1)


def expert_ffn(x: Array, p: ExpertWeights, act: str, beta: float = 1.0) -> Array:
    return gated_ffn(x, p, act, beta) if isinstance(p, GatedWeights) else dense_ffn(x, p, act,
                                                                                   beta)


def route(x: Array, p: MoEWeights) -> tuple[Array, Array]:
    """Per token: the top-k experts (n, k) and their weights (n, k), summing to 1.

    Softmax over all experts, keep the k largest, renormalise (the Mixtral convention; the
    same as a softmax over the k chosen logits). Ties go to the lower expert index.
    """
    logits = _affine(x, p.router, p.router_bias)  # (n, d_model) -> (n, E)
    order = np.argsort(-logits, axis=1, kind="stable")[:, : p.top_k]  # (n, k)
    chosen = np.take_along_axis(logits, order, axis=1)
    weights = np.exp(chosen - chosen[:, :1])  # the largest first: no overflow
    return order, weights / weights.sum(axis=1, keepdims=True)


def capacity(p: MoEWeights, n_tokens: int) -> int | None:
    if p.capacity_factor is None:
        return None
    return math.ceil(p.capacity_factor * n_tokens * p.top_k / len(p.experts))


def dispatch(order: Array, p: MoEWeights,
             room: list[int] | None = None) -> list[tuple[Array, Array]]:
    """Per expert: the tokens that chose it, in token order, and in which of their k slots.
    With a capacity, an expert takes tokens in order until full; the rest are dropped.

    ``room``: for an input taken chunk by chunk, the places each expert still has (from
    :func:`capacity` of the whole input), used up here; without it, these tokens are the
    whole input."""
    if room is None:
        cap = capacity(p, order.shape[0])
        room = [cap] * len(p.experts) if cap is not None else None
    groups = []
    for e in range(len(p.experts)):
        rows, slot = np.nonzero(order == e)  # (n, k) -> tokens that chose e, their slot
        if room is not None:
            rows, slot = rows[:room[e]], slot[:room[e]]
            room[e] -= rows.size
        groups.append((rows, slot))
    return groups


def moe_ffn(x: Array, p: MoEWeights, act: str, beta: float = 1.0) -> Array:
    """Each token's chosen experts, weighted; grouped by expert: one gather, one product, one
    scatter-add per expert. With a capacity, an expert takes tokens in order until full."""
    order, gate = route(x, p)
    out = np.zeros_like(x, shape=(x.shape[0], weights_shape(p)[0]))
    for expert, (rows, slot) in zip(p.experts, dispatch(order, p)):
        if rows.size:
            out[rows] += gate[rows, slot, None] * expert_ffn(x[rows], expert, act, beta)
    return out


def ffn(x: Array, p: Weights, act: str, beta: float = 1.0) -> Array:
    """The FFN of any kind on a (tokens, d_model) matrix, plainly."""
    if isinstance(p, MoEWeights):
        return moe_ffn(x, p, act, beta)
    return expert_ffn(x, p, act, beta)


# ---------------------------------------------------------------------------------------------
# In-place activations for the engine: they overwrite ``h`` and use only the scratch buffers
# they are given (``SCRATCH[name]`` of them, each shaped like ``h``).


@functools.lru_cache(maxsize=16)
def _zeros_row(cols: int, dtype: np.dtype) -> Array:
    row = np.zeros(cols, dtype=dtype)
    row.flags.writeable = False
    return row


def _relu_(h: Array, s: list[Array], beta: float) -> None:
    # A row of zeros, not the scalar 0: NumPy's maximum against an array is ~2x faster here.
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
    np.multiply(u, -2 * 0.044715 * _SQRT_2_OVER_PI, out=u)
    np.add(u, -2 * _SQRT_2_OVER_PI, out=u)
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
    np.add(ax, 1 / _AS_K, out=t)
    np.divide(1 / _AS_K, t, out=t)  # t = 1 / (1 + k |x|) = (1/k) / (1/k + |x|): two passes
    np.multiply(t, 0.5 * _AS_A[4], out=acc)
    for coef in _AS_A[3::-1]:  # Horner: acc = t P(t) / 2
        np.add(acc, 0.5 * coef, out=acc)
        np.multiply(acc, t, out=acc)
    np.multiply(ax, -0.5, out=t)  # t no longer needed
    np.multiply(t, ax, out=t)
    np.exp(t, out=t)  # exp(-x^2 / 2)
    np.multiply(acc, t, out=acc)  # erfc(|x| / sqrt 2) / 2
    np.multiply(acc, ax, out=acc)
    _relu_(h, s, beta)
    np.subtract(h, acc, out=h)


_INPLACE: dict[str, Callable[[Array, list[Array], float], None]] = {
    "relu": _relu_, "identity": _identity_, "sigmoid": _sigmoid_, "silu": _silu_,
    "swish": _silu_, "gelu_tanh": _gelu_tanh_, "gelu": _gelu_,
}
SCRATCH = {"relu": 0, "identity": 0, "sigmoid": 0, "silu": 1, "swish": 1, "gelu_tanh": 1,
           "gelu": 3}


def activate_inplace(h: Array, name: str, beta: float = 1.0) -> None:
    """The engine's activation on ``h``, overwriting it (scratch allocated here)."""
    _INPLACE[name](h, [np.empty_like(h) for _ in range(SCRATCH[name])], beta)

# ---------------------------------------------------------------------------------------------
# The engine.

DEFAULT_CHUNK_ELEMENTS = 1 << 23  # hidden-buffer elements per chunk: big products are fastest
BLOCK_BYTES = 1 << 19  # elementwise work goes block by block through the core's cache
_THREADS = max(1, min(os.cpu_count() or 1, 8))
_pool: ThreadPoolExecutor | None = None


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
    the GIL, so workers run side by side, as BLAS does; each has its own scratch buffers and
    takes the next block when it is done with one (a shared iterator: a core slowed by another
    process does less of the work, instead of holding everyone up at the end).
    """
    global _pool
    blocks = _blocks(rows, cols, itemsize)
    workers = min(_THREADS, len(blocks))
    todo, lock = iter(blocks), threading.Lock()  # the lock: safe without a GIL too

    def run(worker: int) -> None:
        while True:
            with lock:
                block = next(todo, None)
            if block is None:
                return
            part(*block, worker)

    if workers == 1:
        run(0)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="ffncli")
    futures = [_pool.submit(run, w) for w in range(1, workers)]
    run(0)  # the calling thread takes a share rather than wait
    for future in futures:
        future.result()


class Ffn:
    """The FFN as a function of token matrices, over chunks with buffers reused between them.

    ``ffn(x)`` takes (tokens, d_model) and returns (tokens, d_model) in the weights' dtype;
    ``ffn.chunk(x, out)`` does one chunk into ``out``. The caller's arrays are never modified.
    """

    def __init__(self, weights: Weights, activation: str, beta: float = 1.0,
                 chunk_tokens: int | None = None) -> None:
        if activation not in _INPLACE:
            raise ValueError(f"unknown activation {activation!r}")
        self.weights, self.activation, self.beta = weights, activation, beta
        self.d_model, self.d_ff = weights_shape(weights)
        self.dtype = weights_dtype(weights)
        self.chunk_tokens = chunk_tokens or default_chunk_tokens(self.d_ff)
        self._buffers: dict[str, Array] = {}
        self.capacity_left: list[int] | None = None  # capped experts: places left

    def begin(self, n_tokens: int) -> "Ffn":
        """Start an input of ``n_tokens`` that will come chunk by chunk: an expert capacity
        is then that of the whole input, as ``moe_ffn`` on all of it, whatever the chunks."""
        p = self.weights
        cap = capacity(p, n_tokens) if isinstance(p, MoEWeights) else None
        self.capacity_left = [cap] * len(p.experts) if cap is not None else None
        return self

    # -- buffers ------------------------------------------------------------------------------

    def _buffer(self, name: str, rows: int, cols: int) -> Array:
        """A (rows, cols) view of a reusable buffer; grown, never shrunk."""
        buf = self._buffers.get(name)
        if buf is None or buf.shape[0] < rows or buf.shape[1] != cols:
            buf = np.empty((rows, cols), dtype=self.dtype)
            self._buffers[name] = buf
        return buf[:rows]

    def _scratch(self, worker: int, rows: int) -> list[Array]:
        """A worker's scratch buffers for one block of rows."""
        return [self._buffer(f"scratch{worker}.{i}", rows, self.d_ff)
                for i in range(SCRATCH[self.activation])]

    # -- one chunk ----------------------------------------------------------------------------

    def _hidden_chunk(self, x: Array, p: ExpertWeights) -> Array:
        """act(x W1 + b1), or act(x W + b) * (x V + c), into the reused hidden buffer."""
        rows = x.shape[0]
        gated = isinstance(p, GatedWeights)
        h = np.matmul(x, p.w if gated else p.w1,
                      out=self._buffer("hidden", rows, self.d_ff))  # (n, d) -> (n, f)
        u = np.matmul(x, p.v, out=self._buffer("up", rows, self.d_ff)) if gated else None
        bias = p.b if gated else p.b1
        up_bias = p.c if gated else None

        def part(lo: int, hi: int, worker: int) -> None:  # bias, activation, gate on a block
            hp = h[lo:hi]
            if bias is not None:
                np.add(hp, bias, out=hp)
            _INPLACE[self.activation](hp, self._scratch(worker, hi - lo), self.beta)
            if u is not None:
                up = u[lo:hi]
                if up_bias is not None:
                    np.add(up, up_bias, out=up)
                np.multiply(hp, up, out=hp)

        _in_parallel(part, rows, self.d_ff, self.dtype.itemsize)
        return h

    def _expert_chunk(self, x: Array, p: ExpertWeights, out: Array) -> None:
        h = self._hidden_chunk(x, p)
        np.matmul(h, p.w2, out=out)  # (n, f) -> (n, d)
        if p.b2 is not None:
            np.add(out, p.b2, out=out)

    def _moe_chunk(self, x: Array, p: MoEWeights, out: Array) -> None:
        order, gate = route(x, p)
        gate = gate.astype(self.dtype, copy=False)
        out[...] = 0
        for expert, (rows, slot) in zip(p.experts, dispatch(order, p, self.capacity_left)):
            if rows.size == 0:
                continue
            y = self._buffer("expert_out", rows.size, self.d_model)
            self._expert_chunk(np.take(x, rows, axis=0), expert, y)  # one gather
            np.multiply(y, gate[rows, slot, None], out=y)
            out[rows] += y  # rows are distinct: a plain scatter-add

    # -- whole inputs -------------------------------------------------------------------------

    def chunk(self, x: Array, out: Array) -> None:
        """FFN of one chunk (rows <= chunk_tokens, any rows really) into ``out``."""
        x = np.ascontiguousarray(x, dtype=self.dtype)
        if isinstance(self.weights, MoEWeights):
            self._moe_chunk(x, self.weights, out)
        else:
            self._expert_chunk(x, self.weights, out)

    def __call__(self, x: Array, out: Array | None = None) -> Array:
        if x.ndim != 2 or x.shape[1] != self.d_model:
            raise ValueError(f"expected (tokens, {self.d_model}), got {x.shape}")
        n = x.shape[0]
        if out is None:
            out = np.empty((n, self.d_model), dtype=self.dtype)
        step = self.chunk_tokens
        self.begin(n)
        for start in range(0, n, step):
            self.chunk(x[start:start + step], out[start:start + step])
        self.capacity_left = None
        return out
