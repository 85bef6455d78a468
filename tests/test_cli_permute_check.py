"""permute-check as a CI gate must never pass what is not position-wise (issue 39), end to end:
the command line (exit code, its --json, its --junit-xml) and ffncli.testing's
assert_position_wise, on the same FFNs (tests/impls/outliers.py, torch_shapes.py).

- one output channel far above the others (1e5, 1e6, a constant column of 1e12) widened the
  default tolerance of every channel: a leak across tokens beside it passed;
- one token checks nothing, and passed;
- a module wanting 3-D input, one returning bfloat16, one that cannot be copied to be cast, a
  normalisation over the sequence (NaN on one token alone): each gets its right answer;
- ``--impl path/to/file.py`` says the name to give; max rel means something."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from impls import outliers

from ffncli import testing
from ffncli.errors import ImplError, InputError

pytestmark = pytest.mark.slow  # among the slowest (docs/development.md)

IMPL = ("--d-model", "6", "--random", "20")


def _check(cli, tmp_path, impl, *args):
    """permute-check --impl impls.IMPL with --json and --junit-xml: the result, its JSON
    document (None on exit 2) and the JUnit testcases by name."""
    junit = tmp_path / "report.xml"
    r = cli("permute-check", "--impl", f"impls.{impl}", *args, "--json", "--junit-xml", junit)
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    return r, (r.json() if r.code != 2 else None), cases


def _failed(doc) -> list[str]:
    return [p["name"] for p in doc["properties"] if not p["passed"]]


# --- one output channel far above the others ------------------------------------------------

LEAKS = [
    # (impl, failed, start of the first failure's counterexample)
    ("massive_leaks_5pct", ["token_independence"], "token 0 alone: expected [99999."),
    ("massive_leaks_1e_3", ["token_independence"], "token 0 alone: expected [1e+06, "),
    ("constant_running_sum", ["permutation_equivariance", "token_independence",
                              "identical_tokens"],
     "permutation reverse: output row 0 (token 19) expected [1e+12, "),
]


@pytest.mark.parametrize("impl,failed,counterexample", LEAKS)
def test_a_leak_beside_an_outlier_channel_fails_the_gate(cli, in_tests, tmp_path, impl, failed,
                                                         counterexample):
    """Before, the default atol was 1e-5 times the largest |output| anywhere: 1 beside a
    channel of 1e5, 1e7 beside a column of 1e12, and each of these passed (exit 0)."""
    r, doc, cases = _check(cli, tmp_path, f"outliers:{impl}", *IMPL)
    assert (r.code, r.err) == (1, "")
    assert _failed(doc) == failed
    first = next(p for p in doc["properties"] if not p["passed"])
    assert first["counterexample"].startswith(counterexample), first["counterexample"]
    assert {(p["atol"], p["atol_scaled"]) for p in doc["properties"]} == {(1e-5, True)}
    for name in failed:  # the JUnit report carries the same failures
        failure = cases[name].find("failure")
        assert failure.get("message") == next(p["counterexample"] for p in doc["properties"]
                                              if p["name"] == name)
        assert "atol 1e-05 (s = max(1, c, m) per output column: c its largest |output|, m the " \
               "lower median of c)" in failure.text
    assert [n for n, c in cases.items() if c.find("failure") is None] == [
        p["name"] for p in doc["properties"] if p["passed"]]


def test_an_outlier_channel_alone_passes(cli, in_tests, tmp_path):
    r, doc, cases = _check(cli, tmp_path, "outliers:massive", *IMPL)
    assert (r.code, r.err, _failed(doc)) == (0, "", [])
    assert all(c.find("failure") is None for c in cases.values())


@pytest.mark.parametrize("impl,failed,counterexample", LEAKS)
def test_assert_position_wise_catches_the_leak_beside_an_outlier(impl, failed, counterexample):
    tokens = np.random.default_rng(0).normal(size=(20, 6)).astype(np.float32)
    with pytest.raises(AssertionError) as raised:
        testing.assert_position_wise(getattr(outliers, impl), tokens)
    lines = str(raised.value).splitlines()
    assert lines[0] == f"{impl} is not position-wise"
    assert [line.partition(":")[0] for line in lines[1:]] == failed
    assert testing.assert_position_wise(outliers.massive, tokens).passed


def test_the_tolerance_line_states_the_rule(cli, in_tests):
    r = cli("permute-check", "--impl", "impls.outliers:massive", *IMPL)
    assert ("tolerance: |got - expected| <= atol * s + rtol * |expected|, rtol 1.3e-06, atol "
            "1e-05\n  s = max(1, c, m) per output column: c its largest |output|, m the lower "
            "median of c\n") in r.out
    given = cli("permute-check", "--impl", "impls.outliers:massive", *IMPL, "--atol", "0.5")
    assert "tolerance: |got - expected| <= atol + rtol * |expected|, rtol 1.3e-06, atol 0.5\n" \
        "position-wise" in given.out


# --- one token ------------------------------------------------------------------------------

ONE = ("tokens: expected at least 2 tokens, got 1; with one token every permutation is the "
       "identity, and nothing would be checked")
ONE_SEQ = ("tokens: expected sequences of at least 2 tokens, got shape (3, 1, 4); with one "
           "token every permutation is the identity, and nothing would be checked")


@pytest.mark.parametrize("args,line", [
    (("--preset", "tiny", "--random", "1"), ONE),
    (("--preset", "tiny", "--input", "one.txt"), ONE),
    (("--preset", "tiny", "--input", "one.npy"), ONE),
    (("--preset", "tiny", "--input", "seqs_of_one.npy"), ONE_SEQ),
    (("--impl", "impls.ffns:good", "--d-model", "6", "--random", "1"), ONE),
])
def test_one_token_is_refused(cli, in_tests, tmp_path, args, line):
    """Before, one token passed every property: each permutation of it is the identity."""
    (tmp_path / "one.txt").write_text("1 2 3 4\n")
    np.save(tmp_path / "one.npy", np.ones((1, 4), np.float32))
    np.save(tmp_path / "seqs_of_one.npy", np.ones((3, 1, 4), np.float32))
    given = [str(tmp_path / a) if a.startswith(("one.", "seqs_")) else a for a in args]
    r = cli("permute-check", *given, "--junit-xml", tmp_path / "report.xml")
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n")
    error = ET.parse(tmp_path / "report.xml").getroot().find("testsuite/testcase/error")
    assert (error.get("type"), error.get("message")) == ("InputError", line)


def test_one_token_is_refused_by_the_library():
    torch = pytest.importorskip("torch")
    from impls import torch_ffns

    block = torch_ffns.FeedForwardBlock(4, 8)
    for tokens, line in ((torch.ones(1, 1, 4), ONE_SEQ.replace("(3, 1, 4)", "(1, 1, 4)")),
                         (np.ones((1, 4)), ONE), (np.ones(4), ONE)):
        with pytest.raises(InputError) as raised:
            testing.assert_position_wise(block, tokens)
        assert str(raised.value) == line
    assert testing.assert_position_wise(block, np.ones((2, 4))).passed


# --- the module's plumbing: 3-D input, bfloat16, a copy to cast -----------------------------


def test_a_module_wanting_3d_input_is_told_how_to_give_it(cli, in_tests, tmp_path):
    torch = pytest.importorskip("torch")
    from impls import torch_shapes

    line = ("impls.torch_shapes:Unpacks3D raised ValueError: not enough values to unpack "
            "(expected 3, got 2), on 2-D input (12, 16): it wants 3-D input; give tokens of "
            "shape (batch, seq, d_model) (to --input, a .npy of that shape)")
    r = cli("permute-check", "--impl", "impls.torch_shapes:Unpacks3D", "--random", "12")
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n")
    np.save(tmp_path / "batch.npy", np.random.default_rng(0).normal(size=(3, 4, 16)))
    ok = cli("permute-check", "--impl", "impls.torch_shapes:Unpacks3D", "--input",
             tmp_path / "batch.npy")
    assert (ok.code, ok.err) == (0, "")
    with pytest.raises(ImplError) as raised:
        testing.assert_position_wise(torch_shapes.Unpacks3D(), torch.ones(12, 16))
    assert str(raised.value) == line.replace("impls.torch_shapes:Unpacks3D", "Unpacks3D") \
        .removesuffix(" (to --input, a .npy of that shape)")  # the library's words: no option
    assert testing.assert_position_wise(torch_shapes.Unpacks3D(), torch.randn(2, 5, 16)).passed


NOTE_BF16 = ("the outputs come back in bfloat16, converted to float32: compared with "
             "bfloat16's tolerances")


@pytest.mark.parametrize("impl,code,failed", [("ReturnsBfloat16", 0, []),
                                              ("MixesInBfloat16", 1, ["token_independence"])])
def test_a_module_returning_bfloat16_is_converted(cli, in_tests, tmp_path, impl, code, failed):
    """Before: 'raised TypeError: Got unsupported ScalarType BFloat16', exit 2."""
    pytest.importorskip("torch")
    r, doc, _ = _check(cli, tmp_path, f"torch_shapes:{impl}", "--random", "12")
    assert (r.code, r.err, _failed(doc)) == (code, "", failed)
    assert doc["notes"][-1] == NOTE_BF16
    assert {p["rtol"] for p in doc["properties"]} == {1.6e-2}


def test_a_jax_function_returning_bfloat16_is_converted():
    jnp = pytest.importorskip("jax.numpy")
    from impls import jax_ffns

    report = testing.assert_position_wise(lambda x: jax_ffns.ffn(x).astype(jnp.bfloat16),
                                          np.random.default_rng(0).normal(size=(12, 8)))
    assert report.notes[-1] == NOTE_BF16


def test_a_module_that_cannot_be_copied_is_not_blamed_for_raising(cli, in_tests):
    """Before: 'option --impl: building impls.torch_shapes:Uncopyable raised TypeError: cannot
    pickle '_thread.lock' object', as if the module had failed."""
    torch = pytest.importorskip("torch")
    from impls import torch_shapes

    line = ("option --dtype float64: {} is a float32 module, which ffncli casts to float64 on "
            "a copy, and copy.deepcopy cannot copy it (TypeError: cannot pickle "
            "'_thread.lock' object); check it in float32 (--dtype float32), or cast it to "
            "float64 yourself")
    r = cli("permute-check", "--impl", "impls.torch_shapes:Uncopyable", "--random", "12",
            "--dtype", "float64")
    named = line.format("impls.torch_shapes:Uncopyable")
    assert (r.code, r.out, r.err) == (2, "", f"error: {named}\n")
    with pytest.raises(ImplError) as raised:
        testing.assert_position_wise(torch_shapes.Uncopyable(), torch.ones(4, 16,
                                                                           dtype=torch.float64))
    assert str(raised.value) == line.format("Uncopyable").replace(  # the library's words
        "option --dtype float64", "float64 tokens").replace("(--dtype float32)",
                                                            "on float32 tokens")
    assert cli("permute-check", "--impl", "impls.torch_shapes:Uncopyable", "--random",
               "12").code == 0


def test_a_normalisation_over_the_sequence_is_not_position_wise(cli, in_tests, tmp_path):
    """On one token alone its deviation is 0 and its output NaN: before, exit 2 ('returned NaN
    in output row 0 for a finite token (a call on 1 tokens)'); now the property fails, with
    the counterexample of many tokens."""
    r, doc, cases = _check(cli, tmp_path, "outliers:std_over_tokens", *IMPL)
    assert (r.code, r.err) == (1, "")
    assert _failed(doc) == ["token_independence", "identical_tokens"]
    props = {p["name"]: p for p in doc["properties"]}
    assert props["token_independence"]["counterexample"].startswith(
        "token 0 with the other tokens changed: expected [")
    assert props["identical_tokens"]["counterexample"].startswith(
        "20 copies of token 0: row 0 is [nan, ")
    assert props["identical_tokens"]["counterexample"].endswith("], for a finite token")
    assert doc["explanation"].startswith("the outputs depend on the other tokens")
    assert cases["token_independence"].find("failure") is not None
    with pytest.raises(AssertionError, match="token_independence: token 0 with the other "
                                             "tokens changed: "):
        testing.assert_position_wise(outliers.std_over_tokens,
                                     np.random.default_rng(0).normal(size=(20, 6)))


# --- --impl given a file ------------------------------------------------------------------


@pytest.mark.parametrize("impl,hint", [
    ("impls/outliers.py", "a file: give it as impls.outliers:NAME, from the current directory"),
    ("impls/outliers.py:massive", "a file: give it as impls.outliers:massive, from the current "
     "directory"),
    ("./impls/outliers.py", "a file: give it as impls.outliers:NAME, from the current "
     "directory"),
    ("/nowhere/ffn.py:f", "a path: give it as ffn:f, from the folder it is in"),
    ("../my-ffn.py", "a path: --impl takes a module's import name, not its path"),
])
def test_impl_given_a_file_path_says_the_name_to_give(cli, in_tests, impl, hint):
    r = cli("permute-check", "--impl", impl, *IMPL)
    assert (r.code, r.out, r.err) == (2, "", f"error: option --impl: expected "
                                             f"package.module:NAME, got {impl!r} ({hint})\n")


# --- max rel --------------------------------------------------------------------------------


def test_max_rel_of_an_expert_capacity_is_a_ratio_that_means_something(cli):
    """A dropped token's output is exactly 0: |got - 0| / 0 was shown as max rel 1.8e+308.
    Now a dropped token against its computed output is a relative deviation of exactly 1."""
    r = cli("permute-check", "--preset", "base", "--d-model", "16", "--d-ff", "32",
            "--experts", "4", "--top-k", "1", "--capacity-factor", "0.5", "--random", "64",
            "--json")
    assert r.code == 1
    failed = [p for p in r.json()["properties"] if not p["passed"]]
    assert failed and all(p["max_rel"] == pytest.approx(1.0) for p in failed)
    table = cli("permute-check", "--preset", "base", "--d-model", "16", "--d-ff", "32",
                "--experts", "4", "--top-k", "1", "--capacity-factor", "0.5", "--random", "64")
    assert "e+308" not in table.out


# --- real models' float32 rounding still passes ---------------------------------------------


@pytest.mark.parametrize("model,layer", [("minilm", layer) for layer in range(6)]
                         + [("smollm2", layer) for layer in (0, 1, 15, 29)])
def test_real_models_pass_in_float32(cli, model, layer):
    """One token against many differ in their last bits (the products are blocked
    differently): within the per-column tolerance on every layer tried, with a margin of
    about 5 (worst |d| / bound 0.21 on MiniLM, 0.15 on SmolLM2, on 8 and 64 tokens)."""
    from helpers import installed_models

    weights = getattr(installed_models, model)()
    r = cli("permute-check", "--weights", weights, "--layer", layer, "--random", "16", "--json")
    assert (r.code, r.err) == (0, ""), [p["counterexample"] for p in r.json()["properties"]]
    assert r.json()["dtype"] == "float32"
