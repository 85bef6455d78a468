"""``experts``: the routing profile (a row per MoE layer: load, concentration, locality) and the
placement plan (``--fit``), for people (tables, ``--format markdown|csv``) and programs
(``--json``), both from one document (:func:`experts_json`), which the ``--report`` page is
built from too (:mod:`ffncli.present.report_experts`)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ffncli.present.console import Text, console
from ffncli.present.jsondoc import emit_json, print_skipped, skipped_json
from ffncli.present.tables import commas, new_table, pct

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from ffncli.jobs.experts import ExpertsLayer, ExpertsResult, Placement


def _layer_json(x: ExpertsLayer) -> dict[str, Any]:
    r = x.routing
    doc = {"layer": x.layer, "rule": x.rule, **dataclasses.asdict(r)}
    doc["coverage"] = [{"percent": p, "experts": m} for p, m in r.coverage.items()]
    doc["transition"] = None if x.transition is None else dataclasses.asdict(x.transition)
    return doc


def plan_json(p: Placement) -> dict[str, Any]:
    return dataclasses.asdict(p)


def experts_json(r: ExpertsResult) -> dict[str, Any]:
    """The ``--json`` document (docs/json.md, ``ffncli-experts/1``)."""
    return {
        **{name: getattr(r, name) for name in ("model", "source", "tokens", "sequences",
                                               "shards")},
        "skipped": skipped_json(r.skipped),
        "holds_for": held_for(r),
        "dense_layers": list(r.dense),
        "layers": [_layer_json(x) for x in r.layers],
        "plan": None if r.plan is None else plan_json(r.plan),
    }


def held_for(r: ExpertsResult | dict[str, Any]) -> str:
    """What the figures and the plan hold for: text like the profiled text."""
    source, tokens = (r["source"], r["tokens"]) if isinstance(r, dict) else (r.source, r.tokens)
    return f"text like {source} ({tokens:,} tokens)"


def emit_experts(r: ExpertsResult, as_json: bool) -> None:
    if as_json:
        emit_json(experts_json(r), "experts")
    else:
        print_experts(experts_json(r))
    print_skipped(r.skipped)


def _maybe(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_experts(doc: dict[str, Any]) -> None:
    """The profile, a row per MoE layer in three tables, then the plan."""
    out = console()
    _print_header(out, doc)
    layers = doc["layers"]
    out.print(_load_table(layers))
    out.print(_concentration_table(layers))
    out.print(_locality_table(layers))
    if doc["plan"] is not None:
        print_plan(out, doc["plan"], doc)


def _print_header(out: Console, doc: dict[str, Any]) -> None:
    """What was profiled, the routing rule, the dense layers left out, the shared experts."""
    out.print(Text(f"experts: {doc['model']} on {doc['source']}: {doc['tokens']:,} tokens in "
                   f"{doc['sequences']:,} sequences (the figures hold for text like this one)"))
    layers = doc["layers"]
    rules = sorted({x["rule"] for x in layers})
    out.print(Text(f"routing rule: {', '.join(rules)}"))
    if doc["dense_layers"]:
        out.print(Text(f"dense layers left out: {', '.join(map(str, doc['dense_layers']))}"))
    shared = [x for x in layers if x["shared_experts"]]
    out.print(Text("shared experts: " + (
        ", ".join(f"layer {x['layer']}: {x['shared_experts']}" for x in shared)
        + " (always active: they see every token, outside these figures)"
        if shared else "none")))


def _load_table(layers: list[dict[str, Any]]) -> Table:
    load = new_table("load (each of a token's top-k choices counted)",
                     ("layer", "experts", "top-k", "routings", "CV", "MaxVio", "largest share",
                      "dead", "busiest (x even)", "idlest (x even)"),
                     optional=("idlest (x even)", "routings", "top-k", "experts"))
    for x in layers:
        ratios = x["load_over_ideal"]
        load.add_row(str(x["layer"]), commas(x["experts"]), commas(x["top_k"]),
                     commas(sum(x["load"])), f"{x['coefficient_of_variation']:.3f}",
                     f"{x['max_vio']:.3f}", pct(x["largest_share"]),
                     commas(len(x["dead_experts"])),
                     f"{ratios.index(max(ratios))} ({max(ratios):.2f})",
                     f"{ratios.index(min(ratios))} ({min(ratios):.2f})")
    return load


def _concentration_table(layers: list[dict[str, Any]]) -> Table:
    percents = [c["percent"] for c in layers[0]["coverage"]] if layers else []
    conc = new_table("concentration (entropies over ln E; experts carrying a share)",
                     ("layer", "load entropy", "token entropy", "Switch balance",
                      *(f"{p}%" for p in percents)))
    for x in layers:
        conc.add_row(str(x["layer"]), f"{x['load_entropy']:.3f}",
                     _maybe(x["token_entropy"], ".3f"), _maybe(x["switch_balance"], ".3f"),
                     *(commas(c["experts"]) for c in x["coverage"]))
    return conc


def _locality_table(layers: list[dict[str, Any]]) -> Table:
    local = new_table("locality (neighbours, co-selection, next layer)",
                      ("layer", "Jaccard", "shared", "top pair P(b|a)", "next-layer hit",
                       "by busiest", "transition entropy"),
                      optional=("transition entropy", "by busiest", "shared"))
    for x in layers:
        pair = x["co_selected"][0] if x["co_selected"] else None
        t = x["transition"]
        local.add_row(str(x["layer"]), _maybe(x["neighbour_jaccard"], ".3f"),
                      _maybe(x["neighbour_shared"], ".2f"),
                      "-" if pair is None else f"{pair['a']} -> {pair['b']}: "
                      f"{pair['p']:.2f}",
                      "-" if t is None else pct(t["hit_rate"]),
                      "-" if t is None else pct(t["baseline"]),
                      "-" if t is None else f"{t['entropy']:.3f}")
    return local


def _gib(size: int) -> str:
    return f"{size / 2**30:,.2f}"


def print_plan(out: Console, p: dict[str, Any], doc: dict[str, Any]) -> None:
    """The placement plan: the resident experts of each layer, then the bytes in each weight
    dtype against the budget."""
    reserve = f", {p['reserve']:,} held in reserve" if p["reserve"] else ""
    out.print(Text(f"placement plan for {p['budget']}: {p['usable']:,} bytes usable{reserve}; "
                   f"each layer's busiest experts covering {p['coverage']:.0%} of its "
                   f"routings on the device, hit rate {pct(p['hit_rate'])} of every "
                   f"layer's routings; the KV cache of one sequence of {p['seq_len']:,} "
                   f"tokens in {p['kv_dtype']}"))
    table = new_table("resident experts (busiest first)",
                      ("layer", "experts", "of", "hit rate", "params"))
    for x in p["layers"]:
        table.add_row(str(x["layer"]), " ".join(map(str, x["experts"])), commas(x["of"]),
                      pct(x["hit_rate"]), commas(len(x["experts"]) * x["expert_params"]))
    out.print(table)
    out.print(Text(f"always on: {p['always_on_params']:,} parameters (attention, shared "
                   f"experts, embeddings, norms, routers); resident experts: "
                   f"{p['resident_params']:,}"))
    table = new_table("bytes on the device",
                      ("weights", "always on", "experts", "KV cache", "total", "GiB", "fits",
                       "largest coverage that fits", "its hit rate"))
    for row in p["rows"]:
        largest = row["largest_coverage"]
        table.add_row(row["dtype"], commas(row["always_on"]), commas(row["experts"]),
                      commas(row["kv_cache"]), commas(row["total"]), _gib(row["total"]),
                      "yes" if row["fits"] else "no",
                      "-" if row["fits"] else "none" if largest is None else pct(largest),
                      "-" if row["fits"] or largest is None else pct(row["largest_hit_rate"]))
    out.print(table)
    out.print(Text(f"the plan holds for {held_for(doc)}"))
