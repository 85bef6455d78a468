"""Text and token ids in: ``--text`` and ``--ids`` files, cut into windows.

``--text FILE``: UTF-8 text, each non-empty line one sequence. A line is what lies between two
``\n`` bytes, with its ``\n`` (and a ``\r`` before it: Windows line ends) removed; every other
character, leading and trailing spaces and tabs included, reaches the tokenizer as it is (so a
line gives the ids ``tokenizer(line)`` gives in ``transformers``). Lines holding only
whitespace are skipped, as empty ones are; a byte-order mark opening the file is dropped.
Python's ``str.splitlines`` also cuts at a lone ``\r``, form feeds and U+2028: those stay
inside a line here, as the tokenizer would see them in one string. The tokenizer is
:mod:`ffncli.formats.tokenizer`'s.

``--ids FILE``: token ids without a tokenizer: an integer ``.npy`` (1-D one sequence, 2-D
sequences x length) or a ``.txt`` with one sequence of space-separated ids per line (an id
is its value: ``007``, or 7 after thousands of zeros, is 7).

A sequence longer than the model's positions is cut into consecutive windows of that many
ids (the last one shorter): special tokens stay where the tokenizer put them (BERT's
``[CLS]`` opens the first window only). Nothing is ever padded.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.base.files import check_file, open_file
from ffncli.base.validate import brief
from ffncli.errors import InputError, WeightsError
from ffncli.formats.tokenizer import EncodeError, Tokenizer

if TYPE_CHECKING:
    import numpy as np

INPUT_MAX_BYTES = 2**30  # a --text or --ids file; its ids are held in memory (int64)
BATCH_LINES = 1024  # lines tokenised at once (tokenizers spreads a batch over the cores)
BATCH_BYTES = 1 << 20  # and at most about this many bytes of them; an --ids line read so
_SPACE = re.compile(r"\s")
# what is not whole numbers separated by spaces: another character, a sign not before a digit,
# a digit before a sign (a search, not a fullmatch of a repeated group: Python's re keeps
# ~110 bytes of backtracking state per repetition, 450 MB for a 4 MB line)
_NOT_IDS = re.compile(r"[^0-9+\-\s]|[+-](?![0-9])|[0-9](?=[+-])")



@dataclass(frozen=True)
class Sequences:
    """Token ids, one int64 array per window, in text order."""

    ids: tuple[np.ndarray, ...]
    lines: tuple[int, ...]  # where each window came from: its 1-based line (a .npy: row + 1)
    source: str  # the file
    sha256: str  # of the file's bytes

    @property
    def tokens(self) -> int:
        return sum(len(s) for s in self.ids)


# ---------------------------------------------------------------------------------------------
# --text


def _windows(ids: np.ndarray, max_positions: int | None) -> list[np.ndarray]:
    """``ids`` cut into consecutive windows of ``max_positions`` (the last one shorter)."""
    if max_positions is None or len(ids) <= max_positions:
        return [ids]
    return [ids[i:i + max_positions] for i in range(0, len(ids), max_positions)]


def _check_positions(max_positions: int | None) -> None:
    if max_positions is not None and (isinstance(max_positions, bool) or max_positions < 1):
        raise ValueError(f"max_positions: expected None or a whole number >= 1, got "
                         f"{max_positions!r}")


def _lines(path: Path, f: io.BufferedReader, digest: Any) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of the file's non-blank lines, newline removed."""
    for number, raw in enumerate(f, 1):
        digest.update(raw)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: line {number}: not UTF-8 text (byte "
                             f"0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
                             ) from None
        if number == 1:
            line = line.removeprefix("\ufeff")
        line = line.removesuffix("\n").removesuffix("\r")
        if line.strip():
            yield number, line


def read_text(path: Path, tokenizer: Tokenizer, max_positions: int | None) -> Sequences:
    """Each non-empty line of a UTF-8 text one sequence, tokenised in batches of lines (the
    file is never held whole as one string), cut into windows of ``max_positions``."""
    import numpy as np

    _check_positions(max_positions)
    digest = hashlib.sha256()
    windows: list[np.ndarray] = []
    lines: list[int] = []

    def flush(batch: list[tuple[int, str]]) -> None:
        try:
            encoded = tokenizer.encode([t for _, t in batch])
        except EncodeError as exc:
            raise WeightsError(f"{exc.source}: the tokenizer cannot encode line "
                               f"{batch[exc.index][0]} of {path}: {exc.reason}") from None
        for (number, _), ids in zip(batch, encoded, strict=True):
            if ids:  # a tokenizer may give nothing for a line (a lone control character)
                cut = _windows(np.asarray(ids, dtype=np.int64), max_positions)
                windows.extend(cut)
                lines.extend([number] * len(cut))

    with open_file(path, "text file", InputError, INPUT_MAX_BYTES) as f:
        batch: list[tuple[int, str]] = []
        size = seen = 0
        for number, line in _lines(path, f, digest):
            batch.append((number, line))
            size += len(line)
            seen += 1
            if len(batch) >= BATCH_LINES or size >= BATCH_BYTES:
                flush(batch)
                batch, size = [], 0
        flush(batch)
    if not windows and seen:  # a normalizer may drop everything (control characters)
        raise InputError(f"{path}: no token ids: the tokenizer {tokenizer.source} gives none for "
                         f"any of its {seen:,} non-empty line{'s' if seen > 1 else ''}")
    if not windows:
        raise InputError(f"{path}: no text: every line is empty (expected one sequence per "
                         "non-empty line)")
    return Sequences(tuple(windows), tuple(lines), str(path), digest.hexdigest())


def read_document(path: Path, tokenizer: Tokenizer) -> Sequences:
    """A UTF-8 text as one document, tokenised whole (newlines are text; the tokenizer adds
    its special tokens, a BOS first where it uses one): one sequence of ids, not cut."""
    import numpy as np

    with open_file(path, "text file", InputError, INPUT_MAX_BYTES) as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path}: line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})"
                         ) from None
    if not text.strip():
        raise InputError(f"{path}: no text: the file is empty or blank")
    try:
        ids = tokenizer.encode([text])[0]
    except EncodeError as exc:
        raise WeightsError(f"{exc.source}: the tokenizer cannot encode {path}: {exc.reason}"
                           ) from None
    if not ids:  # a normalizer may drop everything (control characters)
        raise InputError(f"{path}: no token ids: the tokenizer {tokenizer.source} gives none "
                         "for its text")
    return Sequences((np.asarray(ids, dtype=np.int64),), (1,), str(path),
                     hashlib.sha256(raw).hexdigest())


# ---------------------------------------------------------------------------------------------
# --ids


def _out_of_range(where: str, value: object, vocab: int) -> InputError:
    shown = value if isinstance(value, int) else brief(value)
    return InputError(f"{where}: token id {shown} is out of range for a vocabulary of {vocab}")


def read_ids(path: Path, vocab: int, max_positions: int | None) -> Sequences:
    """Token ids from an integer ``.npy`` (1-D one sequence, 2-D sequences x length) or a
    ``.txt`` (one sequence of space-separated ids per line, blank lines skipped), each id
    checked against the vocabulary, cut into windows of ``max_positions``."""
    _check_positions(max_positions)
    if isinstance(vocab, bool) or vocab < 1:
        raise ValueError(f"vocab: expected a whole number >= 1, got {vocab!r}")
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".txt"):
        check_file(path, "token ids file", InputError)
        raise InputError(f"{path}: expected token ids in a .npy or .txt file")
    with open_file(path, "token ids file", InputError, INPUT_MAX_BYTES) as f:
        if suffix == ".npy":
            raw = f.read()
            digest = hashlib.sha256(raw).hexdigest()
            rows = _npy_ids(path, raw, vocab)
        else:
            hashing = hashlib.sha256()
            rows = _txt_ids(path, f, hashing, vocab)
            digest = hashing.hexdigest()
    windows: list[np.ndarray] = []
    lines: list[int] = []
    for number, ids in rows:
        cut = _windows(ids, max_positions)
        windows.extend(cut)
        lines.extend([number] * len(cut))
    if not windows:
        raise InputError(f"{path}: no token ids: every line is empty")
    return Sequences(tuple(windows), tuple(lines), str(path), digest)


def _npy_ids(path: Path, raw: bytes, vocab: int) -> list[tuple[int, np.ndarray]]:
    import numpy as np

    from ffncli.formats.npy import read_npy_header

    header = read_npy_header(io.BytesIO(raw), len(raw), str(path), InputError)
    dtype, shape = header.dtype, header.shape
    if dtype.kind not in "iu":
        what = {"f": "floating-point numbers", "b": "booleans", "O": "Python objects",
                "U": "strings", "S": "bytes", "c": "complex numbers",
                "V": "structured records"}.get(dtype.kind, str(dtype))
        raise InputError(f"{path}: expected integer token ids, got an array of {what} "
                         f"({dtype})")
    if len(shape) not in (1, 2):
        raise InputError(f"{path}: expected a 1-D array (one sequence) or a 2-D array "
                         f"(sequences x length) of token ids, got {len(shape)}-D {shape}")
    if 0 in shape:
        raise InputError(f"{path}: no token ids: the array's shape is {shape}")
    header.check_size(len(raw), str(path), InputError)
    array = np.frombuffer(raw, dtype=dtype, offset=header.offset).reshape(
        shape, order="F" if header.fortran else "C")
    bad = (array < 0) | (array >= vocab)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f"{path}: row {at[0]}, position {at[1]}" if len(at) == 2 else \
            f"{path}: position {at[0]}"
        raise _out_of_range(where, int(array[at]), vocab)
    ids = np.ascontiguousarray(array, dtype=np.int64).reshape(-1, shape[-1])
    return [(i + 1, row) for i, row in enumerate(ids)]


def _txt_ids(path: Path, f: io.BufferedReader, digest: Any,
             vocab: int) -> list[tuple[int, np.ndarray]]:
    """The ids of each non-blank line, read line by line."""
    import numpy as np

    rows = []
    for number, raw in enumerate(f, 1):
        digest.update(raw)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path}: line {number}: expected token ids (whole numbers "
                             "separated by spaces), got bytes that are not UTF-8 text") from None
        if number == 1:
            text = text.removeprefix("\ufeff")  # a byte-order mark, as --text drops it
        if not text.strip():
            continue
        if _NOT_IDS.search(text):
            raise InputError(f"{path}: line {number}: expected token ids (whole numbers "
                             f"separated by spaces), got {brief(text.strip())}")
        chunks = []
        for parts in _split_ids(text):  # a long line a megabyte at a time: ~120 bytes a part
            try:
                ids = np.array(parts, dtype=np.int64)
            except (OverflowError, ValueError):  # beyond int64, or int()'s 4,300 characters
                try:  # an id is its value: 0...07, thousands of zeros long, is 7
                    ids = np.array([_shortest(p) for p in parts], dtype=np.int64)
                except (OverflowError, ValueError):
                    ids = None
            if ids is None or (ids < 0).any() or (ids >= vocab).any():
                raise _out_of_range(f"{path}: line {number}", _first_out_of_range(parts, vocab),
                                    vocab)
            chunks.append(ids)
        rows.append((number, chunks[0] if len(chunks) == 1 else np.concatenate(chunks)))
    return rows


def _split_ids(text: str) -> Iterator[list[str]]:
    """``text.split()``, about BATCH_BYTES characters of the text at a time."""
    start = 0
    while start < len(text):
        found = _SPACE.search(text, start + BATCH_BYTES)
        end = found.start() if found is not None else len(text)
        yield text[start:end].split()
        start = end


def _shortest(part: str) -> str:
    """An id as written (a sign, digits), without its leading zeros: int() refuses more than
    4,300 characters, leading zeros included."""
    digits = part.lstrip("+-")
    return part[:len(part) - len(digits)] + (digits.lstrip("0") or "0")


def _first_out_of_range(parts: list[str], vocab: int) -> int | str:
    """The first id of ``parts`` outside 0..vocab-1: as a number, or as written when it is
    more than 20 digits without its leading zeros (not converted)."""
    for part in parts:
        shortest = _shortest(part)
        if len(shortest.lstrip("+-")) > 20:
            return part
        if not 0 <= int(shortest) < vocab:
            return int(shortest)
    raise AssertionError("no id out of range")  # the caller found one
