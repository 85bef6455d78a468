"""permute-check on the FFNs people write (analysis/frameworks.py): real PyTorch modules (the
lesson's FeedForwardBlock, SwiGLU, mixtures of experts, a dozen broken ones), JAX functions and
Flax modules. Each gets its verdict and counterexample three ways: the command line (its
--json and its --junit-xml), and ffncli.testing.assert_position_wise in this process."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the test extra installs it: skipped only outside it

from impls import torch_ffns  # noqa: E402

from ffncli import errors, testing  # noqa: E402
from ffncli.analysis import frameworks  # noqa: E402
from ffncli.errors import ImplError  # noqa: E402

pytestmark = pytest.mark.slow  # among the slowest (docs/development.md)

FFN = '{"d_model": 16, "d_ff": 32}'
ARGS = {"d_model": 16, "d_ff": 32}
PROPERTIES = ["permutation_equivariance", "token_independence", "identical_tokens"]


def _check(cli, tmp_path, impl, *args):
    """permute-check --impl impls.IMPL on 12 random tokens, with --json and --junit-xml: the
    result, its JSON document (None on exit 2) and the JUnit testcases by name."""
    junit = tmp_path / "report.xml"
    r = cli("permute-check", "--impl", f"impls.{impl}", "--random", "12", "--json",
            "--junit-xml", junit, *args)
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    return r, (r.json() if r.code != 2 else None), cases


# --- the verdicts ------------------------------------------------------------------------


@pytest.mark.parametrize("impl,args,failed", [
    # position-wise: they pass, in eval mode by default
    ("torch_ffns:FeedForwardBlock", ("--impl-args", '{"d_model": 16, "d_ff": 64, "dropout": 0.1}'),
     []),
    ("torch_ffns:SwiGLU", ("--impl-args", FFN), []),
    ("torch_ffns:TopKMoE", ("--impl-args", FFN), []),
    ("torch_ffns:make_block", (), []),  # a factory
    ("torch_ffns:block", (), []),  # an instance, built in training mode
    ("torch_ffns:Prints", (), []),  # prints on stdout and stderr at every call
    ("torch_ffns:BatchNormFFN", (), []),  # in eval mode BatchNorm uses its running statistics
    # broken: each fails the properties it breaks, with a counterexample
    ("torch_ffns:CapacityMoE", ("--impl-args", FFN), PROPERTIES),
    ("torch_ffns:MeanMixer", (), ["token_independence"]),
    ("torch_ffns:CumSum", (), PROPERTIES),
    ("torch_ffns:Conv3", (), PROPERTIES),
    ("torch_ffns:SeqLayerNorm", (), ["token_independence"]),
    ("torch_ffns:PositionEmbedding", (), PROPERTIES),
    ("torch_ffns:BatchNormFFN", ("--train-mode",), ["token_independence"]),
    # JAX and Flax
    ("jax_ffns:ffn", ("--d-model", "8"), []),
    ("jax_ffns:ffn_jit", ("--d-model", "8"), []),
    ("jax_ffns:FlaxFFN", ("--d-model", "8"), []),
    ("jax_ffns:mixes", ("--d-model", "8"), ["token_independence"]),
    ("jax_ffns:FlaxSeqNorm", ("--d-model", "8"), ["token_independence"]),
])
def test_verdicts_through_the_cli_and_junit(cli, in_tests, tmp_path, impl, args, failed):
    r, doc, cases = _check(cli, tmp_path, impl, *args)
    assert r.code == (1 if failed else 0), r.err
    assert [p["name"] for p in doc["properties"] if not p["passed"]] == failed
    assert doc["properties"][0] == {**doc["properties"][0], "name": "deterministic",
                                    "passed": True}
    cause = doc["explanation"]  # the usual cause, from which properties failed
    if "permutation_equivariance" in failed:
        assert cause.startswith("the outputs depend on the position: ")
    elif failed:
        assert cause.startswith("the outputs depend on the other tokens, whatever their order")
    else:
        assert cause is None
    for p in doc["properties"]:
        case = cases[p["name"]]
        if p["passed"]:
            assert p["counterexample"] is None and case.find("failure") is None
        else:  # the counterexample names the permutation or the token, expected against got
            assert p["counterexample"].startswith(("permutation ", "token ", "12 copies"))
            assert ("expected [" in p["counterexample"] and ", got [" in p["counterexample"]) \
                or "differs from" in p["counterexample"] or " raised " in p["counterexample"]
            assert case.find("failure").get("message") == p["counterexample"]


def test_the_lesson_s_block_passes_in_eval_mode_and_is_random_in_train_mode(cli, in_tests,
                                                                           tmp_path):
    args = ("--impl-args", '{"d_model": 16, "d_ff": 64, "dropout": 0.1}')
    r, doc, _ = _check(cli, tmp_path, "torch_ffns:FeedForwardBlock", *args)
    assert (r.code, doc["framework"], doc["mode"], doc["d_model"]) == (0, "torch", "eval", 16)
    assert doc["notes"] == ["checked in eval mode (--train-mode checks it as it is)"]
    r, doc, cases = _check(cli, tmp_path, "torch_ffns:FeedForwardBlock", *args, "--train-mode")
    assert (r.code, doc["mode"], doc["skipped"]) == (1, "train", PROPERTIES)
    [random] = doc["properties"]  # reported once, as random: not as three failures
    assert (random["name"], random["passed"]) == ("deterministic", False)
    assert random["counterexample"].startswith("two calls on the same 12 tokens differ: token ")
    assert random["counterexample"].endswith(
        "the function is random: call .eval() on a module (or pass dropout=0), or seed its "
        "random numbers (ffncli checks a module in eval mode unless --train-mode)")
    assert [name for name, case in cases.items() if case.find("skipped") is not None] == \
        PROPERTIES
    printed = cli("permute-check", "--impl", "impls.torch_ffns:FeedForwardBlock", *args,
                  "--random", "12", "--train-mode")
    assert printed.out.count("FAILED") == 1 and "NOT checked: the function is random" in \
        printed.out


def test_batchnorm_in_training_mode_refusing_one_token_is_the_counterexample(cli, in_tests,
                                                                            tmp_path):
    r, doc, _ = _check(cli, tmp_path, "torch_ffns:BatchNormFFN", "--train-mode")
    ind = next(p for p in doc["properties"] if p["name"] == "token_independence")
    assert ind["counterexample"].startswith(
        "token 0 alone: impls.torch_ffns:BatchNormFFN raised ValueError: Expected more than 1 "
        "value per channel when training")


@pytest.mark.parametrize("impl,line", [
    ("InPlace", "impls.torch_ffns:InPlace changed its input in place (a call on 12 tokens); "
     "the caller's tokens would be lost: copy them before changing them"),
    ("ReturnsTuple", "impls.torch_ffns:ReturnsTuple returned a tuple of 2 (Tensor, Tensor); "
     "expected one array of shape (12, d_out)"),
    ("Lazy", "option --impl: impls.torch_ffns:Lazy is a module whose first layer is lazy "
     "(LazyLinear): give the width with --d-model N (or a --preset)"),
    ("NoLinear", "option --impl: impls.torch_ffns:NoLinear is a module with no nn.Linear to "
     "take d_model from: give the width with --d-model N (or a --preset)"),
])
def test_misbehaving_modules_are_exit_2_with_a_junit_error(cli, in_tests, tmp_path, impl, line):
    r, _, cases = _check(cli, tmp_path, f"torch_ffns:{impl}")
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n")
    assert cases["permute-check"].find("error").get("message") == line


def test_width_is_read_from_the_first_linear_or_given(cli, in_tests):
    doc = cli("permute-check", "--impl", "impls.torch_ffns:make_block", "--random", "4",
              "--json").json()
    assert doc["d_model"] == 16  # FeedForwardBlock(16, 32): linear_1 takes 16
    for impl in ("Lazy", "NoLinear"):  # those that cannot tell pass once told
        r = cli("permute-check", "--impl", f"impls.torch_ffns:{impl}", "--d-model", "16",
                "--random", "4", "--json")
        assert (r.code, r.json()["d_model"]) == (0, 16)


def test_a_float32_module_is_cast_on_a_copy_under_float64(cli, in_tests):
    doc = cli("permute-check", "--impl", "impls.torch_ffns:SwiGLU", "--impl-args", FFN,
              "--random", "12", "--dtype", "float64", "--json").json()
    assert (doc["passed"], doc["dtype"]) == (True, "float64")
    assert doc["notes"][0] == "a float32 module, cast to float64 on a copy"
    assert all(p["max_abs"] < 1e-12 for p in doc["properties"])  # float64 all the way


def test_three_d_input_reaches_the_module_as_batch_seq_d_model(cli, in_tests, tmp_path):
    """Conv3 convolves along the sequence axis: on (3, 5, 16) it mixes positions within a
    sequence, never across batch rows, so batch_independence holds and only it does."""
    x = tmp_path / "batch.npy"
    np.save(x, np.random.default_rng(0).normal(size=(3, 5, 16)).astype(np.float32))
    doc = cli("permute-check", "--impl", "impls.torch_ffns:Conv3", "--input", x,
              "--json").json()
    assert doc["input_shape"] == [3, 5, 16]
    assert {p["name"]: p["passed"] for p in doc["properties"]} == {
        "deterministic": True, "permutation_equivariance": False, "token_independence": False,
        "identical_tokens": False, "batch_independence": True}


def test_bitwise_requires_bit_identical_results(cli, in_tests):
    plain = cli("permute-check", "--impl", "impls.torch_ffns:TopKMoE", "--impl-args", FFN,
                "--random", "12", "--json").json()
    bitwise = cli("permute-check", "--impl", "impls.torch_ffns:TopKMoE", "--impl-args", FFN,
                  "--random", "12", "--json", "--bitwise").json()
    assert plain["passed"] and bitwise["bitwise"] and not plain["bitwise"]
    assert [p["name"] for p in plain["properties"]] == [p["name"] for p in bitwise["properties"]]
    for b in bitwise["properties"]:  # within the tolerance: bit-identity decides
        assert b["passed"] == b["bit_identical"]
        if not b["passed"]:
            assert "within the tolerance, but not bit-identical, as --bitwise requires" in \
                b["counterexample"]


@pytest.mark.parametrize("args,line", [
    (("--impl-args", "[1]"), "option --impl-args: expected a JSON object of keyword arguments, "
     "e.g. '{\"d_model\": 512}', got list"),
    (("--impl-args", "{d_model: 1}"), "option --impl-args: invalid JSON at line 1, column 2: "),
    (("--impl-args", '{"width": 3}'), "option --impl-args: building "
     "impls.torch_ffns:SwiGLU(width=3) raised TypeError: "),
])
def test_bad_impl_args(cli, in_tests, args, line):
    r = cli("permute-check", "--impl", "impls.torch_ffns:SwiGLU", *args, "--random", "4")
    assert (r.code, r.out) == (2, "") and r.err.startswith(f"error: {line}"), r.err
    assert r.err.count("\n") == 1


def test_impl_args_and_train_mode_are_for_an_impl(cli):
    for args in (("--impl-args", "{}"), ("--train-mode",), ("--load-timeout", "3")):
        r = cli("permute-check", "--preset", "tiny", "--random", "4", *args)
        assert (r.code, r.err) == (2, f"error: option {args[0]}: is for an --impl class or "
                                      "module; ffncli's own FFN has neither\n")


def test_a_missing_framework_names_the_extra(in_tests, monkeypatch):
    from ffncli.analysis.guard import load_impl

    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # as if not installed
    monkeypatch.delitem(__import__("sys").modules, "impls.torch_ffns", raising=False)
    with pytest.raises(ImplError, match=r"cannot import module 'impls.torch_ffns' \(.*torch.*"
                       r"\); install it with: pip install 'ffncli\[torch\]'$"):
        load_impl("impls.torch_ffns:SwiGLU")


# --- in the user's own test suite --------------------------------------------------------


def test_assert_position_wise_passes_and_returns_the_report():
    block = torch_ffns.FeedForwardBlock(16, 64, dropout=0.1)  # in training mode, as built
    report = testing.assert_position_wise(block)
    assert report.passed and report.framework == "torch" and report.mode == "eval"
    assert block.training and all(m.training for m in block.modules())  # its mode put back
    assert testing.assert_position_wise(torch_ffns.SwiGLU, impl_args=ARGS).tokens == 32
    tokens = torch.randn(2, 6, 16)  # a framework tensor, 3-D
    assert testing.assert_position_wise(torch_ffns.SwiGLU(16, 32), tokens).input_shape == \
        (2, 6, 16)


@pytest.mark.parametrize("make,failed", [
    (lambda: torch_ffns.MeanMixer(), "token_independence"),
    (lambda: torch_ffns.CumSum(), "permutation_equivariance"),
    (lambda: torch_ffns.PositionEmbedding(), "permutation_equivariance"),
    (lambda: torch_ffns.CapacityMoE(16, 32), "permutation_equivariance"),
    (lambda: torch_ffns.SeqLayerNorm(), "token_independence"),
])
def test_assert_position_wise_raises_with_the_counterexample(make, failed):
    with pytest.raises(AssertionError) as caught:
        testing.assert_position_wise(make())
    first, second = str(caught.value).splitlines()[:2]
    assert first.endswith(" is not position-wise")
    assert second.startswith(f"{failed}: ") and ("expected [" in second or "differs" in second)


def test_assert_position_wise_on_random_and_misbehaving_modules():
    block = torch_ffns.FeedForwardBlock(16, 64, dropout=0.5)
    with pytest.raises(AssertionError, match=r"^FeedForwardBlock is random\ndeterministic: two "
                       r"calls on the same 32 tokens differ"):
        testing.assert_position_wise(block, train_mode=True)
    assert block.training
    block.eval()
    testing.assert_position_wise(block, train_mode=True)  # as it is: in eval mode, it passes
    assert not block.training
    with pytest.raises(AssertionError, match=r"token_independence: token 0 alone: "
                       r"BatchNormFFN raised ValueError: Expected more than 1 value"):
        testing.assert_position_wise(torch_ffns.BatchNormFFN(), train_mode=True)
    with pytest.raises(ImplError, match=r"InPlace changed its input in place"):
        testing.assert_position_wise(torch_ffns.InPlace())
    with pytest.raises(ImplError, match=r"returned a tuple of 2 \(Tensor, Tensor\)"):
        testing.assert_position_wise(torch_ffns.ReturnsTuple())
    with pytest.raises(errors.InputError, match=r"NoLinear is a module with no nn.Linear to "
                       r"take d_model from: give tokens, or d_model=N"):
        testing.assert_position_wise(torch_ffns.NoLinear())


def test_assert_position_wise_with_unittest():
    import unittest

    class Case(unittest.TestCase):
        def test_good(self):
            testing.assert_position_wise(torch_ffns.SwiGLU(16, 32))

        def test_bad(self):
            testing.assert_position_wise(torch_ffns.MeanMixer())

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    assert (result.testsRun, len(result.failures), result.errors) == (2, 1, [])
    assert result.failures[0][0].id().endswith("test_bad")


@pytest.mark.parametrize("name", ["ffn", "ffn_jit"])
def test_outputs_coarser_than_the_tokens_get_their_own_tolerances(name):
    """JAX without 64-bit mode computes float64 tokens in float32: compared with float64's
    tolerances, a correct FFN failed token_independence by 1e-6 (plain functions), now
    with float32's, and the report says so."""
    from impls import jax_ffns

    tokens = np.random.default_rng(0).normal(size=(12, 8))
    report = testing.assert_position_wise(getattr(jax_ffns, name), tokens)
    assert (report.dtype, report.properties[0].rtol) == ("float64", 1.3e-6)
    assert report.notes[-1] == "the outputs come back in float32: compared with float32's " \
        "tolerances"
    report = testing.assert_position_wise(jax_ffns.ffn_jit, tokens.astype(np.float32))
    assert (report.framework, report.dtype, report.notes) == ("jax", "float32", ())


def test_bfloat16_outputs_come_back_as_float32_and_say_so():
    """NumPy has no bfloat16: `.numpy()` raised TypeError, blamed on the module as 'raised
    TypeError: Got unsupported ScalarType BFloat16'."""
    t = torch.tensor([[1.5, -2.0]], dtype=torch.bfloat16)
    y = frameworks.as_numpy(t)
    assert (y.dtype, y.tolist(), frameworks.came_as(t)) == (np.float32, [[1.5, -2.0]],
                                                           "bfloat16")
    assert frameworks.came_as(torch.ones(1)) is None and frameworks.came_as(np.ones(1)) is None


def test_building_a_class_leaves_the_caller_s_torch_generator_as_it_was():
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    testing.assert_position_wise(torch_ffns.SwiGLU, impl_args=ARGS, seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_importing_ffncli_testing_imports_no_numpy_or_framework():
    import subprocess
    import sys

    code = ("import sys, ffncli.testing; print(json.dumps(sorted(m for m in ('numpy', 'torch', "
            "'jax') if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True,
                          text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == []


def test_frameworks_are_recognised_without_importing_them():
    class Fake:  # a type from torch.nn, as the check sees it, with no torch behind it
        pass

    Fake.__module__ = "torch.nn.modules.module"
    assert frameworks._is_torch_module(Fake()) and not frameworks._is_flax_module(Fake())
    assert frameworks._is_factory(Fake) and not frameworks._is_factory(lambda x: x)
    assert frameworks._is_factory(lambda: None) and frameworks._is_factory(lambda a=1: a)
    assert not frameworks._is_factory(lambda *a: a)


def test_the_caller_s_module_is_cast_on_a_copy_and_left_as_it_was():
    block = torch_ffns.SwiGLU(16, 32)
    before = {k: v.clone() for k, v in block.state_dict().items()}
    report = testing.assert_position_wise(block, np.ones((4, 16)))  # float64 tokens
    assert report.notes[0] == "a float32 module, cast to float64 on a copy"
    assert all(v.dtype == torch.float32 and torch.equal(v, before[k])
               for k, v in block.state_dict().items())


def test_a_module_s_torch_dtype_attribute_is_read_as_its_dtype():
    """A Hugging Face module's .dtype is a torch.dtype, which np.dtype() refuses (a
    TypeError out of assert_position_wise before)."""
    report = testing.assert_position_wise(torch_ffns.WithDtype(16, 32))
    assert (report.dtype, report.passed) == ("float32", True)
    assert testing.assert_position_wise(torch_ffns.WithDtype(16, 32).double()).dtype == \
        "float64"


def test_a_factory_returning_a_class_is_one_line(cli, in_tests):
    r = cli("permute-check", "--impl", "impls.torch_ffns:returns_the_class", "--random", "4",
            "--d-model", "16")
    assert (r.code, r.err) == (2, "error: option --impl: impls.torch_ffns:returns_the_class "
                                  "returned the class SwiGLU, not a module or a function: "
                                  "return SwiGLU(...)\n")


def test_train_mode_leaves_a_module_s_running_statistics_as_they_were():
    """BatchNorm in training mode updates its running mean on every call: 55 calls on random
    tokens were left in the user's module after the check."""
    module = torch_ffns.BatchNormFFN()
    module.train()
    kept = {k: v.clone() for k, v in module.state_dict().items()}
    with pytest.raises(AssertionError):
        testing.assert_position_wise(module, train_mode=True)
    assert all(torch.equal(kept[k], v) for k, v in module.state_dict().items())
    assert module.training
