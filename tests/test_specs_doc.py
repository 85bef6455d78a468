"""docs/specs.md's list of model types is generated from the table of architectures
(tools/specs_doc.py) and equal to it; the hand-written notes beside it name each type once."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from ffncli.specs.table import ARCHS, SUPPORTED_MODEL_TYPES

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "specs_doc.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("ffncli_specs_doc", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_list_is_the_tables(tool):
    page = (ROOT / "docs" / "specs.md").read_text(encoding="utf-8")
    assert tool.current(page) == tool.generated(), (
        "docs/specs.md's list of model types is not the table's: run python tools/specs_doc.py")


def test_the_list_names_every_type_in_the_tables_order_with_the_version(tool):
    text = tool.generated()
    assert f"{len(ARCHS)} model types, checked against transformers 5.25.0:" in text
    rows = re.findall(r"^\| `([^`]+)` \| (.*) \|$", text, re.M)[1:]  # not the head
    assert [t for t, _ in rows] == list(SUPPORTED_MODEL_TYPES)
    cells = dict(rows)
    assert cells["llama"] == "LlamaForCausalLM | `llama_family` | yes"
    assert cells["bert"] == "BertModel | `bert_family` | yes"  # a masked-LM type: its bare model
    assert cells["t5"] == "T5ForConditionalGeneration | `t5_family` | yes"
    assert cells["gemma3"] == ("Gemma3ForConditionalGeneration | its `text_config` as "
                               "`gemma3_text` | no (its checkpoint layout is not known)")
    assert cells["llama4"].startswith("Llama4ForCausalLM |")  # built on its text_config
    assert cells["gemma3n"].startswith(
        "Gemma3nForConditionalGeneration (not built from its defaults) |")
    assert cells["qwen3_moe"].endswith("| `moe_family` | yes")
    assert cells["mellum"].endswith(
        "| `moe_family` | no: top-k weights renormalised only with norm_topk_prob")


@pytest.mark.parametrize("entry, expected", [
    (None, "(not in the zoo)"),
    ({"builds": {}}, "(not in the zoo)"),
    ({"builds": {"causal_lm": {"class": "A", "status": "built"},
                 "base": {"class": "B", "status": "built"}}}, "B"),
    ({"builds": {"causal_lm": {"class": "A", "status": "built"},
                 "seq2seq_lm": {"class": "S", "status": "failed: x"}}},
     "S (not built from its defaults)"),
])
def test_the_class_counted_is_the_zoos_rule(tool, entry, expected):
    assert tool._counted_as(entry) == expected


def test_the_check_fails_and_names_the_command_when_the_list_is_stale(tool, tmp_path,
                                                                         monkeypatch, capsys):
    page = tmp_path / "specs.md"
    page.write_text(f"intro\n{tool.BEGIN}\n| `gpt2` | old |\n{tool.END}\nnotes\n")
    monkeypatch.setattr(tool, "PAGE", page)
    monkeypatch.setattr("sys.argv", ["specs_doc.py", "--check"])
    assert tool.main() == 1
    assert capsys.readouterr().err.endswith("not the table's: run python tools/specs_doc.py\n")
    monkeypatch.setattr("sys.argv", ["specs_doc.py"])
    assert tool.main() == 0
    text = page.read_text()
    assert text.startswith("intro\n") and text.endswith("\nnotes\n")
    assert tool.current(text) == tool.generated()


def _noted_types() -> list[str]:
    """The model types of the hand-written notes (docs/specs.md, "What each type reads")."""
    text = (ROOT / "docs" / "specs.md").read_text(encoding="utf-8")
    table = text.split("## What each type reads", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")][1:]  # not the head
    return [name for row in rows for name in re.findall(r"`([^`]+)`", row.split(" | ")[0])]


def test_the_notes_name_each_type_of_the_table_once():
    noted = _noted_types()
    assert len(noted) == len(set(noted))
    assert set(noted) == set(SUPPORTED_MODEL_TYPES)
