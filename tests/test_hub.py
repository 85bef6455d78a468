"""Models in the local Hugging Face cache (formats/hub.py, ``--model``), never the network: a
cache built here as huggingface_hub lays one out, holding MiniLM whole and in shards, every answer
compared with the single file's."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.checkpoints import MINILM_TOTAL, run_json
from helpers.installed_models import minilm

from ffncli.formats.hub import cache_dir

COMMIT = "0123456789abcdef0123456789abcdef01234567"

OTHER = "fedcba9876543210fedcba9876543210fedcba98"
# what params adds to a model that is not cached, the tests being offline (conftest.py), and
# what the other commands add
OFF = ("; HF_HUB_OFFLINE keeps ffncli off the Hub: without it, params counts the model from "
       "the Hub by its headers")
ONLY = "; only ffncli params reads a model from the Hub (by its headers)"


def fake_cache(root: Path, model_dir: Path, repo: str = "sentence-transformers/all-MiniLM-L6-v2",
               commit: str = COMMIT, refs: dict[str, str] | None = None) -> Path:
    """A Hugging Face cache holding ``repo`` at ``commit``: snapshot files are links, as
    huggingface_hub makes them (here straight to the model's files)."""
    folder = root / f"models--{repo.replace('/', '--')}"
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.is_file():
            (snap / f.name).symlink_to(f)
    (folder / "refs").mkdir()
    for ref, target in (refs or {"main": commit}).items():
        (folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(target)
    return snap


# ---------------------------------------------------------------------------------------------
# --model: the local Hugging Face cache, never the network.


@pytest.fixture
def cache(tmp_path, monkeypatch, sharded) -> Path:
    root = tmp_path / "hub"
    fake_cache(root, minilm(), refs={"main": COMMIT, "v1": OTHER})
    fake_cache(root, sharded, repo="acme/minilm-sharded", commit=OTHER,
               refs={"main": OTHER, "refs/pr/1": OTHER})
    (root / "models--acme--minilm-sharded" / "snapshots" / COMMIT).mkdir()  # an old commit
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


@pytest.mark.slow
def test_model_from_the_cache_counts_and_runs_as_the_file(cli, cache):
    snap = cache / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / COMMIT
    doc = run_json(cli, "params", "--model", "sentence-transformers/all-MiniLM-L6-v2")
    assert (doc["file_params"], doc["matches"], doc["weights"]) == (MINILM_TOTAL, True,
                                                                    str(snap))
    single = run_json(cli, "run", "--weights", minilm() / "model.safetensors", "--layer", "2",
                      "--random", "3")
    for model in ("sentence-transformers/all-MiniLM-L6-v2", "acme/minilm-sharded",
                  "acme/minilm-sharded@refs/pr/1", f"acme/minilm-sharded@{OTHER}",
                  "acme/minilm-sharded@fedcba9"):
        doc = run_json(cli, "run", "--model", model, "--layer", "2", "--random", "3")
        assert doc["output"] == single["output"], model
    stats = run_json(cli, "relu-stats", "--model", "acme/minilm-sharded", "--layer", "1",
                     "--random", "5")
    assert stats["d_ff"] == 1536
    assert run_json(cli, "permute-check", "--model", "acme/minilm-sharded", "--random",
                    "4")["passed"] is True


def test_cache_dir_follows_huggingface_hub(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"


def test_model_errors_exact_lines(cli, cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.gguf").write_bytes(b"GGUF")  # a local file: never a model's id
    acme = cache / "models--acme--minilm-sharded"
    (cache / "models--acme--empty" / "snapshots").mkdir(parents=True)
    (cache / "models--acme--bad-ref" / "snapshots" / COMMIT).mkdir(parents=True)
    (cache / "models--acme--bad-ref" / "refs").mkdir()
    (cache / "models--acme--bad-ref" / "refs" / "main").write_text("not a commit\n")
    cached = ("acme/bad-ref, acme/empty, acme/minilm-sharded, "
              "sentence-transformers/all-MiniLM-L6-v2")
    cases = [
        (("params", "--model", "acme/nope"),
         f"acme/nope is not in the Hugging Face cache at {cache} (ffncli never downloads weights); "
         f"cached models: {cached}{OFF}"),
        (("run", "--model", "acme/empty", "--random", "1"),
         f"{cache / 'models--acme--empty'}: no snapshots in it (an interrupted download?){ONLY}"),
        (("run", "--model", "acme/minilm-sharded@v2", "--random", "1"),
         f"acme/minilm-sharded: no revision 'v2' in the cache (refs: main, refs/pr/1; "
         f"snapshots: {COMMIT}, {OTHER}){ONLY}"),
        (("params", "--model", "sentence-transformers/all-MiniLM-L6-v2@v1"),
         f"sentence-transformers/all-MiniLM-L6-v2: revision 'v1' (commit {OTHER}) is not in "
         f"the cache; cached snapshots: {COMMIT}{OFF}"),
        (("params", "--model", f"acme/minilm-sharded@{'a' * 40}"),
         f"acme/minilm-sharded: revision '{'a' * 40}' is not in the cache; cached snapshots: "
         f"{COMMIT}, {OTHER}{OFF}"),
        (("params", "--model", "acme/minilm-sharded@0123456"),
         f"acme/minilm-sharded@0123456: the cache's snapshot {acme / 'snapshots' / COMMIT} "
         "holds no weights (model.safetensors, every shard of model.safetensors.index.json, or "
         f"one .gguf file){OFF}"),
        (("params", "--model", "acme/bad-ref"),
         f"{cache / 'models--acme--bad-ref' / 'refs' / 'main'}: expected a 40-digit commit "
         "hash, got 'not a commit'"),
        (("params", "--model", "acme/minilm-sharded@../../x"),
         "option --model: revision '../../x' is not a branch, tag or commit name"),
        (("params", "--model", "../etc"),
         "option --model: expected ORG/NAME or ORG/NAME@REVISION, got '../etc'"),
        (("params", "--model", "acme/x@"),
         "option --model: expected ORG/NAME or ORG/NAME@REVISION, got 'acme/x@'"),
        (("params", "--model", str(tmp_path)),
         f"option --model: expected ORG/NAME or ORG/NAME@REVISION, got '{tmp_path}'; a local "
         "folder goes to --weights"),
        (("perplexity", "--model", "model.gguf", "--text", "model.gguf"),
         "option --model: 'model.gguf' is a local file; give it as --weights (--model names a "
         "model in the Hugging Face cache or on the Hub, ORG/NAME[@REVISION])"),
        (("params", "--model", "acme/minilm-sharded", "--weights", tmp_path),
         "give --weights or --model, not both"),
        (("permute-check", "--model", "acme/minilm-sharded", "--impl", "m:f", "--random", "2"),
         "give --impl or --model, not both"),
    ]
    for args, line in cases:
        r = cli(*args)
        assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n"), args


def test_a_local_folder_named_like_a_model_is_pointed_to_weights(cli, tmp_path, monkeypatch):
    """ORG/NAME stays the Hub's, even where a folder of that name is here (a clone of the
    repository, a model folder given to the wrong option); the error line points there."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "smol").mkdir(parents=True)
    (tmp_path / "t.txt").write_text("hello\n")
    r = cli("perplexity", "--model", "models/smol", "--text", "t.txt")
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: models/smol is not in the Hugging Face cache at {tmp_path / 'none'} "
                     "(ffncli never downloads weights); there is no cache there; a local folder "
                     "goes to --weights" + ONLY + "\n")


def test_an_empty_or_missing_cache_says_so(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    r = cli("params", "--model", "a/b")
    assert r.err == (f"error: a/b is not in the Hugging Face cache at {tmp_path / 'none'} "
                     "(ffncli never downloads weights); there is no cache there" + OFF + "\n")
    (tmp_path / "none").mkdir()
    r = cli("params", "--model", "a/b")
    assert r.err.endswith("(ffncli never downloads weights); it holds no models" + OFF + "\n")
