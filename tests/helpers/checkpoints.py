"""MiniLM as people keep a checkpoint: cut into shards with their index (the `sharded` fixture
of conftest.py), and what the tests of sharded checkpoints and of the cache share."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ffncli.formats.safetensors import INDEX_NAME
from helpers.installed_models import minilm

st_numpy = pytest.importorskip("safetensors.numpy")

MINILM_TOTAL = 22_713_216  # `params --weights $MINILM/model.safetensors --config ... --json`


def write_shards(folder: Path, shards: list[dict[str, np.ndarray]],
                 weight_map: dict[str, str] | None = None) -> Path:
    """``shards`` as model-0000i-of-0000n.safetensors and their index; returns the index."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    mapping: dict[str, str] = {}
    for name, tensors in zip(names, shards, strict=True):
        st_numpy.save_file(tensors, folder / name)
        mapping.update(dict.fromkeys(tensors, name))
    index = folder / INDEX_NAME
    index.write_text(json.dumps({"metadata": {"total_size": 0},
                                 "weight_map": mapping if weight_map is None else weight_map}))
    return index


def layer_of(name: str) -> int:
    """MiniLM's tensors by layer: embeddings with layer 0, the pooler with layer 5."""
    parts = name.split(".")
    return int(parts[2]) if parts[:2] == ["encoder", "layer"] else (5 if "pooler" in name else 0)


def minilm_in_shards(folder: Path) -> Path:
    """MiniLM in three shards (layers 0-1, 2-3, 4-5) with its config, as save_pretrained
    writes a sharded model."""
    tensors = st_numpy.load_file(minilm() / "model.safetensors")
    shards: list[dict[str, np.ndarray]] = [{}, {}, {}]
    for name, array in tensors.items():
        shards[layer_of(name) // 2][name] = array
    write_shards(folder, shards)
    shutil.copy(minilm() / "config.json", folder / "config.json")
    return folder


def run_json(cli, *args) -> dict:
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    return r.json()
