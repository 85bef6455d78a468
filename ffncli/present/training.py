"""``params --train`` and ``--fit``: the memory of a training plan (weights, gradients, master
weights, optimizer states, activations; the FFN's share of each; LoRA's adapters) and what fits
in a budget, as tables or JSON. Imported only when a plan or a budget is given."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ffncli.counting.results import ParamsResult
from ffncli.counting.training import Share, Training, adapters
from ffncli.present.console import Text
from ffncli.present.tables import commas, new_table, pct

if TYPE_CHECKING:
    from rich.console import Console

    from ffncli.counting.fit import FitCell

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
