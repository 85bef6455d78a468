"""What each hidden unit of an FFN does (``ffncli neurons``): statistics of its activation over a
text, its top-activating contexts, and the tokens its output weights promote.

Everything here is a mergeable accumulator, so a text can stream through in batches and its
shards merge exactly (:meth:`UnitStats.merge`):

- **moments**: count, mean and the central sums M2, M3, M4 of every unit, merged with the
  pairwise formulas of Chan et al. (1979) and Pébay (2008) (numerically stable: no raw power
  sums); variance, skewness and excess kurtosis are the population ones (scipy's ``bias=True``
  and ``fisher=True``): ``M2/n``, ``sqrt(n) M3 / M2^1.5``, ``n M4 / M2^2 - 3``;
- **frequency**: the share of tokens whose hidden value is > 0 (for every activation, ReLU or
  smooth: for a gated FFN the hidden value is ``act(x W) * (x V)``);
- **histogram**: counts over fixed, data-independent edges (:data:`EDGES`, so shards add), with
  each unit's minimum and maximum; quantiles are read from it (:func:`quantiles`);
- **top contexts**: each unit's ``k`` largest activations under one strict order (larger value
  first; equal values: the earlier token first), with the unit's activations over a window of
  tokens around each; top-k of a union is the top-k of the parts' top-k, so batches and shards
  merge exactly (:func:`merge_top`);
- **random sample**: the unit's window of activations around token positions drawn once for the
  whole text (:func:`sample_positions`), the same positions for every unit.

The vocabulary projection (:func:`project_vocabulary`, Geva et al. 2022) is weight-only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

Array = np.ndarray

# Fixed histogram edges, the same for every unit, layer and shard: 0, and +-10^(k/8) for
# k = -32..24 (1e-4 to 1e3, eight bins a decade). Bin b holds EDGES[b-1] <= h < EDGES[b]
# (bin 0 below -1e3, the last at or above 1e3).
_POSITIVE = 10.0 ** (np.arange(-32, 25) / 8)
EDGES = np.concatenate([-_POSITIVE[::-1], [0.0], _POSITIVE])
BINS = EDGES.size + 1
QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99, 0.999)  # the quantiles each unit's record gives
MOMENT_ROWS = 256  # rows of a batch turned into float64 at a time
COLUMNS = 256  # units whose top rows are found at a time (temporaries: rows x COLUMNS)


# ---------------------------------------------------------------------------------------------
# Moments: count, mean, M2, M3, M4, merged pairwise (Chan et al.; Pébay 2008, eq. 2.1-2.3)


@dataclass
class Moments:
    """Every unit's count, mean and central sums ``M_p = sum (x - mean)^p`` (float64)."""

    n: int
    mean: Array
    m2: Array
    m3: Array
    m4: Array

    @staticmethod
    def empty(units: int) -> Moments:
        zeros = [np.zeros(units) for _ in range(4)]
        return Moments(0, *zeros)

    @staticmethod
    def of(x: Array) -> Moments:
        """The moments of the rows of ``x`` (rows, units), computed directly in float64."""
        x = np.asarray(x, dtype=np.float64)
        mean = x.mean(axis=0)
        d = x - mean
        d2 = d * d
        return Moments(x.shape[0], mean, d2.sum(axis=0), (d2 * d).sum(axis=0),
                       (d2 * d2).sum(axis=0))

    def merge(self, b: Moments) -> Moments:
        """The moments of both sets of rows."""
        a = self
        if b.n == 0:
            return a
        if a.n == 0:
            return b
        na, nb = float(a.n), float(b.n)
        n = na + nb
        delta = b.mean - a.mean
        d_n = delta / n
        mean = a.mean + d_n * nb
        m2 = a.m2 + b.m2 + delta * d_n * na * nb
        m3 = (a.m3 + b.m3 + delta * d_n * d_n * na * nb * (na - nb)
              + 3 * d_n * (na * b.m2 - nb * a.m2))
        m4 = (a.m4 + b.m4 + delta * d_n ** 3 * na * nb * (na * na - na * nb + nb * nb)
              + 6 * d_n * d_n * (na * na * b.m2 + nb * nb * a.m2)
              + 4 * d_n * (na * b.m3 - nb * a.m3))
        return Moments(a.n + b.n, mean, m2, m3, m4)

    def add(self, x: Array) -> Moments:
        """These moments and those of the rows of ``x``, MOMENT_ROWS rows at a time."""
        out = self
        for lo in range(0, x.shape[0], MOMENT_ROWS):
            out = out.merge(Moments.of(x[lo:lo + MOMENT_ROWS]))
        return out

    def variance(self) -> Array:
        return self.m2 / self.n if self.n else np.full_like(self.m2, np.nan)

    def skewness(self) -> Array:
        """sqrt(n) M3 / M2^1.5; NaN where the unit is constant."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.m2 > 0, np.sqrt(self.n) * self.m3 / self.m2 ** 1.5, np.nan)

    def kurtosis(self) -> Array:
        """Excess kurtosis n M4 / M2^2 - 3; NaN where the unit is constant."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.m2 > 0, self.n * self.m4 / (self.m2 * self.m2) - 3, np.nan)


# ---------------------------------------------------------------------------------------------
# Top-k under one strict order: larger value first, equal values by the smaller index


@dataclass
class Top:
    """Each unit's best entries, best first: ``values`` and ``index`` (k, units) and per entry
    ``extra`` (k, units, ...) (a window of activations, or nothing)."""

    values: Array
    index: Array
    extra: Array | None = None

    @property
    def k(self) -> int:
        return int(self.values.shape[0])


def _ordered(values: Array, index: Array, extra: Array | None, k: int) -> Top:
    """The first ``k`` rows of each column by (value descending, index ascending)."""
    order = np.lexsort((index, -values.astype(np.float64)), axis=0)[:k]  # (m, U) -> (k, U)
    cols = np.arange(values.shape[1])
    return Top(values[order, cols], index[order, cols],
               None if extra is None else extra[order, cols])


def merge_top(a: Top, b: Top, k: int) -> Top:
    """The top ``k`` of the union of two tops (of disjoint indices): exact, whatever the
    split, since the order is strict."""
    extra = None if a.extra is None or b.extra is None else np.concatenate([a.extra, b.extra])
    return _ordered(np.concatenate([a.values, b.values]), np.concatenate([a.index, b.index]),
                    extra, k)


def top_rows(x: Array, first: int, k: int) -> tuple[Array, Array]:
    """Each column's top ``k`` rows of ``x`` (rows, units), as (local rows, values), each
    (min(k, rows), units) best first; row r's index is ``first + r``. Ties at the k-th value
    go to the earlier rows (rows are in index order), so this is exact, not argpartition's
    arbitrary pick."""
    rows, units = x.shape
    k = min(k, rows)
    if k == 0:
        return np.empty((0, units), np.int64), np.empty((0, units), x.dtype)
    if rows > 2 * k:
        kth = -np.partition(-x, k - 1, axis=0)[k - 1]  # (units,): the k-th largest
        above = x > kth
        need = k - above.sum(axis=0)  # ties at kth taken, earliest first
        equal = x == kth
        chosen = above | (equal & (np.cumsum(equal, axis=0, dtype=np.int32) <= need))
        cols, local = np.nonzero(chosen.T)  # column-major: k rows per column, row order
        local = local.reshape(units, k).T
    else:
        local = np.broadcast_to(np.arange(rows)[:, None], (rows, units))
    values = np.take_along_axis(x, local, axis=0)
    top = _ordered(values, local + first, None, k)
    return top.index - first, top.values


# ---------------------------------------------------------------------------------------------
# Windows of activations around tokens


def windows(x: Array, rows: Array, cols: Array, starts: Array, ends: Array, width: int
            ) -> Array:
    """Unit ``cols[..]``'s activations over rows ``rows[..] - width`` to ``+ width`` of ``x``,
    NaN outside the row's sequence [starts, ends): shape ``rows.shape + (2 width + 1,)``."""
    offsets = np.arange(-width, width + 1)
    at = rows[..., None] + offsets  # (..., W)
    inside = (at >= starts[..., None]) & (at < ends[..., None])
    got = x[np.clip(at, 0, x.shape[0] - 1), cols[..., None]].astype(np.float32)
    got[~inside] = np.nan
    return got


def sample_positions(tokens: int, samples: int, seed: int) -> Array:
    """The token positions of the random sample: ``samples`` of the text's ``tokens`` drawn
    without replacement by ``default_rng(seed)``, sorted; the same for every unit and layer,
    and for every shard (drawn from the whole text's count)."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(tokens, size=min(samples, tokens), replace=False)).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# One layer's accumulator


@dataclass(frozen=True)
class Asked:
    """What is kept of each unit: its ``top_k`` contexts with ``window`` tokens each side,
    the random sample's positions (of the whole text)."""

    top_k: int = 10
    window: int = 4
    sample: Array = field(default_factory=lambda: np.empty(0, np.int64))


class UnitStats:
    """The statistics of some units of one layer's hidden layer, fed batch by batch: moments,
    frequency, histogram, min/max, top contexts, the random sample's windows."""

    def __init__(self, units: Array, asked: Asked) -> None:
        self.units, self.asked = np.asarray(units, dtype=np.int64), asked
        u, w = self.units.size, 2 * asked.window + 1
        self.moments = Moments.empty(u)
        self.active = np.zeros(u, np.int64)
        self.hist = np.zeros((BINS, u), np.int64)
        self.low = np.full(u, np.inf)
        self.high = np.full(u, -np.inf)
        self.top = Top(np.empty((0, u), np.float32), np.empty((0, u), np.int64),
                       np.empty((0, u, w), np.float32))
        self.sampled = np.full((asked.sample.size, u, w), np.nan, np.float32)

    @property
    def count(self) -> int:
        return self.moments.n

    def update(self, h: Array, first: int, bounds: Sequence[tuple[int, int]]) -> None:
        """Count the hidden values ``h`` (rows, units) of whole sequences, whose tokens are the
        text's ``first``.. in order; ``bounds``: each sequence's rows in ``h``."""
        rows, u = h.shape
        if u != self.units.size:
            raise ValueError(f"expected (rows, {self.units.size}), got {h.shape}")
        if rows == 0:
            return
        self.moments = self.moments.add(h)
        self.active += np.count_nonzero(h > 0, axis=0)
        self._histogram(h)
        np.minimum(self.low, h.min(axis=0), out=self.low)
        np.maximum(self.high, h.max(axis=0), out=self.high)
        starts = np.empty(rows, np.int64)
        ends = np.empty(rows, np.int64)
        for s, e in bounds:
            starts[s:e], ends[s:e] = s, e
        cols = np.arange(u)
        width = self.asked.window
        parts = []
        for lo in range(0, u, COLUMNS):  # temporaries of rows x COLUMNS, not rows x units
            local, values = top_rows(h[:, lo:lo + COLUMNS], first, self.asked.top_k)
            at = np.broadcast_to(cols[lo:lo + COLUMNS], local.shape)
            parts.append(Top(values.astype(np.float32), local + first,
                             windows(h, local, at, starts[local], ends[local], width)))
        cand = Top(*(np.concatenate([getattr(p, name) for p in parts], axis=1)
                     for name in ("values", "index", "extra")))
        self.top = merge_top(self.top, cand, self.asked.top_k)
        sample = self.asked.sample
        mine = np.nonzero((sample >= first) & (sample < first + rows))[0]
        if mine.size:
            r = np.broadcast_to((sample[mine] - first)[:, None], (mine.size, u))
            self.sampled[mine] = windows(h, r, np.broadcast_to(cols, r.shape), starts[r],
                                         ends[r], width)

    def _histogram(self, h: Array) -> None:
        u = h.shape[1]
        step = max(1, (1 << 20) // max(u, 1))
        cols = np.arange(u)
        for lo in range(0, h.shape[0], step):
            b = np.searchsorted(EDGES, h[lo:lo + step], side="right")  # (r, U) bins
            flat = (b * u + cols).ravel()
            self.hist += np.bincount(flat, minlength=BINS * u).reshape(BINS, u)

    def merge(self, other: UnitStats) -> UnitStats:
        """Both parts' statistics (disjoint tokens of one text): exact."""
        out = UnitStats(self.units, self.asked)
        out.moments = self.moments.merge(other.moments)
        out.active = self.active + other.active
        out.hist = self.hist + other.hist
        out.low = np.minimum(self.low, other.low)
        out.high = np.maximum(self.high, other.high)
        out.top = merge_top(self.top, other.top, self.asked.top_k)
        out.sampled = np.where(np.isnan(self.sampled), other.sampled, self.sampled)
        return out

    def quantiles(self, probs: Sequence[float] = QUANTILES) -> Array:
        """(units, len(probs)) quantiles read from the histogram (:func:`quantiles`)."""
        return quantiles(self.hist, self.low, self.high, probs)

    def frequency(self) -> Array:
        return self.active / self.count if self.count else np.full(self.units.size, np.nan)


def quantiles(hist: Array, low: Array, high: Array, probs: Sequence[float]) -> Array:
    """Each unit's quantiles from its histogram (BINS, units): the value where the cumulative
    count reaches ``p n``, linear within its bin, the outer bins closed by the unit's minimum
    and maximum. The error is at most one bin's width: the true quantile lies in the same
    bin (eight bins a decade from 1e-4 to 1e3)."""
    bins, u = hist.shape
    lo_edge = np.concatenate([[-np.inf], EDGES])
    hi_edge = np.concatenate([EDGES, [np.inf]])
    cum = np.cumsum(hist, axis=0)
    n = cum[-1]
    out = np.full((u, len(probs)), np.nan)
    for j, p in enumerate(probs):
        target = p * n
        b = np.minimum((cum < target[None, :]).sum(axis=0), bins - 1)  # first bin reaching it
        cols = np.arange(u)
        before = np.where(b > 0, cum[np.maximum(b - 1, 0), cols], 0)
        inside = hist[b, cols]
        a = np.maximum(lo_edge[b], low)
        z = np.minimum(hi_edge[b], high)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(inside > 0, (target - before) / inside, 0.0)
        value = a + np.clip(t, 0, 1) * (z - a)
        out[:, j] = np.where(n > 0, value, np.nan)
    return out


# ---------------------------------------------------------------------------------------------
# The vocabulary projection (Geva et al. 2022): what a unit's output weights promote


VOCAB_ROWS = 4096  # unembedding rows read at a time


@dataclass(frozen=True)
class Projection:
    """Each unit's most promoted (``top``) and most suppressed (``bottom``) tokens: ids and
    logits, (units, n), best first (bottom: most negative first)."""

    top_ids: Array
    top_logits: Array
    bottom_ids: Array
    bottom_logits: Array


def project_vocabulary(columns: Array, gain: Array, rows: Callable[[int, int], Array],
                       vocab: int, n: int, chunk: int = VOCAB_ROWS) -> Projection:
    """The logits ``U (gain * w)`` of each unit's output weights ``w`` (``columns``: (units,
    d_model), down_proj's columns) through the final norm's gain and the unembedding ``U``
    (vocab, d_model), its rows ``rows(lo, hi)`` read ``chunk`` at a time: the ``n`` highest
    and lowest per unit, ties to the smaller token id. Memory: one chunk of ``U`` and a
    (chunk, units) block of logits. The norm's centring and 1/RMS are not applied (a column
    is not a hidden state; Geva et al. project the raw column)."""
    scaled = (np.asarray(columns, np.float64) * np.asarray(gain, np.float64)).T  # (d, U)
    u = scaled.shape[1]
    empty = Top(np.empty((0, u)), np.empty((0, u), np.int64))
    top, bottom = empty, empty
    for lo in range(0, vocab, chunk):
        hi = min(lo + chunk, vocab)
        logits = np.asarray(rows(lo, hi), np.float64) @ scaled  # (c, d) @ (d, U) -> (c, U)
        local, values = top_rows(logits, lo, n)
        top = merge_top(top, Top(values, local + lo), n)
        local, values = top_rows(-logits, lo, n)
        bottom = merge_top(bottom, Top(values, local + lo), n)
    return Projection(top.index.T, top.values.T, bottom.index.T, -bottom.values.T)
