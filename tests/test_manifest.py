"""The resume manifest of run and capture over shards (jobs/shards/manifest.py): read with the
strict, bounded JSON reader, every field of every shard checked. A tampered or damaged
manifest is one line naming what is wrong, never a traceback, and never trusted."""

from __future__ import annotations

import json
import os
import string
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffncli.errors import OutputError
from ffncli.jobs.shards import manifest as M

RECIPE = {"model": {"preset": "toy"}, "residual": False}
RUN_SHARD = {"name": "part-000.npy", "input": "/data/acts/part-000.npy", "tokens": 40,
             "size": 768, "mtime_ns": 1_700_000_000_000_000_000}
CAPTURE_SHARD = {"name": "part-0", "input": "/data/ids/part-0.txt", "part": None,
                 "lines": [1, 12], "sequences": 12, "tokens": 96, "sha256": "ab" * 32}
AGAIN = "; pass --force to start again"


def doc(kind: M.Kind, *shards: object, **top: object) -> dict:
    return {"format": kind.format, "job": RECIPE, "shards": list(shards), **top}


def with_field(shard: dict, key: str, value: object) -> dict:
    return {**shard, key: value}


def without(shard: dict, key: str) -> dict:
    return {k: v for k, v in shard.items() if k != key}


def read(out: Path, content: object, kind: M.Kind = M.RUN) -> dict:
    """``read_entries`` of ``out`` holding a manifest.json of ``content`` (bytes, text, or a
    document written as JSON)."""
    path = out / M.MANIFEST
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return M.read_entries(out, RECIPE, kind)


RUN_KEYS = "its keys: name, input, tokens, size, mtime_ns"
NAME = "a file name (not a path, '.' or '..')"

HOSTILE = [
    ("nested-100000", "[" * 100_000 + "]" * 100_000, M.RUN,
     "not a manifest of ffncli (not valid JSON: arrays and objects nested deeper than 64 "
     f"levels){AGAIN}"),
    ("nested-in-a-shard", '{"format": "ffncli-run-shards/1", "job": {}, "shards": ['
     + "{" * 5000 + "}" * 5000 + "]}", M.RUN,
     "not a manifest of ffncli (not valid JSON: arrays and objects nested deeper than 64 "
     f"levels){AGAIN}"),
    ("name-a-list", doc(M.RUN, with_field(RUN_SHARD, "name", ["part-000.npy"])), M.RUN,
     f"shard 0 of the manifest: expected 'name' to be {NAME}, got ['part-000.npy']{AGAIN}"),
    ("name-a-path", doc(M.RUN, RUN_SHARD, with_field(RUN_SHARD, "name", "../../config.json")),
     M.RUN, f"shard 1 of the manifest: expected 'name' to be {NAME}, got '../../config.json'"
     f"{AGAIN}"),
    ("name-dot", doc(M.RUN, with_field(RUN_SHARD, "name", ".")), M.RUN,
     f"shard 0 of the manifest: expected 'name' to be {NAME}, got '.'{AGAIN}"),
    ("name-dot-dot", doc(M.RUN, with_field(RUN_SHARD, "name", "..")), M.RUN,
     f"shard 0 of the manifest: expected 'name' to be {NAME}, got '..'{AGAIN}"),
    ("name-empty", doc(M.RUN, with_field(RUN_SHARD, "name", "")), M.RUN,
     f"shard 0 of the manifest: expected 'name' to be {NAME}, got ''{AGAIN}"),
    ("name-a-surrogate", doc(M.RUN, with_field(RUN_SHARD, "name", "\ud800.npy")), M.RUN,
     f"shard 0 of the manifest: expected 'name' to be {NAME}, got '\\ud800.npy'{AGAIN}"),
    ("name-twice", doc(M.RUN, RUN_SHARD, RUN_SHARD), M.RUN,
     f"shard 1 of the manifest: its name 'part-000.npy' is that of an earlier shard{AGAIN}"),
    ("tokens-negative", doc(M.RUN, with_field(RUN_SHARD, "tokens", -1)), M.RUN,
     f"shard 0 of the manifest: expected 'tokens' to be a whole number >= 0, got -1{AGAIN}"),
    ("tokens-true", doc(M.RUN, with_field(RUN_SHARD, "tokens", True)), M.RUN,
     f"shard 0 of the manifest: expected 'tokens' to be a whole number >= 0, got True{AGAIN}"),
    ("tokens-a-float", doc(M.RUN, with_field(RUN_SHARD, "tokens", 40.0)), M.RUN,
     f"shard 0 of the manifest: expected 'tokens' to be a whole number >= 0, got 40.0{AGAIN}"),
    ("size-a-string", doc(M.RUN, with_field(RUN_SHARD, "size", "768")), M.RUN,
     f"shard 0 of the manifest: expected 'size' to be a whole number >= 0, got '768'{AGAIN}"),
    ("mtime-null", doc(M.RUN, with_field(RUN_SHARD, "mtime_ns", None)), M.RUN,
     f"shard 0 of the manifest: expected 'mtime_ns' to be a whole number, got None{AGAIN}"),
    ("input-a-number", doc(M.RUN, with_field(RUN_SHARD, "input", 7)), M.RUN,
     f"shard 0 of the manifest: expected 'input' to be a path, got 7{AGAIN}"),
    ("no-size", doc(M.RUN, without(RUN_SHARD, "size")), M.RUN,
     f"shard 0 of the manifest: no 'size'{AGAIN}"),
    ("unknown-field", doc(M.RUN, with_field(RUN_SHARD, "done", True)), M.RUN,
     f"shard 0 of the manifest: unknown key 'done' ({RUN_KEYS}){AGAIN}"),
    ("shard-null", doc(M.RUN, None), M.RUN,
     f"shard 0 of the manifest: expected an object, got None{AGAIN}"),
    ("unknown-top-key", doc(M.RUN, RUN_SHARD, extra=1), M.RUN,
     f"unknown key 'extra' in the manifest (its keys: format, job, shards){AGAIN}"),
    ("shards-an-object", {"format": M.RUN.format, "job": RECIPE, "shards": {"a": 1}}, M.RUN,
     f"not a manifest of ffncli run (format ffncli-run-shards/1){AGAIN}"),
    ("a-list", [1, 2, 3], M.RUN,
     f"not a manifest of ffncli run (format ffncli-run-shards/1){AGAIN}"),
    ("duplicate-key", '{"format": "ffncli-run-shards/1", "format": "x", "job": {}, '
     '"shards": []}', M.RUN,
     f"not a manifest of ffncli (not valid JSON: duplicate key 'format'){AGAIN}"),
    ("nan", '{"format": "ffncli-run-shards/1", "job": {}, "shards": [NaN]}', M.RUN,
     "not a manifest of ffncli (not valid JSON at line 1, column 57: NaN is not a number "
     f"JSON allows){AGAIN}"),
    ("a-huge-integer", '{"format": "ffncli-run-shards/1", "job": {}, "shards": [' + "9" * 5000
     + "]}", M.RUN, "not a manifest of ffncli (not valid JSON at line 1, column 57: an "
     f"integer of 5,000 digits (at most 100 are read)){AGAIN}"),
    ("cut-short", json.dumps(doc(M.RUN, RUN_SHARD))[:-7], M.RUN,
     "not a manifest of ffncli (not valid JSON at line 1, column 217: Expecting ',' "
     f"delimiter){AGAIN}"),
    ("lines-backwards", doc(M.CAPTURE, with_field(CAPTURE_SHARD, "lines", [12, 1])),
     M.CAPTURE, "shard 0 of the manifest: expected 'lines' to be [first line, last line], 1 <= "
     f"first <= last, got [12, 1]{AGAIN}"),
    ("lines-nested", doc(M.CAPTURE, with_field(CAPTURE_SHARD, "lines", [[1], [12]])),
     M.CAPTURE, "shard 0 of the manifest: expected 'lines' to be [first line, last line], 1 <= "
     f"first <= last, got [[1], [12]]{AGAIN}"),
    ("part-a-string", doc(M.CAPTURE, with_field(CAPTURE_SHARD, "part", "0")), M.CAPTURE,
     f"shard 0 of the manifest: expected 'part' to be null or a whole number >= 0, got '0'"
     f"{AGAIN}"),
    ("sha256-short", doc(M.CAPTURE, with_field(CAPTURE_SHARD, "sha256", "abc")), M.CAPTURE,
     f"shard 0 of the manifest: expected 'sha256' to be 64 hexadecimal digits, got 'abc'"
     f"{AGAIN}"),
    ("a-run-manifest-for-capture", doc(M.RUN, RUN_SHARD), M.CAPTURE,
     f"not a manifest of ffncli capture (format ffncli-capture-shards/1){AGAIN}"),
]


@pytest.mark.parametrize("content, kind, problem", [h[1:] for h in HOSTILE],
                         ids=[h[0] for h in HOSTILE])
def test_a_hostile_manifest_is_one_line(tmp_path, content, kind, problem):
    with pytest.raises(OutputError) as refused:
        read(tmp_path, content, kind)
    assert str(refused.value) == f"{tmp_path / M.MANIFEST}: {problem}"


def test_a_shard_that_is_not_an_object(tmp_path):
    with pytest.raises(OutputError) as refused:
        read(tmp_path, doc(M.RUN, [1, 2]))
    assert str(refused.value) == (f"{tmp_path / M.MANIFEST}: shard 0 of the manifest: "
                                  f"expected an object, got [1, 2]{AGAIN}")


@pytest.mark.parametrize("content, problem", [
    (b'{"format": "\xff"}', "not a UTF-8 text file"),
    (None, "manifest is a directory, not a file: {path}"),
])
def test_a_manifest_that_is_not_text(tmp_path, content, problem):
    path = tmp_path / M.MANIFEST
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(OutputError) as refused:
        M.read_entries(tmp_path, RECIPE, M.RUN)
    expected = problem.format(path=path) if "{path}" in problem else f"{path}: {problem}"
    assert str(refused.value) == expected


@pytest.mark.parametrize("kind, shard", [(M.RUN, RUN_SHARD), (M.CAPTURE, CAPTURE_SHARD)],
                         ids=["run", "capture"])
def test_what_write_writes_reads_back(tmp_path, kind, shard):
    others = {"part-001.npy" if kind is M.RUN else "part-1":
              with_field(shard, "name", "part-001.npy" if kind is M.RUN else "part-1")}
    entries = {shard["name"]: shard, **others}
    M.write(tmp_path, RECIPE, entries, kind)
    assert M.read_entries(tmp_path, RECIPE, kind) == entries


def test_cli_run_over_shards_refuses_a_tampered_manifest(cli, tmp_path):
    """End to end: the run that crashed on `"name": [...]` with a TypeError traceback."""
    acts = tmp_path / "acts"
    acts.mkdir()
    np.save(acts / "part-0.npy", np.ones((3, 4), np.float32))
    out = tmp_path / "out"
    r = cli("run", "--preset", "toy", "--input", acts, "--out", out)
    assert r.code == 0, r.err
    document = json.loads((out / M.MANIFEST).read_text())
    document["shards"][0]["name"] = ["part-0.npy"]
    (out / M.MANIFEST).write_text(json.dumps(document))
    before = sorted(os.listdir(out))
    r = cli("run", "--preset", "toy", "--input", acts, "--out", out)
    assert (r.code, r.out, r.err) == (
        2, "", f"error: {out / M.MANIFEST}: shard 0 of the manifest: expected 'name' to be "
               f"{NAME}, got ['part-0.npy']{AGAIN}\n")
    assert sorted(os.listdir(out)) == before
    r = cli("run", "--preset", "toy", "--input", acts, "--out", out, "--force")
    assert r.code == 0, r.err


# ---------------------------------------------------------------------------------------------
# Fuzzing: whatever the file holds, the reader returns checked entries or raises OutputError.

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False,
                                                                       allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20)
KEYS = st.sampled_from([*M.RUN.fields, *M.CAPTURE.fields, "extra"])
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def holds_or_refuses(content: object, kind: M.Kind) -> None:
    with tempfile.TemporaryDirectory() as folder:
        try:
            entries = read(Path(folder), content, kind)
        except OutputError as exc:
            assert "\n" not in str(exc)
            return
    for name, entry in entries.items():  # what it returns is what the writer writes
        assert entry["name"] == name and set(entry) == set(kind.fields)
        for key, (valid, _) in kind.fields.items():
            assert valid(entry[key]), (key, entry[key])


@pytest.mark.slow
@SETTINGS
@given(kind=st.sampled_from([M.RUN, M.CAPTURE]), edits=st.lists(
    st.tuples(st.integers(0, 2), KEYS, JSON | st.just(...)), max_size=4), extra=JSON)
def test_fuzz_edited_shards(kind, edits, extra):
    """A valid manifest whose shards had fields replaced (by any JSON value), removed
    (``...``) or added, and one more shard that is any JSON value."""
    base = RUN_SHARD if kind is M.RUN else CAPTURE_SHARD
    shards = [with_field(base, "name", f"s{i}") for i in range(3)]
    for i, key, value in edits:
        shards[i] = without(shards[i], key) if value is ... else with_field(shards[i], key,
                                                                               value)
    holds_or_refuses(doc(kind, *shards, extra), kind)


@pytest.mark.slow
@SETTINGS
@given(kind=st.sampled_from([M.RUN, M.CAPTURE]), document=JSON)
def test_fuzz_any_document(kind, document):
    holds_or_refuses(document, kind)
    holds_or_refuses({"format": kind.format, "job": RECIPE, "shards": document}, kind)


@pytest.mark.slow
@SETTINGS
@given(raw=st.binary(max_size=200) | st.text(alphabet=string.printable + "[]{}\":,\\",
                                             max_size=200))
def test_fuzz_bytes(raw):
    holds_or_refuses(raw, M.RUN)
