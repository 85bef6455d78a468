"""Many shards as one job (jobs/shards/): in this process and on a real Dask LocalCluster
(2 worker processes, started once for the module). The cluster's statistics must equal the
single process's to the last digit; both must equal one pass over the concatenated input in
every integer count."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import distributed
import numpy as np
import pytest
from helpers import processes
from helpers.installed_models import minilm

from ffncli.analysis import sparsity
from ffncli.analysis.sparsity import relu_stats
from ffncli.compute.forward import walk as walk_module
from ffncli.compute.forward.walk import hidden_states
from ffncli.errors import InputError, Interrupted, OutputError
from ffncli.formats.tokens import open_input
from ffncli.jobs.choices import OPTIONS, ModelChoice, TextChoice, parse_layers
from ffncli.jobs.progress import Progress
from ffncli.jobs.resolve import load_model, load_sequences, open_forward
from ffncli.jobs.shards import inputs
from ffncli.jobs.shards import pool as pools
from ffncli.jobs.shards import workers as cluster
from ffncli.jobs.shards.drivers import capture_shards, relu_stats_shards, run_shards, sweep_shards
from ffncli.jobs.shards.inputs import read_text_shards
from ffncli.jobs.shards.pool import DaskPool, InProcess, TreeMerge
from ffncli.jobs.shards.tasks import SweepTask, shard_sweep
from ffncli.jobs.sweep import sweep
from ffncli.present import stats as render
from ffncli.specs.spec import Overrides

pytestmark = pytest.mark.slow  # among the slowest (docs/development.md)

DENSE = (ModelChoice(preset="gpt2"), Overrides(d_model=96, d_ff=40))
GATED = (ModelChoice(preset="llama2-7b"), Overrides(d_model=96, d_ff=40))
MOE = (ModelChoice(preset="mixtral-8x7b"), Overrides(d_model=96, d_ff=20, experts=4, top_k=2,
                                                     capacity_factor=0.9))
CUTS = (0, 700, 1500, 1501, 3000, 4200, 6000)  # a one-token shard too


@pytest.fixture(scope="module")
def client():
    """Two worker processes whose BLAS runs as this process's does. Dask gives each worker
    one BLAS thread by default; OpenBLAS may round a product's last bit differently with
    another thread count (its Haswell kernel does), and text through the model would then
    differ from this process in a unit near 0. The tests compare the merge, not BLAS."""
    import dask

    environ = {"MALLOC_TRIM_THRESHOLD_": 65536}  # Dask's default, less the thread limits
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}), \
            distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                     dashboard_address=None, silence_logs=logging.ERROR) as lc, \
            distributed.Client(lc) as c:
        yield c


def tokens(n: int, d: int = 96, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (n, d)).astype(np.float32)


def write_shards(folder: Path, x: np.ndarray, cuts=CUTS) -> Path:
    folder.mkdir()
    for i, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)):
        np.save(folder / f"part-{i:03d}.npy", x[a:b])
    return folder


def single_file(model, tmp_path: Path, x: np.ndarray, **options) -> dict:
    """The statistics of one pass over all tokens in one file (no shards), its rule's line
    in the command's words, as the sharded job's."""
    path = tmp_path / "all.npy"
    np.save(path, x)
    engine = load_model(*model).engine
    return render.stats_json(relu_stats(engine, open_input(path, x.shape[1]), words=OPTIONS,
                                        **options))


def sharded(model, folder, pool, **options) -> dict:
    out = relu_stats_shards(*model, folder, pool, **options)
    return render.stats_json(out.result)


def assert_counts_equal(a: dict, b: dict) -> None:
    """Every integer equal; floats (sums over differently cut chunks) equal within 1e-12."""
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], float) or key in ("overlap", "per_expert"):
            _close(a[key], b[key])
        else:
            assert a[key] == b[key], key


def _close(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _close(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            _close(u, v)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15)
    else:
        assert a == b


class KillOne(Progress):
    """At the first task done, SIGKILL one of ``client``'s workers (its pid into ``killed``)."""

    def __init__(self, client, killed: list[int]) -> None:
        self.before = client.run(os.getpid)
        self.killed = killed

    def advance(self, tokens: int) -> None:
        if not self.killed:
            pid = sorted(self.before.values())[0]
            os.kill(pid, signal.SIGKILL)
            self.killed.append(pid)


@pytest.mark.parametrize("model", [DENSE, GATED, MOE], ids=["dense", "gated", "moe"])
def test_cluster_equals_single_process_to_the_last_digit(model, tmp_path, client):
    x = tokens(6000)
    folder = write_shards(tmp_path / "acts", x)
    here = sharded(model, folder, InProcess())
    there = sharded(model, folder, DaskPool(client))
    assert there == here  # floats too, to the last digit
    assert here["tokens"] == 6000
    assert len(here["inactive_per_token"]) == 6000
    assert_counts_equal(here, single_file(model, tmp_path, x))


def test_moe_capacity_is_that_of_the_whole_input(tmp_path, client):
    """A capped expert fills up in token order across shards: the places left to a shard
    depend on the shards before it. Per expert, the tokens it took equal one pass's."""
    x = tokens(6000, seed=3)
    folder = write_shards(tmp_path / "acts", x)
    here = sharded(MOE, folder, DaskPool(client))
    whole = single_file(MOE, tmp_path, x)
    taken = [e["tokens"] for e in here["per_expert"]]
    assert taken == [e["tokens"] for e in whole["per_expert"]]
    assert sum(taken) < 6000 * 2  # the capacity did drop tokens: the test means something
    per_shard_capacity = sharded(MOE, folder, InProcess())  # same code, same answer
    assert per_shard_capacity == here


def test_cats_calibration_and_listing_span_shards(tmp_path, client):
    """--target-sparsity takes its threshold from the first 4,096 tokens of the whole input
    (here across five shards); the per-token list is the first 10,000 tokens'."""
    x = tokens(12_000, seed=5)
    folder = write_shards(tmp_path / "acts", x, (0, 1000, 2000, 3000, 3500, 12_000))
    here = sharded(DENSE, folder, DaskPool(client), target_sparsity=0.5)
    whole = single_file(DENSE, tmp_path, x, target_sparsity=0.5)
    assert here["threshold"] == whole["threshold"]
    assert len(here["inactive_per_token"]) == 10_000
    assert_counts_equal(here, whole)


def test_small_input_pairwise_table(tmp_path, client):
    x = tokens(12, seed=7)
    folder = write_shards(tmp_path / "acts", x, (0, 5, 6, 12))
    here = sharded(GATED, folder, DaskPool(client))
    whole = single_file(GATED, tmp_path, x)
    assert len(here["pairwise_overlap"]) == 66
    assert here["pairwise_overlap"] == whole["pairwise_overlap"]
    assert_counts_equal(here, whole)


def test_a_killed_worker_changes_nothing(tmp_path, client):
    """One worker process is killed (SIGKILL) while the job runs: Dask reruns its tasks on
    the other (and on the one its nanny restarts); the statistics equal the fault-free run."""
    x = tokens(24_000, seed=9)
    folder = write_shards(tmp_path / "acts", x, tuple(range(0, 24_001, 1000)))
    wide = (DENSE[0], Overrides(d_model=96, d_ff=2048))  # tasks of ~20 ms: some in flight
    expected = sharded(wide, folder, InProcess())
    killed: list[int] = []  # the first task is done, 23 are not

    out = relu_stats_shards(*wide, folder, DaskPool(client), progress=KillOne(client, killed))
    assert killed
    assert render.stats_json(out.result) == expected
    assert client.run_on_scheduler(_rescheduled, "shard_stats") > 0  # the kill took tasks
    client.wait_for_workers(2, timeout=30)
    assert killed[0] not in client.run(os.getpid).values()


def _rescheduled(name: str, dask_scheduler) -> int:
    """Tasks the scheduler took back from a worker that died while running them."""
    return sum(1 for t in dask_scheduler.transition_log if name in str(t[0])
               and t[1] == "processing" and "worker-cleanup" in str(t[4]))


def test_tree_merge_has_one_shape_whatever_the_order():
    rng = np.random.default_rng(0)
    for n in range(1, 23):
        shapes = set()
        for _ in range(6):
            tree = TreeMerge(n, lambda a, b: f"({a} {b})")
            for i in rng.permutation(n):
                tree.add(int(i), str(i))
            shapes.add(tree.root)
            assert tree.merges == n - 1
        assert len(shapes) == 1
    tree = TreeMerge(5, lambda a, b: f"({a} {b})")
    for i in (4, 2, 0, 3, 1):
        tree.add(i, str(i))
    assert tree.root == "(((0 1) (2 3)) 4)"


# ---------------------------------------------------------------------------------------------
# run over shards: files, manifest, resume.


def test_run_writes_each_shard_and_resumes(tmp_path, client):
    x = tokens(6000, seed=11)
    folder = write_shards(tmp_path / "acts", x)
    out = tmp_path / "out"
    done = run_shards(*GATED, folder, out, DaskPool(client))
    names = [f"part-{i:03d}.npy" for i in range(6)]
    assert done.written == names and done.already == []
    ffn = load_model(*GATED).engine
    got = np.concatenate([np.load(out / n) for n in names])
    np.testing.assert_allclose(got, ffn(x), rtol=1e-5, atol=1e-6)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(e["name"], e["tokens"]) for e in manifest["shards"]] == \
        list(zip(names, np.diff(CUTS).tolist(), strict=True))
    assert sorted(os.listdir(out)) == ["manifest.json", *names]
    again = run_shards(*GATED, folder, out, InProcess())
    assert again.written == [] and again.already == names
    os.utime(folder / "part-002.npy", ns=(1, 1))  # a changed input is done again
    third = run_shards(*GATED, folder, out, InProcess())
    assert third.written == ["part-002.npy"]


def test_interrupted_run_keeps_complete_shards_and_resumes(tmp_path, client):
    """Ctrl-C after the first shard is complete: the pending tasks are cancelled, no partial
    file of an unfinished shard is left, the complete ones stay in the manifest; a second run
    does only the rest."""
    x = tokens(24_000, seed=13)
    folder = write_shards(tmp_path / "acts", x, tuple(range(0, 24_001, 2000)))
    out = tmp_path / "out"

    class CtrlC(Progress):
        def advance(self, tokens: int) -> None:
            raise Interrupted(signal.SIGINT)

    with pytest.raises(Interrupted):
        run_shards(*DENSE, folder, out, DaskPool(client), progress=CtrlC())
    manifest = json.loads((out / "manifest.json").read_text())
    complete = [e["name"] for e in manifest["shards"]]
    assert len(complete) == 1
    assert not [f for f in os.listdir(out) if f.endswith(".tmp")]
    rest = run_shards(*DENSE, folder, out, DaskPool(client))
    assert rest.already == complete and len(rest.written) == 11
    ffn = load_model(*DENSE).engine
    got = np.concatenate([np.load(out / f"part-{i:03d}.npy") for i in range(12)])
    np.testing.assert_allclose(got, ffn(x), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# The CLI: options, errors, bad shards.


def test_cli_scheduler_and_workers_equal_single_process(cli, tmp_path, client, monkeypatch):
    folder = write_shards(tmp_path / "acts", tokens(6000))
    args = ("relu-stats", "--preset", "gpt2", "--d-model", "96", "--d-ff", "40", "--input")
    here = cli(*args, f"{folder}/*.npy", "--json")
    assert here.code == 0, here.err
    monkeypatch.chdir(tmp_path)  # a relative path reaches the workers as an absolute one
    there = cli(*args, "acts", "--scheduler", client.scheduler.address, "--json")
    assert there.code == 0, there.err
    assert there.json() == here.json()
    assert here.json()["shards"] == 6 and here.json()["skipped"] == []
    local = cli(*args, folder, "--workers", "2", "--json")
    assert local.code == 0, local.err
    assert local.json() == here.json()
    assert here.err == there.err == local.err == ""  # no Dask log on stderr, no dashboard


def test_each_worker_reads_the_weights_once(tmp_path, client):
    """The model is built once per worker process and kept for every later task and job
    (keyed by the options and the weights' size and mtime)."""
    folder = write_shards(tmp_path / "acts", tokens(6000))
    relu_stats_shards(*GATED, folder, DaskPool(client))
    before = client.run(_cached_models)
    relu_stats_shards(*GATED, folder, DaskPool(client))
    assert client.run(_cached_models) == before
    assert sorted(len(ids) for ids in before.values())[-1] == 1  # one model, not one a task


def _cached_models() -> list[int]:
    return [id(m) for m in cluster._cache.values()]


def test_cli_bad_shard_is_named_or_skipped(cli, tmp_path, client):
    x = tokens(6000)
    folder = write_shards(tmp_path / "acts", x)
    bad = x[700:1500].copy()
    bad[5, 3] = np.nan
    np.save(folder / "part-001.npy", bad)
    np.save(folder / "part-009.npy", x[:10, :20])  # a header the job refuses up front
    args = ("relu-stats", "--preset", "gpt2", "--d-model", "96", "--d-ff", "40", "--input",
            folder, "--scheduler", client.scheduler.address)
    r = cli(*args)
    assert r.code == 2
    assert r.err == f"error: {folder}/part-009.npy: expected d_model 96, got 20 (shape (10, 20))\n"
    (folder / "part-009.npy").unlink()
    r = cli(*args)
    assert r.code == 2
    assert r.err == (f"error: {folder}/part-001.npy: 1 non-finite value (NaN or infinity), the "
                     "first at token 5, column 3; pass --allow-nonfinite to compute with them\n")
    np.save(folder / "part-009.npy", x[:10, :20])
    r = cli(*args, "--skip-bad", "--json")
    assert r.code == 0, r.err
    assert r.json()["tokens"] == 6000 - 800
    assert [s["path"] for s in r.json()["skipped"]] == [f"{folder}/part-001.npy",
                                                         f"{folder}/part-009.npy"]
    assert r.err == (f"skipped: {folder}/part-001.npy: 1 non-finite value (NaN or infinity), "
                     "the first at token 5, column 3; pass --allow-nonfinite to compute with "
                     f"them\nskipped: {folder}/part-009.npy: expected d_model 96, got 20 "
                     "(shape (10, 20))\n")
    cats = cli(*args, "--skip-bad", "--target-sparsity", "0.5", "--json")  # NaN in 4,096 first
    assert cats.code == 0, cats.err
    good = np.concatenate([x[:700], x[1500:]])
    expected = single_file(DENSE, tmp_path, good, target_sparsity=0.5)
    assert cats.json()["threshold"] == expected["threshold"]


def test_cli_run_needs_a_folder_and_writes_it(cli, tmp_path):
    folder = write_shards(tmp_path / "acts", tokens(3000), (0, 1000, 3000))
    args = ("run", "--preset", "gpt2", "--d-model", "96", "--d-ff", "40", "--input", folder)
    r = cli(*args)
    assert (r.code, r.err) == (2, "error: run over shards (a glob, a folder, --workers or "
                                  "--scheduler) writes one .npy per shard: add --out DIR\n")
    r = cli(*args, "--out", tmp_path / "y.npy")
    assert (r.code, r.err) == (2, "error: option --out: run over shards (a glob, a folder, "
                                  "--workers or --scheduler) writes one .npy per shard into a "
                                  f"folder, got {tmp_path}/y.npy\n")
    r = cli(*args, "--out", tmp_path / "y", "--json")
    assert r.code == 0, r.err
    assert r.json()["written"] == ["part-000.npy", "part-001.npy"]
    assert r.json()["tokens"] == 3000
    r = cli(*args, "--out", tmp_path / "y", "--residual")
    assert (r.code, r.err) == (2, f"error: {tmp_path}/y/manifest.json: written by a run with "
                                  "other options (model, overrides, --residual); pass --force "
                                  "to start again, or choose another --out\n")


def test_cli_errors(cli, tmp_path, monkeypatch):
    args = ("relu-stats", "--preset", "toy")
    r = cli(*args, "--input", f"{tmp_path}/*.npy")
    assert (r.code, r.err) == (2, f"error: option --input: no file matches {tmp_path}/*.npy\n")
    r = cli(*args, "--input", tmp_path)
    assert (r.code, r.err) == (2, f"error: option --input: {tmp_path} is a folder without .npy "
                                  "files\n")
    r = cli(*args, "--random", "10", "--workers", "2")
    assert (r.code, r.err) == (2, "error: --workers, --scheduler and --skip-bad take --input "
                                  "files (a file, a glob such as 'acts/*.npy', or a folder), "
                                  "not --random\n")
    np.save(tmp_path / "a.npy", tokens(5, 4))
    r = cli(*args, "--input", tmp_path, "--workers", "0")
    assert (r.code, r.err) == (2, "error: option --workers: expected a whole number >= 1, got 0\n")
    r = cli(*args, "--input", tmp_path, "--workers", "2", "--scheduler", "tcp://x:1")
    assert (r.code, r.err) == (2, "error: give --workers or --scheduler, not both\n")
    monkeypatch.setattr(pools, "CONNECT_TIMEOUT", 0.5)
    r = cli(*args, "--input", tmp_path, "--scheduler", "tcp://127.0.0.1:9")
    assert (r.code, r.err) == (2, "error: cannot reach the Dask scheduler at tcp://127.0.0.1:9: "
                                  "no answer within 0.5 s\n")
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if the extra were not installed
    r = cli(*args, "--input", tmp_path, "--workers", "2")
    assert (r.code, r.err) == (2, "error: --workers needs the dask package: pip install "
                                  "'ffncli[dask]'\n")


def test_the_core_never_imports_dask(tmp_path):
    folder = write_shards(tmp_path / "acts", tokens(100, 4), (0, 40, 100))
    code = ("import sys; from ffncli.cli import run; "
            f"assert run(['relu-stats', '--preset', 'toy', '--input', '{folder}']) == 0; "
            f"assert run(['run', '--preset', 'toy', '--input', '{folder}/part-000.npy']) == 0; "
            "assert 'dask' not in sys.modules and 'distributed' not in sys.modules, 'imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_shard_rejects_what_the_single_file_rejects(tmp_path):
    folder = tmp_path / "acts"
    folder.mkdir()
    (folder / "a.npy").write_bytes(b"not an array")
    with pytest.raises(InputError, match="a.npy: not a .npy array"):
        relu_stats_shards(*DENSE, folder, InProcess())


# ---------------------------------------------------------------------------------------------
# --text and --ids over shards: the whole model on each shard.

FORWARD = Path(__file__).parent / "data" / "forward"
ALICE = Path(__file__).parents[1] / "examples" / "texts" / "alice_chapter1.txt"


def alice_shards(folder: Path, cuts: tuple) -> Path:
    """Chapter I of Alice cut by lines into text shards; ``folder/../all.txt`` them all."""
    lines = ALICE.read_text(encoding="utf-8").splitlines(keepends=True)
    folder.mkdir()
    for k, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)):
        (folder / f"part-{k}.txt").write_text("".join(lines[a:b]), encoding="utf-8")
    (folder.parent / "all.txt").write_text("".join(lines[cuts[0]:cuts[-1]]), encoding="utf-8")
    return folder


def id_shards(folder: Path, files: int = 3, sequences: int = 12, npy: bool = False,
              seed: int = 0) -> list[list[int]]:
    """Random token ids (vocabulary 128, up to 64 positions) in ``files`` shards, each
    sequence a line of a .txt or a 1-D .npy; returns every sequence in order."""
    rng = np.random.default_rng(seed)
    folder.mkdir()
    seqs = [rng.integers(0, 128, int(rng.integers(3, 64))).tolist()
            for _ in range(files * sequences)]
    for k in range(files):
        part = seqs[k * sequences:(k + 1) * sequences]
        if npy:
            for j, s in enumerate(part):
                np.save(folder / f"part-{k}-{j:02d}.npy", np.array(s, dtype=np.int64))
        else:
            (folder / f"part-{k}.txt").write_text("".join(" ".join(map(str, s)) + "\n"
                                                          for s in part))
    return seqs


def text_sweep(weights: Path, text: TextChoice, pool, layer: str | None = None, **options
               ) -> dict:
    out = sweep_shards(ModelChoice(weights=weights, layer=layer), Overrides(), text, pool,
                       **options)
    return render.sweep_json(out.result)


def one_walk(weights: Path, text: TextChoice, layer: str | None = None, **options) -> dict:
    """relu-stats --text/--ids over one file: the sweep of ffncli.jobs.sweep (no shards)."""
    model = open_forward(ModelChoice(weights=weights), Overrides())
    seqs = load_sequences(text, model, model.weights)
    return render.sweep_json(sweep(model, seqs, parse_layers(layer, model.n_layers),
                                   **options))


def assert_same(a: object, b: object, where: str = "") -> None:
    """The same document, floats within 1e-5 relative, counts within 2. Text goes through the
    model's float32 products, whose last bits depend on the BLAS kernel, its threads and the
    batch's rows (OpenBLAS's Haswell kernel rounds one worker's single thread differently
    from this process's two: in a full run a unit at 0 was counted on one side only): the
    merge is exact, the products are not. Strings, booleans and None must be equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}.{i}")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-9), where
    elif isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        assert abs(a - b) <= 2, where
    else:
        assert a == b, where


def assert_sweeps_agree(shards: dict, whole: dict) -> None:
    """Shards against one walk over the files concatenated: each file starts its own batches,
    and a product's last bit may depend on the batch's rows (it does with OpenBLAS's Haswell
    kernel), so a unit within float rounding of 0 may count differently: counts within 2,
    unit lists within 2 units, floats within 1e-4 (on this machine's default kernel every
    integer was equal)."""
    assert shards["tokens"] == whole["tokens"] and shards["sequences"] == whole["sequences"]
    assert [x["layer"] for x in shards["layers"]] == [x["layer"] for x in whole["layers"]]
    for a, b in zip(shards["layers"], whole["layers"], strict=True):
        _nearly(a, b, "")


def _nearly(a: object, b: object, where: str) -> None:
    if isinstance(a, list) and isinstance(b, list) \
            and where.endswith(("dead_units", "always_active_units")):
        assert len(set(a) ^ set(b)) <= 2, where
    elif isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), where
        for key in a:
            _nearly(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _nearly(x, y, f"{where}.{i}")
    elif isinstance(a, bool) or isinstance(a, str) or a is None:
        assert a == b, where
    elif isinstance(a, int) and isinstance(b, int):
        assert abs(a - b) <= 2, where
    else:
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6), where


@pytest.mark.parametrize("case", ["minilm-text", "llama-ids", "mixtral-npy"])
def test_text_shards_on_the_cluster_equal_one_process(case, tmp_path, client):
    """Three shards through the whole model: the cluster agrees with the single process
    within float rounding (see assert_same), and both with one walk over the same files
    concatenated. The merge itself is exact (test_cluster_equals_single_process_to_the_
    last_digit)."""
    options = {"target_sparsity": 0.5} if case == "llama-ids" else {}
    if case == "minilm-text":
        weights = minilm()
        folder = alice_shards(tmp_path / "corpus", (0, 4, 8, 12))  # 1,444 tokens: quick
        many, one = TextChoice(text=folder), TextChoice(text=tmp_path / "all.txt")
    else:
        weights = FORWARD / case.split("-")[0]
        npy = case.endswith("npy")
        seqs = id_shards(tmp_path / "ids", npy=npy)
        (tmp_path / "all.txt").write_text("".join(" ".join(map(str, s)) + "\n" for s in seqs))
        many = TextChoice(ids=Path(f"{tmp_path}/ids/*.{'npy' if npy else 'txt'}"))
        one = TextChoice(ids=tmp_path / "all.txt")
    here = text_sweep(weights, many, InProcess(), **options)
    there = text_sweep(weights, many, DaskPool(client), **options)
    assert_same(there, here)
    whole = one_walk(weights, one, **options)
    assert_sweeps_agree(here, whole)
    assert len(here["layers"]) == (6 if case == "minilm-text" else 2)
    if case == "mixtral-npy":
        assert here["layers"][0]["experts"] == 4  # the router ran: per-expert counters
    if options:
        assert here["layers"][1]["threshold"] == pytest.approx(whole["layers"][1]["threshold"],
                                                                 rel=1e-5)


def test_a_long_file_is_cut_between_the_walks_batches(tmp_path, client, monkeypatch):
    """A file longer than SHARD_TOKENS is cut into runs of whole batches: each run's walk
    computes the batches of the one walk over the file, so even the bits agree; and one
    file with --workers equals one file alone in every integer."""
    monkeypatch.setattr(inputs, "SHARD_TOKENS", 300)
    monkeypatch.setattr(walk_module, "BATCH_TOKENS", 100)
    seqs = id_shards(tmp_path / "ids", files=1, sequences=40)
    shards, _ = read_text_shards(TextChoice(ids=tmp_path / "ids" / "part-0.txt"),
                                 open_forward(ModelChoice(weights=FORWARD / "llama"),
                                              Overrides()), False)
    assert len(shards) > 3
    assert [s.name for s in shards[:2]] == ["part-0-part0000", "part-0-part0001"]
    assert [list(map(int, x)) for s in shards for x in s.ids] == seqs
    assert all(s.tokens <= 300 for s in shards if len(s.ids) > 1)
    here = text_sweep(FORWARD / "llama", TextChoice(ids=tmp_path / "ids" / "part-0.txt"),
                      DaskPool(client), layer="1")
    whole = one_walk(FORWARD / "llama", TextChoice(ids=tmp_path / "ids" / "part-0.txt"),
                     layer="1", batch_tokens=100)
    assert_sweeps_agree(here, whole)


def test_tiny_text_corpus_keeps_the_pairwise_table(tmp_path, client):
    folder = tmp_path / "ids"
    folder.mkdir()
    for k, line in enumerate(("5 6 7 8 9", "10 11", "1 2 3 4 5 6")):
        (folder / f"part-{k}.txt").write_text(line + "\n")
    here = text_sweep(FORWARD / "llama", TextChoice(ids=folder), DaskPool(client), layer="0")
    (tmp_path / "all.txt").write_text("5 6 7 8 9\n10 11\n1 2 3 4 5 6\n")
    whole = one_walk(FORWARD / "llama", TextChoice(ids=tmp_path / "all.txt"), layer="0")
    assert len(here["layers"][0]["pairwise_overlap"]) == 13 * 12 // 2
    assert here["layers"][0]["pairwise_overlap"] == whole["layers"][0]["pairwise_overlap"]
    assert_sweeps_agree(here, whole)


def test_a_killed_worker_during_a_text_job_changes_nothing(tmp_path, client):
    weights = minilm()
    folder = alice_shards(tmp_path / "corpus", (0, 4, 8, 12, 16, 20, None))
    text = TextChoice(text=folder)
    expected = text_sweep(weights, text, InProcess(), layer="0-1")
    killed = []  # the first shard is done, 5 are not

    out = sweep_shards(ModelChoice(weights=weights, layer="0-1"), Overrides(), text,
                       DaskPool(client), progress=KillOne(client, killed))
    assert killed
    assert_same(render.sweep_json(out.result), expected)
    assert client.run_on_scheduler(_rescheduled, "sweep_part") > 0
    client.wait_for_workers(2, timeout=30)


def test_each_worker_opens_the_model_once(tmp_path, client):
    id_shards(tmp_path / "ids")
    text = TextChoice(ids=tmp_path / "ids")
    text_sweep(FORWARD / "llama", text, DaskPool(client))
    before = client.run(_open_models)
    text_sweep(FORWARD / "llama", text, DaskPool(client), target_sparsity=0.3)
    assert client.run(_open_models) == before
    assert sorted(len(ids) for ids in before.values())[-1] == 1  # one model, not one a task


def _open_models() -> list[int]:
    return [id(m) for m in cluster._forwards.values()]


def test_capture_shards_resume_after_an_interrupted_run(tmp_path, client):
    """Ctrl-C after the first shard: no partial folder of an unfinished shard stays, the
    complete one is in the manifest; a crash's leftovers (a temporary folder, a shard folder
    the manifest does not name) are cleared; a second run does only the rest, and the layer
    files equal one capture of the whole text."""
    seqs = id_shards(tmp_path / "ids", files=4)
    model = ModelChoice(weights=FORWARD / "llama")
    text = TextChoice(ids=tmp_path / "ids")
    out = tmp_path / "out"

    class CtrlC(Progress):
        def advance(self, tokens: int) -> None:
            raise Interrupted(signal.SIGINT)

    with pytest.raises(Interrupted):
        capture_shards(model, text, out, DaskPool(client), progress=CtrlC())
    manifest = json.loads((out / "manifest.json").read_text())
    complete = [e["name"] for e in manifest["shards"]]
    assert len(complete) == 1
    assert not [f for f in os.listdir(out) if f.endswith(".tmp") or f.startswith(".stop")]
    assert set(complete) <= set(os.listdir(out))  # a shard done but not yet recorded when
    # Ctrl-C came may stay: it is done again
    (out / ".part-2.dead.tmp").mkdir()  # as a worker killed while writing leaves them
    # renamed, but the crash came before the manifest named it (a shard done, not yet
    # recorded when Ctrl-C came, is the same case: it may be there already)
    (out / "part-3").mkdir(exist_ok=True)
    rest = capture_shards(model, text, out, DaskPool(client))
    assert rest.already == complete and len(rest.written) == 3
    names = [f"part-{k}" for k in range(4)]
    assert sorted(os.listdir(out)) == ["manifest.json", *names]
    forward = open_forward(model, Overrides())
    layers, _ = hidden_states(forward, [np.array(s) for s in seqs], (0, 1))
    for i in (0, 1):
        got = np.concatenate([np.load(out / n / f"layer{i}.npy") for n in names])
        np.testing.assert_allclose(got, layers[i], rtol=1e-5, atol=1e-5)
    shard = json.loads((out / "part-1" / "capture.json").read_text())
    assert [s["ids"] for s in shard["sequences"]] == seqs[12:24]
    again = capture_shards(model, text, out, InProcess())
    assert again.written == [] and again.already == names


def test_cli_text_shards_workers_and_errors(cli, tmp_path, client, monkeypatch):
    seqs = id_shards(tmp_path / "ids")
    folder = tmp_path / "ids"
    args = ("relu-stats", "--weights", FORWARD / "llama", "--ids")
    here = cli(*args, folder, "--json")
    assert here.code == 0, here.err
    assert here.json()["shards"] == 3 and here.json()["skipped"] == []
    assert here.json()["tokens"] == sum(map(len, seqs))
    there = cli(*args, folder, "--scheduler", client.scheduler.address, "--json")
    assert there.code == 0, there.err
    assert_same(there.json(), here.json())
    (folder / "part-1.txt").write_text("1 2 3\n4 500 6\n")
    r = cli(*args, f"{folder}/*.txt", "--scheduler", client.scheduler.address)
    assert (r.code, r.err) == (2, f"error: {folder}/part-1.txt: line 2: token id 500 is out "
                                  "of range for a vocabulary of 128\n")
    r = cli(*args, folder, "--skip-bad", "--json")
    assert r.code == 0, r.err
    assert r.json()["skipped"] == [{"path": f"{folder}/part-1.txt", "error": (
        f"{folder}/part-1.txt: line 2: token id 500 is out of range for a vocabulary of 128")}]
    assert r.json()["tokens"] == sum(map(len, seqs[:12] + seqs[24:]))
    assert r.err == (f"skipped: {folder}/part-1.txt: line 2: token id 500 is out of range "
                     "for a vocabulary of 128\n")
    r = cli(*args, f"{tmp_path}/*.nothing")
    assert (r.code, r.err) == (2, f"error: option --ids: no file matches {tmp_path}/*.nothing\n")
    r = cli("relu-stats", "--weights", FORWARD / "llama", "--text", tmp_path)
    assert (r.code, r.err) == (2, f"error: option --text: {tmp_path} is a folder without .txt "
                                  "files\n")
    cap = ("capture", "--weights", FORWARD / "llama", "--ids", folder, "--out", tmp_path / "o")
    monkeypatch.setattr(pools, "CONNECT_TIMEOUT", 0.5)
    r = cli(*cap, "--scheduler", "tcp://127.0.0.1:9")
    assert (r.code, r.err) == (2, "error: cannot reach the Dask scheduler at tcp://127.0.0.1:9: "
                                  "no answer within 0.5 s\n")
    r = cli(*cap, "--workers", "2", "--skip-bad", "--json")
    assert r.code == 0, r.err
    assert r.json()["written"] == ["part-0", "part-2"] and r.json()["layers"] == [0, 1]
    r = cli(*cap, "--layer", "0", "--skip-bad")
    assert (r.code, r.err) == (2, f"error: {tmp_path}/o/manifest.json: written by a capture "
                                  "with other options (model, --layer, --dtype, --text or "
                                  "--ids); pass --force to start again, or choose another "
                                  "--out\n")


# ---------------------------------------------------------------------------------------------
# Offsets, indices and runs of the shards; the manifest's refusals. MAX_TOKENS_LISTED and
# SHARD_TOKENS are made small here (monkeypatched, in this process: InProcess pools) so that
# the end of the per-token list, or a run's limit, falls within a few tokens.


def test_per_token_list_skips_a_bad_shard_by_the_offsets(tmp_path, monkeypatch):
    """A 3-D shard (batch, sequence, d) counts batch x sequence tokens in the offsets; a shard
    refused by its header (--skip-bad) takes no index; one that fails while it is read (a NaN)
    leaves a hole in the per-token list, the shards after it listing their tokens at their
    offset in the whole input: here past the list's end (14 tokens), so none of them."""
    monkeypatch.setattr(sparsity, "MAX_TOKENS_LISTED", 14)
    x = tokens(20, seed=17)
    folder = tmp_path / "acts"
    folder.mkdir()
    np.save(folder / "part-0.npy", x[:10].reshape(2, 5, 96))
    np.save(folder / "part-1.npy", x[:3, :20])  # d_model 20: refused by its header
    bad = x[10:14].copy()
    bad[1, 2] = np.nan
    np.save(folder / "part-2.npy", bad)
    np.save(folder / "part-3.npy", x[14:])
    shards, skipped = inputs.read_shards(inputs.shard_paths(folder), 96, skip_bad=True)
    assert [(s.name, s.index, s.offset, s.tokens) for s in shards] == [
        ("part-0.npy", 0, 0, 10), ("part-2.npy", 1, 10, 4), ("part-3.npy", 2, 14, 6)]
    assert [s.path for s in skipped] == [f"{folder}/part-1.npy"]
    got = sharded(DENSE, folder, InProcess(), skip_bad=True)
    whole = single_file(DENSE, tmp_path, x)  # one pass over the 20 tokens: 14 listed
    assert got["tokens"] == 16
    assert len(whole["inactive_per_token"]) == 14
    assert got["inactive_per_token"] == whole["inactive_per_token"][:10]


def test_run_over_shards_with_residual_adds_the_input(tmp_path):
    x = tokens(3000, seed=19)
    folder = write_shards(tmp_path / "acts", x, (0, 1000, 3000))
    out = tmp_path / "out"
    done = run_shards(*GATED, folder, out, InProcess(), residual=True)
    assert done.written == ["part-000.npy", "part-001.npy"]
    ffn = load_model(*GATED).engine  # the single-file FFN, without the residual
    got = np.concatenate([np.load(out / n) for n in done.written])
    np.testing.assert_allclose(got, ffn(x) + x, rtol=1e-5, atol=1e-5)


def test_text_shards_list_their_tokens_from_their_offsets(tmp_path, monkeypatch):
    """A text shard's offset counts the tokens (not the sequences) before it; its task lists
    only the tokens of the corpus's first MAX_TOKENS_LISTED (here 5 more than the first
    file's): 5 of the second shard, none of the third. The tree merge cuts the list at the
    limit anyway, so the shard's own counters are checked here, against one walk over its
    file alone (the same batches, the same bits)."""
    seqs = id_shards(tmp_path / "ids")
    weights = FORWARD / "llama"
    model = ModelChoice(weights=weights)
    shards, _ = read_text_shards(TextChoice(ids=tmp_path / "ids"),
                                 open_forward(model, Overrides()), False)
    sizes = [sum(map(len, seqs[k * 12:(k + 1) * 12])) for k in range(3)]
    assert [s.offset for s in shards] == [0, sizes[0], sizes[0] + sizes[1]]
    assert [s.tokens for s in shards] == sizes
    monkeypatch.setattr(sparsity, "MAX_TOKENS_LISTED", sizes[0] + 5)
    task = SweepTask(cluster.TextJob(model, Overrides()), (0, 1), 0.05, None,
                     ((math.nan, 0.05),) * 2, sum(sizes))
    try:
        parts = [shard_sweep(task, s) for s in shards]
    finally:
        cluster.release_forwards()
    alone = one_walk(weights, TextChoice(ids=tmp_path / "ids" / "part-1.txt"), threshold=0.05)
    for layer in (0, 1):
        assert len(parts[0][layer].per_token) == sizes[0]
        listed = alone["layers"][layer]["inactive_per_token"]
        assert parts[1][layer].per_token.tolist() == listed[:5]
        assert parts[2][layer].per_token.tolist() == []
        assert parts[1][layer].tokens == sizes[1]  # every token counted all the same


def test_a_file_of_exactly_one_run_is_one_shard_without_a_part(tmp_path, monkeypatch):
    """SHARD_TOKENS 20, batches of 10: a file of exactly 20 tokens stays one shard, named by
    its stem, without a part number; one of 30 is cut after its first 20 (whole batches)
    into numbered parts. Each window keeps the number of its line in the file."""
    monkeypatch.setattr(inputs, "SHARD_TOKENS", 20)
    monkeypatch.setattr(walk_module, "BATCH_TOKENS", 10)
    folder = tmp_path / "ids"
    folder.mkdir()
    rows = [[(7 * i + j) % 128 for j in range(5)] for i in range(10)]
    (folder / "a.txt").write_text("".join(" ".join(map(str, r)) + "\n" for r in rows[:4]))
    (folder / "b.txt").write_text("".join(" ".join(map(str, r)) + "\n" for r in rows[4:7])
                                  + "\n" + "".join(" ".join(map(str, r)) + "\n"
                                                   for r in rows[7:]))  # line 4 is blank
    out = tmp_path / "out"
    done = capture_shards(ModelChoice(weights=FORWARD / "llama"), TextChoice(ids=folder), out,
                          InProcess())
    assert done.written == ["a", "b-part0000", "b-part0001"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(e["name"], e["part"], e["lines"], e["sequences"], e["tokens"])
            for e in manifest["shards"]] == [("a", None, [1, 4], 4, 20),
                                             ("b-part0000", 0, [1, 5], 4, 20),
                                             ("b-part0001", 1, [6, 7], 2, 10)]
    last = json.loads((out / "b-part0001" / "capture.json").read_text())
    assert [(s["line"], s["ids"]) for s in last["sequences"]] == [(6, rows[8]), (7, rows[9])]
    assert np.load(out / "b-part0001" / "layer0.npy").shape == (10, 64)


def test_capture_shards_redo_an_edited_text(tmp_path):
    """A text edited since its shard was captured, to as many tokens in as many lines, is
    not complete (the manifest holds its sha256): the rerun captures it again, and only it."""
    seqs = id_shards(tmp_path / "ids")
    model = ModelChoice(weights=FORWARD / "llama")
    text = TextChoice(ids=tmp_path / "ids")
    out = tmp_path / "out"
    first = capture_shards(model, text, out, InProcess())
    assert first.written == ["part-0", "part-1", "part-2"]
    edited = [[(t + 1) % 128 for t in s] for s in seqs[12:24]]
    (tmp_path / "ids" / "part-1.txt").write_text("".join(" ".join(map(str, s)) + "\n"
                                                         for s in edited))
    again = capture_shards(model, text, out, InProcess())
    assert again.written == ["part-1"] and again.already == ["part-0", "part-2"]
    doc = json.loads((out / "part-1" / "capture.json").read_text())
    assert [s["ids"] for s in doc["sequences"]] == edited
    layers, _ = hidden_states(open_forward(model, Overrides()), [np.array(s) for s in edited],
                              (0, 1))
    for i in (0, 1):
        np.testing.assert_allclose(np.load(out / "part-1" / f"layer{i}.npy"), layers[i],
                                   rtol=1e-5, atol=1e-5)


def test_a_manifest_of_another_command_is_refused(tmp_path):
    folder = write_shards(tmp_path / "acts", tokens(100), (0, 40, 100))
    id_shards(tmp_path / "ids")
    model, text = ModelChoice(weights=FORWARD / "llama"), TextChoice(ids=tmp_path / "ids")
    runs, captures = tmp_path / "runs", tmp_path / "captures"
    run_shards(*DENSE, folder, runs, InProcess())
    capture_shards(model, text, captures, InProcess())
    before = {d: (d / "manifest.json").read_text() for d in (runs, captures)}
    with pytest.raises(OutputError) as refused:
        capture_shards(model, text, runs, InProcess())
    assert str(refused.value) == (f"{runs}/manifest.json: not a manifest of ffncli capture "
                                  "(format ffncli-capture-shards/1); pass --force to start "
                                  "again")
    with pytest.raises(OutputError) as refused:
        run_shards(*DENSE, folder, captures, InProcess())
    assert str(refused.value) == (f"{captures}/manifest.json: not a manifest of ffncli run "
                                  "(format ffncli-run-shards/1); pass --force to start again")
    assert {d: (d / "manifest.json").read_text() for d in (runs, captures)} == before


# ---------------------------------------------------------------------------------------------
# Faults, end to end: `python -m ffncli ... --workers 2` stopped by a signal at a random point
# (the interpreter starting, the cluster starting, tasks running), or a worker killed. No
# process is left behind, no partial output, the exit code is 128 + n.

FAULT_SHARDS = 24  # of 3,000 tokens: about 10 s of work on 2 workers, past the signals


@pytest.fixture(scope="module")
def fault_inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("faults") / "acts"
    write_shards(folder, tokens(3000 * FAULT_SHARDS, d=192, seed=20),
                 tuple(range(0, 3000 * FAULT_SHARDS + 1, 3000)))
    return folder


def fault_job(command: str, acts: Path, out: Path) -> list[str]:
    args = [command, "--preset", "gpt2", "--d-model", "192", "--d-ff", "4096", "--input",
            str(acts), "--workers", "2", "--quiet"]
    return args + (["--out", str(out)] if command == "run" else ["--json"])


def assert_no_partial_output(out: Path) -> None:
    """Only complete files in ``out``: no temporary or stop file; every shard file whole."""
    if not out.exists():
        return
    for name in os.listdir(out):
        assert not name.startswith("."), name
        if name != "manifest.json":
            assert np.load(out / name).shape == (3000, 192), name
    if (out / "manifest.json").exists():
        for entry in json.loads((out / "manifest.json").read_text())["shards"]:
            assert (out / entry["name"]).is_file()


def workers_of(job: subprocess.Popen) -> list[int]:
    """The Dask worker processes of ``job`` (its process group's multiprocessing children)."""
    found = []
    for pid in processes.group(job.pid):
        with contextlib.suppress(OSError):
            if "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text():
                found.append(pid)
    return found


def shards_written(out: Path) -> int:
    try:
        return len(json.loads((out / "manifest.json").read_text())["shards"])
    except (OSError, ValueError, KeyError):
        return 0


def wait_for(job: subprocess.Popen, ready) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        assert job.poll() is None, "the job ended before the fault"
        assert time.monotonic() < deadline, "the fault's moment never came"
        time.sleep(0.02)


def at(point: str, job: subprocess.Popen, command: str, out: Path) -> None:
    """Wait for the moment the fault comes."""
    if point == "starting":  # the interpreter, ffncli's imports
        time.sleep(0.3)
    elif point == "workers-starting":  # the first worker process exists, the cluster is not up
        wait_for(job, lambda: workers_of(job))
    elif command == "run":  # tasks running: a shard is written
        wait_for(job, lambda: shards_written(out) > 0)
    else:  # tasks running: both workers are up
        wait_for(job, lambda: len(workers_of(job)) == 2)
        time.sleep(0.3)


@pytest.mark.parametrize("command, signum, point", [
    ("run", signal.SIGINT, "starting"), ("run", signal.SIGINT, "workers-starting"),
    ("run", signal.SIGTERM, "tasks-running"), ("relu-stats", signal.SIGTERM,
                                               "workers-starting"),
    ("relu-stats", signal.SIGINT, "tasks-running"),
], ids=lambda v: v.name if isinstance(v, signal.Signals) else str(v))
def test_a_signal_at_any_point_leaves_nothing_behind(fault_inputs, tmp_path, command, signum,
                                                     point):
    """SIGINT or SIGTERM as the interpreter starts, as the first worker process starts (Ctrl-C
    there was ignored: exit 0), or once tasks run (for run: once a shard is written)."""
    out = tmp_path / "out"
    job = processes.ffncli(fault_job(command, fault_inputs, out))
    at(point, job, command, out)
    job.send_signal(signum)
    stdout, stderr = job.communicate(timeout=120)
    assert (job.returncode, stdout, stderr) == (
        128 + signum, "", f"error: interrupted by {signal.Signals(signum).name}\n")
    assert processes.left_behind(job.pid) == []
    assert_no_partial_output(out)


def test_a_killed_worker_is_replaced_and_nothing_is_left(fault_inputs, tmp_path):
    """SIGKILL to a worker process once the first shard is written: Dask reruns its tasks, the
    job completes, every shard is written whole, and no process is left."""
    out = tmp_path / "out"
    job = processes.ffncli(fault_job("run", fault_inputs, out))
    wait_for(job, lambda: shards_written(out) > 0)
    workers = workers_of(job)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    stdout, stderr = job.communicate(timeout=120)
    assert (job.returncode, stderr) == (0, ""), stderr
    assert processes.left_behind(job.pid) == []
    assert_no_partial_output(out)
    assert sorted(os.listdir(out)) == ["manifest.json", *(f"part-{i:03d}.npy"
                                                          for i in range(FAULT_SHARDS))]
