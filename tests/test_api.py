"""The library's front door (`import ffncli`, api.py): every public function refuses a hostile
argument with one FfnError naming the argument as the caller wrote it (never a raw
AttributeError or TypeError, never a command's option), checked before anything is read."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import ffncli
from ffncli.errors import (
    ConfigError,
    FfnError,
    ImplError,
    InputError,
    MemoryBudgetError,
    SpecError,
    WeightsError,
)

ROOT = Path(__file__).resolve().parents[1]
GPT2 = ROOT / "tests" / "data" / "forward" / "gpt2"
IDS = GPT2 / "ids.txt"
TINY = ffncli.load_spec(preset="tiny")
FFN = ffncli.build_ffn(TINY)
X = np.zeros((2, 4))
SIZES = "such as 24GB, 24GiB or 2x80GB (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
PATH = "expected a path (a str or a pathlib.Path), got"

HOSTILE = [  # id, call, error, message
    ("load_spec-nothing", lambda: ffncli.load_spec(), SpecError,
     "load_spec: give preset=NAME|FILE or config=config.json"),
    ("load_spec-preset-int", lambda: ffncli.load_spec(preset=3), InputError, f"preset: {PATH} 3"),
    ("load_spec-missing-config", lambda: ffncli.load_spec(config="missing.json"), ConfigError,
     "config file not found: missing.json"),
    ("load_spec-unknown-override", lambda: ffncli.load_spec(preset="base", bogus=1), SpecError,
     "load_spec: unknown override 'bogus'; known: d_model, d_ff, activation, gated, experts, "
     "top_k, capacity_factor, beta, match_params, multiple_of, seq_len"),
    ("count-None", lambda: ffncli.count(None), SpecError,
     "spec: expected a ModelSpec (from ffncli.load_spec), got None"),
    ("count-str", lambda: ffncli.count("base"), SpecError,
     "spec: expected a ModelSpec (from ffncli.load_spec), got 'base'"),
    ("params-None", lambda: ffncli.params(None), SpecError,
     "spec: expected a ModelSpec (from ffncli.load_spec), got None"),
    ("params-batch-0", lambda: ffncli.params(TINY, batch=0), InputError,
     "batch: expected a whole number >= 1, got 0"),
    ("params-batch-float", lambda: ffncli.params(TINY, batch=1.5), InputError,
     "batch: expected a whole number >= 1, got 1.5"),
    ("params-train-unknown", lambda: ffncli.params(TINY, train="x"), InputError,
     "mode: expected one of full, lora, qlora, got 'x'"),
    ("params-train-int", lambda: ffncli.params(TINY, train=3), InputError,
     "train: expected a mode (full, lora, qlora) or a training_plan(...), got 3"),
    ("params-fit-word", lambda: ffncli.params(TINY, fit="lots"), InputError,
     f"fit: expected a size with its unit, {SIZES}, got 'lots'"),
    ("params-fit-negative", lambda: ffncli.params(TINY, fit="-1GB"), InputError,
     f"fit: expected a size with its unit, {SIZES}, got '-1GB'"),
    ("params-fit-int", lambda: ffncli.params(TINY, fit=24), InputError,
     "fit: expected a non-empty string, got 24"),
    ("params-reserve-alone", lambda: ffncli.params(TINY, reserve_memory="10%"), InputError,
     "reserve_memory holds memory back from fit: give fit too"),
    ("params-reserve-200%", lambda: ffncli.params(TINY, fit="1GB", reserve_memory="200%"),
     InputError, "reserve_memory: expected a percentage from 0% to below 100%, got '200%'"),
    ("params-lora-no-attention", lambda: ffncli.params(TINY, train=ffncli.training_plan(
        "lora", lora_targets="q")), InputError,
     "lora_targets: tiny has no q projection (no attention)"),
    ("plan-mode-None", lambda: ffncli.training_plan(None), InputError,
     "mode: expected a non-empty string, got None"),
    ("plan-rank-0", lambda: ffncli.training_plan("lora", lora_rank=0), InputError,
     "lora_rank: expected a whole number >= 1, got 0"),
    ("plan-optimizer", lambda: ffncli.training_plan(optimizer="adamx"), InputError,
     "optimizer: expected one of adamw, adam, sgd, sgd-momentum, adafactor, adamw-8bit, got "
     "'adamx' (did you mean 'adam'?)"),
    ("plan-targets-int", lambda: ffncli.training_plan("lora", lora_targets=3), InputError,
     "lora_targets: expected a comma-separated str or a sequence of str, got 3"),
    ("plan-targets-unknown", lambda: ffncli.training_plan("lora", lora_targets="zz"),
     InputError, "lora_targets: unknown target 'zz'; expected a comma-separated list of q, k, "
                 "v, o, gate, up, down, router, attention, ffn, all-linear"),
    ("plan-full-with-rank", lambda: ffncli.training_plan("full", lora_rank=4), InputError,
     "lora_rank and lora_targets need mode 'lora' or 'qlora'"),
    ("plan-flag-str", lambda: ffncli.training_plan(recompute="yes"), InputError,
     "recompute: expected true or false, got 'yes'"),
    ("build_ffn-None", lambda: ffncli.build_ffn(None), SpecError,
     "spec: expected a ModelSpec (from ffncli.load_spec), got None"),
    ("build_ffn-None-weights", lambda: ffncli.build_ffn(None, "w.npz"), SpecError,
     "spec: expected a ModelSpec (from ffncli.load_spec), got None"),
    ("build_ffn-weights-int", lambda: ffncli.build_ffn(TINY, 3), InputError,
     f"weights: {PATH} 3"),
    ("build_ffn-weights-missing", lambda: ffncli.build_ffn(TINY, "missing.npz"), WeightsError,
     "weights file not found: missing.npz"),
    ("build_ffn-weights-kind", lambda: ffncli.build_ffn(TINY, "README.md"), InputError,
     "weights: expected a .npz, .safetensors or .gguf file, an index (.json) or a model "
     "folder, got README.md"),
    ("build_ffn-layer-negative", lambda: ffncli.build_ffn(TINY, layer=-1), InputError,
     "layer: expected a whole number >= 0, got -1"),
    ("build_ffn-layer-str", lambda: ffncli.build_ffn(TINY, layer="0"), InputError,
     "layer: expected a whole number >= 0, got '0'"),
    ("build_ffn-dtype", lambda: ffncli.build_ffn(TINY, dtype="float16"), InputError,
     "dtype: expected float32 or float64, got 'float16'"),
    ("build_ffn-dtype-None", lambda: ffncli.build_ffn(TINY, dtype=None), InputError,
     "dtype: expected a non-empty string, got None"),
    ("build_ffn-max_memory-word", lambda: ffncli.build_ffn(TINY, max_memory="lots"),
     WeightsError, "max_memory: expected a size such as 2GB or 512MB, got 'lots'"),
    ("build_ffn-max_memory-int", lambda: ffncli.build_ffn(TINY, max_memory=5), InputError,
     "max_memory: expected a non-empty string, got 5"),
    ("build_ffn-over-budget", lambda: ffncli.build_ffn(ffncli.load_spec(preset="base"),
                                                       max_memory="1"), MemoryBudgetError,
     "the random weights of one FFN layer of base need 8.40 MB in float32, over the 0.00 MB "
     "budget; shrink it (d_model, d_ff, experts) or raise max_memory"),
    ("permute_check-None", lambda: ffncli.permute_check(None), InputError,
     "fn: expected a function, a module, or a class or factory of one, got None"),
    ("permute_check-trials", lambda: ffncli.permute_check(FFN, trials=-1), InputError,
     "trials: expected a whole number >= 0, got -1"),
    ("permute_check-seed", lambda: ffncli.permute_check(FFN, seed=-1), InputError,
     "seed: expected a whole number >= 0, got -1"),
    ("permute_check-rtol-nan", lambda: ffncli.permute_check(FFN, rtol=math.nan), InputError,
     "rtol: expected a number >= 0, got nan"),
    ("permute_check-atol-negative", lambda: ffncli.permute_check(FFN, atol=-1.0), InputError,
     "atol: expected a number >= 0, got -1.0"),
    ("permute_check-timeout-0", lambda: ffncli.permute_check(FFN, timeout=0), InputError,
     "timeout: expected a positive number, got 0"),
    ("permute_check-timeout-short", lambda: ffncli.permute_check(FFN, timeout=1e-5),
     InputError, "timeout: expected at least 0.001 seconds, got 1e-05"),
    ("permute_check-bitwise-str", lambda: ffncli.permute_check(FFN, bitwise="y"), InputError,
     "bitwise: expected true or false, got 'y'"),
    ("permute_check-tokens-str", lambda: ffncli.permute_check(FFN, "x"), InputError,
     "tokens: expected (tokens, 4) or (batch, seq, 4), got shape ()"),
    ("permute_check-tokens-nan", lambda: ffncli.permute_check(FFN, np.full((3, 4), np.nan)),
     InputError, "tokens: NaN or infinity in every token; with no finite token every property "
                 "would hold whatever the function does"),
    ("relu_stats-None", lambda: ffncli.relu_stats(None, X), InputError,
     "ffn: expected an FFN from ffncli.build_ffn, got None"),
    ("relu_stats-tokens-None", lambda: ffncli.relu_stats(FFN, None), InputError,
     "tokens: expected (tokens, 4) or (batch, seq, 4), got shape ()"),
    ("relu_stats-tokens-missing", lambda: ffncli.relu_stats(FFN, "missing.npy"), InputError,
     "input file not found: missing.npy"),
    ("relu_stats-tokens-nan", lambda: ffncli.relu_stats(FFN, np.full((2, 4), np.nan)),
     InputError, "input: 8 non-finite values (NaN or infinity), the first at token 0, column "
                 "0; pass allow_nonfinite=True to compute with them"),
    ("relu_stats-tokens-shape", lambda: ffncli.relu_stats(FFN, np.zeros((2, 5))), InputError,
     "tokens: expected (tokens, 4) or (batch, seq, 4), got shape (2, 5)"),
    ("relu_stats-threshold-nan", lambda: ffncli.relu_stats(FFN, X, threshold=math.nan),
     InputError, "threshold: expected a number >= 0, got nan"),
    ("relu_stats-threshold-negative", lambda: ffncli.relu_stats(FFN, X, threshold=-1),
     InputError, "threshold: expected a number >= 0, got -1"),
    ("relu_stats-target-1", lambda: ffncli.relu_stats(FFN, X, target_sparsity=1.0),
     InputError, "target_sparsity: expected a share from 0 to below 1, got 1.0"),
    ("relu_stats-both", lambda: ffncli.relu_stats(FFN, X, threshold=1, target_sparsity=0.5),
     InputError, "give threshold or target_sparsity, not both"),
    ("relu_stats-flag", lambda: ffncli.relu_stats(FFN, X, allow_nonfinite="y"), InputError,
     "allow_nonfinite: expected true or false, got 'y'"),
    ("layer_stats-None", lambda: ffncli.layer_stats(None, ids=IDS), InputError,
     f"weights: {PATH} None"),
    ("layer_stats-no-text", lambda: ffncli.layer_stats(GPT2), InputError,
     "give text=FILE or ids=FILE"),
    ("layer_stats-both", lambda: ffncli.layer_stats(GPT2, ids=IDS, text=IDS), InputError,
     "give text or ids, not both"),
    ("layer_stats-missing", lambda: ffncli.layer_stats("missing", ids=IDS), WeightsError,
     "weights file not found: missing"),
    ("layer_stats-no-config", lambda: ffncli.layer_stats("tests/data/forward", ids=IDS),
     InputError, "no config.json in tests/data/forward, which the model's shape is read from: "
                 "give it with config=config.json"),
    ("layer_stats-layers-past", lambda: ffncli.layer_stats(GPT2, ids=IDS, layers=5),
     InputError, "layers: expected layers of 0-1, got '5'"),
    ("layer_stats-layers-negative", lambda: ffncli.layer_stats(GPT2, ids=IDS, layers=-1),
     InputError, "layers: expected a whole number >= 0, got -1"),
    ("layer_stats-layers-None", lambda: ffncli.layer_stats(GPT2, ids=IDS, layers=None),
     InputError, "layers: expected a non-empty string, got None"),
    ("layer_stats-layers-backwards", lambda: ffncli.layer_stats(GPT2, ids=IDS, layers="1-0"),
     InputError, "layers: the range 1-0 runs backwards; write 0-1"),
    ("layer_stats-threshold-nan", lambda: ffncli.layer_stats(GPT2, ids=IDS,
                                                             threshold=math.nan),
     InputError, "threshold: expected a number >= 0, got nan"),
    ("layer_stats-dtype", lambda: ffncli.layer_stats(GPT2, ids=IDS, dtype="float16"),
     InputError, "dtype: expected one of float32, float64, got 'float16' (did you mean "
                 "'float64'?)"),
    ("capture_inputs-out-None", lambda: ffncli.capture_inputs(GPT2, None, ids=IDS),
     InputError, f"out: {PATH} None"),
    ("capture_inputs-force-str", lambda: ffncli.capture_inputs(GPT2, "o", ids=IDS, force="y"),
     InputError, "force: expected true or false, got 'y'"),
    ("perplexity-None", lambda: ffncli.perplexity(None, ids=IDS), InputError,
     f"weights: {PATH} None"),
    ("perplexity-no-text", lambda: ffncli.perplexity(GPT2), InputError,
     "give text=FILE or ids=FILE"),
    ("perplexity-ctx-negative", lambda: ffncli.perplexity(GPT2, ids=IDS, ctx=-3), InputError,
     "ctx: expected a whole number >= 1, got -3"),
    ("perplexity-ctx-float", lambda: ffncli.perplexity(GPT2, ids=IDS, ctx=8.0), InputError,
     "ctx: expected a whole number >= 1, got 8.0"),
    ("perplexity-stride-0", lambda: ffncli.perplexity(GPT2, ids=IDS, stride=0), InputError,
     "stride: expected a whole number >= 1, got 0"),
    ("perplexity-score", lambda: ffncli.perplexity(GPT2, ids=IDS, score="x"), InputError,
     "score: expected one of half, all, got 'x'"),
    ("perplexity-sparsify-alone", lambda: ffncli.perplexity(GPT2, ids=IDS, sparsify="cats"),
     InputError, "sparsify and target_sparsity go together: give both, or neither"),
    ("perplexity-target-alone", lambda: ffncli.perplexity(GPT2, ids=IDS, target_sparsity=0.5),
     InputError, "sparsify and target_sparsity go together: give both, or neither"),
    ("perplexity-sparsify-unknown", lambda: ffncli.perplexity(GPT2, ids=IDS, sparsify="x",
                                                              target_sparsity=0.5),
     InputError, "sparsify: expected one of cats, teal, topk, got 'x'"),
    ("perplexity-target-nan", lambda: ffncli.perplexity(GPT2, ids=IDS, sparsify="cats",
                                                        target_sparsity=math.nan),
     InputError, "target_sparsity: expected a share from 0 to below 1, got nan"),
    ("perplexity-target-str", lambda: ffncli.perplexity(GPT2, ids=IDS, sparsify="cats",
                                                        target_sparsity="0.5"),
     InputError, "target_sparsity: expected a share or a sequence of shares, got '0.5'"),
    ("perplexity-thresholds-missing", lambda: ffncli.perplexity(GPT2, ids=IDS,
                                                                thresholds="missing.json"),
     InputError, "thresholds file not found: missing.json"),
    ("perplexity-ctx-2", lambda: ffncli.perplexity(GPT2, ids=IDS, ctx=2), InputError,
     "ctx: 2 scores no token under llama.cpp's protocol (positions 1..0); expected a whole "
     "number >= 3, or score=all"),
    ("perplexity-stride-past-ctx", lambda: ffncli.perplexity(GPT2, ids=IDS, ctx=8, stride=9),
     InputError, "stride: expected a whole number from 1 to ctx (8), got 9"),
    ("perplexity-stride-score-all", lambda: ffncli.perplexity(GPT2, ids=IDS, ctx=8, stride=4,
                                                              score="all"),
     InputError, "stride and score=all: give one (a stride window scores what the previous one "
                 "did not)"),
    ("perplexity-text-short", lambda: ffncli.perplexity(GPT2, ids=IDS, ctx=16), InputError,
     "the text has 21 tokens; perplexity with ctx=16 needs at least 32 (two chunks)"),
    ("permute_check-factory-gives-class", lambda: ffncli.permute_check(lambda: int, X),
     ImplError, "fn: <lambda> returned the class int, not a module or a function: return "
                 "int(...)"),
    ("permute_check-impl_args-function", lambda: ffncli.permute_check(np.tanh, X,
                                                                      impl_args={"a": 1}),
     ImplError, "impl_args: tanh is a function of the tokens, not a class or a factory; "
                 "impl_args is for those"),
    ("render-None", lambda: ffncli.render(None), InputError,
     "result: expected what an ffncli function returns (count, params, presets, "
     "permute_check, relu_stats, layer_stats, capture_inputs, perplexity), got None"),
    ("render-format", lambda: ffncli.render(ffncli.count(TINY), "html"), InputError,
     "format: expected one of rich, markdown, csv, json, got 'html'"),
]


@pytest.mark.parametrize("call, error, message", [c[1:] for c in HOSTILE],
                         ids=[c[0] for c in HOSTILE])
def test_every_public_function_refuses_hostile_arguments_in_one_line(call, error, message,
                                                                     monkeypatch):
    monkeypatch.chdir(ROOT)  # the relative paths above: missing.npz, README.md
    with pytest.raises(FfnError) as caught:
        call()
    assert (type(caught.value), str(caught.value)) == (error, message)
    assert "--" not in message  # the library's words, not a command's options


def test_the_table_reaches_every_public_function():
    """Each name of ``ffncli.__all__`` (bar the version) is attacked above."""
    attacked = {c[0].split("-")[0] for c in HOSTILE} | {"list_presets"}  # takes nothing
    assert attacked >= {"plan" if n == "training_plan" else n for n in ffncli.__all__
                        if n != "__version__"}


def test_the_library_refuses_bad_tokens_and_unknown_overrides():
    with pytest.raises(InputError, match=r"^tokens: expected \(tokens, 4\) or \(batch, seq, 4\), "
                                         r"got shape \(0, 4\)$"):
        ffncli.permute_check(FFN, np.zeros((0, 4)))
    with pytest.raises(InputError, match=r"got shape \(3, 5\)$"):
        ffncli.permute_check(FFN, np.zeros((3, 5)))


# ---------------------------------------------------------------------------------------------
# docs/library.md: every example, twice in a row in one process and one folder (no state of a
# first run, a folder written or a module's global, changes what the second prints).


@pytest.mark.slow
def test_the_library_page_runs_twice_in_a_row(tmp_path, monkeypatch):
    import doctest
    import re
    import subprocess

    text = (ROOT / "docs" / "library.md").read_text()
    blocks = re.findall(r"^```(console|python)\n(.*?)^```", text, re.S | re.M)
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # as tests/test_docs.py's pages have it
    monkeypatch.chdir(tmp_path)
    for run in (1, 2):
        tries = 0
        for kind, body in blocks:
            if kind == "console":  # the page's inputs, made as a reader makes them
                for line in body.splitlines():
                    if line.startswith("$ "):
                        subprocess.run(line[2:], shell=True, check=True)
                continue
            test = doctest.DocTestParser().get_doctest(body, {}, f"library.md run {run}",
                                                       "library.md", 0)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
            runner.run(test)
            assert runner.failures == 0, f"run {run}"
            tries += runner.tries
        assert tries > 40


# ---------------------------------------------------------------------------------------------
# render: what the command prints, byte for byte (the command is the oracle).


@pytest.mark.parametrize("fmt", ["json", "markdown", "csv"])
def test_render_prints_what_params_prints(cli, fmt):
    result = ffncli.params(ffncli.load_spec(preset="llama2-7b"), batch=2, train="qlora",
                           fit="2x24GB", reserve_memory="10%")
    args = ["params", "--preset", "llama2-7b", "--batch", "2", "--train", "qlora", "--fit",
            "2x24GB", "--reserve", "10%"]
    r = cli(*args, *(["--json"] if fmt == "json" else ["--format", fmt]))
    assert r.code == 0 and ffncli.render(result, fmt) == r.out


@pytest.mark.parametrize("fmt", ["json", "markdown", "csv"])
def test_render_prints_what_relu_stats_prints(cli, tmp_path, fmt):
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(1).standard_normal((20, 4)).astype(np.float32))
    result = ffncli.relu_stats(FFN, path)
    r = cli("relu-stats", "--preset", "tiny", "--input", path,
            *(["--json"] if fmt == "json" else ["--format", fmt]))
    assert r.code == 0 and ffncli.render(result, fmt) == r.out


def test_render_prints_what_perplexity_prints(cli):
    result = ffncli.perplexity(GPT2, ids=IDS, ctx=8, sparsify="teal", target_sparsity=0.3)
    r = cli("perplexity", "--weights", GPT2, "--ids", IDS, "--ctx", "8", "--sparsify", "teal",
            "--target-sparsity", "0.3", "--json", "--quiet")
    assert r.code == 0 and ffncli.render(result, "json") == r.out
