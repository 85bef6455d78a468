"""Hostile input to capture and relu-stats --text/--ids: one error line, exit 2, nothing
written or left behind. Each test is a case a review of issue 13 found failing (a traceback, a
silent NaN result, a file or folder left behind); the fixtures are the tiny checkpoints of
tests/data/forward, edited one key or tensor at a time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

FORWARD = Path(__file__).parent / "data" / "forward"


def checkpoint(tmp_path: Path, base: str, config: dict | None = None,
               tensors: dict[str, np.ndarray] | None = None) -> Path:
    """A copy of the fixture ``base`` with some config keys and tensors replaced."""
    st = pytest.importorskip("safetensors.numpy")
    folder = tmp_path / f"{base}-edited"
    folder.mkdir()
    settings = json.loads((FORWARD / base / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**settings, **(config or {})}))
    weights = st.load_file(str(FORWARD / base / "model.safetensors"))
    st.save_file({**weights, **(tensors or {})}, str(folder / "model.safetensors"))
    return folder


def capture(cli, weights: Path, ids: Path, out: Path, *extra: str):
    return cli("capture", "--weights", weights, "--ids", ids, "--out", out, *extra)


IDS = FORWARD / "gpt2" / "ids.txt"  # 3 sequences, ids below 128: every fixture's vocabulary


# ---------------------------------------------------------------------------------------------
# --ids files


def test_an_id_of_thousands_of_digits(cli, tmp_path):
    """int() refuses more than 4,300 digits: that was a ValueError traceback."""
    ids = tmp_path / "ids.txt"
    ids.write_text("1 2\n3 " + "9" * 5000 + " 4\n")
    r = capture(cli, FORWARD / "gpt2", ids, tmp_path / "out")
    assert (r.code, r.err) == (2, f"error: {ids}: line 2: token id '{'9' * 27}...{'9' * 28}' is "
                                  "out of range for a vocabulary of 128\n")
    assert not (tmp_path / "out").exists()
    ids.write_text("1 " + "0" * 30 + "7 " + "9" * 19 + "\n")  # 7 written long is in range
    r = capture(cli, FORWARD / "gpt2", ids, tmp_path / "out")
    assert (r.code, r.err) == (2, f"error: {ids}: line 1: token id {'9' * 19} is out of range "
                                  "for a vocabulary of 128\n")


def test_an_ids_file_opening_with_a_byte_order_mark(cli, tmp_path):
    """Notepad's UTF-8 opens with a BOM: --text drops it, --ids did not (an error)."""
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text("5 6 7\n8 9\n")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    docs = [capture(cli, FORWARD / "gpt2", ids, tmp_path / ids.stem, "--json")
            for ids in (plain, marked)]
    assert [d.code for d in docs] == [0, 0]
    manifests = [json.loads((tmp_path / n / "capture.json").read_text())
                 for n in ("plain", "marked")]
    assert manifests[0]["sequences"] == manifests[1]["sequences"] == [
        {"line": 1, "ids": [5, 6, 7]}, {"line": 2, "ids": [8, 9]}]
    for i in (0, 1):
        assert np.array_equal(np.load(tmp_path / "plain" / f"layer{i}.npy"),
                              np.load(tmp_path / "marked" / f"layer{i}.npy"))
