"""The terminal and stdout: a Rich console (no markup parsed in user text, no colour under
NO_COLOR), one JSON document written on stdout, tables with bars that shrink and then go in a
narrow terminal, and the one progress bar on stderr."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ffncli.base.textformats import csv_cell, markdown_cell, one_line
from ffncli.base.validate import suggest
from ffncli.errors import InputError
from ffncli.jobs.progress import Progress

if TYPE_CHECKING:  # Rich is imported when it draws (~50 ms that --json never pays)
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text as RichText

    from ffncli.jobs.shards.inputs import Skipped



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


NONFINITE_LISTED = 10  # places of NaN or infinity named in a document's "nonfinite" note
JSON_VERSION = 1  # of every --json document: what may change within it, docs/json.md
JSON_NAMES = ("params", "params-file", "presets", "run", "run-shards", "permute-check",
              "relu-stats", "relu-stats-sweep", "capture", "capture-shards", "perplexity")


def json_format(name: str) -> str:
    """The ``format`` a document of kind ``name`` (one of JSON_NAMES) states first:
    ``ffncli-relu-stats/1``."""
    if name not in JSON_NAMES:
        raise ValueError(f"no JSON document is named {name!r}")  # a bug, not the user's
    return f"ffncli-{name}/{JSON_VERSION}"


def emit_json(doc: dict[str, Any], name: str) -> None:
    """One strict JSON document on stdout, its first key ``format`` naming it (see
    :func:`json_format`). NaN and infinity in a result (``--allow-nonfinite``, or an FFN that
    overflowed) are not JSON: each is written as null, and the document gains a ``nonfinite``
    note saying how many there were and where the first are (docs/json.md)."""
    doc = {"format": json_format(name), **doc}
    try:
        text = json.dumps(doc, indent=2, allow_nan=False)
    except ValueError:  # NaN or infinity somewhere: rarely, so only then walked
        places: list[dict[str, str]] = []
        clean = _nonfinite_to_null(doc, "", places)
        clean["nonfinite"] = {
            "count": len(places), "first": places[:NONFINITE_LISTED],
            "note": "NaN and infinity are not JSON: each is written as null"}
        text = json.dumps(clean, indent=2, allow_nan=False)
    print(text)


def _nonfinite_to_null(value: Any, path: str, places: list[dict[str, str]]) -> Any:
    """``value`` with every NaN and infinity replaced by None, each place (``output[1][0]``)
    and value (``NaN``, ``Infinity``, ``-Infinity``) appended to ``places``."""
    if isinstance(value, float) and not math.isfinite(value):
        places.append({"path": path, "value": "NaN" if value != value else
                       "Infinity" if value > 0 else "-Infinity"})
        return None
    if isinstance(value, dict):
        return {k: _nonfinite_to_null(v, f"{path}.{k}" if path else str(k), places)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nonfinite_to_null(v, f"{path}[{i}]", places) for i, v in enumerate(value)]
    return value


ECHO_ROOM = 3  # cells the progress bar leaves free at the end of its line (see Bar._show)


class Bar(Progress):
    """The one progress bar: Rich, on stderr when it is a terminal (never on stdout, which
    ``--json`` keeps for its one document), drawn once a job has run for DELAY seconds (a
    shorter one ends before a bar would say anything): tokens through the model (per layer
    when a walk counts token-layers) or shards done, with tokens per second and the time
    left. A job's note (a Dask dashboard's address) goes to stderr at once. Off with
    ``enabled=False`` (``--quiet``). Use it as a context manager."""

    DELAY = 2.0  # seconds before the bar is drawn

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._stack = contextlib.ExitStack()
        self._bar: Any = None
        self._task: Any = None
        self._start = time.perf_counter()
        self._total = 0
        self._unit = "tokens"
        self._per = 1
        self._done = 0
        self._tokens = 0

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def start(self, total: int, unit: str = "tokens", note: str | None = None,
              per: int = 1) -> None:
        """``per``: layers each token goes through, when ``total`` counts token-layers."""
        if note:
            print(f"Dask dashboard: {note}", file=sys.stderr)
        self._total, self._unit, self._per = total, unit, max(per, 1)
        self._done = self._tokens = 0
        self._start = time.perf_counter()

    def update(self, done: int) -> None:
        self._done = done
        self._tokens = done // self._per
        self._draw()

    def advance(self, tokens: int) -> None:
        self._done += 1
        self._tokens += tokens
        self._draw()

    def _draw(self) -> None:
        elapsed = time.perf_counter() - self._start
        if self._bar is None:
            if not self.enabled or elapsed < self.DELAY or self._done >= self._total or \
                    not sys.stderr.isatty():
                return
            self._show()
        rate = f"{self._tokens / max(elapsed, 1e-9):,.0f} tokens/s"
        self._bar.update(self._task, completed=self._done, rate=rate)

    def _show(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        out = console(stderr=True)
        # Narrower than the terminal by the "^C" it echoes on Ctrl-C: after a line that fills
        # the width that echo wraps, Rich's last frame lands a line lower and the bar it
        # clears on the way out is that one, not the one left above it.
        out.width = max(out.width - ECHO_ROOM, 1)
        bar = RichProgress(
            TextColumn(self._unit), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
            console=out, transient=True)
        self._stack.callback(bar.stop)  # before it starts: a signal while it starts clears it
        bar.start()
        self._bar = bar
        self._task = self._bar.add_task(self._unit, total=self._total, rate="")


def commas(value: int) -> str:
    return f"{value:,}"


def pct(share: float) -> str:
    return f"{share:.1%}"


def new_table(title: str, columns: Iterable[str], optional: Sequence[str] = ()) -> Table:
    """A table that fits the width it is drawn in without cutting a figure: too wide, it
    leaves out its ``optional`` columns (in that order, with a note under it), then folds
    its text cells (words, headers) onto more lines. A cell with a digit in it is never
    folded nor cut: when even those do not fit, the table is drawn wider than the terminal
    (which wraps its lines) rather than show part of a number."""
    table = _fitting_table()(title=Text(title), title_justify="left", show_edge=False,
                             pad_edge=False, min_width=len(title), optional=tuple(optional))
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    return table


TEXT_MIN = 6  # a header folds to no fewer cells than this
TEXT_MAX = 16  # a word of text longer than this may fold
_GAP = 3  # the padding and the rule between two columns


def _floor(cell: str) -> int:
    """The fewest cells ``cell`` may take: all of them for a figure (or a bar); for text, its
    longest word (a word longer than TEXT_MAX folds)."""
    if any(c.isdigit() for c in cell) or (cell and cell.strip(_BLOCKS) == ""):
        return len(cell)
    return min(max(map(len, cell.split() or [""])), TEXT_MAX)


def fit_widths(headers: Sequence[str], cells: Sequence[Sequence[str]], optional: Sequence[int],
               width: int) -> tuple[list[int], dict[int, int]]:
    """The columns kept to fit ``width`` and each one's width. A column is as wide as its
    widest cell or header; narrower, its header wraps at its spaces (snug: as wide as its
    longest word or widest cell), then its text cells fold (to :func:`_floor`). ``optional``
    columns are left out, in that order, while the others are not snug within ``width``."""
    natural = [max([len(h), *map(len, col)]) for h, col in zip(headers, cells, strict=True)]
    snug = [max([*map(len, h.split() or [""]), *map(len, col)])
            for h, col in zip(headers, cells, strict=True)]
    floor = [max([min(len(h), TEXT_MIN), *map(_floor, col)])
             for h, col in zip(headers, cells, strict=True)]
    kept = list(range(len(headers)))

    def room(columns: list[int]) -> int:
        return width - _GAP * (len(columns) - 1)

    for i in optional:
        if sum(snug[k] for k in kept) <= room(kept) or len(kept) == 1:
            break
        kept.remove(i)
    widths = {k: natural[k] for k in kept}
    excess = sum(widths.values()) - room(kept)
    for least in (snug, floor):
        while excess > 0:
            k = max(kept, key=lambda k: widths[k] - least[k])
            if widths[k] <= least[k]:
                break
            widths[k] -= 1
            excess -= 1
    return kept, widths


@functools.cache
def _fitting_table() -> Callable[..., Table]:
    from rich.table import Table

    class FittingTable(Table):
        def __init__(self, *args: Any, optional: tuple[str, ...] = (), **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.optional = optional

        def __rich_console__(self, console: Console, options: Any) -> Any:
            def plain(cell: Any) -> str:
                return cell.plain if hasattr(cell, "plain") else str(cell)

            headers = [plain(c.header) for c in self.columns]
            cells = [[plain(cell) for cell in c.cells] for c in self.columns]
            kept, widths = fit_widths(headers, cells, [headers.index(n) for n in self.optional],
                                      options.max_width)
            inner = Table(title=self.title, title_justify=self.title_justify, show_edge=False,
                          pad_edge=False, min_width=min(self.min_width or 0, options.max_width))
            for k in kept:
                inner.add_column(self.columns[k].header, justify=self.columns[k].justify,
                                 width=widths[k], overflow="fold")
            for row in zip(*(self.columns[k].cells for k in kept), strict=True):
                inner.add_row(*row)
            whole = sum(widths.values()) + _GAP * (len(kept) - 1)
            yield from console.render(inner, options.update(max_width=max(whole,
                                                                          options.max_width)))
            left_out = [headers[i] for i in range(len(headers)) if i not in kept]
            if left_out:
                yield Text(f"(left out to fit {options.max_width} columns: "
                           f"{', '.join(left_out)}; --json has them all)")

    return FittingTable


# Bars drawn with block characters, eighths of a cell for the end: they scale with the
# console (shorter on a narrow terminal, left out when fewer than BAR_MIN cells are free, so a
# table never wraps), and take a colour only where Rich allows one (not under NO_COLOR).

BAR_MAX = 40  # cells of a full bar
BAR_MIN = 8  # fewer cells than this say nothing: no bar
BAR_STYLE = "cyan"
_EIGHTHS = " ▏▎▍▌▋▊▉"
_BLOCKS = "█▏▎▍▌▋▊▉░"


def bar(share: float, width: int, track: bool = False) -> str:
    """``share`` (0 to 1, clamped) of ``width`` cells in full blocks and one partial block;
    with ``track`` the rest of the width in light shade, so that the whole reads as 100%."""
    eighths = round(min(max(share, 0.0), 1.0) * width * 8)
    full, rest = divmod(eighths, 8)
    drawn = "█" * full + (_EIGHTHS[rest] if rest else "")
    return drawn + "░" * (width - len(drawn)) if track else drawn


def _bar_text(share: float | None, width: int, track: bool) -> RichText:
    from rich.text import Text as RichText

    return RichText("" if share is None else bar(share, width, track), style=BAR_STYLE)


def _bar_room(out: Console, table: Table) -> int:
    """Cells free for a bar column beside ``table`` on this console (its natural width, not
    the title's, plus the column's separator): 0 when fewer than BAR_MIN."""
    min_width, table.min_width = table.min_width, None
    used = out.measure(table).maximum
    table.min_width = min_width
    room = min(BAR_MAX, out.width - used - 3)
    return room if room >= BAR_MIN else 0


def bar_table(out: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
               shares: Sequence[float | None], *, after: int | None = None,
               track: bool = False, heading: str = "", optional: Sequence[str] = ()) -> Table:
    """A table of ``rows`` with a bar column of ``shares`` after column ``after`` (default
    the last), as wide as the console leaves room for; without it when there is none (the
    bar goes before any ``optional`` column does, see :func:`new_table`)."""
    table = new_table(title, columns, optional)
    for row in rows:
        table.add_row(*row)
    width = 0 if plain_tables(out) else _bar_room(out, table)
    if not width:
        return table
    at = len(columns) if after is None else after + 1
    table = new_table(title, [*columns[:at], heading, *columns[at:]], optional)
    table.columns[at].justify = "left"
    for row, share in zip(rows, shares, strict=True):
        table.add_row(*row[:at], _bar_text(share, width, track), *row[at:])
    return table


def share_bar_line(out: Console, indent: int, share: float) -> None:
    """A share printed on the line above, drawn under it with its 100% track."""
    width = min(BAR_MAX, out.width - indent)
    if width >= BAR_MIN and not plain_tables(out):
        from rich.text import Text as RichText

        line = RichText(" " * indent)
        line.append(bar(share, width, track=True), style=BAR_STYLE)
        out.print(line)


def emit_written(done: Any, as_json: bool, name: str, fields: dict[str, Any], counted: str,
                 source: str) -> None:
    """What a writing job over shards (``run``, ``capture``) wrote into ``--out``: the
    shards written, those complete from an earlier run, those left out (on stderr).
    ``name``: the JSON document's (``run-shards``); ``fields``: the job's own keys of it;
    ``counted``, ``source``: its words after the token count and after the semicolon of the
    line for people."""
    if as_json:
        emit_json({"out": done.out, "shards": done.shards, "tokens": done.tokens, **fields,
                   "written": done.written, "already_complete": done.already,
                   "skipped": skipped_json(done.skipped)}, name)
    else:
        print(f"{done.out}: {len(done.written):,} shard(s) written, {len(done.already):,} "
              f"already complete, of {done.shards:,} ({done.tokens:,} tokens{counted}); "
              f"{source}")
    print_skipped(done.skipped)


def skipped_json(skipped: Sequence[Skipped]) -> list[dict[str, str]]:
    """The shards a job left out with ``--skip-bad``, for ``--json``."""
    return [dataclasses.asdict(s) for s in skipped]


def print_skipped(skipped: Sequence[Skipped]) -> None:
    """One ``skipped:`` line on stderr per shard left out."""
    for s in skipped:
        print(f"skipped: {s.error}", file=sys.stderr)
