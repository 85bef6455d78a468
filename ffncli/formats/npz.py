"""``.npz`` weights, opened without unpickling: every member's .npy header is checked before
anything is read (a member claiming a huge array, a zip bomb, is refused before it is
decompressed), and zipfile's errors on a damaged archive become one line."""

from __future__ import annotations

import contextlib
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ffncli.errors import WeightsError
from ffncli.formats.npy import NpyHeader, read_npy_header

ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError,
               OSError, NotImplementedError, RuntimeError)  # what zipfile raises on bad data


@contextlib.contextmanager
def zip_errors(label: str) -> Iterator[None]:
    """zipfile's errors on a damaged archive (a bad CRC, a cut deflate stream, an unknown
    compression, a bad UTF-8 name) as one WeightsError line."""
    try:
        yield
    except ZIP_ERRORS as exc:
        why = str(exc) or type(exc).__name__
        raise WeightsError(f"{label}: cannot unzip it ({why})") from None


class NpzMember:
    """One .npy array of an .npz archive: its header is checked on opening, its data is read
    only when it is converted (``np.asarray``). ``checked`` compares the header's shape and
    dtype with the spec first, so a member claiming a huge array (a zip bomb) is refused
    before anything is allocated or decompressed."""

    def __init__(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> None:
        self.archive, self.info, self.label = archive, info, label
        with zip_errors(label), archive.open(info) as stream:
            header = read_npy_header(stream, info.file_size, label, WeightsError, "member")
        if header.dtype.hasobject:
            raise WeightsError(f"{label} holds Python objects; refusing to unpickle it")
        header.check_size(info.file_size, label, WeightsError, "member")
        self.header: NpyHeader = header
        self.shape, self.dtype = header.shape, header.dtype

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        h = self.header
        raw = np.empty(h.nbytes, dtype=np.uint8)
        view, done = raw.data, 0
        with zip_errors(self.label), self.archive.open(self.info) as stream:
            assert isinstance(stream, zipfile.ZipExtFile)  # what ZipFile.open reads through
            stream.read(h.offset)  # the header, checked in __init__
            while done < h.nbytes:
                got = stream.readinto(view[done:done + 2**20])
                if not got:
                    break
                done += got  # on reading the last byte zipfile checks the CRC
        if done != h.nbytes:
            raise WeightsError(f"{self.label}: the member is truncated ({h.offset + done:,} "
                               f"bytes, the header promises {h.offset + h.nbytes:,})")
        array = raw.view(h.dtype).reshape(h.shape, order="F" if h.fortran else "C")
        return array if dtype is None else array.astype(dtype)


def open_zip(path: Path, f: BinaryIO) -> zipfile.ZipFile:
    if f.read(4) not in (b"PK\x03\x04", b"PK\x05\x06"):  # a zip's first member, or its end
        raise WeightsError(f"{path}: not an .npz archive (a zip file of .npy arrays)")
    f.seek(0)
    try:
        return zipfile.ZipFile(f)
    except ZIP_ERRORS as exc:
        raise WeightsError(f"{path}: the .npz archive is cut short or damaged ({exc})") \
            from None


def npz_members(path: Path, archive: zipfile.ZipFile) -> dict[str, NpzMember]:
    """The archive's arrays by name (``w1`` for member ``w1.npy``), every member checked:
    named ``<name>.npy``, once, not encrypted, a .npy header whose promise matches the
    member's size."""
    infos = archive.infolist()
    if not infos:
        raise WeightsError(f"{path}: the .npz archive holds no arrays")
    name, times = Counter(info.filename for info in infos).most_common(1)[0]
    if times > 1:
        raise WeightsError(f"{path}: member '{name}' appears {times} times in the archive")
    members: dict[str, NpzMember] = {}
    for info in infos:
        label = f"{path}: member '{info.filename}'"
        if not info.filename.endswith(".npy"):
            raise WeightsError(f"{label}: expected only <name>.npy arrays in an .npz archive")
        if info.flag_bits & 0x1:
            raise WeightsError(f"{label} is encrypted")
        members[info.filename[:-4]] = NpzMember(archive, info, label)
    return members
