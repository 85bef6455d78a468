"""Outliers of the FFN and the residual stream over a text (``ffncli outliers``): per layer the
largest |value| of the FFN's input, its hidden layer (the down projection's input), its output
and the residual stream after the layer, each with the token row and channel where it occurs,
kept as mergeable maxima (:class:`Peak`, :class:`LayerPart`); and the rules that flag them:

- massive activations (Sun et al. 2024, "Massive activations in large language models"): an
  entry h of the residual stream after a layer with |h| > 100 and |h| >= 1000 x the median
  |h| of that layer, the median over every token and every channel of the layer's residual
  stream (np.quantile's linear median, exact: :func:`ffncli.analysis.quantiles.quantile`);
- super-weight candidates (Yu et al. 2024, "The super weight in large language models"): a
  layer whose largest |FFN output| is a spike (at least SPIKE x the median of the other
  layers' largest |FFN output|) and whose largest |hidden| (the down projection's input) at
  that same token is a spike too (against the other layers' largest |hidden|): the candidate
  is the down projection's weight from that hidden unit to that output channel;
- super experts (Su et al. 2025, "Unveiling super experts in mixture-of-experts large
  language models"): an expert whose largest |output| (its down projection's, before the
  router's weight) is above the 99.5th percentile (np.quantile, linear) of every expert's
  largest |output| over all layers, and above a tenth of the largest of them.

Rows are token indices among all tokens of the text in order (a part of a text: offset by its
first token), so parts merge exactly: maxima by magnitude, ties to the earlier row and then the
lower channel (np.argmax's order over the whole text).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ffncli.analysis.quantiles import quantile

MASSIVE_ABS = 100.0  # Sun et al.: |h| above this ...
MASSIVE_RATIO = 1000.0  # ... and at least this many times the layer's median |h|
SPIKE = 10.0  # a spike: a layer's maximum >= SPIKE x its median over the other layers
SUPER_EXPERT_Q = 0.995  # Su et al.: above the 99.5th percentile of all experts' maxima ...
SUPER_EXPERT_SHARE = 0.1  # ... and above a tenth of the largest
KINDS = ("ffn_input", "hidden", "ffn_output", "residual")


@dataclass
class Peak:
    """The largest |value| seen, its signed value, its row (token index) and channel; -1 for
    nothing seen yet."""

    magnitude: float = -1.0
    value: float = 0.0
    row: int = -1
    channel: int = -1

    def see(self, x: np.ndarray, base: int) -> None:
        """Rows ``base`` .. of the block ``x`` (rows, channels)."""
        if x.size == 0:
            return
        flat = int(np.argmax(np.abs(x)))  # the first of the largest, row-major
        r, c = divmod(flat, x.shape[1])
        self.add(Peak(float(abs(x[r, c])), float(x[r, c]), base + r, c))

    def add(self, other: Peak) -> None:
        """The larger of the two; a tie to the earlier row, then the lower channel."""
        if (other.magnitude, -other.row, -other.channel) > \
                (self.magnitude, -self.row, -self.channel) and other.row >= 0:
            self.magnitude, self.value = other.magnitude, other.value
            self.row, self.channel = other.row, other.channel


@dataclass
class Channels:
    """Per channel of the residual stream: the largest |value|, its signed value and row."""

    magnitude: np.ndarray
    value: np.ndarray
    row: np.ndarray

    @staticmethod
    def empty(d: int) -> Channels:
        return Channels(np.full(d, -1.0), np.zeros(d), np.full(d, -1, dtype=np.int64))

    def see(self, x: np.ndarray, base: int) -> None:
        rows = np.argmax(np.abs(x), axis=0)  # (rows, d) -> (d,): the first of each column's
        picked = x[rows, np.arange(x.shape[1])].astype(np.float64)
        self.add(Channels(np.abs(picked), picked, rows.astype(np.int64) + base))

    def add(self, other: Channels) -> None:
        better = (other.magnitude > self.magnitude) | \
            ((other.magnitude == self.magnitude) & (other.row < self.row) & (other.row >= 0))
        self.magnitude = np.where(better, other.magnitude, self.magnitude)
        self.value = np.where(better, other.value, self.value)
        self.row = np.where(better, other.row, self.row)


@dataclass
class LayerPart:
    """What a walk over some tokens keeps of one layer: the four peaks, each channel's peak of
    the residual stream, each expert's largest |output| (a mixture), the down projection's
    weight at the hidden peak's unit and the output peak's channel, and the residual stream's
    values themselves (``held``: row offset and rows, float32) until :meth:`finish` has taken
    the exact median from them. Parts merge (:func:`merge_layer`) before they finish."""

    peaks: dict[str, Peak]
    channels: Channels
    experts: dict[int, Peak] = field(default_factory=dict)
    held: list[tuple[int, np.ndarray]] = field(default_factory=list)
    tokens: int = 0
    # each token's largest |hidden|: row offset, then per row the |h|, its signed value, its
    # unit and its expert (0 but in a mixture)
    rows: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = \
        field(default_factory=list)

    @staticmethod
    def empty(d: int) -> LayerPart:
        return LayerPart({k: Peak() for k in KINDS}, Channels.empty(d))

    def add(self, other: LayerPart) -> None:
        for k in KINDS:
            self.peaks[k].add(other.peaks[k])
        self.channels.add(other.channels)
        for e, p in other.experts.items():
            self.experts.setdefault(e, Peak()).add(p)
        self.held += other.held
        self.rows += other.rows
        self.tokens += other.tokens

    def hidden_at(self, row: int) -> tuple[Peak, int]:
        """The largest |hidden| of token ``row`` (its unit as the channel) and its expert."""
        for start, mag, value, unit, expert in self.rows:
            if start <= row < start + mag.size:
                k = row - start
                return Peak(float(mag[k]), float(value[k]), row, int(unit[k])), int(expert[k])
        return Peak(), 0


@dataclass(frozen=True)
class Massive:
    """A channel of a layer's residual stream holding massive activations: how many entries
    meet the rule, their mean (signed), the largest and its row."""

    channel: int
    count: int
    mean: float
    peak: Peak
    row_means: np.ndarray  # every channel's mean over the rows where this one is massive


@dataclass(frozen=True)
class LayerOutliers:
    """One layer's outliers, finished: the four peaks, the residual stream's exact median
    |h| over every token and channel, the threshold it makes, the massive channels, each
    channel's largest |h| (for persistence) and each expert's largest |output|."""

    layer: int
    peaks: dict[str, Peak]
    median: float
    threshold: float  # max(MASSIVE_ABS, MASSIVE_RATIO x median): massive is |h| above it
    massive: tuple[Massive, ...]
    channel_max: np.ndarray
    experts: dict[int, Peak]
    hidden_at_output: Peak  # the largest |hidden| at the output peak's token, its unit
    expert_at_output: int  # the expert that unit is of (a mixture: the largest there)
    tokens: int


def massive_threshold(median: float) -> float:
    """The |h| a massive activation must exceed (Sun et al.): 100 and 1000 x the median (the
    second as 'at least': an |h| equal to it counts, see :func:`is_massive`)."""
    return max(MASSIVE_ABS, MASSIVE_RATIO * median)


def is_massive(magnitude: np.ndarray | float, median: float) -> np.ndarray:
    """Sun et al.'s rule: |h| > 100 and |h| >= 1000 x the layer's median |h| (elementwise)."""
    m = np.asarray(magnitude)
    return np.asarray((m > MASSIVE_ABS) & (m >= MASSIVE_RATIO * median))


def finish(layer: int, part: LayerPart) -> LayerOutliers:
    """The layer's outliers from its (merged) part: the exact median of |h| over every held
    value (memory: the layer's tokens x d_model float32 values, then let go), the massive
    channels and their entries' mean."""
    held = sorted(part.held, key=lambda rows: rows[0])
    values = np.concatenate([rows for _, rows in held]) if held else np.zeros((0, 1), np.float32)
    part.held = []
    at, expert = part.hidden_at(part.peaks["ffn_output"].row)
    if values.size == 0:
        return LayerOutliers(layer, part.peaks, float("nan"), float("nan"), (),
                             part.channels.magnitude, part.experts, at, expert, 0)
    median = quantile(np.abs(values), 0.5)
    found = []
    for c in np.flatnonzero(is_massive(part.channels.magnitude, median)):
        column = values[:, c].astype(np.float64)
        hit = is_massive(np.abs(column), median)
        found.append(Massive(int(c), int(hit.sum()), float(column[hit].mean()),
                             Peak(float(part.channels.magnitude[c]),
                                  float(part.channels.value[c]),
                                  int(part.channels.row[c]), int(c)),
                             values[hit].astype(np.float64).mean(axis=0)))
    del values
    return LayerOutliers(layer, part.peaks, median, massive_threshold(median), tuple(found),
                         part.channels.magnitude, part.experts, at, expert, part.tokens)


# ---------------------------------------------------------------------------------------------
# The rules across layers.


def spikes(values: list[float]) -> list[bool]:
    """Which layers' maxima are spikes: at least SPIKE x the median (np.median) of the other
    layers' maxima (a model of one layer has none)."""
    out = []
    for i, v in enumerate(values):
        others = values[:i] + values[i + 1:]
        out.append(bool(others) and v > 0 and v >= SPIKE * float(np.median(others)))
    return out


def super_weight_layers(layers: list[LayerOutliers]) -> list[bool]:
    """Yu et al.'s rule, per layer: the output peak is a spike, and so is the largest |hidden|
    at the output peak's token (against the other layers' hidden peaks)."""
    output = spikes([x.peaks["ffn_output"].magnitude for x in layers])
    hidden = [x.peaks["hidden"].magnitude for x in layers]
    out = []
    for i, (x, o) in enumerate(zip(layers, output, strict=True)):
        h = spikes([*hidden[:i], x.hidden_at_output.magnitude, *hidden[i + 1:]])[i]
        out.append(o and h)
    return out


def persistence(layers: list[LayerOutliers], channel: int, start: int) -> list[int]:
    """The layers from ``start`` on (indices into ``layers``) where ``channel``'s largest |h|
    still meets the massive rule of that layer."""
    return [x.layer for x in layers[start:]
            if x.median == x.median and bool(is_massive(x.channel_max[channel], x.median))]


def super_experts(layers: list[LayerOutliers]) -> tuple[float, list[tuple[int, int]]]:
    """Su et al.'s rule over every expert of every layer: (the 99.5th percentile of the
    experts' largest |output|, the (layer, expert) pairs above it and above a tenth of the
    largest)."""
    values = [(x.layer, e, p.magnitude) for x in layers for e, p in sorted(x.experts.items())]
    if not values:
        return float("nan"), []
    mags = np.array([m for _, _, m in values])
    cut = float(np.quantile(mags, SUPER_EXPERT_Q))
    top = float(mags.max())
    return cut, [(i, e) for i, e, m in values if m > cut and m > SUPER_EXPERT_SHARE * top]
