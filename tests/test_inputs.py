"""The names of a sharded job's outputs (jobs/shards/inputs.py): derived from the inputs'
names, always a safe name inside --out; and --out checked against every input first
(jobs/shards/drivers.py), as on the single-file path."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers.installed_models import minilm
from hypothesis import given, settings
from hypothesis import strategies as st

from ffncli.jobs.shards.inputs import check_unique, output_name

GPT2 = Path(__file__).parent / "data" / "forward" / "gpt2"


@pytest.mark.parametrize("stem, name", [
    ("part-0001", "part-0001"), ("chapter.one", "chapter.one"), ("a+b_c", "a+b_c"),
    (".", "_"), ("..", "__"), ("...", "___"), (".hidden", "_hidden"), ("", "_"),
    ("a b", "a_b"), ("a/b", "a_b"), ("a\\b", "a_b"), ("tab\there", "tab_here"),
    ("new\nline", "new_line"), ("é", "_"), ("\x1b[31m", "__31m"),
    ("manifest.json", "manifest.json_"), ("CAPTURE.JSON", "CAPTURE.JSON_"),
    ("config.json", "config.json"),
])
def test_output_names_are_safe_names_inside_out(stem, name):
    assert output_name(stem) == name
    assert "/" not in name and name not in (".", "..") and not name.startswith(".")


def test_two_inputs_of_one_output_name_are_refused(cli, tmp_path):
    with pytest.raises(Exception) as caught:
        check_unique([("acts/a.npy", "a.npy"), ("acts/A.npy", "A.npy")], "", "output")
    assert str(caught.value) == ("two shards, acts/a.npy and acts/A.npy, would write one "
                                 "output A.npy in --out; rename one")  # a case-blind disk
    acts = tmp_path / "acts"
    acts.mkdir()
    for name in ("a b.npy", "a_b.npy"):
        np.save(acts / name, np.ones((2, 4), np.float32))
    r = cli("run", "--preset", "tiny", "--input", acts, "--out", tmp_path / "o")
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: option --input: two shards, {acts / 'a b.npy'} and "
                     f"{acts / 'a_b.npy'}, would write one output a_b.npy in --out; rename one\n")
    assert not (tmp_path / "o").exists()


def _ids_corpus(folder: Path, names: list[str]) -> Path:
    folder.mkdir()
    for name in names:
        (folder / name).write_text("1 2 3\n")
    return folder


@pytest.mark.parametrize("name, folder", [("...txt", "__"), ("..txt", "_"),
                                          ("config.json.txt", "config.json"),
                                          ("manifest.json.txt", "manifest.json_")])
def test_capture_shards_write_under_out_whatever_the_file_names(cli, tmp_path, name, folder):
    """A file named ...txt once made capture remove the parent of --out (its stem is ..)."""
    corpus = _ids_corpus(tmp_path / "corpus", [name, "plain.txt"])
    out = tmp_path / "caps"
    r = cli("capture", "--weights", GPT2, "--ids", corpus, "--out", out, "--json")
    assert r.code == 0, r.err
    assert sorted(p.name for p in out.iterdir()) == sorted([folder, "plain", "manifest.json"])
    assert (out / folder / "capture.json").is_file() and (out / folder / "layer0.npy").is_file()
    assert sorted(p.name for p in corpus.iterdir()) == sorted([name, "plain.txt"])
    assert (tmp_path / "corpus").is_dir() and GPT2.is_dir()


def test_run_shards_of_unsafe_names(cli, tmp_path):
    acts = tmp_path / "acts"
    acts.mkdir()
    for name in ("...npy", "a b.npy"):
        np.save(acts / name, np.ones((2, 4), np.float32))
    out = tmp_path / "outs"
    r = cli("run", "--preset", "tiny", "--input", acts, "--out", out, "--json")
    assert r.code == 0, r.err
    assert sorted(p.name for p in out.iterdir()) == ["__.npy", "a_b.npy", "manifest.json"]
    np.testing.assert_array_equal(np.load(out / "__.npy"), np.load(out / "a_b.npy"))


def _copy_model(folder: Path) -> Path:
    folder.mkdir()
    for f in GPT2.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    return folder


@pytest.mark.parametrize("command", ["run", "capture"])
def test_sharded_out_is_never_the_model_or_the_input_folder(cli, tmp_path, command):
    """--force does not let a sharded job write into the model's folder or its inputs'."""
    model = _copy_model(tmp_path / "gpt2")
    before = {f.name: f.read_bytes() for f in model.iterdir()}
    if command == "run":
        inputs = tmp_path / "acts"
        inputs.mkdir()
        np.save(inputs / "config.json.npy", np.ones((2, 64), np.float32))
        args = ["run", "--weights", model / "model.safetensors", "--input", inputs]
    else:
        inputs = _ids_corpus(tmp_path / "corpus", ["config.json.txt"])
        args = ["capture", "--weights", model, "--ids", inputs]
    in_before = {f.name: f.read_bytes() for f in inputs.iterdir()}
    for out, line in ((model, f"error: option --out: {model} is an input of this command (the "
                               "model folder); choose another folder\n"),
                      (inputs, f"error: option --out: {inputs} holds the input "
                               f"{inputs / next(iter(in_before))}; choose another folder\n")):
        r = cli(*args, "--out", out, "--force")
        if command == "run" and out == model:  # a file of the folder is the input, not it
            line = (f"error: option --out: {model} holds the input "
                    f"{model / 'model.safetensors'}; choose another folder\n")
        assert (r.code, r.out, r.err) == (2, "", line)
    assert {f.name: f.read_bytes() for f in model.iterdir()} == before
    assert {f.name: f.read_bytes() for f in inputs.iterdir()} == in_before


def test_a_failed_set_up_leaves_no_out_folder_it_made(cli, tmp_path):
    corpus = _ids_corpus(tmp_path / "corpus", ["a.txt"])
    (corpus / "a.txt").write_text("1 2 999999\n")  # an id past the vocabulary
    out = tmp_path / "caps"
    r = cli("capture", "--weights", GPT2, "--ids", corpus, "--out", out)
    assert r.code == 2 and r.err.startswith("error: ") and r.err.count("\n") == 1
    assert not out.exists()


def test_a_report_is_never_written_over_the_tokenizer_beside_the_weights(cli, tmp_path):
    folder = tmp_path / "minilm"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).symlink_to(minilm() / name)
    tokenizer = folder / "tokenizer.json"
    text = tmp_path / "t.txt"
    text.write_text("Alice was tired.\n")
    r = cli("relu-stats", "--weights", folder / "model.safetensors", "--text", text,
            "--report", tokenizer)
    assert (r.code, r.out, r.err) == (2, "", f"error: option --report: {tokenizer} is an input "
                                             "of this command (the tokenizer.json beside the "
                                             "--weights); choose another path\n")
    assert tokenizer.resolve().read_bytes() == (minilm() / "tokenizer.json").read_bytes()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_stem_gives_a_safe_output_name(stem):
    """Whatever a file is called, its output is one plain name inside --out: ASCII letters,
    digits and . _ + -, no separator, never . or .. or hidden, never the job's own files; and
    a name that is already safe is kept as it is."""
    name = output_name(stem)
    assert re.fullmatch(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*", name)
    assert name.casefold() not in ("manifest.json", "capture.json")
    assert Path(name).name == name and len(Path(name).parts) == 1
    assert output_name(name) == name  # a safe name is its own output name
    if re.fullmatch(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*", stem) and \
            stem.casefold() not in ("manifest.json", "capture.json"):
        assert name == stem
