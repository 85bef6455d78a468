"""The command line this process is running, as ``ffncli.cli.main.run`` was given it: what a
report's footer quotes (``sys.argv`` is not it when the CLI runs inside another program)."""

from __future__ import annotations

import shlex
import sys

_argv: list[str] | None = None


def set_arguments(argv: list[str] | None) -> None:
    """The arguments after ``ffncli`` (None: this process's own, ``sys.argv[1:]``)."""
    global _argv
    _argv = None if argv is None else list(argv)


def command_line() -> str:
    """``ffncli ARGS...`` as a shell would take it back."""
    return "ffncli " + shlex.join(sys.argv[1:] if _argv is None else _argv)
