"""The house's layout, held to the tree: the module map of docs/development.md names every
module of ffncli/ and no other, and function-level imports stay within their budget."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ffncli"
MAP_PAGE = ROOT / "docs" / "development.md"


def _outside_parentheses(text: str) -> str:
    """``text`` with every parenthesised part (nested ones too) taken out."""
    kept, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"a ')' without its '(' in {text!r}")
        elif depth == 0:
            kept.append(ch)
    if depth:
        raise ValueError(f"a '(' without its ')' in {text!r}")
    return "".join(kept)


def map_entries(page: str) -> dict[str, str]:
    """The map's entries, {folder or file under ffncli/: the text beside it}. An entry starts
    at four spaces (a folder's entry at six is a subfolder of the one above); lines indented
    further continue it."""
    block = re.search(r"^  ```\n  ffncli/\n(.*?)^  ```$", page, re.M | re.S)
    assert block, "docs/development.md has no map of ffncli/ in a fenced block"
    entries: dict[str, str] = {}
    parent = current = ""
    for line in block.group(1).splitlines():
        entry = re.match(r"^( {4}| {6})(\S+)(?:\s+(.*))?$", line)
        if entry:
            indent, name, text = entry.groups()
            current = (parent if len(indent) == 6 else "") + name
            if len(indent) == 4 and name.endswith("/"):
                parent = name
            assert current not in entries, f"the map names {current} twice"
            entries[current] = text or ""
        else:
            assert line.startswith(" " * 8) and current, (
                f"a line of the map outside an entry: {line!r}")
            entries[current] += " " + line.strip()
    return entries


def modules_in_map(page: str) -> set[str]:
    """Every module the map names, as a path under ffncli/ (``base/validate.py``): a file
    entry, or each name outside parentheses in a folder's entry (names apart by commas or
    "and")."""
    named = set()
    for entry, text in map_entries(page).items():
        words = [w.strip() for w in re.split(r",| and ", _outside_parentheses(text))]
        words = [w for w in words if w]
        if entry.endswith(".py"):
            assert not words, f"{entry}: text outside parentheses: {words}"
            named.add(entry)
            continue
        for word in words:
            assert re.fullmatch(r"[a-z_][a-z0-9_]*", word), (
                f"{entry}: {word!r} outside parentheses is not a module name")
            named.add(f"{entry}{word}.py")
    return named


def modules_in_tree() -> set[str]:
    return {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py"}


def folders_in_tree() -> set[str]:
    return {p.parent.relative_to(PACKAGE).as_posix() + "/" for p in PACKAGE.rglob("__init__.py")
            if p.parent != PACKAGE}


def test_the_map_names_every_module_of_the_tree_and_no_other():
    page = MAP_PAGE.read_text(encoding="utf-8")
    named, present = modules_in_map(page), modules_in_tree()
    assert sorted(present - named) == [], "modules the map of docs/development.md misses"
    assert sorted(named - present) == [], "modules the map names that are not in ffncli/"
    folders = {e for e in map_entries(page) if e.endswith("/")}
    assert folders == folders_in_tree()


MAP = """\
  ```
  ffncli/
    errors.py      (the errors)
    base/          validate (values), files
                   (reads, (nested) writes) and signals
      deep/        one
    api.py         (the front door)
  ```
"""


@pytest.mark.parametrize("page, expected", [
    (MAP, {"errors.py", "base/validate.py", "base/files.py", "base/signals.py",
           "base/deep/one.py", "api.py"}),
    (MAP.replace("and signals", "and signals (held)"),
     {"errors.py", "base/validate.py", "base/files.py", "base/signals.py", "base/deep/one.py",
      "api.py"}),
])
def test_the_map_reader_takes_the_names_outside_parentheses(page, expected):
    assert modules_in_map(page) == expected


@pytest.mark.parametrize("page, message", [
    (MAP.replace("(values)", "values"), "'validate values' outside parentheses"),
    (MAP.replace("(the errors)", "the errors"), "errors.py: text outside parentheses"),
    (MAP.replace("(values)", "(values"), "a '(' without its ')'"),
    (MAP.replace("    api.py ", "   api.py  "), "a line of the map outside an entry"),
])
def test_the_map_reader_refuses_prose_outside_parentheses(page, message):
    with pytest.raises((AssertionError, ValueError), match=re.escape(message)):
        modules_in_map(page)


# ---- function-level imports ----------------------------------------------------------------
# An import inside a function hides a module's dependencies from its reader; it is kept where
# `params`' start-up needs it (tests/test_startup.py pins the modules params imports). These
# are today's counts (issue 41 §5: 179 and 253; 172 and 246 after present/; 145 and 218 after
# cli/single.py took the single-file path's imports to its top): they
# may go down, never up. Lower them when you move one. (+2 on 2026-12-05, issue 40's start-up:
# counting/model.py reaches the Mamba mixers' classes, specs/layers.py, only when a spec has one.)
BUDGET_FFNCLI = 147  # imports of ffncli's own modules inside functions
BUDGET_ALL = 220  # every import inside a function (the standard library's and others' too)


def function_level_imports() -> list[tuple[str, int, str]]:
    """(file under ffncli/, line, the import) of every import statement inside a function."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        found.add((path.relative_to(PACKAGE).as_posix(), node.lineno,
                                   ast.unparse(node)))
    return sorted(found)


def is_ffncli(statement: str) -> bool:
    return bool(re.match(r"(from \.|from ffncli[. ]|import ffncli\b)", statement))


@pytest.mark.slow
def test_function_level_imports_stay_within_their_budget():
    found = function_level_imports()
    ours = [f for f in found if is_ffncli(f[2])]
    assert len(ours) <= BUDGET_FFNCLI, (
        f"{len(ours)} imports of ffncli modules inside functions, the budget is "
        f"{BUDGET_FFNCLI}: import at the module's top unless params' start-up needs it")
    assert len(found) <= BUDGET_ALL, (
        f"{len(found)} imports inside functions, the budget is {BUDGET_ALL}")


@pytest.mark.parametrize("statement, ours", [
    ("from ffncli.base import files", True), ("from . import spec", True),
    ("from ..errors import FfnError", True), ("import ffncli.presets", True),
    ("from ffncli import cli", True), ("import numpy as np", False),
    ("from ffncli_extra import x", False), ("from rich.table import Table", False),
])
def test_an_import_of_ffncli_is_told_from_others(statement, ours):
    assert is_ffncli(statement) is ours


def test_imports_nested_in_a_function_are_counted_once(tmp_path, monkeypatch):
    package = tmp_path / "ffncli"
    package.mkdir()
    (package / "m.py").write_text("import os\n\ndef f():\n    import json\n\n    def g():\n"
                                  "        from . import m\n    return g\n")
    monkeypatch.setitem(globals(), "PACKAGE", package)
    assert function_level_imports() == [("m.py", 4, "import json"), ("m.py", 7, "from . import m")]
