"""The drawing kit of the HTML report: inline SVG charts (bars, columns, lines, stacked bars, a
heat map) and tables whose number cells name the JSON value they show. Every string is
escaped; no script, nothing fetched."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

WIDTH, HEIGHT = 720, 280  # a chart's SVG size in pixels
# Okabe and Ito's colours, told apart with each common colour-vision deficiency; for more lines
# than these, a ramp of viridis (LAYER_RAMP), whose lightness alone orders them.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442")
LAYER_RAMP = ("#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962",
              "#addc30", "#fde725")
LIGHT = {"#E69F00", "#56B4E9", "#F0E442"}  # dark text on these
STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
footer { margin-top: 3em; border-top: 1px solid #ddd; padding-top: 0.5em; color: #555;
  font-size: 0.85em; }
footer code { white-space: pre-wrap; word-break: break-all; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; }
p.meta { margin: 0.2em 0; color: #444; }
table { border-collapse: collapse; margin: 0.5em 0 1em 0; font-size: 0.85em;
  display: block; max-width: 100%; overflow-x: auto; }
th, td { padding: 0.15em 0.7em; border-bottom: 1px solid #ddd; }
th { text-align: right; } th:first-child { text-align: left; }
td { text-align: right; font-variant-numeric: tabular-nums; }
td:first-child { text-align: left; }
svg { display: block; }
svg text { font-family: sans-serif; font-size: 11px; fill: #333; }
"""


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


# ---------------------------------------------------------------------------------------------
# Numbers as text: integers with thousands separators, shares as percentages.


def commas(value: int) -> str:
    return f"{value:,}"


def percent(share: float, digits: int = 1) -> str:
    return f"{100 * share:.{digits}f}%"


def fixed(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


# ---------------------------------------------------------------------------------------------
# Tables.


@dataclass(frozen=True)
class Cell:
    """A table cell: its text, and the value of the JSON document it shows (a path such as
    ``activity_histogram.3.units``, or an expression of paths), None for plain labels."""

    text: str
    source: str | None = None


def number_table(columns: Sequence[str], rows: Iterable[Sequence[Cell | str]], name: str) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            if isinstance(cell, str):
                cell = Cell(cell)
            source = f' data-json="{escape(cell.source)}"' if cell.source is not None else ""
            cells.append(f"<td{source}>{escape(cell.text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<table class="numbers" id="{escape(name)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


# ---------------------------------------------------------------------------------------------
# Charts: inline SVG drawn from lists of numbers.

LEFT, RIGHT, TOP, BOTTOM = 150, 20, 20, 40  # margins inside the SVG


def svg_element(body: Sequence[str], title: str, height: int = HEIGHT) -> str:
    return (f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
            f'role="img" aria-label="{escape(title)}">{"".join(body)}</svg>')


def text_at(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{escape(text)}</text>')


def rect(x: float, y: float, w: float, h: float, fill: str, title: str = "") -> str:
    tip = f"<title>{escape(title)}</title>" if title else ""
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
            f'fill="{fill}">{tip}</rect>')


def line(x1: float, y1: float, x2: float, y2: float, colour: str = "#999") -> str:
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{colour}" stroke-width="1"/>')


def hbars(items: Sequence[tuple[str, float, str]], title: str, scale: float | None = None,
          x_label: str = "") -> str:
    """Horizontal bars: (label, value, value as text), scaled to ``scale`` (default the
    largest value), with the values' axis title ``x_label`` (what they count, in what)
    under them."""
    top = scale if scale is not None else max([v for _, v, _ in items], default=0) or 1.0
    step = 22
    height = TOP + step * len(items) + (30 if x_label else 10)
    plot = WIDTH - LEFT - RIGHT - 70
    body = []
    for i, (label, value, shown) in enumerate(items):
        y = TOP + i * step
        w = plot * min(max(value / top, 0.0), 1.0)
        body.append(text_at(LEFT - 8, y + 14, label, "end"))
        if scale is not None:
            body.append(rect(LEFT, y + 3, plot, step - 6, "#eee"))
        body.append(rect(LEFT, y + 3, w, step - 6, PALETTE[0], f"{label}: {shown}"))
        body.append(text_at(LEFT + w + 6, y + 14, shown))
    if x_label:
        body.append(text_at(LEFT + plot / 2, height - 8, x_label, "middle"))
    return svg_element(body, title, height)


def column_chart(items: Sequence[tuple[str, float, str]], title: str, x_label: str,
             y_label: str) -> str:
    """Vertical bars of shares (0 to 1), labelled under each bar."""
    x0, x1, y0, y1 = 60, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP
    body = y_axis(x0, x1, y0, y1, 0.0, 1.0, y_label)
    slot = (x1 - x0) / max(len(items), 1)
    for i, (label, value, shown) in enumerate(items):
        h = (y0 - y1) * min(max(value, 0.0), 1.0)
        x = x0 + i * slot
        body.append(rect(x + slot * 0.15, y0 - h, slot * 0.7, h, PALETTE[0],
                          f"{label}: {shown}"))
        body.append(text_at(x + slot / 2, y0 + 14, label, "middle"))
        if slot >= 34:
            body.append(text_at(x + slot / 2, y0 - h - 4, shown, "middle"))
    body.append(text_at((x0 + x1) / 2, HEIGHT - 6, x_label, "middle"))
    return svg_element(body, title)


def y_axis(x0: float, x1: float, y0: float, y1: float, lo: float, hi: float,
            label: str, text: Callable[[float], str] | None = None) -> list[str]:
    """A share axis (lo to hi) on the left with grid lines every 20% (``text``: how a value
    reads, default a percentage)."""
    body = [line(x0, y0, x1, y0, "#666"), line(x0, y0, x0, y1, "#666")]
    for k in range(6):
        v = lo + (hi - lo) * k / 5
        y = y0 - (y0 - y1) * k / 5
        if k:
            body.append(line(x0, y, x1, y, "#e4e4e4"))
        body.append(text_at(x0 - 6, y + 4, percent(v, 0) if text is None else text(v), "end"))
    body.append(text_at(14, (y0 + y1) / 2, label, "middle",
                      f' transform="rotate(-90 14 {(y0 + y1) / 2:.1f})"'))
    return body


def line_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]], str]], title: str,
           x_label: str, y_label: str, log2_x: bool = False,
           x_ticks: Sequence[tuple[float, str]] = (), y_range: tuple[float, float] = (0.0, 1.0),
           y_text: Callable[[float], str] | None = None) -> str:
    """Lines through points (x, y), one per series (name, points, colour); x on a linear 0..1
    scale, or log2 from 1 to the largest x; y from ``y_range`` (default shares, 0 to 1)."""
    x0, x1, y0, y1 = 60, WIDTH - RIGHT - (90 if len(series) > 1 else 0), HEIGHT - BOTTOM, TOP
    lo, hi = y_range
    body = y_axis(x0, x1, y0, y1, lo, hi, y_label, y_text)
    height = max(HEIGHT, y1 + 14 * len(series) + 10) if len(series) > 1 else HEIGHT
    largest = max([x for _, points, _ in series for x, _ in points], default=1.0)
    span = math.log2(largest) if log2_x and largest > 1 else 1.0

    def px(x: float) -> float:
        share = (math.log2(x) / span if x > 0 else 0.0) if log2_x else x
        return x0 + (x1 - x0) * share

    def py(y: float) -> float:
        return y0 - (y0 - y1) * ((y - lo) / (hi - lo) if hi > lo else 0.0)

    shown: list[tuple[float, str]] = []
    for x, text in reversed(x_ticks):  # the last tick stays; one crowding it is left out
        if not shown or abs(px(shown[-1][0]) - px(x)) >= 8 * max(len(text), len(shown[-1][1])):
            shown.append((x, text))
    for x, text in shown:
        body.append(line(px(x), y0, px(x), y0 + 4, "#666"))
        body.append(text_at(px(x), y0 + 16, text, "middle"))
    for i, (name, points, colour) in enumerate(series):
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                    f'stroke-width="2"><title>{escape(name)}</title></polyline>')
        for x, y in points:
            body.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}"/>')
        if len(series) > 1:
            ly = y1 + 14 * i
            body.append(line(x1 + 12, ly, x1 + 30, ly, colour).replace('stroke-width="1"',
                                                                        'stroke-width="3"'))
            body.append(text_at(x1 + 34, ly + 4, name))
    body.append(text_at((x0 + x1) / 2, HEIGHT - 6, x_label, "middle"))
    return svg_element(body, title, height)


def stacked_bars(rows: Sequence[tuple[str, Sequence[tuple[str, int]]]], title: str,
                 x_label: str) -> str:
    """100% bars, one per row: each part's share of the row's sum, with a legend and the
    axis title ``x_label`` (the share of what)."""
    names = list(dict.fromkeys(name for _, parts in rows for name, _ in parts))
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    step = 30
    height = TOP + step * len(rows) + 52
    plot = WIDTH - LEFT - RIGHT
    body = []
    for i, (label, parts) in enumerate(rows):
        y = TOP + i * step
        total = sum(v for _, v in parts) or 1
        x = float(LEFT)
        body.append(text_at(LEFT - 8, y + 17, label, "end"))
        for name, value in parts:
            w = plot * value / total
            body.append(rect(x, y + 4, w, step - 8, colour[name],
                              f"{label}, {name}: {percent(value / total)}"))
            if w > 42:
                ink = "#222" if colour[name] in LIGHT else "#fff"
                body.append(text_at(x + w / 2, y + 19, percent(value / total), "middle",
                                  f' style="fill: {ink}"'))
            x += w
    body.append(text_at(LEFT + plot / 2, TOP + step * len(rows) + 12, x_label, "middle"))
    x = float(LEFT)
    for name in names:
        body.append(rect(x, height - 22, 12, 12, colour[name]))
        body.append(text_at(x + 16, height - 12, name))
        x += 30 + 7 * len(name)
    return svg_element(body, title, height)


def heatmap(rows: Sequence[str], columns: Sequence[str], shares: Sequence[Sequence[float]],
            title: str, scale_label: str, span: tuple[float, float] = (0.0, 1.0)) -> str:
    """A grid of shares, darker is more, with its colour scale beneath: what a shade means
    (``scale_label``), from ``span``'s low end (lightest) to its high end (darkest); 0% to
    100% by default, the data's own range (:func:`data_span`) where it is narrow."""
    lo, hi = span
    left, top, cell_h = 70, 40, 20
    cell_w = (WIDTH - left - RIGHT) / max(len(columns), 1)
    grid = top + cell_h * len(rows)
    height = grid + 62
    body = []
    for j, name in enumerate(columns):
        x = left + (j + 0.5) * cell_w
        body.append(text_at(x, top - 8, name, "middle", ' style="font-size: 9px"'))
    for i, (name, values) in enumerate(zip(rows, shares, strict=True)):
        y = top + i * cell_h
        body.append(text_at(left - 8, y + 14, name, "end"))
        for j, share in enumerate(values):
            body.append(rect(left + j * cell_w, y, cell_w - 1, cell_h - 1,
                             shade((share - lo) / (hi - lo)),
                             f"{name}, {columns[j]}: {percent(share)}"))
    steps, width = 20, 240  # the scale: low to high in steps, its ticks every quarter
    for k in range(steps):
        body.append(rect(left + width * k / steps, grid + 12, width / steps + 0.5, 12,
                         shade((k + 0.5) / steps)))
    digits = max(0, min(3, -math.floor(math.log10(100 * (hi - lo) / 4))))  # ticks told apart
    for k in range(5):
        x = left + width * k / 4
        body.append(line(x, grid + 24, x, grid + 28, "#666"))
        body.append(text_at(x, grid + 40, percent(lo + (hi - lo) * k / 4, digits), "middle"))
    body.append(text_at(left + width + 12, grid + 22, scale_label))
    return svg_element(body, title, height)


def data_span(values: Iterable[float]) -> tuple[float, float]:
    """A heat map's span fitted to its data: its smallest to its largest finite value (a
    layer's FFN error of 0.02 to 0.3 was near-white on a 0 to 100% scale); 0 to the value
    when all are one."""
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    if hi > lo:
        return lo, hi
    return (0.0, hi) if hi > 0 else (0.0, 1.0)


def shade(share: float) -> str:
    """The heat map's colour of a share (0 to 1): light to dark blue, lightness by its root
    (so that small shares still show)."""
    lightness = 97 - 62 * min(max(share, 0.0), 1.0) ** 0.5
    return f"hsl(210, 55%, {lightness:.0f}%)"


def layer_colours(n: int) -> list[str]:
    """One colour per line, first layer to last: Okabe and Ito's for up to 7 lines, else
    viridis from dark to light (told apart by lightness, each named in the legend)."""
    if n <= len(PALETTE):
        return list(PALETTE[:n])
    return [_ramp(i / (n - 1)) for i in range(n)]


def _ramp(t: float) -> str:
    """LAYER_RAMP at ``t`` (0 to 1), between its stops."""
    pos = t * (len(LAYER_RAMP) - 1)
    k = min(int(pos), len(LAYER_RAMP) - 2)
    a, b = (tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in LAYER_RAMP[k:k + 2])
    mix = [round(x + (y - x) * (pos - k)) for x, y in zip(a, b, strict=True)]
    return "#" + "".join(f"{v:02x}" for v in mix)


# ---------------------------------------------------------------------------------------------
# The page.


def page(title: str, meta: Sequence[str], sections: Sequence[str],
         footer: Sequence[tuple[str, str]] = ()) -> str:
    """The whole page: ``meta`` lines under the title, then the sections, then a footer of
    (label, text) lines: what it was made from, by what, when, with which command."""
    lines = "".join(f'<p class="meta">{escape(m)}</p>' for m in meta)
    about = "".join(f"<p>{escape(label)}: <code>{escape(text)}</code></p>"
                    for label, text in footer)
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>'
            f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
            f"<body><h1>{escape(title)}</h1>{lines}{''.join(sections)}"
            f"<footer>{about}<p>Made by ffncli from the document its --json option prints."
            "</p></footer></body></html>\n")


def section(heading: str, *parts: str, note: str = "") -> str:
    text = f"<p>{escape(note)}</p>" if note else ""
    return f"<section><h2>{escape(heading)}</h2>{text}{''.join(parts)}</section>"
