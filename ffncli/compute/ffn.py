"""The FFN math: activations, the dense FFN, the gated (GLU) FFN and the mixture of experts.

Row vectors, weights stored ``[in, out]``, exactly as in the NumPy lesson::

    ffn(x) = act(x @ w1 + b1) @ w2 + b2                       # dense
    ffn(x) = (act(x @ w + b) * (x @ v + c)) @ w2 + b2         # gated: W is activated, V is not

Each formula is a plain function (``dense_ffn``, ``gated_ffn``, ``moe_ffn``) that reads like
the paper and is the reference for the tests. ``ffncli.compute.engine.Engine`` computes the same
math fast, over chunks of tokens with preallocated buffers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ffncli.specs.spec import ACTIVATIONS

Array = np.ndarray

# ---------------------------------------------------------------------------------------------
# Activations: the plain formulas.

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT2 = 1.0 / math.sqrt(2.0)


def relu(x: Array) -> Array:
    return np.maximum(x, 0)


def gelu(x: Array) -> Array:
    """Exact GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1 + erf(x * INV_SQRT2))


def gelu_tanh(x: Array) -> Array:
    """GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def sigmoid(x: Array) -> Array:
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def silu(x: Array, beta: float = 1.0) -> Array:
    """Swish_beta(x) = x * sigmoid(beta x); beta = 1 is SiLU."""
    return x * sigmoid(beta * x)


def identity(x: Array) -> Array:
    return x


# One formula per name of spec.ACTIVATIONS (the one list of names): (x, beta) -> act(x).
_FORMULAS: dict[str, Callable[[Array, float], Array]] = {
    "relu": lambda x, beta: relu(x),
    "gelu": lambda x, beta: gelu(x),
    "gelu_tanh": lambda x, beta: gelu_tanh(x),
    "silu": silu,
    "swish": silu,
    "sigmoid": lambda x, beta: sigmoid(x),
    "identity": lambda x, beta: identity(x),
}
assert tuple(_FORMULAS) == ACTIVATIONS, "spec.ACTIVATIONS and the formulas disagree"


@dataclass(frozen=True)
class Activation:
    """An activation resolved once: its name (one of ``spec.ACTIVATIONS``) and Swish's beta.
    Calling it applies the plain formula; the engine looks up its in-place version by name."""

    name: str
    beta: float = 1.0

    def __post_init__(self) -> None:
        if self.name not in _FORMULAS:
            raise ValueError(f"unknown activation {self.name!r}; known: {', '.join(ACTIVATIONS)}")

    def __call__(self, x: Array) -> Array:
        return _FORMULAS[self.name](x, self.beta)


def as_activation(act: Activation | str) -> Activation:
    """A name (beta 1) or an :class:`Activation`, as an :class:`Activation`."""
    return act if isinstance(act, Activation) else Activation(act)

# ---------------------------------------------------------------------------------------------
# erf, vectorised. The plain path: a Chebyshev series fitted to math.erf on [0, 6] and
# evaluated in float64 (|error| < 1e-14; erf(6) rounds to 1). The engine's float32 GELU uses
# Abramowitz & Stegun 7.1.26 in place (|error| <= 1.5e-7 in exact arithmetic, ~5e-7 evaluated
# in float32), which is about three times cheaper.

AS_P = 0.3275911
AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
AS_K = AS_P * INV_SQRT2  # t = 1 / (1 + p z) with z = |x| / sqrt 2


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


ExpertWeights = DenseWeights | GatedWeights


@dataclass(frozen=True)
class MoEWeights:
    router: Array  # (d_model, experts)
    router_bias: Array | None
    experts: tuple[ExpertWeights, ...]
    top_k: int
    capacity_factor: float | None = None  # tokens past ceil(cf * n * k / E) per expert dropped


Weights = DenseWeights | GatedWeights | MoEWeights


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


def dense_ffn(x: Array, p: DenseWeights, act: Activation | str) -> Array:
    h = as_activation(act)(_affine(x, p.w1, p.b1))  # (n, d_model) -> (n, d_ff)
    return _affine(h, p.w2, p.b2)  # (n, d_ff) -> (n, d_model)


def gated_ffn(x: Array, p: GatedWeights, act: Activation | str) -> Array:
    h = as_activation(act)(_affine(x, p.w, p.b)) * _affine(x, p.v, p.c)  # (n, d_ff)
    return _affine(h, p.w2, p.b2)  # (n, d_ff) -> (n, d_model)


def pre_activation(x: Array, p: ExpertWeights) -> Array:
    """x W1 + b1, or for a gated FFN the gate's x W + b: what the activation is applied to."""
    if isinstance(p, GatedWeights):
        return _affine(x, p.w, p.b)  # (n, d_model) -> (n, d_ff)
    return _affine(x, p.w1, p.b1)


def expert_ffn(x: Array, p: ExpertWeights, act: Activation | str) -> Array:
    return gated_ffn(x, p, act) if isinstance(p, GatedWeights) else dense_ffn(x, p, act)


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
             room: list[int] | None = None) -> list[tuple[int, Array, Array]]:
    """Per expert that was chosen: (expert, the tokens that chose it in token order, and in
    which of their k slots). With a capacity, an expert takes tokens in order until full;
    the rest are dropped. Experts no token chose are left out, so the work follows the
    tokens, not the number of experts.

    ``room``: for an input taken chunk by chunk, the places each expert still has (from
    :func:`capacity` of the whole input), used up here; without it, these tokens are the
    whole input."""
    if room is None:
        cap = capacity(p, order.shape[0])
        room = [cap] * len(p.experts) if cap is not None else None
    k = order.shape[1]
    flat = order.ravel()  # (n, k) -> (n k,): token-major, so sorting keeps token order
    by_expert = np.argsort(flat, kind="stable")
    cuts = np.flatnonzero(np.diff(flat[by_expert])) + 1
    groups = []
    for picks in np.split(by_expert, cuts) if flat.size else []:
        e = int(flat[picks[0]])
        if room is not None:
            picks = picks[:max(room[e], 0)]
            room[e] -= picks.size
        groups.append((e, picks // k, picks % k))
    return groups


def moe_ffn(x: Array, p: MoEWeights, act: Activation | str) -> Array:
    """Each token's chosen experts, weighted; grouped by expert: one gather, one product, one
    scatter-add per expert. With a capacity, an expert takes tokens in order until full."""
    act = as_activation(act)
    order, gate = route(x, p)
    out = np.zeros_like(x, shape=(x.shape[0], weights_shape(p)[0]))
    for e, rows, slot in dispatch(order, p):
        if rows.size:
            out[rows] += gate[rows, slot, None] * expert_ffn(x[rows], p.experts[e], act)
    return out


def ffn(x: Array, p: Weights, act: Activation | str) -> Array:
    """The FFN of any kind on a (tokens, d_model) matrix, plainly."""
    if isinstance(p, MoEWeights):
        return moe_ffn(x, p, act)
    return expert_ffn(x, p, act)
