"""The .safetensors reader (formats/safetensors.py) validates before it trusts: the header
(length, JSON, every entry's fields, dtype, shape and byte range) and each tensor's bytes. Files
are written by hand (an 8-byte length, the JSON header, the data), so no writer library is
needed for those. Then checkpoints as people keep them: sharded files and their index, and
model folders, every answer compared with the single file's."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers.checkpoints import MINILM_TOTAL, run_json, st_numpy, write_shards
from helpers.installed_models import minilm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffncli.counting.files import count_file
from ffncli.errors import WeightsError
from ffncli.formats import safetensors as C
from ffncli.formats.safetensors import (
    _FIELDS,
    FLOAT_DTYPES,
    INDEX_NAME,
    open_checkpoint,
    read_header,
    read_index,
    read_tensor,
)


def safetensors(header: object, data: bytes = b"", length: int | None = None) -> bytes:
    """The bytes of a .safetensors file: ``header`` is a dict (dumped as JSON) or raw text."""
    raw = header.encode() if isinstance(header, str) else (
        header if isinstance(header, bytes) else json.dumps(header).encode())
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def entry(dtype: str = "F32", shape: object = (2, 3), offsets: object = (0, 24),
          **extra: object) -> dict:
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape,
            "data_offsets": list(offsets) if isinstance(offsets, tuple) else offsets, **extra}


W = np.arange(6, dtype="<f4").reshape(2, 3) / 4  # exact in F16 and BF16 too
B = np.array([1.5, -2.0], dtype="<f8")
GOOD_HEADER = {
    "__metadata__": {"format": "pt"},
    "w": entry("F32", (2, 3), (0, 24)),
    "b": entry("F64", (2,), (32, 48)),  # a gap of 8 bytes before it: allowed
    "empty": entry("F32", (0, 5), (24, 24)),  # no bytes: overlaps nothing
    "h": entry("F16", (2, 3), (48, 60)),
    "bf": entry("BF16", (2, 3), (60, 72)),
}
GOOD_DATA = (W.tobytes() + b"\0" * 8 + B.tobytes() + W.astype("<f2").tobytes()
             + (W.view("<u4") >> 16).astype("<u2").tobytes())


def write(tmp_path: Path, content: bytes, name: str = "w.safetensors") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_a_good_file_reads_every_dtype_exactly(tmp_path):
    path = write(tmp_path, safetensors(GOOD_HEADER, GOOD_DATA))
    header = read_header(path)
    base = 8 + len(json.dumps(GOOD_HEADER).encode())
    assert {n: (t.dtype, t.shape, t.start - base, t.end - base)
            for n, t in header.tensors.items()} == {
        "w": ("F32", (2, 3), 0, 24), "b": ("F64", (2,), 32, 48),
        "empty": ("F32", (0, 5), 24, 24), "h": ("F16", (2, 3), 48, 60),
        "bf": ("BF16", (2, 3), 60, 72)}
    for name in ("w", "h", "bf"):
        got = read_tensor(header, header.tensors[name])
        assert got.dtype == np.float32 and got.flags.writeable
        np.testing.assert_array_equal(got, W)
    b = read_tensor(header, header.tensors["b"])
    assert b.dtype == np.float64
    np.testing.assert_array_equal(b, B)
    assert read_tensor(header, header.tensors["empty"]).shape == (0, 5)
    assert count_file(header).total == 6 + 2 + 0 + 6 + 6


def test_the_official_writer_round_trips(tmp_path):
    """A file from the safetensors library (header padded with spaces) reads the same."""
    st_numpy = pytest.importorskip("safetensors.numpy")
    st_numpy.save_file({"w": W, "b": B}, tmp_path / "o.safetensors", metadata={"k": "v"})
    header = read_header(tmp_path / "o.safetensors")
    np.testing.assert_array_equal(read_tensor(header, header.tensors["w"]), W)
    np.testing.assert_array_equal(read_tensor(header, header.tensors["b"]), B)


OK = entry()
DATA = b"\0" * 24

# (file bytes, the error after "error: <path>: ")
BAD_FILES = [
    (b"", "not a safetensors file (shorter than 8 bytes)"),
    (b"\x05\0\0", "not a safetensors file (shorter than 8 bytes)"),
    (safetensors({"w": OK}, DATA, length=100_000_001),
     "not a safetensors file (header length 100,000,001 is over the format's limit of "
     "100,000,000 bytes)"),
    (safetensors({"w": OK}, DATA, length=2**64 - 1),
     "not a safetensors file (header length 18,446,744,073,709,551,615 is over the format's "
     "limit of 100,000,000 bytes)"),
    (safetensors("{}", length=11), "not a safetensors file (header length 11 runs past the end "
     "of the file, 10 bytes)"),
    (safetensors(b'{"w\xff": 1}'), "not a safetensors file (header is not UTF-8 text)"),
    (safetensors("{'w': 1}"), "not a safetensors file (header is not valid JSON at line 1, "
     "column 2: Expecting property name enclosed in double quotes)"),
    (safetensors(""), "not a safetensors file (header is not valid JSON at line 1, column 1: "
     "Expecting value)"),
    (safetensors("[]"), "not a safetensors file (header is not a JSON object)"),
    (safetensors('"w"'), "not a safetensors file (header is not a JSON object)"),
    (safetensors("[" * 100_000), "not a safetensors file (header is not valid JSON: arrays and "
     "objects nested deeper than 64 levels)"),
    (safetensors(f'{{"w": {json.dumps(OK)}, "w": {json.dumps(OK)}}}', DATA),
     "not a safetensors file (header is not valid JSON: duplicate key 'w')"),
    (safetensors('{"w": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 24]}}', DATA),
     "not a safetensors file (header is not valid JSON at line 1, column 34: NaN is not a "
     "number JSON allows)"),
    (safetensors('{"w": {"dtype": "F32", "shape": [Infinity], "data_offsets": [0, 24]}}'),
     "not a safetensors file (header is not valid JSON at line 1, column 34: Infinity is not "
     "a number JSON allows)"),
    (safetensors('{"w": {"dtype": "F32", "shape": [1e999], "data_offsets": [0, 24]}}'),
     "not a safetensors file (header is not valid JSON at line 1, column 34: number '1e999' "
     "is out of range (it rounds to infinity))"),
    (safetensors('{"w": {"dtype": "F32", "shape": [%s], "data_offsets": [0, 24]}}' % ("9" * 5000)),
     "not a safetensors file (header is not valid JSON at line 1, column 34: an integer of "
     "5,000 digits (at most 100 are read))"),
    # __metadata__
    (safetensors({"__metadata__": {"format": 1}}),
     "header key '__metadata__': expected a mapping of strings to strings, got {'format': 1}"),
    (safetensors({"__metadata__": ["pt"]}),
     "header key '__metadata__': expected a mapping of strings to strings, got ['pt']"),
    # an entry
    (safetensors({"w": [1, 2]}),
     "tensor 'w': expected an object with dtype, shape and data_offsets, got [1, 2]"),
    (safetensors({"w": "F32"}),
     "tensor 'w': expected an object with dtype, shape and data_offsets, got 'F32'"),
    (safetensors({"w": {"dtype": "F32", "shape": [2, 3]}}, DATA),
     "tensor 'w': missing field 'data_offsets'"),
    (safetensors({"w": entry(offset=0)}, DATA),
     "tensor 'w': unknown field 'offset'; expected dtype, shape, data_offsets"),
    # dtype
    (safetensors({"w": entry(dtype=["F32"])}, DATA),
     "tensor 'w': dtype: expected a string such as 'F32', got ['F32']"),
    (safetensors({"w": entry(dtype={"F": 32})}, DATA),
     "tensor 'w': dtype: expected a string such as 'F32', got {'F': 32}"),
    (safetensors({"w": entry(dtype=None)}, DATA),
     "tensor 'w': dtype: expected a string such as 'F32', got None"),
    (safetensors({"w": entry(dtype="float32")}, DATA),
     "tensor 'w': unknown dtype 'float32'; known: F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, "
     "I32, I16, I8, U64, U32, U16, U8, BOOL"),
    # shape
    (safetensors({"w": entry(shape=[2.0, 3])}, DATA),
     "tensor 'w': shape: expected a list of whole numbers >= 0, got [2.0, 3]"),
    (safetensors({"w": entry(shape=[2.5, 3])}, DATA),
     "tensor 'w': shape: expected a list of whole numbers >= 0, got [2.5, 3]"),
    (safetensors({"w": entry(shape=[-2, -3])}, DATA),
     "tensor 'w': shape: expected a list of whole numbers >= 0, got [-2, -3]"),
    (safetensors({"w": entry(shape=[True, 3])}, DATA),
     "tensor 'w': shape: expected a list of whole numbers >= 0, got [True, 3]"),
    (safetensors({"w": entry(shape=["2", "3"])}, DATA),
     "tensor 'w': shape: expected a list of whole numbers >= 0, got ['2', '3']"),
    (safetensors({"w": entry(shape=6)}, DATA),
     "tensor 'w': shape: expected a list of whole numbers >= 0, got 6"),
    (safetensors({"w": entry(shape={"rows": 2})}, DATA),
     "tensor 'w': shape: expected a list of whole numbers >= 0, got {'rows': 2}"),
    (safetensors({"w": entry(shape=[0, 10**30])}, DATA),
     "tensor 'w': shape: expected at most 64 dimensions, each below 2**63, got "
     "[0, 1000000000000000000000000000000]"),
    (safetensors({"w": entry(shape=[1] * 65)}, DATA),
     "tensor 'w': shape: expected at most 64 dimensions, each below 2**63, got "
     "[1, 1, 1, 1, 1, 1, ...]"),
    # data_offsets
    (safetensors({"w": entry(offsets=[0])}, DATA),
     "tensor 'w': data_offsets: expected [start, end], two whole numbers >= 0, got [0]"),
    (safetensors({"w": entry(offsets=[0, 12, 24])}, DATA),
     "tensor 'w': data_offsets: expected [start, end], two whole numbers >= 0, got [0, 12, 24]"),
    (safetensors({"w": entry(offsets=[0, 24.0])}, DATA),
     "tensor 'w': data_offsets: expected [start, end], two whole numbers >= 0, got [0, 24.0]"),
    (safetensors({"w": entry(offsets=[-24, 0])}, DATA),
     "tensor 'w': data_offsets: expected [start, end], two whole numbers >= 0, got [-24, 0]"),
    (safetensors({"w": entry(offsets=[False, 24])}, DATA),
     "tensor 'w': data_offsets: expected [start, end], two whole numbers >= 0, got [False, 24]"),
    (safetensors({"w": entry(offsets="0-24")}, DATA),
     "tensor 'w': data_offsets: expected [start, end], two whole numbers >= 0, got '0-24'"),
    (safetensors({"w": entry(offsets=[24, 0])}, DATA),
     "tensor 'w': data_offsets: expected start <= end, got [24, 0]"),
    (safetensors({"w": entry(offsets=[0, 24])}, DATA[:20]),
     "tensor 'w': data_offsets [0, 24] run past the end of the data (20 bytes after the "
     "header)"),
    (safetensors({"w": entry(offsets=[2**64, 2**64 + 24])}, DATA),
     "tensor 'w': data_offsets [18446744073709551616, 18446744073709551640] run past the end "
     "of the data (24 bytes after the header)"),
    (safetensors({"w": entry(offsets=[0, 12])}, DATA),
     "tensor 'w': data_offsets [0, 12] hold 12 bytes, but shape [2, 3] of F32 needs 24"),
    (safetensors({"w": entry("F16", offsets=[0, 24])}, DATA),
     "tensor 'w': data_offsets [0, 24] hold 24 bytes, but shape [2, 3] of F16 needs 12"),
    (safetensors({"a": entry(), "b": entry("F32", (3,), (12, 24))}, DATA),
     "tensors 'a' and 'b' overlap (data_offsets [0, 24] and [12, 24])"),
    (safetensors({"a": entry("F32", (3,), (12, 24)), "b": entry("F32", (4,), (0, 16))}, DATA),
     "tensors 'b' and 'a' overlap (data_offsets [0, 16] and [12, 24])"),
    (safetensors({"a": entry(), "b": entry()}, DATA),
     "tensors 'a' and 'b' overlap (data_offsets [0, 24] and [0, 24])"),
]


@pytest.mark.parametrize("content,message", BAD_FILES, ids=range(len(BAD_FILES)))
def test_bad_safetensors_files_are_one_line(cli, tmp_path, content, message):
    path = write(tmp_path, content)
    r = cli("params", "--preset", "base", "--weights", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


def test_names_and_values_from_the_file_are_escaped_and_cut_short(cli, tmp_path):
    path = write(tmp_path, safetensors({"w\n\x1b[31m": entry(dtype="x" * 500)}, DATA))
    r = cli("params", "--preset", "base", "--weights", path)
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: {path}: tensor 'w\\n\\x1b[31m': unknown dtype "
                     f"'{'x' * 27}...{'x' * 28}'; known: F64, F32, F16, BF16, F8_E4M3, "
                     "F8_E5M2, I64, I32, I16, I8, U64, U32, U16, U8, BOOL\n")


@pytest.mark.parametrize("special", ["fifo", "dev"])
def test_only_regular_files_are_opened(cli, tmp_path, special):
    import os

    path = Path("/dev/zero")
    if special == "fifo":
        path = tmp_path / "w.safetensors"
        os.mkfifo(path)
    r = cli("params", "--preset", "base", "--weights", path)
    assert (r.code, r.out, r.err) == (
        2, "", f"error: weights file is not a regular file (a FIFO, socket or device): {path}\n")


def test_a_directory_is_refused(tmp_path):
    """(The CLI's --weights refuses a directory itself; the reader does too.)"""
    with pytest.raises(WeightsError) as exc:
        read_header(tmp_path)
    assert str(exc.value) == f"weights file is a directory, not a file: {tmp_path}"


def test_a_file_cut_after_its_header_was_read_is_an_error_not_a_short_array(tmp_path):
    path = write(tmp_path, safetensors(GOOD_HEADER, GOOD_DATA))
    header = read_header(path)
    with open(path, "r+b") as f:
        f.truncate(header.tensors["w"].start + 10)
    with pytest.raises(WeightsError) as exc:
        read_tensor(header, header.tensors["w"])
    assert str(exc.value) == (f"{path}: tensor 'w': its bytes {header.tensors['w'].start:,}-"
                              f"{header.tensors['w'].end:,} run past the end of the file "
                              f"({header.tensors['w'].start + 10:,} bytes); was it cut short?")


def test_a_short_read_is_an_error(tmp_path, monkeypatch):
    """Even when the file's size looked right (it shrank between fstat and read)."""
    import os

    path = write(tmp_path, safetensors(GOOD_HEADER, GOOD_DATA))
    header = read_header(path)
    real_fstat = os.fstat

    class Big:
        def __init__(self, st):
            self.st_size = st.st_size + 1000

    monkeypatch.setattr(os, "fstat", lambda fd: Big(real_fstat(fd)))
    info = header.tensors["bf"]
    with open(path, "r+b") as f:
        f.truncate(info.start + 5)
    with pytest.raises(WeightsError) as exc:
        read_tensor(header, info)
    assert str(exc.value) == (f"{path}: tensor 'bf': the file ends after 5 of its 12 bytes; was "
                              "it cut short?")


def test_read_tensor_checks_a_hand_made_tensor_info(tmp_path):
    from ffncli.formats.safetensors import TensorInfo

    path = write(tmp_path, safetensors(GOOD_HEADER, GOOD_DATA))
    header = read_header(path)
    with pytest.raises(WeightsError) as exc:
        read_tensor(header, TensorInfo("x", "F32", (4, 4), 0, 8))
    assert str(exc.value) == (f"{path}: tensor 'x': bytes 0-8 of the file do not hold shape "
                              "[4, 4] of F32 (64 bytes)")
    with pytest.raises(WeightsError) as exc:
        read_tensor(header, TensorInfo("z", "F32", (0, 2**62, 2**62), 0, 0))
    assert str(exc.value) == (f"{path}: tensor 'z': shape [0, {2**62}, {2**62}] cannot be held "
                              "by an array")


# --- fuzzing: a valid file, mutated ------------------------------------------------------------

HEADER_TEXT = json.dumps(GOOD_HEADER).encode()
VALID = safetensors(HEADER_TEXT, GOOD_DATA)


def _mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, byte) edits: 0 replaces a byte, 1 inserts one, 2 deletes one,
    3 cuts the bytes there."""
    out = bytearray(data)
    for kind, pos, byte in edits:
        pos %= max(len(out), 1)
        if kind == 0 and out:
            out[pos] = byte
        elif kind == 1:
            out.insert(pos, byte)
        elif kind == 2 and out:
            del out[pos]
        elif kind == 3:
            del out[pos:]
    return bytes(out)


# Bytes that matter in JSON and in the header's fields, besides any byte at all.
BYTE = st.integers(0, 255) | st.sampled_from(b'{}[]",:0123456789-.eE tfnNI')


def edits(max_size: int) -> st.SearchStrategy:
    return st.lists(st.tuples(st.integers(0, 3), st.integers(0, len(VALID)), BYTE),
                    max_size=max_size)


@pytest.fixture(scope="module")
def fuzz_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "w.safetensors"


def _read_everything(fuzz_file: Path) -> None:
    """Only two outcomes: a header whose tensors all read with their shape, or one
    WeightsError line."""
    try:
        header = read_header(fuzz_file)
        count_file(header)
        size = fuzz_file.stat().st_size
        for info in header.tensors.values():
            assert 0 <= info.start <= info.end <= size
            if info.dtype in ("F32", "F16", "BF16", "F64"):
                assert read_tensor(header, info).shape == info.shape
    except WeightsError as exc:
        assert "\n" not in str(exc)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(in_header=edits(4), in_file=edits(2), data_cut=st.integers(0, len(GOOD_DATA)))
def test_fuzz_bytes_of_a_valid_file(fuzz_file, in_header, in_file, data_cut):
    """The JSON text mutated (its length prefix kept right), then the file's bytes, length
    prefix included, and the data cut short."""
    content = safetensors(_mutate(HEADER_TEXT, in_header), GOOD_DATA[:data_cut])
    fuzz_file.write_bytes(_mutate(content, in_file))
    _read_everything(fuzz_file)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.integers(-2, 80)
    | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([*FLOAT_DTYPES, "U8"])
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=8)
FIELD_EDITS = st.lists(st.tuples(st.sampled_from([*GOOD_HEADER, "new"]),
                                 st.sampled_from([*_FIELDS, "extra", None]),
                                 JSON_VALUES | st.lists(st.integers(-2, 80), max_size=3)),
                       min_size=1, max_size=3)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=FIELD_EDITS, data_cut=st.just(len(GOOD_DATA)) | st.integers(0, len(GOOD_DATA)))
def test_fuzz_fields_of_a_valid_header(fuzz_file, changes, data_cut):
    """Any JSON value (or a small list of small integers) put in place of a tensor, one of its
    fields or the metadata, or added as a field, with the data possibly cut short."""
    header = json.loads(HEADER_TEXT)
    for name, field, value in changes:
        if field is None or not isinstance(header.get(name), dict):
            header[name] = value
        else:
            header[name][field] = value
    fuzz_file.write_bytes(safetensors(header, GOOD_DATA[:data_cut]))
    _read_everything(fuzz_file)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_read_header_on_random_bytes(fuzz_file, content):
    fuzz_file.write_bytes(content)
    try:
        count_file(read_header(fuzz_file))
    except WeightsError as exc:
        assert "\n" not in str(exc)


# ---------------------------------------------------------------------------------------------
# params: every shard's header counted, the config beside the weights used.


def test_params_single_file_uses_the_config_beside_it(cli):
    doc = run_json(cli, "params", "--weights", minilm() / "model.safetensors")
    assert (doc["total_params"], doc["file_params"], doc["matches"]) == (MINILM_TOTAL,
                                                                         MINILM_TOTAL, True)


@pytest.mark.slow
@pytest.mark.parametrize("form", ["folder", "index"])
def test_params_on_shards_counts_every_shard_as_the_single_file(cli, sharded, form):
    single = run_json(cli, "params", "--weights", minilm() / "model.safetensors")
    target = sharded if form == "folder" else sharded / INDEX_NAME
    doc = run_json(cli, "params", "--weights", target)
    assert doc["file_params"] == doc["total_params"] == MINILM_TOTAL
    assert doc["file_groups"] == single["file_groups"] and doc["matches"] is True
    assert doc["buffers"] == single["buffers"]
    assert doc["weights"] == str(target)


def test_params_on_a_save_pretrained_folder(cli):
    doc = run_json(cli, "params", "--weights", minilm())
    assert (doc["file_params"], doc["matches"]) == (MINILM_TOTAL, True)


def test_params_without_any_config_counts_the_file_by_names(cli, sharded, tmp_path):
    for f in sharded.iterdir():
        if f.name != "config.json":
            (tmp_path / f.name).symlink_to(f)
    doc = run_json(cli, "params", "--weights", tmp_path)
    assert doc["checked_by_config"] is False and doc["file_params"] == MINILM_TOTAL
    assert doc["reason"] == "no --preset or --config, and no config.json beside the weights"
    r = cli("params", "--weights", tmp_path, "--d-ff", "8")
    assert (r.code, r.err) == (2, "error: the what-if, --train and --fit options need a spec; "
                                  "no --preset or --config, and no config.json beside the "
                                  "weights\n")
    r = cli("run", "--weights", tmp_path, "--random", "1")
    assert (r.code, r.err) == (2, f"error: no config.json in {tmp_path}, which the model's "
                                  "shape is read from: give it with --config config.json, or a "
                                  "--preset NAME|FILE\n")


def test_junit_xml_is_never_the_config_in_the_weights_folder(cli, sharded, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    for f in sharded.iterdir():
        (folder / f.name).symlink_to(f)
    r = cli("permute-check", "--weights", folder, "--random", "2", "--junit-xml",
            folder / "config.json")
    assert (r.code, r.err) == (2, f"error: option --junit-xml: {folder / 'config.json'} is an "
                                  "input of this command (the config.json beside the "
                                  "--weights); choose another path\n")


def test_an_explicit_spec_wins_over_the_config_beside(cli, sharded):
    r = cli("params", "--weights", sharded, "--preset", "bert-base", "--json")
    assert r.code == 1 and r.json()["file_params"] == MINILM_TOTAL  # a mismatch: exit 1


def test_a_shard_mismatch_is_reported_per_group(cli, sharded, tmp_path):
    """Half a model (one shard dropped from the index) is a mismatch in the groups it lacks."""
    index = json.loads((sharded / INDEX_NAME).read_text())
    kept = {n: f for n, f in index["weight_map"].items() if not f.startswith("model-00003")}
    for f in sharded.iterdir():
        if f.name != INDEX_NAME:
            (tmp_path / f.name).symlink_to(f)
    (tmp_path / INDEX_NAME).write_text(json.dumps({"weight_map": kept}))
    (tmp_path / "model-00003-of-00003.safetensors").unlink()
    r = cli("params", "--weights", tmp_path, "--json")
    doc = r.json()
    assert r.code == 1 and doc["mismatches"] == {  # layers 4 and 5 and the pooler missing
        "attention": {"spec": 6 * 591_360, "file": 4 * 591_360},
        "ffn": {"spec": 6 * 1_181_568, "file": 4 * 1_181_568},
        "norms": {"spec": 9_984, "file": 9_984 - 2 * 1_536},
        "pooler": {"spec": 147_840, "file": 0}}
    assert doc["file_params"] == MINILM_TOTAL - 2 * (1_181_568 + 591_360 + 1_536) - 147_840


# ---------------------------------------------------------------------------------------------
# run, relu-stats, permute-check: the same answers, from only the layer's shards.


@pytest.mark.slow
@pytest.mark.parametrize("layer", [0, 3, 5])
def test_run_on_shards_equals_the_single_file_exactly(cli, sharded, layer):
    single = run_json(cli, "run", "--weights", minilm() / "model.safetensors", "--layer", layer,
                      "--random", "4", "--dtype", "float64")
    for target in (sharded, sharded / INDEX_NAME):
        doc = run_json(cli, "run", "--weights", target, "--layer", layer, "--random", "4",
                       "--dtype", "float64")
        assert doc["output"] == single["output"]
        assert doc["weights"] == f"{target}, layer {layer}"


@pytest.mark.slow
def test_relu_stats_and_permute_check_on_shards(cli, sharded):
    single = run_json(cli, "relu-stats", "--weights", minilm() / "model.safetensors", "--layer",
                      "4", "--random", "64")
    doc = run_json(cli, "relu-stats", "--weights", sharded, "--layer", "4", "--random", "64")
    assert doc == single
    check = run_json(cli, "permute-check", "--weights", sharded, "--layer", "4", "--random", "8")
    assert check["passed"] is True and check["d_model"] == 384


@pytest.mark.slow
def test_run_opens_only_the_shards_of_its_layer(cli, sharded, tmp_path, monkeypatch):
    """Layer 0 lives in shard 1: the other shards are never opened, so garbage in them (a
    header too) does not matter; asking for layer 5 then reads the broken shard and says so."""
    for f in sharded.iterdir():
        shutil.copy(f, tmp_path / f.name)
    for broken in ("model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"):
        (tmp_path / broken).write_bytes(b"\xff" * 64)
    opened: list[str] = []
    real = C.read_header
    monkeypatch.setattr(C, "read_header", lambda p: opened.append(p.name) or real(p))
    single = run_json(cli, "run", "--weights", minilm() / "model.safetensors", "--layer", "0",
                      "--random", "3")
    opened.clear()
    doc = run_json(cli, "run", "--weights", tmp_path, "--layer", "0", "--random", "3")
    assert doc["output"] == single["output"]
    assert opened == ["model-00001-of-00003.safetensors"]
    r = cli("run", "--weights", tmp_path, "--layer", "5", "--random", "3")
    assert (r.code, r.err) == (2, f"error: {tmp_path / 'model-00003-of-00003.safetensors'}: not "
                                  "a safetensors file (header length 18,446,744,073,709,551,615 "
                                  "is over the format's limit of 100,000,000 bytes)\n")


def test_a_checkpoint_reads_each_shard_header_once(sharded, monkeypatch):
    opened: list[str] = []
    real = C.read_header
    monkeypatch.setattr(C, "read_header", lambda p: opened.append(p.name) or real(p))
    ckpt = open_checkpoint(sharded)
    assert opened == [] and len(ckpt.shards) == 3 and ckpt.index == sharded / INDEX_NAME
    assert len(ckpt.merged().tensors) == len(ckpt.shard_of)
    ckpt.merged()
    assert sorted(opened) == [s.name for s in ckpt.shards]


# ---------------------------------------------------------------------------------------------
# Bad shards, indexes and folders: one line each.


def two_shards(folder: Path, weight_map: dict[str, str] | None = None) -> Path:
    return write_shards(folder, [{"a.weight": W}, {"b.weight": W, "c.weight": W}], weight_map)


S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


@pytest.mark.slow
def test_bad_checkpoints_exact_lines(cli, tmp_path):
    def case(name: str, index_text: str | None = None, weight_map: dict | None = None,
             setup=None) -> Path:
        folder = tmp_path / name
        index = two_shards(folder, weight_map)
        if index_text is not None:
            index.write_text(index_text)
        if setup is not None:
            setup(folder)
        return folder

    missing = case("missing", setup=lambda f: (f / S2).unlink())
    ghost = case("ghost", weight_map={"a.weight": S1, "b.weight": S2, "c.weight": S2,
                                      "d.weight": S1})
    unlisted = case("unlisted", weight_map={"a.weight": S1, "b.weight": S2})
    moved = tmp_path / "moved"  # b.weight in both shards, the index mapping it to the second
    write_shards(moved, [{"a.weight": W, "b.weight": W}, {"b.weight": W, "c.weight": W}],
                 {"a.weight": S1, "b.weight": S2, "c.weight": S2})
    not_json = case("notjson", index_text="weight_map: a")
    no_map = case("nomap", index_text='{"metadata": {}}')
    outside = case("outside", weight_map={"a.weight": "../x.safetensors"})
    absolute = case("absolute", weight_map={"a.weight": "/etc/passwd"})
    not_object = case("notobject", index_text='{"weight_map": ["a"]}')
    empty_map = case("emptymap", index_text='{"weight_map": {}}')
    unknown = case("unknown", index_text='{"weight_map": {"a.weight": "x"}, "extra": 1}')
    not_name = case("notname", index_text='{"weight_map": {"a.weight": 7}}')
    duplicate = case("duplicate", index_text='{"weight_map": {"a": "x", "a": "y"}}')
    no_weights = tmp_path / "noweights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text("{}")
    others = tmp_path / "others"
    others.mkdir()
    st_numpy.save_file({"w": W}, others / "adapter_model.safetensors")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "pytorch_model.bin").write_bytes(b"PK")
    both = case("both", setup=lambda f: st_numpy.save_file({"w": W}, f / "model.safetensors"))
    ix = INDEX_NAME
    cases = [
        (missing, f"shard named by {ix} not found: {missing / S2}"),
        (ghost, f"{ghost / ix}: tensor 'd.weight' is mapped to {S1}, which does not hold it"),
        (unlisted, f"{unlisted / S2}: holds tensor 'c.weight', which {unlisted / ix} does not "
                   "list"),
        (moved, f"{moved / S1}: holds tensor 'b.weight', which {moved / ix} maps to {S2}"),
        (not_json, f"{not_json / ix}: not a safetensors index (not valid JSON at line 1, "
                   "column 1: Expecting value)"),
        (no_map, f"{no_map / ix}: not a safetensors index (no 'weight_map' key)"),
        (outside, f"{outside / ix}: weight_map 'a.weight': shard '../x.safetensors' is not a "
                  f"file in {outside}"),
        (absolute, f"{absolute / ix}: weight_map 'a.weight': shard '/etc/passwd' is not a file "
                   f"in {absolute}"),
        (not_object, f"{not_object / ix}: weight_map: expected an object mapping tensor names "
                     "to shard files, got ['a']"),
        (empty_map, f"{empty_map / ix}: weight_map: expected an object mapping tensor names to "
                    "shard files, got {}"),
        (unknown, f"{unknown / ix}: unknown key 'extra'; expected metadata, weight_map"),
        (not_name, f"{not_name / ix}: weight_map 'a.weight': expected a shard file name, got 7"),
        (duplicate, f"{duplicate / ix}: not a safetensors index (not valid JSON: duplicate "
                    "key 'a')"),
        (no_weights, f"{no_weights}: no model.safetensors or {ix} in the folder"),
        (others, f"{others}: no model.safetensors or {ix} in the folder; it has "
                 "adapter_model.safetensors: give one with --weights"),
        (pickled, f"{pickled}: no model.safetensors or {ix} in the folder; it has "
                  "pytorch_model.bin: PyTorch pickles, which ffncli does not read (never "
                  "unpickled)"),
        (both, f"{both}: holds both model.safetensors and {ix}; give one of them with "
               "--weights"),
    ]
    for target, line in cases:
        # run opens no shard that lacks its layer: a shard's contents are checked by params
        commands = [("params", "--preset", "tiny")]
        if target not in (ghost, unlisted, moved):
            commands.append(("run", "--preset", "bert-base", "--random", "1"))
        for command in commands:
            r = cli(*command, "--weights", target)
            assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n"), (command, target)
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "bert"}')
    r = cli("params", "--weights", config)
    assert r.err == f"error: {config}: not a safetensors index (no 'weight_map' key)\n"
    # an index given as the file reads the same
    r = cli("params", "--weights", ghost / ix)
    assert r.err == f"error: {ghost / ix}: tensor 'd.weight' is mapped to {S1}, which does " \
                    "not hold it\n"


def test_a_shard_that_is_a_folder_or_fifo_is_refused_unopened(cli, tmp_path):
    index = two_shards(tmp_path)
    (tmp_path / S2).unlink()
    os.mkfifo(tmp_path / S2)
    r = cli("params", "--weights", index)
    assert r.err == (f"error: shard named by {INDEX_NAME} is not a regular file (a FIFO, "
                     f"socket or device): {tmp_path / S2}\n")


def test_the_unsharded_checkpoint_is_one_header(tmp_path):
    st_numpy.save_file({"w": W}, tmp_path / "model.safetensors")
    ckpt = open_checkpoint(tmp_path)
    assert (ckpt.index, ckpt.shards, ckpt.path) == (None, (tmp_path / "model.safetensors",),
                                                    tmp_path / "model.safetensors")
    assert ckpt.merged().tensors["w"].shape == (2, 3)


@pytest.fixture(scope="module")
def fuzz_index(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzzindex")
    two_shards(folder)
    return folder / INDEX_NAME


VALID_INDEX = json.dumps({"metadata": {"total_size": 72},
                          "weight_map": {"a.weight": S1, "b.weight": S2, "c.weight": S2}})


@pytest.mark.slow
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzz_read_index_on_mutated_text(fuzz_index, data):
    """Flipped, cut and inserted bytes of a valid index: a mapping or one WeightsError."""
    raw = bytearray(VALID_INDEX.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        i = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[i] ^= data.draw(st.integers(1, 255))
        elif op == "cut":
            del raw[i:i + data.draw(st.integers(1, 8))]
        else:
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    fuzz_index.write_bytes(bytes(raw))
    try:
        mapping = read_index(fuzz_index)
    except WeightsError as exc:
        assert "\n" not in str(exc)
        return
    assert all(p.parent == fuzz_index.parent or fuzz_index.parent in p.parents
               for p in mapping.values())


def test_a_mixture_of_experts_layer_split_across_shards_reads_as_one_file(tmp_path):
    """Mixtral's layer 1: experts 0-1 in one shard, the router and experts 2-3 in another."""
    from ffncli.compute import ffn as F
    from ffncli.compute.weights import checkpoint_weights as safetensors_weights
    from ffncli.specs.archs import spec_from_config

    spec = spec_from_config({"model_type": "mixtral", "hidden_size": 8, "intermediate_size": 12,
                             "num_hidden_layers": 2, "num_attention_heads": 2,
                             "num_key_value_heads": 1, "num_local_experts": 4,
                             "num_experts_per_tok": 2, "vocab_size": 10}, "tiny-mixtral")
    rng = np.random.default_rng(0)
    p = "model.layers.1.block_sparse_moe."
    first = {f"{p}experts.{e}.{w}.weight": rng.normal(size=shape).astype(np.float32)
             for e in (0, 1) for w, shape in (("w1", (12, 8)), ("w3", (12, 8)), ("w2", (8, 12)))}
    second = {f"{p}experts.{e}.{w}.weight": rng.normal(size=shape).astype(np.float32)
              for e in (2, 3) for w, shape in (("w1", (12, 8)), ("w3", (12, 8)), ("w2", (8, 12)))}
    second[p + "gate.weight"] = rng.normal(size=(4, 8)).astype(np.float32)
    st_numpy.save_file({**first, **second}, tmp_path / "one.safetensors")
    write_shards(tmp_path / "sharded", [first, second])
    x = rng.normal(size=(6, 8)).astype(np.float32)
    a = safetensors_weights(tmp_path / "one.safetensors", spec, 1, np.dtype("f4"))
    b = safetensors_weights(tmp_path / "sharded", spec, 1, np.dtype("f4"))
    assert isinstance(b, F.MoEWeights) and len(b.experts) == 4
    np.testing.assert_array_equal(F.ffn(x, a, spec.ffn.activation),
                                  F.ffn(x, b, spec.ffn.activation))
