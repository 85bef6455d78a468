"""One open checkpoint, as ``safetensors.safe_open`` is one: its tensors by name, read one
at a time, each file opened once and kept open while the handle lives.

:func:`open_tensors` takes what ``--weights`` names: a ``.safetensors`` file, an index or a
model folder (:class:`SafetensorsTensors`; a single file may hold GPTQ or AWQ linears, which
:meth:`Tensors.dequantised` turns into floats) or a ``.gguf`` file (:class:`GgufTensors`).
Every header is read and checked once, when the handle is made (a shard's when it is first
needed); reading a tensor reads its bytes and nothing else.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ffncli.base.files import open_kept
from ffncli.errors import WeightsError
from ffncli.formats import gguf, quantised, safetensors

if TYPE_CHECKING:
    import numpy as np

    from ffncli.formats.quantised import Linear


class Tensors:
    """Named tensors of one checkpoint, read one at a time, shapes checked before reading.
    Names are found under any prefix (``model.``, ``transformer.``) in a safetensors
    checkpoint, as they are in a GGUF file."""

    path: Path

    def find(self, stem: str) -> str | None:
        raise NotImplementedError

    def shape(self, name: str) -> tuple[int, ...]:
        raise NotImplementedError

    def read(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """The tensor as float32 (float64 when stored so), in its stored shape; with ``rows``
        only those rows of its first axis, in that order."""
        raise NotImplementedError

    def layers_present(self) -> str:
        """Which numbered layers the checkpoint has (``layers 0-11``), for an error."""
        raise NotImplementedError

    def layer_count(self) -> int:
        """The highest numbered layer the tensor names hold, plus one (0 for none): what a
        config's layer count is checked against before anything is sized by it."""
        raise NotImplementedError

    def quantised_linears(self) -> dict[str, Linear]:
        """GPTQ, AWQ or bitsandbytes linears by prefix (``model.layers.0.mlp.up_proj``); none
        in a float checkpoint."""
        return {}

    def dequantised(self, linear: Linear) -> np.ndarray:
        raise NotImplementedError

    def mxfp4(self, stem: str) -> np.ndarray | None:
        """The tensor ``stem`` stored in MXFP4 (``stem_blocks``, ``stem_scales``: gpt-oss's
        experts), dequantised to float32 in its logical shape; None when not stored so."""
        return None

    def close(self) -> None:
        pass

    def __enter__(self) -> Tensors:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading with checks ------------------------------------------------------------------

    def check(self, stem: str, shape: tuple[int, ...] | None) -> str:
        """The stored name of tensor ``stem`` (under any prefix), checked in the header to be
        there with ``shape`` (None: any), nothing read."""
        name = self.find(stem)
        if name is None:
            if self.find(stem.removesuffix(".weight") + ".qweight") is not None:
                raise WeightsError(f"{self.path}: tensor '{stem}' is quantised (GPTQ or AWQ "
                                   "qweight); the whole-model forward reads float checkpoints "
                                   "and GGUF files")
            raise WeightsError(f"{self.path}: missing tensor '{stem}'")
        if shape is not None and self.shape(name) != shape:
            raise WeightsError(f"{self.path}: tensor '{name}': expected shape {shape}, got "
                               f"{self.shape(name)}")
        return name

    def get(self, stem: str, shape: tuple[int, ...] | None, dtype: np.dtype,
            required: bool = True) -> np.ndarray | None:
        """The tensor ``stem`` (under any prefix), checked to have ``shape`` (None: any)."""
        if not required and self.find(stem) is None:
            return None
        return self.read(self.check(stem, shape)).astype(dtype, copy=False)

    def need(self, stem: str, shape: tuple[int, ...] | None, dtype: np.dtype) -> np.ndarray:
        array = self.get(stem, shape, dtype)
        assert array is not None  # required
        return array

    def rows(self, stem: str, ids: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """Rows ``ids`` of a 2-D table (the embeddings of a batch), reading only those."""
        import numpy as np

        name = self.find(stem)
        if name is None:
            raise WeightsError(f"{self.path}: missing tensor '{stem}'")
        unique, inverse = np.unique(ids, return_inverse=True)
        return self.read(name, unique).astype(dtype, copy=False)[inverse.ravel()]


def _layer_numbers(names: Iterable[str], pattern: str) -> list[int]:
    return sorted({int(m.group(1)) for name in names for m in [re.search(pattern, name)] if m})


def _numbered(names: Iterable[str], pattern: str, none: str) -> str:
    found = _layer_numbers(names, pattern)
    return f"layers {found[0]}-{found[-1]}" if found else none


_SAFETENSORS_LAYER = r"(?:layer|layers|h|block)\.(\d{1,18})\."
_GGUF_LAYER = r"^blk\.(\d{1,18})\."


class SafetensorsTensors(Tensors):
    """A safetensors checkpoint: one file, or the shards its index names."""

    def __init__(self, checkpoint: safetensors.Checkpoint) -> None:
        self.checkpoint, self.path = checkpoint, checkpoint.path
        self._files: dict[Path, BinaryIO] = {}
        self._lock = threading.Lock()  # a file is opened once, whichever thread reads first
        self._linears: dict[str, Linear] | None = None

    def find(self, stem: str) -> str | None:
        return safetensors.find_tensor(self.checkpoint.shard_of, stem)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.checkpoint.tensor(name)[1].shape

    def _file(self, shard: Path) -> BinaryIO:
        with self._lock:
            if shard not in self._files:
                self._files[shard] = open_kept(shard, "weights file", WeightsError)
            return self._files[shard]

    def read(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        header, info = self.checkpoint.tensor(name)
        return safetensors.read_tensor(header, info, rows, file=self._file(header.path))

    def layers_present(self) -> str:
        return _numbered(self.checkpoint.shard_of, _SAFETENSORS_LAYER, "no numbered layers")

    def layer_count(self) -> int:
        return max(_layer_numbers(self.checkpoint.shard_of, _SAFETENSORS_LAYER), default=-1) + 1

    def quantised_linears(self) -> dict[str, Linear]:
        """A single file's quantised linears (an index's shards are read as floats)."""
        if self._linears is None:
            self._linears = {}
            if self.checkpoint.index is None:
                header = self.checkpoint.header(self.path)
                if quantised.recognise(header):
                    self._linears = {lin.name.removesuffix(".weight"): lin
                                     for lin in quantised.quantised_linears(header)}
        return self._linears

    def dequantised(self, linear: Linear) -> np.ndarray:
        return quantised.dequantised(self.checkpoint.header(self.path), linear,
                                     file=self._file(self.path))

    def mxfp4(self, stem: str) -> np.ndarray | None:
        blocks, scales = self.find(stem + "_blocks"), self.find(stem + "_scales")
        if blocks is None or scales is None:
            return None
        from ffncli.formats.mxfp4 import dequantise

        codes, powers = (quantised.uint8s(header, info, self._file(header.path))
                         for header, info in map(self.checkpoint.tensor, (blocks, scales)))
        return dequantise(codes, powers, f"{self.path}: tensor '{blocks}'")

    def close(self) -> None:
        """Close the files (a later read opens its file again, to be closed again)."""
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()


class GgufTensors(Tensors):
    """A GGUF file: names exact (``blk.0.ffn_up.weight``), every tensor dequantised to
    float32 by the gguf package."""

    def __init__(self, header: gguf.GgufHeader) -> None:
        self.header, self.path = header, header.path
        self._kept: BinaryIO | None = None
        self._lock = threading.Lock()

    def find(self, stem: str) -> str | None:
        return stem if stem in self.header.tensors else None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.header.tensors[name].shape)

    def read(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        with self._lock:
            if self._kept is None:
                self._kept = open_kept(self.path, "weights file", WeightsError)
            kept = self._kept
        return gguf.dequantised(self.header, self.header.tensors[name], rows, file=kept)

    def layers_present(self) -> str:
        return _numbered(self.header.tensors, _GGUF_LAYER, "no blk.N layers")

    def layer_count(self) -> int:
        return max(_layer_numbers(self.header.tensors, _GGUF_LAYER), default=-1) + 1

    def close(self) -> None:
        """Close the file (a later read opens it again, to be closed again)."""
        with self._lock:
            if self._kept is not None:
                self._kept.close()
                self._kept = None


def is_checkpoint(path: Path) -> bool:
    """Whether ``--weights`` names a checkpoint: a .gguf or .safetensors file, an index
    (.json) or a folder."""
    return path.suffix.lower() in (".gguf", ".safetensors", ".json") or os.path.isdir(path)


def open_tensors(path: Path) -> Tensors:
    """The checkpoint ``--weights`` names: a ``.gguf`` file, or a ``.safetensors`` file, an
    index or a model folder."""
    if path.suffix.lower() == ".gguf":
        return GgufTensors(gguf.read_header(path))
    return SafetensorsTensors(safetensors.open_checkpoint(path))
