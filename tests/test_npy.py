""".npy outputs (formats/npy.py): AtomicNpyWriter claims --out's final name without
overwriting: a file that appears while it writes is left alone, two runs to one path cannot both
succeed, --force replaces the old file atomically."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ffncli.base.files import PARAMETERS, Naming
from ffncli.errors import OutputError
from ffncli.formats import npy as T
from ffncli.jobs.targets import OUT_OPTIONS


def _write(path: Path, value: float, force: bool = False,
           names: Naming = PARAMETERS) -> T.AtomicNpyWriter:
    writer = T.AtomicNpyWriter(path, (2, 3), np.dtype(np.float32), force, names=names)
    writer.__enter__()
    writer.write(np.full((2, 3), value, dtype=np.float32))
    return writer


@pytest.mark.parametrize("names, force", [(PARAMETERS, "force=True"), (OUT_OPTIONS, "--force")],
                         ids=["library", "command"])
def test_a_file_that_appears_while_writing_is_not_replaced(tmp_path, names, force):
    """The line names the path and force as the caller gave them (issue 41 §3)."""
    path = tmp_path / "y.npy"
    writer = _write(path, 1.0, names=names)
    path.write_bytes(b"someone else's")
    with pytest.raises(OutputError) as caught:
        writer.__exit__(None, None, None)
    assert str(caught.value) == (f"{names.out}: {path} appeared while this run was writing; it "
                                 f"was left alone (pass {force} to replace it)")
    assert path.read_bytes() == b"someone else's" and os.listdir(tmp_path) == ["y.npy"]


def test_two_runs_to_one_path_cannot_both_succeed(tmp_path):
    path = tmp_path / "y.npy"
    first, second = _write(path, 1.0), _write(path, 2.0)
    first.__exit__(None, None, None)
    with pytest.raises(OutputError, match="appeared while this run was writing"):
        second.__exit__(None, None, None)
    np.testing.assert_array_equal(np.load(path), np.full((2, 3), 1.0, dtype=np.float32))
    assert os.listdir(tmp_path) == ["y.npy"]


def test_force_replaces_atomically(tmp_path):
    path = tmp_path / "y.npy"
    path.write_bytes(b"old")
    writer = _write(path, 3.0, force=True)
    assert path.read_bytes() == b"old"  # untouched until the end
    writer.__exit__(None, None, None)
    np.testing.assert_array_equal(np.load(path), np.full((2, 3), 3.0, dtype=np.float32))
