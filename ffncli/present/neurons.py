"""``neurons``' outputs, all from one record per unit (:func:`unit_records`), whose fields map
onto OpenAI's ``NeuronRecord`` (docs/neurons.md): a table for people, ``--json`` (one document,
``ffncli-neurons/1``), ``--jsonl FILE`` (one record a line) and ``--report DIR`` (one HTML page
per layer: the top contexts with their token highlighted, every string escaped, no script)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ffncli.analysis.neurons import EDGES, QUANTILES, Projection, UnitStats
from ffncli.errors import OutputError
from ffncli.present.console import Text, console
from ffncli.present.jsondoc import emit_json
from ffncli.present.svg import escape, page, section
from ffncli.present.tables import new_table

if TYPE_CHECKING:
    from ffncli.base.files import Outputs
    from ffncli.jobs.neurons import LayerNeurons, NeuronsResult
    from ffncli.present.report import Context

SHOWN_PROMOTED = 3  # tokens a table row names of each unit's projection


# ---------------------------------------------------------------------------------------------
# One record per unit


def piece(result: NeuronsResult, token: int) -> str:
    """A token's text: its piece by the model's tokenizer, else ``#id`` (``--ids`` without a
    tokenizer)."""
    if result.pieces is not None and token in result.pieces:
        return result.pieces[token]
    return f"#{token}"


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _context(result: NeuronsResult, index: int, acts: np.ndarray) -> dict[str, Any]:
    """An activation record: the tokens of the window around text token ``index`` (within its
    sequence) and the unit's activation at each; ``token_index`` is the token's place in
    them."""
    starts = result.starts
    seq = int(np.searchsorted(starts, index, side="right")) - 1
    pos = index - int(starts[seq])
    ids = result.sequences[seq]
    w = result.asked.window
    lo, hi = max(0, pos - w), min(len(ids), pos + w + 1)
    values = acts[w - (pos - lo):w + (hi - pos)]
    return {"tokens": [piece(result, int(t)) for t in ids[lo:hi]],
            "activations": [float(v) for v in values],
            "token_index": pos - lo,
            "activation": float(acts[w]),
            "line": int(result.lines[seq]) if result.lines else seq + 1,
            "position": pos}


def _stats_fields(result: NeuronsResult, s: UnitStats, j: int, q: np.ndarray
                  ) -> dict[str, Any]:
    """Unit ``j`` (of the layer's asked units)'s statistics and contexts."""
    m = s.moments
    top = [_context(result, int(s.top.index[r, j]), s.top.extra[r, j])
           for r in range(s.top.k)] if s.top.extra is not None else []
    samples = [_context(result, int(p), s.sampled[r, j])
               for r, p in enumerate(s.asked.sample)]
    variance = float(m.variance()[j])
    return {"tokens": s.count, "frequency": float(s.frequency()[j]),
            "mean": float(m.mean[j]), "variance": variance,
            "stddev": float(np.sqrt(variance)), "skewness": _finite(m.skewness()[j]),
            "kurtosis": _finite(m.kurtosis()[j]), "min": float(s.low[j]),
            "max": float(s.high[j]),
            "quantiles": list(QUANTILES), "quantile_boundaries": [float(v) for v in q[j]],
            "histogram": [int(c) for c in s.hist[:, j]],
            "most_positive_activation_records": top, "random_sample": samples}


def _projection_fields(result: NeuronsResult, p: Projection, j: int) -> dict[str, Any]:
    return {"promotes": [{"token": piece(result, int(t)), "id": int(t), "logit": float(v)}
                         for t, v in zip(p.top_ids[j], p.top_logits[j], strict=True)],
            "suppresses": [{"token": piece(result, int(t)), "id": int(t), "logit": float(v)}
                           for t, v in zip(p.bottom_ids[j], p.bottom_logits[j], strict=True)]}


def layer_records(result: NeuronsResult, layer: LayerNeurons) -> Iterator[dict[str, Any]]:
    """One record per asked unit of one layer."""
    s = layer.stats
    q = s.quantiles() if s is not None else None
    for j, unit in enumerate(result.units):
        record: dict[str, Any] = {
            "neuron_id": {"layer_index": layer.layer, "neuron_index": int(unit)},
            "activation_function": layer.activation}
        if s is not None:
            assert q is not None
            record.update(_stats_fields(result, s, j, q))
        if layer.projection is not None:
            record.update(_projection_fields(result, layer.projection, j))
        yield record


def unit_records(result: NeuronsResult) -> Iterator[dict[str, Any]]:
    for layer in result.layers:
        yield from layer_records(result, layer)


def neurons_json(result: NeuronsResult) -> dict[str, Any]:
    """The ``--json`` document (its ``format`` added by emit_json)."""
    return {"model": result.model, "text": result.source, "tokens": result.tokens,
            "sequences": len(result.sequences), "frequency_rule": result.frequency_rule,
            "projection_rule": result.projection_rule, "top_k": result.asked.top_k,
            "window": result.asked.window, "histogram_edges": [float(e) for e in EDGES],
            "layers": [{"layer": layer.layer, "activation": layer.activation,
                        "units": list(layer_records(result, layer))}
                       for layer in result.layers]}


def jsonl_text(result: NeuronsResult) -> str:
    """``--jsonl``: one record a line (NaN as null)."""
    return "".join(json.dumps(_clean(r), allow_nan=False) + "\n" for r in unit_records(result))


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# The table


def _top_cell(record: Mapping[str, Any]) -> str:
    tops = record.get("most_positive_activation_records") or []
    if not tops:
        return "-"
    best = tops[0]
    token = json.dumps(best["tokens"][best["token_index"]], ensure_ascii=False)
    return f"{token} {best['activation']:.3g}"


def _tokens_cell(entries: Sequence[Mapping[str, Any]]) -> str:
    return " ".join(json.dumps(e["token"], ensure_ascii=False) for e in entries[:SHOWN_PROMOTED])


def table_rows(result: NeuronsResult) -> tuple[list[str], list[list[str]]]:
    """The table's columns and its rows, one per unit."""
    text = any(layer.stats is not None for layer in result.layers)
    vocab = any(layer.projection is not None for layer in result.layers)
    columns = ["layer", "unit"]
    if text:
        columns += ["active", "mean", "std", "skew", "kurt", "max", "top context"]
    if vocab:
        columns += ["promotes", "suppresses"]
    rows = []
    for r in unit_records(result):
        row = [str(r["neuron_id"]["layer_index"]), str(r["neuron_id"]["neuron_index"])]
        if text:
            row += [f"{r['frequency']:.1%}", f"{r['mean']:.4g}", f"{r['stddev']:.4g}",
                    _g(r["skewness"]), _g(r["kurtosis"]), f"{r['max']:.4g}", _top_cell(r)]
        if vocab:
            row += [_tokens_cell(r.get("promotes", [])), _tokens_cell(r.get("suppresses", []))]
        rows.append(row)
    return columns, rows


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def emit_neurons(result: NeuronsResult, as_json: bool) -> None:
    if as_json:
        emit_json(neurons_json(result), "neurons")
        return

    out = console()
    where = f" on {result.source}: {result.tokens:,} tokens" if result.source else \
        " (weights only)"
    out.print(Text(f"neurons: {result.model}{where}"))
    if result.source:
        out.print(Text(f"active: {result.frequency_rule}"))
    if any(layer.projection is not None for layer in result.layers):
        out.print(Text(f"promotes/suppresses: {result.projection_rule}"))
    columns, rows = table_rows(result)
    table = new_table("the units asked", columns)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    out.print(table)


# ---------------------------------------------------------------------------------------------
# --report DIR: one page per layer


def _highlighted(context: Mapping[str, Any]) -> str:
    """The context's tokens, the activating one in <mark>, each escaped."""
    parts = []
    for i, token in enumerate(context["tokens"]):
        text = escape(token)
        parts.append(f"<mark>{text}</mark>" if i == context["token_index"] else text)
    return "".join(parts)


def _unit_section(record: Mapping[str, Any]) -> str:
    unit = record["neuron_id"]["neuron_index"]
    parts = []
    if "frequency" in record:
        parts.append(f"<p>active {record['frequency']:.1%} of {record['tokens']:,} tokens; "
                     f"mean {record['mean']:.4g}, std {record['stddev']:.4g}, skew "
                     f"{_g(record['skewness'])}, kurtosis {_g(record['kurtosis'])}, max "
                     f"{record['max']:.4g}</p>")
        rows = "".join(f"<tr><td>{c['activation']:.4g}</td><td>{c['line']}:{c['position']}</td>"
                       f'<td class="ctx">{_highlighted(c)}</td></tr>'
                       for c in record["most_positive_activation_records"])
        parts.append('<table class="numbers"><thead><tr><th>activation</th><th>line:token</th>'
                     f"<th>context</th></tr></thead><tbody>{rows}</tbody></table>")
    for key, words in (("promotes", "promotes"), ("suppresses", "suppresses")):
        if key in record:
            shown = ", ".join(f"<code>{escape(e['token'])}</code> {e['logit']:.3g}"
                              for e in record[key])
            parts.append(f"<p>{words}: {shown}</p>")
    return section(f"unit {unit}", "".join(parts))


def layer_page(result: NeuronsResult, layer: LayerNeurons, about: Context | None) -> str:
    meta = [f"{result.model}: layer {layer.layer}, {layer.activation}"]
    if result.source:
        meta.append(f"on {result.source}: {result.tokens:,} tokens; active: "
                    f"{result.frequency_rule}")
    if layer.projection is not None:
        meta.append(f"promotes/suppresses: {result.projection_rule}")
    sections = [_unit_section(r) for r in layer_records(result, layer)]
    html = page(f"neurons of layer {layer.layer}", meta, sections,
                about.footer() if about is not None else ())
    return html.replace("</style>", "mark { background: #ffd54f; } td.ctx { text-align: left; "
                        "white-space: pre-wrap; }</style>", 1)


def report_files(report: Path, result: NeuronsResult) -> list[Path]:
    return [report / f"layer{layer.layer}.html" for layer in result.layers]


def reserve_report(outputs: Outputs, report: Path | None, layers: Sequence[int]) -> None:
    """The pages' files, reserved before the work (the folder made if missing)."""
    if report is None:
        return

    try:
        report.mkdir(exist_ok=True)
    except OSError as exc:
        raise OutputError(f"option --report: cannot make the folder {report}: "
                          f"{exc.strerror or exc}") from None
    for i in layers:
        outputs.reserve(report / f"layer{i}.html", "--report")


def save_report(outputs: Outputs, report: Path | None, result: NeuronsResult,
                about: Context | None) -> None:
    if report is None:
        return
    for path, layer in zip(report_files(report, result), result.layers, strict=True):
        outputs.text(path, layer_page(result, layer, about))
