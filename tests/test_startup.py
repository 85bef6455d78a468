"""Start-up: counting needs no NumPy, and OpenBLAS is configured before NumPy loads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, os, sys
from ffncli import cli
before = "numpy" in sys.modules
sys.argv = ["ffncli", *sys.argv[1:]]
try:
    cli.main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"numpy_at_import": before, "numpy_after": "numpy" in sys.modules,
                  "timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT"), "code": code}))
"""


def probe(*argv: str, timeout_env: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if timeout_env is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = timeout_env
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_params_never_imports_numpy():
    result = probe("params", "--preset", "base", "--json")
    assert result == {"numpy_at_import": False, "numpy_after": False, "timeout": "18",
                      "code": 0}


@pytest.mark.slow
@pytest.mark.parametrize("user_value, expected", [(None, "18"), ("24", "24")])
def test_run_sets_the_openblas_timeout_before_numpy_unless_the_user_did(user_value, expected):
    result = probe("run", "--preset", "base", "--random", "3", "--json", timeout_env=user_value)
    assert result == {"numpy_at_import": False, "numpy_after": True, "timeout": expected,
                      "code": 0}


def test_the_library_counts_without_numpy():
    """`import ffncli` and counting through the front door never import NumPy."""
    code = ("import sys, ffncli; total = ffncli.count(ffncli.load_spec(preset='base')).total; "
            "print(total, 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["63082496", "False"]


def test_one_version():
    """The version is stated once, in ffncli/__init__.py; the installed metadata agrees."""
    from importlib.metadata import version

    import ffncli

    assert version("ffncli") == ffncli.__version__


MODULES = """
import json, sys
from ffncli.cli import run
code = run(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _modules(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", MODULES, *argv], capture_output=True,
                          text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0
    return set(result["modules"])


@pytest.mark.slow
@pytest.mark.parametrize("argv", [("params", "--preset", "base", "--json"),
                                  ("params", "--preset", "base"),
                                  ("params", "--config", "tests/data/configs/gpt2.config.json",
                                   "--json"),
                                  ("presets", "--json")])
def test_counting_imports_only_what_it_needs(argv, monkeypatch):
    """params and presets load no NumPy, no Dask, no shard machinery, no forward, no text
    tokenizer: only the base, the formats' header readers, the specs, counting, the resolver
    and the presentation of counts."""
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    loaded = _modules(*argv)
    ours = {m for m in loaded if m.startswith("ffncli.")}
    for forbidden in ("numpy", "dask", "distributed", "tokenizers", "gguf"):
        assert forbidden not in loaded, forbidden
    assert not {m for m in ours if m.startswith(("ffncli.compute", "ffncli.analysis",
                                                 "ffncli.jobs.shards", "ffncli.cli.sharded",
                                                 "ffncli.formats.text", "ffncli.formats.tokenizer",
                                                 "ffncli.formats.gguf_tokenizer",
                                                 "ffncli.cli.single",
                                                 "ffncli.formats.tensors"))}, ours
    allowed_rooms = ("ffncli.base", "ffncli.formats", "ffncli.specs", "ffncli.counting",
                     "ffncli.jobs", "ffncli.present", "ffncli.cli", "ffncli.errors",
                     "ffncli.presets")
    assert all(m.startswith(allowed_rooms) for m in ours), ours


# The modules of ffncli that `params --preset base` imports, all of them: a new import on this
# path (a file reader, the training plan, the report page) is a start-up cost every user pays,
# and has to be added here on purpose (issue 24: start-up at most 1.0x `import numpy`).
PRESET_PARAMS = {
    "ffncli", "ffncli.base", "ffncli.base.blas", "ffncli.base.files",
    "ffncli.base.invocation", "ffncli.base.signals", "ffncli.base.textformats",
    "ffncli.base.validate", "ffncli.base.version", "ffncli.cli", "ffncli.cli.commands",
    "ffncli.cli.main", "ffncli.cli.options", "ffncli.counting", "ffncli.counting.model",
    "ffncli.counting.embeddings", "ffncli.counting.flops", "ffncli.counting.kv",
    "ffncli.counting.mixers", "ffncli.counting.parts", "ffncli.counting.rows",
    "ffncli.counting.results", "ffncli.errors", "ffncli.jobs", "ffncli.jobs.choices",
    "ffncli.jobs.params", "ffncli.jobs.resolve", "ffncli.jobs.targets", "ffncli.present",
    "ffncli.present.console", "ffncli.present.jsondoc", "ffncli.present.kv",
    "ffncli.present.params", "ffncli.present.tables", "ffncli.presets",
    "ffncli.specs", "ffncli.specs.rules", "ffncli.specs.sections", "ffncli.specs.spec",
}
# `params --config` of a LLaMA config.json: the preset's modules but the presets, and the
# config's reading: the table of architectures (data) and the one reader module of its family.
LLAMA_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "configs",
                            "llama-2-7b.config.json")
CONFIG_PARAMS = (PRESET_PARAMS - {"ffncli.presets"}) | {
    "ffncli.formats", "ffncli.formats.quantised", "ffncli.formats.safetensors",
    "ffncli.formats.sources", "ffncli.specs.archs", "ffncli.specs.config",
    "ffncli.specs.hfconfig", "ffncli.specs.layouts", "ffncli.specs.readers",
    "ffncli.specs.readers.llama_family", "ffncli.specs.refused", "ffncli.specs.renames",
    "ffncli.specs.row", "ffncli.specs.table", "ffncli.specs.table_zoo",
}
HELP = {"ffncli", "ffncli.base", "ffncli.base.blas", "ffncli.base.invocation",
        "ffncli.base.validate", "ffncli.base.version", "ffncli.cli", "ffncli.cli.commands",
        "ffncli.cli.main", "ffncli.cli.options", "ffncli.errors", "ffncli.jobs",
        "ffncli.jobs.choices", "ffncli.specs", "ffncli.specs.rules", "ffncli.specs.sections",
        "ffncli.specs.spec"}


@pytest.mark.slow
@pytest.mark.parametrize("argv, expected, rich", [
    (("params", "--preset", "base"), PRESET_PARAMS, True),
    (("params", "--preset", "base", "--json"), PRESET_PARAMS, False),
    (("params", "--config", LLAMA_CONFIG, "--json"), CONFIG_PARAMS, False),
    (("--help",), HELP, True),
])
def test_the_main_job_imports_exactly_these_modules(argv, expected, rich, tmp_path,
                                                    monkeypatch):
    """A preset's params: no file readers, no training plan, no report page, no architecture
    table; --json draws nothing, so Rich stays unimported; --help imports no command's work."""
    monkeypatch.chdir(tmp_path)
    loaded = _modules(*argv)
    assert {m for m in loaded if m.startswith("ffncli")} == expected
    assert ("rich" in loaded) is rich
