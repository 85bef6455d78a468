"""TODO: formats.tensors (from forward)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ffncli.errors import WeightsError
from ffncli.formats.safetensors import Checkpoint

if TYPE_CHECKING:
    from ffncli.formats.gguf import GgufHeader
Array = np.ndarray


class Tensors:
    """Named weights of a checkpoint, read one at a time, shapes checked before reading."""

    path: Path

    def find(self, name: str) -> str | None:
        raise NotImplementedError

    def shape(self, name: str) -> tuple[int, ...]:
        raise NotImplementedError

    def _read(self, name: str, rows: Array | None) -> Array:
        raise NotImplementedError

    def get(self, stem: str, shape: tuple[int, ...] | None, dtype: np.dtype,
            required: bool = True) -> Array | None:
        """The tensor ``stem`` (under any prefix), checked to have ``shape`` (None: any)."""
        name = self.find(stem)
        if name is None:
            if required and self.find(stem.removesuffix(".weight") + ".qweight") is not None:
                raise WeightsError(f"{self.path}: tensor '{stem}' is quantised (GPTQ or AWQ "
                                   "qweight); the whole-model forward reads float checkpoints "
                                   "and GGUF files")
            if required:
                raise WeightsError(f"{self.path}: missing tensor '{stem}'")
            return None
        if shape is not None and self.shape(name) != shape:
            raise WeightsError(f"{self.path}: tensor '{name}': expected shape {shape}, got "
                               f"{self.shape(name)}")
        return self._read(name, None).astype(dtype, copy=False)

    def need(self, stem: str, shape: tuple[int, ...] | None, dtype: np.dtype) -> Array:
        array = self.get(stem, shape, dtype)
        assert array is not None  # required
        return array

    def rows(self, stem: str, ids: Array, dtype: np.dtype) -> Array:
        """Rows ``ids`` of a 2-D table (the embeddings of a batch), reading only those."""
        name = self.find(stem)
        if name is None:
            raise WeightsError(f"{self.path}: missing tensor '{stem}'")
        unique, inverse = np.unique(ids, return_inverse=True)
        return self._read(name, unique).astype(dtype, copy=False)[inverse.ravel()]


class SafetensorsTensors(Tensors):
    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint, self.path = checkpoint, checkpoint.path

    def find(self, name: str) -> str | None:
        from ffncli.formats.safetensors import find_tensor

        return find_tensor(self.checkpoint.shard_of, name)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.checkpoint.tensor(name)[1].shape

    def _read(self, name: str, rows: Array | None) -> Array:
        from ffncli.formats.safetensors import read_tensor

        return read_tensor(*self.checkpoint.tensor(name), rows=rows)


class GgufTensors(Tensors):
    def __init__(self, header: GgufHeader) -> None:
        self.header, self.path = header, header.path

    def find(self, name: str) -> str | None:
        return name if name in self.header.tensors else None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.header.tensors[name].shape)

    def _read(self, name: str, rows: Array | None) -> Array:
        from ffncli.formats.gguf import dequantised

        return dequantised(self.header, self.header.tensors[name], rows)
