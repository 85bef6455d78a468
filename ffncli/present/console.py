"""The terminal and stdout: a Rich console (no markup parsed in user text, no colour under
NO_COLOR), or under ``--format markdown|csv`` tables as Markdown or CSV. The tables are
:mod:`ffncli.present.tables`', the JSON documents :mod:`ffncli.present.jsondoc`'s, the
progress bar :mod:`ffncli.present.progress`'s."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ffncli.base.textformats import csv_cell, markdown_cell, one_line
from ffncli.base.validate import suggest
from ffncli.errors import InputError

if TYPE_CHECKING:  # Rich is imported when it draws (~50 ms that --json never pays)
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text as RichText


def Text(text: str) -> RichText:  # noqa: N802 - stands in for rich.text.Text
    from rich.text import Text as RichText

    return RichText(text)


TABLE_FORMATS = ("rich", "markdown", "csv")
_TABLE_FORMAT: contextvars.ContextVar[str] = contextvars.ContextVar("table_format",
                                                                   default="rich")


def check_format(name: str, as_json: bool) -> str:
    """``--format``: one of TABLE_FORMATS, and not beside ``--json`` (one document)."""
    if name not in TABLE_FORMATS:
        raise InputError(f"option --format: expected one of {', '.join(TABLE_FORMATS)}, got "
                         f"'{name}'{suggest(name, TABLE_FORMATS)}")
    if as_json and name != "rich":
        raise InputError(f"give --json or --format {name}, not both")
    return name


@contextlib.contextmanager
def table_format(name: str) -> Iterator[None]:
    """Tables printed inside as ``name`` (``--format``): Rich for people, or Markdown / CSV
    on stdout for issues, papers and spreadsheets (no bars, every column)."""
    token = _TABLE_FORMAT.set(name)
    try:
        yield
    finally:
        _TABLE_FORMAT.reset(token)


class PlainConsole:
    """What :func:`console` gives under ``--format markdown|csv``: tables as GitHub Markdown
    (a bold title, then the table) or CSV (the title in a row of its own, the header, the
    rows, a blank row), lines of text as they are (in CSV a one-cell row each)."""

    width = 10**6  # every column is kept

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._blank = True  # the last line written was blank (or nothing was written)

    def _write(self, line: str) -> None:
        """A line; in Markdown, blank lines never two in a row."""
        if line or not self._blank or self.kind == "csv":
            print(line)
        self._blank = not line

    def print(self, *objects: Any, **_: Any) -> None:
        if not objects:
            self._write("")
            return
        for obj in objects:
            if hasattr(obj, "columns") and hasattr(obj, "add_row"):
                self._table(obj)
            else:
                self._line(obj.plain if hasattr(obj, "plain") else str(obj))

    def _line(self, text: str) -> None:
        if self.kind == "csv":
            self._csv([[text]])
        else:  # a paragraph of its own
            self._write(one_line(text))
            self._write("")

    def _table(self, table: Table) -> None:
        def plain(cell: Any) -> str:
            return cell.plain if hasattr(cell, "plain") else str(cell)

        title = plain(table.title) if table.title is not None else ""
        rows = [[plain(c.header) for c in table.columns],
                *map(list, zip(*([plain(x) for x in c.cells] for c in table.columns),
                                strict=True))]
        if self.kind == "csv":  # figures without thousands separators, for a spreadsheet
            body = [[_FIGURE.sub(lambda m: m.group().replace(",", ""), cell) for cell in row]
                    for row in rows]
            self._csv(([[title]] if title else []) + body + [[]])
            return
        self._write("")
        if title:
            self._write(f"**{markdown_cell(title)}**")
            self._write("")
        right = ["---:" if c.justify == "right" else "---" for c in table.columns]
        for row in (rows[0], right, *rows[1:]):
            self._write("| " + " | ".join(markdown_cell(cell) if row is not right else cell
                                          for cell in row) + " |")
        self._write("")

    @staticmethod
    def _csv(rows: Sequence[Sequence[str]]) -> None:
        import csv

        csv.writer(sys.stdout, lineterminator="\n").writerows(
            [csv_cell(cell) for cell in row] for row in rows)


_FIGURE = re.compile(r"(?<![\w.,])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w,])")


def plain_tables(out: Any) -> bool:
    """Whether ``out`` prints tables as Markdown or CSV (no bars then)."""
    return isinstance(out, PlainConsole)


UNBROKEN = 10**5  # the width of a console that is not a terminal: lines are never broken


def console(stderr: bool = False) -> Console:
    """The console for stdout (or stderr): Rich, or under ``--format markdown|csv`` on
    stdout a :class:`PlainConsole` (typed as Rich's: it takes the calls the tables make)."""
    from rich.console import Console

    kind = _TABLE_FORMAT.get()
    if kind != "rich" and not stderr:
        return PlainConsole(kind)  # type: ignore[return-value]
    stream = sys.stderr if stderr else sys.stdout
    # Output to a file or a pipe has no width: no line is broken (a long path, a
    # counterexample), tables keep every column. COLUMNS, when set, is a width asked for.
    unbroken = not stream.isatty() and "COLUMNS" not in os.environ
    # crop=False: a table too wide for a narrow terminal is drawn whole (the terminal wraps
    # its lines), not cut at the edge (see new_table)
    out = Console(file=stream, highlight=False, markup=False, emoji=False,
                  width=UNBROKEN if unbroken else None, soft_wrap=unbroken)
    out.print = functools.partial(out.print, crop=False)  # type: ignore[method-assign]
    return out
