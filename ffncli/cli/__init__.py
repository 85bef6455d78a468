"""The command line: a thin Typer skin over the jobs. ``ffncli.cli:main`` is the console script,
``ffncli.cli.run(argv)`` runs one command in-process (the tests do), returning its exit code."""

from ffncli.cli.commands import app
from ffncli.cli.main import main, run

__all__ = ["app", "main", "run"]
