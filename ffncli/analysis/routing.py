"""Where a mixture of experts sends its tokens: routing statistics as mergeable sums.

One :class:`RoutingCounts` per MoE layer is fed, chunk after chunk, with the experts each
token chose (``(tokens, top_k)`` ids, in the router's order), the token's position in its
sequence and, when known, the chosen experts' weights and the router's scores over all experts.
It keeps sums only (integer counts where the statistic allows), so two accumulators over two
halves of a text merge into exactly the accumulator over the whole (:meth:`RoutingCounts.merge`).
:class:`LayerTransitions` counts, the same way, which expert layer l+1 chose after layer l's.

The statistics are small functions of those sums, one per formula; docs/routing.md writes
them out with their sources. Shared experts (always active, outside the router) are counted
apart: they see every token. The chosen experts are taken as given: ties between equal scores
are the router's business (the engine's ``route`` gives the lower index first; torch.topk does
not promise an order).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ffncli.base.validate import whole
from ffncli.errors import InputError

COVERAGE_PERCENTS = (50, 80, 90, 99)  # the shares of routings the fewest experts carry
TOP_PAIRS = 10  # co-selected pairs a summary lists


# ---------------------------------------------------------------------------------------------
# The input, checked at the edge.


def _shape(a: np.ndarray) -> str:
    return f"{a.dtype} {tuple(a.shape)}"


def check_chosen(chosen: object, experts: int, top_k: int) -> np.ndarray:
    """The chosen experts as int64 (n, top_k): integers, ids from 0 to experts - 1, no expert
    twice in a token's choice, at least one token."""
    if not isinstance(chosen, np.ndarray) or chosen.dtype.kind not in "iu" \
            or chosen.ndim != 2 or chosen.shape[1] != top_k:
        got = _shape(chosen) if isinstance(chosen, np.ndarray) else type(chosen).__name__
        raise InputError(f"chosen experts: expected an integer array (tokens, {top_k}), "
                         f"got {got}")
    if chosen.shape[0] == 0:
        raise InputError("chosen experts: expected at least one token, got 0")
    ids = chosen.astype(np.int64)
    bad = (ids < 0) | (ids >= experts)
    if bad.any():
        t, j = np.argwhere(bad)[0]
        raise InputError(f"chosen experts: expected ids from 0 to {experts - 1}, got "
                         f"{ids[t, j]} (token {t})")
    ordered = np.sort(ids, axis=1)
    twice = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
    if twice.any():
        t = int(np.argmax(twice))
        raise InputError(f"chosen experts: expected {top_k} different experts a token, got "
                         f"{ids[t].tolist()} (token {t})")
    return ids


def check_positions(positions: object, n: int) -> np.ndarray:
    """Each token's position in its sequence, int64 (n,), >= 0."""
    if not isinstance(positions, np.ndarray) or positions.dtype.kind not in "iu" \
            or positions.shape != (n,):
        got = _shape(positions) if isinstance(positions, np.ndarray) \
            else type(positions).__name__
        raise InputError(f"positions: expected an integer array ({n},), got {got}")
    if n and positions.min() < 0:
        raise InputError(f"positions: expected positions >= 0, got {int(positions.min())}")
    return positions.astype(np.int64)


def check_scores(what: str, scores: object, shape: tuple[int, int]) -> np.ndarray:
    """Router weights or scores as float64 of ``shape``: finite, >= 0."""
    if not isinstance(scores, np.ndarray) or scores.dtype.kind != "f" or scores.shape != shape:
        got = _shape(scores) if isinstance(scores, np.ndarray) else type(scores).__name__
        raise InputError(f"{what}: expected a float array {shape}, got {got}")
    values = scores.astype(np.float64)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        t, j = np.argwhere(bad)[0]
        raise InputError(f"{what}: expected finite numbers >= 0, got {values[t, j]} "
                         f"(token {t}, expert {j})")
    return values


def check_probabilities(probs: object, n: int, experts: int) -> np.ndarray:
    """The router's scores over all experts, each row scaled to sum to 1 (softmax
    probabilities unchanged; sigmoid scores divided by their sum)."""
    values = check_scores("routing probabilities", probs, (n, experts))
    sums = values.sum(axis=1, keepdims=True)
    if (sums <= 0).any():
        raise InputError(f"routing probabilities: expected a positive sum a token, got 0 "
                         f"(token {int(np.argmax(sums[:, 0] <= 0))})")
    return values / sums


# ---------------------------------------------------------------------------------------------
# The statistics: one formula each (load = the (E,) routings each expert received).


def ideal_load(load: np.ndarray) -> float:
    """Each expert's share if the routings were even: sum(load) / E = T k / E."""
    return float(load.sum()) / load.size


def load_over_ideal(load: np.ndarray) -> np.ndarray:
    """load_e / (T k / E): 1 for an expert that gets its even share, 0 for a dead one."""
    return load / ideal_load(load)


def coefficient_of_variation(load: np.ndarray) -> float:
    """CV = std(load) / mean(load), the population std (Shazeer et al. 2017 balance
    CV(Importance)^2; 0 when even)."""
    return float(load.std()) / ideal_load(load)


def max_vio(load: np.ndarray) -> float:
    """MaxVio = max_e load_e / mean(load) - 1 (Wang et al. 2024, the auxiliary-loss-free
    balancing of DeepSeek-V3): how far the busiest expert is over its even share."""
    return float(load.max()) / ideal_load(load) - 1.0


def largest_share(load: np.ndarray) -> float:
    """max_e load_e / sum(load): the share of all routings the busiest expert takes."""
    return float(load.max()) / float(load.sum())


def dead_experts(load: np.ndarray) -> list[int]:
    """The experts no token chose: load_e = 0."""
    return np.nonzero(load == 0)[0].tolist()


def entropy(p: np.ndarray) -> np.ndarray:
    """H(p) = -sum_e p_e ln p_e along the last axis, in nats (0 ln 0 = 0)."""
    logs = np.log(p, out=np.zeros_like(p, dtype=np.float64), where=p > 0)
    return -(p * logs).sum(axis=-1)


def load_entropy(load: np.ndarray) -> float:
    """H(load / sum(load)) / ln E: 1 when every expert gets the same share, 0 when one expert
    takes every routing."""
    return float(entropy(load / load.sum())) / math.log(load.size)


def mean_token_entropy(entropy_sum: float, tokens: int, experts: int) -> float:
    """(1/T) sum_t H(p_t) / ln E, p_t the token's router distribution over all E experts:
    near 0 when each token's router is sure, 1 when it cannot tell the experts apart."""
    return entropy_sum / tokens / math.log(experts)


def coverage(load: np.ndarray, percents: Sequence[int] = COVERAGE_PERCENTS) -> dict[int, int]:
    """For each P: the fewest experts carrying P% of the routings, the smallest m with
    sum of the m largest loads >= P/100 * sum(load) (exact: compared in whole numbers)."""
    cum = np.cumsum(np.sort(load)[::-1]) * 100  # (E,) 100 x the m busiest experts' routings
    total = int(load.sum())
    return {p: int(np.searchsorted(cum, p * total, side="left")) + 1 for p in percents}


def neighbour_jaccard(overlaps: np.ndarray) -> float:
    """Mean over neighbouring token pairs of |S_t ∩ S_t+1| / |S_t ∪ S_t+1|, S the chosen
    experts: a pair sharing s of its k experts has Jaccard s / (2k - s), so with c_s the pairs
    sharing s: sum_s c_s s / (2k - s) / sum_s c_s."""
    k = overlaps.size - 1
    s = np.arange(k + 1)
    return float((overlaps * s / (2 * k - s)).sum()) / int(overlaps.sum())


def mean_shared(overlaps: np.ndarray) -> float:
    """Experts a token shares with the one before: sum_s c_s s / sum_s c_s (k^2 / E expected
    for independent even choices)."""
    return float((overlaps * np.arange(overlaps.size)).sum()) / int(overlaps.sum())


@dataclass(frozen=True)
class CoSelected:
    """Expert ``b`` was chosen in ``p`` of the tokens that chose ``a`` (``count`` tokens)."""

    a: int
    b: int
    p: float
    count: int


def co_selection(pairs: np.ndarray, load: np.ndarray, top: int = TOP_PAIRS
                 ) -> list[CoSelected]:
    """The ``top`` pairs a != b by P(b | a) = n_ab / n_a, n_ab the tokens choosing both, n_a
    those choosing a (ties: the more tokens first, then by a, b)."""
    a, b = np.nonzero(pairs)
    p = pairs[a, b] / load[a]
    order = np.lexsort((b, a, -pairs[a, b], -p))[:top]
    return [CoSelected(int(a[i]), int(b[i]), float(p[i]), int(pairs[a[i], b[i]]))
            for i in order]


def switch_balance(load: np.ndarray, prob_sum: np.ndarray, tokens: int) -> float:
    """E sum_e f_e P_e, f_e = load_e / T the share of tokens choosing e, P_e = prob_sum_e / T
    the mean router probability of e (Switch Transformer's balancing loss before its
    coefficient, as transformers' load_balancing_loss_func sums it over the k choices): k when
    even, up to E k when one expert takes everything."""
    return load.size * float((load / tokens * prob_sum / tokens).sum())


def transition_hit_rate(counts: np.ndarray) -> float:
    """sum_a max_b n_ab / T = sum_a P(a) max_b P(b | a), n_ab the tokens whose first choice is
    a at layer l and b at layer l+1: the share of tokens whose next-layer expert is the one
    most often following their expert here (the hit rate of prefetching that one)."""
    return int(counts.max(axis=1).sum()) / int(counts.sum())


def transition_baseline(counts: np.ndarray) -> float:
    """max_b P(b) at layer l+1: the hit rate of always guessing its busiest expert, what
    :func:`transition_hit_rate` is when the layers are independent."""
    return int(counts.sum(axis=0).max()) / int(counts.sum())


def transition_entropy(counts: np.ndarray) -> float:
    """H(B | A) / ln E' = sum_a P(a) H(P(. | a)) / ln E', E' layer l+1's experts: 0 when layer
    l's choice fixes layer l+1's, 1 when the next choice is even whatever this one was."""
    n_a = counts.sum(axis=1)
    seen = n_a > 0
    conditional = entropy(counts[seen] / n_a[seen, None])  # (A,) H(P(. | a))
    return float((n_a[seen] * conditional).sum()) / int(n_a.sum()) / math.log(counts.shape[1])


# ---------------------------------------------------------------------------------------------
# The accumulators.


@dataclass(frozen=True)
class LayerRouting:
    """One layer's routing figures (docs/routing.md defines each)."""

    experts: int
    top_k: int
    shared_experts: int  # always active: each sees every token, outside these figures
    tokens: int
    load: list[int]
    load_over_ideal: list[float]
    coefficient_of_variation: float
    max_vio: float
    largest_share: float
    dead_experts: list[int]
    load_entropy: float
    coverage: dict[int, int]  # percent of routings: the fewest experts carrying it
    neighbour_pairs: int
    neighbour_jaccard: float | None  # None: no two neighbouring tokens
    neighbour_shared: float | None
    co_selected: list[CoSelected]
    importance: list[float] | None  # None: no weights given
    importance_cv: float | None
    token_entropy: float | None  # None: no router probabilities given for every token
    switch_balance: float | None


@dataclass
class RoutingCounts:
    """One MoE layer's routing over tokens, as sums; ``merge`` of two equals one pass over
    both."""

    experts: int
    top_k: int
    shared_experts: int = 0
    tokens: int = 0
    load: np.ndarray = field(init=False)  # (E,) routings each expert received
    pairs: np.ndarray = field(init=False)  # (E, E) tokens choosing both a and b (a != b)
    overlaps: np.ndarray = field(init=False)  # (k + 1,) neighbour pairs sharing s experts
    weighted_tokens: int = 0
    weight_sum: np.ndarray = field(init=False)  # (E,) the chosen weights summed by expert
    scored_tokens: int = 0
    prob_sum: np.ndarray = field(init=False)  # (E,) router probabilities summed
    entropy_sum: float = 0.0  # sum over tokens of H(p_t), nats
    first: tuple[int, np.ndarray] | None = None  # (position, chosen) of the first token and
    last: tuple[int, np.ndarray] | None = None  # the last, to pair neighbours across a merge

    def __post_init__(self) -> None:
        whole("experts", self.experts, minimum=2)
        whole("top_k", self.top_k, maximum=self.experts)
        whole("shared experts", self.shared_experts, minimum=0)
        e = self.experts
        self.load = np.zeros(e, dtype=np.int64)
        self.pairs = np.zeros((e, e), dtype=np.int64)
        self.overlaps = np.zeros(self.top_k + 1, dtype=np.int64)
        self.weight_sum = np.zeros(e)
        self.prob_sum = np.zeros(e)

    def update(self, chosen: np.ndarray, positions: np.ndarray, *,
               weights: np.ndarray | None = None, probs: np.ndarray | None = None) -> None:
        """Add a chunk of consecutive tokens: ``chosen`` (n, k) expert ids, ``positions`` (n,)
        each token's position in its sequence (a neighbour is the token before at the position
        before), ``weights`` (n, k) the chosen experts' weights, ``probs`` (n, E) the router's
        scores over all experts."""
        ids = check_chosen(chosen, self.experts, self.top_k)
        n = ids.shape[0]
        pos = check_positions(positions, n)  # every input checked before anything is added
        w = None if weights is None else check_scores("routing weights", weights, ids.shape)
        p = None if probs is None else check_probabilities(probs, n, self.experts)  # (n, E)
        if w is not None:
            self.weight_sum += np.bincount(ids.ravel(), w.ravel(), minlength=self.experts)
            self.weighted_tokens += n
        if p is not None:
            self.prob_sum += p.sum(axis=0)
            self.entropy_sum += float(entropy(p).sum())
            self.scored_tokens += n
        self.load += np.bincount(ids.ravel(), minlength=self.experts)
        self.pairs += co_selected_counts(ids, self.experts)
        if self.last is not None:
            self._neighbours(self.last, (int(pos[0]), ids[0]))
        self.overlaps += neighbour_overlaps(ids, pos)
        if self.first is None:
            self.first = (int(pos[0]), ids[0].copy())
        self.last = (int(pos[-1]), ids[-1].copy())
        self.tokens += n

    def _neighbours(self, before: tuple[int, np.ndarray], after: tuple[int, np.ndarray]
                    ) -> None:
        """Count the pair of two tokens that meet at a chunk's or a merge's edge."""
        ids = np.stack([before[1], after[1]])
        self.overlaps += neighbour_overlaps(ids, np.array([before[0], after[0]]))

    def merge(self, other: RoutingCounts) -> RoutingCounts:
        """This accumulator's tokens followed by ``other``'s, as if counted in one pass."""
        if (self.experts, self.top_k, self.shared_experts) != \
                (other.experts, other.top_k, other.shared_experts):
            raise InputError(f"routing counts: expected {self.experts} experts, top-"
                             f"{self.top_k}, {self.shared_experts} shared, got "
                             f"{other.experts}, top-{other.top_k}, {other.shared_experts}")
        out = RoutingCounts(self.experts, self.top_k, self.shared_experts)
        for name in ("tokens", "load", "pairs", "overlaps", "weighted_tokens", "weight_sum",
                     "scored_tokens", "prob_sum", "entropy_sum"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        if self.last is not None and other.first is not None:
            out._neighbours(self.last, other.first)
        out.first = self.first if self.first is not None else other.first
        out.last = other.last if other.last is not None else self.last
        return out

    def summary(self, top_pairs: int = TOP_PAIRS) -> LayerRouting:
        """The layer's figures (at least one token counted)."""
        if not self.tokens:
            raise InputError("routing counts: expected at least one token, got 0")
        load, pairs = self.load, int(self.overlaps.sum())
        weighted = self.weighted_tokens == self.tokens
        scored = self.scored_tokens == self.tokens
        return LayerRouting(
            self.experts, self.top_k, self.shared_experts, self.tokens, load.tolist(),
            load_over_ideal(load).tolist(), coefficient_of_variation(load), max_vio(load),
            largest_share(load), dead_experts(load), load_entropy(load), coverage(load),
            pairs, neighbour_jaccard(self.overlaps) if pairs else None,
            mean_shared(self.overlaps) if pairs else None,
            co_selection(self.pairs, load, top_pairs),
            self.weight_sum.tolist() if weighted else None,
            coefficient_of_variation(self.weight_sum) if weighted else None,
            mean_token_entropy(self.entropy_sum, self.tokens, self.experts) if scored else None,
            switch_balance(load, self.prob_sum, self.tokens) if scored else None)


def co_selected_counts(ids: np.ndarray, experts: int) -> np.ndarray:
    """(E, E): n_ab = the tokens of ``ids`` (n, k) choosing both a and b, a != b."""
    k = ids.shape[1]
    flat = (ids[:, :, None] * experts + ids[:, None, :])[:, ~np.eye(k, dtype=bool)]
    return np.bincount(flat.ravel(), minlength=experts * experts).reshape(experts, experts)


def neighbour_overlaps(ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """(k + 1,): c_s = the neighbouring pairs of ``ids`` (n, k) sharing s experts; token t and
    t+1 are neighbours when position[t+1] = position[t] + 1 (a new sequence starts elsewhere,
    at position 0)."""
    k = ids.shape[1]
    linked = positions[1:] == positions[:-1] + 1
    shared = (ids[:-1][:, :, None] == ids[1:][:, None, :]).sum(axis=(1, 2))  # (n - 1,)
    return np.bincount(shared[linked], minlength=k + 1)


@dataclass
class LayerTransitions:
    """n_ab: the tokens whose first choice (the highest-scoring) was a at layer l and b at
    layer l+1, summed over chunks; ``merge`` adds."""

    experts_from: int
    experts_to: int
    counts: np.ndarray = field(init=False)  # (E, E')

    def __post_init__(self) -> None:
        whole("experts", self.experts_from, minimum=2)
        whole("experts", self.experts_to, minimum=2)
        self.counts = np.zeros((self.experts_from, self.experts_to), dtype=np.int64)

    def update(self, chosen_from: np.ndarray, chosen_to: np.ndarray) -> None:
        """Add the same tokens' choices at layer l (n, k) and layer l+1 (n, k')."""
        if not isinstance(chosen_from, np.ndarray) or not isinstance(chosen_to, np.ndarray) \
                or chosen_from.ndim != 2 or chosen_to.ndim != 2 \
                or chosen_from.shape[0] != chosen_to.shape[0]:
            raise InputError("layer transitions: expected two (tokens, k) arrays of the same "
                             "tokens, got " + " and ".join(
                                 _shape(c) if isinstance(c, np.ndarray) else type(c).__name__
                                 for c in (chosen_from, chosen_to)))
        a = check_chosen(chosen_from, self.experts_from, chosen_from.shape[1])[:, 0]
        b = check_chosen(chosen_to, self.experts_to, chosen_to.shape[1])[:, 0]
        self.counts += np.bincount(a * self.experts_to + b,
                                   minlength=self.counts.size).reshape(self.counts.shape)

    def merge(self, other: LayerTransitions) -> LayerTransitions:
        if self.counts.shape != other.counts.shape:
            raise InputError(f"layer transitions: expected {self.counts.shape} counts, got "
                             f"{other.counts.shape}")
        out = LayerTransitions(self.experts_from, self.experts_to)
        out.counts = self.counts + other.counts
        return out
