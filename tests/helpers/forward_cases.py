"""The tiny checkpoints of tests/data/forward (made by tests/fixtures/make_forward.py): their
PyTorch references, their ids, and copies with a config key or a tensor changed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

FORWARD = Path(__file__).parents[1] / "data" / "forward"
IDS = FORWARD / "gpt2" / "ids.txt"  # 3 sequences, ids below 128: every fixture's vocabulary


def checkpoint(tmp_path: Path, base: str, config: dict | None = None,
               tensors: dict[str, np.ndarray] | None = None) -> Path:
    """A copy of the fixture ``base`` with some config keys and tensors replaced."""
    st = pytest.importorskip("safetensors.numpy")
    folder = tmp_path / f"{base}-edited"
    folder.mkdir(parents=True)
    settings = json.loads((FORWARD / base / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**settings, **(config or {})}))
    weights = st.load_file(str(FORWARD / base / "model.safetensors"))
    st.save_file({**weights, **(tensors or {})}, str(folder / "model.safetensors"))
    return folder


def nan_at(base: str, name: str, tmp_path: Path, value: float = np.nan) -> Path:
    st = pytest.importorskip("safetensors.numpy")
    w = st.load_file(str(FORWARD / base / "model.safetensors"))[name].copy()
    w.flat[0] = value
    return checkpoint(tmp_path, base, tensors={name: w})


def capture(cli, weights: Path, ids: Path, out: Path, *extra: str):
    return cli("capture", "--weights", weights, "--ids", ids, "--out", out, *extra)


def expected(case: str) -> dict[str, np.ndarray]:
    with np.load(FORWARD / case / "expected.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def ids_of(case: str) -> list[list[int]]:
    lines = (FORWARD / case / "ids.txt").read_text().splitlines()
    return [[int(t) for t in line.split()] for line in lines if line.strip()]


def assert_close(got: np.ndarray, want: np.ndarray, what: str, rel: float = 1e-4) -> None:
    """Within ``rel`` of the reference's largest value, and in RMS of its RMS."""
    assert got.shape == want.shape, what
    worst = np.abs(got - want).max()
    rms = np.sqrt(np.mean((got.astype(np.float64) - want) ** 2))
    assert worst <= rel * np.abs(want).max(), f"{what}: max error {worst:.3g}"
    assert rms <= rel * np.sqrt(np.mean(want.astype(np.float64) ** 2)), f"{what}: rms {rms:.3g}"
