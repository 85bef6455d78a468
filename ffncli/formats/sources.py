"""Where a header's bytes come from: a local file, or a file on the Hub read by HTTP range
requests (``ffncli.formats.remote``). The header parsers (``safetensors.parse_header``,
``gguf.parse_header``) read through this one interface, so a remote header is checked by the
same code as a local one. This module does not import NumPy."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Protocol


class ByteSource(Protocol):
    """A file's bytes by offset: its name for messages, its path for the header record, its
    size, and ``read(offset, n)`` (fewer bytes only where the file ends). ``first`` and
    ``growth``: how a GGUF header whose length is not known ahead is read (the first bytes,
    then that many times more until it fits)."""

    name: str
    path: Path
    size: int
    first: int
    growth: int

    def read(self, offset: int, n: int) -> bytes: ...


class LocalBytes:
    """An open local file (the caller keeps it open and closes it)."""

    growth = 8

    def __init__(self, f: BinaryIO, path: Path, first: int) -> None:
        self.f, self.path, self.name, self.first = f, path, str(path), first
        self.size = f.seek(0, 2)

    def read(self, offset: int, n: int) -> bytes:
        self.f.seek(offset)
        return self.f.read(n)
