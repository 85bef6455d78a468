"""GGUF files (llama.cpp): the header walked and checked, tensors dequantised, the values of
metadata arrays (a tokenizer's tokens) read on demand.

A GGUF file is a magic ``GGUF``, a version, the tensor and metadata counts, the metadata
(typed key/value pairs: ``general.architecture``, ``llama.embedding_length``, the tokenizer's
arrays...), one info per tensor (name, dimensions innermost first, GGML type, offset), then
the aligned tensor data.

The header is walked here, in pure Python over the file's first bytes (4 MB, more when the
header is longer): counting (``ffncli.counting.files``) never reads tensor data and never
imports NumPy. The ``gguf``
package's own reader turns every one of the ~100,000 tokenizer strings of a small model
into NumPy arrays (3 s on SmolLM2-135M) and loops on an array length that runs past the end
of the file, so it is the oracle of the tests instead. Dequantising (``run``,
``relu-stats``, ``permute-check``) is the ``gguf`` package's (``gguf.quants.dequantize``), an
optional extra: ``pip install 'ffncli[gguf]'``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ffncli.base.files import kept_or_opened, open_file, read_at
from ffncli.base.validate import brief
from ffncli.errors import WeightsError
from ffncli.formats.sources import ByteSource, LocalBytes

if TYPE_CHECKING:
    import numpy as np


MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 (2023) had 32-bit lengths; llama.cpp reads 2 and 3
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NESTING = 8  # arrays of arrays in the metadata
# The fewest bytes one metadata entry takes (key length, value type, a one-byte value) and one
# tensor info (name length, dimension count, type, offset): what the counts are checked by.
KEY_BYTES = 8 + 4 + 1
INFO_BYTES = 8 + 4 + 4 + 8
FIRST_READ = 1 << 22  # bytes read for the header, 8 times more until it fits (SmolLM2's: 2 MB)

# GGML tensor types: id -> (name, elements per block, bytes per block), as gguf.constants'
# GGMLQuantizationType and GGML_QUANT_SIZES (a test keeps the two the same). Held here so that
# counting never imports the gguf package, which imports NumPy.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18),
}
INTEGER_TYPES = ("I8", "I16", "I32", "I64")
# What run dequantises to float32 (gguf.quants.dequantize; F64 is cast).
DEQUANTISED = ("F32", "F16", "BF16", "F64", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K",
               "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
               "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4")

# Metadata value types: id -> (struct format, size) for scalars; 8 string, 9 array.
_SCALARS = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4),
            6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8)}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class GgufArray:
    """A metadata array, by its length (the tokenizer's tokens are not kept); the values of a
    short array of numbers or booleans (per-layer widths, a sliding-window pattern) too."""

    item_type: int
    length: int
    values: tuple[Any, ...] = ()  # an array of at most KEPT_ITEMS scalars, else ()


KEPT_ITEMS = 4096  # scalars of an array kept as values: per-layer keys have one a layer


@dataclass(frozen=True)
class GgufTensor:
    name: str
    type_name: str
    dims: tuple[int, ...]  # GGUF's order: the innermost (contiguous) dimension first
    start: int  # absolute byte offset in the file
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.dims)

    @property
    def shape(self) -> tuple[int, ...]:
        """NumPy's (row-major) shape: the dimensions outermost first."""
        return self.dims[::-1]


@dataclass(frozen=True)
class GgufHeader:
    path: Path
    version: int
    little_endian: bool
    metadata: dict[str, Any]  # int, float, bool, str, or GgufArray
    tensors: dict[str, GgufTensor]

    @property
    def architecture(self) -> str:
        value = self.metadata.get("general.architecture")
        if value is None:
            raise WeightsError(f"{self.path}: missing metadata key 'general.architecture'")
        if not isinstance(value, str) or not value:
            raise WeightsError(f"{self.path}: metadata key 'general.architecture': expected a "
                               f"name such as 'llama', got {brief(value)}")
        return value


# ---------------------------------------------------------------------------------------------
# The header, walked and checked before anything is trusted.


class _NeedMore(Exception):
    """The walk went past the bytes read so far, not past the file: read more and walk again."""


class _Walker:
    """A cursor over the first bytes of the file that refuses to step past them: past the
    end of the file it is an error, past what was read it asks for more."""

    def __init__(self, path: str | Path, buf: bytes, size: int, order: str) -> None:
        self.path, self.buf, self.size, self.order, self.pos = path, buf, size, order, 0
        self.limit = len(buf)

    def take(self, n: int, what: str) -> int:
        if n > self.limit - self.pos:
            if self.limit < self.size:
                raise _NeedMore
            raise WeightsError(f"{self.path}: the GGUF header is cut short ({what} runs past "
                               f"the end of the file, {self.size:,} bytes)")
        start = self.pos
        self.pos += n
        return start

    def scalar(self, fmt: str, size: int, what: str) -> Any:
        return struct.unpack_from(self.order + fmt, self.buf, self.take(size, what))[0]

    def skip_strings(self, count: int, what: str) -> None:
        """Step over ``count`` strings (a tokenizer's 100,000 tokens): the hot loop of the
        walk, so written with locals."""
        unpack, buf, pos, last = struct.Struct(self.order + "Q").unpack_from, self.buf, \
            self.pos, self.limit - 8
        for _ in range(count):
            if pos > last:
                break
            pos += 8 + unpack(buf, pos)[0]
        else:
            if pos <= self.limit:
                self.pos = pos
                return
        self.pos = min(pos, self.limit)
        self.take(8, what)  # past the end: the error, or more to read

    def texts(self, count: int, what: str) -> list[str]:
        """``count`` UTF-8 strings (a tokenizer's tokens): the hot loop written with locals;
        at the first string that runs past what was read, or is not UTF-8, :meth:`text`
        takes over, to read more or to say what is wrong."""
        unpack, buf, pos, limit = struct.Struct(self.order + "Q").unpack_from, self.buf, \
            self.pos, self.limit
        out: list[str] = []
        try:
            for _ in range(count):
                start = pos + 8
                if start > limit:
                    break
                end = start + unpack(buf, pos)[0]
                if end > limit:
                    break
                out.append(buf[start:end].decode("utf-8"))
                pos = end
        except UnicodeDecodeError:
            pass
        self.pos = pos
        return out + [self.text(f"{what}, item {j}") for j in range(len(out), count)]

    def raw_string(self, what: str) -> bytes:
        n = self.scalar("Q", 8, what)
        start = self.take(n, what)
        return bytes(self.buf[start:start + n])

    def text(self, what: str) -> str:
        raw = self.raw_string(what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise WeightsError(f"{self.path}: {what} is not UTF-8 text: "
                               f"{brief(raw)}") from None

    def value(self, kind: int, key: str, depth: int = 0) -> Any:
        what = f"metadata key '{key}'"
        if kind in _SCALARS:
            return self.scalar(*_SCALARS[kind], what)
        if kind == _STRING:
            return self.raw_string(what).decode("utf-8", "replace")
        if kind != _ARRAY:
            raise WeightsError(f"{self.path}: {what}: unknown value type {kind}; expected 0-12")
        if depth >= MAX_NESTING:
            raise WeightsError(f"{self.path}: {what}: arrays nested deeper than {MAX_NESTING}")
        item = self.scalar("I", 4, what)
        length = self.scalar("Q", 8, what)
        if item in _SCALARS:
            fmt, size = _SCALARS[item]
            start = self.take(length * size, what)
            if length <= KEPT_ITEMS:
                values = struct.unpack_from(f"{self.order}{length}{fmt}", self.buf, start)
                return GgufArray(item, length, values)
        elif item == _STRING:
            if length * 8 > self.limit - self.pos:  # each string has at least its length
                self.take(length * 8, what)
            self.skip_strings(length, what)
        else:
            if item != _ARRAY:
                raise WeightsError(f"{self.path}: {what}: unknown array item type {item}; "
                                   "expected 0-12")
            if length * 12 > self.limit - self.pos:  # each array has at least type and length
                self.take(length * 12, what)
            for _ in range(length):
                self.value(item, key, depth + 1)
        return GgufArray(item, length)


def read_header(path: Path) -> GgufHeader:
    """A local file's metadata and tensor infos, checked (:func:`parse_header`)."""
    with open_file(path, "weights file", WeightsError) as f:
        return parse_header(LocalBytes(f, path, FIRST_READ))


def parse_header(source: ByteSource) -> GgufHeader:
    """The metadata and tensor infos of ``source`` (a local file, or one on the Hub read by
    range requests), checked: magic, version, every length against the file, known GGML
    types, tensor data inside the file and not overlapping. No tensor data is read beyond
    what the last read of the header brought: its first ``source.first`` bytes, then
    ``source.growth`` times more each time the walk needs more."""
    name, size = source.name, source.size
    if size < 24:
        head = source.read(0, 4)
        if head != MAGIC:
            raise WeightsError(f"{name}: not a GGUF file (expected the magic bytes "
                               f"b'GGUF', got {brief(head)})")
        raise WeightsError(f"{name}: the GGUF header is cut short ({size} bytes)")
    chunk = source.first
    while True:
        buf = source.read(0, min(size, chunk))
        try:
            return _walk(name, buf, size if len(buf) == min(size, chunk) else len(buf),
                         source.path)
        except _NeedMore:
            chunk *= source.growth


def _walk(path: str, buf: bytes, size: int, file: Path) -> GgufHeader:
    version, little = _version(path, buf)
    w = _Walker(path, buf, size, "<" if little else ">")
    w.pos = 8
    n_tensors = w.scalar("Q", 8, "the tensor count")
    n_keys = w.scalar("Q", 8, "the metadata count")
    _check_counts(w, n_tensors, n_keys)
    metadata = _metadata(w, n_keys)
    infos = [_tensor_info(w) for _ in range(n_tensors)]
    alignment = _alignment(path, metadata)
    data_start = -(-w.pos // alignment) * alignment
    tensors: dict[str, GgufTensor] = {}
    for name, dims, type_id, offset in infos:
        if name in tensors:  # llama.cpp refuses the file: which one would be the weight?
            raise WeightsError(f"{path}: tensor {brief(name)} appears twice")
        tensors[name] = _tensor(path, name, dims, type_id, data_start + offset, size)
    ranges = sorted((t for t in tensors.values() if t.nbytes), key=lambda t: t.start)
    for a, b in pairwise(ranges):
        if b.start < a.start + a.nbytes:
            raise WeightsError(f"{path}: tensors '{a.name}' and '{b.name}' overlap")
    return GgufHeader(file, version, little, metadata, tensors)


def _version(path: str, buf: bytes) -> tuple[int, bool]:
    """The magic checked; the version and whether the file is little-endian."""
    if buf[:4] != MAGIC:
        raise WeightsError(f"{path}: not a GGUF file (expected the magic bytes b'GGUF', got "
                           f"{brief(bytes(buf[:4]))})")
    (version,) = struct.unpack_from("<I", buf, 4)
    little = bool(version & 0xFFFF)  # a file of the other byte order reads as 2 << 24 or so
    version = struct.unpack_from(("<" if little else ">") + "I", buf, 4)[0]
    if version not in VERSIONS:
        raise WeightsError(f"{path}: GGUF version {version}: expected "
                           f"{' or '.join(map(str, VERSIONS))}")
    return version, little


def _metadata(w: _Walker, n_keys: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for i in range(n_keys):
        key = w.text(f"metadata key {i}")
        if key in metadata:
            raise WeightsError(f"{w.path}: metadata key {brief(key)} appears twice")
        metadata[key] = w.value(w.scalar("I", 4, f"metadata key '{key}'"), key)
    return metadata


def _alignment(path: str, metadata: dict[str, Any]) -> int:
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1
            or alignment & (alignment - 1)):
        raise WeightsError(f"{path}: metadata key 'general.alignment': expected a power of "
                           f"two, got {brief(alignment)}")
    return alignment


def _check_counts(w: _Walker, n_tensors: int, n_keys: int) -> None:
    """Counts whose entries cannot fit in the rest of the file are refused at once, before
    the walk: a count of 2**63 tensor infos was walked one info at a time, through the whole
    file (or from the Hub up to what ffncli reads)."""
    need = n_tensors * INFO_BYTES + n_keys * KEY_BYTES
    if need > w.size - w.pos:
        raise WeightsError(f"{w.path}: the GGUF header is cut short ({n_tensors:,} tensor "
                           f"infos and {n_keys:,} metadata keys, at least {need:,} bytes, run "
                           f"past the end of the file, {w.size:,} bytes)")


def _tensor_info(w: _Walker) -> tuple[str, tuple[int, ...], int, int]:
    name = w.text("a tensor name")
    n_dims = w.scalar("I", 4, f"tensor '{name}'")
    if n_dims > MAX_DIMS:
        raise WeightsError(f"{w.path}: tensor '{name}': expected at most {MAX_DIMS} "
                           f"dimensions, got {n_dims}")
    dims = tuple(w.scalar("Q", 8, f"tensor '{name}'") for _ in range(n_dims))
    type_id = w.scalar("I", 4, f"tensor '{name}'")
    offset = w.scalar("Q", 8, f"tensor '{name}'")
    return name, dims, type_id, offset


def _tensor(path: str, name: str, dims: tuple[int, ...], type_id: int, start: int,
            size: int) -> GgufTensor:
    where = f"{path}: tensor '{name}'"
    if type_id not in GGML_TYPES:
        raise WeightsError(f"{where}: unknown GGML type {type_id}; known: "
                           f"{', '.join(t[0] for t in GGML_TYPES.values())}")
    type_name, block, block_bytes = GGML_TYPES[type_id]
    if any(d >= 2**62 for d in dims) or math.prod(dims) >= 2**62:
        raise WeightsError(f"{where}: dimensions {list(dims)} are too large")
    if dims and dims[0] % block:
        raise WeightsError(f"{where}: its rows of {dims[0]:,} are not whole {type_name} "
                           f"blocks of {block}")
    nbytes = math.prod(dims) // block * block_bytes
    if start + nbytes > size:
        raise WeightsError(f"{where}: its data (bytes {start:,} to {start + nbytes:,}) runs "
                           f"past the end of the file ({size:,} bytes): the file is truncated")
    return GgufTensor(name, type_name, dims, start, nbytes)


# ---------------------------------------------------------------------------------------------
# One layer's FFN, dequantised to float32 by the gguf package.

DEQUANTISE_BYTES = 1 << 18  # quantised bytes per task (SmolLM2: 64 KB 2.2 ns a value, 16 KB 4.1)


def _gguf_quants() -> Any:
    import importlib

    try:  # by name: this module is ffncli.formats.gguf, the package gguf
        return importlib.import_module("gguf.quants")
    except ImportError:
        raise WeightsError("running a .gguf file needs the gguf package: pip install "
                           "'ffncli[gguf]'") from None


def dequantised(header: GgufHeader, tensor: GgufTensor, rows: np.ndarray | None = None,
                file: BinaryIO | None = None) -> np.ndarray:
    """The tensor as float32 in NumPy's shape (``dims`` reversed: a GGUF matrix of dims
    [n_in, n_out] is an [n_out, n_in] array, as PyTorch's nn.Linear keeps it). With ``rows``
    (indices into the outermost dimension, each in range: an embedding table's rows for a
    batch of token ids), only those rows are read and dequantised, in that order. ``file``:
    the file, kept open by the caller."""
    import numpy as np

    from ffncli.formats.gguf_blocks import dequantise_rows

    where = f"{header.path}: tensor '{tensor.name}'"
    if tensor.type_name not in DEQUANTISED:
        raise WeightsError(f"{where} is {tensor.type_name}, which cannot be dequantised; "
                           f"these can: {', '.join(DEQUANTISED)}")
    if not header.little_endian:
        raise WeightsError(f"{header.path}: a big-endian GGUF file is counted, not run")
    quants = _gguf_quants()
    shape = tensor.shape if rows is None else (len(rows), *tensor.shape[1:])
    raw = _raw(header, tensor, rows, file)
    if math.prod(shape) == 0:  # nothing to dequantise (and no rows to reshape into)
        return np.zeros(shape, dtype=np.float32)
    if tensor.type_name == "F64":
        return raw.view("<f8").astype(np.float32).reshape(shape)
    _, block, block_bytes = next(t for t in GGML_TYPES.values() if t[0] == tensor.type_name)
    inner = tensor.dims[0] if tensor.dims else 1
    blocks = raw.reshape(-1, inner // block * block_bytes)  # (rows, bytes per row)
    failures = (ValueError, KeyError, NotImplementedError, getattr(quants, "QuantError",
                                                                    ValueError))
    try:  # an older gguf package may not know a newer type
        values = dequantise_rows(quants, blocks, tensor.type_name, inner, DEQUANTISE_BYTES)
    except failures as exc:
        raise WeightsError(f"{where}: the installed gguf package cannot dequantise "
                           f"{tensor.type_name} ({exc})") from None
    return np.asarray(values, dtype=np.float32).reshape(shape)


def _raw(header: GgufHeader, tensor: GgufTensor, rows: np.ndarray | None,
         file: BinaryIO | None) -> np.ndarray:
    """The tensor's bytes (those of ``rows`` only, in that order) as uint8."""
    import numpy as np

    row_bytes = tensor.nbytes // tensor.shape[0] if rows is not None and tensor.numel else 0
    spans = [(tensor.start, tensor.nbytes)] if rows is None else \
        [(tensor.start + int(r) * row_bytes, row_bytes) for r in rows]
    raw = np.empty(sum(n for _, n in spans), dtype=np.uint8)
    got, at = 0, 0
    with kept_or_opened(file, header.path, "weights file", WeightsError) as f:
        for start, want in spans:
            got += read_at(f, start, raw.data[at:at + want])
            at += want
    if got != raw.size:
        raise WeightsError(f"{header.path}: tensor '{tensor.name}': its data runs past the end "
                           "of the file (it was cut short after its header was read)")
    return raw


# ---------------------------------------------------------------------------------------------
# The values of metadata arrays (a tokenizer's tokens and merges), read on demand.


def metadata_arrays(path: Path, keys: tuple[str, ...],
                    header: GgufHeader | None = None) -> dict[str, list[Any]]:
    """The values of the metadata arrays named ``keys`` that the file has (strings as ``str``,
    numbers as ``int``/``float``/``bool``); keys it lacks, or holding no array, are left out.

    :func:`read_header` skips over arrays (counting needs their lengths only, and decoding
    SmolLM2's 49,152 tokens and 48,900 merges costs more than the rest of the header): this
    walks the header a second time, after it has been checked whole (by :func:`read_header`,
    or the ``header`` the caller has read), and decodes only these."""
    if header is None:
        header = read_header(path)  # every length checked against the file first
    wanted = {k for k in keys if isinstance(header.metadata.get(k), GgufArray)}
    if not wanted:
        return {}
    order = "<" if header.little_endian else ">"
    with open_file(path, "weights file", WeightsError) as f:
        size = f.seek(0, 2)
        chunk = FIRST_READ
        while True:
            f.seek(0)
            buf = f.read(min(size, chunk))
            try:
                return _array_values(_Walker(path, buf, len(buf) if len(buf) < min(size, chunk)
                                             else size, order), wanted)
            except _NeedMore:
                chunk *= 8


def _array_values(w: _Walker, wanted: set[str]) -> dict[str, list[Any]]:
    w.pos = 16  # past the magic, the version and the tensor count
    n_keys = w.scalar("Q", 8, "the metadata count")
    found: dict[str, list[Any]] = {}
    for i in range(n_keys):
        key = w.text(f"metadata key {i}")
        kind = w.scalar("I", 4, f"metadata key '{key}'")
        if key not in wanted or kind != _ARRAY:
            w.value(kind, key)
            continue
        what = f"metadata key '{key}'"
        item = w.scalar("I", 4, what)
        length = w.scalar("Q", 8, what)
        if item in _SCALARS:
            fmt, itemsize = _SCALARS[item]
            start = w.take(length * itemsize, what)
            found[key] = list(struct.unpack_from(f"{w.order}{length}{fmt}", w.buf, start))
        elif item == _STRING:
            found[key] = w.texts(length, what)
        else:
            raise WeightsError(f"{w.path}: {what}: expected an array of strings or numbers, "
                               "got an array of arrays")
        if len(found) == len(wanted):
            break
    return found
