"""Checkpoints as people keep them: sharded files and their index, model folders, and models
in the local Hugging Face cache (``--model``). The shards, folders and caches are built here;
MiniLM is split into shards and linked into a fake cache, and every answer is compared with
the single-file path's."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.installed_models import minilm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffncli.errors import WeightsError
from ffncli.formats import safetensors as C
from ffncli.formats.hub import cache_dir
from ffncli.formats.safetensors import INDEX_NAME, open_checkpoint, read_index

st_numpy = pytest.importorskip("safetensors.numpy")

MINILM_TOTAL = 22_713_216  # `params --weights $MINILM/model.safetensors --config ... --json`
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


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


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """MiniLM in three shards (layers 0-1, 2-3, 4-5) with its config, as save_pretrained
    writes a sharded model."""
    folder = tmp_path_factory.mktemp("sharded")
    tensors = st_numpy.load_file(minilm() / "model.safetensors")
    shards: list[dict[str, np.ndarray]] = [{}, {}, {}]
    for name, array in tensors.items():
        shards[layer_of(name) // 2][name] = array
    write_shards(folder, shards)
    shutil.copy(minilm() / "config.json", folder / "config.json")
    return folder


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


def run_json(cli, *args) -> dict:
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    return r.json()


# ---------------------------------------------------------------------------------------------
# params: every shard's header counted, the config beside the weights used.


def test_params_single_file_uses_the_config_beside_it(cli):
    doc = run_json(cli, "params", "--weights", minilm() / "model.safetensors")
    assert (doc["total_params"], doc["file_params"], doc["matches"]) == (MINILM_TOTAL,
                                                                         MINILM_TOTAL, True)


@pytest.mark.parametrize("form", ["folder", "index"])
def test_params_on_shards_counts_every_shard_as_the_single_file(cli, sharded, form):
    single = run_json(cli, "params", "--weights", minilm() / "model.safetensors")
    target = sharded if form == "folder" else sharded / INDEX_NAME
    doc = run_json(cli, "params", "--weights", target)
    assert doc["file_params"] == doc["total_params"] == MINILM_TOTAL
    assert doc["file_groups"] == single["file_groups"] and doc["matches"] is True
    assert doc["buffers"] == single["buffers"]
    assert doc["weights"] == str(target)


def test_params_on_a_save_pretrained_folder(cli):
    doc = run_json(cli, "params", "--weights", minilm())
    assert (doc["file_params"], doc["matches"]) == (MINILM_TOTAL, True)


def test_params_without_any_config_counts_the_file_by_names(cli, sharded, tmp_path):
    for f in sharded.iterdir():
        if f.name != "config.json":
            (tmp_path / f.name).symlink_to(f)
    doc = run_json(cli, "params", "--weights", tmp_path)
    assert doc["checked_by_config"] is False and doc["file_params"] == MINILM_TOTAL
    assert doc["reason"] == "no --preset or --config, and no config.json beside the weights"
    r = cli("params", "--weights", tmp_path, "--d-ff", "8")
    assert (r.code, r.err) == (2, "error: the what-if options need a spec; no --preset or "
                                  "--config, and no config.json beside the weights\n")
    r = cli("run", "--weights", tmp_path, "--random", "1")
    assert (r.code, r.err) == (2, "error: give a model: --preset NAME|FILE, --config "
                                  "config.json, or --weights/--model with a config.json beside "
                                  "the weights\n")


def test_junit_xml_is_never_the_config_in_the_weights_folder(cli, sharded, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    for f in sharded.iterdir():
        (folder / f.name).symlink_to(f)
    r = cli("permute-check", "--weights", folder, "--random", "2", "--junit-xml",
            folder / "config.json")
    assert (r.code, r.err) == (2, f"error: option --junit-xml: {folder / 'config.json'} is an "
                                  "input of this command (the config.json beside the "
                                  "--weights); choose another path\n")


def test_an_explicit_spec_wins_over_the_config_beside(cli, sharded):
    r = cli("params", "--weights", sharded, "--preset", "bert-base", "--json")
    assert r.code == 1 and r.json()["file_params"] == MINILM_TOTAL  # a mismatch: exit 1


def test_a_shard_mismatch_is_reported_per_group(cli, sharded, tmp_path):
    """Half a model (one shard dropped from the index) is a mismatch in the groups it lacks."""
    index = json.loads((sharded / INDEX_NAME).read_text())
    kept = {n: f for n, f in index["weight_map"].items() if not f.startswith("model-00003")}
    for f in sharded.iterdir():
        if f.name != INDEX_NAME:
            (tmp_path / f.name).symlink_to(f)
    (tmp_path / INDEX_NAME).write_text(json.dumps({"weight_map": kept}))
    (tmp_path / "model-00003-of-00003.safetensors").unlink()
    r = cli("params", "--weights", tmp_path, "--json")
    doc = r.json()
    assert r.code == 1 and doc["mismatches"] == {  # layers 4 and 5 and the pooler missing
        "attention": {"spec": 6 * 591_360, "file": 4 * 591_360},
        "ffn": {"spec": 6 * 1_181_568, "file": 4 * 1_181_568},
        "norms": {"spec": 9_984, "file": 9_984 - 2 * 1_536},
        "pooler": {"spec": 147_840, "file": 0}}
    assert doc["file_params"] == MINILM_TOTAL - 2 * (1_181_568 + 591_360 + 1_536) - 147_840


# ---------------------------------------------------------------------------------------------
# run, relu-stats, permute-check: the same answers, from only the layer's shards.


@pytest.mark.parametrize("layer", [0, 3, 5])
def test_run_on_shards_equals_the_single_file_exactly(cli, sharded, layer):
    single = run_json(cli, "run", "--weights", minilm() / "model.safetensors", "--layer", layer,
                      "--random", "4", "--dtype", "float64")
    for target in (sharded, sharded / INDEX_NAME):
        doc = run_json(cli, "run", "--weights", target, "--layer", layer, "--random", "4",
                       "--dtype", "float64")
        assert doc["output"] == single["output"]
        assert doc["weights"] == f"{target}, layer {layer}"


def test_relu_stats_and_permute_check_on_shards(cli, sharded):
    single = run_json(cli, "relu-stats", "--weights", minilm() / "model.safetensors", "--layer",
                      "4", "--random", "64")
    doc = run_json(cli, "relu-stats", "--weights", sharded, "--layer", "4", "--random", "64")
    assert doc == single
    check = run_json(cli, "permute-check", "--weights", sharded, "--layer", "4", "--random", "8")
    assert check["passed"] is True and check["d_model"] == 384


def test_run_opens_only_the_shards_of_its_layer(cli, sharded, tmp_path, monkeypatch):
    """Layer 0 lives in shard 1: the other shards are never opened, so garbage in them (a
    header too) does not matter; asking for layer 5 then reads the broken shard and says so."""
    for f in sharded.iterdir():
        shutil.copy(f, tmp_path / f.name)
    for broken in ("model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"):
        (tmp_path / broken).write_bytes(b"\xff" * 64)
    opened: list[str] = []
    real = C.read_header
    monkeypatch.setattr(C, "read_header", lambda p: opened.append(p.name) or real(p))
    single = run_json(cli, "run", "--weights", minilm() / "model.safetensors", "--layer", "0",
                      "--random", "3")
    opened.clear()
    doc = run_json(cli, "run", "--weights", tmp_path, "--layer", "0", "--random", "3")
    assert doc["output"] == single["output"]
    assert opened == ["model-00001-of-00003.safetensors"]
    r = cli("run", "--weights", tmp_path, "--layer", "5", "--random", "3")
    assert (r.code, r.err) == (2, f"error: {tmp_path / 'model-00003-of-00003.safetensors'}: not "
                                  "a safetensors file (header length 18,446,744,073,709,551,615 "
                                  "is over the format's limit of 100,000,000 bytes)\n")


def test_a_checkpoint_reads_each_shard_header_once(sharded, monkeypatch):
    opened: list[str] = []
    real = C.read_header
    monkeypatch.setattr(C, "read_header", lambda p: opened.append(p.name) or real(p))
    ckpt = open_checkpoint(sharded)
    assert opened == [] and len(ckpt.shards) == 3 and ckpt.index == sharded / INDEX_NAME
    assert len(ckpt.merged().tensors) == len(ckpt.shard_of)
    ckpt.merged()
    assert sorted(opened) == [s.name for s in ckpt.shards]


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


def test_model_errors_exact_lines(cli, cache, tmp_path):
    acme = cache / "models--acme--minilm-sharded"
    (cache / "models--acme--empty" / "snapshots").mkdir(parents=True)
    (cache / "models--acme--bad-ref" / "snapshots" / COMMIT).mkdir(parents=True)
    (cache / "models--acme--bad-ref" / "refs").mkdir()
    (cache / "models--acme--bad-ref" / "refs" / "main").write_text("not a commit\n")
    cached = ("acme/bad-ref, acme/empty, acme/minilm-sharded, "
              "sentence-transformers/all-MiniLM-L6-v2")
    cases = [
        (("params", "--model", "acme/nope"),
         f"acme/nope is not in the Hugging Face cache at {cache} (ffncli never downloads); "
         f"cached models: {cached}"),
        (("run", "--model", "acme/empty", "--random", "1"),
         f"{cache / 'models--acme--empty'}: no snapshots in it (an interrupted download?)"),
        (("run", "--model", "acme/minilm-sharded@v2", "--random", "1"),
         f"acme/minilm-sharded: no revision 'v2' in the cache (refs: main, refs/pr/1; "
         f"snapshots: {COMMIT}, {OTHER})"),
        (("params", "--model", "sentence-transformers/all-MiniLM-L6-v2@v1"),
         f"sentence-transformers/all-MiniLM-L6-v2: revision 'v1' (commit {OTHER}) is not in "
         f"the cache; cached snapshots: {COMMIT}"),
        (("params", "--model", f"acme/minilm-sharded@{'a' * 40}"),
         f"acme/minilm-sharded: revision '{'a' * 40}' is not in the cache; cached snapshots: "
         f"{COMMIT}, {OTHER}"),
        (("params", "--model", "acme/minilm-sharded@0123456"),
         f"{acme / 'snapshots' / COMMIT}: no model.safetensors or "
         "model.safetensors.index.json in the folder"),
        (("params", "--model", "acme/bad-ref"),
         f"{cache / 'models--acme--bad-ref' / 'refs' / 'main'}: expected a 40-digit commit "
         "hash, got 'not a commit'"),
        (("params", "--model", "acme/minilm-sharded@../../x"),
         "option --model: revision '../../x' is not a branch, tag or commit name"),
        (("params", "--model", "../etc"),
         "option --model: expected ORG/NAME or ORG/NAME@REVISION, got '../etc'"),
        (("params", "--model", "acme/x@"),
         "option --model: expected ORG/NAME or ORG/NAME@REVISION, got 'acme/x@'"),
        (("params", "--model", "acme/minilm-sharded", "--weights", tmp_path),
         "give --weights or --model, not both"),
        (("permute-check", "--model", "acme/minilm-sharded", "--impl", "m:f", "--random", "2"),
         "give --impl or --model, not both"),
    ]
    for args, line in cases:
        r = cli(*args)
        assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n"), args


def test_an_empty_or_missing_cache_says_so(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    r = cli("params", "--model", "a/b")
    assert r.err == (f"error: a/b is not in the Hugging Face cache at {tmp_path / 'none'} "
                     "(ffncli never downloads); there is no cache there\n")
    (tmp_path / "none").mkdir()
    r = cli("params", "--model", "a/b")
    assert r.err.endswith("(ffncli never downloads); it holds no models\n")


# ---------------------------------------------------------------------------------------------
# Bad shards, indexes and folders: one line each.

W = np.arange(6, dtype=np.float32).reshape(2, 3)


def two_shards(folder: Path, weight_map: dict[str, str] | None = None) -> Path:
    return write_shards(folder, [{"a.weight": W}, {"b.weight": W, "c.weight": W}], weight_map)


S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def test_bad_checkpoints_exact_lines(cli, tmp_path):
    def case(name: str, index_text: str | None = None, weight_map: dict | None = None,
             setup=None) -> Path:
        folder = tmp_path / name
        index = two_shards(folder, weight_map)
        if index_text is not None:
            index.write_text(index_text)
        if setup is not None:
            setup(folder)
        return folder

    missing = case("missing", setup=lambda f: (f / S2).unlink())
    ghost = case("ghost", weight_map={"a.weight": S1, "b.weight": S2, "c.weight": S2,
                                      "d.weight": S1})
    unlisted = case("unlisted", weight_map={"a.weight": S1, "b.weight": S2})
    moved = tmp_path / "moved"  # b.weight in both shards, the index mapping it to the second
    write_shards(moved, [{"a.weight": W, "b.weight": W}, {"b.weight": W, "c.weight": W}],
                 {"a.weight": S1, "b.weight": S2, "c.weight": S2})
    not_json = case("notjson", index_text="weight_map: a")
    no_map = case("nomap", index_text='{"metadata": {}}')
    outside = case("outside", weight_map={"a.weight": "../x.safetensors"})
    absolute = case("absolute", weight_map={"a.weight": "/etc/passwd"})
    not_object = case("notobject", index_text='{"weight_map": ["a"]}')
    empty_map = case("emptymap", index_text='{"weight_map": {}}')
    unknown = case("unknown", index_text='{"weight_map": {"a.weight": "x"}, "extra": 1}')
    not_name = case("notname", index_text='{"weight_map": {"a.weight": 7}}')
    duplicate = case("duplicate", index_text='{"weight_map": {"a": "x", "a": "y"}}')
    no_weights = tmp_path / "noweights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text("{}")
    others = tmp_path / "others"
    others.mkdir()
    st_numpy.save_file({"w": W}, others / "adapter_model.safetensors")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "pytorch_model.bin").write_bytes(b"PK")
    both = case("both", setup=lambda f: st_numpy.save_file({"w": W}, f / "model.safetensors"))
    ix = INDEX_NAME
    cases = [
        (missing, f"shard named by {ix} not found: {missing / S2}"),
        (ghost, f"{ghost / ix}: tensor 'd.weight' is mapped to {S1}, which does not hold it"),
        (unlisted, f"{unlisted / S2}: holds tensor 'c.weight', which {unlisted / ix} does not "
                   "list"),
        (moved, f"{moved / S1}: holds tensor 'b.weight', which {moved / ix} maps to {S2}"),
        (not_json, f"{not_json / ix}: not a safetensors index (not valid JSON at line 1, "
                   "column 1: Expecting value)"),
        (no_map, f"{no_map / ix}: not a safetensors index (no 'weight_map' key)"),
        (outside, f"{outside / ix}: weight_map 'a.weight': shard '../x.safetensors' is not a "
                  f"file in {outside}"),
        (absolute, f"{absolute / ix}: weight_map 'a.weight': shard '/etc/passwd' is not a file "
                   f"in {absolute}"),
        (not_object, f"{not_object / ix}: weight_map: expected an object mapping tensor names "
                     "to shard files, got ['a']"),
        (empty_map, f"{empty_map / ix}: weight_map: expected an object mapping tensor names to "
                    "shard files, got {}"),
        (unknown, f"{unknown / ix}: unknown key 'extra'; expected metadata, weight_map"),
        (not_name, f"{not_name / ix}: weight_map 'a.weight': expected a shard file name, got 7"),
        (duplicate, f"{duplicate / ix}: not a safetensors index (not valid JSON: duplicate "
                    "key 'a')"),
        (no_weights, f"{no_weights}: no model.safetensors or {ix} in the folder"),
        (others, f"{others}: no model.safetensors or {ix} in the folder; it has "
                 "adapter_model.safetensors: give one with --weights"),
        (pickled, f"{pickled}: no model.safetensors or {ix} in the folder; it has "
                  "pytorch_model.bin: PyTorch pickles, which ffncli does not read (never "
                  "unpickled)"),
        (both, f"{both}: holds both model.safetensors and {ix}; give one of them with "
               "--weights"),
    ]
    for target, line in cases:
        # run opens no shard that lacks its layer: a shard's contents are checked by params
        commands = [("params", "--preset", "tiny")]
        if target not in (ghost, unlisted, moved):
            commands.append(("run", "--preset", "bert-base", "--random", "1"))
        for command in commands:
            r = cli(*command, "--weights", target)
            assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n"), (command, target)
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "bert"}')
    r = cli("params", "--weights", config)
    assert r.err == f"error: {config}: not a safetensors index (no 'weight_map' key)\n"
    # an index given as the file reads the same
    r = cli("params", "--weights", ghost / ix)
    assert r.err == f"error: {ghost / ix}: tensor 'd.weight' is mapped to {S1}, which does " \
                    "not hold it\n"


def test_a_shard_that_is_a_folder_or_fifo_is_refused_unopened(cli, tmp_path):
    index = two_shards(tmp_path)
    (tmp_path / S2).unlink()
    os.mkfifo(tmp_path / S2)
    r = cli("params", "--weights", index)
    assert r.err == (f"error: shard named by {INDEX_NAME} is not a regular file (a FIFO, "
                     f"socket or device): {tmp_path / S2}\n")


def test_the_unsharded_checkpoint_is_one_header(tmp_path):
    st_numpy.save_file({"w": W}, tmp_path / "model.safetensors")
    ckpt = open_checkpoint(tmp_path)
    assert (ckpt.index, ckpt.shards, ckpt.path) == (None, (tmp_path / "model.safetensors",),
                                                    tmp_path / "model.safetensors")
    assert ckpt.merged().tensors["w"].shape == (2, 3)


@pytest.fixture(scope="module")
def fuzz_index(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzzindex")
    two_shards(folder)
    return folder / INDEX_NAME


VALID_INDEX = json.dumps({"metadata": {"total_size": 72},
                          "weight_map": {"a.weight": S1, "b.weight": S2, "c.weight": S2}})


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzz_read_index_on_mutated_text(fuzz_index, data):
    """Flipped, cut and inserted bytes of a valid index: a mapping or one WeightsError."""
    raw = bytearray(VALID_INDEX.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        i = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[i] ^= data.draw(st.integers(1, 255))
        elif op == "cut":
            del raw[i:i + data.draw(st.integers(1, 8))]
        else:
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    fuzz_index.write_bytes(bytes(raw))
    try:
        mapping = read_index(fuzz_index)
    except WeightsError as exc:
        assert "\n" not in str(exc)
        return
    assert all(p.parent == fuzz_index.parent or fuzz_index.parent in p.parents
               for p in mapping.values())


def test_a_mixture_of_experts_layer_split_across_shards_reads_as_one_file(tmp_path):
    """Mixtral's layer 1: experts 0-1 in one shard, the router and experts 2-3 in another."""
    from ffncli.compute import ffn as F
    from ffncli.compute.weights import checkpoint_weights as safetensors_weights
    from ffncli.specs.archs import spec_from_config

    spec = spec_from_config({"model_type": "mixtral", "hidden_size": 8, "intermediate_size": 12,
                             "num_hidden_layers": 2, "num_attention_heads": 2,
                             "num_key_value_heads": 1, "num_local_experts": 4,
                             "num_experts_per_tok": 2, "vocab_size": 10}, "tiny-mixtral")
    rng = np.random.default_rng(0)
    p = "model.layers.1.block_sparse_moe."
    first = {f"{p}experts.{e}.{w}.weight": rng.normal(size=shape).astype(np.float32)
             for e in (0, 1) for w, shape in (("w1", (12, 8)), ("w3", (12, 8)), ("w2", (8, 12)))}
    second = {f"{p}experts.{e}.{w}.weight": rng.normal(size=shape).astype(np.float32)
              for e in (2, 3) for w, shape in (("w1", (12, 8)), ("w3", (12, 8)), ("w2", (8, 12)))}
    second[p + "gate.weight"] = rng.normal(size=(4, 8)).astype(np.float32)
    st_numpy.save_file({**first, **second}, tmp_path / "one.safetensors")
    write_shards(tmp_path / "sharded", [first, second])
    x = rng.normal(size=(6, 8)).astype(np.float32)
    a = safetensors_weights(tmp_path / "one.safetensors", spec, 1, np.dtype("f4"))
    b = safetensors_weights(tmp_path / "sharded", spec, 1, np.dtype("f4"))
    assert isinstance(b, F.MoEWeights) and len(b.experts) == 4
    np.testing.assert_array_equal(F.ffn(x, a, spec.ffn.activation),
                                  F.ffn(x, b, spec.ffn.activation))
