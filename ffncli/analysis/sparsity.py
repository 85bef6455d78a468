"""How sparse is the hidden layer: statistics as mergeable accumulators over token chunks.

A hidden unit is *inactive* for a token when (the definition is printed with the results):
- default: its pre-activation is <= 0 (for ReLU, exactly the units ReLU switches off);
- ``threshold`` T: its activated value has |a| <= T;
- ``target_sparsity`` S: T is picked as the S-quantile of |a| over the first tokens (the CATS
  rule), then as above.
For a gated FFN the hidden layer is the activated gate act(x W + b); for a mixture of experts,
each expert's hidden layer on the tokens routed to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ffncli.analysis.calibration import calibrate_threshold, calibration_rows
from ffncli.analysis.experts import expert_activation, expert_inputs
from ffncli.base.validate import PARAMETERS, Words, number, share
from ffncli.compute.engine import Engine
from ffncli.compute.ffn import ExpertWeights, MoEWeights, pre_activation
from ffncli.errors import InputError

MAX_TOKENS_LISTED = 10_000
SMALL_OVERLAP = 16  # up to this many tokens: the full pairwise overlap table
STATS_ROWS = 1024  # tokens counted at once: (1024, d_ff) pre-activations, not a batch's
COVERAGE_SHARES = (0.5, 0.8, 0.9, 0.95, 0.99)


@dataclass
class UnitStats:
    """Per-unit counters over tokens; ``merge`` of two equals one pass over both."""

    d_units: int
    tokens: int = 0
    inactive_total: int = 0
    active_count: np.ndarray = field(init=False)  # (U,) tokens for which each unit was active
    first_active: np.ndarray = field(init=False)  # (U,) first token index active (or -1)
    pair_jaccard_sum: float = 0.0  # consecutive token pairs: Jaccard of inactive sets
    pair_jaccard_sq: float = 0.0
    pair_chance_sum: float = 0.0  # the shared count two random sets of those sizes expect
    pair_shared_sum: float = 0.0
    pairs: int = 0
    first_inactive: np.ndarray | None = None  # the first and last tokens' masks, to pair
    last_inactive: np.ndarray | None = None  # tokens across a merge or a chunk boundary

    def __post_init__(self) -> None:
        self.active_count = np.zeros(self.d_units, dtype=np.int64)
        self.first_active = np.full(self.d_units, -1, dtype=np.int64)

    def update(self, inactive: np.ndarray) -> np.ndarray:
        """Add a chunk's (m, U) inactive mask; returns inactive units per token (m,)."""
        m = inactive.shape[0]
        per_token = _count(inactive, axis=1)
        active_here = m - _count(inactive, axis=0)
        self.active_count += active_here
        unseen = (self.first_active < 0) & (active_here > 0)
        if unseen.any():  # after the first chunks, usually no unit is left to find
            cols = np.nonzero(unseen)[0]
            self.first_active[cols] = np.argmin(inactive[:, cols], axis=0) + self.tokens
        if m:
            if self.first_inactive is None:
                self.first_inactive = inactive[0].copy()
            self._pairs(inactive, per_token, self.last_inactive)
            self.last_inactive = inactive[-1].copy()
        self.tokens += m
        self.inactive_total += int(per_token.sum())
        return per_token

    def _pairs(self, masks: np.ndarray, sizes: np.ndarray, last: np.ndarray | None) -> None:
        """Add the consecutive pairs of ``last`` (the token before, if any) and the rows of
        ``masks`` (their inactive counts ``sizes``): the union's size is the two sizes less
        the shared count, so only the intersections are counted here."""
        shared = _count(masks[:-1] & masks[1:], axis=1)
        if last is not None:
            shared = np.concatenate([[np.count_nonzero(last & masks[0])], shared])
            sizes = np.concatenate([[np.count_nonzero(last)], sizes])
        if not shared.size:
            return
        union = sizes[:-1] + sizes[1:] - shared
        jac = np.where(union > 0, shared / np.maximum(union, 1), 1.0)
        chance = sizes[:-1] * sizes[1:] / self.d_units
        self.pair_jaccard_sum += float(jac.sum())
        self.pair_jaccard_sq += float((jac * jac).sum())
        self.pair_chance_sum += float(chance.sum())
        self.pair_shared_sum += float(shared.sum())
        self.pairs += shared.size

    # -- derived statistics -------------------------------------------------------------------

    @property
    def mean_inactive_fraction(self) -> float:
        return self.inactive_total / (self.tokens * self.d_units) if self.tokens else 0.0

    @property
    def dead_units(self) -> list[int]:
        return np.nonzero(self.active_count == 0)[0].tolist()

    @property
    def always_active_units(self) -> list[int]:
        if not self.tokens:
            return []
        return np.nonzero(self.active_count == self.tokens)[0].tolist()

    def activity_histogram(self) -> list[dict[str, object]]:
        """Units by the share of tokens they are active for: never, 10% bins, always."""
        if not self.tokens:
            return []
        share = self.active_count / self.tokens
        rows = [{"bin": "never (dead)", "units": int((self.active_count == 0).sum())}]
        for k in range(10):
            lo, hi = k / 10, (k + 1) / 10
            inside = (share > lo) & ((share <= hi) if k < 9 else (share < 1.0))
            rows.append({"bin": f"({lo:.0%}, {hi:.0%}{']' if k < 9 else ')'}",
                         "units": int(inside.sum())})
        rows.append({"bin": "always", "units": int((self.active_count == self.tokens).sum())})
        return rows

    def aggregated_sparsity(self) -> list[dict[str, float]]:
        """Share of units unused by all of the first t tokens, t = 1, 2, 4, ..., n."""
        if not self.tokens:
            return []
        ts = sorted({*(2**k for k in range(self.tokens.bit_length()) if 2**k <= self.tokens),
                     self.tokens})
        first = np.where(self.first_active < 0, np.iinfo(np.int64).max, self.first_active)
        return [{"tokens": t, "unused_share": float((first >= t).mean())} for t in ts]

    def hot_unit_coverage(self) -> list[dict[str, float]]:
        """The fewest units that carry each share of all activations (PowerInfer's statistic)."""
        total = int(self.active_count.sum())
        if total == 0:
            return [{"share": s, "units": 0, "unit_share": 0.0} for s in COVERAGE_SHARES]
        cum = np.cumsum(np.sort(self.active_count)[::-1])
        rows = []
        for s in COVERAGE_SHARES:
            k = int(np.searchsorted(cum, s * total - 1e-9) + 1)
            rows.append({"share": s, "units": k, "unit_share": k / self.d_units})
        return rows

    def overlap_summary(self) -> dict[str, float]:
        if not self.pairs:
            return {"pairs": 0}
        mean = self.pair_jaccard_sum / self.pairs
        var = max(self.pair_jaccard_sq / self.pairs - mean * mean, 0.0)
        return {"pairs": self.pairs, "mean_jaccard": mean, "std_jaccard": var ** 0.5,
                "mean_shared": self.pair_shared_sum / self.pairs,
                "mean_shared_by_chance": self.pair_chance_sum / self.pairs}


def merge(a: UnitStats, b: UnitStats) -> UnitStats:
    """Statistics of a's tokens followed by b's, as if counted in one pass."""
    out = UnitStats(a.d_units)
    out.tokens = a.tokens + b.tokens
    out.inactive_total = a.inactive_total + b.inactive_total
    out.active_count = a.active_count + b.active_count
    shifted = np.where(b.first_active >= 0, b.first_active + a.tokens, -1)
    out.first_active = np.where(a.first_active >= 0, a.first_active, shifted)
    for name in ("pair_jaccard_sum", "pair_jaccard_sq", "pair_chance_sum", "pair_shared_sum",
                 "pairs"):
        setattr(out, name, getattr(a, name) + getattr(b, name))
    out.first_inactive = a.first_inactive if a.first_inactive is not None else b.first_inactive
    out.last_inactive = b.last_inactive if b.last_inactive is not None else a.last_inactive
    if a.last_inactive is not None and b.first_inactive is not None:
        first = b.first_inactive[None]
        out._pairs(first, _count(first, axis=1), a.last_inactive)
    return out


def _count(mask: np.ndarray, axis: int) -> np.ndarray:
    """``np.count_nonzero(mask, axis)`` of a bool mask made by a comparison (each byte 0 or
    1, as NumPy's comparisons write them), as int64: its bytes summed as int32
    (twice as fast as count_nonzero along an axis, or as an int64 sum; the counts of a chunk
    of tokens or of units fit)."""
    return mask.view(np.uint8).sum(axis=axis, dtype=np.int32).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# Inactive masks from an FFN.


@dataclass(frozen=True)
class Rule:
    """Which hidden values count as inactive."""

    threshold: float | None  # None: pre-activation <= 0
    description: str


def inactive_mask(ffn: Engine, p: ExpertWeights, x: np.ndarray, rule: Rule) -> np.ndarray:
    pre = pre_activation(x, p)  # (m, d) -> (m, f), a fresh array
    values = pre if rule.threshold is None else expert_activation(ffn, pre)
    return mark_inactive(rule, values, np.empty(values.shape, dtype=bool))


def mark_inactive(rule: Rule, values: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The rule's inactive mask of ``values`` into ``out``: pre-activation <= 0 (the default;
    ``values`` the pre-activations) or |act| <= T (``values`` the activated values)."""
    if rule.threshold is None:
        return np.less_equal(values, 0, out=out)
    return np.less_equal(np.abs(values), rule.threshold, out=out)



@dataclass(frozen=True)
class Counted:
    """Whose hidden layer was counted, and by which rule."""

    d_ff: int
    d_model: int
    experts: int
    top_k: int
    activation: str
    rule: Rule


@dataclass(frozen=True)
class SparsityResult(Counted):
    tokens: int
    inactive_per_token: list[int]
    stats: list[UnitStats]  # one per expert (one for a dense or gated FFN)
    small_masks: np.ndarray | None  # (n, U) for small inputs: the pairwise table
    pairwise_overlap: list[dict[str, float]] | None = None  # from small_masks, each pair

    @property
    def units(self) -> int:
        return self.d_ff * self.experts

    @property
    def mean_inactive_fraction(self) -> float:
        total = sum(s.inactive_total for s in self.stats)
        slots = self.tokens * self.d_ff * self.top_k
        return total / slots if slots else 0.0

    def unit_ids(self, per_expert: list[list[int]]) -> list[int]:
        return [e * self.d_ff + u for e, units in enumerate(per_expert) for u in units]

    @property
    def dead_units(self) -> list[int]:
        return self.unit_ids([s.dead_units for s in self.stats])

    @property
    def always_active_units(self) -> list[int]:
        return self.unit_ids([s.always_active_units for s in self.stats])

    @property
    def w2_macs_saved_per_token(self) -> float:
        """Rows of W2 that skipping inactive units leaves out, times d_model, per token."""
        total = sum(s.inactive_total for s in self.stats)
        return total * self.d_model / self.tokens if self.tokens else 0.0

    @property
    def w2_macs_per_token(self) -> int:
        return self.d_ff * self.d_model * self.top_k


class SparsityAccumulator:
    """Feed chunks of tokens; read a SparsityResult at the end."""

    def __init__(self, ffn: Engine, rule: Rule, keep_masks: bool) -> None:
        self.ffn, self.rule = ffn, rule
        p = ffn.weights
        self.experts = len(p.experts) if isinstance(p, MoEWeights) else 1
        self.top_k = p.top_k if isinstance(p, MoEWeights) else 1
        self.stats = [UnitStats(ffn.d_ff) for _ in range(self.experts)]
        self.per_token: list[np.ndarray] = []
        self.listed = 0
        self.tokens = 0
        self.keep_masks = keep_masks
        self.masks: list[np.ndarray] = []

    def update(self, x: np.ndarray) -> None:
        """Count a chunk of tokens (m, d_model), STATS_ROWS rows at a time: the pre-activations
        and masks of a piece, not of a whole batch, are held at once (the counters merge over
        pieces as over chunks). A mixture's routing and capacity see the whole chunk."""
        x = np.ascontiguousarray(x, dtype=self.ffn.dtype)
        if isinstance(self.ffn.weights, MoEWeights) or x.shape[0] <= STATS_ROWS:
            self._update(x)
            return
        for lo in range(0, x.shape[0], STATS_ROWS):
            self._update(x[lo:lo + STATS_ROWS])

    def count(self, inactive: np.ndarray) -> None:
        """Count a dense (or gated) FFN's inactive mask of consecutive tokens (m, d_ff), as
        ``update`` of their inputs would: what its engine saw as it computed them, STATS_ROWS
        rows at a time."""
        assert self.experts == 1
        for lo in range(0, inactive.shape[0], STATS_ROWS):
            part = inactive[lo:lo + STATS_ROWS]
            self._count(part.shape[0], [(0, slice(None), part)])

    def _update(self, x: np.ndarray) -> None:
        self._count(x.shape[0], [
            (e, rows, inactive_mask(self.ffn, p, x[rows], self.rule))
            for e, p, rows in expert_inputs(self.ffn, x, self.ffn.capacity_left)
            if rows.size])

    def _count(self, m: int, masks: Sequence[tuple[int, np.ndarray | slice, np.ndarray]]
               ) -> None:
        """Add m tokens' masks: (expert, the token rows routed to it, their inactive mask)."""
        counts = np.zeros(m, dtype=np.int64)
        full = np.zeros((m, self.experts * self.ffn.d_ff), dtype=bool) \
            if self.keep_masks else None
        for e, rows, mask in masks:
            counts[rows] += self.stats[e].update(mask)
            if full is not None:
                full[rows, e * self.ffn.d_ff:(e + 1) * self.ffn.d_ff] = mask
        if self.listed < MAX_TOKENS_LISTED:
            keep = counts[: MAX_TOKENS_LISTED - self.listed]
            self.per_token.append(keep)
            self.listed += keep.size
        if full is not None:
            self.masks.append(full)
        self.tokens += m

    def partial(self) -> Partial:
        """What has been counted, as mergeable counters (a shard's share of a job)."""
        counted = Counted(self.ffn.d_ff, self.ffn.d_model, self.experts, self.top_k,
                          self.ffn.act.name, self.rule)
        per_token = np.concatenate(self.per_token) if self.per_token else np.zeros(0, np.int64)
        masks = np.vstack(self.masks) if self.masks else None
        return Partial(counted, self.tokens, self.stats, per_token, masks)

    def result(self) -> SparsityResult:
        return self.partial().result()


@dataclass
class Partial:
    """The mergeable counters of consecutive tokens (one shard, or several merged): merging
    two (:func:`merge_partials`) counts as one pass over both, and ``result`` gives the
    statistics."""

    counted: Counted
    tokens: int
    stats: list[UnitStats]  # one per expert
    per_token: np.ndarray  # inactive units of the tokens among the first MAX_TOKENS_LISTED
    masks: np.ndarray | None  # small inputs: every token's mask, for the pairwise table

    def result(self) -> SparsityResult:
        c = self.counted
        pairs = pairwise_overlap(self.masks, c.experts * c.d_ff) if self.masks is not None \
            else None
        return SparsityResult(c.d_ff, c.d_model, c.experts, c.top_k, c.activation, c.rule,
                              self.tokens, self.per_token.tolist(), self.stats, self.masks,
                              pairs)


def merge_partials(a: Partial | None, b: Partial | None) -> Partial | None:
    """a's tokens followed by b's (None: a shard left out, with --skip-bad)."""
    if a is None or b is None:
        return b if a is None else a
    masks = a.masks if b.masks is None else b.masks if a.masks is None else \
        np.vstack([a.masks, b.masks])
    stats = [merge(x, y) for x, y in zip(a.stats, b.stats, strict=True)]
    return Partial(a.counted, a.tokens + b.tokens, stats,
                   np.concatenate([a.per_token, b.per_token])[:MAX_TOKENS_LISTED], masks)


def describe_rule(activation: str, threshold: float | None, target: float | None,
                  words: Words = PARAMETERS) -> str:
    """The rule in a line, naming ``threshold`` and ``target_sparsity`` in ``words``."""
    if threshold is not None:
        how = f"{words.name('target_sparsity')} {target + 0.0:g}: " if target is not None \
            else ""  # -0 is 0
        return f"inactive: |act(pre-activation)| <= {threshold:.6g} ({how}threshold on the " \
               "activated value)"
    if activation == "relu":
        return "inactive: pre-activation <= 0 (ReLU outputs exactly 0)"
    return f"inactive: pre-activation <= 0 ({activation} is small but not 0 there; use " \
           f"{words.name('threshold')} or {words.name('target_sparsity')} for a cut on the " \
           "activated value)"


def pairwise_overlap(masks: np.ndarray, d_units: int) -> list[dict[str, float]]:
    """Every pair of tokens: shared inactive units, Jaccard index, and the count by chance."""
    rows = []
    n = masks.shape[0]
    sizes = masks.sum(axis=1)
    for i in range(n):
        for j in range(i + 1, n):
            shared = int((masks[i] & masks[j]).sum())
            union = int((masks[i] | masks[j]).sum())
            rows.append({"a": i, "b": j, "shared": shared,
                         "jaccard": shared / union if union else 1.0,
                         "by_chance": float(sizes[i] * sizes[j] / d_units)})
    return rows


def check_rule(threshold: float | None, target_sparsity: float | None,
               words: Words = PARAMETERS) -> None:
    """``threshold`` T (a number >= 0) or ``target_sparsity`` S (a share), not both; errors
    name them in ``words`` (a command's: ``--threshold``)."""
    if threshold is not None and target_sparsity is not None:
        raise InputError(f"give {words.name('threshold')} or "
                         f"{words.name('target_sparsity')}, not both")
    if threshold is not None:
        number(words.where("threshold"), threshold)
    if target_sparsity is not None:
        share(words.where("target_sparsity"), target_sparsity)


def relu_stats(ffn: Engine, tokens, *, threshold: float | None = None,
               target_sparsity: float | None = None, allow_nonfinite: bool = False,
               progress=None, words: Words = PARAMETERS) -> SparsityResult:
    """Stream ``tokens`` (a tokens.TokenInput) through the hidden layer and count; ``words``
    name the cut's parameters in errors and in the rule's line."""
    check_rule(threshold, target_sparsity, words)
    rows = ffn.chunk_tokens
    if target_sparsity is not None:
        calibration = tokens.chunks(calibration_rows(tokens.n_tokens), ffn.dtype,
                                    finite=not allow_nonfinite)
        _, first = next(calibration)
        first = first.copy()
        calibration.close()
        threshold = calibrate_threshold(ffn, first, target_sparsity)
    rule = Rule(threshold, describe_rule(ffn.act.name, threshold, target_sparsity, words))
    acc = SparsityAccumulator(ffn, rule, keep_masks=tokens.n_tokens <= SMALL_OVERLAP)
    ffn.begin(tokens.n_tokens)  # an expert capacity is that of the whole input
    for start, x in tokens.chunks(rows, ffn.dtype, finite=not allow_nonfinite):
        acc.update(x)
        if progress:
            progress(start + x.shape[0])
    return acc.result()

