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
    Calling it applies the plain formula; the engine looks up its in-place version by name.
    ``limit``: gpt-oss's clamped SwiGLU (silu with beta = its alpha 1.702): the gate clamped
    to at most ``limit`` before the activation, the up projection to [-limit, limit] and
    then 1 added (:meth:`up`)."""

    name: str
    beta: float = 1.0
    limit: float | None = None

    def __post_init__(self) -> None:
        if self.name not in _FORMULAS:
            raise ValueError(f"unknown activation {self.name!r}; known: {', '.join(ACTIVATIONS)}")

    def __call__(self, x: Array) -> Array:
        if self.limit is not None:
            x = np.minimum(x, self.limit)
        return _FORMULAS[self.name](x, self.beta)

    def up(self, u: Array) -> Array:
        """The up projection as the activated gate multiplies it: ``u``, or with ``limit``
        clamp(u, -limit, limit) + 1 (gpt-oss)."""
        return u if self.limit is None else np.clip(u, -self.limit, self.limit) + 1


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


SCORES = ("softmax", "sigmoid")
GROUP_SCORES = ("top2", "max")


@dataclass(frozen=True)
class Routing:
    """How a router turns its logits into each token's chosen experts and their weights.

    - ``score``: softmax over all experts (Mixtral, Qwen, OLMoE, DeepSeek-V2) or an
      independent sigmoid per expert (DeepSeek-V3, GLM-4.5, Llama 4);
    - ``over_chosen``: the weights are a softmax over the chosen logits only (gpt-oss); the
      same as a softmax over all experts renormalised, computed the way gpt-oss does;
    - ``renormalise``: the chosen weights divided by their sum (``norm_topk_prob``);
    - ``groups``/``top_groups``: group-limited top-k: the experts fall into ``groups`` equal
      groups, only the ``top_groups`` best groups are chosen from, a group scored by
      ``group_score``: ``top2`` the sum of its two best scores (DeepSeek-V3), ``max`` its
      best (DeepSeek-V2's group_limited_greedy);
    - ``scale``: ``routed_scaling_factor``, multiplying the weights last;
    - ``scales_input``: the weight multiplies the expert's input, not its output (Llama 4).

    A score-correction bias (``MoEWeights.choice_bias``) is added to the scores for choosing
    only. Ties go to the lower expert index (and group index)."""

    score: str = "softmax"
    over_chosen: bool = False
    renormalise: bool = True
    groups: int = 1
    top_groups: int = 1
    group_score: str = "top2"
    scale: float = 1.0
    scales_input: bool = False

    def __post_init__(self) -> None:
        if self.score not in SCORES or self.group_score not in GROUP_SCORES:
            raise ValueError(f"unknown routing score {self.score!r} or group score "
                             f"{self.group_score!r}")
        if self.groups < 1 or not 1 <= self.top_groups <= self.groups:
            raise ValueError(f"expected 1 <= top_groups <= groups, got {self.top_groups} of "
                             f"{self.groups}")

    def describe(self, top_k: int | None = None, biased: bool = False) -> str:
        """A short phrase for reports: ``softmax top-2, renormalised``, ``sigmoid + bias, 8
        groups top-4, x2.5``."""
        words = [self.score + (" + bias" if biased else "")
                 + (f" top-{top_k}" if top_k is not None else "")]
        if self.over_chosen:
            words.append("softmax over the chosen")
        elif self.renormalise:
            words.append("renormalised")
        if self.groups > 1:
            words.append(f"{self.groups} groups top-{self.top_groups}"
                         + (" by max" if self.group_score == "max" else ""))
        if self.scale != 1.0:
            words.append(f"x{self.scale:g}")
        if self.scales_input:
            words.append("on the expert's input")
        return ", ".join(words)


@dataclass(frozen=True)
class MoEWeights:
    router: Array  # (d_model, experts)
    router_bias: Array | None
    experts: tuple[ExpertWeights, ...]
    top_k: int
    capacity_factor: float | None = None  # tokens past ceil(cf * n * k / E) per expert dropped
    rule: Routing = Routing()  # Mixtral's: softmax top-k, renormalised
    shared: ExpertWeights | None = None  # shared experts (one FFN): every token, weight 1
    shared_gate: Array | None = None  # (d_model,): Qwen2-MoE's sigmoid(x g) on the shared output
    choice_bias: Array | None = None  # (experts,): added to the scores for choosing only

    def describe(self) -> str:
        return self.rule.describe(self.top_k, self.choice_bias is not None)


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
    act = as_activation(act)
    h = act(_affine(x, p.w, p.b)) * act.up(_affine(x, p.v, p.c))  # (n, d_ff)
    return _affine(h, p.w2, p.b2)  # (n, d_ff) -> (n, d_model)


def pre_activation(x: Array, p: ExpertWeights) -> Array:
    """x W1 + b1, or for a gated FFN the gate's x W + b: what the activation is applied to."""
    if isinstance(p, GatedWeights):
        return _affine(x, p.w, p.b)  # (n, d_model) -> (n, d_ff)
    return _affine(x, p.w1, p.b1)


def expert_ffn(x: Array, p: ExpertWeights, act: Activation | str) -> Array:
    return gated_ffn(x, p, act) if isinstance(p, GatedWeights) else dense_ffn(x, p, act)


def router_logits(x: Array, p: MoEWeights) -> Array:
    return _affine(x, p.router, p.router_bias)  # (n, d_model) -> (n, E)


def _softmax(z: Array) -> Array:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _expert_scores(logits: Array, rule: Routing) -> Array:
    """Each expert's score: softmax over all experts, or a sigmoid each."""
    return sigmoid(logits) if rule.score == "sigmoid" else _softmax(logits)


def _best(values: Array, k: int) -> Array:
    """The k largest of each row, best first; ties to the lower index."""
    return np.argsort(-values, axis=1, kind="stable")[:, :k]


def _in_top_groups(choice: Array, rule: Routing) -> Array:
    """Group-limited top-k: the choice scores with every expert outside the token's
    ``top_groups`` best groups set to -inf. A group's score is the sum of its two best
    (DeepSeek-V3) or its best (DeepSeek-V2)."""
    n, experts = choice.shape
    grouped = choice.reshape(n, rule.groups, experts // rule.groups)  # (n, G, E / G)
    if rule.group_score == "max":
        group = grouped.max(axis=2)
    else:
        group = -np.sort(-grouped, axis=2)[:, :, :2].sum(axis=2)
    keep = np.zeros((n, rule.groups), dtype=bool)
    np.put_along_axis(keep, _best(group, rule.top_groups), True, axis=1)
    return np.where(np.repeat(keep, experts // rule.groups, axis=1), choice, -np.inf)


def _chosen_weights(logits: Array, scores: Array, order: Array, rule: Routing) -> Array:
    """The weight each chosen expert adds with: its score, or a softmax over the chosen
    logits; renormalised to sum 1 when the rule says; times the scaling factor. A softmax
    renormalised is the softmax over the chosen logits, computed so (no underflow)."""
    if rule.over_chosen or (rule.score == "softmax" and rule.renormalise):
        weights = _softmax(np.take_along_axis(logits, order, axis=1))
    else:
        weights = np.take_along_axis(scores, order, axis=1)
        if rule.renormalise:
            weights = weights / weights.sum(axis=1, keepdims=True)
    return weights * rule.scale if rule.scale != 1.0 else weights


def route(x: Array, p: MoEWeights) -> tuple[Array, Array]:
    """Per token: the chosen experts (n, k), best first, and the weight each adds with (n, k),
    by ``p.rule`` (:class:`Routing`): scores, the score-correction bias added for choosing,
    the best groups, the top k of them (ties to the lower expert index), their weights."""
    logits = router_logits(x, p)
    scores = _expert_scores(logits, p.rule)  # (n, E)
    # scores rise with the logits: without a bias or sums of scores, choose on the logits,
    # which never round two experts to one score (a softmax's underflow, a sigmoid's 1.0)
    by_logits = p.choice_bias is None and (p.rule.groups == 1 or p.rule.group_score == "max")
    choice = logits if by_logits else scores if p.choice_bias is None else \
        scores + p.choice_bias
    if p.rule.groups > 1:
        choice = _in_top_groups(choice, p.rule)
    order = _best(choice, p.top_k)  # (n, k)
    return order, _chosen_weights(logits, scores, order, p.rule)


def scores(x: Array, p: MoEWeights) -> Array:
    """The routing distribution over all experts (n, E), each row summing to 1: the softmax of
    the logits, or the sigmoid scores divided by their sum."""
    s = _expert_scores(router_logits(x, p), p.rule)
    return s if p.rule.score == "softmax" else s / s.sum(axis=1, keepdims=True)


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


def shared_ffn(x: Array, p: MoEWeights, act: Activation | str) -> Array | None:
    """The shared experts' output (n, d_model), scaled by sigmoid(x g) where gated; None
    without shared experts."""
    if p.shared is None:
        return None
    y = expert_ffn(x, p.shared, act)
    if p.shared_gate is not None:
        y *= sigmoid(x @ p.shared_gate)[:, None]  # (n, d_model) -> (n, 1)
    return y


def moe_ffn(x: Array, p: MoEWeights, act: Activation | str) -> Array:
    """Each token's chosen experts, weighted (the weight on the expert's output, or on its
    input for Llama 4's rule), plus the shared experts; grouped by expert: one gather, one
    product, one scatter-add per expert. With a capacity, an expert takes tokens in order
    until full."""
    act = as_activation(act)
    order, gate = route(x, p)
    out = np.zeros_like(x, shape=(x.shape[0], weights_shape(p)[0]))
    for e, rows, slot in dispatch(order, p):
        if not rows.size:
            continue
        w = gate[rows, slot, None]
        if p.rule.scales_input:
            out[rows] += expert_ffn(x[rows] * w, p.experts[e], act)
        else:
            out[rows] += w * expert_ffn(x[rows], p.experts[e], act)
    shared = shared_ffn(x, p, act)
    if shared is not None:
        out += shared
    return out


def ffn(x: Array, p: Weights, act: Activation | str) -> Array:
    """The FFN of any kind on a (tokens, d_model) matrix, plainly."""
    if isinstance(p, MoEWeights):
        return moe_ffn(x, p, act)
    return expert_ffn(x, p, act)
