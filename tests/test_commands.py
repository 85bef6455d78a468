"""The command line as a user meets it (cli/commands.py): --version, --help under headings
with examples that are real command lines, help text that is true of each command."""

from __future__ import annotations

import re
import shlex

import pytest
import typer.main

import ffncli
from ffncli.cli import app
from ffncli.cli.commands import EXAMPLES
from ffncli.cli.options import PANELS

COMMANDS = sorted(EXAMPLES)


def test_version(cli):
    r = cli("--version")
    assert (r.code, r.out, r.err) == (0, f"ffncli {ffncli.__version__}\n", "")
    assert re.fullmatch(r"\d+\.\d+\.\d+", ffncli.__version__)


def _click(command: str):
    return typer.main.get_command(app).commands[command]


def test_every_command_has_examples():
    assert set(EXAMPLES) == set(typer.main.get_command(app).commands)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_headings_and_examples(cli, command):
    r = cli(command, "--help")
    assert r.code == 0
    text = " ".join(r.out.split())
    for line in EXAMPLES[command]:
        assert f"$ {line}" in text
    panels = {name for name, options in PANELS.items()
              if any(o in opts for p in _click(command).params for opts in [p.opts]
                     for o in options)}
    for name in panels:
        assert f"─ {name} ─" in r.out, name


@pytest.mark.parametrize("command", COMMANDS)
def test_examples_are_command_lines_of_their_command(command):
    """Each example parses: the command exists, every option is one of its own, every value
    fits its option's type (the files named need not exist)."""
    for line in EXAMPLES[command]:
        words = shlex.split(line)
        assert words[:2] == ["ffncli", command]
        click_command = _click(command)
        click_command.make_context(command, words[2:])  # a usage error raises
    with pytest.raises(Exception, match="No such option"):  # and the check can fail
        _click(command).make_context(command, ["--no-such-option"])


def test_each_option_sits_under_its_heading():
    """The model, tokens, what-if, scale-out and output options under those headings, in every
    command that has them; params' --precision (of the training plan, not of the output) under
    "Training and fit"."""
    for command in COMMANDS:
        for param in _click(command).params:
            panel = getattr(param, "rich_help_panel", None)
            if command == "params" and "--precision" in param.opts:
                assert panel == "Training and fit", panel
                continue
            for name, options in PANELS.items():
                if any(o in param.opts for o in options):
                    assert panel == name, (command, param.opts, panel)


def test_capture_help_says_what_capture_takes(cli):
    """capture runs a checkpoint: its --weights help does not offer random weights."""
    text = " ".join(cli("capture", "--help").out.split())
    assert "random" not in text.lower()
    assert "Required, or --model." in text
    run = " ".join(cli("run", "--help").out.split())
    assert "Default: random, from the preset's seed." in run


def test_brackets_in_help_are_shown(cli):
    """Rich would read [text] as markup and drop it: the extras are named whole."""
    text = " ".join(cli("relu-stats", "--help").out.split())
    assert "'ffncli[text]'" in text and "'ffncli[dask]'" in text


def test_one_file_and_shards_take_the_same_arguments():
    """The one fork (cli/commands.py's _path) hands the same arguments to either path: an
    option is known on both, or refused there in one line."""
    import inspect

    from ffncli.cli import sharded, single

    names = ("run_command", "relu_stats_command", "capture_command", "perplexity_command",
             "experts_command")
    for name in names:
        mine, theirs = (inspect.signature(getattr(m, name)) for m in (single, sharded))
        assert mine == theirs, name
    assert {n for n in dir(single) if n.endswith("_command") and not n.startswith("_")} \
        == set(names)
