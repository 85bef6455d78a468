"""Tables for the terminal: they fit its width without cutting a figure (optional columns left
out, text folded), with bars of block characters that shrink and then go in a narrow
terminal."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ffncli.present.console import Text, plain_tables

if TYPE_CHECKING:  # Rich is imported when it draws (~50 ms that --json never pays)
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text as RichText


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
