"""Each option known once: the layers below jobs/ name what the caller gave in a library call's
words (the parameters), and the job that knows the command's options passes them
(ffncli.jobs.choices.OPTIONS), so the CLI's lines stay as they were and a library caller is
never told about an option it cannot give."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import ffncli
from ffncli.analysis import frameworks, guard
from ffncli.analysis.perplexity import Protocol, check_protocol, windows
from ffncli.analysis.sparsity import check_rule, describe_rule
from ffncli.base.validate import PARAMETERS, Words
from ffncli.errors import ConfigError, FfnError, ImplError, InputError, WeightsError
from ffncli.formats import gguf_tokenizer, hub, quantised, remote, safetensors, tokenizer, tokens
from ffncli.jobs.choices import OPTIONS, one_text
from ffncli.jobs.perplexity import Asked

ROOT = Path(__file__).resolve().parents[1]
LOWER = ("base", "formats", "specs", "counting", "compute", "analysis")
OPTION = re.compile(r"--[a-z]")

# The string literals below jobs/ that may still name an option, each with its reason. Keyed by
# (file, literal); a docstring is never a message and is not scanned.
_REPORT = ("a check report's text (a counterexample's, the hint on a random function), the same "
           "for ffncli.permute_check and permute-check --json; properties.py is not this "
           "change's file: passing words through permute_check is left to do")
ALLOWED: dict[tuple[str, str], str] = {
    ("analysis/frameworks.py", "call .eval() on a module (or pass dropout=0), or seed its "
     "random numbers (ffncli checks a module in eval mode unless --train-mode)"): _REPORT,
    ("analysis/properties.py", " (within the tolerance, but not bit-identical, as --bitwise "
     "requires: they differ by up to "): _REPORT,
    ("analysis/properties.py", "not bit-identical, as --bitwise requires"): _REPORT,
}
# Worded the same way on another branch of this session (specs/spec.py and specs/gguf.py are
# the "startup" change's): not checked for staleness, struck off once that branch is merged.


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the nodes that are docstrings (a module's, a class's, a function's)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def option_literals() -> dict[tuple[str, str], int]:
    """Every string literal (an f-string's text parts too) of the lower layers that names an
    option, with the line it is on."""
    hits = {}
    for layer in LOWER:
        for path in sorted((ROOT / "ffncli" / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                        and id(node) not in docs and OPTION.search(node.value)):
                    hits[(str(path.relative_to(ROOT / "ffncli")), node.value)] = node.lineno
    return hits


def test_no_layer_below_jobs_names_an_option():
    found = option_literals()
    unexplained = {f"{file}:{line}: {text!r}" for (file, text), line in found.items()
                   if (file, text) not in ALLOWED}
    assert sorted(unexplained) == []


def test_the_allow_list_holds_only_what_is_there():
    """An entry whose literal is gone is struck off (the list only shrinks)."""
    assert sorted(set(ALLOWED) - set(option_literals())) == []


def test_the_scan_finds_an_option_in_a_message_and_not_in_a_docstring(tmp_path, monkeypatch):
    """The scan itself can fail: a message naming --layer is found; a docstring is not."""
    (tmp_path / "ffncli" / "base").mkdir(parents=True)
    (tmp_path / "ffncli" / "base" / "m.py").write_text(
        '"""About --layer."""\n\ndef f(n):\n    """--layer N."""\n'
        '    raise ValueError(f"option --layer: {n}")\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert option_literals() == {("base/m.py", "option --layer: "): 5}


# ---------------------------------------------------------------------------------------------
# Each place, in a library call's words (the default) and in a command's (OPTIONS).


class Factory:
    """A factory that returns a class where an instance was meant."""

    def __new__(cls):  # noqa: D102
        return int


def _raised(call) -> tuple[type, str]:
    with pytest.raises(FfnError) as caught:
        call()
    return type(caught.value), str(caught.value)


def _judge_late(words: Words) -> None:
    guard.Judge("f", 0.5, words=words)(np.ones((2, 3)), guard.Outcome(timed_out=True))


def _judge_3d(words: Words) -> None:
    done = guard.Outcome(raised=guard._UNPACKED_3D, exception=True)
    guard.Judge("f", rows_only=True, words=words)(np.ones((2, 3)), done)


def _no_tokenizers(words: Words, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import raises ImportError
    tokenizer.load_tokenizer(Path("model"), words=words)


NO_TOK = "no tokenizer.json beside the weights: looked for {tmp}/tokenizer.json; "
BPE = "{tmp}/m.gguf: GGUF tokenizer 'llama' is not read (only 'gpt2', a byte-level BPE); "
QUANT = ("c.json: key 'quantization_config': quant_method 'hqq' is not read; ffncli reads the "
         "weights of 'gptq', 'awq', 'bitsandbytes', 'mxfp4' (without {}, params counts the "
         "config's spec)")
MODEL = "expected ORG/NAME or ORG/NAME@REVISION, got '../etc'"

PLACES = [  # id, call(words, tmp, monkeypatch), error, the library's line, the command's line
    ("rule-both", lambda w, t, m: check_rule(1.0, 0.5, w), InputError,
     "give threshold or target_sparsity, not both",
     "give --threshold or --target-sparsity, not both"),
    ("rule-threshold", lambda w, t, m: check_rule(-1.0, None, w), InputError,
     "threshold: expected a number >= 0, got -1.0",
     "option --threshold: expected a number >= 0, got -1.0"),
    ("rule-target", lambda w, t, m: check_rule(None, 1.0, w), InputError,
     "target_sparsity: expected a share from 0 to below 1, got 1.0",
     "option --target-sparsity: expected a share from 0 to below 1, got 1.0"),
    ("protocol-ctx", lambda w, t, m: check_protocol(Protocol(2), None, w), InputError,
     "ctx: 2 scores no token under llama.cpp's protocol (positions 1..0); expected a whole "
     "number >= 3, or score=all",
     "option --ctx: 2 scores no token under llama.cpp's protocol (positions 1..0); expected a "
     "whole number >= 3, or --score all"),
    ("protocol-stride", lambda w, t, m: check_protocol(Protocol(8, stride=9), None, w),
     InputError, "stride: expected a whole number from 1 to ctx (8), got 9",
     "option --stride: expected a whole number from 1 to --ctx (8), got 9"),
    ("protocol-both", lambda w, t, m: check_protocol(Protocol(8, 4, "all"), None, w),
     InputError, "stride and score=all: give one (a stride window scores what the previous "
                 "one did not)",
     "options --stride and --score all: give one (a stride window scores what the previous "
     "one did not)"),
    ("protocol-windows", lambda w, t, m: windows(np.arange(10), Protocol(8), None, w),
     InputError, "the text has 10 tokens; perplexity with ctx=8 needs at least 16 (two chunks)",
     "the text has 10 tokens; perplexity with --ctx 8 needs at least 16 (two chunks)"),
    ("targets-rule", lambda w, t, m: Asked(rule="x", targets=(0.5,), words=w), InputError,
     "sparsify: expected one of cats, teal, topk, got 'x'",
     "option --sparsify: expected one of cats, teal, topk, got 'x'"),
    ("targets-alone", lambda w, t, m: Asked(rule="cats", words=w), InputError,
     "sparsify needs target_sparsity=S[,S...], e.g. 0.5",
     "option --sparsify needs --target-sparsity S[,S...], e.g. 0.5"),
    ("text-and-ids", lambda w, t, m: one_text(t, t, w), InputError,
     "give text or ids, not both", "give --text or --ids, not both"),
    ("tokens-none", lambda w, t, m: tokens.resolve_input(None, None, 4, 0, w), InputError,
     "give the tokens: input=FILE (.npy, .txt, .csv) or random=N",
     "give the tokens: --input FILE (.npy, .txt, .csv) or --random N"),
    ("tokens-random", lambda w, t, m: tokens.resolve_input(None, 0, 4, 0, w), InputError,
     "random: expected a whole number >= 1, got 0",
     "option --random: expected a whole number >= 1, got 0"),
    ("tokens-seed", lambda w, t, m: tokens.resolve_input(None, 2, 4, -1, w), InputError,
     "seed: expected a whole number >= 0, got -1",
     "option --seed: expected a whole number >= 0, got -1"),
    ("hub-model", lambda w, t, m: hub.parse_model("../etc", w), WeightsError,
     f"model: {MODEL}", f"option --model: {MODEL}"),
    ("hub-folder", lambda w, t, m: hub.parse_model(str(t), w), WeightsError,
     "model: expected ORG/NAME or ORG/NAME@REVISION, got '{tmp}'; a local folder goes to "
     "weights",
     "option --model: expected ORG/NAME or ORG/NAME@REVISION, got '{tmp}'; a local folder "
     "goes to --weights"),
    ("hub-gguf-file", lambda w, t, m: remote._weights_file("a/b", "main", ["x.gguf"], "y.gguf",
                                                           w), WeightsError,
     "gguf_file: a/b@main on the Hub has no file 'y.gguf'; its .gguf files: x.gguf",
     "option --gguf-file: a/b@main on the Hub has no file 'y.gguf'; its .gguf files: x.gguf"),
    ("hub-ggufs", lambda w, t, m: remote._weights_file("a/b", "main", ["x.gguf", "y.gguf"],
                                                       None, w), WeightsError,
     "a/b@main on the Hub has 2 .gguf files (x.gguf, y.gguf): name one with gguf_file",
     "a/b@main on the Hub has 2 .gguf files (x.gguf, y.gguf): name one with --gguf-file"),
    ("no-tokenizers", lambda w, t, m: _no_tokenizers(w, m), InputError,
     "text needs the tokenizers package: pip install 'ffncli[text]'",
     "--text needs the tokenizers package: pip install 'ffncli[text]'"),
    ("no-tokenizer-json", lambda w, t, m: tokenizer.tokenizer_path(t, w), WeightsError,
     NO_TOK + "ids=FILE takes token ids without a tokenizer",
     NO_TOK + "--ids FILE takes token ids without a tokenizer"),
    ("gguf-tokenizer", lambda w, t, m: gguf_tokenizer._pre_tokenizer(
        t / "m.gguf", {"tokenizer.ggml.model": "llama"}, w), WeightsError,
     BPE + "ids=FILE takes token ids without a tokenizer",
     BPE + "--ids FILE takes token ids without a tokenizer"),
    ("gguf-no-tokenizer", lambda w, t, m: gguf_tokenizer._pre_tokenizer(t / "m.gguf", {}, w),
     WeightsError, "{tmp}/m.gguf: no tokenizer in the GGUF metadata (no key "
                   "'tokenizer.ggml.model'); ids=FILE takes token ids without one",
     "{tmp}/m.gguf: no tokenizer in the GGUF metadata (no key 'tokenizer.ggml.model'); "
     "--ids FILE takes token ids without one"),
    ("no-config", lambda w, t, m: _raise(safetensors.NoConfig("m: none beside", w)),
     safetensors.NoConfig, "m: none beside: give config", "m: none beside: give --config"),
    ("both-weights", lambda w, t, m: safetensors.weights_in(_both(t), w), WeightsError,
     "{tmp}: holds both model.safetensors and model.safetensors.index.json; give one of them "
     "with weights",
     "{tmp}: holds both model.safetensors and model.safetensors.index.json; give one of them "
     "with --weights"),
    ("quant-method", lambda w, t, m: quantised.check_quant_method(
        {"quantization_config": {"quant_method": "hqq"}}, "c.json", w), WeightsError,
     QUANT.format("weights"), QUANT.format("--weights")),
    ("impl-returns-class", lambda w, t, m: frameworks.adapt(Factory, "F", dtype=np.float64,
                                                            words=w), ImplError,
     "fn: F returned the class int, not a module or a function: return int(...)",
     "option --impl: F returned the class int, not a module or a function: return int(...)"),
    ("impl-args", lambda w, t, m: frameworks.adapt(np.tanh, "f", dtype=np.float64,
                                                   impl_args={}, words=w), ImplError,
     "impl_args: f is a function of the tokens, not a class or a factory; impl_args is for "
     "those",
     "option --impl-args: f is a function of the tokens, not a class or a factory; "
     "--impl-args is for those"),
    ("impl-path", lambda w, t, m: guard.split_target("pkg/m.py:f", w), ImplError,
     "fn: expected package.module:NAME, got 'pkg/m.py:f' (a path: give it as pkg.m:f, from "
     "the current directory)",
     "option --impl: expected package.module:NAME, got 'pkg/m.py:f' (a path: give it as "
     "pkg.m:f, from the current directory)"),
    ("impl-import", lambda w, t, m: guard.load_impl("ffncli_no_such_module:f", w), ImplError,
     "fn: cannot import module 'ffncli_no_such_module' (No module named "
     "'ffncli_no_such_module')",
     "option --impl: cannot import module 'ffncli_no_such_module' (No module named "
     "'ffncli_no_such_module')"),
    ("impl-late", lambda w, t, m: _judge_late(w), ImplError,
     "f did not finish within the timeout of 0.5 s (a call on 2 tokens)",
     "f did not finish within the --timeout of 0.5 s (a call on 2 tokens)"),
    ("impl-3d", lambda w, t, m: _judge_3d(w), guard.CallRaised,
     f"f {guard._UNPACKED_3D}, on 2-D input (2, 3): it wants 3-D input; give tokens of shape "
     "(batch, seq, d_model)",
     f"f {guard._UNPACKED_3D}, on 2-D input (2, 3): it wants 3-D input; give tokens of shape "
     "(batch, seq, d_model) (to --input, a .npy of that shape)"),
]


def _raise(exc: Exception) -> None:
    raise exc


def _both(folder: Path) -> Path:
    for name in ("model.safetensors", "model.safetensors.index.json"):
        (folder / name).write_text("")
    return folder


@pytest.mark.parametrize("call, error, library, command", [p[1:] for p in PLACES],
                         ids=[p[0] for p in PLACES])
def test_each_place_in_the_library_words_and_the_commands(call, error, library, command,
                                                          tmp_path, monkeypatch):
    said = _raised(lambda: call(PARAMETERS, tmp_path, monkeypatch))
    assert said == (error, library.format(tmp=tmp_path))
    assert not re.search(r"--[a-z]", said[1])  # the library's words, no option
    assert _raised(lambda: call(OPTIONS, tmp_path, monkeypatch)) == (
        error, command.format(tmp=tmp_path))


@pytest.mark.parametrize("activation, threshold, target, library, command", [
    ("gelu", None, None,
     "inactive: pre-activation <= 0 (gelu is small but not 0 there; use threshold or "
     "target_sparsity for a cut on the activated value)",
     "inactive: pre-activation <= 0 (gelu is small but not 0 there; use --threshold or "
     "--target-sparsity for a cut on the activated value)"),
    ("gelu", 0.25, 0.5,
     "inactive: |act(pre-activation)| <= 0.25 (target_sparsity 0.5: threshold on the "
     "activated value)",
     "inactive: |act(pre-activation)| <= 0.25 (--target-sparsity 0.5: threshold on the "
     "activated value)"),
])
def test_the_rules_line_names_the_cut_as_the_caller_gave_it(activation, threshold, target,
                                                            library, command):
    assert describe_rule(activation, threshold, target) == library
    assert describe_rule(activation, threshold, target, OPTIONS) == command


def test_the_words_rule():
    """A parameter is its option with - for _, bar those renamed (fn is --impl)."""
    assert [OPTIONS.name(p) for p in ("target_sparsity", "ctx", "fn")] == [
        "--target-sparsity", "--ctx", "--impl"]
    assert [PARAMETERS.name(p) for p in ("target_sparsity", "ctx", "fn")] == [
        "target_sparsity", "ctx", "fn"]
    assert (OPTIONS.where("ctx"), PARAMETERS.where("ctx")) == ("option --ctx", "ctx")
    assert (OPTIONS.given("ids", "FILE"), PARAMETERS.given("ids", "FILE")) == (
        "--ids FILE", "ids=FILE")


# ---------------------------------------------------------------------------------------------
# End to end: the library call and the command, each in its words.

GPT2 = ROOT / "tests" / "data" / "forward" / "gpt2"
IDS = GPT2 / "ids.txt"


@pytest.mark.parametrize("call, args, library, command", [
    (lambda: ffncli.perplexity(GPT2, ids=IDS, ctx=2), ("--ctx", "2"),
     "ctx: 2 scores no token under llama.cpp's protocol (positions 1..0); expected a whole "
     "number >= 3, or score=all",
     "option --ctx: 2 scores no token under llama.cpp's protocol (positions 1..0); expected a "
     "whole number >= 3, or --score all"),
    (lambda: ffncli.perplexity(GPT2, ids=IDS, ctx=16), ("--ctx", "16"),
     "the text has 21 tokens; perplexity with ctx=16 needs at least 32 (two chunks)",
     "the text has 21 tokens; perplexity with --ctx 16 needs at least 32 (two chunks)"),
    (lambda: ffncli.perplexity(GPT2, ids=IDS, ctx=8, stride=4, score="all"),
     ("--ctx", "8", "--stride", "4", "--score", "all"),
     "stride and score=all: give one (a stride window scores what the previous one did not)",
     "options --stride and --score all: give one (a stride window scores what the previous "
     "one did not)"),
])
def test_perplexity_in_the_library_and_on_the_command_line(cli, call, args, library, command):
    with pytest.raises(InputError) as caught:
        call()
    assert str(caught.value) == library
    r = cli("perplexity", "--weights", GPT2, "--ids", IDS, *args)
    assert (r.code, r.out, r.err) == (2, "", f"error: {command}\n")


def test_text_without_tokenizers_in_the_library_and_on_the_command_line(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(InputError) as caught:
        ffncli.layer_stats(GPT2, text=IDS)
    assert str(caught.value) == "text needs the tokenizers package: pip install 'ffncli[text]'"
    r = cli("relu-stats", "--weights", GPT2, "--text", IDS)
    assert (r.code, r.err) == (2, "error: --text needs the tokenizers package: pip install "
                                  "'ffncli[text]'\n")


def test_a_missing_config_in_the_library_and_on_the_command_line(cli, tmp_path):
    from ffncli.compute.forward.families import open_transformer

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((GPT2 / "model.safetensors").read_bytes())
    spec = ffncli.load_spec(config=GPT2 / "config.json")
    line = (f"{folder}: the forward reads the model's config.json (norms, positions, rotary "
            "settings); none beside the weights: give ")
    with pytest.raises(ConfigError) as caught:
        open_transformer(spec, folder, np.dtype(np.float32))
    assert str(caught.value) == line + "config"
    r = cli("relu-stats", "--preset", "tiny", "--weights", folder, "--ids", IDS)
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}--config\n")


def test_a_rule_line_in_the_library_and_in_the_commands_json(cli, tmp_path):
    x = np.random.default_rng(3).standard_normal((20, 48)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    spec = ffncli.load_spec(preset="gpt2", d_model=48, d_ff=64)
    result = ffncli.relu_stats(ffncli.build_ffn(spec), x, target_sparsity=0.5)
    assert "(target_sparsity 0.5: threshold on the activated value)" in result.rule.description
    r = cli("relu-stats", "--preset", "gpt2", "--d-model", "48", "--d-ff", "64", "--input",
            tmp_path / "x.npy", "--target-sparsity", "0.5", "--json")
    assert r.code == 0
    assert "(--target-sparsity 0.5: threshold on the activated value)" in \
        json.loads(r.out)["definition"]


# ---------------------------------------------------------------------------------------------
# One validator for --threshold and --target-sparsity, run once a relu-stats call, whichever
# path it takes (a token file, one text, shards).


@pytest.mark.parametrize("how", ["tokens", "text", "shards"])
def test_relu_stats_checks_its_cut_once_a_call(cli, tmp_path, monkeypatch, how):
    import ffncli.analysis.sparsity as sparsity
    import ffncli.jobs.sweep as sweep

    calls = []

    def counted(threshold, target, words=PARAMETERS):
        calls.append((threshold, target, words))
        return check_rule(threshold, target, words)

    monkeypatch.setattr(sparsity, "check_rule", counted)
    monkeypatch.setattr(sweep, "check_rule", counted)
    if how == "tokens":
        np.save(tmp_path / "x.npy", np.ones((3, 4), np.float32))
        given = ("--preset", "tiny", "--input", tmp_path / "x.npy")
    else:
        (tmp_path / "many").mkdir()
        (tmp_path / "many" / "a.txt").write_text(IDS.read_text())
        given = ("--weights", GPT2, "--ids", IDS if how == "text" else f"{tmp_path}/many/*.txt")
    r = cli("relu-stats", *given, "--target-sparsity", "0.5", "--json")
    assert (r.code, r.err) == (0, "")
    assert calls == [(None, 0.5, OPTIONS)]


def test_weights_without_a_config_in_the_library_and_on_the_command_line(cli, monkeypatch):
    monkeypatch.chdir(ROOT)
    line = ("no config.json in tests/data/forward, which the model's shape is read from: give "
            "it with ")
    with pytest.raises(InputError) as caught:
        ffncli.layer_stats("tests/data/forward", ids=IDS)
    assert str(caught.value) == line + "config=config.json"
    r = cli("relu-stats", "--weights", "tests/data/forward", "--ids", IDS)
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}--config config.json, or a --preset "
                                             "NAME|FILE\n")
