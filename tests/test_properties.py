"""permute-check's properties (analysis/properties.py): correct FFNs pass, the mistakes it
exists for fail, with hypothesis."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.checks import run_check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from impls import ffns, outliers

from ffncli.analysis import guard, properties
from ffncli.compute.engine import Engine
from ffncli.compute.weights import random_weights
from ffncli.errors import InputError
from ffncli.specs.spec import FfnSpec, InitSpec, ModelSpec


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
    eq = report.properties[1]
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
    engine = Engine(random_weights(spec, np.float64), ffn.activation, chunk_tokens=7)
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
        engine = Engine(random_weights(spec, np.float64), "relu")
        x = np.random.default_rng(2).normal(size=(32, 8))
        assert run_check(engine, x).passed is passes


def test_3d_input_checks_batches():
    x = np.random.default_rng(0).normal(size=(3, 7, 6))
    flat = x.reshape(-1, 6)
    report = properties.permute_check(guard.guarded(ffns.good, "g", flat.dtype), flat, target="g",
                                  input_shape=x.shape)
    assert [p.name for p in report.properties][-1] == "batch_independence" and report.passed
    bad = properties.permute_check(guard.guarded(ffns.adds_token_mean, "m", flat.dtype), flat,
                               target="m", input_shape=x.shape)
    assert not {p.name: p for p in bad.properties}["batch_independence"].passed


@pytest.mark.parametrize("name,fails", [
    ("massive", set()),  # a channel of 1e6, position-wise
    ("massive_leaks_5pct", {"token_independence"}),
    ("massive_leaks_1e_3", {"token_independence"}),
    ("constant_running_sum", {"permutation_equivariance", "token_independence",
                              "identical_tokens"}),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_outlier_channel_does_not_hide_a_leak(name, fails, dtype):
    """The default atol was scaled by the largest |output| anywhere (1e-5 * 1e6 = 10): each
    leak beside the outlier channel passed. Now each column has its own scale."""
    x = np.random.default_rng(0).normal(size=(16, 6)).astype(dtype)
    report = run_check(getattr(outliers, name), x)
    assert {p.name for p in report.properties if not p.passed} == fails
    assert {(p.atol, p.atol_scaled) for p in report.properties} == {
        (1e-5 if dtype == np.float32 else 1e-7, True)}


def test_nan_on_a_later_call_fails_the_property_with_a_finite_counterexample_first():
    x = np.random.default_rng(0).normal(size=(10, 6))
    report = run_check(outliers.std_over_tokens, x)
    failed = _failed(report)
    assert list(failed) == ["token_independence", "identical_tokens"]
    assert failed["token_independence"].startswith("token 0 with the other tokens changed: ")
    assert failed["identical_tokens"].startswith("10 copies of token 0: row 0 is [nan")
    ti = {p.name: p for p in report.properties}["token_independence"]
    assert ti.max_abs == np.inf  # the NaN of one token alone, counted but not shown first


@pytest.mark.parametrize("shape,line", [
    ((1, 6), "tokens: expected at least 2 tokens, got 1; "),
    ((0, 6), "tokens: expected at least 2 tokens, got 0; "),
    ((4, 1, 6), "tokens: expected sequences of at least 2 tokens, got shape (4, 1, 6); "),
])
def test_fewer_than_two_tokens_are_refused_before_any_call(shape, line):
    calls = []

    def f(X):
        calls.append(X.shape)
        return ffns.good(X)

    x = np.ones(shape)
    with pytest.raises(InputError) as raised:
        properties.permute_check(guard.guarded(f, "f", x.dtype), x.reshape(-1, 6), target="f",
                                 input_shape=shape)
    assert str(raised.value) == line + ("with one token every permutation is the identity, "
                                        "and nothing would be checked")
    assert calls == []


# --- through the CLI ------------------------------------------------------------------------


def test_cli_engine_and_capacity_factor(cli):
    assert cli("permute-check", "--preset", "tiny", "--random", "16").code == 0
    ok = cli("permute-check", "--preset", "base", "--d-model", "16", "--d-ff", "32",
             "--experts", "4", "--top-k", "1", "--random", "64", "--json")
    assert ok.code == 0 and ok.json()["passed"] is True
    bad = cli("permute-check", "--preset", "base", "--d-model", "16", "--d-ff", "32",
              "--experts", "4", "--top-k", "1", "--capacity-factor", "0.5", "--random", "64",
              "--json")
    assert bad.code == 1 and bad.json()["passed"] is False


@pytest.mark.slow
def test_cli_tolerance_flags_change_the_verdict(cli, in_tests):
    # position_bias deviates by 0.01 per position: loose enough tolerances accept it.
    args = ("permute-check", "--impl", "impls.ffns:position_bias", "--d-model", "6",
            "--random", "4", "--dtype", "float64")
    assert cli(*args).code == 1
    assert cli(*args, "--atol", "1").code == 0
    doc = cli(*args, "--json").json()
    assert {p["rtol"] for p in doc["properties"]} == {1e-7}
    assert {(p["atol"], p["atol_scaled"]) for p in doc["properties"]} == {(1e-7, True)}
    # The default atol, 1e-5 for values near 1, is scaled per output column; one given is not.
    doc32 = cli(*args[:-2], "--json").json()
    assert {(p["atol"], p["atol_scaled"]) for p in doc32["properties"]} == {(1e-5, True)}
    given = cli(*args, "--atol", "1", "--json").json()
    assert {(p["atol"], p["atol_scaled"]) for p in given["properties"]} == {(1.0, False)}


def test_cli_impl_needs_a_width(cli, in_tests):
    r = cli("permute-check", "--impl", "impls.ffns:good", "--random", "4")
    assert (r.code, r.err) == (2, "error: option --impl: give the width with --d-model N (or a "
                                  "--preset)\n")


def test_trials_flag_sets_the_number_of_permutations(cli):
    for trials, expected in (("0", 3), ("5", 8)):  # reverse, cyclic shift, swap + random
        doc = cli("permute-check", "--preset", "tiny", "--random", "6", "--trials", trials,
                  "--json").json()
        assert doc["properties"][1]["trials"] == expected


# --- the core's sampling, pinned (each of these catches a one-line mutation) ----------------


@pytest.mark.parametrize("n,k", [(1, 8), (8, 8), (9, 8), (65, 64), (200, 64), (1000, 8)])
def test_sample_tokens_keeps_the_ends_and_the_middle(n, k):
    for seed in range(5):
        s = properties._sample_tokens(n, k, np.random.default_rng(seed))
        if n <= k:
            assert s == list(range(n))
        else:
            assert {0, n // 2, n - 1} <= set(s) and s == sorted(set(s))
            assert k - 3 <= len(s) <= k and 0 <= s[0] and s[-1] < n


def _multiset(a: np.ndarray) -> list[bytes]:
    return sorted(row.tobytes() for row in a)


def _wrong_on(x: np.ndarray, token: int, when) -> guard.Fn:
    """``good``, plus 0.5 on the rows equal to ``x[token]`` in the calls where ``when(X)``."""
    def f(X):
        y = ffns.good(X)
        if when(X):
            y[(X == x[token]).all(axis=1)] += 0.5
        return y
    return f


def _failed(report) -> dict[str, str]:
    return {p.name: p.counterexample for p in report.properties if not p.passed}


def test_each_property_can_fail_alone():
    """A function that breaks exactly one property fails that one and passes the others:
    no property is a constant, none is checked on the wrong calls."""
    x = np.random.default_rng(3).normal(size=(12, 6))
    key = _multiset(x)
    cases = {
        # wrong only on permutations of x, at token 5
        "permutation_equivariance": _wrong_on(x, 5, lambda X: X.shape == x.shape and not
                                              np.array_equal(X, x) and _multiset(X) == key),
        # wrong only on one token at a time
        "token_independence": lambda X: ffns.good(X) * (2 if X.shape[0] == 1 else 1),
        # the k-th copy of a token gets 0.5 k
        "identical_tokens": lambda X: ffns.good(X) + 0.5 * np.array(
            [(X[:i] == X[i]).all(axis=1).sum() for i in range(X.shape[0])])[:, None],
    }
    prefixes = {"permutation_equivariance": "permutation reverse: output row 6 (token 5) ",
                "token_independence": "token 0 alone: expected [",
                "identical_tokens": "12 copies of token 0: row 11 "}
    for name, f in cases.items():
        report = run_check(f, x)
        failed = _failed(report)
        assert list(failed) == [name], (name, failed)
        assert failed[name].startswith(prefixes[name]), failed[name]
        prop = {p.name: p for p in report.properties}[name]
        assert prop.max_abs >= 0.5 - 1e-9 and prop.max_rel > 0.05
    eq = {p.name: p for p in run_check(cases["permutation_equivariance"], x).properties}
    assert (eq["permutation_equivariance"].worst_token,
            eq["permutation_equivariance"].max_abs) == (5, pytest.approx(0.5, abs=1e-9))


@pytest.mark.parametrize("n,token", [(10, None), (8, 7), (100, 99), (100, 0)])
def test_other_tokens_changed_can_fail_alone(n, token):
    """Right on the input, on its permutations and on one token; wrong when the other tokens
    change (on every token, or on one): only the second half of token_independence sees it."""
    x = np.random.default_rng(4).normal(size=(n, 6))
    key = _multiset(x)

    def changed(X):
        return X.shape == x.shape and _multiset(X) != key

    if token is None:
        def f(X):
            return ffns.good(X) + (0.5 if changed(X) else 0.0)
    else:
        f = _wrong_on(x, token, changed)
    report = run_check(f, x)
    failed = _failed(report)
    assert list(failed) == ["token_independence"]
    assert failed["token_independence"].startswith(
        f"token {token or 0} with the other tokens changed: ")
    if token is not None:
        assert report.properties[2].worst_token == token


def test_duplicate_pair_can_fail_alone():
    """Identical when all tokens are the same, different for one duplicated pair."""
    x = np.random.default_rng(5).normal(size=(9, 6))

    def f(X):
        y = ffns.good(X)
        if len(_multiset(X)) > 1 and len(set(_multiset(X))) > 1:
            y[-1] += 0.5 * (X[-1] == X[0]).all()
        return y

    failed = _failed(run_check(f, x))
    assert list(failed) == ["identical_tokens"]
    assert failed["identical_tokens"].startswith("token 8 set equal to token 0: output [")


def test_batch_independence_can_fail_alone():
    x3 = np.random.default_rng(6).normal(size=(2, 7, 6))
    flat = x3.reshape(-1, 6)

    def f(X):
        return ffns.good(X) + (0.5 if X.shape[0] == 7 else 0.0)  # a batch row on its own

    report = properties.permute_check(guard.guarded(f, "f", flat.dtype), flat, target="f",
                                  input_shape=x3.shape)
    failed = _failed(report)
    assert list(failed) == ["batch_independence"]
    assert failed["batch_independence"].startswith("batch row 0 alone: token ")


@pytest.mark.parametrize("n,token", [(200, 0), (200, 100), (200, 199), (12, 7), (2, 1)])
def test_token_independence_sees_the_ends(n, token):
    """Wrong on one token when it is alone: the check must try that token, and name it."""
    x = np.random.default_rng(7).normal(size=(n, 6))
    f = _wrong_on(x, token, lambda X: X.shape[0] > 1)
    report = run_check(f, x, trials=1)
    assert list(_failed(report)) == ["token_independence"]
    prop = {p.name: p for p in report.properties}["token_independence"]
    assert (prop.worst_token, prop.max_abs) == (token, pytest.approx(0.5, abs=1e-9))


# --- what the guard's copies and the tolerances given change --------------------------------


def test_buffer_reuse_cannot_hide_a_failure():
    """Without the copy, every call on the input's shape would return the very array `y` is,
    and 'the other tokens changed' would compare it with itself."""
    x = np.random.default_rng(4).normal(size=(10, 6))
    key = _multiset(x)
    buffer = np.empty((10, 6))

    def f(X):
        y = ffns.good(X) + (0.5 if X.shape == x.shape and _multiset(X) != key else 0.0)
        if X.shape != x.shape:
            return y
        buffer[...] = y
        return buffer

    assert list(_failed(run_check(f, x))) == ["token_independence"]


def test_tolerances_given_are_used():
    """One token alone is off by 1% of its value: rtol 0.02 accepts it, the default does not."""
    x = np.random.default_rng(10).normal(size=(6, 6))

    def f(X):
        return ffns.good(X) * (1.01 if X.shape[0] == 1 else 1.0)

    assert not run_check(f, x).passed
    loose = run_check(f, x, rtol=0.02, atol=0.0)
    assert loose.passed and {(p.rtol, p.atol) for p in loose.properties} == {(0.02, 0.0)}


@pytest.mark.slow
def test_a_float16_result_is_compared_with_float16_s_tolerance():
    """A correct FFN that rounds its result to float16 (autocast, `.half()`): one token alone
    and all at once round alike but for a last bit, which a float32 tolerance called a
    failure (exit 1). Mixing positions beyond float16's rounding still fails."""
    rng = np.random.default_rng(3)
    w1, w2 = rng.normal(0, 0.2, (32, 128)), rng.normal(0, 0.1, (128, 32))
    x = rng.normal(size=(2000, 32)).astype(np.float32)

    def rounds(X):  # one token alone off in its last float32 bits, as plain matmul is
        y = np.maximum(0, X @ w1.astype(np.float32)) @ w2.astype(np.float32)
        return (y * (1 + 2e-7 * (X.shape[0] == 1))).astype(np.float16)

    def mixes(X):
        return (np.maximum(0, X @ w1) @ w2 + 0.01 * X.mean(axis=0)).astype(np.float16)

    report = run_check(rounds, x)
    assert report.passed, [p.counterexample for p in report.properties]
    assert report.notes == ("the outputs come back in float16: compared with float16's "
                            "tolerances",)
    assert {p.rtol for p in report.properties} == {1e-3} and report.dtype == "float32"
    assert not run_check(mixes, x).passed


def test_tokens_none_of_them_finite_are_refused(cli, in_tests, tmp_path):
    """NaN equals NaN in the comparisons: on NaN tokens alone, a function mixing every
    position passed (through the API, and the CLI with --allow-nonfinite)."""
    nan = np.full((8, 6), np.nan)
    with pytest.raises(InputError, match="NaN or infinity in every token"):
        run_check(ffns.adds_token_mean, nan)
    np.save(tmp_path / "nan.npy", nan)
    r = cli("permute-check", "--impl", "impls.ffns:adds_token_mean", "--d-model", "6",
            "--input", tmp_path / "nan.npy", "--allow-nonfinite")
    assert (r.code, r.err) == (2, "error: tokens: NaN or infinity in every token; with no "
                                  "finite token every property would hold whatever the "
                                  "function does\n")
