"""The header of a ``.safetensors`` file, and counting parameters from it alone.

A safetensors file is an 8-byte little-endian header length, a JSON header naming every
tensor's dtype, shape and byte range, then the raw data. Counting reads the header only, so
it is instant on a 15 GB checkpoint. This module does not import NumPy.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from ffncli.errors import WeightsError
from ffncli.files import open_file
from ffncli.textformats import Malformed, brief, parse_json

FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
INT_DTYPES = {"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1,
              "BOOL": 1}
MAX_HEADER = 100_000_000  # the format's own limit (safetensors' MAX_HEADER_SIZE)
MAX_DIMS = 64  # dimensions of one tensor (NumPy's limit; real tensors have at most 5 or so)
MAX_DIM = 2**63 - 1  # one dimension: what an int64 index holds
_FIELDS = ("dtype", "shape", "data_offsets")

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
    """Parse and check the header; no tensor data is read.

    Everything is checked before it is trusted: the header length against the format's limit
    and the file's size, the JSON strictly (no duplicate keys, NaN or deep nesting), and each
    entry's fields, dtype, shape and byte range, which must lie in the data and overlap no
    other tensor's (gaps between tensors are allowed)."""
    with open_file(path, "weights file", WeightsError) as f:
        size = f.seek(0, 2)
        f.seek(0)
        prefix = f.read(8)
        if len(prefix) < 8:
            raise WeightsError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", prefix)
        if n > MAX_HEADER:
            raise WeightsError(f"{path}: not a safetensors file (header length {n:,} is over "
                               f"the format's limit of {MAX_HEADER:,} bytes)")
        if 8 + n > size:
            raise WeightsError(f"{path}: not a safetensors file (header length {n:,} runs "
                               f"past the end of the file, {size:,} bytes)")
        raw = f.read(n)
    if len(raw) < n:  # the file shrank after it was measured
        raise WeightsError(f"{path}: not a safetensors file (header length {n:,} runs past the "
                           f"end of the file, {8 + len(raw):,} bytes)")
    try:
        data = parse_json(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise WeightsError(f"{path}: not a safetensors file (header is not UTF-8 text)") from None
    except Malformed as exc:
        raise WeightsError(f"{path}: not a safetensors file (header is not valid "
                           f"JSON{exc.where}: {exc.problem})") from None
    if not isinstance(data, dict):
        raise WeightsError(f"{path}: not a safetensors file (header is not a JSON object)")
    base, data_size = 8 + n, size - 8 - n
    tensors: dict[str, TensorInfo] = {}
    for name, entry in data.items():
        if name == "__metadata__":
            _check_metadata(path, entry)
            continue
        tensors[name] = _tensor(path, name, entry, base, data_size)
    _check_overlaps(path, tensors.values(), base)
    return Header(path, tensors)


def _check_metadata(path: Path, entry: object) -> None:
    """Free-form text: a mapping of strings to strings, as the format defines it."""
    if not (isinstance(entry, dict)
            and all(isinstance(v, str) for v in entry.values())):
        raise WeightsError(f"{path}: header key '__metadata__': expected a mapping of strings "
                           f"to strings, got {brief(entry)}")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensor(path: Path, name: str, entry: object, base: int, data_size: int) -> TensorInfo:
    where = f"{path}: tensor '{name}'"
    if not isinstance(entry, dict):
        raise WeightsError(f"{where}: expected an object with dtype, shape and data_offsets, "
                           f"got {brief(entry)}")
    for key in entry:
        if key not in _FIELDS:
            raise WeightsError(f"{where}: unknown field {brief(key)}; expected dtype, shape, "
                               "data_offsets")
    for key in _FIELDS:
        if key not in entry:
            raise WeightsError(f"{where}: missing field '{key}'")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str):
        raise WeightsError(f"{where}: dtype: expected a string such as 'F32', got {brief(dtype)}")
    itemsize = FLOAT_DTYPES.get(dtype) or INT_DTYPES.get(dtype)
    if itemsize is None:
        raise WeightsError(f"{where}: unknown dtype {brief(dtype)}; known: "
                           f"{', '.join([*FLOAT_DTYPES, *INT_DTYPES])}")
    if not isinstance(shape, list) or not all(_whole(d) for d in shape):
        raise WeightsError(f"{where}: shape: expected a list of whole numbers >= 0, got "
                           f"{brief(shape)}")
    if len(shape) > MAX_DIMS or any(d > MAX_DIM for d in shape):
        raise WeightsError(f"{where}: shape: expected at most {MAX_DIMS} dimensions, each "
                           f"below 2**63, got {brief(shape)}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_whole, offsets))):
        raise WeightsError(f"{where}: data_offsets: expected [start, end], two whole numbers "
                           f">= 0, got {brief(offsets)}")
    start, end = offsets
    if start > end:
        raise WeightsError(f"{where}: data_offsets: expected start <= end, got "
                           f"{brief(offsets)}")
    if end > data_size:
        raise WeightsError(f"{where}: data_offsets {brief(offsets)} run past the end of the "
                           f"data ({data_size:,} bytes after the header)")
    info = TensorInfo(name, dtype, tuple(shape), base + start, base + end)
    if end - start != info.numel * itemsize:
        raise WeightsError(f"{where}: data_offsets {brief(offsets)} hold {end - start:,} "
                           f"bytes, but shape {brief(shape)} of {dtype} needs "
                           f"{info.numel * itemsize:,}")
    return info


def _check_overlaps(path: Path, tensors: Iterable[TensorInfo], base: int) -> None:
    """No two tensors share a byte (empty ones occupy none). Sorted by start, each must end
    before the next begins."""
    ranges = sorted((t for t in tensors if t.end > t.start), key=lambda t: (t.start, t.end))
    for a, b in pairwise(ranges):
        if b.start < a.end:
            raise WeightsError(
                f"{path}: tensors '{a.name}' and '{b.name}' overlap (data_offsets "
                f"[{a.start - base}, {a.end - base}] and [{b.start - base}, {b.end - base}])")


# Leaves of tensors that are saved but are not parameters: causal masks, rotary tables,
# DeepSeek-V3's router score bias (a buffer updated outside training), Gemma's embedding scale.
_BUFFER_LEAVES = ("position_ids", "inv_freq", "original_inv_freq", "masked_bias",
                  "e_score_correction_bias", "embed_positions", "embed_scale")

# First name segments of the task heads that masked-LM, causal-LM and pre-training classes add
# to a base model (BertForMaskedLM's cls.predictions, DistilBertForMaskedLM's vocab_*, ELECTRA's
# generator and discriminator heads, RoBERTa's lm_head).
_HEAD_SEGMENTS = ("lm_head", "embed_out", "cls", "vocab_transform", "vocab_layer_norm",
                  "vocab_projector", "generator_predictions", "generator_lm_head",
                  "discriminator_predictions")


def is_buffer(info: TensorInfo) -> bool:
    """Integer tensors and known non-trainable buffers (causal masks, rotary frequencies)."""
    if info.dtype in INT_DTYPES:
        return True
    leaf = info.name.rsplit(".", 1)[-1]
    if leaf in _BUFFER_LEAVES:
        return True
    return info.name.endswith("attn.bias") and len(info.shape) == 4  # GPT-2's causal mask


def group_of(name: str) -> str:
    """embeddings / attention / ffn / norms / head / pooler / other, from a tensor's name."""
    n = name.lower()
    segments = n.split(".")
    if segments[0] in _HEAD_SEGMENTS or "lm_head" in segments:
        return "head"  # before norms: cls.predictions.transform.LayerNorm is the head's
    if "norm" in n or "ln_" in n:
        return "norms"
    if "pooler" in n:
        return "pooler"
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
    from ffncli import quantised

    if quantised.recognise(header):  # GPTQ, AWQ, bitsandbytes: logical parameters, stored bytes
        return quantised.count_file(header)
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
