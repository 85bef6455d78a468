""".npy and text token files, and --random (formats/tokens.py): every layout gives the same
matrix (C or Fortran order, any byte order, whole or streamed), every malformed file is one exact
error line, exit 2; the reader fuzzed on mutated bytes gives a valid input or an InputError,
nothing else; --random draws the rows of one draw, chunk by chunk."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffncli.errors import InputError
from ffncli.formats import npy as N
from ffncli.formats import tokens as T
from ffncli.formats.tokens import open_input, resolve_input

D = 4  # the tiny preset's d_model
X = np.arange(12, dtype=np.float64).reshape(3, D) * 0.5 - 2.5  # exact in every dtype below


def npy(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, version=version, allow_pickle=False)
    return buf.getvalue()


def npy_raw(header: str | bytes, data: bytes = b"", version: tuple[int, int] = (1, 0),
            length: int | None = None) -> bytes:
    """A .npy with any header text (padded with spaces and a newline to 64 bytes, as numpy
    does) and any data; ``length`` overrides the header length field."""
    text = header.encode("latin-1") if isinstance(header, str) else header
    size = 2 if version == (1, 0) else 4
    pad = -(8 + size + len(text) + 1) % 64
    text = text + b" " * pad + b"\n"
    n = len(text) if length is None else length
    return N.NPY_MAGIC + bytes(version) + n.to_bytes(size, "little") + text + data


def header(descr="'<f4'", fortran="False", shape="(3, 4)") -> str:
    return f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"


GOOD = npy(X.astype("<f4"))  # 128 bytes of header, 48 of data
DATA = X.astype("<f4").tobytes()


@pytest.fixture
def streamed(monkeypatch):
    """Every .npy read chunk by chunk from the file, as large inputs are."""
    monkeypatch.setattr(T, "IN_MEMORY_BYTES", 0)


# --- good files: the same values, exactly --------------------------------------------------

LAYOUTS = {
    "C": X.astype("<f4"),
    "Fortran": np.asfortranarray(X.astype("<f4")),
    "big-endian": X.astype(">f8"),
    "big-endian Fortran": np.asfortranarray(X.astype(">f4")),
    "float16": X.astype("<f2"),
    "int32": (X * 2).astype("<i4"),
    "uint8 Fortran": np.asfortranarray((X * 2 + 5).astype("u1")),
    "3-D": X.astype("<f4").reshape(1, 3, D),
    "3-D Fortran": np.asfortranarray(X.astype("<f4").reshape(1, 3, D)),
    "3-D Fortran, seq 1": np.asfortranarray(X.astype("<f4").reshape(3, 1, D)),
}


def _expected(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float64).reshape(-1, D)


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "streamed"])
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_layout_reads_the_same_values(tmp_path, monkeypatch, name, whole):
    array = LAYOUTS[name]
    assert array.flags.f_contiguous == ("Fortran" in name) or array.ndim == 1
    path = tmp_path / "x.npy"
    path.write_bytes(npy(array))
    if not whole:
        monkeypatch.setattr(T, "IN_MEMORY_BYTES", 0)
    token = open_input(path, D)
    assert (token.data is not None) == whole and token.shape == array.shape
    for rows in (1, 2, 5):  # one token per chunk, a partial last chunk, one chunk
        chunks = [(c.flags.c_contiguous, c.copy())  # a buffer reused for the next chunk
                  for _, c in token.chunks(rows, np.dtype(np.float64))]
        assert all(contiguous for contiguous, _ in chunks)  # what the engine's GEMMs want
        got = np.vstack([c for _, c in chunks])
        np.testing.assert_array_equal(got, _expected(array))
    np.testing.assert_array_equal(token.matrix(np.dtype(np.float32)),
                                  _expected(array).astype(np.float32))


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_every_format_version_reads(tmp_path, version):
    path = tmp_path / "x.npy"
    path.write_bytes(npy(X.astype("<f4"), version))
    assert path.read_bytes()[6:8] == bytes(version)
    np.testing.assert_array_equal(open_input(path, D).matrix(np.dtype("f8")), X)


def test_fortran_order_gives_the_c_order_answer_exactly(cli, tmp_path):
    """The Fortran-order branch is needed: read as C order, this file holds other values."""
    x = np.random.default_rng(5).normal(size=(6, D)).astype(np.float32)
    (tmp_path / "c.npy").write_bytes(npy(x))
    (tmp_path / "f.npy").write_bytes(npy(np.asfortranarray(x)))
    assert npy(np.asfortranarray(x))[128:] == x.T.tobytes()
    c = cli("run", "--preset", "tiny", "--input", tmp_path / "c.npy", "--json")
    f = cli("run", "--preset", "tiny", "--input", tmp_path / "f.npy", "--json")
    assert (c.code, f.code, f.err) == (0, 0, "")
    assert c.json()["output"] == f.json()["output"]


def test_streamed_fortran_matches_c_over_many_chunks(tmp_path, streamed):
    x = np.random.default_rng(6).normal(size=(1001, D))
    (tmp_path / "f.npy").write_bytes(npy(np.asfortranarray(x)))
    token = open_input(tmp_path / "f.npy", D)
    assert token.data is None and token.fortran
    chunks = [(c.flags.c_contiguous, c.copy()) for _, c in token.chunks(64, np.dtype("f8"))]
    assert all(contiguous for contiguous, _ in chunks)
    np.testing.assert_array_equal(np.vstack([c for _, c in chunks]), x)


def test_3d_fortran_is_read_whole_up_to_the_limit(tmp_path, monkeypatch):
    x = np.asfortranarray(np.arange(24, dtype="<f4").reshape(2, 3, D))
    path = tmp_path / "x.npy"
    path.write_bytes(npy(x))
    np.testing.assert_array_equal(open_input(path, D).matrix(np.dtype("f4")),
                                  np.ascontiguousarray(x).reshape(6, D))
    monkeypatch.setattr(T, "IN_MEMORY_BYTES", 95)
    with pytest.raises(InputError) as err:
        open_input(path, D)
    assert str(err.value) == (
        f"{path}: a 3-D array in Fortran order is read whole, up to 95 bytes, and this one "
        "is 96; save it in C order (numpy.ascontiguousarray) or as 2-D (tokens x d_model)")
    monkeypatch.setattr(T, "IN_MEMORY_BYTES", 96)
    assert open_input(path, D).data is not None


def test_a_file_that_shrinks_while_streaming_is_one_line(tmp_path, streamed):
    path = tmp_path / "x.npy"
    path.write_bytes(npy(np.ones((100, D), "<f4")))
    token = open_input(path, D)
    os.truncate(path, 128 + 60 * D * 4 + 3)
    with pytest.raises(InputError) as err:
        for _ in token.chunks(32, np.dtype("f4")):
            pass
    assert str(err.value) == f"{path}: file ends early, in the chunk at token 32"


def test_header_length_limit_is_numpys(tmp_path):
    """A header of exactly 10,000 bytes is read; one byte more is refused."""
    text = header()
    for length, ok in ((10_000, True), (10_001, False)):
        path = tmp_path / f"h{length}.npy"
        path.write_bytes(N.NPY_MAGIC + b"\x01\x00" + length.to_bytes(2, "little")
                         + (text.ljust(length - 1) + "\n").encode() + DATA)
        if ok:
            np.testing.assert_array_equal(open_input(path, D).matrix(np.dtype("f8")), X)
        else:
            with pytest.raises(InputError, match=r"the \.npy header is 10,001 bytes long; "
                               r"expected at most 10,000$"):
                open_input(path, D)


# --- bad files: one exact line each ---------------------------------------------------------

HEAD = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)"  # 56 characters


def _nested(depth: int) -> str:
    return header(shape="(" * depth + "3" + ")" * depth)


BAD_NPY = [
    # (id, file bytes, the message after "error: {path}: ")
    ("empty", b"", "the file is empty; expected a .npy array"),
    ("text", b"1 2 3 4\n", ("not a .npy array (the file does not start with the .npy magic "
     "string)")),
    ("a wrong magic", b"\x93NUMPZ" + GOOD[6:], ("not a .npy array (the file does not start "
     "with the .npy magic string)")),
    ("one byte", b"\x93", "the file is truncated (1 byte, it ends inside the .npy header)"),
    ("magic only", GOOD[:6], "the file is truncated (6 bytes, it ends inside the .npy header)"),
    ("magic and major version", GOOD[:7], ("the file is truncated (7 bytes, it ends inside "
     "the .npy header)")),
    ("magic and version", GOOD[:8], ("the file is truncated (8 bytes, it ends inside the .npy "
     "header)")),
    ("v2 cut in its header length", npy(X.astype("<f4"), (2, 0))[:9], ("the file is "
     "truncated (9 bytes, it ends inside the .npy header)")),
    ("v2 cut in a zero header length", N.NPY_MAGIC + b"\x02\x00\x00\x00\x00", ("the file "
     "is truncated (11 bytes, it ends inside the .npy header)")),
    ("cut in the header", GOOD[:100], ("the file is truncated (100 bytes, it ends inside the "
     ".npy header)")),
    ("header only", GOOD[:128], "the file is truncated (128 bytes, the header promises 176)"),
    ("one byte short", GOOD[:-1], "the file is truncated (175 bytes, the header promises 176)"),
    ("one byte long", GOOD + b"\0", ("the file is longer than its header says (177 bytes, the "
     "header promises 176)")),
    ("more rows than the file", npy_raw(header(shape="(1000000, 4)"), DATA),
     "the file is truncated (176 bytes, the header promises 16,000,128)"),
    ("the largest dimension", npy_raw(header(shape=f"({2**63 - 1}, 4)"), DATA),
     "the file is truncated (176 bytes, the header promises more than 2**63 - 1)"),
    ("product beyond 2**63", npy_raw(header(shape=f"({2**40}, {2**40}, 4)"), DATA),
     "the file is truncated (176 bytes, the header promises more than 2**63 - 1)"),
    ("version 4.0", GOOD[:6] + b"\x04\x00" + GOOD[8:], ("unsupported .npy format version 4.0; "
     "expected 1.0, 2.0 or 3.0")),
    ("version 1.1", GOOD[:6] + b"\x01\x01" + GOOD[8:], ("unsupported .npy format version 1.1; "
     "expected 1.0, 2.0 or 3.0")),
    ("header length 65535", GOOD[:8] + b"\xff\xff" + GOOD[10:],
     "the .npy header is 65,535 bytes long; expected at most 10,000"),
    ("header past the end", GOOD[:8] + (5000).to_bytes(2, "little") + GOOD[10:],
     "the file is truncated (176 bytes, it ends inside the .npy header)"),
    ("v2 header past the end", npy_raw(header(), DATA, (2, 0), length=9000),
     "the file is truncated (176 bytes, it ends inside the .npy header)"),
    ("not a literal", npy_raw("{'descr': <f4, 'fortran_order': False, 'shape': (3, 4)}", DATA),
     (".npy header: expected a dict of 'descr', 'fortran_order' and 'shape', got {'descr': "
     "<f4, 'fortran_order': False, 'shape': (3, 4)}")),
    ("a list", npy_raw("[1, 2, 3]", DATA), (".npy header: expected a dict of 'descr', "
     "'fortran_order' and 'shape', got [1, 2, 3]")),
    ("a key missing", npy_raw("{'descr': '<f4', 'shape': (3, 4)}", DATA), (".npy header: "
     "expected a dict of 'descr', 'fortran_order' and 'shape', got {'descr': '<f4', 'shape': "
     "(3, 4)}")),
    ("a key too many", npy_raw(header()[:-1] + "'x': 1}", DATA), ".npy header: expected a "
     "dict of 'descr', 'fortran_order' and 'shape', got " + HEAD + ",..."),
    ("a NUL byte", npy_raw(header()[:-1] + "\0}", DATA), (".npy header: expected a dict of "
     "'descr', 'fortran_order' and 'shape', got {'descr': '<f4', 'fortran_order': False, "
     "'shape': (3, 4), \\x00}")),  # escaped by the CLI
    ("nested 1000 deep", npy_raw(_nested(1000), DATA), (".npy header: expected a dict of "
     "'descr', 'fortran_order' and 'shape', got {'descr': '<f4', 'fortran_order': False, "
     "'shape': (((((((...")),
    ("a 5000-digit number", npy_raw(header(shape="(" + "9" * 5000 + ", 4)"), DATA),
     (".npy header: expected a dict of 'descr', 'fortran_order' and 'shape', got {'descr': "
     "'<f4', 'fortran_order': False, 'shape': (999999...")),
    ("v3 header not UTF-8", npy_raw(header(descr="'<f4\xff'").encode("latin-1"), DATA, (3, 0)),
     ".npy header: 'descr': expected a dtype such as '<f4', got '<f4\ufffd'"),
    ("negative dimension", npy_raw(header(shape="(-3, 4)"), DATA), (".npy header: 'shape': "
     "expected a tuple of at most 64 integers from 0 to 2**63 - 1, got (-3, 4)")),
    ("dimension 2**63", npy_raw(header(shape=f"({2**63}, 4)"), DATA), (".npy header: 'shape': "
     "expected a tuple of at most 64 integers from 0 to 2**63 - 1, got (9223372036854775808, "
     "4)")),
    ("float dimension", npy_raw(header(shape="(3.0, 4)"), DATA), (".npy header: 'shape': "
     "expected a tuple of at most 64 integers from 0 to 2**63 - 1, got (3.0, 4)")),
    ("bool dimension", npy_raw(header(shape="(True, 4)"), DATA), (".npy header: 'shape': "
     "expected a tuple of at most 64 integers from 0 to 2**63 - 1, got (True, 4)")),
    ("shape a list", npy_raw(header(shape="[3, 4]"), DATA), (".npy header: 'shape': expected "
     "a tuple of at most 64 integers from 0 to 2**63 - 1, got [3, 4]")),
    ("65 dimensions", npy_raw(header(shape=str((1,) * 64 + (4,))), DATA), ".npy header: "
     "'shape': expected a tuple of at most 64 integers from 0 to 2**63 - 1, got "
     + "(" + "1, " * 18 + "1,..."),
    ("fortran_order 1", npy_raw(header(fortran="1"), DATA), (".npy header: 'fortran_order': "
     "expected True or False, got 1")),
    ("fortran_order a string", npy_raw(header(fortran="'no'"), DATA), (".npy header: "
     "'fortran_order': expected True or False, got 'no'")),
    ("unknown dtype", npy_raw(header(descr="'<x4'"), DATA), (".npy header: 'descr': expected "
     "a dtype such as '<f4', got '<x4'")),
    ("dtype numpy cannot parse", npy_raw(header(descr="',<f4'"), DATA), (".npy header: "
     "'descr': expected a dtype such as '<f4', got ',<f4'")),  # numpy raises SyntaxError
    ("dtype a number", npy_raw(header(descr="4"), DATA), (".npy header: 'descr': expected a "
     "dtype such as '<f4', got 4")),
    ("dtype None", npy_raw(header(descr="None"), DATA), (".npy header: 'descr': expected a "
     "dtype such as '<f4', got None")),
    ("bad field list", npy_raw(header(descr="[('a', '<f4', -1)]"), DATA), (".npy header: "
     "'descr': expected a dtype such as '<f4', got [('a', '<f4', -1)]")),
    ("booleans", npy_raw(header(descr="'|b1'"), bytes(12)), ("expected real numbers, got an "
     "array of booleans (bool)")),
    ("structured", npy_raw(header(descr="[('a', '<f4'), ('b', '<f4')]"), DATA + DATA),
     ("expected real numbers, got an array of structured records ([('a', '<f4'), ('b', "
     "'<f4')])")),
    ("subarray", npy_raw(header(descr="'(2,)<f4'"), DATA + DATA), ("expected real numbers, got "
     "an array of structured records (('<f4', (2,)))")),
    ("datetimes", npy_raw(header(descr="'<M8[s]'"), DATA + DATA), ("expected real numbers, got "
     "an array of datetime64[s] (datetime64[s])")),
    ("objects", npy_raw(header(descr="'|O'"), b"pickle"), ("expected real numbers, got an array "
     "of Python objects (object)")),
    ("0-D", npy_raw(header(shape="()"), DATA[:4]), ("expected 1-D (one token), 2-D (tokens x "
     "d_model) or 3-D (batch x seq x d_model), got 0-D ()")),
    ("Fortran, short data", npy(np.asfortranarray(X.astype("<f4")))[:-3],
     "the file is truncated (173 bytes, the header promises 176)"),
    ("Fortran, more rows than the file", npy_raw(header(fortran="True", shape="(30, 4)"),
                                                 DATA), ("the file is truncated (176 bytes, "
     "the header promises 608)")),
]


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "streamed"])
@pytest.mark.parametrize("raw,message", [c[1:] for c in BAD_NPY], ids=[c[0] for c in BAD_NPY])
def test_bad_npy_is_one_exact_line(cli, tmp_path, monkeypatch, raw, message, whole):
    if not whole:
        monkeypatch.setattr(T, "IN_MEMORY_BYTES", 0)
    path = tmp_path / "bad.npy"
    path.write_bytes(raw)
    r = cli("run", "--preset", "tiny", "--input", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


def test_not_files(cli, tmp_path):
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.npy"
    zero.symlink_to("/dev/zero")
    for path, line in [
        (fifo, f"input file is not a regular file (a FIFO, socket or device): {fifo}"),
        (zero, f"input file is not a regular file (a FIFO, socket or device): {zero}"),
        (tmp_path / "no.npy", f"input file not found: {tmp_path / 'no.npy'}"),
        (tmp_path / "no.txt", f"input file not found: {tmp_path / 'no.txt'}"),
        (tmp_path / "no.bin", f"input file not found: {tmp_path / 'no.bin'}"),
    ]:
        r = cli("run", "--preset", "tiny", "--input", path)
        assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n"), path
    for name in ("dir.npy", "dir.txt"):  # the library call (the CLI's option refuses folders)
        (tmp_path / name).mkdir()
        with pytest.raises(InputError) as err:
            open_input(tmp_path / name, D)
        assert str(err.value) == f"input file is a directory, not a file: {tmp_path / name}"


# --- text files -----------------------------------------------------------------------------

BAD_TEXT = [
    ("bad.txt", b"1 2 x 4\n", ("not a table of numbers, one token per row (could not convert "
     "string 'x' to float64 at row 0, column 3.)")),
    ("ragged.csv", b"1,2,3,4\n5,6,7\n", ("not a table of numbers, one token per row (the "
     "number of columns changed from 4 to 3 at row 2; use `usecols` to select a subset and "
     "avoid this error)")),
    ("long.txt", b"1 2 3 " + b"y" * 1000 + b"\n", "not a table of numbers, one token per row "
     "(could not convert string '" + "y" * 99 + " to float64 at row 0, column 4.)"),
    ("latin1.txt", b"1 2 3 \xe9\n", "not a UTF-8 text file"),
    ("empty.txt", b"", "the file has no numbers"),
    ("comments.csv", b"# only a comment\n", "the file has no numbers"),
    ("wide.csv", b"1,2,3,4,5\n", "expected d_model 4, got 5 (shape (1, 5))"),
    ("nan.txt", b"1 2 3 4\n5 6 nan 8\n", ("1 non-finite value (NaN or infinity), the first at "
     "token 1, column 2; pass --allow-nonfinite to compute with them")),
]


@pytest.mark.parametrize("name,raw,message", BAD_TEXT, ids=[c[0] for c in BAD_TEXT])
def test_bad_text_is_one_exact_line(cli, tmp_path, name, raw, message):
    path = tmp_path / name
    path.write_bytes(raw)
    r = cli("run", "--preset", "tiny", "--input", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


def test_text_values_and_size_limit(cli, tmp_path, monkeypatch):
    path = tmp_path / "x.csv"
    path.write_text("# tokens\n" + "\n".join(",".join(f"{v:g}" for v in row) for row in X))
    np.testing.assert_array_equal(open_input(path, D).matrix(np.dtype("f8")), X)
    size = path.stat().st_size
    monkeypatch.setattr(T, "TEXT_MAX_BYTES", size)
    assert open_input(path, D).shape == (3, D)
    monkeypatch.setattr(T, "TEXT_MAX_BYTES", size - 1)
    r = cli("run", "--preset", "tiny", "--input", path)
    assert (r.code, r.err) == (2, (f"error: input file {path} is {size} bytes; at most "
                                  f"{size - 1} are read\n"))
    assert T.TEXT_MAX_BYTES != 64 * 2**20 and T.IN_MEMORY_BYTES == 64 * 2**20


# --- --random: the rows of one draw, chunk by chunk ------------------------------------------


def test_random_tokens_chunks_are_the_rows_of_one_draw():
    """--random 10 --seed 7 in chunks of 4: 4 + 4 + 2 rows, together exactly
    default_rng(7).normal(0, 1, (10, 3)), the draw matrix() gives."""
    tokens = resolve_input(None, 10, 3, 7)
    whole = np.random.default_rng(7).normal(0.0, 1.0, (10, 3))
    chunks = [(start, c.copy()) for start, c in tokens.chunks(4, np.dtype(np.float64))]
    assert [(start, c.shape[0]) for start, c in chunks] == [(0, 4), (4, 4), (8, 2)]
    np.testing.assert_array_equal(np.vstack([c for _, c in chunks]), whole)
    np.testing.assert_array_equal(tokens.matrix(np.dtype(np.float64)), whole)


def test_huge_random_streams_in_bounded_memory(cli):
    """--random draws chunk by chunk: the chunks are exactly the rows of one whole draw."""
    from ffncli.formats.tokens import resolve_input

    tokens = resolve_input(None, 10**12, 4, seed=5)
    assert tokens.n_tokens == 10**12
    whole = np.random.default_rng(5).normal(0.0, 1.0, (1000, 4)).astype(np.float32)
    got = []
    for start, chunk in tokens.chunks(300, np.dtype(np.float32)):
        got.append(chunk.copy())
        if start >= 700:
            break
    np.testing.assert_array_equal(np.vstack(got)[:1000], whole)
    small = resolve_input(None, 7, 4, seed=5)
    np.testing.assert_array_equal(small.matrix(np.dtype(np.float64)),
                                  np.random.default_rng(5).normal(0.0, 1.0, (7, 4)))


# --- fuzzing ---------------------------------------------------------------------------------

SEEDS = [GOOD, npy(np.asfortranarray(X.astype(">f8"))), npy(X.astype("<f4"), (3, 0)),
         npy(X.astype("<f2").reshape(1, 3, D), (2, 0))]
HEADER_TEXT = "{}()[]',:. -0123456789<>|fiuOTrueFalsedescrfortran_ordershape"


@st.composite
def mutated(draw, seeds: list[bytes], header_end: int = 128) -> bytes:
    """A valid file with a few bytes flipped, set, inserted, deleted or cut, or a stretch of
    its header rewritten with header-like text; half the edits land in the header."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        end = min(header_end, len(data)) if draw(st.booleans()) else len(data)
        pos = draw(st.integers(0, max(end - 1, 0)))
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "cut", "text"]))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        elif op == "cut":
            del data[pos:]
        elif op == "text":
            text = draw(st.text(HEADER_TEXT, min_size=1, max_size=12)).encode()
            data[pos:pos + draw(st.integers(0, 12))] = text
    return bytes(data)


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


def _numpy_reads(raw: bytes) -> np.ndarray:
    return np.load(io.BytesIO(raw), allow_pickle=False)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.one_of(mutated(SEEDS), st.binary(max_size=200)), whole=st.booleans())
def test_fuzz_open_input(scratch, raw, whole):
    """Only a valid input or an InputError; a file accepted is one numpy reads the same."""
    path = scratch / "fuzz.npy"
    path.write_bytes(raw)
    saved = T.IN_MEMORY_BYTES
    T.IN_MEMORY_BYTES = saved if whole else 0
    try:
        token = open_input(path, D)
        got = token.matrix(np.dtype(np.float64))
    except InputError as exc:
        assert str(exc).startswith(f"{path}: ")
        return
    finally:
        T.IN_MEMORY_BYTES = saved
    assert got.shape == (token.n_tokens, D)
    np.testing.assert_array_equal(got, _expected(_numpy_reads(raw)))


@settings(max_examples=150, deadline=None)
@given(text=st.text("0123456789.,-+e nainf#\n\t\r x", max_size=80))
def test_fuzz_text(scratch, text):
    path = scratch / "fuzz.csv"
    path.write_text(text)
    try:
        token = open_input(path, D)
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    assert token.matrix(np.dtype("f8")).shape == (token.n_tokens, D)
