"""GGUF's legacy block types (Q4_0, Q4_1, Q8_0) dequantised straight into the output array:
the same float32 products and sums as the gguf package's NumPy code for them, so the same bits
(the tests compare the two on SmolLM2's tensors and on blocks the package quantises), without
the four temporaries a block that code makes. Every other type is the package's; both run on
every core (:func:`dequantise_rows`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

VALUES = 32  # values a block of each of these types holds


def _scale(blocks: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte ``at`` of each block, as a (blocks, 1) float32 column."""
    return blocks[:, at:at + 2].view("<f2").astype("<f4")


def _q4_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q4_0 blocks (d, 16 bytes of two 4-bit quants) into (blocks, 32): d * (q - 8)."""
    _nibbles(blocks[:, 2:], out)
    out -= 8
    out *= _scale(blocks, 0)


def _q4_1(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q4_1 blocks (d, m, 16 bytes of two 4-bit quants) into (blocks, 32): d * q + m."""
    _nibbles(blocks[:, 4:], out)
    out *= _scale(blocks, 0)
    out += _scale(blocks, 2)


def _nibbles(qs: np.ndarray, out: np.ndarray) -> None:
    """Each block's low 4 bits of its 16 bytes, then their high 4 bits, as float32."""
    halves = out.reshape(out.shape[0], 2, 16)
    np.bitwise_and(qs, 15, out=halves[:, 0], casting="unsafe")
    np.right_shift(qs, 4, out=halves[:, 1], casting="unsafe")


def _q8_0(blocks: np.ndarray, out: np.ndarray) -> None:
    """Q8_0 blocks (d, 32 signed bytes) into (blocks, 32): d * q."""
    np.multiply(blocks[:, 2:].view(np.int8), _scale(blocks, 0), out=out)


# (blocks, bytes a block) -> (blocks, VALUES) float32, in place. SmolLM2's Q4_1: 1.5 ns a value on
# one core, against 2.5 for the package's code.
LEGACY: dict[str, Callable[[np.ndarray, np.ndarray], None]] = {
    "Q4_0": _q4_0, "Q4_1": _q4_1, "Q8_0": _q8_0}


def dequantise_rows(quants: Any, blocks: np.ndarray, type_name: str, inner: int,
                    group_bytes: int) -> np.ndarray:
    """(rows, bytes per row) of ``type_name`` as (rows, inner) float32: the legacy types by
    LEGACY, the others by the gguf package's own code for the type (``dequantize_rows``), on
    groups of about ``group_bytes`` on every core (the package's ``dequantize`` takes 16 rows
    at a time on one: SmolLM2's Q4_1 matrices at 4.0 ns a value there); what has no such code,
    through ``dequantize``."""
    from ffncli.base.parallel import each_in_parallel

    kind = getattr(quants, type_name, None)
    rows_of = getattr(kind, "dequantize_rows", None)
    legacy = LEGACY.get(type_name)
    if rows_of is None and legacy is None:  # F16, F32 (casts), or a package of another shape
        return quants.dequantize(blocks, quants.GGMLQuantizationType[type_name])
    init = getattr(kind, "init_grid", None)
    if init is not None:  # the i-quants' grids, built once, before the threads
        init()
    rows = blocks.shape[0]
    out = np.empty((rows, inner), dtype=np.float32)
    step = max(1, group_bytes // max(1, blocks.shape[1]))

    per_row = inner // VALUES  # blocks a row, of the legacy types

    def part(span: tuple[int, int], worker: int) -> None:
        lo, hi = span
        if legacy is not None:
            legacy(blocks[lo:hi].reshape((hi - lo) * per_row, -1),
                   out[lo:hi].reshape((hi - lo) * per_row, VALUES))
        else:
            assert rows_of is not None
            out[lo:hi] = rows_of(blocks[lo:hi]).reshape(hi - lo, inner)

    each_in_parallel([(lo, min(lo + step, rows)) for lo in range(0, rows, step)], part)
    return out
