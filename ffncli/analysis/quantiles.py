"""Exact quantiles of calibration magnitudes: ``np.quantile``'s default (linear) values to the
bit, from the two order statistics around each target's virtual index, which np.quantile then
interpolates itself.

Magnitudes (floats without a sign bit: no negative value, no -0.0) order as the integers their
bits are, NaN last as in numpy's. Those integers are found by one of two methods, which give
the same bits (``method=``):

- ``"buckets"`` (the default): counted in buckets of their top bits, then only the buckets
  that hold a wanted rank gathered and partitioned (:func:`_bucketed`);
- ``"partitions"``: partitioned in place, one wanted index at a time over shrinking ranges
  (:func:`_partitioned`).

The default is the one that is never much worse (the figures: docs/measured.md, the
calibration's quantiles): where NumPy partitions integers with SIMD (AVX-512 or AVX2) the
partitions are 3.5-7x faster, but without SIMD, and on an AMD EPYC, about 3.5x slower, and
that in milliseconds is three times the buckets' worst case; the buckets' time is two linear
passes whatever the CPU. No method is chosen by a timing taken at run time.
Values with a sign bit are partitioned as they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

Method = Literal["buckets", "partitions"]
METHODS: tuple[Method, ...] = ("buckets", "partitions")
DEFAULT_METHOD: Method = "buckets"


def quantile(values: np.ndarray, q: float, *, method: Method = DEFAULT_METHOD) -> float:
    """``np.quantile(values, q)`` (the default, linear; q a float) to the bit, from the two
    order statistics around its index (``values`` a fresh array, which may be reordered):
    np.quantile itself interpolates between them, given them alone with their weight."""
    pair, gamma = _pairs(values.reshape(-1), [q], method)[0]
    return float(np.quantile(pair, gamma))


def quantiles(values: np.ndarray, targets: Sequence[float], *,
              method: Method = DEFAULT_METHOD) -> list[float]:
    """``np.quantile(values, targets)`` (the default, linear; the targets a float64 array)
    to the bit, from the order statistics around each target's index, found together
    (``values`` a fresh array, which may be reordered)."""
    return [float(np.quantile(pair, np.array([gamma]))[0])  # a float64 q, as given
            for pair, gamma in _pairs(values.reshape(-1), targets, method)]


def _pairs(flat: np.ndarray, targets: Sequence[float], method: Method
           ) -> list[tuple[np.ndarray, float]]:
    """For each target, the two order statistics around numpy's linear virtual index and its
    gamma (at or past the last index: the largest value twice)."""
    n = flat.size
    lows = [_lower(n, q) for q in targets]
    stats = _order_statistics(flat, [low for low, _ in lows if low < n - 1], method)
    top = flat.max() if any(low >= n - 1 for low, _ in lows) else None
    out = []
    for low, gamma in lows:
        if low >= n - 1:
            out.append((np.array([top, top], dtype=flat.dtype), 0.0))
        else:
            out.append((np.array(stats[low], dtype=flat.dtype), gamma))
    return out


def _lower(n: int, q: float) -> tuple[int, float]:
    """numpy's linear virtual index (n - 1) q as its previous index and gamma."""
    virtual = (n - 1) * float(q)
    low = math.floor(virtual)
    return low, virtual - low


def _order_statistics(flat: np.ndarray, indices: Sequence[int], method: Method
                      ) -> dict[int, tuple[np.generic, np.generic]]:
    """The order statistics at each index i < n - 1 and at i + 1 of ``flat`` (a fresh array,
    which may be reordered in place): magnitudes' bits as integers by ``method``, other values
    partitioned as they are."""
    if method not in METHODS:
        raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    if not indices:
        return {}
    keys = _as_ordered_ints(flat)
    if keys is flat:
        return _partitioned(flat, indices)
    if method == "partitions":
        return _partitioned(flat, indices, keys)
    return _bucketed(flat, keys, indices)


_BUCKET_BITS = 15  # the bits after the sign that name a bucket: the exponent and 6 or 3 more
_BLOCK = 1 << 20  # keys counted and gathered a block at a time: the temporaries stay small


def _bucketed(flat: np.ndarray, keys: np.ndarray, indices: Sequence[int]
              ) -> dict[int, tuple[np.generic, np.generic]]:
    """:func:`_order_statistics` of magnitudes, ``keys`` their bits as integers: one pass
    counts the keys of each bucket of their top bits (whose cumulative counts say in which
    bucket each wanted rank lies), one more gathers the buckets that hold a wanted rank, and
    each of those is partitioned at the ranks it holds. Block by block, so that memory grows
    by a few blocks and the buckets gathered, never by copies of the whole."""
    shift = keys.dtype.itemsize * 8 - 1 - _BUCKET_BITS
    blocks = [keys[s:s + _BLOCK] for s in range(0, keys.size, _BLOCK)]
    counts = np.zeros(1 << _BUCKET_BITS, dtype=np.int64)
    for block in blocks:
        counts += np.bincount(block >> shift, minlength=counts.size)
    ends = np.cumsum(counts)  # the ranks below ends[b] lie in the buckets up to b
    ranks = sorted({r for i in indices for r in (i, i + 1)})
    homes = np.searchsorted(ends, ranks, side="right")  # the bucket of each rank
    gathered: dict[int, list[np.ndarray]] = {int(b): [] for b in homes}
    for block in blocks:
        names = block >> shift
        for b, parts in gathered.items():
            parts.append(np.compress(names == b, block))
        del names
    found: dict[int, np.generic] = {}
    for b, parts in gathered.items():
        first = int(ends[b] - counts[b])  # the rank of the bucket's smallest key
        inside = [r - first for r, home in zip(ranks, homes, strict=True) if home == b]
        mine = np.concatenate(parts)
        parts.clear()
        mine.partition(inside)
        for r in inside:
            found[r + first] = mine[r:r + 1].view(flat.dtype)[0]  # the key as its float
    return {i: (found[i], found[i + 1]) for i in indices}


def _partitioned(flat: np.ndarray, indices: Sequence[int], keys: np.ndarray | None = None
                 ) -> dict[int, tuple[np.generic, np.generic]]:
    """:func:`_order_statistics` by partitions of ``flat`` in place: at the middle wanted
    index, then each side at its own, each partition over the range the earlier ones left
    (about 2.3 passes for four indices, against four whole partitions); the one past i, the
    smallest value after i in its range. (np.partition at the four indices at once takes
    twice as long as four separate ones.) ``keys``: ``flat``'s memory as integers that order
    as its values, partitioned instead of it (the same reordering of the same memory)."""
    order = flat if keys is None else keys
    found: dict[int, tuple[np.generic, np.generic]] = {}
    # ranges still to split, each with its wanted indices: ranks lo..hi-1 lie in [lo, hi).
    # (A loop, not a recursive closure, whose reference cycle would keep ``flat`` alive
    # until the garbage collector next ran.)
    ranges = [(0, flat.size, sorted(set(indices)))]
    while ranges:
        lo, hi, wanted = ranges.pop()
        if not wanted:
            continue
        k = len(wanted) // 2
        mid = wanted[k]
        order[lo:hi].partition(mid - lo)
        after = mid + 1 + int(order[mid + 1:hi].argmin()) if mid + 1 < hi else hi
        found[mid] = flat[mid], flat[after]
        ranges += [(lo, mid, wanted[:k]), (mid + 1, hi, wanted[k + 1:])]
    return found


def _as_ordered_ints(flat: np.ndarray) -> np.ndarray:
    """``flat``'s memory as signed integers of its width when that orders it as its floats
    (no sign bit set anywhere), else ``flat`` itself."""
    if flat.dtype.kind != "f" or not flat.size:
        return flat
    ints = flat.view(np.dtype(f"i{flat.dtype.itemsize}"))
    return ints if ints.min() >= 0 else flat

