"""``ffncli outliers``: the JSON document and the terminal's tables (a row per layer: the four
peaks and where they are; the massive channels, the super-weight candidates, the experts, and
with --confirm each change beside its null's band)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ffncli.analysis.outliers import (
    KINDS,
    MASSIVE_ABS,
    MASSIVE_RATIO,
    SPIKE,
    SUPER_EXPERT_Q,
    SUPER_EXPERT_SHARE,
)
from ffncli.present.console import Text, console
from ffncli.present.jsondoc import emit_json
from ffncli.present.tables import new_table

if TYPE_CHECKING:
    from ffncli.jobs.outlier_results import ConfirmResult, Found, OutliersResult, Place, Score

RULES = {
    "massive": f"Sun et al. 2024: |h| > {MASSIVE_ABS:g} and |h| >= {MASSIVE_RATIO:g} x the "
               "layer's median |h| of the residual stream after the layer (over every token "
               "and channel, exact)",
    "super_weight": f"Yu et al. 2024: the layer's largest |FFN output| and, at that token, "
                    f"the largest |hidden| (down_proj's input) are each >= {SPIKE:g} x the "
                    "median of the other layers' largest; the candidate is down_proj's weight "
                    "from that unit to that channel",
    "super_expert": f"Su et al. 2025: an expert's largest |output| above the "
                    f"{SUPER_EXPERT_Q * 100:g}th percentile of every expert's and above "
                    f"{SUPER_EXPERT_SHARE:g} x the largest",
}
HEADERS = {"ffn_input": "FFN input", "hidden": "hidden", "ffn_output": "FFN output",
           "residual": "residual"}


def _place(p: Place) -> dict[str, Any]:
    return {"sequence": p.sequence, "position": p.position, "token_id": p.token,
            "token": p.text}


def _found(f: Found) -> dict[str, Any]:
    return {"max_abs": f.magnitude, "value": f.value, "channel": f.channel, **_place(f.place)}


def _score(s: Score) -> dict[str, Any]:
    return {k: v for k, v in (("perplexity", s.perplexity), ("kl_mean", s.kl_mean),
                              ("top1", s.top1), ("token_cosine", s.token_cosine),
                              ("sentence_cosine", s.sentence_cosine)) if v is not None}


def _band(scores: tuple[Score, ...], key: str) -> list[float] | None:
    values = [v for s in scores if (v := getattr(s, key)) is not None]
    return [min(values), max(values)] if values else None


def _confirm_json(c: ConfirmResult) -> dict[str, Any]:
    keys = ("perplexity", "kl_mean", "top1", "token_cosine", "sentence_cosine")
    return {"protocol": c.protocol, "tokens_scored": c.tokens_scored,
            "dense_perplexity": c.perplexity, "repeats": c.repeats, "seed": c.seed,
            "changes": [{"change": i.what, "rule": i.rule, "changed": _score(i.changed),
                         "null": [_score(s) for s in i.null],
                         "null_band": {k: b for k in keys
                                       if (b := _band(i.null, k)) is not None}}
                        for i in c.items]}


def outliers_json(r: OutliersResult) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "model": r.model, "source": r.source, "tokens": r.tokens, "sequences": r.sequences,
        "rules": RULES,
        "layers": [{"layer": x.layer, **{k: _found(x.peaks[k]) for k in KINDS},
                    "residual_median_abs": x.median, "massive_threshold": x.threshold,
                    "massive_channels": list(x.massive_channels),
                    "super_weight_layer": x.spike} for x in r.layers],
        "massive": [{"layer": m.layer, "channel": m.channel, **_found(m.peak),
                     "entries": m.count, "mean": m.mean, "persists": list(m.persists)}
                    for m in r.massive],
        "super_weights": [{"layer": c.layer, "expert": c.expert, "tensor": c.tensor,
                           "index": list(c.index), "unit": c.unit, "channel": c.channel,
                           "weight": c.weight, "hidden": _found(c.hidden),
                           "output": _found(c.output)} for c in r.candidates],
        "experts": [{"layer": e.layer, "expert": e.expert, "max_abs_output": e.magnitude,
                     "channel": e.channel, **_place(e.place), "super_expert": e.super_expert}
                    for e in r.experts],
        "super_expert_cut": r.super_expert_cut,
        "confirm": _confirm_json(r.confirm) if r.confirm is not None else None,
    }
    return doc


def emit_outliers(result: OutliersResult, as_json: bool) -> None:
    doc = outliers_json(result)
    if as_json:
        emit_json(doc, "outliers")
    else:
        print_outliers(doc)


def _token(f: dict[str, Any]) -> str:
    """sequence:position and the token's text (its id without a tokenizer)."""
    text = f['token'] if f["token"] is not None else f"#{f['token_id']}"
    return f"{f['sequence']}:{f['position']} {text}"


def _ranges(layers: list[int]) -> str:
    out: list[str] = []
    for i in layers:
        if out and int(out[-1].split("-")[-1]) == i - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out) or "-"


def _figure(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.4g}"


def print_outliers(doc: dict[str, Any]) -> None:
    """A row per layer (each peak's |value|, channel and token: sequence:position #id text),
    then the flags, each with its rule, and --confirm's changes beside their nulls' band."""
    out = console()
    out.print(Text(f"outliers: {doc['model']} on {doc['source']}: {doc['tokens']:,} tokens in "
                   f"{doc['sequences']:,} sequences"))
    table = new_table("largest |value| per layer: |value| c<channel> <sequence>:<position> "
                      "<token>",
                      ["layer", *(HEADERS[k] for k in KINDS), "median |h|", "massive"],
                      optional=("median |h|", "massive"))  # both also said under the table
    for x in doc["layers"]:
        table.add_row(str(x["layer"]),
                      *(Text(f"{x[k]['max_abs']:.4g} c{x[k]['channel']} {_token(x[k])}")
                        for k in KINDS),
                      _figure(x["residual_median_abs"]),
                      Text(", ".join(map(str, x["massive_channels"])) or "-"))
    out.print(table)
    out.print(Text(f"massive activations ({doc['rules']['massive']}):"))
    for m in doc["massive"]:
        out.print(Text(f"  channel {m['channel']}: from layer {m['layer']}, {m['value']:.4g} at "
                       f"{_token(m)}, {m['entries']:,} entries (mean {m['mean']:.4g}); massive "
                       f"in layers {_ranges(m['persists'])}"))
    if not doc["massive"]:
        out.print(Text("  none"))
    out.print(Text(f"super-weight candidates ({doc['rules']['super_weight']}):"))
    for c in doc["super_weights"]:
        out.print(Text(f"  {c['tensor']}[{', '.join(map(str, c['index']))}] = {c['weight']:.4g}"
                       f": hidden {c['hidden']['value']:.4g} (unit {c['unit']}) and output "
                       f"{c['output']['value']:.4g} (channel {c['channel']}) at "
                       f"{_token(c['hidden'])}"))
    if not doc["super_weights"]:
        out.print(Text("  none"))
    if doc["experts"]:
        _print_experts(doc)
    if doc["confirm"] is not None:
        _print_confirm(doc["confirm"])


def _print_experts(doc: dict[str, Any]) -> None:
    out = console()
    out.print(Text(f"super experts ({doc['rules']['super_expert']}): the cut is "
                   f"{_figure(doc['super_expert_cut'])}"))
    table = new_table("each expert's largest |output|",
                      ["layer", "expert", "max |output|", "channel", "token", "super"])
    for e in doc["experts"]:
        table.add_row(str(e["layer"]), str(e["expert"]), f"{e['max_abs_output']:.4g}",
                      str(e["channel"]), Text(_token(e)), "yes" if e["super_expert"] else "")
    out.print(table)


def _print_confirm(c: dict[str, Any]) -> None:
    out = console()
    dense = f", dense perplexity {c['dense_perplexity']:.4f}" \
        if c["dense_perplexity"] is not None else ""
    out.print(Text(f"--confirm: {c['protocol']}, {c['tokens_scored']:,} tokens scored{dense}; "
                   f"null: {c['repeats']} repeats, seed {c['seed']}"))
    keys = ("perplexity", "kl_mean") if c["dense_perplexity"] is not None else \
        ("token_cosine", "sentence_cosine")
    table = new_table("each change against the dense model, beside its null's band (min-max)",
                      ["change", *(f"{k} {w}" for k in keys for w in ("changed", "null"))])
    for i in c["changes"]:
        cells = []
        for k in keys:
            band = i["null_band"].get(k)
            cells += [_figure(i["changed"].get(k)),
                      f"{band[0]:.4g}-{band[1]:.4g}" if band is not None else "-"]
        table.add_row(Text(i["change"]), *cells)
    out.print(table)
    if not c["changes"]:
        out.print(Text("  nothing to confirm: no super-weight candidate, no massive channel"))
