"""The config readers' rooms (ffncli/specs/readers/): the table names each reader by string, so
importing the table, or counting a preset, imports no reader module; reading a config imports
its family's module and no other; every row's reader resolves to a function."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA

from ffncli.specs.row import Arch, multimodal, read
from ffncli.specs.table import ARCHS

ROOT = Path(__file__).resolve().parents[1]
ZOO_CONFIGS = DATA / "zoo" / "configs"


def _run(code: str, *argv: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


READERS_LOADED = """
import json, sys
{body}
print(json.dumps(sorted(m for m in sys.modules if m.startswith("ffncli.specs.readers."))))
"""


def test_importing_the_table_imports_no_reader():
    loaded = _run(READERS_LOADED.format(body="import ffncli.specs.archs"))
    assert loaded == []


def test_counting_a_preset_imports_no_reader():
    body = ("from ffncli.cli import run\n"
            "assert run(['params', '--preset', 'base', '--json']) == 0")
    assert _run(READERS_LOADED.format(body=body)) == []


SPECS_LOADED = """
import json, sys
from ffncli.cli import run
assert run(sys.argv[1:]) == 0
print(json.dumps(sorted(m for m in sys.modules if m.startswith("ffncli.specs."))))
"""


@pytest.mark.parametrize("argv, expected", [
    # a preset's count defines no mixer classes (specs/layers.py) and reads no config
    (("params", "--preset", "base", "--json"), ["ffncli.specs.rules", "ffncli.specs.sections",
                                                 "ffncli.specs.spec"]),
    # a LLaMA config: its family's reader, the kit, no mixer classes
    (("params", "--config", "tests/data/configs/llama-2-7b.config.json", "--json"),
     ["ffncli.specs.archs", "ffncli.specs.config", "ffncli.specs.hfconfig",
      "ffncli.specs.layouts", "ffncli.specs.readers", "ffncli.specs.readers.llama_family",
      "ffncli.specs.refused", "ffncli.specs.renames", "ffncli.specs.row", "ffncli.specs.rules",
      "ffncli.specs.sections", "ffncli.specs.spec", "ffncli.specs.table",
      "ffncli.specs.table_zoo"]),
    # a Mamba config: the mixer classes, with its family's reader
    (("params", "--config", "tests/data/zoo/configs/mamba.config.json", "--json"),
     ["ffncli.specs.archs", "ffncli.specs.config", "ffncli.specs.hfconfig",
      "ffncli.specs.layers", "ffncli.specs.layouts", "ffncli.specs.readers",
      "ffncli.specs.readers.ssm_family",
      "ffncli.specs.refused", "ffncli.specs.renames", "ffncli.specs.row", "ffncli.specs.rules",
      "ffncli.specs.sections", "ffncli.specs.spec", "ffncli.specs.table",
      "ffncli.specs.table_zoo"]),
])
def test_a_count_imports_the_specs_modules_it_needs_only(argv, expected):
    assert _run(SPECS_LOADED, *argv) == expected


# Each type's default config (transformers' class defaults, tests/data/zoo/configs) read in a
# fresh set of reader modules: the modules its reading imported.
PER_TYPE = """
import json, sys
from pathlib import Path
from ffncli.errors import FfnError
from ffncli.specs.archs import load_config
from ffncli.specs.table import ARCHS
found = {}
for model_type in ARCHS:
    for name in [m for m in sys.modules if m.startswith("ffncli.specs.readers.")]:
        del sys.modules[name]
    try:
        load_config(Path(sys.argv[1]) / f"{model_type}.config.json")
    except FfnError:
        pass  # refused on its defaults: its reader still ran
    found[model_type] = sorted(m.rsplit(".", 1)[1] for m in sys.modules
                               if m.startswith("ffncli.specs.readers."))
print(json.dumps(found))
"""


def _module(row: Arch) -> str:
    """The reader module a row names: ``read("module.function")``'s module, or the module of
    the text type a multimodal row reads."""
    name = row.reader.__qualname__
    text = re.fullmatch(r"multimodal\('(.+)'\)", name)
    return _module(ARCHS[text.group(1)]) if text else name.split(".")[0]


def _with_its_imports(module: str) -> list[str]:
    """The reader module and the reader modules it imports itself (seq2seq: encoders')."""
    tree = ast.parse((ROOT / "ffncli" / "specs" / "readers" / f"{module}.py").read_text())
    named = {node.module.rsplit(".", 1)[1] for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module
             and node.module.startswith("ffncli.specs.readers.")}
    return sorted({module} | named)


@pytest.mark.slow
def test_reading_a_config_imports_its_familys_module_only():
    found = _run(PER_TYPE, str(ZOO_CONFIGS))
    assert found == {t: _imported(row) for t, row in ARCHS.items()}


def _imported(row: Arch) -> list[str]:
    """The modules reading a row's config imports: its reader's, and, when it reads its
    language model as another type (``text_type``: VibeVoice's Qwen2), that type's."""
    text_type = getattr(row.reader, "options", {}).get("text_type")
    also = _imported(ARCHS[text_type]) if text_type else []
    return sorted(set(_with_its_imports(_module(row))) | set(also))


def test_every_row_names_a_reader_function_that_exists():
    missing = []
    for model_type, row in ARCHS.items():
        name = row.reader.__qualname__
        if name.startswith("multimodal("):
            continue  # its text type's row is checked
        module, function = name.rsplit(".", 1)
        loaded = importlib.import_module(f"ffncli.specs.readers.{module}")
        if not callable(getattr(loaded, function, None)):
            missing.append(f"{model_type}: {name}")
    assert missing == []


def test_a_reader_is_named_module_dot_function_and_called_with_its_options():
    reader = read("t5_family.t5_variant_spec", family="mt5", vocab_size=7,
                  feed_forward_proj="gated-gelu")
    assert reader.__qualname__ == "t5_family.t5_variant_spec"
    from ffncli.specs.hfconfig import Config

    spec = reader(Config({"model_type": "mt5"}, "c.json"))
    assert (spec.family, spec.embeddings.vocab, spec.ffn.gated) == ("mt5", 7, True)


def test_a_multimodal_reader_is_named_by_its_text_type():
    assert multimodal("gemma3_text").__qualname__ == "multimodal('gemma3_text')"


def test_every_package_folder_is_a_package_of_the_build():
    """pyproject's [tool.setuptools] packages lists every folder of ffncli with an __init__.py
    (a folder missing from it is missing from a wheel)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^packages = \[(.*?)^\]", text, re.M | re.S)
    assert block
    listed = set(re.findall(r'"([\w.]+)"', block.group(1))) - {"ffncli.presets"}
    folders = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "ffncli").rglob("__init__.py")}
    assert listed == folders
