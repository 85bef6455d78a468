"""``perplexity`` over shards (jobs/shards/: perplexity_shards, shard_perplexity): one
document's windows shared out in runs of whole forward batches, the thresholds calibrated once
on the driver and sent with the tasks, the sums merged. Against one walk in one process: every
integer count and every cut equal, the float sums (NLL, KL, cosines, FFN errors) within float64
summation rounding; on a real Dask LocalCluster within the BLAS rounding of test_shards.py."""

from __future__ import annotations

import logging
from pathlib import Path

import distributed
import numpy as np
import pytest

from ffncli.analysis.calibration import first_batches
from ffncli.analysis.perplexity import Protocol
from ffncli.formats.text import Sequences
from ffncli.jobs import perplexity as job
from ffncli.jobs import variants as variant_walk
from ffncli.jobs.choices import ModelChoice, TextChoice
from ffncli.jobs.perplexity import Asked, Variant, perplexity
from ffncli.jobs.resolve import open_forward
from ffncli.jobs.shards import inputs
from ffncli.jobs.shards.drivers import perplexity_shards
from ffncli.jobs.shards.pool import DaskPool, InProcess
from ffncli.jobs.thresholds import thresholds_text
from ffncli.specs.spec import Overrides

pytestmark = pytest.mark.slow  # among the slowest (docs/development.md)

FORWARD = Path(__file__).parent / "data" / "forward"
# 9,000 ids: with --ctx 32, 281 windows in the walk's batches of 4,096 tokens (128, 128 and 25
# windows); SHARD_TOKENS of 4,096 below makes each batch a shard of its own
IDS = np.random.default_rng(7).integers(0, 128, 9000)
VARIANTS = (("cats", 0.5), ("teal", 0.4), ("topk", 0.25))


@pytest.fixture(scope="module")
def client():
    """Two worker processes whose BLAS runs as this process's does (see test_shards.py)."""
    import dask

    environ = {"MALLOC_TRIM_THRESHOLD_": 65536}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}), \
            distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                     dashboard_address=None, silence_logs=logging.ERROR) as lc, \
            distributed.Client(lc) as c:
        yield c


@pytest.fixture(autouse=True)
def small_shards(monkeypatch):
    monkeypatch.setattr(inputs, "SHARD_TOKENS", 4096)  # read on the driver only


@pytest.fixture(scope="module")
def ids_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ids") / "ids.txt"
    path.write_text(" ".join(map(str, IDS)) + "\n")
    return path


def one_walk(weights: Path, ids: Path, asked: Asked):
    """The single process: jobs.perplexity's one walk (no shards)."""
    return job.run_perplexity(ModelChoice(weights=weights), TextChoice(ids=ids),
                              ctx=asked.ctx, stride=asked.stride, score=asked.score,
                              rule=asked.rule, targets=asked.targets)


def assert_equal_results(a, b, exact: bool = True) -> None:
    """The cuts (calibrated on the driver) always equal. ``exact`` (this process, the same
    BLAS calls): every integer count equal, hence the ratios of counts (achieved sparsity,
    savings, same top-1), and the float sums (NLL, KL, cosines, FFN errors: added in another
    order) within 1e-12. Else (a cluster, whose workers' BLAS may round a product's last bit
    differently: see test_shards.py's assert_same) the ratios and sums within 1e-5."""
    assert (a.tokens, a.windows, a.dropped, a.tokens_scored, a.layers) == \
        (b.tokens, b.windows, b.dropped, b.tokens_scored, b.layers)
    assert a.calibration == b.calibration

    def same(x, y, counted: bool) -> None:
        if exact and counted:
            assert x == y
        else:
            assert x == pytest.approx(y, rel=1e-12 if exact else 1e-5, abs=0 if exact else 1e-5)

    if a.perplexity is not None:
        same(a.perplexity, b.perplexity, False)
        same(a.nll_mean, b.nll_mean, False)
    assert len(a.variants) == len(b.variants)
    for v, w in zip(a.variants, b.variants, strict=True):
        assert v.label == w.label and v.macs == w.macs
        assert [c.cut for c in v.layers] == [c.cut for c in w.layers]
        for c, d in zip(v.layers, w.layers, strict=True):
            for name in ("sparsity", "sparsity_in", "sparsity_down", "macs_saved"):
                x, y = getattr(c, name), getattr(d, name)
                assert (x is None) == (y is None), name
                if x is not None:
                    same(x, y, True)
            same(c.ffn_error, d.ffn_error, False)
        for name in ("sparsity", "macs_saved", "top1", "perplexity", "nll_mean", "kl_mean",
                     "token_cosine", "sentence_cosine", "worst_sentence"):
            x, y = getattr(v, name), getattr(w, name)
            assert (x is None) == (y is None), name
            if x is not None:
                same(x, y, name in ("sparsity", "macs_saved", "top1"))


@pytest.mark.parametrize(("case", "asked"), [
    ("gpt2", Asked(ctx=32, rule="cats", targets=(0.25, 0.5))),
    ("llama", Asked(ctx=32, score="all", rule="teal", targets=(0.4,))),
    ("llama", Asked(ctx=32, stride=24, rule="cats", targets=(0.5,))),  # a calibration walk
    ("gpt2", Asked(ctx=32)),  # dense only
], ids=["gpt2-cats", "llama-teal-all", "llama-stride", "gpt2-dense"])
def test_shards_in_this_process_equal_one_walk(case, asked, ids_file):
    weights = FORWARD / case / "model.safetensors"
    whole = one_walk(weights, ids_file, asked)
    out = perplexity_shards(ModelChoice(weights=weights), TextChoice(ids=ids_file),
                            InProcess(), asked)
    assert out.shards == 3
    assert_equal_results(out.result, whole)
    # stride: 375 windows, the first scoring 31 tokens, each later one 24, the last (ids
    # 8976..8999, as Hugging Face's recipe ends) 16: every token but the first
    assert whole.tokens_scored == (31 + 373 * 24 + 16 if asked.stride else
                                   281 * (31 if asked.score == "all" else 15))


def test_shards_on_the_cluster_equal_one_walk(ids_file, client, tmp_path):
    """Three shards on two workers; the thresholds saved are the single process's."""
    weights = FORWARD / "llama" / "model.safetensors"
    asked = Asked(ctx=32, rule="cats", targets=(0.25, 0.5))
    whole = one_walk(weights, ids_file, asked)
    saved = tmp_path / "t.json"
    out = perplexity_shards(ModelChoice(weights=weights), TextChoice(ids=ids_file),
                            DaskPool(client), Asked(ctx=32, rule="cats", targets=(0.25, 0.5),
                                                    save=saved))
    assert out.shards == 3 and not saved.exists()  # the command writes it, with --report
    saved.write_text(thresholds_text(out.result.thresholds))
    assert [[c.cut for c in v.layers] for v in out.result.variants] == \
        [[c.cut for c in v.layers] for v in whole.variants]  # calibrated once, on the driver
    assert_equal_results(out.result, whole, exact=False)
    applied = perplexity_shards(ModelChoice(weights=weights), TextChoice(ids=ids_file),
                                DaskPool(client), Asked(ctx=32, thresholds=saved))
    assert [v.perplexity for v in applied.result.variants] == pytest.approx(
        [v.perplexity for v in whole.variants], rel=1e-5)
    assert applied.result.calibration is None  # nothing calibrated: the file's cuts


def test_an_encoders_lines_are_shared_out(tmp_path, client):
    """An encoder's lines, as shards: the cosines' sums merge, the worst line is the worst of
    all shards."""
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(" ".join(map(str, IDS[i:i + 40])) + "\n"
                             for i in range(0, 6000, 40)))  # 150 lines, 2 batches
    weights = FORWARD / "bert" / "model.safetensors"
    asked = Asked(rule="cats", targets=(0.5,))
    here = perplexity_shards(ModelChoice(weights=weights), TextChoice(ids=lines), InProcess(),
                             asked)
    whole = one_walk(weights, lines, asked)
    assert here.shards == 2 and here.result.kind == "encoder"
    assert_equal_results(here.result, whole)
    there = perplexity_shards(ModelChoice(weights=weights), TextChoice(ids=lines),
                              DaskPool(client), asked)
    assert_equal_results(there.result, whole, exact=False)


def test_calibration_is_that_of_the_first_whole_batches():
    """The driver's calibration walk takes whole batches, so its first 4,096 tokens are
    computed in the rows the evaluation computes them in: the cuts equal the ones gathered
    from the dense pass, with a --ctx that does not divide 4,096 too."""
    with open_forward(ModelChoice(weights=FORWARD / "gpt2" / "model.safetensors"),
                      Overrides()) as m:
        doc = Sequences((IDS.astype(np.int64),), (1,), "ids", "0" * 64)
        p = job.plan(m, doc, Protocol(30), variants=[Variant("cats", 0.5)])
        assert [len(s) for s in first_batches(p.sequences)[0]] == [30] * 272  # 2 batches
        cuts = variant_walk.calibrate(m, p.calibrating, p.variants, p.layers)[0].cuts
        gathered = perplexity(m, doc, Protocol(30), variants=[Variant("cats", 0.5)])
    assert cuts == {c.layer: c.cut for c in gathered.variants[0].layers}


# ---------------------------------------------------------------------------------------------
# The command.


def test_cli_scheduler_and_workers_equal_one_process(cli, ids_file, client):
    args = ("perplexity", "--weights", FORWARD / "gpt2" / "model.safetensors", "--ids",
            ids_file, "--ctx", "32", "--sparsify", "topk", "--target-sparsity", "0.5",
            "--json")
    here = cli(*args)
    assert here.code == 0, here.err
    there = cli(*args, "--scheduler", client.scheduler.address)
    assert there.code == 0, there.err
    a, b = here.json(), there.json()
    local = cli(*args, "--workers", "1")
    assert local.code == 0, local.err
    for c in (b, local.json()):  # within the cluster's BLAS rounding (assert_equal_results)
        assert c["tokens_scored"] == a["tokens_scored"] == 281 * 15
        assert c["perplexity"] == pytest.approx(a["perplexity"], rel=1e-5)
        assert c["variants"][0]["perplexity"] == pytest.approx(a["variants"][0]["perplexity"],
                                                               rel=1e-5)
        assert c["variants"][0]["top1_agreement"] == pytest.approx(
            a["variants"][0]["top1_agreement"], abs=1e-3)


def test_cli_refuses_many_files_and_skip_bad(cli, ids_file, tmp_path):
    w = FORWARD / "gpt2" / "model.safetensors"
    r = cli("perplexity", "--weights", w, "--ids", f"{tmp_path}/*.txt", "--workers", "1")
    assert (r.code, r.err) == (2, f"error: option --ids: perplexity scores one document, got "
                                  f"the glob or folder {tmp_path}/*.txt; give one file "
                                  "(--workers and --scheduler share out its windows)\n")
    r = cli("perplexity", "--weights", w, "--text", tmp_path)
    assert (r.code, r.err) == (2, f"error: option --text: perplexity scores one document, got "
                                  f"the glob or folder {tmp_path}; give one file (--workers "
                                  "and --scheduler share out its windows)\n")
    r = cli("perplexity", "--weights", w, "--ids", ids_file, "--skip-bad")
    assert (r.code, r.err) == (2, "error: option --skip-bad: perplexity's shards are the "
                                  "windows of one document, and none is left out\n")
