"""Token matrices in and out: .npy (read in chunks, never unpickled), .txt/.csv, atomic writes.

Every .npy header is parsed and checked here (:func:`read_npy_header`, also used for the
members of .npz weights), and its promises are checked against the file's size before any
array is allocated: numpy's own loader trusts the header.

A large ``.npy`` input is read chunk by chunk with ``readinto`` into one reused buffer, and
the output is written chunk by chunk to a temporary file that is renamed into place at the
end. Neither is memory-mapped: mapped pages count towards resident memory, and a 2 GB input
read through ``np.load(mmap_mode="r")`` would show 2 GB more of it.
"""

from __future__ import annotations

import ast
import errno
import io
import math
import os
import secrets
import stat
import warnings
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np

from ffncli.errors import FfnError, InputError, OutputError
from ffncli.files import check_file, open_file, same_file

IN_MEMORY_BYTES = 64 * 2**20  # inputs up to this size are read whole
TEXT_MAX_BYTES = 64 * 2**20  # .txt/.csv are parsed whole: up to 4x this as float64 ("0 ")


# ---------------------------------------------------------------------------------------------
# The .npy header, checked.

NPY_MAGIC = b"\x93NUMPY"
NPY_VERSIONS = {(1, 0): 2, (2, 0): 4, (3, 0): 4}  # version -> bytes of the header length
NPY_MAX_HEADER = 10_000  # numpy's own limit (max_header_size in numpy.lib.format)
NPY_MAX_DIMS = 64  # numpy's
_MAX_DIM = 2**63 - 1
_KEYS = ("descr", "fortran_order", "shape")


def _excerpt(text: str, limit: int = 60) -> str:
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
    offset = 8 + len(raw) + length
    text = f.read(length)
    if len(text) < length:
        raise cut
    decoded = text.decode("utf-8" if version >= (3, 0) else "latin-1", errors="replace")
    header = _literal(decoded)
    if not isinstance(header, dict) or set(header) != set(_KEYS):
        raise error(f"{source}: .npy header: expected a dict of 'descr', 'fortran_order' and "
                    f"'shape', got {_excerpt(decoded)}")
    shape, fortran = header["shape"], header["fortran_order"]
    if not (isinstance(shape, tuple) and len(shape) <= NPY_MAX_DIMS
            and all(type(n) is int and 0 <= n <= _MAX_DIM for n in shape)):
        raise error(f"{source}: .npy header: 'shape': expected a tuple of at most "
                    f"{NPY_MAX_DIMS} integers from 0 to 2**63 - 1, got {_excerpt(repr(shape))}")
    if type(fortran) is not bool:
        raise error(f"{source}: .npy header: 'fortran_order': expected True or False, got "
                    f"{_excerpt(repr(fortran))}")
    return NpyHeader(shape, _dtype(header["descr"], source, error), fortran, offset)


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
                f"{_excerpt(repr(descr))}")


# ---------------------------------------------------------------------------------------------
# Input.


@dataclass
class TokenInput:
    """A (tokens, d_model) view of an input: its leading shape, and its chunks on demand."""

    path: Path | None
    shape: tuple[int, ...]  # as stored: (d,), (n, d) or (b, s, d)
    file_dtype: np.dtype
    data: np.ndarray | None = None  # small inputs: the whole (n, d) matrix
    offset: int = 0  # large .npy inputs: where the data starts
    fortran: bool = False  # large .npy inputs: stored column by column, (n, d) only

    @property
    def d_model(self) -> int:
        return self.shape[-1]

    @property
    def n_tokens(self) -> int:
        return int(np.prod(self.shape[:-1], dtype=np.int64)) if len(self.shape) > 1 else 1

    @property
    def nbytes(self) -> int:
        return self.n_tokens * self.d_model * self.file_dtype.itemsize

    def chunks(self, rows: int, dtype: np.dtype,
               finite: bool = False) -> Iterator[tuple[int, np.ndarray]]:
        """(first token index, (m, d_model) array in ``dtype``) for consecutive chunks.

        The array is a reused buffer, valid until the next chunk is asked for. A file is read
        one chunk ahead on a second thread, so reading overlaps the caller's work. With
        ``finite``, a chunk holding NaN or infinity raises InputError (saying how many the
        whole input has, and where the first is) before it is yielded."""
        source = self._matrix_chunks(rows, dtype) if self.data is not None else \
            self._file_chunks(rows, dtype)
        for start, chunk in source:
            if finite and not np.isfinite(chunk).all():
                self._nonfinite_error(start, chunk, source)
            yield start, chunk

    def _matrix_chunks(self, rows: int, dtype: np.dtype) -> Iterator[tuple[int, np.ndarray]]:
        assert self.data is not None
        matrix = self.data.astype(dtype, copy=False)
        for start in range(0, self.n_tokens, rows):
            yield start, matrix[start:start + rows]

    def _file_chunks(self, rows: int, dtype: np.dtype) -> Iterator[tuple[int, np.ndarray]]:
        """Chunks read from the file. In Fortran order each of the d_model columns is a
        contiguous run of n_tokens values, so a chunk is d_model reads, transposed on copy."""
        assert self.path is not None
        d, n, itemsize = self.d_model, self.n_tokens, self.file_dtype.itemsize
        raws = [np.empty((d, rows) if self.fortran else (rows, d), dtype=self.file_dtype)
                for _ in range(2)]
        casts = raws if self.file_dtype == dtype and not self.fortran else \
            [np.empty((rows, d), dtype=dtype) for _ in range(2)]

        def fill(f: io.BufferedReader, view: np.ndarray, start: int) -> None:
            if f.readinto(view.data.cast("B")) != view.nbytes:
                raise InputError(f"{self.path}: file ends early, in the chunk at token {start}")

        def read(f: io.BufferedReader, start: int, slot: int) -> np.ndarray:
            m = min(rows, n - start)
            if self.fortran:  # (d, m) -> (m, d)
                view = raws[slot][:, :m]
                for j in range(d):
                    f.seek(self.offset + (j * n + start) * itemsize)
                    fill(f, view[j], start)
                view = view.T
            else:
                view = raws[slot][:m]
                fill(f, view, start)
            if casts is raws:
                return view
            np.copyto(casts[slot][:m], view, casting="unsafe")
            return casts[slot][:m]

        with open_file(self.path, "input file", InputError) as f, \
                ThreadPoolExecutor(1) as reader:
            f.seek(self.offset)
            pending = reader.submit(read, f, 0, 0)
            for i, start in enumerate(range(0, n, rows)):
                chunk = pending.result()
                if start + rows < n:
                    pending = reader.submit(read, f, start + rows, (i + 1) % 2)
                yield start, chunk

    def _nonfinite_error(self, start: int, chunk: np.ndarray,
                         rest: Iterator[tuple[int, np.ndarray]]) -> None:
        bad = ~np.isfinite(chunk)
        i, j = (int(v) for v in np.argwhere(bad)[0])
        count = int(bad.sum()) + sum(int((~np.isfinite(c)).sum()) for _, c in rest)
        raise InputError(
            f"{self.path or 'input'}: {count} non-finite value{'s' if count > 1 else ''} (NaN "
            f"or infinity), the first at token {start + i}, column {j}; pass "
            "--allow-nonfinite to compute with them"
        )

    def matrix(self, dtype: np.dtype) -> np.ndarray:
        """The whole input as one (tokens, d_model) array (small inputs)."""
        if self.data is not None:
            return self.data.astype(dtype, copy=False)
        out = np.empty((self.n_tokens, self.d_model), dtype=dtype)
        for start, chunk in self.chunks(65536, dtype):
            out[start:start + chunk.shape[0]] = chunk
        return out


def _check_dtype(path: Path, dtype: np.dtype) -> None:
    if dtype.kind not in "fiu":
        what = {"O": "Python objects", "U": "strings", "S": "bytes", "c": "complex numbers",
                "b": "booleans", "V": "structured records"}.get(dtype.kind, str(dtype))
        raise InputError(f"{path}: expected real numbers, got an array of {what} ({dtype})")


def _check_shape(path: Path, shape: tuple[int, ...], d_model: int) -> None:
    if len(shape) not in (1, 2, 3):
        raise InputError(f"{path}: expected 1-D (one token), 2-D (tokens x d_model) or 3-D "
                         f"(batch x seq x d_model), got {len(shape)}-D {shape}")
    if 0 in shape:
        raise InputError(f"{path}: the array is empty {shape}")
    if shape[-1] != d_model:
        raise InputError(f"{path}: expected d_model {d_model}, got {shape[-1]} (shape {shape})")


def open_input(path: Path, d_model: int) -> TokenInput:
    """Open a .npy, .txt or .csv token file; small files are read whole."""
    suffix = path.suffix.lower()
    if suffix in (".txt", ".csv"):
        return _open_text(path, d_model)
    if suffix != ".npy":
        check_file(path, "input file", InputError)
        raise InputError(f"{path}: expected a .npy, .txt or .csv file")
    with open_file(path, "input file", InputError) as f:
        size = os.fstat(f.fileno()).st_size
        header = read_npy_header(f, size, str(path), InputError)
        _check_dtype(path, header.dtype)
        _check_shape(path, header.shape, d_model)
        header.check_size(size, str(path), InputError)
        token = TokenInput(path, header.shape, header.dtype, offset=header.offset,
                           fortran=header.fortran)
        if token.nbytes <= IN_MEMORY_BYTES:
            token.data = _read_whole(f, path, header).reshape(token.n_tokens, d_model)
        elif header.fortran and sum(n > 1 for n in header.shape[:-1]) > 1:
            raise InputError(f"{path}: a 3-D array in Fortran order is read whole, up to "
                             f"{IN_MEMORY_BYTES:,} bytes, and this one is {token.nbytes:,}; "
                             "save it in C order (numpy.ascontiguousarray) or as 2-D (tokens "
                             "x d_model)")
    return token


def _read_whole(f: io.BufferedReader, path: Path, header: NpyHeader) -> np.ndarray:
    """The data after a checked header, as a C-order array of the header's shape."""
    raw = np.empty(header.nbytes, dtype=np.uint8)
    got = f.readinto(raw.data)
    if got != header.nbytes:  # the file changed since its size was checked
        raise InputError(f"{path}: the file is truncated ({header.offset + got:,} bytes, the "
                         f"header promises {header.offset + header.nbytes:,})")
    array = raw.view(header.dtype).reshape(header.shape, order="F" if header.fortran else "C")
    return np.ascontiguousarray(array)


def _open_text(path: Path, d_model: int) -> TokenInput:
    delimiter = "," if path.suffix.lower() == ".csv" else None
    with open_file(path, "input file", InputError, TEXT_MAX_BYTES) as f, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # loadtxt warns on a file without numbers: see below
        try:
            array = np.loadtxt(io.TextIOWrapper(f, encoding="utf-8"), delimiter=delimiter,
                               ndmin=2, dtype=np.float64, comments="#")
        except UnicodeDecodeError:
            raise InputError(f"{path}: not a UTF-8 text file") from None
        except ValueError as exc:
            raise InputError(f"{path}: not a table of numbers, one token per row "
                             f"({_excerpt(str(exc), 200)})") from None
    shape = tuple(array.shape)
    if array.size == 0:
        raise InputError(f"{path}: the file has no numbers")
    _check_shape(path, shape, d_model)
    return TokenInput(path, shape, array.dtype, data=array)


def from_array(array: np.ndarray) -> TokenInput:
    shape = tuple(array.shape)
    return TokenInput(None, shape, array.dtype, data=array.reshape(-1, shape[-1]))


def check_finite(token: TokenInput, dtype: np.dtype, rows: int) -> None:
    """Refuse NaN and infinity anywhere in the input (one pass over it)."""
    for _ in token.chunks(rows, dtype, finite=True):
        pass


# ---------------------------------------------------------------------------------------------
# Output.


_NO_LINKS = tuple(getattr(errno, name) for name in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "EXDEV",
                                                    "EMLINK", "ENOSYS")
                  if hasattr(errno, name))  # hard links refused by the file system
_NO_ROOM = tuple(getattr(errno, name) for name in ("ENOSPC", "EFBIG", "EDQUOT")
                 if hasattr(errno, name))  # disk full, file too large, quota exceeded


class AtomicNpyWriter:
    """Write a .npy chunk by chunk into a temporary file beside the target, then rename it.

    Writes happen on a writer thread, overlapping the caller's work. Nothing is left behind
    on failure, and an existing file is replaced only with ``force``.
    """

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: np.dtype, force: bool,
                 inputs: tuple[Path | None, ...] = ()) -> None:
        if path.suffix.lower() != ".npy":
            raise OutputError(f"option --out: expected a .npy path, got {path}")
        for source in inputs:
            if source is not None and same_file(path, source):
                raise OutputError(f"option --out: {path} is the input file; choose another path")
        try:
            info = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            info = None
        except OSError as exc:
            raise OutputError(f"option --out: cannot use {path}: {exc.strerror or exc}") from None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise OutputError(f"option --out: {path} is a directory")
        if info is not None and not force:
            raise OutputError(f"option --out: {path} exists; pass --force to replace it")
        if not path.parent.is_dir():
            raise OutputError(f"option --out: folder {path.parent} does not exist")
        self.path, self.shape, self.dtype, self.force = path, shape, np.dtype(dtype), force
        self._file: BinaryIO | None = None
        self._tmp: str | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._pending: dict[int, Future] = {}

    def __enter__(self) -> AtomicNpyWriter:
        try:  # from the moment the name is chosen, a signal or an error removes the file
            self._file = self._create_temporary()
            header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                      "shape": self.shape}
            try:
                np.lib.format.write_array_header_2_0(self._file, header)
                self._file.flush()
            except OSError as exc:
                raise self._error(exc) from None
            self._reserve(self._file.tell() + math.prod(self.shape) * self.dtype.itemsize)
        except BaseException:
            self._discard()
            raise
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="ffncli-writer")
        return self

    def _create_temporary(self) -> BinaryIO:
        """A new hidden file beside the target, mode 0o666 less the umask as open() gives.
        ``self._tmp`` is set before the file exists, so an interrupt can always remove it."""
        folder = self.path.parent
        for _ in range(100):
            self._tmp = str(folder / f".{self.path.name}.{secrets.token_hex(4)}.tmp")
            try:
                return open(os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666),
                            "wb")
            except FileExistsError:
                continue
            except OSError as exc:
                self._tmp = None
                raise OutputError(f"option --out: cannot write in {folder}: "
                                  f"{exc.strerror or exc}") from None
        raise OutputError(f"option --out: cannot find a free temporary name in {folder}")

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
                raise OutputError(f"option --out: cannot reserve {size:,} bytes for "
                                  f"{self.path}: {exc.strerror}") from None
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
        return OutputError(f"option --out: cannot write {self.path}: {exc.strerror or exc}")

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
            raise OutputError(f"option --out: {self.path} appeared while this run was "
                              "writing; it was left alone (pass --force to replace it)") from None
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
            raise OutputError(f"option --out: {self.path} appeared while this run was "
                              "writing; it was left alone (pass --force to replace it)") from None
        except OSError as exc:
            raise self._error(exc) from None
        os.replace(self._tmp, self.path)
        self._tmp = None
