"""HTML reports (``--report out.html``): one self-contained file, inline SVG, each chart's numbers
in a table beneath it.

Every report is built from the JSON document the command prints with ``--json``
(``render.stats_json``, ``render.params_json``, the relu-stats sweep document), never from the
result objects directly, so the picture and the numbers a program reads cannot disagree. Each
table cell holding a number names the value of that document it shows (``data-json="path"``, or
an expression of paths such as ``groups.ffn / total_params``), so a test reads every table back
and checks it against ``--json``.

The file has no JavaScript and nothing that is fetched: no external fonts, style sheets or
images. It is well-formed XML as well as HTML (every element closed, only XML's entities), and
every string that comes from a file or an option is escaped. Pure Python: ``params --report``
never imports NumPy.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.files import check_output_path, write_text_atomically

if TYPE_CHECKING:
    from ffncli.counting import FileOnlyResult, ParamsResult
    from ffncli.model import ModelChoice, TokenChoice
    from ffncli.sparsity import SparsityResult

OPTION = "--report"
WIDTH, HEIGHT = 720, 280  # a chart's SVG size in pixels
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b")
STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; }
p.meta { margin: 0.2em 0; color: #444; }
table { border-collapse: collapse; margin: 0.5em 0 1em 0; font-size: 0.85em; }
th, td { padding: 0.15em 0.7em; border-bottom: 1px solid #ddd; }
th { text-align: right; } th:first-child { text-align: left; }
td { text-align: right; font-variant-numeric: tabular-nums; }
td:first-child { text-align: left; }
svg { display: block; }
svg text { font-family: sans-serif; font-size: 11px; fill: #333; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


# ---------------------------------------------------------------------------------------------
# Numbers as text: integers with thousands separators, shares as percentages.


def _int(value: int) -> str:
    return f"{value:,}"


def _pct(share: float, digits: int = 1) -> str:
    return f"{100 * share:.{digits}f}%"


def _fixed(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


# ---------------------------------------------------------------------------------------------
# Tables.


@dataclass(frozen=True)
class Cell:
    """A table cell: its text, and the value of the JSON document it shows (a path such as
    ``activity_histogram.3.units``, or an expression of paths), None for plain labels."""

    text: str
    source: str | None = None


def _table(columns: Sequence[str], rows: Iterable[Sequence[Cell | str]], name: str) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            if isinstance(cell, str):
                cell = Cell(cell)
            source = f' data-json="{_e(cell.source)}"' if cell.source is not None else ""
            cells.append(f"<td{source}>{_e(cell.text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<table class="numbers" id="{_e(name)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


# ---------------------------------------------------------------------------------------------
# Charts: inline SVG drawn from lists of numbers.

LEFT, RIGHT, TOP, BOTTOM = 150, 20, 20, 40  # margins inside the SVG


def _svg(body: Sequence[str], title: str, height: int = HEIGHT) -> str:
    return (f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
            f'role="img" aria-label="{_e(title)}">{"".join(body)}</svg>')


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{_e(text)}</text>')


def _rect(x: float, y: float, w: float, h: float, fill: str, title: str = "") -> str:
    tip = f"<title>{_e(title)}</title>" if title else ""
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
            f'fill="{fill}">{tip}</rect>')


def _line(x1: float, y1: float, x2: float, y2: float, colour: str = "#999") -> str:
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{colour}" stroke-width="1"/>')


def _hbars(items: Sequence[tuple[str, float, str]], title: str, scale: float | None = None
           ) -> str:
    """Horizontal bars: (label, value, value as text), scaled to ``scale`` (default the
    largest value)."""
    top = scale if scale is not None else max([v for _, v, _ in items], default=0) or 1.0
    step = 22
    height = TOP + step * len(items) + 10
    plot = WIDTH - LEFT - RIGHT - 70
    body = []
    for i, (label, value, shown) in enumerate(items):
        y = TOP + i * step
        w = plot * min(max(value / top, 0.0), 1.0)
        body.append(_text(LEFT - 8, y + 14, label, "end"))
        if scale is not None:
            body.append(_rect(LEFT, y + 3, plot, step - 6, "#eee"))
        body.append(_rect(LEFT, y + 3, w, step - 6, PALETTE[0], f"{label}: {shown}"))
        body.append(_text(LEFT + w + 6, y + 14, shown))
    return _svg(body, title, height)


def _columns(items: Sequence[tuple[str, float, str]], title: str, x_label: str,
             y_label: str) -> str:
    """Vertical bars of shares (0 to 1), labelled under each bar."""
    x0, x1, y0, y1 = 60, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP
    body = _axes_y(x0, x1, y0, y1, 0.0, 1.0, y_label)
    slot = (x1 - x0) / max(len(items), 1)
    for i, (label, value, shown) in enumerate(items):
        h = (y0 - y1) * min(max(value, 0.0), 1.0)
        x = x0 + i * slot
        body.append(_rect(x + slot * 0.15, y0 - h, slot * 0.7, h, PALETTE[0],
                          f"{label}: {shown}"))
        body.append(_text(x + slot / 2, y0 + 14, label, "middle"))
        if slot >= 34:
            body.append(_text(x + slot / 2, y0 - h - 4, shown, "middle"))
    body.append(_text((x0 + x1) / 2, HEIGHT - 6, x_label, "middle"))
    return _svg(body, title)


def _axes_y(x0: float, x1: float, y0: float, y1: float, lo: float, hi: float,
            label: str) -> list[str]:
    """A share axis (lo to hi) on the left with grid lines every 20%."""
    body = [_line(x0, y0, x1, y0, "#666"), _line(x0, y0, x0, y1, "#666")]
    for k in range(6):
        v = lo + (hi - lo) * k / 5
        y = y0 - (y0 - y1) * k / 5
        if k:
            body.append(_line(x0, y, x1, y, "#e4e4e4"))
        body.append(_text(x0 - 6, y + 4, _pct(v, 0), "end"))
    body.append(_text(14, (y0 + y1) / 2, label, "middle",
                      f' transform="rotate(-90 14 {(y0 + y1) / 2:.1f})"'))
    return body


def _lines(series: Sequence[tuple[str, Sequence[tuple[float, float]], str]], title: str,
           x_label: str, y_label: str, log2_x: bool = False,
           x_ticks: Sequence[tuple[float, str]] = ()) -> str:
    """Lines through points (x, share), one per series (name, points, colour); x on a
    linear 0..1 scale, or log2 from 1 to the largest x."""
    x0, x1, y0, y1 = 60, WIDTH - RIGHT - (90 if len(series) > 1 else 0), HEIGHT - BOTTOM, TOP
    body = _axes_y(x0, x1, y0, y1, 0.0, 1.0, y_label)
    largest = max([x for _, points, _ in series for x, _ in points], default=1.0)
    span = math.log2(largest) if log2_x and largest > 1 else 1.0

    def px(x: float) -> float:
        share = (math.log2(x) / span if x > 0 else 0.0) if log2_x else x
        return x0 + (x1 - x0) * share

    def py(y: float) -> float:
        return y0 - (y0 - y1) * y

    shown: list[tuple[float, str]] = []
    for x, text in reversed(x_ticks):  # the last tick stays; one crowding it is left out
        if not shown or abs(px(shown[-1][0]) - px(x)) >= 8 * max(len(text), len(shown[-1][1])):
            shown.append((x, text))
    for x, text in shown:
        body.append(_line(px(x), y0, px(x), y0 + 4, "#666"))
        body.append(_text(px(x), y0 + 16, text, "middle"))
    for i, (name, points, colour) in enumerate(series):
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                    f'stroke-width="2"><title>{_e(name)}</title></polyline>')
        for x, y in points:
            body.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}"/>')
        if len(series) > 1:
            ly = y1 + 14 * i
            body.append(_line(x1 + 12, ly, x1 + 30, ly, colour).replace('stroke-width="1"',
                                                                        'stroke-width="3"'))
            body.append(_text(x1 + 34, ly + 4, name))
    body.append(_text((x0 + x1) / 2, HEIGHT - 6, x_label, "middle"))
    return _svg(body, title)


def _stacked(rows: Sequence[tuple[str, Sequence[tuple[str, int]]]], title: str) -> str:
    """100% bars, one per row: each part's share of the row's sum, with a legend."""
    names = list(dict.fromkeys(name for _, parts in rows for name, _ in parts))
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    step = 30
    height = TOP + step * len(rows) + 30
    plot = WIDTH - LEFT - RIGHT
    body = []
    for i, (label, parts) in enumerate(rows):
        y = TOP + i * step
        total = sum(v for _, v in parts) or 1
        x = float(LEFT)
        body.append(_text(LEFT - 8, y + 17, label, "end"))
        for name, value in parts:
            w = plot * value / total
            body.append(_rect(x, y + 4, w, step - 8, colour[name],
                              f"{label}, {name}: {_pct(value / total)}"))
            if w > 42:
                body.append(_text(x + w / 2, y + 19, _pct(value / total), "middle",
                                  ' style="fill: #fff"'))
            x += w
    x = float(LEFT)
    for name in names:
        body.append(_rect(x, height - 22, 12, 12, colour[name]))
        body.append(_text(x + 16, height - 12, name))
        x += 30 + 7 * len(name)
    return _svg(body, title, height)


def _heatmap(rows: Sequence[str], columns: Sequence[str], shares: Sequence[Sequence[float]],
             title: str) -> str:
    """A grid of shares (0 to 1): darker is more."""
    left, top, cell_h = 70, 40, 20
    cell_w = (WIDTH - left - RIGHT) / max(len(columns), 1)
    height = top + cell_h * len(rows) + 10
    body = []
    for j, name in enumerate(columns):
        x = left + (j + 0.5) * cell_w
        body.append(_text(x, top - 8, name, "middle", ' style="font-size: 9px"'))
    for i, (name, values) in enumerate(zip(rows, shares, strict=True)):
        y = top + i * cell_h
        body.append(_text(left - 8, y + 14, name, "end"))
        for j, share in enumerate(values):
            lightness = 97 - 62 * min(max(share, 0.0), 1.0) ** 0.5
            body.append(_rect(left + j * cell_w, y, cell_w - 1, cell_h - 1,
                              f"hsl(210, 55%, {lightness:.0f}%)",
                              f"{name}, {columns[j]}: {_pct(share)}"))
    return _svg(body, title, height)


def _layer_colours(n: int) -> list[str]:
    """Light to dark blue, first layer to last."""
    return [f"hsl(215, 60%, {72 - 50 * i / max(n - 1, 1):.0f}%)" for i in range(n)]


# ---------------------------------------------------------------------------------------------
# The page.


def _page(title: str, meta: Sequence[str], sections: Sequence[str]) -> str:
    lines = "".join(f'<p class="meta">{_e(m)}</p>' for m in meta)
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>'
            f"<title>{_e(title)}</title><style>{STYLE}</style></head>"
            f"<body><h1>{_e(title)}</h1>{lines}{''.join(sections)}"
            '<p class="meta">Made by ffncli from the document its --json option prints.</p>'
            "</body></html>\n")


def _section(heading: str, *parts: str, note: str = "") -> str:
    text = f"<p>{_e(note)}</p>" if note else ""
    return f"<section><h2>{_e(heading)}</h2>{text}{''.join(parts)}</section>"


# ---------------------------------------------------------------------------------------------
# relu-stats: one layer.


def stats_report(doc: dict[str, Any]) -> str:
    """The report of ``relu-stats --json`` (one layer): summary, activity histogram, hot-unit
    coverage curve, aggregated sparsity against tokens (per expert for a mixture)."""
    meta = [f"{doc['tokens']:,} tokens, d_ff {doc['d_ff']}, d_model {doc['d_model']}, "
            f"{doc['activation']}", str(doc["definition"])]
    return _page("relu-stats", meta, _stats_sections(doc, ""))


def _stats_sections(doc: dict[str, Any], at: str) -> list[str]:
    """The sections of one layer's statistics ``doc``, found at path ``at`` of the whole
    document (``""``, or ``layers.3.`` in a sweep)."""
    rows: list[list[Cell | str]] = [
        ["tokens", Cell(_int(doc["tokens"]), f"{at}tokens")],
        ["hidden units (d_ff)", Cell(_int(doc["d_ff"]), f"{at}d_ff")],
        ["mean inactive fraction", Cell(_pct(doc["mean_inactive_fraction"], 2),
                                        f"{at}mean_inactive_fraction")],
        ["dead units (never active on these tokens)",
         Cell(_int(len(doc["dead_units"])), f"len({at}dead_units)")],
        ["units active for every token",
         Cell(_int(len(doc["always_active_units"])), f"len({at}always_active_units)")],
        ["W2 multiply-adds per token", Cell(_int(doc["w2_macs_per_token"]),
                                            f"{at}w2_macs_per_token")],
        ["of which skipped by leaving out inactive units",
         Cell(f"{doc['w2_macs_saved_per_token']:,.1f}", f"{at}w2_macs_saved_per_token")],
    ]
    if doc["experts"] > 1:
        rows[1:1] = [["experts", Cell(_int(doc["experts"]), f"{at}experts")],
                     ["experts per token", Cell(_int(doc["top_k"]), f"{at}top_k")]]
    if doc.get("threshold") is not None:
        rows.append(["threshold T (|act| <= T is inactive)",
                     Cell(f"{doc['threshold']:.6g}", f"{at}threshold")])
    ov = doc.get("overlap") or {}
    if ov.get("pairs"):
        rows += [
            ["consecutive token pairs", Cell(_int(ov["pairs"]), f"{at}overlap.pairs")],
            ["their inactive sets: mean Jaccard index",
             Cell(_fixed(ov["mean_jaccard"], 4), f"{at}overlap.mean_jaccard")],
            ["standard deviation", Cell(_fixed(ov["std_jaccard"], 4), f"{at}overlap.std_jaccard")],
            ["mean units shared", Cell(f"{ov['mean_shared']:,.2f}", f"{at}overlap.mean_shared")],
            ["shared by two random sets of those sizes",
             Cell(f"{ov['mean_shared_by_chance']:,.2f}", f"{at}overlap.mean_shared_by_chance")],
        ]
    sections = [_section("summary", _table(("statistic", "value"), rows, f"{at}summary"))]
    if doc["experts"] == 1:
        sections += [_histogram(doc, at), _coverage(doc, at), _aggregated(doc, at)]
    else:
        sections.append(_per_expert(doc, at))
    if doc.get("pairwise_overlap"):
        sections.append(_pairs(doc, at))
    return sections


def _histogram(doc: dict[str, Any], at: str) -> str:
    bins = doc["activity_histogram"]
    chart = _hbars([(str(b["bin"]), b["units"], _int(b["units"])) for b in bins],
                   "units by the share of tokens they are active for")
    table = _table(("active for", "units", "share of units"), [
        [Cell(str(b["bin"]), f"{at}activity_histogram.{i}.bin"),
         Cell(_int(b["units"]), f"{at}activity_histogram.{i}.units"),
         Cell(_pct(b["units"] / doc["d_ff"]), f"{at}activity_histogram.{i}.units / {at}d_ff")]
        for i, b in enumerate(bins)], f"{at}activity_histogram")
    return _section("activity histogram", chart, table,
                    note="Hidden units by the share of tokens for which they are active.")


def _coverage(doc: dict[str, Any], at: str) -> str:
    rows = doc["hot_unit_coverage"]
    points = [(0.0, 0.0)] + [(r["unit_share"], r["share"]) for r in rows] + [(1.0, 1.0)]
    chart = _lines([("coverage", points, PALETTE[0])], "hot-unit coverage",
                   "share of units, most active first", "share of activations",
                   x_ticks=[(k / 5, _pct(k / 5, 0)) for k in range(6)])
    table = _table(("share of activations", "units", "share of units"), [
        [Cell(_pct(r["share"]), f"{at}hot_unit_coverage.{i}.share"),
         Cell(_int(r["units"]), f"{at}hot_unit_coverage.{i}.units"),
         Cell(_pct(r["unit_share"]), f"{at}hot_unit_coverage.{i}.unit_share")]
        for i, r in enumerate(rows)], f"{at}hot_unit_coverage")
    return _section("hot-unit coverage", chart, table,
                    note="The fewest units that carry a share of all activations (PowerInfer's "
                    "statistic); a diagonal would mean every unit is equally active.")


def _token_ticks(tokens: Sequence[int]) -> list[tuple[float, str]]:
    return [(t, _int(t)) for t in tokens if t & (t - 1) == 0 or t == max(tokens)]


def _aggregated(doc: dict[str, Any], at: str) -> str:
    rows = doc["aggregated_sparsity"]
    chart = _lines([("unused", [(r["tokens"], r["unused_share"]) for r in rows], PALETTE[0])],
                   "aggregated sparsity", "tokens t (log scale)",
                   "units unused by all first t",
                   log2_x=True, x_ticks=_token_ticks([r["tokens"] for r in rows]))
    table = _table(("tokens t", "units unused by all of the first t"), [
        [Cell(_int(r["tokens"]), f"{at}aggregated_sparsity.{i}.tokens"),
         Cell(_pct(r["unused_share"]), f"{at}aggregated_sparsity.{i}.unused_share")]
        for i, r in enumerate(rows)], f"{at}aggregated_sparsity")
    return _section("aggregated sparsity against tokens", chart, table,
                    note="The share of units that none of the first t tokens uses (Deja Vu's "
                    "aggregated sparsity): what a cache of units needed by a whole batch saves.")


def _per_expert(doc: dict[str, Any], at: str) -> str:
    experts = doc["per_expert"]
    chart = _hbars([(f"expert {e['expert']}", e["mean_inactive_fraction"],
                     _pct(e["mean_inactive_fraction"])) for e in experts],
                   "mean inactive fraction per expert", scale=1.0)
    table = _table(("expert", "tokens", "mean inactive fraction", "dead", "always active"), [
        [Cell(str(e["expert"]), f"{at}per_expert.{i}.expert"),
         Cell(_int(e["tokens"]), f"{at}per_expert.{i}.tokens"),
         Cell(_pct(e["mean_inactive_fraction"], 2), f"{at}per_expert.{i}.mean_inactive_fraction"),
         Cell(_int(e["dead_units"]), f"{at}per_expert.{i}.dead_units"),
         Cell(_int(e["always_active_units"]), f"{at}per_expert.{i}.always_active_units")]
        for i, e in enumerate(experts)], f"{at}per_expert")
    return _section("experts", chart, table, note="Each expert on the tokens routed to it.")


def _pairs(doc: dict[str, Any], at: str) -> str:
    pairs = doc["pairwise_overlap"]
    table = _table(("token", "token", "shared inactive units", "Jaccard", "by chance"), [
        [Cell(str(p["a"]), f"{at}pairwise_overlap.{i}.a"),
         Cell(str(p["b"]), f"{at}pairwise_overlap.{i}.b"),
         Cell(_int(p["shared"]), f"{at}pairwise_overlap.{i}.shared"),
         Cell(_fixed(p["jaccard"], 4), f"{at}pairwise_overlap.{i}.jaccard"),
         Cell(_fixed(p["by_chance"], 2), f"{at}pairwise_overlap.{i}.by_chance")]
        for i, p in enumerate(pairs)], f"{at}pairwise_overlap")
    return _section("every pair of tokens", table)


# ---------------------------------------------------------------------------------------------
# relu-stats: a sweep over layers.


def sweep_report(doc: dict[str, Any]) -> str:
    """The report of a relu-stats sweep document: per-layer inactive fraction, activity
    histograms, hot-unit coverage curves and aggregated sparsity of every layer; with one layer,
    that layer's full statistics too."""
    layers = doc["layers"]
    meta = [f"{doc['model']} on {doc['source']}: {doc['tokens']:,} tokens in "
            f"{doc['sequences']:,} sequences", str(doc["definition"])]
    sections = [_sweep_summary(layers)]
    dense = [i for i, layer in enumerate(layers) if layer["experts"] == 1]
    if dense:
        sections += [_sweep_histograms(layers, dense), _sweep_coverage(layers, dense),
                     _sweep_aggregated(layers, dense)]
    if len(layers) == 1:
        sections += _stats_sections(layers[0], "layers.0.")
    return _page("relu-stats, layer by layer", meta, sections)


def _sweep_summary(layers: Sequence[dict[str, Any]]) -> str:
    chart = _columns([(str(layer["layer"]), layer["mean_inactive_fraction"],
                       _pct(layer["mean_inactive_fraction"])) for layer in layers],
                     "mean inactive fraction per layer", "layer", "inactive")
    rows = []
    for i, layer in enumerate(layers):
        at = f"layers.{i}."
        hot = next((j for j, r in enumerate(layer.get("hot_unit_coverage", ()))
                    if abs(r["share"] - 0.8) < 1e-9), None)
        ov = layer.get("overlap") or {}
        cats = layer.get("cats_threshold_50")
        row: list[Cell | str] = [
            Cell(str(layer["layer"]), f"{at}layer"),
            Cell(_int(layer["tokens"]), f"{at}tokens"),
            Cell(_pct(layer["mean_inactive_fraction"], 2), f"{at}mean_inactive_fraction"),
            Cell(_int(len(layer["dead_units"])), f"len({at}dead_units)"),
            Cell(_int(len(layer["always_active_units"])), f"len({at}always_active_units)"),
        ]
        row += ["-", "-"] if hot is None else [
            Cell(_int(layer["hot_unit_coverage"][hot]["units"]),
                 f"{at}hot_unit_coverage.{hot}.units"),
            Cell(_pct(layer["hot_unit_coverage"][hot]["unit_share"]),
                 f"{at}hot_unit_coverage.{hot}.unit_share")]
        row += ["-", "-", "-"] if not ov.get("pairs") else [
            Cell(_fixed(ov["mean_jaccard"], 4), f"{at}overlap.mean_jaccard"),
            Cell(f"{ov['mean_shared']:,.2f}", f"{at}overlap.mean_shared"),
            Cell(f"{ov['mean_shared_by_chance']:,.2f}", f"{at}overlap.mean_shared_by_chance")]
        row.append("-" if cats is None else Cell(f"{cats:.6g}", f"{at}cats_threshold_50"))
        rows.append(row)
    table = _table(("layer", "tokens", "mean inactive", "dead", "always active",
                    "units for 80% of activations", "share of units",
                    "consecutive Jaccard", "shared units", "by chance", "CATS T at 50%"),
                   rows, "sweep")
    return _section("every layer", chart, table, note=(
        "Dead units are never active on these tokens (on a small sample that does not make them "
        "dead). Consecutive tokens' inactive sets: their mean Jaccard index, and the units they "
        "share against what two random sets of their sizes share. The CATS threshold at 50% "
        "makes half of the activated values inactive."))


def _sweep_histograms(layers: Sequence[dict[str, Any]], dense: Sequence[int]) -> str:
    bins = [str(b["bin"]) for b in layers[dense[0]]["activity_histogram"]]
    names = [f"layer {layers[i]['layer']}" for i in dense]
    shares = [[b["units"] / layers[i]["d_ff"] for b in layers[i]["activity_histogram"]]
              for i in dense]
    chart = _heatmap(names, bins, shares, "activity histogram of every layer")
    table = _table(["layer", *bins], [
        [Cell(str(layers[i]["layer"]), f"layers.{i}.layer")] +
        [Cell(_int(b["units"]), f"layers.{i}.activity_histogram.{j}.units")
         for j, b in enumerate(layers[i]["activity_histogram"])] for i in dense],
        "sweep_activity_histogram")
    return _section("activity histograms", chart, table, note=(
        "Hidden units by the share of tokens for which they are active, one row per layer; "
        "darker cells hold more units. The table counts units."))


def _sweep_coverage(layers: Sequence[dict[str, Any]], dense: Sequence[int]) -> str:
    colours = _layer_colours(len(dense))
    series = [(f"layer {layers[i]['layer']}",
               [(0.0, 0.0)] + [(r["unit_share"], r["share"])
                               for r in layers[i]["hot_unit_coverage"]] + [(1.0, 1.0)], c)
              for i, c in zip(dense, colours, strict=True)]
    chart = _lines(series, "hot-unit coverage of every layer", "share of units, most active "
                   "first", "share of activations",
                   x_ticks=[(k / 5, _pct(k / 5, 0)) for k in range(6)])
    shares = [r["share"] for r in layers[dense[0]]["hot_unit_coverage"]]
    table = _table(["layer"] + [f"units for {_pct(s, 0)}" for s in shares], [
        [Cell(str(layers[i]["layer"]), f"layers.{i}.layer")] +
        [Cell(_int(r["units"]), f"layers.{i}.hot_unit_coverage.{j}.units")
         for j, r in enumerate(layers[i]["hot_unit_coverage"])] for i in dense],
        "sweep_hot_unit_coverage")
    return _section("hot-unit coverage", chart, table, note=(
        "The fewest units that carry a share of all activations, layer by layer (first layer "
        "lightest)."))


def _sweep_aggregated(layers: Sequence[dict[str, Any]], dense: Sequence[int]) -> str:
    colours = _layer_colours(len(dense))
    series = [(f"layer {layers[i]['layer']}",
               [(r["tokens"], r["unused_share"]) for r in layers[i]["aggregated_sparsity"]], c)
              for i, c in zip(dense, colours, strict=True)]
    tokens = sorted({r["tokens"] for i in dense for r in layers[i]["aggregated_sparsity"]})
    chart = _lines(series, "aggregated sparsity of every layer", "tokens t (log scale)",
                   "units unused by all first t", log2_x=True, x_ticks=_token_ticks(tokens))
    rows: list[list[Cell | str]] = []
    for i in dense:
        where = {r["tokens"]: j for j, r in enumerate(layers[i]["aggregated_sparsity"])}
        rows.append([Cell(str(layers[i]["layer"]), f"layers.{i}.layer"), *(
            Cell(_pct(layers[i]["aggregated_sparsity"][where[t]]["unused_share"]),
                 f"layers.{i}.aggregated_sparsity.{where[t]}.unused_share") if t in where
            else "-" for t in tokens)])
    table = _table(["layer"] + [f"t = {t:,}" for t in tokens], rows, "sweep_aggregated_sparsity")
    return _section("aggregated sparsity against tokens", chart, table, note=(
        "The share of units that none of the first t tokens uses, layer by layer."))


# ---------------------------------------------------------------------------------------------
# params.

PARTS = {"embeddings": "embeddings", "attention": "attention", "ffn": "FFN", "norms": "norms",
         "head": "output head", "pooler": "pooler", "other": "other"}


def params_report(doc: dict[str, Any]) -> str:
    """The report of ``params --json``: the whole model's parameters by part, each layer's
    parameters and FLOPs per token by part (FFN, attention, norms), the whole model's FLOPs.
    A checkpoint counted by tensor names alone (no spec) has its parts only."""
    if "layers" not in doc:  # file_only_json: the tensor names' groups
        meta = [f"weights: {doc['weights']}", f"counted from tensor names only ({doc['reason']})"]
        return _page("params", meta, [_parts(doc, "file_groups", "file_params")])
    meta = [f"{doc['model']}: d_model {doc['d_model']}, d_ff {doc['d_ff']}, {doc['ffn_kind']}"
            + (f", {doc['experts']} experts, top-{doc['top_k']}" if doc["experts"] > 1 else ""),
            f"{doc['total_params']:,} parameters"
            + (f", {doc['active_params']:,} active per token"
               if doc["active_params"] != doc["total_params"] else "")]
    return _page("params", meta, [_parts(doc, "groups", "total_params"), _layers(doc),
                                  _flops(doc)])


def _parts(doc: dict[str, Any], key: str, total_key: str) -> str:
    parts = [(k, v) for k, v in doc[key].items() if v]
    total = doc[total_key]
    chart = _hbars([(PARTS.get(k, k), v / total, _pct(v / total)) for k, v in parts],
                   "parameters by part", scale=1.0)
    table = _table(("part", "parameters", "share"), [
        [PARTS.get(k, k), Cell(_int(v), f"{key}.{k}"),
         Cell(_pct(v / total), f"{key}.{k} / {total_key}")] for k, v in parts]
        + [["total", Cell(_int(total), total_key), Cell(_pct(1.0), f"{total_key} / {total_key}")]],
        "parts")
    return _section("parameters by part", chart, table, note=(
        "Embeddings, attention, FFN (all experts of a mixture), norms and heads of the whole "
        "model; tied weights are counted once."))


def _layer_name(layer: dict[str, Any]) -> str:
    return "FFN only" if layer["kind"] == "ffn" else f"{layer['kind']} layer"


def _layers(doc: dict[str, Any]) -> str:
    layers = doc["layers"]
    chart = _stacked([(_layer_name(layer), [("FFN", layer["ffn"]),
                                            ("attention", layer["attention"]),
                                            ("norms", layer["norm"])]) for layer in layers],
                     "parameters of a layer by part")
    table = _table(("layer", "count", "FFN", "attention", "norms", "total", "FFN share"), [
        [_layer_name(layer), Cell(_int(layer["count"]), f"layers.{i}.count"),
         Cell(_int(layer["ffn"]), f"layers.{i}.ffn"),
         Cell(_int(layer["attention"]), f"layers.{i}.attention"),
         Cell(_int(layer["norm"]), f"layers.{i}.norm"),
         Cell(_int(layer["total"]), f"layers.{i}.total"),
         Cell(_pct(layer["ffn_share"]), f"layers.{i}.ffn_share")]
        for i, layer in enumerate(layers)], "layer_params")
    return _section("parameters of one layer", chart, table)


def _flops(doc: dict[str, Any]) -> str:
    layers, whole = doc["layers"], doc["flops_per_token"]
    attention = whole["total"] - whole["ffn"] - whole["head"]
    bars = [(_layer_name(layer), [("FFN", layer["flops_per_token"]["ffn"]),
                                  ("attention projections",
                                   layer["flops_per_token"]["attention_projections"]),
                                  ("attention scores",
                                   layer["flops_per_token"]["attention_scores"])])
            for layer in layers]
    bars.append(("whole model", [("FFN", whole["ffn"]), ("attention", attention),
                                 ("output head", whole["head"])]))
    chart = _stacked(bars, "FLOPs per token by part")
    rows: list[list[Cell | str]] = []
    for i, layer in enumerate(layers):
        f, at = layer["flops_per_token"], f"layers.{i}.flops_per_token."
        rows.append([_layer_name(layer), Cell(_int(f["ffn"]), f"{at}ffn"),
                     Cell(_int(f["attention_projections"]), f"{at}attention_projections"),
                     Cell(_int(f["attention_scores"]), f"{at}attention_scores"),
                     Cell(_int(f["attention_projections"] + f["attention_scores"]),
                          f"{at}attention_projections + {at}attention_scores"), "",
                     Cell(_int(f["total"]), f"{at}total"),
                     Cell(_pct(f["ffn_share"]), f"{at}ffn_share")])
    rows.append(["whole model", Cell(_int(whole["ffn"]), "flops_per_token.ffn"), "", "",
                 Cell(_int(attention), "flops_per_token.total - flops_per_token.ffn - "
                                       "flops_per_token.head"),
                 Cell(_int(whole["head"]), "flops_per_token.head"),
                 Cell(_int(whole["total"]), "flops_per_token.total"),
                 Cell(_pct(whole["ffn_share"]), "flops_per_token.ffn_share")])
    table = _table(("layer", "FFN", "attention projections", "attention scores",
                    "attention", "output head", "total", "FFN share"), rows, "flops")
    return _section(f"FLOPs per token at seq_len {whole['seq_len']:,}", chart, table, note=(
        "Two FLOPs per multiply-add of the matrix products. A layer's row is one layer; the "
        "whole model's attention is every layer's projections and scores together."))


# ---------------------------------------------------------------------------------------------
# Writing a report: never over an input of the command, atomically.


def command_inputs(preset: str | None = None, config: Path | None = None,
                   weights: Path | None = None, tokens: Path | None = None,
                   text: Path | None = None, ids: Path | None = None
                   ) -> list[tuple[str, Path | None]]:
    """The files a command reads, named as the error names them: a weights folder or index
    stands for every file beside it (the shards, the config, the tokenizer)."""
    from ffncli.model import config_beside

    preset_file = Path(preset) if preset and Path(preset).is_file() else None
    inputs: list[tuple[str, Path | None]] = [
        ("--input file", tokens), ("--text file", text), ("--ids file", ids),
        ("--preset file", preset_file), ("--config file", config), ("--weights file", weights)]
    if weights is not None:
        beside = config_beside(weights) or weights.parent / "config.json"
        inputs.append(("config.json beside the --weights", beside))
        folder = weights if os.path.isdir(weights) else (
            weights.parent if weights.name.endswith(".index.json") else None)
        if folder is not None:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                names = []
            inputs += [("--weights folder's " + name, folder / name) for name in names]
    return inputs




def write_report(path: Path, text: str, inputs: Iterable[tuple[str, Path | None]]) -> None:
    """Write a report to ``path`` atomically, refused (one ``error:`` line) over an input."""
    write_text_atomically(check_output_path(path, inputs, OPTION), text, OPTION)


def save_stats(path: Path | None, result: SparsityResult, model: ModelChoice,
               tokens: TokenChoice) -> None:
    """``relu-stats --report``: the report of the ``--json`` document (nothing when None)."""
    if path is None:
        return
    from ffncli.model import weights_of
    from ffncli.render import stats_json

    weights = weights_of(model.weights, model.hub_model)
    write_report(path, stats_report(stats_json(result)),
                 command_inputs(model.preset, model.config, weights, tokens.input))


def save_sweep(path: Path | None, doc: dict[str, Any],
               inputs: Iterable[tuple[str, Path | None]]) -> None:
    """``relu-stats --layer all --report``: the report of the sweep document."""
    if path is not None:
        write_report(path, sweep_report(doc), inputs)


def save_params(path: Path | None, result: ParamsResult | FileOnlyResult, preset: str | None,
                config: Path | None, weights: Path | None) -> None:
    """``params --report``: the report of the ``--json`` document (nothing when None)."""
    if path is None:
        return
    from ffncli.counting import FileOnlyResult
    from ffncli.render import file_only_json, params_json

    doc = file_only_json(result) if isinstance(result, FileOnlyResult) else params_json(result)
    write_report(path, params_report(doc), command_inputs(preset, config, weights))
