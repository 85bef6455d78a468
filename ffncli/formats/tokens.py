"""Token matrices in: ``.npy`` (read in chunks, never unpickled), ``.txt``/``.csv``, an array,
or ``--random N`` drawn with a seed chunk by chunk; NaN and infinity refused unless asked for."""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ffncli.base.files import check_file, open_file
from ffncli.base.validate import PARAMETERS, Words, whole
from ffncli.errors import InputError
from ffncli.formats.npy import NpyHeader, excerpt, read_npy_header

IN_MEMORY_BYTES = 64 * 2**20  # inputs up to this size are read whole
TEXT_MAX_BYTES = 64 * 2**20  # .txt/.csv are parsed whole: up to 4x this as float64 ("0 ")


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
    # how the caller computes with NaN and infinity, for the error that refuses them: a
    # library call's parameter; a command's option (ffncli.jobs.resolve.ALLOW_OPTION)
    allow: str = "allow_nonfinite=True"

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
            f"{self.allow} to compute with them"
        )

    def matrix(self, dtype: np.dtype) -> np.ndarray:
        """The whole input as one (tokens, d_model) array (small inputs)."""
        if self.data is not None:
            return self.data.astype(dtype, copy=False)
        out = np.empty((self.n_tokens, self.d_model), dtype=dtype)
        for start, chunk in self.chunks(65536, dtype):
            out[start:start + chunk.shape[0]] = chunk
        return out


def check_dtype(path: Path, dtype: np.dtype) -> None:
    if dtype.kind not in "fiu":
        what = {"O": "Python objects", "U": "strings", "S": "bytes", "c": "complex numbers",
                "b": "booleans", "V": "structured records"}.get(dtype.kind, str(dtype))
        raise InputError(f"{path}: expected real numbers, got an array of {what} ({dtype})")


def check_shape(path: Path, shape: tuple[int, ...], d_model: int) -> None:
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
        check_dtype(path, header.dtype)
        check_shape(path, header.shape, d_model)
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
                             f"({excerpt(str(exc), 200)})") from None
    shape = tuple(array.shape)
    if array.size == 0:
        raise InputError(f"{path}: the file has no numbers")
    check_shape(path, shape, d_model)
    return TokenInput(path, shape, array.dtype, data=array)


def from_array(array: np.ndarray) -> TokenInput:
    shape = tuple(array.shape)
    return TokenInput(None, shape, array.dtype, data=array.reshape(-1, shape[-1]))


def check_finite(token: TokenInput, dtype: np.dtype, rows: int) -> None:
    """Refuse NaN and infinity anywhere in the input (one pass over it)."""
    for _ in token.chunks(rows, dtype, finite=True):
        pass


@dataclass
class RandomTokens(TokenInput):
    """``--random N``: tokens drawn from ``default_rng(seed).normal(0, 1)`` (float64, then
    cast), chunk by chunk as they are used, so that any N streams in bounded memory. The
    generator draws element after element, so the chunks are the rows of one whole draw."""

    seed: int = 0

    def chunks(self, rows: int, dtype: np.dtype,
               finite: bool = False) -> Iterator[tuple[int, np.ndarray]]:
        rng = np.random.default_rng(self.seed)
        for start in range(0, self.n_tokens, rows):
            shape = (min(rows, self.n_tokens - start), self.d_model)
            yield start, rng.normal(0.0, 1.0, shape).astype(dtype, copy=False)

    def matrix(self, dtype: np.dtype) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        return rng.normal(0.0, 1.0, (self.n_tokens, self.d_model)).astype(dtype, copy=False)


def resolve_input(path: Path | None, random: int | None, d_model: int, seed: int,
                  words: Words = PARAMETERS) -> TokenInput:
    """The tokens of a file (``path``) or ``random`` N drawn with ``seed``, named in errors as
    ``words`` say (a command's: ``--input``, ``--random``)."""
    if (path is None) == (random is None):
        raise InputError(f"give the tokens: {words.given('input', 'FILE')} (.npy, .txt, .csv) "
                         f"or {words.given('random', 'N')}")
    if path is not None:
        return open_input(path, d_model)
    random = whole(words.where("random"), random, 1)  # at most 2**53: sizes stay exact
    whole(words.where("seed"), seed, 0)
    return RandomTokens(None, (random, d_model), np.dtype(np.float64), seed=seed)


def token_array(tokens: object, d_model: int | None) -> np.ndarray:
    """``tokens`` as an array of one token, tokens x d_model or batch x seq x d_model
    (``d_model`` None: any width), or one error line."""
    x = np.asarray(tokens)
    if x.ndim not in (1, 2, 3) or x.size == 0 or (d_model is not None and x.shape[-1] != d_model):
        expected = "d_model" if d_model is None else d_model
        raise InputError(f"tokens: expected (tokens, {expected}) or (batch, seq, {expected}), "
                         f"got shape {x.shape}")
    return x
