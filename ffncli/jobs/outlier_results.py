"""What ``ffncli outliers`` answers: each layer's peaks and where they are, the massive
channels, the super-weight candidates and super experts, and ``--confirm``'s scores."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Score:
    """A changed model against the dense one: decoders perplexity, mean KL(dense || changed)
    and top-1 agreement; encoders the mean cosines of the final hidden states."""

    perplexity: float | None = None
    kl_mean: float | None = None
    top1: float | None = None
    token_cosine: float | None = None
    sentence_cosine: float | None = None


@dataclass(frozen=True)
class Confirmation:
    """One change (``what``) and its null: the same change at random, ``repeats`` times."""

    what: str
    rule: str  # what was changed, and what the null changed
    changed: Score
    null: tuple[Score, ...]


@dataclass(frozen=True)
class ConfirmResult:
    protocol: str
    tokens_scored: int
    perplexity: float | None
    repeats: int
    seed: int
    items: tuple[Confirmation, ...]


@dataclass(frozen=True)
class Place:
    """A token: its sequence (1-based), position in it (0-based), id and text (None without
    a tokenizer)."""

    sequence: int
    position: int
    token: int
    text: str | None


@dataclass(frozen=True)
class Found:
    magnitude: float
    value: float
    place: Place
    channel: int


@dataclass(frozen=True)
class LayerRow:
    layer: int
    peaks: dict[str, Found]
    median: float
    threshold: float
    massive_channels: tuple[int, ...]
    spike: bool  # Yu et al.'s: hidden and output spikes at the same token


@dataclass(frozen=True)
class MassiveChannel:
    """A channel of the residual stream first massive after ``layer``: its largest entry
    there, how many entries meet the rule, their mean, and every layer it stays massive."""

    layer: int
    channel: int
    peak: Found
    count: int
    mean: float
    persists: tuple[int, ...]
    row_means: np.ndarray  # every channel's mean over the rows where this one is massive
    median: float


@dataclass(frozen=True)
class Candidate:
    """A super-weight candidate: the down projection's weight from input unit ``unit`` to
    output channel ``channel`` of ``layer`` (``expert`` of a mixture), as the file names it."""

    layer: int
    expert: int | None
    tensor: str
    index: tuple[int, ...]  # in the file's order of the tensor's axes
    unit: int
    channel: int
    weight: float
    hidden: Found
    output: Found


@dataclass(frozen=True)
class ExpertPeak:
    layer: int
    expert: int
    magnitude: float
    place: Place
    channel: int
    super_expert: bool


@dataclass(frozen=True)
class OutliersResult:
    model: str
    source: str
    tokens: int
    sequences: int
    layers: tuple[LayerRow, ...]
    massive: tuple[MassiveChannel, ...]
    candidates: tuple[Candidate, ...]
    experts: tuple[ExpertPeak, ...]
    super_expert_cut: float | None
    confirm: ConfirmResult | None = None
