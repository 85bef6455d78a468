"""The HTML report of ``experts`` (``--report``): a layer x expert heat map of load, each layer's
coverage curve, the figures per layer and the placement plan, from the ``--json`` document
(see :mod:`ffncli.present.report` for what every page holds and promises)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ffncli.base.files import write_text_atomically
from ffncli.present.experts import held_for
from ffncli.present.report import OPTION, Context
from ffncli.present.svg import (
    Cell,
    commas,
    data_span,
    fixed,
    heatmap,
    layer_colours,
    line_chart,
    number_table,
    page,
    percent,
    section,
)


def experts_report(doc: dict[str, Any], about: Context | None = None) -> str:
    name = about.model if about is not None else doc["model"]
    meta = [f"{name} on {doc['source']}: {doc['tokens']:,} tokens in {doc['sequences']:,} "
            f"sequences", f"routing: {', '.join(sorted({x['rule'] for x in doc['layers']}))}",
            f"the figures hold for {held_for(doc)}"]
    sections = [_summary(doc), _heatmap(doc), _coverage(doc)]
    if doc["plan"] is not None:
        sections.append(_plan(doc["plan"]))
    return page("experts: the routing profile", meta, sections,
                about.footer() if about is not None else ())


def _summary(doc: dict[str, Any]) -> str:
    rows = []
    for i, x in enumerate(doc["layers"]):
        at = f"layers.{i}."
        t = x["transition"]
        rows.append([
            Cell(str(x["layer"]), f"{at}layer"),
            Cell(commas(x["experts"]), f"{at}experts"),
            Cell(commas(x["top_k"]), f"{at}top_k"),
            Cell(fixed(x["coefficient_of_variation"], 3), f"{at}coefficient_of_variation"),
            Cell(fixed(x["max_vio"], 3), f"{at}max_vio"),
            Cell(percent(x["largest_share"]), f"{at}largest_share"),
            Cell(commas(len(x["dead_experts"])), f"len({at}dead_experts)"),
            Cell(fixed(x["load_entropy"], 3), f"{at}load_entropy"),
            Cell("-") if x["neighbour_jaccard"] is None else
            Cell(fixed(x["neighbour_jaccard"], 3), f"{at}neighbour_jaccard"),
            Cell("-") if t is None else Cell(percent(t["hit_rate"]),
                                             f"{at}transition.hit_rate"),
        ])
    table = number_table(("layer", "experts", "top-k", "CV", "MaxVio", "largest share", "dead",
                          "load entropy", "Jaccard", "next-layer hit"), rows, "summary")
    return section("load, concentration and locality per layer", table,
                   note="docs/routing.md defines each figure.")


def _shares(x: dict[str, Any]) -> list[float]:
    total = sum(x["load"])
    return [v / total for v in x["load"]]


def _heatmap(doc: dict[str, Any]) -> str:
    layers = doc["layers"]
    width = max(x["experts"] for x in layers)
    shares = [_shares(x) + [0.0] * (width - x["experts"]) for x in layers]
    chart = heatmap([f"layer {x['layer']}" for x in layers], [str(e) for e in range(width)],
                    shares, "load: each expert's share of its layer's routings",
                    "share of routings", data_span(v for row in shares for v in row))
    table = number_table(("layer", *(str(e) for e in range(width))), [
        [Cell(str(x["layer"]), f"layers.{i}.layer"),
         *(Cell(commas(v), f"layers.{i}.load.{e}") for e, v in enumerate(x["load"]))]
        for i, x in enumerate(layers)], "load")
    return section("load: layer x expert", chart, table,
                   note="Routings each expert received (each of a token's top-k choices "
                   "counted), darker is more.")


def _coverage(doc: dict[str, Any]) -> str:
    layers = doc["layers"]
    colours = layer_colours(len(layers))
    series = []
    for x, colour in zip(layers, colours, strict=True):
        cum = np.cumsum(sorted(x["load"], reverse=True)) / sum(x["load"])
        points = [(0.0, 0.0)] + [((m + 1) / x["experts"], float(c)) for m, c in enumerate(cum)]
        series.append((f"layer {x['layer']}", points, colour))
    chart = line_chart(series, "coverage: the busiest experts' share of routings",
                       "experts, busiest first (% of the layer's)", "share of routings (%)",
                       x_ticks=[(k / 5, percent(k / 5, 0)) for k in range(6)])
    percents = [c["percent"] for c in layers[0]["coverage"]]
    table = number_table(("layer", *(f"{p}% of routings" for p in percents)), [
        [Cell(str(x["layer"]), f"layers.{i}.layer"),
         *(Cell(commas(c["experts"]), f"layers.{i}.coverage.{j}.experts")
           for j, c in enumerate(x["coverage"]))]
        for i, x in enumerate(layers)], "coverage")
    return section("coverage curves", chart, table,
                   note="The fewest experts carrying a share of a layer's routings; a "
                   "diagonal would mean every expert is equally busy.")


def _plan(p: dict[str, Any]) -> str:
    layers = number_table(("layer", "resident experts", "of", "hit rate"), [
        [Cell(str(x["layer"]), f"plan.layers.{i}.layer"),
         Cell(str(list(x["experts"]))),
         Cell(commas(x["of"]), f"plan.layers.{i}.of"),
         Cell(percent(x["hit_rate"]), f"plan.layers.{i}.hit_rate")]
        for i, x in enumerate(p["layers"])], "plan-layers")
    rows = number_table(("weights", "always on", "experts", "KV cache", "total", "fits"), [
        [Cell(r["dtype"]), Cell(commas(r["always_on"]), f"plan.rows.{i}.always_on"),
         Cell(commas(r["experts"]), f"plan.rows.{i}.experts"),
         Cell(commas(r["kv_cache"]), f"plan.rows.{i}.kv_cache"),
         Cell(commas(r["total"]), f"plan.rows.{i}.total"),
         Cell("yes" if r["fits"] else "no")]
        for i, r in enumerate(p["rows"])], "plan-bytes")
    return section(f"placement plan for {p['budget']}", layers, rows,
                   note=f"Each layer's busiest experts covering {p['coverage']:.0%} of its "
                   f"routings, beside the always-on rest and the KV cache of "
                   f"{p['seq_len']:,} tokens in {p['kv_dtype']}; bytes.")


def save_experts(target: Path | None, doc: dict[str, Any], about: Context | None = None
                 ) -> None:
    """``experts --report``: the page of the document."""
    if target is not None:
        write_text_atomically(target, experts_report(doc, about), OPTION)
