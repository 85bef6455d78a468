"""capture and relu-stats --text/--ids: real text through the whole model.

The reference is PyTorch: tests/data/forward/<case>/expected.npz holds the input each layer's
FFN receives in transformers' own forward (made by tests/fixtures/make_forward.py; these tests
never import torch). The statistics of the sweep are checked against relu-stats run layer by
layer on the captured files (the same inputs by another path), and against the PyTorch inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from helpers.installed_models import minilm

from ffncli.errors import InputError
from ffncli.jobs.choices import parse_layers

FORWARD = Path(__file__).parent / "data" / "forward"


def expected(case: str) -> dict[str, np.ndarray]:
    with np.load(FORWARD / case / "expected.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def ids_of(case: str) -> list[list[int]]:
    lines = (FORWARD / case / "ids.txt").read_text().splitlines()
    return [[int(t) for t in line.split()] for line in lines if line.strip()]


def close(got: np.ndarray, want: np.ndarray, rel: float = 1e-4) -> None:
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= rel * scale
    rms = float(np.sqrt(np.mean(want.astype(np.float64) ** 2)))
    assert float(np.sqrt(np.mean((got.astype(np.float64) - want) ** 2))) <= rel * rms


# ---------------------------------------------------------------------------------------------
# --layer


@pytest.mark.parametrize(("text", "n", "layers"), [
    (None, 3, (0, 1, 2)), ("all", 2, (0, 1)), ("1", 3, (1,)), ("0-2", 6, (0, 1, 2)),
    ("4-4", 6, (4,)),
])
def test_layers(text, n, layers):
    assert parse_layers(text, n) == layers


@pytest.mark.parametrize(("text", "message"), [
    ("6", "option --layer: expected layers of 0-5, got '6'"),
    ("2-9", "option --layer: expected layers of 0-5, got '2-9'"),
    ("3-1", "option --layer: the range 3-1 runs backwards; write 1-3"),
    ("-1", "option --layer: expected a layer N, a range A-B or all, got '-1'"),
    ("1-", "option --layer: expected a layer N, a range A-B or all, got '1-'"),
    ("x", "option --layer: expected a layer N, a range A-B or all, got 'x'"),
    (" 1", "option --layer: expected a layer N, a range A-B or all, got ' 1'"),
    ("1" * 5000, "option --layer: expected a layer N, a range A-B or all, got '"
                 + "1" * 27 + "..." + "1" * 28 + "'"),
])
def test_bad_layers(text, message):
    with pytest.raises(InputError) as err:
        parse_layers(text, 6)
    assert str(err.value) == message


def test_a_single_layer_command_refuses_a_range(cli):
    r = cli("relu-stats", "--preset", "tiny", "--random", "3", "--layer", "all")
    assert (r.code, r.err) == (2, "error: option --layer: expected a whole number >= 0, "
                                  "got 'all'\n")


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
# relu-stats --text: the sweep


def test_sweep_equals_relu_stats_on_captured_inputs(cli, tmp_path):
    """Each layer's statistics on the fly equal relu-stats on the captured file: the same
    counts, exactly, by two paths."""
    model = minilm()
    text = FORWARD / "minilm" / "text.txt"
    assert cli("capture", "--weights", model, "--text", text, "--out", tmp_path / "o").code == 0
    r = cli("relu-stats", "--weights", model, "--text", text, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert [row["layer"] for row in doc["layers"]] == list(range(6))
    assert doc["tokens"] == sum(len(s) for s in ids_of("minilm"))
    for row in doc["layers"]:
        i = row["layer"]
        one = cli("relu-stats", "--weights", model, "--layer", i, "--input",
                  tmp_path / "o" / f"layer{i}.npy", "--json").json()
        for key in ("tokens", "inactive_per_token", "dead_units", "always_active_units",
                    "activity_histogram", "hot_unit_coverage", "aggregated_sparsity"):
            assert row[key] == one[key], (i, key)
        assert row["mean_inactive_fraction"] == pytest.approx(one["mean_inactive_fraction"],
                                                              rel=1e-12)


def test_sweep_on_pytorch_inputs(cli, tmp_path):
    """Against PyTorch's inputs: the mean inactive fraction of every layer agrees to a few
    units in a thousand (a unit whose pre-activation is within float error of 0 may flip)."""
    model = minilm()
    want = expected("minilm")
    doc = cli("relu-stats", "--weights", model, "--text", FORWARD / "minilm" / "text.txt",
              "--json").json()
    for row in doc["layers"]:
        i = row["layer"]
        x = tmp_path / f"ref{i}.npy"
        np.save(x, want[f"layer{i}"])
        ref = cli("relu-stats", "--weights", model, "--layer", i, "--input", x, "--json").json()
        assert row["tokens"] == ref["tokens"]
        assert abs(row["mean_inactive_fraction"] - ref["mean_inactive_fraction"]) < 1e-3
        assert 0.3 < row["mean_inactive_fraction"] < 0.95  # real inputs: a sparse hidden layer


def test_sweep_one_layer_prints_the_full_statistics(cli):
    model = minilm()
    r = cli("relu-stats", "--weights", model, "--text", FORWARD / "minilm" / "text.txt",
            "--layer", "3")
    assert r.code == 0, r.err
    assert "every layer's FFN on its real input" in r.out
    assert "units by how often they are active" in r.out  # today's single-layer tables
    assert "dead on these 207 tokens (never active): " in r.out  # dead on a sample, said so


def test_sweep_target_sparsity_calibrates_each_layer(cli):
    folder = FORWARD / "gpt2"
    doc = cli("relu-stats", "--weights", folder, "--ids", folder / "ids.txt",
              "--target-sparsity", "0.25", "--json").json()
    for row in doc["layers"]:
        assert row["threshold"] is not None
        assert row["mean_inactive_fraction"] == pytest.approx(0.25, abs=0.02)


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
                                  "xlm-roberta, electra (GGUF: llama)\n")
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


# ---------------------------------------------------------------------------------------------
# The sweep in the library: batches change nothing, one layer's FFN in memory


def _gpt2_sweep(**options):
    from ffncli.jobs.choices import ModelChoice, TextChoice
    from ffncli.jobs.resolve import load_sequences, open_forward
    from ffncli.jobs.sweep import sweep
    from ffncli.specs.spec import Overrides

    folder = FORWARD / "gpt2"
    model = open_forward(ModelChoice(weights=folder), Overrides())
    sequences = load_sequences(TextChoice(ids=folder / "ids.txt"), model, folder)
    return model, sweep(model, sequences, (0, 1), **options)


@pytest.mark.parametrize("options", [{}, {"target_sparsity": 0.3}, {"threshold": 0.05}])
def test_sweep_does_not_depend_on_the_batches(options):
    """The calibration uses the text's first tokens whatever the batches: the same numbers
    with batches of one sequence and with one batch of all."""
    from ffncli.present.stats import sweep_json

    _, small = _gpt2_sweep(batch_tokens=1, **options)
    _, large = _gpt2_sweep(batch_tokens=4096, **options)
    a, b = sweep_json(small), sweep_json(large)
    for x, y in zip(a["layers"], b["layers"], strict=True):  # products round with the rows
        assert x["cats_threshold_50"] == pytest.approx(y["cats_threshold_50"], rel=1e-4)
        if x["threshold"] is not None:
            assert x["threshold"] == pytest.approx(y["threshold"], rel=1e-4)
        assert x["tokens"] == y["tokens"]
        assert x["mean_inactive_fraction"] == pytest.approx(y["mean_inactive_fraction"],
                                                            abs=1e-3)


def test_sweep_lets_each_layers_ffn_go(monkeypatch):
    """When the walk builds layer i, the FFNs of layers < i - 1 are gone: the sweep keeps no
    layer's weights once the walk has left it (the walk itself holds layer i - 1 until then)."""
    import gc
    import weakref

    from ffncli.jobs.choices import ModelChoice, TextChoice
    from ffncli.jobs.resolve import load_sequences, open_forward
    from ffncli.jobs.sweep import sweep
    from ffncli.specs.spec import Overrides

    folder = minilm()
    model = open_forward(ModelChoice(weights=folder), Overrides())
    sequences = load_sequences(TextChoice(text=FORWARD / "minilm" / "text.txt"), model, folder)
    engines: list[weakref.ref] = []
    alive_at: list[list[bool]] = []
    build = type(model).layer

    def layer(self, i):
        gc.collect()
        alive_at.append([ref() is not None for ref in engines])
        block = build(self, i)
        engines.append(weakref.ref(block.engine))
        return block

    monkeypatch.setattr(type(model), "layer", layer)
    sweep(model, sequences, (0, 1, 2, 3))
    assert alive_at == [[], [True], [False, True], [False, False, True]]


def test_no_room_for_any_file_is_one_line(tmp_path):
    """A file-size limit of 0 (ulimit -f 0): no folder can take the forward's spill file, so
    the temporary folder cannot even be found; one line, exit 2, no --out folder left."""
    import subprocess
    import sys

    limit = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))"
    for command in (["capture", "--out", str(tmp_path / "o")], ["relu-stats"]):
        done = subprocess.run(
            [sys.executable, "-c", f"{limit}; from ffncli.cli import main; main()", *command,
             "--weights", str(FORWARD / "gpt2"), "--ids", str(FORWARD / "gpt2" / "ids.txt")],
            capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: cannot keep the forward's spill file in ")
        assert done.stderr.endswith(" (set TMPDIR to a folder with room)\n")
        assert done.stderr.count("\n") == 1 and done.stdout == ""
    assert os.listdir(tmp_path) == []
