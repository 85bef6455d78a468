"""The least a program on ffncli's stack can do for each start-up target of issue 24.

    python benchmarks/startup_floor.py params --preset presets/base.yaml [--json]
    python benchmarks/startup_floor.py --help

A Typer app of two commands: ``params`` reads a preset with ``yaml.safe_load`` and prints 20
rows, as one Rich table or as JSON (Rich is imported only for the table, as ffncli does), and
``--help`` is Typer's own (drawn with Rich when Rich is installed, as ffncli's is). No counting,
no validation, no error boundary: what Python, Typer, PyYAML and Rich cost before ffncli does
anything. ``bench_startup.py`` times it beside ffncli, so a target below this floor is shown to
be out of reach on the stack, not merely missed.
"""

from __future__ import annotations

import json
import sys

import typer

app = typer.Typer(add_completion=False)


def _rows(path: str) -> list[tuple[str, str]]:
    import yaml

    with open(path, encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    return [(f"part {i}", f"{spec['d_model'] * i:,}") for i in range(20)]


@app.command()
def params(preset: str = typer.Option(..., help="A preset's YAML file."),
           as_json: bool = typer.Option(False, "--json", help="One JSON document.")) -> None:
    """Print 20 rows read from a preset."""
    rows = _rows(preset)
    if as_json:
        sys.stdout.write(json.dumps(dict(rows)) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="parameters")
    table.add_column("part")
    table.add_column("params", justify="right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


@app.command()
def presets() -> None:
    """A second command, so that Typer makes a group, as ffncli's is."""


if __name__ == "__main__":
    app()
