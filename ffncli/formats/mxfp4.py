"""MXFP4 (OCP Microscaling, FP4 E2M1 with an E8M0 scale per 32 values), as gpt-oss's published
safetensors store its experts: ``<stem>_blocks`` (..., rows, groups, 16) uint8, two 4-bit codes
a byte (the low nibble first), and ``<stem>_scales`` (..., rows, groups) uint8, a power of two
biased by 127. Value = FP4[code] * 2^(scale - 127); a row's groups of 32 values laid end to end
give the row (transformers' integrations/mxfp4.py, convert_moe_packed_tensors, before its final
transpose). No NumPy at import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ffncli.errors import WeightsError

if TYPE_CHECKING:
    import numpy as np

# FP4 E2M1: sign, two exponent bits, one mantissa bit
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
              -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantise(blocks: np.ndarray, scales: np.ndarray, where: str) -> np.ndarray:
    """(..., rows, groups, 16) codes and (..., rows, groups) scales -> (..., rows, groups * 32)
    float32, exactly (every value is a float32)."""
    import numpy as np

    if blocks.ndim < 2 or blocks.shape[-1] != 16 or blocks.shape[:-1] != scales.shape:
        raise WeightsError(f"{where}: MXFP4 blocks of shape {blocks.shape} and scales of shape "
                           f"{scales.shape}: expected (..., groups, 16) and (..., groups)")
    lut = np.array(FP4_VALUES, dtype=np.float32)
    out = np.empty((*blocks.shape[:-1], 32), dtype=np.float32)
    out[..., 0::2] = lut[blocks & 0x0F]
    out[..., 1::2] = lut[blocks >> 4]
    np.ldexp(out, (scales.astype(np.int32) - 127)[..., None], out=out)
    return out.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32)
