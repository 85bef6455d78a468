"""The ``.safetensors`` format: the header, checked; checkpoints as they are saved (one file,
shards and their index, a model folder); a tensor's bytes read as an array.

A safetensors file is an 8-byte little-endian header length, a JSON header naming every
tensor's dtype, shape and byte range, then the raw data. Counting reads the header only, so
it is instant on a 15 GB checkpoint (``ffncli.counting.files``). A large model is saved as shards
(``model-00001-of-00004.safetensors`` ...) and a ``model.safetensors.index.json`` mapping each
tensor to its shard; :func:`open_checkpoint` takes a file, an index or a model folder.
Only :func:`read_tensor` imports NumPy, when it is called.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO

from ffncli.base.files import check_file, kept_or_opened, open_file, read_at, reading
from ffncli.base.textformats import Malformed, parse_json, read_json
from ffncli.base.validate import PARAMETERS, Words, brief
from ffncli.errors import ConfigError, WeightsError
from ffncli.formats.sources import ByteSource, LocalBytes

if TYPE_CHECKING:
    import numpy as np

FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
INT_DTYPES = {"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1,
              "BOOL": 1}
MAX_HEADER = 100_000_000  # the format's own limit (safetensors' MAX_HEADER_SIZE)
MAX_DIMS = 64  # dimensions of one tensor (NumPy's limit; real tensors have at most 5 or so)
MAX_DIM = 2**63 - 1  # one dimension: what an int64 index holds
_FIELDS = ("dtype", "shape", "data_offsets")


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
    """Parse and check a local file's header (:func:`parse_header`); no tensor data is read."""
    with open_file(path, "weights file", WeightsError) as f:
        return parse_header(LocalBytes(f, path, 8))


def parse_header(source: ByteSource) -> Header:
    """Parse and check the header of ``source`` (a local file, or one on the Hub read by
    range requests): its first 8 bytes, then the header they measure, nothing more.

    Everything is checked before it is trusted: the header length against the format's limit
    and the file's size, the JSON strictly (no duplicate keys, NaN or deep nesting), and each
    entry's fields, dtype, shape and byte range, which must lie in the data and overlap no
    other tensor's (gaps between tensors are allowed)."""
    name, size = source.name, source.size
    prefix = source.read(0, 8)
    if len(prefix) < 8:
        raise WeightsError(f"{name}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", prefix)
    if n > MAX_HEADER:
        raise WeightsError(f"{name}: not a safetensors file (header length {n:,} is over "
                           f"the format's limit of {MAX_HEADER:,} bytes)")
    if 8 + n > size:
        raise WeightsError(f"{name}: not a safetensors file (header length {n:,} runs "
                           f"past the end of the file, {size:,} bytes)")
    raw = source.read(8, n)
    if len(raw) < n:  # the file shrank after it was measured
        raise WeightsError(f"{name}: not a safetensors file (header length {n:,} runs past the "
                           f"end of the file, {8 + len(raw):,} bytes)")
    try:
        data = parse_json(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise WeightsError(f"{name}: not a safetensors file (header is not UTF-8 text)") from None
    except Malformed as exc:
        raise WeightsError(f"{name}: not a safetensors file (header is not valid "
                           f"JSON{exc.where}: {exc.problem})") from None
    if not isinstance(data, dict):
        raise WeightsError(f"{name}: not a safetensors file (header is not a JSON object)")
    base, data_size = 8 + n, size - 8 - n
    tensors: dict[str, TensorInfo] = {}
    for key, entry in data.items():
        if key == "__metadata__":
            _check_metadata(name, entry)
            continue
        tensors[key] = _tensor(name, key, entry, base, data_size)
    _check_overlaps(name, tensors.values(), base)
    return Header(source.path, tensors)


def _check_metadata(path: str, entry: object) -> None:
    """Free-form text: a mapping of strings to strings, as the format defines it."""
    if not (isinstance(entry, dict)
            and all(isinstance(v, str) for v in entry.values())):
        raise WeightsError(f"{path}: header key '__metadata__': expected a mapping of strings "
                           f"to strings, got {brief(entry)}")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensor(path: str, name: str, entry: object, base: int, data_size: int) -> TensorInfo:
    where = f"{path}: tensor '{name}'"
    dtype, shape, offsets = _fields(where, entry)
    itemsize = _itemsize(where, dtype)
    _check_shape(where, shape)
    start, end = _offsets(where, offsets, data_size)
    info = TensorInfo(name, dtype, tuple(shape), base + start, base + end)
    if end - start != info.numel * itemsize:
        raise WeightsError(f"{where}: data_offsets {brief(offsets)} hold {end - start:,} "
                           f"bytes, but shape {brief(shape)} of {dtype} needs "
                           f"{info.numel * itemsize:,}")
    return info


def _fields(where: str, entry: object) -> tuple[Any, Any, Any]:
    """A header entry's dtype, shape and data_offsets: those three fields and no other."""
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
    return entry["dtype"], entry["shape"], entry["data_offsets"]


def _itemsize(where: str, dtype: object) -> int:
    if not isinstance(dtype, str):
        raise WeightsError(f"{where}: dtype: expected a string such as 'F32', got {brief(dtype)}")
    itemsize = FLOAT_DTYPES.get(dtype) or INT_DTYPES.get(dtype)
    if itemsize is None:
        raise WeightsError(f"{where}: unknown dtype {brief(dtype)}; known: "
                           f"{', '.join([*FLOAT_DTYPES, *INT_DTYPES])}")
    return itemsize


def _check_shape(where: str, shape: object) -> None:
    if not isinstance(shape, list) or not all(_whole(d) for d in shape):
        raise WeightsError(f"{where}: shape: expected a list of whole numbers >= 0, got "
                           f"{brief(shape)}")
    if len(shape) > MAX_DIMS or any(d > MAX_DIM for d in shape):
        raise WeightsError(f"{where}: shape: expected at most {MAX_DIMS} dimensions, each "
                           f"below 2**63, got {brief(shape)}")


def _offsets(where: str, offsets: object, data_size: int) -> tuple[int, int]:
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
    return start, end


def _check_overlaps(path: str, tensors: Iterable[TensorInfo], base: int) -> None:
    """No two tensors share a byte (empty ones occupy none). Sorted by start, each must end
    before the next begins."""
    ranges = sorted((t for t in tensors if t.end > t.start), key=lambda t: (t.start, t.end))
    for a, b in pairwise(ranges):
        if b.start < a.end:
            raise WeightsError(
                f"{path}: tensors '{a.name}' and '{b.name}' overlap (data_offsets "
                f"[{a.start - base}, {a.end - base}] and [{b.start - base}, {b.end - base}])")


# ---------------------------------------------------------------------------------------------
# Checkpoints as they are saved: one file, or shards and their index, in a model folder.

SINGLE_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
MAX_INDEX = 64 * 1024 * 1024  # DeepSeek-V3's index (91,991 tensors) is 8.9 MB
_INDEX_KEYS = ("metadata", "weight_map")


@dataclass(frozen=True)
class Checkpoint:
    """A model's safetensors weights: one file, or the shards its index names.

    ``shard_of`` maps every tensor name to the file holding it: from the index, without
    opening any shard, or from the single file's header. A shard's header is read when it is
    first needed, and checked against the index then: it must hold exactly the tensors the
    index maps to it."""

    path: Path  # the single file, or the index
    index: Path | None  # the index; None for a single file
    shard_of: dict[str, Path]
    _headers: dict[Path, Header] = field(default_factory=dict, compare=False, repr=False)
    _listed: dict[Path, set[str]] = field(default_factory=dict, compare=False, repr=False)
    # how a shard's header is read: read_header, or by range from the Hub (formats/remote.py)
    reader: Callable[[Path], Header] | None = field(default=None, compare=False, repr=False)

    @property
    def shards(self) -> tuple[Path, ...]:
        return tuple(sorted(set(self.shard_of.values())))

    def header(self, shard: Path) -> Header:
        """The header of one shard, read once and checked against the index."""
        if shard not in self._headers:
            header = (self.reader or read_header)(shard)
            if self.index is not None:
                self._check_shard(header)
            self._headers[shard] = header
        return self._headers[shard]

    def tensor(self, name: str) -> tuple[Header, TensorInfo]:
        """The header of the shard holding ``name``, and the tensor's entry in it."""
        header = self.header(self.shard_of[name])
        return header, header.tensors[name]  # present: the shard was checked

    def merged(self) -> Header:
        """Every shard's tensors as one header, for counting (each byte range lies in its own
        shard, so it is not for reading). Reads every shard's header, no tensor data."""
        if self.index is None:
            return self.header(self.path)
        tensors: dict[str, TensorInfo] = {}
        for shard in self.shards:
            tensors.update(self.header(shard).tensors)
        return Header(self.path, tensors)

    def _check_shard(self, header: Header) -> None:
        if not self._listed:  # the index's names by shard, grouped once
            for name, shard in self.shard_of.items():
                self._listed.setdefault(shard, set()).add(name)
        listed = self._listed[header.path]
        if header.tensors.keys() == listed:
            return
        for name in sorted(listed - header.tensors.keys()):
            raise WeightsError(f"{self.index}: tensor '{name}' is mapped to "
                               f"{header.path.name}, which does not hold it")
        for name in header.tensors:
            if name in listed:
                continue
            other = self.shard_of.get(name)
            if other is None:
                raise WeightsError(f"{header.path}: holds tensor '{name}', which {self.index} "
                                   "does not list")
            raise WeightsError(f"{header.path}: holds tensor '{name}', which {self.index} "
                               f"maps to {other.name}")


def open_checkpoint(path: Path, words: Words = PARAMETERS) -> Checkpoint:
    """A ``.safetensors`` file, a ``model.safetensors.index.json``, or a folder holding one of
    them (a ``save_pretrained`` folder, a Hugging Face cache snapshot). An index is read and
    checked and every shard it names must exist; no shard is opened yet. A single file's
    header is read at once. ``words`` name ``weights`` in errors."""
    with reading(path, "weights", WeightsError):
        folder = path.is_dir()
    if folder:
        path = weights_in(path, words)
    if path.suffix.lower() == ".json":
        return Checkpoint(path, path, read_index(path))
    header = read_header(path)
    return Checkpoint(path, None, dict.fromkeys(header.tensors, path), {path: header})


def read_checkpoint(path: Path, words: Words = PARAMETERS) -> Header:
    """Every tensor of the checkpoint at ``path`` (file, index or folder), for counting."""
    return open_checkpoint(path, words).merged()


def weights_in(folder: Path, words: Words = PARAMETERS) -> Path:
    """The weights of a model folder: its ``model.safetensors`` or its index, never both;
    errors say how to give one file in ``words`` (a command's: ``--weights``)."""
    single, index = folder / SINGLE_NAME, folder / INDEX_NAME
    has_single, has_index = os.path.lexists(single), os.path.lexists(index)
    if has_single and has_index:
        raise WeightsError(f"{folder}: holds both {SINGLE_NAME} and {INDEX_NAME}; give one "
                           f"of them with {words.name('weights')}")
    if has_single or has_index:
        return index if has_index else single
    with reading(folder, "weights folder", WeightsError):
        names = sorted(p.name for p in folder.iterdir())
    others = [n for n in names if n.endswith((".safetensors", ".index.json"))]
    pickles = [n for n in names if n.endswith((".bin", ".pt", ".pth", ".ckpt"))]
    hint = ""
    if others:
        hint = f"; it has {', '.join(others[:5])}{', ...' if len(others) > 5 else ''}: give " \
            f"one with {words.name('weights')}"
    elif pickles:
        hint = f"; it has {', '.join(pickles[:5])}{', ...' if len(pickles) > 5 else ''}: " \
            "PyTorch pickles, which ffncli does not read (never unpickled)"
    raise WeightsError(f"{folder}: no {SINGLE_NAME} or {INDEX_NAME} in the folder{hint}")


def read_index(path: Path) -> dict[str, Path]:
    """A ``model.safetensors.index.json``: tensor name -> shard file, checked strictly (JSON
    without duplicate keys, only ``metadata`` and ``weight_map``, each shard a file name
    inside the index's folder that exists)."""
    shard_of = parse_index(path)
    for shard in dict.fromkeys(shard_of.values()):
        check_file(shard, f"shard named by {path.name}", WeightsError)
    return shard_of


def parse_index(path: Path) -> dict[str, Path]:
    """:func:`read_index` without looking for the shards: an index whose shards are on the
    Hub (``ffncli.formats.remote``)."""
    data = read_json(path, "index file", WeightsError, MAX_INDEX, kind="a safetensors index")
    if not isinstance(data, dict):
        raise WeightsError(f"{path}: not a safetensors index: expected a JSON object with a "
                           f"weight_map, got {brief(data)}")
    if "weight_map" not in data:  # a config.json given by mistake says so
        raise WeightsError(f"{path}: not a safetensors index (no 'weight_map' key)")
    for key in data:
        if key not in _INDEX_KEYS:
            raise WeightsError(f"{path}: unknown key {brief(key)}; expected "
                               f"{', '.join(_INDEX_KEYS)}")
    if not isinstance(data.get("metadata", {}), dict):
        raise WeightsError(f"{path}: metadata: expected an object, got "
                           f"{brief(data['metadata'])}")
    weight_map = data["weight_map"]
    if not isinstance(weight_map, dict) or not weight_map:
        raise WeightsError(f"{path}: weight_map: expected an object mapping tensor names to "
                           f"shard files, got {brief(weight_map)}")
    shards: dict[str, Path] = {}
    shard_of: dict[str, Path] = {}
    for name, file in weight_map.items():
        if file not in shards:
            shards[file] = _shard_path(path, name, file)
        shard_of[name] = shards[file]
    return shard_of


def _shard_path(index: Path, name: str, file: object) -> Path:
    """A shard's file name: relative, inside the index's folder (no ``..``, no absolute path;
    checked on the name, since a cache snapshot's files are links into its blobs)."""
    if not isinstance(file, str):
        raise WeightsError(f"{index}: weight_map '{name}': expected a shard file name, got "
                           f"{brief(file)}")
    parts = PurePosixPath(file).parts
    if not file or "\0" in file or file.startswith("/") or ".." in parts or not parts:
        raise WeightsError(f"{index}: weight_map '{name}': shard {brief(file)} is not a file "
                           f"in {index.parent}")
    return index.parent.joinpath(*parts)


# ---------------------------------------------------------------------------------------------
# .safetensors checkpoints: one layer's FFN, read tensor by tensor.


_LOADABLE = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}  # BF16: its 16 bits


def _stored(path: Path, where: str, info: TensorInfo) -> tuple[str, int]:
    """How a loadable tensor is stored (a NumPy dtype string) and its bytes, checked against
    its offsets and against what NumPy can hold."""
    if info.dtype not in _LOADABLE:
        raise WeightsError(f"{path}: tensor '{info.name}' has dtype {info.dtype}; "
                           "F32, F16, BF16 and F64 can be loaded")
    itemsize = FLOAT_DTYPES[info.dtype]
    nbytes = info.numel * itemsize
    if info.start < 0 or info.end - info.start != nbytes:
        raise WeightsError(f"{where}: bytes {info.start}-{info.end} of the file do not hold "
                           f"shape {list(info.shape)} of {info.dtype} ({nbytes:,} bytes)")
    extent = itemsize  # what NumPy must address: zero-length dimensions aside
    for d in info.shape:
        extent *= max(d, 1)
    if len(info.shape) > 32 or extent >= 2**63:  # NumPy >= 1.24 holds 32 dimensions, < 2**63 B
        raise WeightsError(f"{where}: shape {list(info.shape)} cannot be held by an array")
    return _LOADABLE[info.dtype], nbytes


def read_tensor(header: Header, info: TensorInfo, rows: np.ndarray | None = None,
                file: BinaryIO | None = None) -> np.ndarray:
    """One tensor's bytes from the file (nothing else is read), as float32 or float64.

    Exactly ``end - start`` bytes are read into an array allocated for them, after checking
    that they match the shape and lie inside the file as it is now; a file cut short since its
    header was read is an error, never a shorter array. With ``rows`` (indices into the first
    axis, each in range: an embedding table's rows for a batch of token ids), only those rows
    are read, in that order. ``file``: the file, kept open by the caller."""
    import numpy as np

    path, where = header.path, f"{header.path}: tensor '{info.name}'"
    stored, nbytes = _stored(path, where, info)
    raw_dtype = np.dtype(stored)
    shape = info.shape if rows is None else (len(rows), *info.shape[1:])
    row_bytes = nbytes // info.shape[0] if rows is not None and info.shape[0] else nbytes
    spans = [(info.start, nbytes)] if rows is None else \
        [(info.start + int(r) * row_bytes, row_bytes) for r in rows]
    with kept_or_opened(file, path, "weights file", WeightsError) as f:
        size = os.fstat(f.fileno()).st_size
        if info.end > size:
            raise WeightsError(f"{where}: its bytes {info.start:,}-{info.end:,} run past the "
                               f"end of the file ({size:,} bytes); was it cut short?")
        array = np.empty(sum(n for _, n in spans) // raw_dtype.itemsize, dtype=raw_dtype)
        buffer = array.view(np.uint8).data
        at = 0
        for start, want in spans:
            done = read_at(f, start, buffer[at:at + want])
            if done < want:
                raise WeightsError(f"{where}: the file ends after "
                                   f"{start - info.start + done:,} of its {nbytes:,} "
                                   "bytes; was it cut short?")
            at += want
    if info.dtype == "BF16":  # the top 16 bits of a float32
        array = (array.astype(np.uint32) << 16).view(np.float32)
    elif info.dtype == "F16":
        array = array.astype(np.float32)
    return array.reshape(shape)


def find_tensor(names: Iterable[str], stem: str) -> str | None:
    """The tensor named ``stem`` under any prefix (``transformer.``, ``model.``, ``bert.``)."""
    hits = [name for name in names if name == stem or name.endswith("." + stem)]
    return hits[0] if len(hits) == 1 else None


class NoConfig(ConfigError):
    """No config.json beside the weights, where one is needed: the line ends with how to give
    one, in the caller's words (a library call's ``config``; the job that knows the command's
    options says ``--config``: :meth:`worded`)."""

    def __init__(self, what: str, words: Words = PARAMETERS) -> None:
        super().__init__(f"{what}: give {words.name('config')}")
        self.what = what

    def worded(self, words: Words) -> NoConfig:
        return NoConfig(self.what, words)


def config_beside(weights: Path) -> Path | None:
    """The readable ``config.json`` beside a checkpoint: in its folder (a ``save_pretrained``
    or cache snapshot folder), or beside its ``.safetensors`` file or index."""
    import os

    if os.path.isdir(weights):
        beside = weights / "config.json"
    elif weights.suffix.lower() in (".safetensors", ".json") and weights.name != "config.json":
        beside = weights.parent / "config.json"
    else:
        return None
    return beside if os.path.isfile(beside) and os.access(beside, os.R_OK) else None
