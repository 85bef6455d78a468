"""The HTML report of ``relu-stats``: one layer's page (``--json``'s document, each chart's
numbers in a table beneath it), and a sweep's (``relu-stats --text``: every layer side by
side). See :mod:`ffncli.present.report` for what every page holds and promises."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.base.files import write_text_atomically
from ffncli.present.report import OPTION, Context
from ffncli.present.stats import stats_json
from ffncli.present.svg import (
    PALETTE,
    Cell,
    column_chart,
    commas,
    fixed,
    hbars,
    heatmap,
    layer_colours,
    line_chart,
    number_table,
    page,
    percent,
    section,
)

if TYPE_CHECKING:
    from ffncli.analysis.sparsity import SparsityResult

# ---------------------------------------------------------------------------------------------
# relu-stats: one layer.


def stats_report(doc: dict[str, Any], about: Context | None = None) -> str:
    """The report of ``relu-stats --json`` (one layer): summary, activity histogram, hot-unit
    coverage curve, aggregated sparsity against tokens (per expert for a mixture)."""
    meta = [f"{doc['tokens']:,} tokens, d_ff {doc['d_ff']}, d_model {doc['d_model']}, "
            f"{doc['activation']}", str(doc["definition"])]
    if about is not None:
        meta.insert(0, about.model + (f" on {about.input}" if about.input else ""))
    return page("relu-stats", meta, _stats_sections(doc, ""),
                about.footer() if about is not None else ())


def _stats_sections(doc: dict[str, Any], at: str) -> list[str]:
    """The sections of one layer's statistics ``doc``, found at path ``at`` of the whole
    document (``""``, or ``layers.3.`` in a sweep)."""
    rows: list[list[Cell | str]] = [
        ["tokens", Cell(commas(doc["tokens"]), f"{at}tokens")],
        ["hidden units (d_ff)", Cell(commas(doc["d_ff"]), f"{at}d_ff")],
        ["mean inactive fraction", Cell(percent(doc["mean_inactive_fraction"], 2),
                                        f"{at}mean_inactive_fraction")],
        ["dead units (never active on these tokens)",
         Cell(commas(len(doc["dead_units"])), f"len({at}dead_units)")],
        ["units active for every token",
         Cell(commas(len(doc["always_active_units"])), f"len({at}always_active_units)")],
        ["W2 multiply-adds per token", Cell(commas(doc["w2_macs_per_token"]),
                                            f"{at}w2_macs_per_token")],
        ["of which skipped by leaving out inactive units",
         Cell(f"{doc['w2_macs_saved_per_token']:,.1f}", f"{at}w2_macs_saved_per_token")],
    ]
    if doc["experts"] > 1:
        rows[1:1] = [["experts", Cell(commas(doc["experts"]), f"{at}experts")],
                     ["experts per token", Cell(commas(doc["top_k"]), f"{at}top_k")]]
    if doc.get("threshold") is not None:
        rows.append(["threshold T (|act| <= T is inactive)",
                     Cell(f"{doc['threshold']:.6g}", f"{at}threshold")])
    ov = doc.get("overlap") or {}
    if ov.get("pairs"):
        rows += [
            ["consecutive token pairs", Cell(commas(ov["pairs"]), f"{at}overlap.pairs")],
            ["their inactive sets: mean Jaccard index",
             Cell(fixed(ov["mean_jaccard"], 4), f"{at}overlap.mean_jaccard")],
            ["standard deviation", Cell(fixed(ov["std_jaccard"], 4), f"{at}overlap.std_jaccard")],
            ["mean units shared", Cell(f"{ov['mean_shared']:,.2f}", f"{at}overlap.mean_shared")],
            ["shared by two random sets of those sizes",
             Cell(f"{ov['mean_shared_by_chance']:,.2f}", f"{at}overlap.mean_shared_by_chance")],
        ]
    sections = [section("summary", number_table(("statistic", "value"), rows, f"{at}summary"))]
    if doc["experts"] == 1:
        sections += [_histogram(doc, at), _coverage(doc, at), _aggregated(doc, at)]
    else:
        sections.append(_per_expert(doc, at))
    if doc.get("pairwise_overlap"):
        sections.append(_pairs(doc, at))
    return sections


def _histogram(doc: dict[str, Any], at: str) -> str:
    bins = doc["activity_histogram"]
    chart = hbars([(str(b["bin"]), b["units"], commas(b["units"])) for b in bins],
                   "units by the share of tokens they are active for",
                   x_label="hidden units (count), by the share of tokens they are active for")
    table = number_table(("active for", "units", "share of units"), [
        [Cell(str(b["bin"]), f"{at}activity_histogram.{i}.bin"),
         Cell(commas(b["units"]), f"{at}activity_histogram.{i}.units"),
         Cell(percent(b["units"] / doc["d_ff"]), f"{at}activity_histogram.{i}.units / {at}d_ff")]
        for i, b in enumerate(bins)], f"{at}activity_histogram")
    return section("activity histogram", chart, table,
                    note="Hidden units by the share of tokens for which they are active.")


def _coverage(doc: dict[str, Any], at: str) -> str:
    rows = doc["hot_unit_coverage"]
    points = [(0.0, 0.0)] + [(r["unit_share"], r["share"]) for r in rows] + [(1.0, 1.0)]
    chart = line_chart([("coverage", points, PALETTE[0])], "hot-unit coverage",
                   "share of units, most active first (% of d_ff)",
                   "share of activations (%)",
                   x_ticks=[(k / 5, percent(k / 5, 0)) for k in range(6)])
    table = number_table(("share of activations", "units", "share of units"), [
        [Cell(percent(r["share"]), f"{at}hot_unit_coverage.{i}.share"),
         Cell(commas(r["units"]), f"{at}hot_unit_coverage.{i}.units"),
         Cell(percent(r["unit_share"]), f"{at}hot_unit_coverage.{i}.unit_share")]
        for i, r in enumerate(rows)], f"{at}hot_unit_coverage")
    return section("hot-unit coverage", chart, table,
                    note="The fewest units that carry a share of all activations (PowerInfer's "
                    "statistic); a diagonal would mean every unit is equally active.")


def _token_ticks(tokens: Sequence[int]) -> list[tuple[float, str]]:
    return [(t, commas(t)) for t in tokens if t & (t - 1) == 0 or t == max(tokens)]


def _aggregated(doc: dict[str, Any], at: str) -> str:
    rows = doc["aggregated_sparsity"]
    chart = line_chart([("unused", [(r["tokens"], r["unused_share"]) for r in rows], PALETTE[0])],
                   "aggregated sparsity", "tokens t (count, log scale)",
                   "unused by all first t (% of d_ff)",
                   log2_x=True, x_ticks=_token_ticks([r["tokens"] for r in rows]))
    table = number_table(("tokens t", "units unused by all of the first t"), [
        [Cell(commas(r["tokens"]), f"{at}aggregated_sparsity.{i}.tokens"),
         Cell(percent(r["unused_share"]), f"{at}aggregated_sparsity.{i}.unused_share")]
        for i, r in enumerate(rows)], f"{at}aggregated_sparsity")
    return section("aggregated sparsity against tokens", chart, table,
                    note="The share of units that none of the first t tokens uses (Deja Vu's "
                    "aggregated sparsity): what a cache of units needed by a whole batch saves.")


def _per_expert(doc: dict[str, Any], at: str) -> str:
    experts = doc["per_expert"]
    chart = hbars([(f"expert {e['expert']}", e["mean_inactive_fraction"],
                     percent(e["mean_inactive_fraction"])) for e in experts],
                   "mean inactive fraction per expert", scale=1.0,
                   x_label="mean inactive fraction (% of the expert's d_ff)")
    table = number_table(("expert", "tokens", "mean inactive fraction", "dead", "always active"), [
        [Cell(str(e["expert"]), f"{at}per_expert.{i}.expert"),
         Cell(commas(e["tokens"]), f"{at}per_expert.{i}.tokens"),
         Cell(percent(e["mean_inactive_fraction"], 2),
              f"{at}per_expert.{i}.mean_inactive_fraction"),
         Cell(commas(e["dead_units"]), f"{at}per_expert.{i}.dead_units"),
         Cell(commas(e["always_active_units"]), f"{at}per_expert.{i}.always_active_units")]
        for i, e in enumerate(experts)], f"{at}per_expert")
    return section("experts", chart, table, note="Each expert on the tokens routed to it.")


def _pairs(doc: dict[str, Any], at: str) -> str:
    pairs = doc["pairwise_overlap"]
    table = number_table(("token", "token", "shared inactive units", "Jaccard", "by chance"), [
        [Cell(str(p["a"]), f"{at}pairwise_overlap.{i}.a"),
         Cell(str(p["b"]), f"{at}pairwise_overlap.{i}.b"),
         Cell(commas(p["shared"]), f"{at}pairwise_overlap.{i}.shared"),
         Cell(fixed(p["jaccard"], 4), f"{at}pairwise_overlap.{i}.jaccard"),
         Cell(fixed(p["by_chance"], 2), f"{at}pairwise_overlap.{i}.by_chance")]
        for i, p in enumerate(pairs)], f"{at}pairwise_overlap")
    return section("every pair of tokens", table)


# ---------------------------------------------------------------------------------------------
# relu-stats: a sweep over layers.


def sweep_report(doc: dict[str, Any], about: Context | None = None) -> str:
    """The report of a relu-stats sweep document: per-layer inactive fraction, activity
    histograms, hot-unit coverage curves and aggregated sparsity of every layer; with one layer,
    that layer's full statistics too."""
    layers = doc["layers"]
    name = about.model if about is not None else doc["model"]
    meta = [f"{name} on {doc['source']}: {doc['tokens']:,} tokens in "
            f"{doc['sequences']:,} sequences", str(doc["definition"])]
    sections = [_sweep_summary(layers)]
    dense = [i for i, layer in enumerate(layers) if layer["experts"] == 1]
    if dense:
        sections += [_sweep_histograms(layers, dense), _sweep_coverage(layers, dense),
                     _sweep_aggregated(layers, dense)]
    if len(layers) == 1:
        sections += _stats_sections(layers[0], "layers.0.")
    return page("relu-stats, layer by layer", meta, sections,
                about.footer() if about is not None else ())


def _sweep_summary(layers: Sequence[dict[str, Any]]) -> str:
    chart = column_chart([(str(layer["layer"]), layer["mean_inactive_fraction"],
                       percent(layer["mean_inactive_fraction"])) for layer in layers],
                     "mean inactive fraction per layer", "layer", "inactive (% of d_ff)")
    rows = []
    for i, layer in enumerate(layers):
        at = f"layers.{i}."
        hot = next((j for j, r in enumerate(layer.get("hot_unit_coverage", ()))
                    if abs(r["share"] - 0.8) < 1e-9), None)
        ov = layer.get("overlap") or {}
        cats = layer.get("cats_threshold_50")
        row: list[Cell | str] = [
            Cell(str(layer["layer"]), f"{at}layer"),
            Cell(commas(layer["tokens"]), f"{at}tokens"),
            Cell(percent(layer["mean_inactive_fraction"], 2), f"{at}mean_inactive_fraction"),
            Cell(commas(len(layer["dead_units"])), f"len({at}dead_units)"),
            Cell(commas(len(layer["always_active_units"])), f"len({at}always_active_units)"),
        ]
        row += ["-", "-"] if hot is None else [
            Cell(commas(layer["hot_unit_coverage"][hot]["units"]),
                 f"{at}hot_unit_coverage.{hot}.units"),
            Cell(percent(layer["hot_unit_coverage"][hot]["unit_share"]),
                 f"{at}hot_unit_coverage.{hot}.unit_share")]
        row += ["-", "-", "-"] if not ov.get("pairs") else [
            Cell(fixed(ov["mean_jaccard"], 4), f"{at}overlap.mean_jaccard"),
            Cell(f"{ov['mean_shared']:,.2f}", f"{at}overlap.mean_shared"),
            Cell(f"{ov['mean_shared_by_chance']:,.2f}", f"{at}overlap.mean_shared_by_chance")]
        row.append("-" if cats is None else Cell(f"{cats:.6g}", f"{at}cats_threshold_50"))
        rows.append(row)
    table = number_table(("layer", "tokens", "mean inactive", "dead", "always active",
                    "units for 80% of activations", "share of units",
                    "consecutive Jaccard", "shared units", "by chance", "CATS T at 50%"),
                   rows, "sweep")
    return section("every layer", chart, table, note=(
        "Dead units are never active on these tokens (on a small sample that does not make them "
        "dead). Consecutive tokens' inactive sets: their mean Jaccard index, and the units they "
        "share against what two random sets of their sizes share. The CATS threshold at 50% "
        "makes half of the activated values inactive."))


def _sweep_histograms(layers: Sequence[dict[str, Any]], dense: Sequence[int]) -> str:
    bins = [str(b["bin"]) for b in layers[dense[0]]["activity_histogram"]]
    names = [f"layer {layers[i]['layer']}" for i in dense]
    shares = [[b["units"] / layers[i]["d_ff"] for b in layers[i]["activity_histogram"]]
              for i in dense]
    chart = heatmap(names, bins, shares, "activity histogram of every layer",
                    "a layer's units in the cell (% of its d_ff)")
    table = number_table(["layer", *bins], [
        [Cell(str(layers[i]["layer"]), f"layers.{i}.layer")] +
        [Cell(commas(b["units"]), f"layers.{i}.activity_histogram.{j}.units")
         for j, b in enumerate(layers[i]["activity_histogram"])] for i in dense],
        "sweep_activity_histogram")
    return section("activity histograms", chart, table, note=(
        "Hidden units by the share of tokens for which they are active, one row per layer; "
        "darker cells hold more units. The table counts units."))


def _sweep_coverage(layers: Sequence[dict[str, Any]], dense: Sequence[int]) -> str:
    colours = layer_colours(len(dense))
    series = [(f"layer {layers[i]['layer']}",
               [(0.0, 0.0)] + [(r["unit_share"], r["share"])
                               for r in layers[i]["hot_unit_coverage"]] + [(1.0, 1.0)], c)
              for i, c in zip(dense, colours, strict=True)]
    chart = line_chart(series, "hot-unit coverage of every layer", "share of units, most active "
                   "first (% of d_ff)", "share of activations (%)",
                   x_ticks=[(k / 5, percent(k / 5, 0)) for k in range(6)])
    shares = [r["share"] for r in layers[dense[0]]["hot_unit_coverage"]]
    table = number_table(["layer"] + [f"units for {percent(s, 0)}" for s in shares], [
        [Cell(str(layers[i]["layer"]), f"layers.{i}.layer")] +
        [Cell(commas(r["units"]), f"layers.{i}.hot_unit_coverage.{j}.units")
         for j, r in enumerate(layers[i]["hot_unit_coverage"])] for i in dense],
        "sweep_hot_unit_coverage")
    return section("hot-unit coverage", chart, table, note=(
        "The fewest units that carry a share of all activations, layer by layer (each layer's "
        "colour in the legend)."))


def _sweep_aggregated(layers: Sequence[dict[str, Any]], dense: Sequence[int]) -> str:
    colours = layer_colours(len(dense))
    series = [(f"layer {layers[i]['layer']}",
               [(r["tokens"], r["unused_share"]) for r in layers[i]["aggregated_sparsity"]], c)
              for i, c in zip(dense, colours, strict=True)]
    tokens = sorted({r["tokens"] for i in dense for r in layers[i]["aggregated_sparsity"]})
    chart = line_chart(series, "aggregated sparsity of every layer",
                       "tokens t (count, log scale)", "unused by all first t (% of d_ff)",
                       log2_x=True, x_ticks=_token_ticks(tokens))
    rows: list[list[Cell | str]] = []
    for i in dense:
        where = {r["tokens"]: j for j, r in enumerate(layers[i]["aggregated_sparsity"])}
        rows.append([Cell(str(layers[i]["layer"]), f"layers.{i}.layer"), *(
            Cell(percent(layers[i]["aggregated_sparsity"][where[t]]["unused_share"]),
                 f"layers.{i}.aggregated_sparsity.{where[t]}.unused_share") if t in where
            else "-" for t in tokens)])
    table = number_table(["layer"] + [f"t = {t:,}" for t in tokens], rows,
                         "sweep_aggregated_sparsity")
    return section("aggregated sparsity against tokens", chart, table, note=(
        "The share of units that none of the first t tokens uses, layer by layer."))


def save_stats(target: Path | None, result: SparsityResult, about: Context | None = None
               ) -> None:
    """``relu-stats --report``: the page of the ``--json`` document, written atomically to the
    target the job checked before its work (nothing when None)."""
    if target is not None:
        write_text_atomically(target, stats_report(stats_json(result), about), OPTION)


def save_sweep(target: Path | None, doc: dict[str, Any], about: Context | None = None) -> None:
    """``relu-stats --text --report``: the page of the sweep document."""
    if target is not None:
        write_text_atomically(target, sweep_report(doc, about), OPTION)
