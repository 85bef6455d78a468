"""formats/tensors.py: one open checkpoint. Each file is opened once and kept while the handle
lives, read with pread (threads may share it), and closed by ``close``; a command that fails
after opening it closes it too."""

from __future__ import annotations

import builtins
import gc
import json
import shutil
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

from ffncli.errors import ConfigError
from ffncli.formats.safetensors import read_header, read_tensor
from ffncli.formats.tensors import SafetensorsTensors, open_tensors
from ffncli.jobs.choices import ModelChoice
from ffncli.jobs.resolve import open_forward
from ffncli.specs.spec import Overrides

GPT2 = Path(__file__).parent / "data" / "forward" / "gpt2"
NAME = "transformer.h.0.mlp.c_fc.weight"  # found as h.0.mlp.c_fc.weight, under its prefix


def test_a_tensor_reads_as_the_plain_reader_reads_it():
    header = read_header(GPT2 / "model.safetensors")
    expected = read_tensor(header, header.tensors[NAME])
    with open_tensors(GPT2) as tensors:
        assert isinstance(tensors, SafetensorsTensors)
        assert tensors.find("mlp.c_fc.weight") is None  # two layers hold one: not unique
        name = tensors.find("h.0.mlp.c_fc.weight")
        assert name == NAME and tensors.shape(name) == expected.shape
        np.testing.assert_array_equal(tensors.read(name), expected)
        np.testing.assert_array_equal(tensors.read(name, np.array([3, 0])), expected[[3, 0]])
        assert tensors.layers_present() == "layers 0-1"


def _counting_opens(monkeypatch) -> list[object]:
    """Every model.safetensors opened from now on, in order."""
    opened: list[object] = []
    real = builtins.open

    def counting(file, *args, **kwargs):
        f = real(file, *args, **kwargs)
        if str(file).endswith("model.safetensors"):
            opened.append(f)
        return f

    monkeypatch.setattr(builtins, "open", counting)
    return opened


def test_the_file_is_opened_once_and_closed(monkeypatch):
    opened = _counting_opens(monkeypatch)
    tensors = open_tensors(GPT2)
    assert len(opened) == 1  # the header, read and closed
    names = [n for n in tensors.checkpoint.shard_of if n.endswith(".weight")]
    arrays = [tensors.read(n) for n in names]
    assert len(opened) == 2 and not opened[1].closed  # the data, kept open for every tensor
    tensors.close()
    assert opened[1].closed
    np.testing.assert_array_equal(tensors.read(names[0]), arrays[0])  # reopened on demand
    assert len(opened) == 3
    tensors.close()
    assert opened[2].closed


def test_threads_share_one_handle(monkeypatch):
    """Eight threads reading at once: one file opened, every array as read alone."""
    with open_tensors(GPT2) as tensors:
        expected = tensors.read(NAME)
        tensors.close()
        opened = _counting_opens(monkeypatch)
        got: list[np.ndarray] = []
        start = threading.Barrier(8)

        def read() -> None:
            start.wait()
            got.append(tensors.read(NAME))

        threads = [threading.Thread(target=read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(opened) == 1 and opened[0].closed
    assert len(got) == 8 and all(np.array_equal(g, expected) for g in got)


@pytest.mark.slow
def test_a_model_the_forward_refuses_leaves_no_file_open(tmp_path):
    """RoBERTa's pad_token_id past its position table is refused after the checkpoint was
    opened: the checkpoint is closed on the way out (no ResourceWarning)."""
    folder = tmp_path / "roberta"
    shutil.copytree(GPT2.parent / "roberta", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "pad_token_id": 100000}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(ConfigError, match="key 'pad_token_id'"):
            open_forward(ModelChoice(weights=folder), Overrides())
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
