"""Rich tables for people and JSON documents for programs, both from the same result objects.

JSON goes to stdout with ``print`` (never through Rich, which would wrap it). Rich never
parses user text as markup: every user string is passed as ``Text``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.checkpoint import GROUPS, FileCount
from ffncli.counting import (
    FileOnlyResult,
    KvCache,
    LayerCount,
    ModelCount,
    ParamsResult,
    PresetSummary,
    Row,
)
from ffncli.errors import shown
from ffncli.quantised import QuantisedCount

if TYPE_CHECKING:  # the result types: their modules import NumPy, which params never needs
    from xml.etree.ElementTree import Element

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text as RichText

    from ffncli.capture import CaptureResult, SweepResult
    from ffncli.checks import CheckReport
    from ffncli.errors import ImplError
    from ffncli.runner import RunResult
    from ffncli.sparsity import SparsityResult

# Rich is imported on first use: `--json` output never needs it, and it costs ~50 ms.


def Text(text: str) -> RichText:  # noqa: N802 - stands in for rich.text.Text
    from rich.text import Text as RichText

    return RichText(text)


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output has no terminal width; a wide fixed width keeps numbers whole.
    width = None if stream.isatty() or "COLUMNS" in os.environ else 160
    return Console(file=stream, highlight=False, markup=False, emoji=False, width=width)


def emit_json(doc: dict[str, Any]) -> None:
    """One JSON document on stdout. NaN and infinity in an output (``--allow-nonfinite``, or
    an FFN that overflowed) are written as Python's json module writes them: ``NaN``,
    ``Infinity``, which Python and JavaScript read but strict JSON parsers refuse."""
    print(json.dumps(doc, indent=2))


# One function a command: its result as one JSON document, or as tables for people.


def emit_params(result: ParamsResult | FileOnlyResult, as_json: bool) -> None:
    if isinstance(result, FileOnlyResult):
        emit_json(file_only_json(result)) if as_json else print_file_only(result)
    else:
        emit_json(params_json(result)) if as_json else print_params(result)


def emit_presets(rows: Sequence[PresetSummary], as_json: bool) -> None:
    emit_json(presets_json(rows)) if as_json else print_presets(rows)


def emit_run(result: RunResult, as_json: bool, precision: int) -> None:
    emit_json(run_json(result)) if as_json else print_run(result, precision)


def emit_check(report: CheckReport, as_json: bool) -> None:
    emit_json(check_json(report)) if as_json else print_check(report)


def emit_stats(result: SparsityResult, as_json: bool) -> None:
    emit_json(stats_json(result)) if as_json else print_stats(result)


def emit_sweep(result: SweepResult, as_json: bool) -> None:
    doc = sweep_json(result)
    if as_json:
        emit_json(doc)
        return
    print_sweep(doc)
    if len(result.layers) == 1:  # one layer: its full statistics too
        print_stats(result.layers[0].stats)


def emit_capture(result: CaptureResult, as_json: bool) -> None:
    emit_json(capture_json(result)) if as_json else print_capture(result)


@contextmanager
def progress(total: int, as_json: bool) -> Iterator[Callable[[int], None] | None]:
    """A progress callback drawing a bar on stderr for long work on a terminal, else None."""
    if as_json or not sys.stderr.isatty() or total < 200_000:
        yield None
        return
    from rich.progress import Progress

    with Progress(console=console(stderr=True), transient=True) as bar:
        task = bar.add_task("tokens", total=total)
        yield lambda done: bar.update(task, completed=done)


def _n(value: int) -> str:
    return f"{value:,}"


def _pct(share: float) -> str:
    return f"{share:.1%}"


def _table(title: str, columns: Iterable[str]) -> Table:
    from rich.table import Table

    table = Table(title=Text(title), title_justify="left", show_edge=False, pad_edge=False,
                  min_width=len(title))
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    return table


# Bars drawn with block characters, eighths of a cell for the end: they scale with the
# console (shorter on a narrow terminal, left out when fewer than BAR_MIN cells are free, so a
# table never wraps), and take a colour only where Rich allows one (not under NO_COLOR).

BAR_MAX = 40  # cells of a full bar
BAR_MIN = 8  # fewer cells than this say nothing: no bar
BAR_STYLE = "cyan"
_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(share: float, width: int, track: bool = False) -> str:
    """``share`` (0 to 1, clamped) of ``width`` cells in full blocks and one partial block;
    with ``track`` the rest of the width in light shade, so that the whole reads as 100%."""
    eighths = round(min(max(share, 0.0), 1.0) * width * 8)
    full, rest = divmod(eighths, 8)
    drawn = "█" * full + (_EIGHTHS[rest] if rest else "")
    return drawn + "░" * (width - len(drawn)) if track else drawn


def _bar_text(share: float | None, width: int, track: bool) -> RichText:
    from rich.text import Text as RichText

    return RichText("" if share is None else bar(share, width, track), style=BAR_STYLE)


def _bar_room(out: Console, table: Table) -> int:
    """Cells free for a bar column beside ``table`` on this console (its natural width, not
    the title's, plus the column's separator): 0 when fewer than BAR_MIN."""
    min_width, table.min_width = table.min_width, None
    used = out.measure(table).maximum
    table.min_width = min_width
    room = min(BAR_MAX, out.width - used - 3)
    return room if room >= BAR_MIN else 0


def _bar_table(out: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
               shares: Sequence[float | None], *, after: int | None = None,
               track: bool = False, heading: str = "") -> Table:
    """A table of ``rows`` with a bar column of ``shares`` after column ``after`` (default
    the last), as wide as the console leaves room for; without it when there is none."""
    table = _table(title, columns)
    for row in rows:
        table.add_row(*row)
    width = _bar_room(out, table)
    if not width:
        return table
    at = len(columns) if after is None else after + 1
    table = _table(title, [*columns[:at], heading, *columns[at:]])
    table.columns[at].justify = "left"
    for row, share in zip(rows, shares, strict=True):
        table.add_row(*row[:at], _bar_text(share, width, track), *row[at:])
    return table


def _share_bar_line(out: Console, indent: int, share: float) -> None:
    """A share printed on the line above, drawn under it with its 100% track."""
    width = min(BAR_MAX, out.width - indent)
    if width >= BAR_MIN:
        from rich.text import Text as RichText

        line = RichText(" " * indent)
        line.append(bar(share, width, track=True), style=BAR_STYLE)
        out.print(line)


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
        table = _table(_layer_title(layer), ("part", "shape", "params"))
        for row in layer.ffn_rows:
            table.add_row(Text(f"FFN {row.name}"), row.shape, _n(row.params))
        for row in layer.attention_rows:
            table.add_row(Text(f"attention {row.name}"), row.shape, _n(row.params))
        if layer.norm:
            table.add_row("norms", "", _n(layer.norm))
        out.print(table)
        label = f"{layer.kind} layer total:" if layer.kind != "ffn" else "FFN total:"
        lines = [("FFN weights per layer:", _n(layer.ffn))]
        if layer.ffn_active != layer.ffn:
            lines.append(("active per token:", _n(layer.ffn_active)))
        lines += [(label, _n(layer.total)), ("share in the FFN:", _pct(layer.ffn_share))]
        shares = {"share in the FFN:": layer.ffn_share}
        if layer.ffn_active != layer.ffn:
            lines.append(("active share in the FFN:", _pct(layer.ffn_active_share)))
            shares["active share in the FFN:"] = layer.ffn_active_share
        width = max(len(name) for name, _ in lines) + 1
        for name, value in lines:
            out.print(f"{name:<{width}}{value}")
            if name in shares and layer.kind != "ffn":  # an FFN-only spec: always 100%
                _share_bar_line(out, width, shares[name])
    if not spec.ffn_only:
        out.print()
        table = _table("whole model", ("part", "shape", "params"))
        for layer in c.layers:
            table.add_row(f"{layer.count} {layer.kind} layers", f"{layer.count} x "
                          f"{_n(layer.total)}", _n(layer.count * layer.total))
        for row in c.other_rows:
            table.add_row(Text(row.name), row.shape, _n(row.params))
        table.add_row("total", "", _n(c.total))
        if c.active != c.total:
            table.add_row("active per token", "", _n(c.active))
        out.print(table)
        _print_parts(out, c)
    _print_flops(out, c)
    _print_memory(out, c)
    if result.kv is not None:
        print_kv(out, result.kv)
    if result.file is not None:
        _print_file(out, result)
        print_stored(out, result.file)


PARTS = {"embeddings": "embeddings", "attention": "attention", "ffn": "FFN", "norms": "norms",
         "head": "output head", "pooler": "pooler"}


def _print_parts(out: Console, c: ModelCount) -> None:
    """The whole model's parameters by part, each with its share of the total."""
    out.print()
    parts = [(name, c.groups[key]) for key, name in PARTS.items() if c.groups.get(key)]
    rows = [(name, _n(params), _pct(params / c.total)) for name, params in parts]
    out.print(_bar_table(out, "parameters by part", ("part", "params", "share"), rows,
                         [params / c.total for _, params in parts], track=True))


def _print_flops(out: Console, c: ModelCount) -> None:
    out.print()
    rows: list[tuple[str, ...]] = []
    shares: list[float | None] = []
    for layer in c.layers:
        f = layer.flops
        rows.append((f"{layer.kind}", _n(f.ffn), _n(f.attention_projections),
                     _n(f.attention_scores), _n(f.total), _pct(f.ffn_share)))
        shares.append(f.ffn_share)
    if c.head_flops:
        rows.append(("output head", "", "", "", _n(c.head_flops), ""))
        shares.append(None)
    rows.append(("whole model", _n(c.flops_ffn), "", "", _n(c.flops_total),
                 _pct(c.flops_ffn_share)))
    shares.append(c.flops_ffn_share)
    out.print(_bar_table(out, f"FLOPs per token (2 per multiply-add) at seq_len "
                         f"{c.spec.seq_len}", ("layer", "FFN", "attn proj", "attn scores",
                                               "total", "FFN share"), rows, shares, track=True))


def _print_memory(out: Console, c: ModelCount) -> None:
    out.print()
    note = " (all experts, not only the active ones)" if c.spec.ffn.is_moe else ""
    table = _table(f"weight memory{note}", ("dtype", "bytes", "GiB"))
    for dtype, size in c.weight_bytes().items():
        table.add_row(dtype, _n(size), f"{size / 2**30:,.2f}")
    out.print(table)


def _print_file(out: Console, result: ParamsResult) -> None:
    assert result.file is not None
    out.print()
    spec_groups = result.count.groups
    out.print(Text(f"weights: {result.weights_path}"))
    table = _table("header count vs spec", ("group", "spec", "file", ""))
    for group in GROUPS:
        s, f = spec_groups.get(group, 0), result.file.groups[group]
        if s or f:
            table.add_row(group, _n(s), _n(f), "ok" if s == f else
                          "task head" if result.task_head(group) else "DIFFERS")
    table.add_row("total", _n(result.count.total), _n(result.file.total),
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
    table = _table(f"KV cache ({_KV_KINDS[kv.kind]}; {kv.layers} layers, "
                   f"{kv.elements_per_token:,} values per token)",
                   ("cache dtype", "bytes per token", f"x {kv.seq_len:,} x {kv.batch:,}", "GiB"))
    total = kv.bytes()
    for dtype, size in kv.bytes_per_token().items():
        table.add_row(dtype, _n(size), _n(total[dtype]), f"{total[dtype] / 2**30:,.2f}")
    out.print(table)


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
    table = _table("header count by tensor names", ("group", "params"))
    for group in GROUPS:
        if result.file.groups[group]:
            table.add_row(group, _n(result.file.groups[group]))
    table.add_row("total", _n(result.file.total))
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
    table = _table(f"stored as ({file.scheme})", ("format", "params", "bytes", "bits/param"))
    for s in file.stored:
        table.add_row(Text(s.kind), _n(s.params), _n(s.bytes),
                      f"{8 * s.bytes / s.params:.2f}" if s.params else "")
    table.add_row("total", _n(file.total), _n(file.stored_bytes),
                  f"{8 * file.stored_bytes / file.total:.2f}" if file.total else "")
    out.print(table)


# ---------------------------------------------------------------------------------------------
# presets


def presets_json(rows: Sequence[PresetSummary]) -> dict[str, Any]:
    return {"presets": [dataclasses.asdict(r) for r in rows]}


def print_presets(rows: Sequence[PresetSummary]) -> None:
    table = _table("built-in presets", ("name", "family", "d_model", "d_ff", "activation",
                                        "layers", "total"))
    for r in rows:
        layers = str(r.layers) if r.layers else "FFN only"
        table.add_row(Text(r.name), Text(r.family), str(r.d_model), str(r.d_ff),
                      Text(r.activation), layers, _n(r.total_params))
    console().print(table)


# ---------------------------------------------------------------------------------------------
# run


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + (",)" if len(shape) == 1 else ")")


def run_json(result: RunResult, max_tokens: int = 1024) -> dict[str, Any]:
    hidden = result.input_shape[:-1] + (result.d_ff,)
    small = result.n_tokens <= max_tokens
    return {
        "input_shape": list(result.input_shape),
        "hidden_shape": list(hidden),
        "output_shape": list(result.output_shape),
        "dtype": result.dtype,
        "activation": result.activation,
        "weights": result.weights,
        "residual": result.residual,
        "output": result.head.reshape(result.output_shape).tolist() if small else None,
        "first_rows": result.head[:8].tolist(),
        "out": result.out_path,
        "checks": result.checks,
        "inactive_per_token": result.inactive_per_token,
    }


def print_run(result: RunResult, precision: int = 4) -> None:
    out = console()
    hidden = result.input_shape[:-1] + (result.d_ff,)
    out.print(f"shape: {_shape(result.input_shape)} -> {_shape(hidden)} -> "
              f"{_shape(result.output_shape)}")
    out.print(Text(f"FFN: {result.activation}{' + residual' if result.residual else ''}, "
                   f"{result.dtype}, weights {result.weights}"))
    shown = result.head.shape[0]
    title = "FFN output" if shown == result.n_tokens else (
        f"FFN output (first {shown} of {result.n_tokens:,} tokens)" if result.computed ==
        result.n_tokens else f"FFN output (first {shown} of {result.n_tokens:,} tokens; only "
        f"the first {result.computed:,} computed: add --out FILE.npy for all)")
    table = _table(title, ["token"] + [str(j) for j in range(min(result.head.shape[1], 12))])
    for i, row in enumerate(result.head):
        cells = [f"{v:.{precision}f}" for v in row[:12]]
        table.add_row(str(i), *cells)
    out.print(table)
    if result.head.shape[1] > 12:
        out.print(f"(first 12 of {result.head.shape[1]} columns)")
    for key, label in (("same_as_one_position_at_a_time", "same as one position at a time"),
                       ("swapping_positions_only_swaps_the_outputs",
                        "swapping positions only swaps the outputs")):
        if key in result.checks:
            verdict = result.checks[key]
            out.print(f"{label}: " + ("not checked (the output overflowed to NaN or infinity)"
                                      if verdict is None else str(verdict)))
    if result.inactive_per_token is not None:
        counts = " ".join(str(c) for c in result.inactive_per_token[:32])
        more = " ..." if len(result.inactive_per_token) > 32 else ""
        out.print(f"hidden units switched off per token (pre-activation <= 0): [{counts}{more}]")
    if result.out_path:
        out.print(Text(f"wrote {result.out_path} {_shape(result.output_shape)} {result.dtype}"))


# ---------------------------------------------------------------------------------------------
# permute-check


def check_json(report: CheckReport) -> dict[str, Any]:
    return {
        "target": report.target,
        "passed": report.passed,
        "tokens": report.tokens,
        "input_shape": list(report.input_shape),
        "d_model": report.d_model,
        "dtype": report.dtype,
        "properties": [{
            "name": p.name, "passed": p.passed, "trials": p.trials, "max_abs": p.max_abs,
            "max_rel": p.max_rel, "rtol": p.rtol, "atol": p.atol, "worst_token": p.worst_token,
            "bit_identical": p.bit_identical, "counterexample": p.counterexample,
        } for p in report.properties],
    }


def print_check(report: CheckReport) -> None:
    out = console()
    out.print(Text(f"permute-check {report.target}: {report.tokens:,} tokens of d_model "
                   f"{report.d_model}, {report.dtype}"))
    table = _table("properties", ("property", "result", "trials", "max abs", "max rel",
                                  "worst token", "bit-identical"))
    for p in report.properties:
        table.add_row(p.name, "PASS" if p.passed else "FAIL", str(p.trials), f"{p.max_abs:.3g}",
                      f"{p.max_rel:.3g}", str(p.worst_token) if p.max_abs else "-",
                      "yes" if p.bit_identical else "no")
    out.print(table)
    first = report.properties[0]
    out.print(f"tolerance: |got - expected| <= atol + rtol * |expected|, rtol {first.rtol:g}, "
              f"atol {first.atol:g}")
    for p in report.properties:
        if p.counterexample:
            out.print(Text(f"{p.name} FAILED: {p.counterexample}"))
    out.print("position-wise: every property holds" if report.passed else
              "NOT position-wise: see the failures above")


# ---------------------------------------------------------------------------------------------
# relu-stats


def stats_json(r: SparsityResult) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "d_ff": r.d_ff,
        "d_model": r.d_model,
        "experts": r.experts,
        "top_k": r.top_k,
        "activation": r.activation,
        "definition": r.rule.description,
        "threshold": r.rule.threshold,
        "tokens": r.tokens,
        "inactive_per_token": r.inactive_per_token,
        "mean_inactive_fraction": r.mean_inactive_fraction,
        "dead_units": r.dead_units,
        "always_active_units": r.always_active_units,
        "w2_macs_per_token": r.w2_macs_per_token,
        "w2_macs_saved_per_token": r.w2_macs_saved_per_token,
    }
    if r.experts == 1:
        s = r.stats[0]
        doc.update(activity_histogram=s.activity_histogram(),
                   aggregated_sparsity=s.aggregated_sparsity(),
                   hot_unit_coverage=s.hot_unit_coverage(),
                   overlap=s.overlap_summary())
    else:
        doc["per_expert"] = [{
            "expert": e, "tokens": s.tokens, "mean_inactive_fraction": s.mean_inactive_fraction,
            "dead_units": len(s.dead_units), "always_active_units": len(s.always_active_units),
            "hot_unit_coverage": s.hot_unit_coverage(),
        } for e, s in enumerate(r.stats)]
    if r.pairwise_overlap is not None:
        doc["pairwise_overlap"] = r.pairwise_overlap
    return doc


def print_stats(r: SparsityResult) -> None:
    out = console()
    moe = f", {r.experts} experts, top-{r.top_k} (units numbered expert * d_ff + unit)" \
        if r.experts > 1 else ""
    out.print(Text(f"relu-stats: {r.tokens:,} tokens, d_ff {r.d_ff}, {r.activation}{moe}"))
    out.print(Text(r.rule.description))
    slots = r.d_ff * r.top_k
    shown = r.inactive_per_token[:32]
    out.print(f"inactive hidden units per token (of {slots}): [{' '.join(map(str, shown))}"
              f"{' ...' if len(r.inactive_per_token) > 32 else ''}]")
    out.print(f"mean inactive fraction: {r.mean_inactive_fraction:.1%}")
    out.print(f"dead on these {r.tokens:,} tokens (never active): {len(r.dead_units)} units"
              + (f" {r.dead_units[:20]}" if r.dead_units else ""))
    out.print(f"active for every token: {len(r.always_active_units)} units"
              + (f" {r.always_active_units[:20]}" if r.always_active_units else ""))
    out.print(f"W2 multiply-adds skipped by leaving out inactive units: "
              f"{r.w2_macs_saved_per_token:,.0f} of {r.w2_macs_per_token:,} per token "
              f"({r.w2_macs_saved_per_token / r.w2_macs_per_token:.1%})")
    if r.experts == 1:
        s = r.stats[0]
        histogram = s.activity_histogram()
        units = [int(str(row["units"])) for row in histogram]
        largest = max(units, default=0) or 1  # the largest bin is a full bar
        out.print(_bar_table(out, "units by how often they are active", ("active for", "units"),
                             [(str(row["bin"]), str(n))
                              for row, n in zip(histogram, units, strict=True)],
                             [n / largest for n in units]))
        aggregated = s.aggregated_sparsity()
        out.print(_bar_table(out, "aggregated sparsity: units unused by all of the first t "
                             "tokens", ("t", "unused share"),
                             [(f"{row['tokens']:,}", _pct(row["unused_share"]))
                              for row in aggregated],
                             [row["unused_share"] for row in aggregated], track=True))
        coverage = s.hot_unit_coverage()
        out.print(_bar_table(out, "hot units: the fewest units carrying a share of all "
                             "activations", ("share of activations", "units", "share of units"),
                             [(_pct(row["share"]), str(row["units"]), _pct(row["unit_share"]))
                              for row in coverage],
                             [row["unit_share"] for row in coverage], track=True))
        ov = s.overlap_summary()
        if ov["pairs"] and r.small_masks is None:
            out.print(f"overlap of consecutive tokens' inactive sets: Jaccard "
                      f"{ov['mean_jaccard']:.3f} ± {ov['std_jaccard']:.3f}; shared "
                      f"{ov['mean_shared']:.1f} units vs {ov['mean_shared_by_chance']:.1f} "
                      "by chance")
    else:
        table = _table("per expert", ("expert", "tokens", "inactive", "dead", "always active"))
        for e, s in enumerate(r.stats):
            table.add_row(str(e), f"{s.tokens:,}", _pct(s.mean_inactive_fraction),
                          str(len(s.dead_units)), str(len(s.always_active_units)))
        out.print(table)
    if r.pairwise_overlap is not None and r.tokens > 1:
        table = _table("shared inactive units between tokens", ("tokens", "shared", "Jaccard",
                                                                "by chance"))
        for row in r.pairwise_overlap:
            table.add_row(f"{row['a']} & {row['b']}", str(row["shared"]),
                          f"{row['jaccard']:.3f}", f"{row['by_chance']:.1f}")
        out.print(table)


def hot_units(layer: dict[str, Any], share: float = 0.8) -> dict[str, Any] | None:
    """The row of a stats document's hot-unit coverage for ``share`` (None for a mixture of
    experts, whose coverage is per expert)."""
    return next((row for row in layer.get("hot_unit_coverage", ())
                 if abs(row["share"] - share) < 1e-9), None)


def sweep_rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row of text per layer of a relu-stats sweep document (see :func:`print_sweep`)."""
    rows: list[tuple[str, ...]] = []
    for layer in doc["layers"]:
        hot = hot_units(layer)
        ov = layer.get("overlap") or {}
        cats = layer.get("cats_threshold_50")
        paired = bool(ov.get("pairs"))
        rows.append((str(layer["layer"]), _n(layer["tokens"]),
                     _pct(layer["mean_inactive_fraction"]), _n(len(layer["dead_units"])),
                     _n(len(layer["always_active_units"])),
                     "-" if hot is None else f"{hot['units']:,} ({_pct(hot['unit_share'])})",
                     f"{ov['mean_jaccard']:.3f}" if paired else "-",
                     f"{ov['mean_shared']:,.1f}" if paired else "-",
                     f"{ov['mean_shared_by_chance']:,.1f}" if paired else "-",
                     "-" if cats is None else f"{cats:.4g}"))
    return rows


SWEEP_COLUMNS = ("layer", "tokens", "inactive", "dead", "always active", "80% of activations",
                 "Jaccard", "shared", "by chance", "CATS T at 50%")


def print_sweep(doc: dict[str, Any]) -> None:
    """The summary of a relu-stats sweep, one row per layer: the mean inactive fraction (with
    a bar), dead and always-active units (on ``tokens`` tokens), the fewest units carrying 80%
    of activations, the mean Jaccard index of consecutive tokens' inactive sets with the units
    they share against what two random sets of their sizes share, and the CATS threshold that
    makes half the activated values inactive."""
    out = console()
    out.print(Text(f"relu-stats: {doc['model']} on {doc['source']}: {doc['tokens']:,} tokens in "
                   f"{doc['sequences']:,} sequences"))
    out.print(Text(str(doc["definition"])))
    out.print(_bar_table(out, "every layer's FFN on its real input", SWEEP_COLUMNS,
                         sweep_rows(doc),
                         [layer["mean_inactive_fraction"] for layer in doc["layers"]], after=2,
                         track=True))


# ---------------------------------------------------------------------------------------------
# relu-stats --text: a row per layer; capture


def sweep_json(r: SweepResult) -> dict[str, Any]:
    return {
        "model": r.model,
        "source": r.source,
        "tokens": r.tokens,
        "sequences": r.sequences,
        "definition": r.definition,
        "layers": [{"layer": s.layer, **stats_json(s.stats),
                    "cats_threshold_50": s.cats_threshold_50} for s in r.layers],
    }


def capture_json(r: CaptureResult) -> dict[str, Any]:
    return dataclasses.asdict(r)


def print_capture(r: CaptureResult) -> None:
    out = console()
    out.print(Text(f"capture: {r.model}, {r.tokens:,} tokens in {r.sequences:,} sequences"))
    out.print(Text(f"wrote {len(r.files)} files of ({r.tokens}, {r.d_model}) float32 and "
                   f"capture.json to {r.out}"))


# ---------------------------------------------------------------------------------------------
# JUnit XML for CI systems (permute-check --junit-xml).


def junit_report(path: Path | None, target: str, outcome: CheckReport | ImplError) -> None:
    """Write the report of a check, or of one that could not run, atomically to ``path``
    (from ``checks.report_path``; nothing when None). When the FFN misbehaved, its error is
    the one to show: a report that cannot be written then is left out silently."""
    if path is None:
        return
    from ffncli.errors import OutputError
    from ffncli.files import write_text_atomically

    if isinstance(outcome, BaseException):
        try:
            write_text_atomically(path, junit_error_xml(target, str(outcome)), "--junit-xml")
        except OutputError:
            pass
        return
    write_text_atomically(path, junit_xml(outcome), "--junit-xml")


def junit_xml(report: CheckReport) -> str:
    """One testsuite, one testcase per property, a <failure> for each that failed."""
    import xml.etree.ElementTree as ET  # only for --junit-xml

    failures = sum(not p.passed for p in report.properties)
    suites, suite = _junit_suite(len(report.properties), failures, 0,
                                 sum(p.seconds for p in report.properties))
    for p in report.properties:
        case = ET.SubElement(suite, "testcase", classname=_classname(report.target),
                             name=p.name, time=f"{p.seconds:.6f}")
        if not p.passed:
            failure = ET.SubElement(case, "failure", message=p.counterexample or "failed",
                                    type="PropertyFailed")
            failure.text = (f"max abs deviation {p.max_abs:.3g}, max rel {p.max_rel:.3g}, "
                            f"rtol {p.rtol:g}, atol {p.atol:g}, worst token {p.worst_token}")
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def junit_error_xml(target: str, message: str) -> str:
    """The report of a check that could not run (the implementation exited, hung, returned
    NaN...): one testcase with an <error>, so that last run's report does not stay behind
    looking like this run's. Control characters are escaped: XML 1.0 cannot hold them."""
    import xml.etree.ElementTree as ET  # only for --junit-xml

    suites, suite = _junit_suite(1, 0, 1, 0.0)
    case = ET.SubElement(suite, "testcase", classname=_classname(target), name="permute-check",
                         time="0")
    ET.SubElement(case, "error", message=shown(message), type="ImplError")
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def _classname(target: str) -> str:
    return shown(f"ffncli.permute-check.{target}")


def _junit_suite(tests: int, failures: int, errors: int,
                 seconds: float) -> tuple[Element, Element]:
    import xml.etree.ElementTree as ET  # only for --junit-xml

    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="ffncli permute-check", tests=str(tests),
                          failures=str(failures), errors=str(errors), time=f"{seconds:.6f}")
    return suites, suite

