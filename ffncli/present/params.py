"""``params`` and ``presets``: where the parameters live, layer by layer and part by part, FLOPs
per token, weight memory and the KV cache; a checkpoint's count beside the spec's; as tables
or JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ffncli.counting.files import GROUPS, FileCount, QuantisedCount
from ffncli.counting.fit import FitCell
from ffncli.counting.model import KvCache, LayerCount, ModelCount, Row
from ffncli.counting.results import FileOnlyResult, ParamsResult, PresetSummary
from ffncli.counting.training import Share, Training, adapters
from ffncli.present.console import (
    Text,
    bar_table,
    commas,
    console,
    emit_json,
    new_table,
    pct,
    share_bar_line,
)
from ffncli.present.console import table_format as table_format_of

if TYPE_CHECKING:  # the result types: their modules import NumPy, which params never needs
    from rich.console import Console

# One function a command: its result as one JSON document, or as tables for people.


def emit_params(result: ParamsResult | FileOnlyResult, as_json: bool,
                table_format: str = "rich") -> None:
    """``table_format``: rich, markdown or csv (``--format``)."""
    with table_format_of(table_format):
        if isinstance(result, FileOnlyResult):
            emit_json(file_only_json(result)) if as_json else print_file_only(result)
        else:
            emit_json(params_json(result)) if as_json else print_params(result)


def emit_presets(rows: Sequence[PresetSummary], as_json: bool) -> None:
    emit_json(presets_json(rows)) if as_json else print_presets(rows)


# ---------------------------------------------------------------------------------------------
# params


def _rows_json(rows: Iterable[Row]) -> list[dict[str, Any]]:
    return [{"name": r.name, "shape": r.shape, "params": r.params} for r in rows]


def _layer_json(layer: LayerCount) -> dict[str, Any]:
    return {
        "kind": layer.kind,
        "count": layer.count,
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
        "flops_per_token": {
            "ffn": layer.flops.ffn,
            "attention_projections": layer.flops.attention_projections,
            "attention_scores": layer.flops.attention_scores,
            "total": layer.flops.total,
            "ffn_share": round(layer.flops.ffn_share, 6),
        },
    }


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
    if result.training is not None:
        doc["training"] = training_json(result)
    if result.budget is not None:
        doc["fit"] = fit_json(result)
    if result.file is not None:
        doc.update(
            weights=result.weights_path,
            file_params=result.file.total,
            file_groups=dict(result.file.groups),
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


def print_params(result: ParamsResult) -> None:
    out = console()
    c, spec = result.count, result.count.spec
    ffn = spec.ffn
    moe = f", {ffn.experts} experts, top-{ffn.top_k}" if ffn.is_moe else ""
    out.print(Text(f"{spec.name}: d_model {spec.d_model}, d_ff {ffn.d_ff}, {ffn.label}{moe}"))
    for layer in c.layers:
        out.print()
        table = new_table(_layer_title(layer), ("part", "shape", "params"))
        for row in layer.ffn_rows:
            table.add_row(Text(f"FFN {row.name}"), row.shape, commas(row.params))
        for row in layer.attention_rows:
            table.add_row(Text(f"attention {row.name}"), row.shape, commas(row.params))
        if layer.norm:
            table.add_row("norms", "", commas(layer.norm))
        out.print(table)
        label = f"{layer.kind} layer total:" if layer.kind != "ffn" else "FFN total:"
        lines = [("FFN weights per layer:", commas(layer.ffn))]
        if layer.ffn_active != layer.ffn:
            lines.append(("active per token:", commas(layer.ffn_active)))
        lines += [(label, commas(layer.total)), ("share in the FFN:", pct(layer.ffn_share))]
        shares = {"share in the FFN:": layer.ffn_share}
        if layer.ffn_active != layer.ffn:
            lines.append(("active share in the FFN:", pct(layer.ffn_active_share)))
            shares["active share in the FFN:"] = layer.ffn_active_share
        width = max(len(name) for name, _ in lines) + 1
        for name, value in lines:
            out.print(f"{name:<{width}}{value}")
            if name in shares and layer.kind != "ffn":  # an FFN-only spec: always 100%
                share_bar_line(out, width, shares[name])
    if not spec.ffn_only:
        out.print()
        table = new_table("whole model", ("part", "shape", "params"))
        for layer in c.layers:
            table.add_row(f"{layer.count} {layer.kind} layers", f"{layer.count} x "
                          f"{commas(layer.total)}", commas(layer.count * layer.total))
        for row in c.other_rows:
            table.add_row(Text(row.name), row.shape, commas(row.params))
        table.add_row("total", "", commas(c.total))
        if c.active != c.total:
            table.add_row("active per token", "", commas(c.active))
        out.print(table)
        _print_parts(out, c)
    _print_flops(out, c)
    _print_memory(out, c)
    if result.kv is not None:
        print_kv(out, result.kv)
    if result.training is not None:
        print_training(out, result)
    if result.budget is not None:
        print_fit(out, result)
    if result.file is not None:
        _print_file(out, result)
        print_stored(out, result.file)


PARTS = {"embeddings": "embeddings", "attention": "attention", "ffn": "FFN", "norms": "norms",
         "head": "output head", "pooler": "pooler"}


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
    table.add_row("total", commas(result.count.total), commas(result.file.total),
                  "ok" if result.matches else "DIFFERS")
    out.print(table)
    for name in result.file.unplaced:
        out.print(Text(f"unplaced tensor (counted as other): {name}"))
    for b in result.file.buffers:
        out.print(Text(f"buffer (not a parameter): {b.name} {b.dtype} {list(b.shape)}"))
    out.print("matches the spec" if result.matches else "does NOT match the spec")


def kv_json(kv: KvCache) -> dict[str, Any]:
    return {
        "kind": kv.kind,
        "layers": kv.layers,
        "elements_per_token": kv.elements_per_token,
        "bytes_per_token": kv.bytes_per_token(),
        "seq_len": kv.seq_len,
        "batch": kv.batch,
        "bytes": kv.bytes(),
    }


_KV_KINDS = {"mha": "one K and V per head", "gqa": "grouped-query: K and V per kv head",
             "mqa": "multi-query: one K and V head", "mla": "latent: kv_lora_rank + rope key"}


def print_kv(out: Console, kv: KvCache) -> None:
    out.print()
    if kv.kind == "none":
        out.print("KV cache: none (no decoder layers)")
        return
    table = new_table(f"KV cache ({_KV_KINDS[kv.kind]}; {kv.layers} layers, "
                   f"{kv.elements_per_token:,} values per token)",
                   ("cache dtype", "bytes per token", f"x {kv.seq_len:,} x {kv.batch:,}", "GiB"))
    total = kv.bytes()
    for dtype, size in kv.bytes_per_token().items():
        table.add_row(dtype, commas(size), commas(total[dtype]), f"{total[dtype] / 2**30:,.2f}")
    out.print(table)


# ---------------------------------------------------------------------------------------------
# --train and --fit

_FIGURES = ("weights", "gradients", "master", "optimizer")
_LABELS = {"weights": "weights", "gradients": "gradients", "master": "fp32 master weights",
           "optimizer": "optimizer states"}


def _figures(t: Training) -> dict[str, Share]:
    """The plan's bytes by kind, the activations kept as ``--recompute`` says, the total."""
    return {**{name: getattr(t, name) for name in _FIGURES}, "activations": t.activations_used,
            "total": t.total}


def _plan_line(t: Training) -> str:
    p = t.plan
    what = (f"{p.mode} (rank {p.lora_rank} on {','.join(p.lora_targets)})" if p.lora
            else "full")
    attention = ", flash attention" if p.flash_attention else ""
    recompute = ", full recomputation" if p.recompute else ""
    dropout = "" if p.dropout else ", no dropout"
    return (f"training: {what}, {p.optimizer}, {p.precision}, seq_len {p.seq_len:,} x batch "
            f"{p.batch:,}{attention}{recompute}{dropout}")


def training_json(result: ParamsResult) -> dict[str, Any]:
    t = result.training
    assert t is not None
    p, figures = t.plan, _figures(t)
    doc: dict[str, Any] = {
        "mode": p.mode, "optimizer": p.optimizer, "precision": p.precision,
        "seq_len": p.seq_len, "batch": p.batch, "flash_attention": p.flash_attention,
        "recompute": p.recompute, "dropout": p.dropout,
        "trainable_params": t.trainable_params.total,
        "lora_params": t.lora_params.total,
        **{f"{name}_bytes": share.total for name, share in figures.items()},
        "activations_stored_bytes": t.activations.stored.total,
        "activations_recomputed_bytes": t.activations.recomputed.total,
        "activations_per_layer": [
            {"kind": kind, "layers": n, "bytes": one.total, "ffn_bytes": one.ffn,
             "bytes_per_token": one.total // (p.seq_len * p.batch)}
            for kind, n, one in t.activations.per_layer],
        "ffn": {"trainable_params": t.trainable_params.ffn, "lora_params": t.lora_params.ffn,
                **{f"{name}_bytes": share.ffn for name, share in figures.items()}},
        "ffn_share": {name: round(share.ffn_share, 6) for name, share in
                      (("trainable_params", t.trainable_params), *figures.items())},
    }
    if p.lora:
        doc["lora_rank"], doc["lora_targets"] = p.lora_rank, list(p.lora_targets)
        doc["lora"] = [{"target": a.matrix.target, "layer_kind": a.matrix.kind,
                        "part": a.matrix.part, "shape": list(a.matrix.shape),
                        "matrices": a.matrix.count, "params_each": a.params,
                        "params": a.params * a.matrix.count}
                       for a in adapters(result.count.spec, p)]
    return doc


def _gib(size: int) -> str:
    return f"{size / 2**30:,.2f}"


def print_training(out: Console, result: ParamsResult) -> None:
    t = result.training
    assert t is not None
    p = t.plan
    out.print()
    out.print(Text(_plan_line(t)))
    out.print(f"trainable parameters: {t.trainable_params.total:,} "
              f"({pct(t.trainable_params.total / result.count.total)} of "
              f"{result.count.total:,}; {pct(t.trainable_params.ffn_share)} in the FFN)")
    if p.lora:
        _print_lora(out, result)
    figures = _figures(t)
    rows = [(_LABELS.get(name, name), commas(share.total), _gib(share.total),
             commas(share.ffn), pct(share.ffn_share)) for name, share in figures.items()
            if name != "total"]
    rows[-1] = ((f"activations ({'recomputed' if p.recompute else 'kept'}; estimate)",
                 *rows[-1][1:]))
    total = figures["total"]
    rows.append(("total", commas(total.total), _gib(total.total), commas(total.ffn),
                 pct(total.ffn_share)))
    table = new_table("training memory", ("part", "bytes", "GiB", "FFN's bytes", "FFN share"),
                      optional=("FFN's bytes",))
    for row in rows:
        table.add_row(*row)
    out.print(table)
    _print_activations(out, t)


def _print_lora(out: Console, result: ParamsResult) -> None:
    t = result.training
    assert t is not None
    lora = adapters(result.count.spec, t.plan)
    table = new_table(f"LoRA adapters (rank {t.plan.lora_rank}: r x (n_in + n_out) a matrix)",
                      ("target", "layers", "matrix", "matrices", "params each", "params"))
    for a in lora:
        n_out, n_in = a.matrix.shape
        table.add_row(Text(a.matrix.target), Text(a.matrix.kind or "model"),
                      f"{n_in} x {n_out}", commas(a.matrix.count), commas(a.params),
                      commas(a.params * a.matrix.count))
    ffn = t.lora_params.ffn
    for part, params in (("in attention and elsewhere", t.lora_params.total - ffn),
                         ("in the FFN", ffn)):
        table.add_row(part, "", "", "", "", commas(params))
    table.add_row("total", "", "", "", "", commas(t.lora_params.total))
    out.print(table)


def _print_activations(out: Console, t: Training) -> None:
    p, a = t.plan, t.activations
    tokens = p.seq_len * p.batch
    out.print(Text("activations: an estimate (Korthikanti et al. 2022, extended to gated FFNs "
                   "and grouped-query attention; docs/commands/params.md)"))
    table = new_table("activations kept for the backward pass",
                      ("layer", "layers", "bytes a layer", "a token", "FFN share"))
    for kind, n, one in a.per_layer:
        table.add_row(kind, commas(n), commas(one.total), commas(one.total // tokens),
                      pct(one.ffn_share))
    table.add_row("outside the layers (head, logits)", "", commas(a.outside), "", "")
    table.add_row("kept, all layers", "", commas(a.stored.total), "", pct(a.stored.ffn_share))
    table.add_row("with full recomputation", "", commas(a.recomputed.total), "", "")
    out.print(table)


def fit_json(result: ParamsResult) -> dict[str, Any]:
    budget, kv = result.budget, result.kv
    assert budget is not None and kv is not None

    def by_dtype(field: str) -> dict[str, dict[str, int | None]]:
        grid: dict[str, dict[str, int | None]] = {}
        for cell in result.fit:
            grid.setdefault(cell.weights, {})[cell.cache] = getattr(cell, field)
        return grid

    doc: dict[str, Any] = {
        "budget": budget.text, "budget_bytes": budget.bytes, "devices": budget.devices,
        "reserve_bytes": budget.reserve, "usable_bytes": budget.usable,
        "seq_len": kv.seq_len, "batch": kv.batch, "context_limit": result.context,
        "weight_bytes": {cell.weights: cell.weight_bytes for cell in result.fit},
        "max_seq_len": by_dtype("max_seq_len"), "max_batch": by_dtype("max_batch"),
    }
    if result.train_fit is not None:
        doc["training"] = {"needed_bytes": result.train_fit.needed,
                           "fits": result.train_fit.fits,
                           "margin_bytes": result.train_fit.margin}
    return doc


def _most(value: int | None) -> str:
    return "any (no KV cache)" if value is None else commas(value)


def print_fit(out: Console, result: ParamsResult) -> None:
    budget, kv = result.budget, result.kv
    assert budget is not None and kv is not None
    out.print()
    reserve = f", {budget.reserve:,} held in reserve" if budget.reserve else ""
    out.print(Text(f"fit in {budget.text}: {budget.bytes:,} bytes{reserve}; a memory bound "
                   f"only (the model's context limit, {result.context:,} positions, is not "
                   "applied)" if result.context else f"fit in {budget.text}: "
                   f"{budget.bytes:,} bytes{reserve}"))
    caches = list(dict.fromkeys(cell.cache for cell in result.fit))
    for field, title in (("max_seq_len", f"longest sequence at batch {kv.batch:,}"),
                         ("max_batch", f"largest batch at seq_len {kv.seq_len:,}")):
        table = new_table(f"inference, weights + KV cache: {title}",
                          ("weights", "weight GiB", *(f"cache {c}" for c in caches)))
        for weights in dict.fromkeys(cell.weights for cell in result.fit):
            cells: list[FitCell] = [c for c in result.fit if c.weights == weights]
            table.add_row(weights, _gib(cells[0].weight_bytes),
                          *(_most(getattr(c, field)) for c in cells))
        out.print(table)
    if result.train_fit is not None:
        f = result.train_fit
        verdict = (f"fits, {f.margin:,} bytes ({_gib(f.margin)} GiB) to spare" if f.fits else
                   f"does NOT fit: {-f.margin:,} bytes ({_gib(-f.margin)} GiB) short")
        out.print(Text(f"training plan: needs {f.needed:,} bytes ({_gib(f.needed)} GiB) of "
                       f"{f.usable:,} usable: {verdict}"))


def file_only_json(result: FileOnlyResult) -> dict[str, Any]:
    return {
        "weights": result.weights_path,
        "checked_by_config": False,
        "reason": result.reason,
        "file_params": result.file.total,
        "file_groups": dict(result.file.groups),
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
    table = new_table("header count by tensor names", ("group", "params"))
    for group in GROUPS:
        if result.file.groups[group]:
            table.add_row(group, commas(result.file.groups[group]))
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
    if not isinstance(file, QuantisedCount):
        return {}
    return {"quantisation": file.scheme, "stored_bytes": file.stored_bytes,
            "stored": [{"kind": s.kind, "params": s.params, "bytes": s.bytes}
                       for s in file.stored]}


def print_stored(out: Console, file: FileCount) -> None:
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
