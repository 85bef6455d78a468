"""``params`` and ``presets``: where the parameters live, layer by layer and part by part, FLOPs
per token, weight memory and the KV cache; a checkpoint's count beside the spec's; as tables
or JSON."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ffncli.counting.model import LayerCount, ModelCount
from ffncli.counting.parts import Row
from ffncli.counting.results import FileOnlyResult, ParamsResult, PresetSummary
from ffncli.present.console import Text, console
from ffncli.present.console import table_format as table_format_of
from ffncli.present.jsondoc import emit_json
from ffncli.present.kv import kv_json, print_kv
from ffncli.present.tables import bar_table, commas, new_table, pct, share_bar_line

if TYPE_CHECKING:  # a file's count: imported with it (a preset's params reads no file)
    from rich.console import Console

    from ffncli.counting.files import FileCount
    from ffncli.specs.spec import ModelSpec

# One function a command: its result as one JSON document, or as tables for people.


def emit_params(result: ParamsResult | FileOnlyResult, as_json: bool,
                table_format: str | None = None) -> None:
    """``table_format``: rich, markdown or csv (``--format``); None: as the caller set it."""
    with table_format_of(table_format) if table_format else contextlib.nullcontext():
        if isinstance(result, FileOnlyResult):
            emit_json(file_only_json(result), "params-file") if as_json else print_file_only(result)
        else:
            emit_json(params_json(result), "params") if as_json else print_params(result)


def emit_presets(rows: Sequence[PresetSummary], as_json: bool) -> None:
    emit_json(presets_json(rows), "presets") if as_json else print_presets(rows)


# ---------------------------------------------------------------------------------------------
# params


def _rows_json(rows: Iterable[Row]) -> list[dict[str, Any]]:
    return [{"name": r.name, "shape": r.shape, "params": r.params} for r in rows]


def _layer_json(layer: LayerCount) -> dict[str, Any]:
    return {
        "kind": layer.kind,
        "count": layer.count,
        "runs": layer.repeats,
        "indices": list(layer.indices),
        "mixer": layer.mixer,
        "window": layer.window,
        "ffn": layer.ffn,
        "ffn_active": layer.ffn_active,
        "attention": layer.attention,
        "norm": layer.norm,
        "total": layer.total,
        "active": layer.active,
        "ffn_share": round(layer.ffn_share, 6),
        "ffn_active_share": round(layer.ffn_active_share, 6),
        "ffn_rows": _rows_json(layer.ffn_rows),
        "attention_rows": _rows_json(layer.attention_rows),
        "other": layer.other,
        "other_rows": _rows_json(layer.other_rows),
        "flops_per_token": {
            "ffn": layer.flops.ffn,
            "attention_projections": layer.flops.attention_projections,
            "attention_scores": layer.flops.attention_scores,
            "total": layer.flops.total,
            "ffn_share": round(layer.flops.ffn_share, 6),
        },
    }


def _range_json(c: ModelCount) -> dict[str, Any] | None:
    span = c.active_range
    return None if span is None else {"min": span.least, "max": span.most, "why": span.why}


def params_json(result: ParamsResult) -> dict[str, Any]:
    c, spec = result.count, result.count.spec
    doc: dict[str, Any] = {
        "model": spec.name,
        "family": spec.family,
        "d_model": spec.d_model,
        "d_ff": spec.ffn.d_ff,
        "activation": spec.ffn.activation,
        "gated": spec.ffn.gated,
        "ffn_kind": spec.ffn.label,
        "experts": spec.ffn.experts,
        "top_k": spec.ffn.top_k,
        "total_params": c.total,
        "active_params": c.active,
        "active_params_range": _range_json(c),
        "uncounted": list(spec.uncounted),
        "layers": [_layer_json(layer) for layer in c.layers],
        "groups": dict(c.groups),
        "other": _rows_json(c.other_rows),
        "flops_per_token": {
            "seq_len": spec.seq_len,
            "ffn": c.flops_ffn,
            "head": c.head_flops,
            "total": c.flops_total,
            "ffn_share": round(c.flops_ffn_share, 6),
        },
        "memory_bytes": c.weight_bytes(),
    }
    if result.kv is not None:
        doc["kv_cache"] = kv_json(result.kv)
    if result.training is not None or result.budget is not None:
        from ffncli.present.training import fit_json, training_json

        if result.training is not None:
            doc["training"] = training_json(result)
        if result.budget is not None:
            doc["fit"] = fit_json(result)
    if result.file is not None:
        doc.update(
            weights=result.weights_path,
            file_params=result.file.total,
            file_groups=dict(result.file.groups),
            file_ffn_parts=dict(result.file.ffn_parts),
            buffers=[{"name": b.name, "dtype": b.dtype, "shape": list(b.shape)}
                     for b in result.file.buffers],
            matches=result.matches,
            mismatches={g: {"spec": s, "file": f} for g, (s, f) in result.mismatches.items()},
        )
        doc.update(stored_json(result.file))
    return doc


def _layer_title(layer: LayerCount) -> str:
    if layer.kind == "ffn":
        return "FFN (FFN-only spec: no attention, norms or embeddings)"
    return f"{layer.kind} layer (x {layer.count})"


def _ranges(indices: Sequence[int]) -> str:
    """Layer numbers as runs: ``0-2, 5, 7-9``."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


_MIXER_NOTES = {"sliding": "attention over a sliding window of {} tokens",
                "chunked": "attention within chunks of {} tokens",
                "linear": "linear attention (a fixed state, no KV cache)",
                "mamba": "a Mamba mixer (a fixed state, no KV cache)",
                "conv": "a short convolution (a fixed state, no KV cache)",
                "none": "no token mixer"}


def _layer_note(layer: LayerCount) -> str:
    """Which layers are of this kind and how they mix tokens (a per-layer pattern only)."""
    mixer = _MIXER_NOTES.get(layer.mixer, "").format(layer.window)
    runs = f"; each run {layer.repeats} times a token" if layer.repeats > 1 and layer.indices \
        else ""  # looped decoder layers (Dory, HRM-Text), not ALBERT's shared encoder
    return f"layers {_ranges(layer.indices)}" + (f"; {mixer}" if mixer else "") + runs


def print_params(result: ParamsResult) -> None:
    out = console()
    c, spec = result.count, result.count.spec
    _print_header(out, spec)
    for layer in c.layers:
        _print_layer(out, spec, layer)
    if not spec.ffn_only:
        _print_whole(out, c)
        _print_parts(out, c)
    _print_flops(out, c)
    _print_memory(out, c)
    if result.kv is not None:
        print_kv(out, result.kv)
    if result.training is not None or result.budget is not None:
        from ffncli.present.training import print_fit, print_training

        if result.training is not None:
            print_training(out, result)
        if result.budget is not None:
            print_fit(out, result)
    if result.file is not None:
        _print_file(out, result)
        print_stored(out, result.file)


def _print_header(out: Console, spec: ModelSpec) -> None:
    """The spec in a line, and what a multimodal config holds that is not counted."""
    ffn = spec.ffn
    moe = f", {ffn.experts} experts, top-{ffn.top_k}" if ffn.is_moe else ""
    if spec.pattern and not any(k.has_ffn for k in spec.pattern):
        out.print(Text(f"{spec.name}: d_model {spec.d_model}, no FFN (mixer-only layers)"))
    else:
        out.print(Text(f"{spec.name}: d_model {spec.d_model}, d_ff {ffn.d_ff}, "
                       f"{ffn.label}{moe}"))
    if spec.uncounted:
        out.print(Text(f"counted: the language model only; not counted: "
                       f"{', '.join(spec.uncounted)}"))


def _print_layer(out: Console, spec: ModelSpec, layer: LayerCount) -> None:
    """One layer kind: its parts in a table, then its FFN's weights and share."""
    out.print()
    if spec.pattern:
        out.print(Text(_layer_note(layer)))
    table = new_table(_layer_title(layer), ("part", "shape", "params"))
    mixer = {"linear": "linear attention", "mamba": "mamba", "conv": "conv"}.get(
        layer.mixer, "attention")
    for prefix, rows in (("FFN ", layer.ffn_rows), (f"{mixer} ", layer.attention_rows),
                         ("", layer.other_rows)):
        for row in rows:
            table.add_row(Text(f"{prefix}{row.name}"), row.shape, commas(row.params))
    if layer.norm:
        table.add_row("norms", "", commas(layer.norm))
    out.print(table)
    _print_layer_shares(out, layer)


def _print_layer_shares(out: Console, layer: LayerCount) -> None:
    """A layer's FFN weights (and those active per token), total and FFN share, aligned, a
    bar under each share (not for an FFN-only spec: always 100%)."""
    label = f"{layer.kind} layer total:" if layer.kind != "ffn" else "FFN total:"
    moe = layer.ffn_active != layer.ffn
    lines = [("FFN weights per layer:", commas(layer.ffn))]
    if moe:
        lines.append(("active per token:", commas(layer.ffn_active)))
    if layer.ffn_active_least is not None:  # zero experts: a range
        lines.append(("fewest per token:", commas(layer.ffn_active_least)))
    lines += [(label, commas(layer.total)), ("share in the FFN:", pct(layer.ffn_share))]
    shares = {"share in the FFN:": layer.ffn_share}
    if moe:
        lines.append(("active share in the FFN:", pct(layer.ffn_active_share)))
        shares["active share in the FFN:"] = layer.ffn_active_share
    width = max(len(name) for name, _ in lines) + 1
    for name, value in lines:
        out.print(f"{name:<{width}}{value}")
        if name in shares and layer.kind != "ffn":
            share_bar_line(out, width, shares[name])


def _print_whole(out: Console, c: ModelCount) -> None:
    """The whole model: each layer kind times its count, the rows outside the layers, the
    total (and the active parameters of a mixture of experts)."""
    spec = c.spec
    out.print()
    table = new_table("whole model", ("part", "shape", "params"))
    for layer in c.layers:
        table.add_row(f"{layer.count} {layer.kind} layers", f"{layer.count} x "
                      f"{commas(layer.total)}", commas(layer.count * layer.total))
    for row in c.other_rows:
        table.add_row(Text(row.name), row.shape, commas(row.params))
    table.add_row("total" if not spec.uncounted else "total (language model only)", "",
                  commas(c.total))
    if c.active != c.total:
        table.add_row("active per token", "", commas(c.active))
    span = c.active_range
    if span is not None:
        table.add_row("active per token, fewest", "", commas(span.least))
    out.print(table)
    if span is not None:
        out.print(Text(f"active per token is a range, {commas(span.least)} to "
                       f"{commas(span.most)}: {span.why}"))


PARTS = {"embeddings": "embeddings", "attention": "attention", "ffn": "FFN", "norms": "norms",
         "head": "output head", "pooler": "pooler",
         "other": "other (AltUp, bottlenecks, norm gates...)"}


def _print_parts(out: Console, c: ModelCount) -> None:
    """The whole model's parameters by part, each with its share of the total."""
    out.print()
    parts = [(name, c.groups[key]) for key, name in PARTS.items() if c.groups.get(key)]
    rows = [(name, commas(params), pct(params / c.total)) for name, params in parts]
    out.print(bar_table(out, "parameters by part", ("part", "params", "share"), rows,
                         [params / c.total for _, params in parts], track=True))


def _print_flops(out: Console, c: ModelCount) -> None:
    out.print()
    rows: list[tuple[str, ...]] = []
    shares: list[float | None] = []
    for layer in c.layers:
        f = layer.flops
        rows.append((f"{layer.kind}", commas(f.ffn), commas(f.attention_projections),
                     commas(f.attention_scores), commas(f.total), pct(f.ffn_share)))
        shares.append(f.ffn_share)
    if c.head_flops:
        rows.append(("output head", "", "", "", commas(c.head_flops), ""))
        shares.append(None)
    rows.append(("whole model", commas(c.flops_ffn), "", "", commas(c.flops_total),
                 pct(c.flops_ffn_share)))
    shares.append(c.flops_ffn_share)
    out.print(bar_table(out, f"FLOPs per token (2 per multiply-add) at seq_len "
                         f"{c.spec.seq_len}", ("layer", "FFN", "attn proj", "attn scores",
                                               "total", "FFN share"), rows, shares, track=True,
                         optional=("attn proj", "attn scores")))


def _print_memory(out: Console, c: ModelCount) -> None:
    out.print()
    note = " (all experts, not only the active ones)" if c.spec.ffn.is_moe else ""
    table = new_table(f"weight memory{note}", ("dtype", "bytes", "GiB"))
    for dtype, size in c.weight_bytes().items():
        table.add_row(dtype, commas(size), f"{size / 2**30:,.2f}")
    out.print(table)


def _print_file(out: Console, result: ParamsResult) -> None:
    from ffncli.counting.files import GROUPS

    assert result.file is not None
    out.print()
    spec_groups = result.count.groups
    out.print(Text(f"weights: {result.weights_path}"))
    table = new_table("header count vs spec", ("group", "spec", "file", ""))
    for group in GROUPS:
        s, f = spec_groups.get(group, 0), result.file.groups[group]
        if s or f:
            table.add_row(group, commas(s), commas(f), "ok" if s == f else
                          "task head" if result.task_head(group) else "DIFFERS")
        for part, n in result.file.ffn_parts.items() if group == "ffn" else ():
            table.add_row(f"  {part}", "", commas(n), "")
    table.add_row("total", commas(result.count.total), commas(result.file.total),
                  "ok" if result.matches else "DIFFERS")
    out.print(table)
    for name in result.file.unplaced:
        out.print(Text(f"unplaced tensor (counted as other): {name}"))
    for b in result.file.buffers:
        out.print(Text(f"buffer (not a parameter): {b.name} {b.dtype} {list(b.shape)}"))
    out.print("matches the spec" if result.matches else "does NOT match the spec")


def file_only_json(result: FileOnlyResult) -> dict[str, Any]:
    return {
        "weights": result.weights_path,
        "checked_by_config": False,
        "reason": result.reason,
        "file_params": result.file.total,
        "file_groups": dict(result.file.groups),
        "file_ffn_parts": dict(result.file.ffn_parts),
        "unplaced": list(result.file.unplaced),
        "buffers": [{"name": b.name, "dtype": b.dtype, "shape": list(b.shape)}
                    for b in result.file.buffers],
        **stored_json(result.file),
    }


def print_file_only(result: FileOnlyResult) -> None:
    out = console()
    out.print(Text(f"weights: {result.weights_path}"))
    out.print(Text("counted from tensor names only; no config reader checked it "
                   f"({result.reason})"))
    from ffncli.counting.files import GROUPS

    table = new_table("header count by tensor names", ("group", "params"))
    for group in GROUPS:
        if result.file.groups[group]:
            table.add_row(group, commas(result.file.groups[group]))
        for part, n in result.file.ffn_parts.items() if group == "ffn" else ():
            table.add_row(f"  {part}", commas(n))
    table.add_row("total", commas(result.file.total))
    out.print(table)
    for name in result.file.unplaced:
        out.print(Text(f"unplaced tensor (counted as other): {name}"))
    for b in result.file.buffers:
        out.print(Text(f"buffer (not a parameter): {b.name} {b.dtype} {list(b.shape)}"))
    print_stored(out, result.file)


def stored_json(file: FileCount) -> dict[str, Any]:
    """A quantised or GGUF file's storage: the scheme, and per format its parameters and
    bytes (nothing for a plain file)."""
    from ffncli.counting.files import QuantisedCount

    if not isinstance(file, QuantisedCount):
        return {}
    return {"quantisation": file.scheme, "stored_bytes": file.stored_bytes,
            "stored": [{"kind": s.kind, "params": s.params, "bytes": s.bytes}
                       for s in file.stored]}


def print_stored(out: Console, file: FileCount) -> None:
    from ffncli.counting.files import QuantisedCount

    if not isinstance(file, QuantisedCount):
        return
    out.print()
    table = new_table(f"stored as ({file.scheme})", ("format", "params", "bytes", "bits/param"))
    for s in file.stored:
        table.add_row(Text(s.kind), commas(s.params), commas(s.bytes),
                      f"{8 * s.bytes / s.params:.2f}" if s.params else "")
    table.add_row("total", commas(file.total), commas(file.stored_bytes),
                  f"{8 * file.stored_bytes / file.total:.2f}" if file.total else "")
    out.print(table)


# ---------------------------------------------------------------------------------------------
# presets


def presets_json(rows: Sequence[PresetSummary]) -> dict[str, Any]:
    return {"presets": [dataclasses.asdict(r) for r in rows]}


def print_presets(rows: Sequence[PresetSummary]) -> None:
    table = new_table("built-in presets", ("name", "family", "d_model", "d_ff", "activation",
                                        "layers", "total"), optional=("family", "activation"))
    for r in rows:
        layers = str(r.layers) if r.layers else "FFN only"
        table.add_row(Text(r.name), Text(r.family), str(r.d_model), str(r.d_ff),
                      Text(r.activation), layers, commas(r.total_params))
    console().print(table)
