"""Each option known once (issue 41 §3): --target-sparsity is one share, 0 to below 1, with one
line in every command and checked once a call; the calibration's token count stated once;
the lower layers' errors name no option, the commands' lines unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ffncli
from ffncli import base
from ffncli.analysis import calibration
from ffncli.analysis.sparsity import relu_stats
from ffncli.base.validate import share
from ffncli.compute.engine import Engine
from ffncli.compute.weights import random_weights
from ffncli.errors import InputError, OutputError
from ffncli.formats.tokens import from_array
from ffncli.jobs.choices import one_text
from ffncli.specs.spec import FfnSpec, InitSpec, ModelSpec

FORWARD = Path(__file__).parent / "data" / "forward"
LLAMA = FORWARD / "llama" / "model.safetensors"
IDS = np.random.default_rng(22).integers(0, 128, 300)


@pytest.fixture(scope="module")
def ids_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ids") / "ids.txt"
    path.write_text(" ".join(map(str, IDS)) + "\n")
    return path


def _relu_stats(cli, value: str):
    return cli("relu-stats", "--preset", "tiny", "--random", "5", "--target-sparsity", value)


def _perplexity(cli, ids: Path, value: str):
    return cli("perplexity", "--weights", LLAMA, "--ids", ids, "--ctx", "32", "--sparsify",
               "cats", "--target-sparsity", value)


# Before: relu-stats said "expected a share between 0 and 1, got 1.5" (and refused 0),
# perplexity "expected shares from 0 to below 1, got 1", a thresholds file "expected a share
# from 0 to below 1": three lines for one option.
@pytest.mark.parametrize("value, shown", [("1", "1.0"), ("1.5", "1.5"), ("-0.1", "-0.1"),
                                          ("1e9", "1000000000.0"), ("-1", "-1.0")])
@pytest.mark.parametrize("command", ["relu-stats", "perplexity"])
def test_one_line_for_a_share_out_of_range_in_every_command(cli, ids_file, command, value,
                                                           shown):
    r = _relu_stats(cli, value) if command == "relu-stats" else _perplexity(cli, ids_file, value)
    assert (r.code, r.out, r.err) == (2, "", "error: option --target-sparsity: expected a share "
                                             f"from 0 to below 1, got {shown}\n")


@pytest.mark.parametrize("value, expected", [(0, 0.0), (-0.0, 0.0), (0.5, 0.5), (0.999, 0.999)])
def test_a_share_is_from_0_to_below_1(value, expected):
    got = share("s", value)
    assert got == expected and str(got) == str(expected)  # -0 is 0


@pytest.mark.parametrize("value", [1, 1.0, -1e-9, float("nan"), float("inf"), True, "0.5",
                                   None])
def test_what_is_not_a_share(value):
    with pytest.raises(InputError, match=r"^s: expected a share from 0 to below 1, got "):
        share("s", value)


def test_relu_stats_takes_0_as_perplexity_does(cli):
    """0 is a target in both commands: T is the 0-quantile, the smallest |act| on the first
    tokens (before, relu-stats refused it: "expected a share between 0 and 1, got 0.0")."""
    r = cli("relu-stats", "--preset", "gpt2", "--d-model", "48", "--d-ff", "64", "--random",
            "50", "--target-sparsity", "0", "--json")
    assert (r.code, r.err) == (0, "")
    doc = r.json()
    assert "--target-sparsity 0:" in doc["definition"]
    assert min(doc["inactive_per_token"]) >= 0 and sum(doc["inactive_per_token"]) >= 1


def test_target_0_is_the_smallest_magnitude_against_numpy():
    """The independent oracle: silu written out in NumPy; T at target 0 is min |silu(x W +
    b)| over the tokens, and exactly the entries at that minimum count as inactive."""
    spec = ModelSpec(name="s", d_model=10, ffn=FfnSpec(d_ff=24, activation="silu"),
                     init=InitSpec(std=0.5, seed=4))
    p = random_weights(spec, np.float64)
    x = np.random.default_rng(5).normal(size=(60, 10))
    r = relu_stats(Engine(p, "silu", chunk_tokens=16), from_array(x), target_sparsity=0)
    z = x @ p.w1 + p.b1
    a = np.abs(z / (1 + np.exp(-z)))
    assert r.rule.threshold == pytest.approx(a.min(), rel=1e-12, abs=1e-300)
    assert sum(r.inactive_per_token) == int((a <= r.rule.threshold).sum())


def test_perplexity_checks_its_shares_once_a_call(cli, ids_file, monkeypatch):
    """One check of the rule and its shares in one perplexity call (before: three, in the
    command, run_perplexity and plan_job)."""
    import ffncli.jobs.perplexity as job

    calls, check = [], job.check_targets

    def counted(rule, targets, *words):
        calls.append((rule, tuple(targets)))
        return check(rule, targets, *words)

    monkeypatch.setattr(job, "check_targets", counted)
    r = _perplexity(cli, ids_file, "0,0.5")
    assert (r.code, r.err) == (0, "")
    assert calls == [("cats", (0.0, 0.5))]
    calls.clear()
    with pytest.raises(InputError, match="^option --target-sparsity: expected a share from 0 "
                                         "to below 1, got 1.5$"):
        job.run_perplexity(ffncli.jobs.choices.ModelChoice(weights=LLAMA),
                           ffncli.jobs.choices.TextChoice(ids=ids_file), rule="cats",
                           targets=[1.5])
    assert calls == [("cats", (1.5,))]


@pytest.mark.parametrize("args", [
    ("relu-stats", "--weights", LLAMA),
    ("capture", "--weights", LLAMA, "--out", "out"),
    ("perplexity", "--weights", LLAMA, "--ctx", "32"),
])
def test_text_or_ids_one_line_in_every_command(cli, ids_file, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    r = cli(*args, "--text", ids_file, "--ids", ids_file)
    assert (r.code, r.out, r.err) == (2, "", "error: give --text or --ids, not both\n")
    with pytest.raises(InputError, match="^give --text or --ids, not both$"):
        one_text(ids_file, ids_file)


def test_the_calibration_count_is_stated_once(cli):
    """ffncli.base states it (NumPy-free, so the help can say it); the calibration reads it."""
    assert calibration.CALIBRATION_TOKENS is base.CALIBRATION_TOKENS
    r = cli("perplexity", "--help")
    assert r.code == 0
    assert f"first {base.CALIBRATION_TOKENS:,} tokens" in " ".join(r.out.replace("│", " ")
                                                                   .split())


# ---------------------------------------------------------------------------------------------
# The library's lines name its parameters; the command's stay as they were.


@pytest.mark.parametrize("layer, library, command", [
    (-1, "layer: expected a whole number >= 0, got -1",
     "option --layer: expected a whole number >= 0, got -1"),
    (1, "layer 1: random and .npz weights are one FFN (layer 0); a layer picks one of a "
        "checkpoint",
     "option --layer: picks a layer of a checkpoint (--weights or --model); random and .npz "
     "weights are one FFN, got --layer 1"),
])
def test_a_bad_layer_in_the_library_and_on_the_command_line(cli, layer, library, command):
    with pytest.raises(InputError) as caught:
        ffncli.build_ffn(ffncli.load_spec(preset="tiny"), layer=layer)
    assert str(caught.value) == library and "--" not in str(caught.value)
    r = cli("run", "--preset", "tiny", "--random", "3", "--layer", str(layer))
    assert (r.code, r.out, r.err) == (2, "", f"error: {command}\n")


def test_a_full_folder_in_the_library_and_on_the_command_line(cli, ids_file, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.txt").write_text("x")
    with pytest.raises(OutputError) as caught:
        ffncli.capture_inputs(LLAMA, out, ids=ids_file)
    assert str(caught.value) == f"out: {out} is not empty (1 entries); pass force=True to " \
                                "write into it"
    r = cli("capture", "--weights", LLAMA, "--ids", ids_file, "--out", out)
    assert (r.code, r.out, r.err) == (2, "", f"error: option --out: {out} is not empty (1 "
                                             "entries); pass --force to write into it\n")
    assert sorted(p.name for p in out.iterdir()) == ["kept.txt"]


# ---------------------------------------------------------------------------------------------
# The same options on one file and on shards: relu-stats --thresholds (before: refused on
# shards, "option --thresholds: one text file, in this process (not with many files,
# --workers or --scheduler)").


@pytest.fixture(scope="module")
def saved(tmp_path_factory, ids_file) -> Path:
    """A thresholds file of two cats targets, as perplexity --save-thresholds writes it."""
    from ffncli.cli import run

    path = tmp_path_factory.mktemp("saved") / "t.json"
    assert run(["perplexity", "--weights", str(LLAMA), "--ids", str(ids_file), "--ctx", "32",
                "--sparsify", "cats", "--target-sparsity", "0.25,0.5", "--save-thresholds",
                str(path), "--quiet"]) == 0
    return path


def _shards(tmp_path: Path, ids_file: Path) -> str:
    (tmp_path / "many").mkdir()
    (tmp_path / "many" / "a.txt").write_text(ids_file.read_text())
    return f"{tmp_path}/many/*.txt"


@pytest.mark.parametrize("more", [(), ("--layer", "1")])
def test_thresholds_on_shards_as_in_one_process(cli, ids_file, saved, tmp_path, more):
    args = ("relu-stats", "--weights", LLAMA, "--thresholds", saved, "--target-sparsity",
            "0.5", "--json", "--quiet", *more)
    one = cli(*args, "--ids", ids_file)
    many = cli(*args, "--ids", _shards(tmp_path, ids_file))
    assert (one.code, one.err, many.code, many.err) == (0, "", 0, "")
    a, b = one.json(), many.json()
    assert (b["shards"], b["skipped"]) == (1, [])
    assert [x["layer"] for x in b["layers"]] == ([0, 1] if not more else [1])
    assert {k: b[k] for k in a if k != "source"} == {k: a[k] for k in a if k != "source"}
    # one shard: the very walk of one process
    file = {e["target"]: e for e in json.loads(saved.read_text())["entries"]}[0.5]
    assert [x["threshold"] for x in b["layers"]] == \
        [c["threshold"] for c in file["layers"] if not more or c["layer"] == 1]


@pytest.mark.parametrize("more, line", [
    (("--threshold", "0.1"), "option --thresholds replaces --threshold: give one or the other"),
    (("--target-sparsity", "0.3"), "{saved}: relu-stats applies one cats entry; the file's "
                                   "cats targets: 0.25, 0.5; pick one with --target-sparsity"),
    (("--report", "{saved}"), "option --report: {saved} is an input of this command (the "
                              "--thresholds); choose another path"),
])
def test_thresholds_refused_alike_on_one_file_and_on_shards(cli, ids_file, saved, tmp_path,
                                                            more, line):
    more = tuple(m.format(saved=saved) for m in more)
    expected = f"error: {line.format(saved=saved)}\n"
    for ids in (ids_file, _shards(tmp_path, ids_file)):
        r = cli("relu-stats", "--weights", LLAMA, "--ids", ids, "--thresholds", saved, *more)
        assert (r.code, r.out, r.err) == (2, "", expected), ids
