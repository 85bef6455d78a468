"""What fits in a memory budget: for inference, the longest context (at a batch) and the
largest batch (at a length) whose weights and KV cache fit, for every weight and cache dtype;
for training, whether the plan fits and by how much it does not. Integer arithmetic; a
memory bound only (the model's own context limit is shown beside it, never applied)."""

from __future__ import annotations

from dataclasses import dataclass

from ffncli.counting.kv import KV_BYTES, KvCache
from ffncli.counting.model import ModelCount


@dataclass(frozen=True)
class Budget:
    """``--fit``: the memory given (the sum of ``devices``) and the reserve held back."""

    text: str
    bytes: int
    devices: int
    reserve: int = 0

    @property
    def usable(self) -> int:
        return self.bytes - self.reserve


@dataclass(frozen=True)
class FitCell:
    """Weights in one dtype with the KV cache in one: what is left for the cache, and the
    longest sequence at the plan's batch, the largest batch at its length (None: the model
    keeps no KV cache, so the length is not bounded by it; 0: the weights alone do not fit)."""

    weights: str
    cache: str
    weight_bytes: int
    free: int
    max_seq_len: int | None
    max_batch: int | None


def largest(free: int, per_unit: int) -> int | None:
    """The most units of ``per_unit`` bytes in ``free`` bytes (None when a unit costs
    nothing, 0 when nothing is free)."""
    if per_unit == 0:
        return None
    return max(free, 0) // per_unit


def fit_inference(c: ModelCount, kv: KvCache, budget: Budget) -> tuple[FitCell, ...]:
    """Every weight dtype x cache dtype: the longest ``seq_len`` at ``kv.batch`` and the
    largest batch at ``kv.seq_len`` whose weights + KV cache fit in the usable budget."""
    cells = []
    for dtype, weights in c.weight_bytes().items():
        free = budget.usable - weights
        for cache, size in KV_BYTES.items():
            cells.append(FitCell(dtype, cache, weights, free,
                                 longest(free, kv, size * kv.batch),
                                 largest(free, kv.peak(kv.seq_len) * size)))
    return tuple(cells)


def longest(free: int, kv: KvCache, size: int) -> int | None:
    """The longest sequence whose cache, ``size`` bytes a value (all sequences of the batch),
    fits in ``free`` bytes: None when the cache stops growing (every layer capped at a window
    or a fixed state) and still fits, else found by bisection (over the cache's peak, which
    never shrinks: DeepSeek-V4's compressors drop their pending tokens)."""
    if free < kv.peak(0) * size:
        return 0
    top = max(kv.seq_len, max((p.cap for p in kv.parts), default=0)) + 1
    span = max((p.rate for p in kv.parts), default=0) + 1  # a compressor's window: it grows
    if kv.peak(top + span) == kv.peak(top):
        return None if kv.peak(top) * size <= free else _bisect(free, kv, size, top)
    return _bisect(free, kv, size, 2**62)


def _bisect(free: int, kv: KvCache, size: int, high: int) -> int:
    low = 0  # fits; high: may not
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if kv.peak(mid) * size <= free else (low, mid - 1)
    return low


@dataclass(frozen=True)
class TrainFit:
    """A training plan against the budget: its total, and the bytes to spare (or, negative,
    missing)."""

    needed: int
    usable: int

    @property
    def fits(self) -> bool:
        return self.needed <= self.usable

    @property
    def margin(self) -> int:
        return self.usable - self.needed
