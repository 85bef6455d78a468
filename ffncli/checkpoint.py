"""The header of a ``.safetensors`` file, and counting parameters from it alone.

A safetensors file is an 8-byte little-endian header length, a JSON header naming every
tensor's dtype, shape and byte range, then the raw data. Counting reads the header only, so
it is instant on a 15 GB checkpoint. This module does not import NumPy.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from ffncli.errors import WeightsError, reading

FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
INT_DTYPES = {"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1,
              "BOOL": 1}
_MAX_HEADER = 100 * 1024 * 1024  # the format's own limit is 100 MB

GROUPS = ("embeddings", "attention", "ffn", "norms", "head", "pooler", "other")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Header:
    path: Path
    tensors: dict[str, TensorInfo]


def read_header(path: Path) -> Header:
    """Parse and check the header; no tensor data is read."""
    with reading(path, "weights file", WeightsError), open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        prefix = f.read(8)
        if len(prefix) < 8:
            raise WeightsError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", prefix)
        if n > _MAX_HEADER or n + 8 > size:
            raise WeightsError(f"{path}: not a safetensors file (header length {n} does "
                               f"not fit a file of {size} bytes)")
        raw = f.read(n)
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise WeightsError(f"{path}: not a safetensors file (header is not JSON)") from None
    if not isinstance(data, dict):
        raise WeightsError(f"{path}: not a safetensors file (header is not a JSON object)")
    base = 8 + n
    tensors: dict[str, TensorInfo] = {}
    for name, entry in data.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(path, name, entry, base, size)
    return Header(path, tensors)


def _tensor(path: Path, name: str, entry: object, base: int, size: int) -> TensorInfo:
    try:
        dtype = entry["dtype"]  # type: ignore[index]
        shape = tuple(int(s) for s in entry["shape"])  # type: ignore[index]
        start, end = (int(o) for o in entry["data_offsets"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        raise WeightsError(f"{path}: tensor '{name}' has a malformed header entry") from None
    itemsize = FLOAT_DTYPES.get(dtype) or INT_DTYPES.get(dtype)
    if itemsize is None:
        raise WeightsError(f"{path}: tensor '{name}' has unknown dtype {dtype!r}")
    info = TensorInfo(name, dtype, shape, base + start, base + end)
    if end - start != info.numel * itemsize or base + end > size or start < 0:
        raise WeightsError(f"{path}: tensor '{name}' has a byte range that does not match its "
                           f"shape {list(shape)} and dtype {dtype}, or runs past the file's end")
    return info


def is_buffer(info: TensorInfo) -> bool:
    """Integer tensors and known non-trainable buffers (causal masks, rotary frequencies)."""
    if info.dtype in INT_DTYPES:
        return True
    leaf = info.name.rsplit(".", 1)[-1]
    if leaf in ("position_ids", "inv_freq", "masked_bias"):
        return True
    return info.name.endswith("attn.bias") and len(info.shape) == 4  # GPT-2's causal mask


def group_of(name: str) -> str:
    """embeddings / attention / ffn / norms / head / pooler / other, from a tensor's name."""
    n = name.lower()
    if "norm" in n or "ln_" in n:
        return "norms"
    if "pooler" in n:
        return "pooler"
    if n.startswith("lm_head") or n.startswith("embed_out"):
        return "head"
    if any(k in n for k in ("embed", "wte.", "wpe.", "shared.", "token_type", "project_in",
                            "project_out")):
        return "embeddings"
    if any(k in n for k in ("attn", "attention", "relative_attention_bias")):
        return "attention"
    if any(k in n for k in ("mlp", "intermediate", "output.dense", "ffn", "fc1", "fc2",
                            "densereludense", "block_sparse_moe", "feed_forward", "experts")):
        return "ffn"
    return "other"


@dataclass(frozen=True)
class FileCount:
    groups: dict[str, int]  # parameters per group
    buffers: tuple[TensorInfo, ...]
    unplaced: tuple[str, ...]  # parameter tensors in "other"

    @property
    def total(self) -> int:
        return sum(self.groups.values())


def count_file(header: Header) -> FileCount:
    groups = dict.fromkeys(GROUPS, 0)
    buffers: list[TensorInfo] = []
    unplaced: list[str] = []
    for info in header.tensors.values():
        if is_buffer(info):
            buffers.append(info)
            continue
        group = group_of(info.name)
        groups[group] += info.numel
        if group == "other":
            unplaced.append(info.name)
    return FileCount(groups, tuple(buffers), tuple(unplaced))
