"""``ffncli perplexity``: the JSON document, the terminal's tables (with bars: the perplexity of
each target, each layer's achieved sparsity) and the ``--report`` page (the curve of
perplexity or cosine against sparsity, one line per rule; per-layer heat maps; the numbers in
tables beneath)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.base.files import Outputs
from ffncli.jobs.thresholds import thresholds_text
from ffncli.present.console import Text, console
from ffncli.present.jsondoc import emit_json
from ffncli.present.report import Context
from ffncli.present.svg import (
    PALETTE,
    Cell,
    data_span,
    fixed,
    heatmap,
    line_chart,
    number_table,
    page,
    percent,
    section,
)
from ffncli.present.tables import bar_table, pct

if TYPE_CHECKING:
    from rich.console import Console

    from ffncli.jobs.perplexity import LayerCost, PerplexityResult, VariantResult


# ---------------------------------------------------------------------------------------------
# The document.


def _cut_json(c: LayerCost) -> dict[str, Any]:
    doc: dict[str, Any] = {"layer": c.layer}
    if c.cut.rule == "topk":
        doc["keep"] = c.cut.keep
    else:
        doc["threshold"] = c.cut.threshold
    if c.cut.rule == "teal":
        doc |= {"down": c.cut.down, "sparsity_in": c.sparsity_in,
                "sparsity_down": c.sparsity_down}
    return doc | {"sparsity": c.sparsity, "ffn_relative_error": c.ffn_error,
                  "macs_saved_per_token": c.macs_saved}


def _variant_json(v: VariantResult, dense: float | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"rule": v.rule, "target": v.target, "label": v.label,
                           "sparsity": v.sparsity, "macs_saved_per_token": v.macs_saved,
                           "macs_per_token": v.macs}
    if v.perplexity is not None:
        doc |= {"perplexity": v.perplexity, "perplexity_change":
                v.perplexity / dense - 1 if dense else None, "nll_mean": v.nll_mean,
                "kl_mean": v.kl_mean, "top1_agreement": v.top1}
    else:
        doc |= {"token_cosine": v.token_cosine, "sentence_cosine": v.sentence_cosine,
                "worst_sentence_cosine": v.worst_sentence}
    return doc | {"layers": [_cut_json(c) for c in v.layers]}


def perplexity_json(r: PerplexityResult) -> dict[str, Any]:
    return {"model": r.model, "source": r.source, "sha256": r.sha256, "kind": r.kind,
            "protocol": r.protocol.as_json() if r.protocol is not None else None,
            "tokens": r.tokens, "windows": r.windows, "dropped_tokens": r.dropped,
            "bos": r.bos, "tokens_scored": r.tokens_scored, "perplexity": r.perplexity,
            "nll_mean": r.nll_mean, "layers": list(r.layers), "calibration": r.calibration,
            "variants": [_variant_json(v, r.perplexity) for v in r.variants]}


# ---------------------------------------------------------------------------------------------
# The terminal.


def _about_lines(doc: dict[str, Any]) -> list[str]:
    lines = [f"perplexity: {doc['model']} on {doc['source']}"]
    p = doc["protocol"]
    if p is not None:
        lines.append(f"protocol: {p['description']}")
        lines.append(f"{doc['tokens']:,} tokens: {doc['windows']:,} windows, "
                     f"{doc['tokens_scored']:,} scored"
                     + (f", the last {doc['dropped_tokens']:,} (a short window) dropped"
                        if doc["dropped_tokens"] else "")
                     + (f"; BOS (id {doc['bos']}) first in every chunk"
                        if doc["bos"] is not None and p["name"] != "stride" else ""))
    else:
        lines.append(f"an encoder: {doc['windows']:,} lines, {doc['tokens']:,} tokens; "
                     "fidelity of the final hidden states, dense against sparsified")
    cal = doc["calibration"]
    if cal is not None:
        on = "the evaluated text itself" if cal["evaluated_text"] else cal["source"]
        lines.append(f"calibrated on the dense model: the first {cal['tokens']:,} tokens of "
                     f"{on}, in chunk order; per layer, numpy's quantile (linear)")
    return lines


def _rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]], list[float | None]]:
    decoder = doc["kind"] == "decoder"
    if decoder:
        columns = ["model", "sparsity", "perplexity", "change", "KL (nats)", "same top-1",
                   "W1/W2 MACs saved"]
        rows = [["dense", "-", f"{doc['perplexity']:,.4f}", "-", "-", "-", "-"]]
        values: list[float | None] = [doc["perplexity"]]
    else:
        columns = ["model", "sparsity", "sentence cosine", "token cosine", "worst line",
                   "W1/W2 MACs saved"]
        rows, values = [], []
    for v in doc["variants"]:
        saved = pct(v["macs_saved_per_token"] / v["macs_per_token"]) if v["macs_per_token"] \
            else "-"
        if decoder:
            rows.append([v["label"], pct(v["sparsity"]), f"{v['perplexity']:,.4f}",
                         f"{v['perplexity_change']:+.2%}", f"{v['kl_mean']:.4f}",
                         pct(v["top1_agreement"]), saved])
            values.append(v["perplexity"])
        else:
            rows.append([v["label"], pct(v["sparsity"]), f"{v['sentence_cosine']:.5f}",
                         f"{v['token_cosine']:.5f}", f"{v['worst_sentence_cosine']:.5f}",
                         saved])
            values.append(v["sentence_cosine"])
    return columns, rows, values


def print_perplexity(doc: dict[str, Any]) -> None:
    out = console()
    for line in _about_lines(doc):
        out.print(Text(line))
    if doc["kind"] == "decoder":
        out.print(Text(f"dense: perplexity {doc['perplexity']:,.4f}, mean NLL "
                       f"{doc['nll_mean']:.6f} nats over {doc['tokens_scored']:,} tokens"))
    if not doc["variants"]:
        return
    _print_variants(out, doc)
    for v in _largest_per_rule(doc["variants"]):
        _print_variant_layers(out, v)


def _print_variants(out: Console, doc: dict[str, Any]) -> None:
    """Every variant's score in a table, with a bar of its perplexity (or cosine)."""
    columns, rows, values = _rows(doc)
    top = max((v for v in values if v is not None and math.isfinite(v)), default=1.0) or 1.0
    shares = [None if v is None else v / top for v in values]
    heading = "perplexity" if doc["kind"] == "decoder" else "sentence cosine"
    out.print(bar_table(out, f"{heading} against sparsity (FFN of layers "
                             f"{_span(doc['layers'])})", columns, rows, shares, after=2,
                        heading=""))


def _print_variant_layers(out: Console, v: dict[str, Any]) -> None:
    """One variant's achieved sparsity and FFN error per layer (teal: both of its cuts)."""
    teal = v["rule"] == "teal"
    layer_rows = [[str(c["layer"]), pct(c["sparsity"]), f"{c['ffn_relative_error']:.4f}"]
                  + ([pct(c["sparsity_in"]), pct(c["sparsity_down"])] if teal else [])
                  for c in v["layers"]]
    extra = ["input cut", "down cut"] if teal else []
    out.print(bar_table(out, f"{v['label']}: each layer's achieved sparsity and FFN error",
                        ["layer", "sparsity", "FFN error", *extra], layer_rows,
                        [c["sparsity"] for c in v["layers"]], after=1, track=True))


def _largest_per_rule(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    best: dict[str, dict[str, Any]] = {}
    for v in variants:
        if v["rule"] not in best or v["target"] > best[v["rule"]]["target"]:
            best[v["rule"]] = v
    return list(best.values())


def _span(layers: list[int]) -> str:
    if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 1:
        return f"{layers[0]}-{layers[-1]}"
    return ", ".join(map(str, layers))


def emit_perplexity(result: PerplexityResult, as_json: bool) -> None:
    doc = perplexity_json(result)
    if as_json:
        emit_json(doc, "perplexity")
    else:
        print_perplexity(doc)


# ---------------------------------------------------------------------------------------------
# The page.


def perplexity_report(doc: dict[str, Any], about: Context | None = None) -> str:
    sections = [_cost_section(doc), _layers_section(doc)] if doc["variants"] else []
    name = about.model if about is not None else doc["model"]
    return page("perplexity and the cost of FFN sparsity", [name, *_about_lines(doc)[1:]],
                sections, about.footer() if about is not None else ())


def _score_key(doc: dict[str, Any]) -> str:
    return "perplexity" if doc["kind"] == "decoder" else "sentence_cosine"


def _cost_section(doc: dict[str, Any]) -> str:
    """The curve of the score against achieved sparsity, one line a rule from the dense
    model at 0%, and the variants' table."""
    key = _score_key(doc)
    rules: dict[str, list[tuple[float, float]]] = {}
    for v in doc["variants"]:
        rules.setdefault(v["rule"], []).append((v["sparsity"], v[key]))
    start = (0.0, doc["perplexity"] if doc["kind"] == "decoder" else 1.0)
    series = [(rule, [start, *sorted(points)], PALETTE[i % len(PALETTE)])
              for i, (rule, points) in enumerate(rules.items())]
    ys = [y for _, points, _ in series for _, y in points if math.isfinite(y)]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    chart = line_chart(series, f"{key.replace('_', ' ')} against achieved sparsity",
                       "achieved sparsity of the FFN", key.replace("_", " "),
                       x_ticks=[(k / 5, percent(k / 5, 0)) for k in range(6)],
                       y_range=(lo - pad, hi + pad), y_text=lambda y: f"{y:.4g}")
    columns, rows, _ = _rows(doc)
    return section("the cost of sparsity", chart, number_table(columns, rows, "variants"),
                   note="The dense model at 0%, then each target of each rule.")


def _per_layer(doc: dict[str, Any], key: str, text: Callable[[float], str], name: str) -> str:
    """A row a layer, a column a target: 30 layers fit the page."""
    labels = [v["label"] for v in doc["variants"]]
    return number_table(["layer", *labels], [
        [Cell(str(layer), f"layers.{k}"),
         *(Cell(text(v["layers"][k][key]), f"variants.{n}.layers.{k}.{key}")
           for n, v in enumerate(doc["variants"]))]
        for k, layer in enumerate(doc["layers"])], name)


def _layers_section(doc: dict[str, Any]) -> str:
    """Each layer's achieved sparsity and FFN error, as heat maps and tables."""
    labels = [v["label"] for v in doc["variants"]]
    layers = [str(i) for i in doc["layers"]]
    sparsity = [[c["sparsity"] for c in v["layers"]] for v in doc["variants"]]
    errors = [[min(1.0, c["ffn_relative_error"]) for c in v["layers"]]
              for v in doc["variants"]]
    return section(
        "each layer", heatmap(labels, layers, sparsity, "achieved sparsity per layer",
                              "share of the FFN zeroed",
                              data_span(s for row in sparsity for s in row)),
        _per_layer(doc, "sparsity", percent, "layer_sparsity"),
        heatmap(labels, layers, errors, "FFN relative error per layer",
                "||y sparse - y dense|| / ||y dense||",
                data_span(e for row in errors for e in row)),
        _per_layer(doc, "ffn_relative_error", lambda e: fixed(e, 4), "layer_error"),
        note="Each layer's achieved sparsity, and its FFN's relative error on its own "
             "input, sparse against dense. Each heat map's shades span its data, lightest "
             "to darkest (the scale beneath it says from what to what).")


def save_perplexity(outputs: Outputs, report: Path | None, saved: Path | None,
                    result: PerplexityResult, about: Context | None) -> None:
    """``--report`` and ``--save-thresholds``, reserved in ``outputs`` before the work, given
    their texts: both are named when ``outputs`` closes, or neither (a report that cannot be
    made leaves no thresholds file)."""
    if saved is not None:
        assert result.thresholds is not None  # asked for with save
        outputs.text(saved, thresholds_text(result.thresholds))
    if report is not None:
        outputs.text(report, perplexity_report(perplexity_json(result), about))
