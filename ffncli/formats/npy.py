"""The ``.npy`` format: headers checked, and outputs written atomically.

Every .npy header is parsed and checked here (:func:`read_npy_header`, also used for the
members of .npz weights), and its promises are checked against the file's size before any
array is allocated: numpy's own loader trusts the header.

A large ``.npy`` input is read chunk by chunk (``ffncli.formats.tokens``), and the output is
written chunk by chunk to a temporary file that is renamed into place at the
end. Neither is memory-mapped: mapped pages count towards resident memory, and a 2 GB input
read through ``np.load(mmap_mode="r")`` would show 2 GB more of it.
"""

from __future__ import annotations

import ast
import errno
import math
import os
import stat
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np

from ffncli.base.files import PARAMETERS, Naming, create_hidden, new_file, same_file
from ffncli.base.signals import signals_held
from ffncli.errors import FfnError, OutputError

# ---------------------------------------------------------------------------------------------
# The .npy header, checked.

NPY_MAGIC = b"\x93NUMPY"
NPY_VERSIONS = {(1, 0): 2, (2, 0): 4, (3, 0): 4}  # version -> bytes of the header length
NPY_MAX_HEADER = 10_000  # numpy's own limit (max_header_size in numpy.lib.format)
NPY_MAX_DIMS = 64  # numpy's
_MAX_DIM = 2**63 - 1
_KEYS = ("descr", "fortran_order", "shape")


def excerpt(text: str, limit: int = 60) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass(frozen=True)
class NpyHeader:
    """What a checked .npy header promises: ``nbytes`` of data from ``offset`` on."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool
    offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def check_size(self, size: int, source: str, error: type[FfnError],
                   what: str = "file") -> None:
        """Refuse a ``size`` other than the header's promise (before anything is allocated)."""
        need = self.offset + self.nbytes
        if size != need:
            state = "truncated" if size < need else "longer than its header says"
            promise = f"{need:,}" if need <= _MAX_DIM else "more than 2**63 - 1"
            raise error(f"{source}: the {what} is {state} ({size:,} bytes, the header "
                        f"promises {promise})")


def read_npy_header(f: IO[bytes], size: int, source: str, error: type[FfnError],
                    what: str = "file") -> NpyHeader:
    """Read and check the .npy header at the start of ``f``, ``size`` bytes in all.

    Nothing numpy's helpers would do with a hostile header (a huge allocation, an exception
    of any type) can happen: the format version, the header's length, its literal, its keys
    and each value are checked here, and every failure is one ``error`` line. The data size is
    left to :meth:`NpyHeader.check_size`, so that the caller can refuse a dtype first."""
    decoded, offset = _header_text(f, size, source, error, what)
    header = _literal(decoded)
    if not isinstance(header, dict) or set(header) != set(_KEYS):
        raise error(f"{source}: .npy header: expected a dict of 'descr', 'fortran_order' and "
                    f"'shape', got {excerpt(decoded)}")
    shape, fortran = header["shape"], header["fortran_order"]
    if not (isinstance(shape, tuple) and len(shape) <= NPY_MAX_DIMS
            and all(type(n) is int and 0 <= n <= _MAX_DIM for n in shape)):
        raise error(f"{source}: .npy header: 'shape': expected a tuple of at most "
                    f"{NPY_MAX_DIMS} integers from 0 to 2**63 - 1, got {excerpt(repr(shape))}")
    if type(fortran) is not bool:
        raise error(f"{source}: .npy header: 'fortran_order': expected True or False, got "
                    f"{excerpt(repr(fortran))}")
    return NpyHeader(shape, _dtype(header["descr"], source, error), fortran, offset)


def _header_text(f: IO[bytes], size: int, source: str, error: type[FfnError],
                 what: str) -> tuple[str, int]:
    """The header's text, after the magic string, the version and the header's length were
    checked; and where the data begins."""
    if size == 0:
        raise error(f"{source}: the {what} is empty; expected a .npy array")
    start = f.read(8)
    if start[:6] != NPY_MAGIC[:len(start[:6])]:
        raise error(f"{source}: not a .npy array (the {what} does not start with the .npy "
                    "magic string)")
    cut = error(f"{source}: the {what} is truncated ({size:,} byte{'s' if size > 1 else ''}, "
                "it ends inside the .npy header)")
    if len(start) < 8:
        raise cut
    version = (start[6], start[7])
    if version not in NPY_VERSIONS:
        raise error(f"{source}: unsupported .npy format version {version[0]}.{version[1]}; "
                    "expected 1.0, 2.0 or 3.0")
    raw = f.read(NPY_VERSIONS[version])
    if len(raw) < NPY_VERSIONS[version]:
        raise cut
    length = int.from_bytes(raw, "little")
    if length > NPY_MAX_HEADER:
        raise error(f"{source}: the .npy header is {length:,} bytes long; expected at most "
                    f"{NPY_MAX_HEADER:,}")
    text = f.read(length)
    if len(text) < length:
        raise cut
    decoded = text.decode("utf-8" if version >= (3, 0) else "latin-1", errors="replace")
    return decoded, 8 + len(raw) + length


def _literal(text: str) -> object:
    """The header's Python literal, or None where it is not one (a bounded text: numpy's
    helpers fail here with ValueError, SyntaxError, TypeError, MemoryError...)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning: invalid decimal literal...
            return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, OverflowError):
        return None


def _dtype(descr: object, source: str, error: type[FfnError]) -> np.dtype:
    """A dtype string ('<f4', '>f8', '|O'), or a list of fields (a structured dtype, which
    the callers refuse with their own words)."""
    if isinstance(descr, (str, list)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy 2 deprecates some aliases ('a5')
            try:
                # numpy's stubs allow only a list of fields, but a string is its main case
                return np.lib.format.descr_to_dtype(descr)  # type: ignore[arg-type]
            except (TypeError, ValueError, SyntaxError, KeyError, IndexError, OverflowError,
                    RecursionError):  # what numpy's parser raises on a malformed value
                pass
    raise error(f"{source}: .npy header: 'descr': expected a dtype such as '<f4', got "
                f"{excerpt(repr(descr))}")


# ---------------------------------------------------------------------------------------------
# Output.


_NO_LINKS = tuple(getattr(errno, name) for name in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "EXDEV",
                                                    "EMLINK", "ENOSYS")
                  if hasattr(errno, name))  # hard links refused by the file system
_NO_ROOM = tuple(getattr(errno, name) for name in ("ENOSPC", "EFBIG", "EDQUOT")
                 if hasattr(errno, name))  # disk full, file too large, quota exceeded


def _new_binary(path: str) -> BinaryIO:
    return open(new_file(path), "wb")


class AtomicNpyWriter:
    """Write a .npy chunk by chunk into a temporary file beside the target, then rename it.

    Writes happen on a writer thread, overlapping the caller's work. Nothing is left behind
    on failure, and an existing file is replaced only with ``force``.
    """

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: np.dtype, force: bool,
                 inputs: tuple[Path | None, ...] = (), shown: Path | None = None,
                 names: Naming = PARAMETERS) -> None:
        """``shown``: the path errors name, when the file is written elsewhere first (capture
        writes into a hidden folder, then moves the complete files into --out); ``names``:
        how errors name the path and force (a command's options: jobs.targets.OUT_OPTIONS)."""
        self.names = names
        if path.suffix.lower() != ".npy":
            raise OutputError(f"{names.out}: expected a .npy path, got {path}")
        for source in inputs:
            if source is not None and same_file(path, source):
                raise OutputError(f"{names.out}: {path} is the input file; choose another "
                                  "path")
        try:
            info = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            info = None
        except OSError as exc:
            raise OutputError(f"{names.out}: cannot use {path}: {exc.strerror or exc}") from None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise OutputError(f"{names.out}: {path} is a directory")
        if info is not None and not force:
            raise OutputError(f"{names.out}: {path} exists; pass {names.force} to replace it")
        if not path.parent.is_dir():
            raise OutputError(f"{names.out}: folder {path.parent} does not exist")
        self.path, self.shape, self.dtype, self.force = path, shape, np.dtype(dtype), force
        self.shown = shown if shown is not None else path
        self._file: BinaryIO | None = None
        self._tmp: str | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._pending: dict[int, Future] = {}

    def __enter__(self) -> AtomicNpyWriter:
        try:  # from the moment the file exists, a signal or an error removes it
            with signals_held():
                self._tmp, file = create_hidden(self.path.parent, self.path.name,
                                                self.names.out,
                                                _new_binary)
                self._file = file
            header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                      "shape": self.shape}
            try:
                np.lib.format.write_array_header_2_0(file, header)
                file.flush()
            except OSError as exc:
                raise self._error(exc) from None
            self._reserve(file.tell() + math.prod(self.shape) * self.dtype.itemsize)
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="ffncli-writer")
        except BaseException:
            self._discard()
            raise
        return self

    def _reserve(self, size: int) -> None:
        """Allocate the whole file up front: a full disk fails now, not after the work, and
        the file system does its block allocation once instead of write by write (on ext4
        that took `run --out` from 0.91 to 0.99 of the in-memory throughput)."""
        assert self._file is not None
        fallocate = getattr(os, "posix_fallocate", None)  # not on macOS
        if fallocate is None:
            return
        try:
            fallocate(self._file.fileno(), 0, size)
        except OSError as exc:
            if exc.errno in _NO_ROOM:
                raise OutputError(f"{self.names.out}: cannot reserve {size:,} bytes for "
                                  f"{self.shown}: {exc.strerror}") from None
            # EOPNOTSUPP and the like: the file system cannot reserve; plain writes will do.

    def write(self, chunk: np.ndarray) -> None:
        """Queue a C-contiguous chunk for writing on the writer thread, in order. The caller
        must not change ``chunk`` until ``wait(chunk)`` (or the end of the ``with``)."""
        assert self._file is not None and self._writer is not None
        data = np.ascontiguousarray(chunk, dtype=self.dtype).data.cast("B")
        self._pending[id(chunk.base if chunk.base is not None else chunk)] = \
            self._writer.submit(self._file.write, data)

    def wait(self, buffer: np.ndarray) -> None:
        """Block until the queued writes from ``buffer`` are done, so it can be reused."""
        future = self._pending.pop(id(buffer), None)
        if future is not None:
            self._result(future)

    def _result(self, future: Future) -> None:
        try:
            future.result()
        except OSError as exc:
            raise self._error(exc) from None

    def _error(self, exc: OSError) -> OutputError:
        return OutputError(f"{self.names.out}: cannot write {self.shown}: "
                           f"{exc.strerror or exc}")

    def _discard(self) -> None:
        """Close and delete the temporary file; the first error is the one being raised."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass
            self._tmp = None

    def __exit__(self, exc_type, exc, tb) -> None:
        assert self._file is not None and self._tmp is not None and self._writer is not None
        try:  # a signal may land anywhere in here, the wait below included
            self._writer.shutdown(wait=True)  # every queued write has finished or failed
            if exc_type is None:
                for future in self._pending.values():
                    self._result(future)
                try:
                    self._file.close()
                except OSError as err:
                    raise self._error(err) from None
                self._publish()
        except BaseException:
            self._discard()
            raise
        if exc_type is not None:
            self._discard()

    def _publish(self) -> None:
        """Give the finished file its name. With ``force``, an atomic replace (an existing
        file stays whole until then). Without it, a hard link, which fails if the name was
        taken while we worked: of two runs writing one path, only one can succeed."""
        assert self._tmp is not None
        if self.force:
            os.replace(self._tmp, self.path)
            self._tmp = None
            return
        try:
            os.link(self._tmp, self.path)
        except FileExistsError:
            raise OutputError(f"{self.names.out}: {self.path} appeared while this run was "
                              f"writing; it was left alone (pass {self.names.force} to replace "
                              "it)") from None
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise self._error(exc) from None
            self._claim_and_replace()  # a file system without hard links
            return
        os.unlink(self._tmp)
        self._tmp = None

    def _claim_and_replace(self) -> None:
        assert self._tmp is not None
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            raise OutputError(f"{self.names.out}: {self.path} appeared while this run was "
                              f"writing; it was left alone (pass {self.names.force} to replace "
                              "it)") from None
        except OSError as exc:
            raise self._error(exc) from None
        os.replace(self._tmp, self.path)
        self._tmp = None
