"""permute-check: correct FFNs pass, the mistakes it exists for fail, with hypothesis."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st

from ffncli import checks
from ffncli.ffn import Ffn
from ffncli.spec import FfnSpec, InitSpec, ModelSpec
from ffncli.weights import random_weights

from impls import ffns

TESTS = Path(__file__).parent


@pytest.fixture
def in_tests(monkeypatch):
    monkeypatch.chdir(TESTS)


def run_check(fn, x, **kw):
    return checks.permute_check(checks.guarded(fn, "f", x.dtype), x, target="f",
                                input_shape=x.shape, **kw)


@pytest.mark.parametrize("name", ["good", "good_loop", "good_layernorm_per_token"])
def test_correct_impls_pass(name):
    x = np.random.default_rng(0).normal(size=(12, 6))
    report = run_check(getattr(ffns, name), x)
    assert report.passed, [p.counterexample for p in report.properties]


@pytest.mark.parametrize("name,fails", [
    ("norm_over_tokens", {"token_independence"}),  # permutation-equivariant, yet not per token
    ("adds_token_mean", {"token_independence"}),
    ("position_bias", {"permutation_equivariance", "token_independence", "identical_tokens"}),
    ("capacity_moe", {"token_independence"}),
])
def test_broken_impls_fail(name, fails):
    x = np.random.default_rng(0).normal(size=(12, 6))
    report = run_check(getattr(ffns, name), x)
    failed = {p.name for p in report.properties if not p.passed}
    assert not report.passed and fails <= failed, failed


def test_counterexample_names_permutation_and_values():
    x = np.random.default_rng(0).normal(size=(5, 6))
    report = run_check(ffns.position_bias, x)
    eq = report.properties[0]
    assert eq.name == "permutation_equivariance" and not eq.passed
    assert eq.counterexample.startswith("permutation reverse: output row ")
    assert "expected [" in eq.counterexample and ", got [" in eq.counterexample
    assert eq.max_abs == pytest.approx(0.04, abs=1e-12)  # rows 0 and 4 swap: bias 0.00 vs 0.04


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 40), seed=st.integers(0, 2**16),
       kind=st.sampled_from(["relu", "gelu", "swiglu", "moe"]))
def test_engine_is_position_wise_for_any_shape(n, seed, kind):
    ffn = FfnSpec(d_ff=24, activation="silu" if kind in ("swiglu", "moe") else kind,
                  gated=kind in ("swiglu", "moe"), experts=4 if kind == "moe" else 1,
                  top_k=2 if kind == "moe" else 1)
    spec = ModelSpec(name="h", d_model=8, ffn=ffn, init=InitSpec(std=0.4, seed=seed))
    engine = Ffn(random_weights(spec, np.float64), ffn.activation, chunk_tokens=7)
    x = np.random.default_rng(seed).normal(size=(n, 8))
    report = run_check(engine, x, trials=3, seed=seed)
    assert report.passed, [p.counterexample for p in report.properties]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 30), seed=st.integers(0, 2**16))
def test_broken_impls_fail_for_any_shape(n, seed):
    x = np.random.default_rng(seed).normal(size=(n, 6))
    for fn in (ffns.norm_over_tokens, ffns.adds_token_mean, ffns.position_bias):
        assert not run_check(fn, x, trials=2, seed=seed).passed, fn.__name__


def test_capacity_limited_engine_fails_and_uncapped_passes():
    for cf, passes in ((None, True), (0.5, False)):
        ffn = FfnSpec(d_ff=16, activation="relu", experts=4, top_k=1, capacity_factor=cf)
        spec = ModelSpec(name="m", d_model=8, ffn=ffn, init=InitSpec(std=0.5, seed=1))
        engine = Ffn(random_weights(spec, np.float64), "relu")
        x = np.random.default_rng(2).normal(size=(32, 8))
        assert run_check(engine, x).passed is passes


def test_3d_input_checks_batches():
    x = np.random.default_rng(0).normal(size=(3, 7, 6))
    flat = x.reshape(-1, 6)
    report = checks.permute_check(checks.guarded(ffns.good, "g", flat.dtype), flat, target="g",
                                  input_shape=x.shape)
    assert [p.name for p in report.properties][-1] == "batch_independence" and report.passed
    bad = checks.permute_check(checks.guarded(ffns.adds_token_mean, "m", flat.dtype), flat,
                               target="m", input_shape=x.shape)
    assert not {p.name: p for p in bad.properties}["batch_independence"].passed


# --- through the CLI ------------------------------------------------------------------------


def test_cli_impl_pass_and_fail_with_junit(cli, tmp_path, in_tests):
    r = cli("permute-check", "--impl", "impls.ffns:good", "--d-model", "6", "--random", "20")
    assert (r.code, r.err) == (0, "") and "position-wise: every property holds" in r.out
    junit = tmp_path / "report.xml"
    r = cli("permute-check", "--impl", "impls.ffns:position_bias", "--d-model", "6",
            "--random", "20", "--junit-xml", junit, "--json")
    assert r.code == 1
    doc = r.json()
    failed = [p["name"] for p in doc["properties"] if not p["passed"]]
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == str(len(failed))
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [p["name"] for p in doc["properties"]]
    assert [c.get("name") for c in cases if c.find("failure") is not None] == failed
    assert len(failed) == 3


def test_cli_engine_and_capacity_factor(cli):
    assert cli("permute-check", "--preset", "tiny", "--random", "16").code == 0
    ok = cli("permute-check", "--preset", "base", "--d-model", "16", "--d-ff", "32",
             "--experts", "4", "--top-k", "1", "--random", "64", "--json")
    assert ok.code == 0 and ok.json()["passed"] is True
    bad = cli("permute-check", "--preset", "base", "--d-model", "16", "--d-ff", "32",
              "--experts", "4", "--top-k", "1", "--capacity-factor", "0.5", "--random", "64",
              "--json")
    assert bad.code == 1 and bad.json()["passed"] is False


def test_cli_tolerance_flags_change_the_verdict(cli, in_tests):
    # position_bias deviates by 0.01 per position: loose enough tolerances accept it.
    args = ("permute-check", "--impl", "impls.ffns:position_bias", "--d-model", "6",
            "--random", "4", "--dtype", "float64")
    assert cli(*args).code == 1
    assert cli(*args, "--atol", "1").code == 0
    doc = cli(*args, "--json").json()
    assert {p["rtol"] for p in doc["properties"]} == {1e-7}
    doc32 = cli(*args[:-2], "--json").json()
    assert {p["atol"] for p in doc32["properties"]} == {1e-5}


@pytest.mark.parametrize("impl,message", [
    ("impls.ffns", "option --impl: expected module:function, got 'impls.ffns'"),
    ("impls.nothere:f", "option --impl: cannot import module 'impls.nothere' (No module named "
     "'impls.nothere')"),
    ("impls.ffns:missing", "option --impl: module 'impls.ffns' has no attribute 'missing'"),
    ("impls.ffns:D_FF", "option --impl: impls.ffns:D_FF is not callable"),
    ("impls.ffns:wrong_shape", "impls.ffns:wrong_shape returned shape (19, 6) for input "
     "(20, 6); expected (20, d_out)"),
    ("impls.ffns:returns_list", "impls.ffns:returns_list returned list; expected a numpy array"),
    ("impls.ffns:raises", "impls.ffns:raises raised RuntimeError: boom"),
])
def test_cli_bad_impl_exit_2(cli, in_tests, impl, message):
    r = cli("permute-check", "--impl", impl, "--d-model", "6", "--random", "20")
    assert (r.code, r.out) == (2, "")
    assert r.err.startswith("error: " + message) and r.err.count("\n") == 1, r.err


def test_cli_impl_needs_a_width(cli, in_tests):
    r = cli("permute-check", "--impl", "impls.ffns:good", "--random", "4")
    assert (r.code, r.err) == (2, "error: option --impl: give the width with --d-model N (or a "
                                  "--preset)\n")


def test_trials_flag_sets_the_number_of_permutations(cli):
    for trials, expected in (("0", 3), ("5", 8)):  # reverse, cyclic shift, swap + random
        doc = cli("permute-check", "--preset", "tiny", "--random", "6", "--trials", trials,
                  "--json").json()
        assert doc["properties"][0]["trials"] == expected
