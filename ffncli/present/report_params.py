"""The HTML report of ``params``: the whole model's parameters by part, each layer's parameters
and FLOPs, memory and the KV cache. See :mod:`ffncli.present.report` for what every page holds
and promises."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffncli.base.files import write_text_atomically
from ffncli.counting.results import FileOnlyResult
from ffncli.present.params import file_only_json, params_json
from ffncli.present.report import OPTION, Context
from ffncli.present.svg import (
    Cell,
    commas,
    hbars,
    number_table,
    page,
    percent,
    section,
    stacked_bars,
)

if TYPE_CHECKING:
    from ffncli.counting.results import ParamsResult

GIB = 2**30

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


def save_params(target: Path | None, result: ParamsResult | FileOnlyResult,
                about: Context | None = None) -> None:
    """``params --report``: the page of the ``--json`` document."""
    if target is None:
        return
    doc = file_only_json(result) if isinstance(result, FileOnlyResult) else params_json(result)
    write_text_atomically(target, params_report(doc, about), OPTION)
