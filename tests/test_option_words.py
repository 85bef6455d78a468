"""Each option known once: the layers below jobs/ name what the caller gave in a library call's
words (the parameters), and the job that knows the command's options passes them
(ffncli.jobs.choices.OPTIONS), so the CLI's lines stay as they were and a library caller is
never told about an option it cannot give."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOWER = ("base", "formats", "specs", "counting", "compute", "analysis")
OPTION = re.compile(r"--[a-z]")

# The string literals below jobs/ that may still name an option, each with its reason. Keyed by
# (file, literal); a docstring is never a message and is not scanned.
ALLOWED: dict[tuple[str, str], str] = {
}


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
