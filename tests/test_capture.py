"""capture (jobs/capture.py): real text through the whole model, each layer's FFN input in a
file of the --out folder, and the bad input of capture and relu-stats --text/--ids as one line,
exit 2, nothing written.

The reference is PyTorch: tests/data/forward/<case>/expected.npz holds the input each layer's
FFN receives in transformers' own forward (made by tests/fixtures/make_forward.py; these tests
never import torch).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from helpers import processes
from helpers.forward_cases import IDS, capture, checkpoint, expected, ids_of, nan_at
from helpers.installed_models import minilm

FORWARD = Path(__file__).parent / "data" / "forward"


def close(got: np.ndarray, want: np.ndarray, rel: float = 1e-4) -> None:
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= rel * scale
    rms = float(np.sqrt(np.mean(want.astype(np.float64) ** 2)))
    assert float(np.sqrt(np.mean((got.astype(np.float64) - want) ** 2))) <= rel * rms


# ---------------------------------------------------------------------------------------------
# Bad input before any weight is read


def test_capture_needs_text(cli, tmp_path):
    r = cli("capture", "--weights", tmp_path, "--out", tmp_path / "o")
    assert (r.code, r.err) == (2, "error: capture: give the text with --text FILE or its token "
                                  "ids with --ids FILE\n")


def test_text_and_random_are_two_ways(cli, tmp_path):
    r = cli("relu-stats", "--weights", tmp_path, "--text", tmp_path / "t.txt", "--random", "3")
    assert (r.code, r.err) == (2, "error: give --text/--ids (real text through the model) or "
                                  "--input/--random (tokens given to one layer's FFN), not both\n")


def test_text_needs_a_checkpoint(cli, tmp_path):
    r = cli("relu-stats", "--preset", "tiny", "--text", tmp_path / "t.txt")
    assert (r.code, r.err) == (2, "error: --text and --ids run the whole model: give its "
                                  "checkpoint with --weights or --model\n")


# ---------------------------------------------------------------------------------------------
# capture against PyTorch


def capture_ids(cli, case: str, out: Path, *extra: str):
    folder = FORWARD / case
    return cli("capture", "--weights", folder, "--ids", folder / "ids.txt", "--out", out,
               *extra)


@pytest.mark.parametrize("case", ["bert", "gpt2", "llama", "mixtral"])
def test_capture_matches_pytorch(cli, tmp_path, case):
    want = expected(case)
    r = capture_ids(cli, case, tmp_path / "out", "--json")
    assert r.code == 0, r.err
    layers = sorted(int(k[5:]) for k in want if k.startswith("layer"))
    assert r.json()["layers"] == layers
    for i in layers:
        close(np.load(tmp_path / "out" / f"layer{i}.npy"), want[f"layer{i}"])
    manifest = json.loads((tmp_path / "out" / "capture.json").read_text())
    assert [s["ids"] for s in manifest["sequences"]] == ids_of(case)
    assert manifest["tokens"] == sum(len(s) for s in ids_of(case)) == want["layer0"].shape[0]
    digest = hashlib.sha256((FORWARD / case / "ids.txt").read_bytes()).hexdigest()
    assert manifest["input"]["sha256"] == digest


@pytest.mark.slow
def test_capture_minilm_text_matches_pytorch(cli, tmp_path):
    model = minilm()
    want = expected("minilm")
    r = cli("capture", "--weights", model, "--text", FORWARD / "minilm" / "text.txt",
            "--out", tmp_path / "out", "--layer", "2-5")
    assert r.code == 0, r.err
    assert sorted(os.listdir(tmp_path / "out")) == [
        "capture.json", "layer2.npy", "layer3.npy", "layer4.npy", "layer5.npy"]
    for i in range(2, 6):
        close(np.load(tmp_path / "out" / f"layer{i}.npy"), want[f"layer{i}"])
    manifest = json.loads((tmp_path / "out" / "capture.json").read_text())
    assert [s["ids"] for s in manifest["sequences"]] == ids_of("minilm")


def test_capture_folder_rules(cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = capture_ids(cli, "gpt2", out)
    assert (r.code, r.err) == (2, f"error: option --out: {out} is not empty (1 entries); pass "
                                  "--force to write into it\n")
    assert os.listdir(out) == ["notes.txt"]
    r = capture_ids(cli, "gpt2", out, "--force")
    assert r.code == 0, r.err
    assert (out / "notes.txt").read_text() == "mine"
    r = capture_ids(cli, "gpt2", tmp_path / "missing" / "out")
    assert (r.code, r.err) == (2, f"error: option --out: folder {tmp_path / 'missing'} does not "
                                  "exist\n")
    (tmp_path / "file").write_text("x")
    r = capture_ids(cli, "gpt2", tmp_path / "file")
    assert (r.code, r.err) == (2, f"error: option --out: {tmp_path / 'file'} is a file; capture "
                                  "writes a folder\n")


def test_capture_never_writes_over_its_input(cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    ids = out / "layer0.npy"  # the ids are where layer 0's file would go
    np.save(ids, np.array([[1, 2, 3]], dtype=np.int64))
    before = ids.read_bytes()
    r = cli("capture", "--weights", FORWARD / "gpt2", "--ids", ids, "--out", out, "--force")
    assert (r.code, r.err) == (2, f"error: option --out: {out} holds the input {ids}; choose "
                                  "another folder\n")
    assert ids.read_bytes() == before


# ---------------------------------------------------------------------------------------------
# Hostile input: --out and --force (cases the review of issue 13 found failing: a folder or a
# manifest left behind)


def test_out_is_never_the_model_folder(cli, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(FORWARD / "gpt2", folder)
    before = sorted(os.listdir(folder))
    r = capture(cli, folder, IDS, folder, "--force")
    assert (r.code, r.err) == (2, f"error: option --out: {folder} is an input of this command "
                                  "(the model folder); choose another folder\n")
    assert sorted(os.listdir(folder)) == before


def test_out_is_a_dangling_symbolic_link(cli, tmp_path):
    out = tmp_path / "out"
    os.symlink(tmp_path / "nowhere" / "out", out)
    r = capture(cli, FORWARD / "gpt2", IDS, out)
    assert (r.code, r.err) == (2, f"error: option --out: {out} is a symbolic link to "
                                  f"{tmp_path / 'nowhere' / 'out'}, which does not exist\n")
    assert os.listdir(tmp_path) == ["out"]


def test_a_failed_capture_removes_the_folder_it_made(cli, tmp_path):
    """An error before any layer was complete left an empty --out folder behind; a folder
    that was there before stays."""
    folder = nan_at("gpt2", "transformer.h.0.ln_1.weight", tmp_path)
    r = capture(cli, folder, IDS, tmp_path / "out")
    assert r.code == 2
    assert not (tmp_path / "out").exists()
    (tmp_path / "mine").mkdir()
    assert capture(cli, folder, IDS, tmp_path / "mine").code == 2
    assert os.listdir(tmp_path / "mine") == []


def test_force_over_a_capture_keeps_it_whole_until_the_new_one_is_complete(cli, tmp_path,
                                                                           monkeypatch):
    """--force over a previous capture: an error before the new capture is complete keeps the
    old one whole, capture.json included, also once a new layer file is complete (it used to
    replace the old one at once, leaving a mix of two runs without capture.json)."""
    import importlib

    from ffncli.errors import OutputError

    module = importlib.import_module("ffncli.jobs.capture")

    out = tmp_path / "out"
    assert capture(cli, FORWARD / "gpt2", IDS, out).code == 0
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    assert sorted(before) == ["capture.json", "layer0.npy", "layer1.npy"]
    early = nan_at("gpt2", "transformer.h.0.ln_1.weight", tmp_path / "early")  # layer 0 NaN
    assert capture(cli, early, IDS, out, "--force").code == 2
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before

    writer = module.AtomicNpyWriter

    def full_at_layer1(path: Path, *args, **kwargs):
        if path.name == "layer1.npy":
            raise OutputError(f"option --out: cannot reserve bytes for {kwargs['shown']}: No "
                              "space left")
        return writer(path, *args, **kwargs)

    monkeypatch.setattr(module, "AtomicNpyWriter", full_at_layer1)
    other = tmp_path / "other.txt"
    other.write_text("3 1 4 1 5\n9 2 6\n")
    r = capture(cli, FORWARD / "gpt2", other, out, "--force")  # layer 0 complete, then full
    assert (r.code, r.err) == (2, f"error: option --out: cannot reserve bytes for "
                                  f"{out / 'layer1.npy'}: No space left\n")
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


def _no_room_for_capture_json(monkeypatch) -> None:
    """The disk fills as capture.json is written (its fsync; the layer files are reserved
    whole, and complete, before it)."""
    import errno

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)


@pytest.mark.parametrize("where", ["new", "empty", "previous"])
@pytest.mark.parametrize("cause", ["more-layers", "no-room-for-capture.json"])
def test_a_capture_that_fails_late_leaves_nothing_of_its_own(cli, tmp_path, monkeypatch, cause,
                                                             where):
    """A config claiming more layers than the weights hold (layer 2 is missing, layers 0 and 1
    are complete), or no room for capture.json: the complete layer files were left behind in
    the folder the run made. Now what the run wrote goes, and its folder if it made it; an
    empty folder stays empty, a previous capture (--force) stays whole."""
    out = tmp_path / "out"
    extra: tuple[str, ...] = ()
    before: dict[str, bytes] = {}
    if where == "empty":
        out.mkdir()
    elif where == "previous":
        assert capture(cli, FORWARD / "gpt2", IDS, out).code == 0
        before = {name: (out / name).read_bytes() for name in os.listdir(out)}
        extra = ("--force",)
    if cause == "more-layers":
        weights = checkpoint(tmp_path, "gpt2", config={"n_layer": 3})
        # refused when the forward opens now (the layer count is checked against the weights)
        line = (f"error: {weights}/config.json: 3 layers, but the weights "
                f"({weights}/model.safetensors) hold layers 0-1\n")
    else:
        weights = FORWARD / "gpt2"
        _no_room_for_capture_json(monkeypatch)
        line = f"error: option --out: cannot write {out}/capture.json: No space left on device\n"
    r = capture(cli, weights, IDS, out, *extra)
    assert (r.code, r.out, r.err) == (2, "", line)
    if where == "new":
        assert not out.exists()
    else:
        assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


SIGNAL_AFTER_LAYER0 = """
import os, signal, sys
from ffncli.formats import npy
from ffncli.cli.main import main

complete = npy.AtomicNpyWriter.__exit__

def then_signal(self, *exc):  # layer 0's file is complete: the signal comes
    complete(self, *exc)
    if self.path.name == "layer0.npy":
        os.kill(os.getpid(), signal.SIGNUM)

npy.AtomicNpyWriter.__exit__ = then_signal
sys.argv = ["ffncli", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum, where", [(signal.SIGINT, "new"), (signal.SIGTERM, "new"),
                                           (signal.SIGHUP, "new"),
                                           (signal.SIGINT, "previous")],
                         ids=["SIGINT", "SIGTERM", "SIGHUP", "SIGINT-over-a-capture"])
def test_a_signal_during_capture_leaves_nothing_of_its_own(cli, tmp_path, signum, where):
    """A signal once layer 0's file is complete: layer0.npy stayed in the folder the run
    made. Now the folder goes (exit 128 + n, one line), and a previous capture stays whole."""
    out = tmp_path / "out"
    extra: tuple[str, ...] = ()
    before: dict[str, bytes] = {}
    if where == "previous":
        assert capture(cli, FORWARD / "gpt2", IDS, out).code == 0
        before = {name: (out / name).read_bytes() for name in os.listdir(out)}
        extra = ("--force",)
    code = SIGNAL_AFTER_LAYER0.replace("SIGNUM", signal.Signals(signum).name)
    job = processes.python(["-c", code, "capture", "--weights", str(FORWARD / "gpt2"), "--ids",
                            str(IDS), "--out", str(out), *extra])
    stdout, stderr = job.communicate(timeout=120)
    assert (job.returncode, stdout, stderr) == (
        128 + signum, "", f"error: interrupted by {signal.Signals(signum).name}\n")
    if where == "new":
        assert not out.exists()
    else:
        assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


# ---------------------------------------------------------------------------------------------
# Bad input through the command line: one line, exit 2, nothing written


def test_no_tokenizer_beside_the_weights(cli, tmp_path):
    folder = FORWARD / "gpt2"  # a tiny checkpoint without a tokenizer.json
    r = cli("capture", "--weights", folder, "--text", FORWARD / "minilm" / "text.txt", "--out",
            tmp_path / "o")
    assert (r.code, r.err) == (2, f"error: no tokenizer.json beside the weights: looked for "
                                  f"{folder}/tokenizer.json; --ids FILE takes token ids without "
                                  "a tokenizer\n")
    assert not (tmp_path / "o").exists()


def test_an_empty_text(cli, tmp_path):
    text = tmp_path / "empty.txt"
    text.write_text("\n  \n\n")
    r = cli("relu-stats", "--weights", minilm(), "--text", text)
    assert (r.code, r.err) == (2, f"error: {text}: no text: every line is empty (expected one "
                                  "sequence per non-empty line)\n")


def test_ids_out_of_the_vocabulary(cli, tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("1 2 3\n5 128\n")
    r = cli("relu-stats", "--weights", FORWARD / "gpt2", "--ids", ids)
    assert (r.code, r.err) == (2, f"error: {ids}: line 2: token id 128 is out of range for a "
                                  "vocabulary of 128\n")


def test_an_architecture_without_a_forward(cli, tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    folder = tmp_path / "t5"
    folder.mkdir()
    (folder / "config.json").write_text(
        (Path(__file__).parent / "data" / "configs" / "t5-base.config.json").read_text())
    st.save_file({"shared.weight": np.zeros((4, 4), np.float32)},
                 str(folder / "model.safetensors"))
    r = cli("capture", "--weights", folder, "--ids", FORWARD / "gpt2" / "ids.txt", "--out",
            tmp_path / "o")
    assert (r.code, r.err) == (2, f"error: {folder}/config.json: model_type 't5' has no "
                                  "whole-model forward; these do: gpt2, bert, roberta, "
                                  "distilbert, llama, mistral, mixtral, qwen2, gemma, qwen3, "
                                  "qwen3_moe, qwen2_moe, xlm-roberta, electra, deepseek_v3, "
                                  "glm4_moe, llama4_text, olmoe, deepseek_v2, gpt_oss (GGUF: "
                                  "llama, qwen3moe, olmoe)\n")
    assert not (tmp_path / "o").exists()


def test_a_tokenizer_file_tokenizers_cannot_read(cli, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        os.symlink(FORWARD / "gpt2" / name, folder / name)
    (folder / "tokenizer.json").write_text("{}")
    r = cli("relu-stats", "--weights", folder, "--text", FORWARD / "minilm" / "text.txt")
    assert r.code == 2
    assert r.err.startswith(f"error: {folder}/tokenizer.json: the tokenizers package cannot "
                            "read this tokenizer: ")  # then the package's own words
    assert r.err.count("\n") == 1


def test_force_failing_within_the_first_layer_keeps_the_previous_capture(cli, tmp_path,
                                                                          monkeypatch):
    """--force over a previous capture, failing after layer 0's new file was begun but before
    it replaced the old one (a NaN in the second batch: token 0's embedding row, batches of
    3 tokens here): the old capture stays whole, capture.json included."""
    from ffncli.compute.forward import walk

    out = tmp_path / "out"
    assert capture(cli, FORWARD / "gpt2", IDS, out).code == 0
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    assert sorted(before) == ["capture.json", "layer0.npy", "layer1.npy"]
    broken = nan_at("gpt2", "transformer.wte.weight", tmp_path / "nan")  # token 0's row
    ids = tmp_path / "ids.txt"
    ids.write_text("5 6 7\n0 1 2\n")
    monkeypatch.setattr(walk, "BATCH_TOKENS", 3)  # a batch a sequence: layer 0 begun first
    r = capture(cli, broken, ids, out, "--force")
    assert (r.code, r.err) == (2, f"error: {broken}: layer 0's FFN input of sequence 2 holds "
                                  "NaN or infinity: the checkpoint's weights hold some, or its "
                                  "forward overflows\n")
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


def test_capture_json_names_its_files_and_each_windows_line(cli, tmp_path):
    """capture.json lists the layer files by name (they sit beside it), and each window by
    the number of its line in the text: blank lines are skipped, and a line longer than the
    model's 64 positions gives two windows of one line."""
    long = [(7 * i) % 128 for i in range(70)]
    ids = tmp_path / "ids.txt"
    ids.write_text("3 1 4 1 5\n\n" + " ".join(map(str, long)) + "\n9 2 6\n")
    out = tmp_path / "out"
    r = capture(cli, FORWARD / "gpt2", ids, out)
    assert r.code == 0, r.err
    manifest = json.loads((out / "capture.json").read_text())
    assert manifest["files"] == ["layer0.npy", "layer1.npy"]
    assert [(s["line"], s["ids"]) for s in manifest["sequences"]] == [
        (1, [3, 1, 4, 1, 5]), (3, long[:64]), (3, long[64:]), (4, [9, 2, 6])]
    assert manifest["tokens"] == 5 + 70 + 3 == np.load(out / "layer0.npy").shape[0]
