"""The KV cache of ``params``: bytes a token and at the asked length in each cache dtype, the
cache by layer kind (window, fixed state, shared, looped, compressed) and how it grows; as a
table or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ffncli.counting.kv import KvCache, KvPart
from ffncli.present.console import Text
from ffncli.present.tables import commas, new_table

if TYPE_CHECKING:
    from rich.console import Console


def kv_json(kv: KvCache) -> dict[str, Any]:
    return {
        "kind": kv.kind,
        "layers": kv.layers,
        "parts": [{"kind": p.kind, "layers": p.layers, "runs": p.runs, "indices": list(p.indices),
                   "per_token": p.per_token, "cap": p.cap, "state": p.state,
                   **_compressed_json(p),
                   "elements": p.elements(kv.seq_len)} for p in kv.parts],
        "elements": kv.elements(kv.seq_len),
        "elements_per_token": kv.elements_per_token,
        "bytes_per_token": kv.bytes_per_token(),
        "seq_len": kv.seq_len,
        "batch": kv.batch,
        "bytes": kv.bytes(),
    }


def _compressed_json(p: KvPart) -> dict[str, int]:
    """A part's compressed entries (DeepSeek-V4's compressors), when it has them."""
    return {"rate": p.rate, "entry": p.entry, "pending": p.pending,
            "overlap": p.overlap} if p.rate else {}


_KV_KINDS = {"mha": "one K and V per head", "gqa": "grouped-query: K and V per kv head",
             "mqa": "multi-query: one K and V head", "mla": "latent: kv_lora_rank + rope key",
             "state": "fixed states, no attention"}


def print_kv(out: Console, kv: KvCache) -> None:
    out.print()
    if kv.kind == "none":
        out.print("KV cache: none (no decoder layers)")
        return
    looped = any(p.runs > 1 for p in kv.parts)  # a cache layer a run of a looped layer
    table = new_table(f"KV cache ({_KV_KINDS[kv.kind]}; {kv.layers} "
                      f"{'cache layers' if looped else 'layers'}, "
                   f"{kv.elements_per_token:,} values per token)",
                   ("cache dtype", "bytes per token", f"x {kv.seq_len:,} x {kv.batch:,}", "GiB"))
    total = kv.bytes()
    for dtype, size in kv.bytes_per_token().items():
        table.add_row(dtype, commas(size), commas(total[dtype]), f"{total[dtype] / 2**30:,.2f}")
    out.print(table)
    if looped or any(p.cap or p.state or p.kind == "shared" for p in kv.parts):
        _print_kv_parts(out, kv)


_KV_PARTS = {"full": "full attention", "mla": "latent attention",
             "sliding": "sliding window", "chunked": "chunked attention",
             "linear": "linear attention (state)", "mamba": "mamba (state)",
             "conv": "short convolution (state)",
             "shared": "shares another layer's KV"}


def _print_kv_parts(out: Console, kv: KvCache) -> None:
    """The cache by layer kind, and how it grows."""
    out.print()
    table = new_table(f"KV cache by layer kind, at {kv.seq_len:,} tokens (one sequence)",
                      ("layers", "count", "values per token", "tokens kept", "values"))
    for p in kv.parts:
        table.add_row(_KV_PARTS[p.kind], _layers(p), commas(p.per_token), _kept(p),
                      commas(p.elements(kv.seq_len)))
    out.print(table)
    out.print(Text(f"grows by: {_growth(kv)}"))


def _layers(p: KvPart) -> str:
    """A part's cache layers, and the runs of a looped layer each one is."""
    return f"{p.layers} ({p.layers // p.runs} x {p.runs} runs)" if p.runs > 1 else str(p.layers)


def _kept(p: KvPart) -> str:
    """The tokens a part's layers keep: a window's last, a fixed state, none, or all; and a
    compressor's entries."""
    kept = f"last {p.cap:,}" if p.cap else "fixed state" if p.state else \
        "none" if p.kind == "shared" else "all"
    return kept + (f" + an entry every {p.rate:,}" if p.rate else "")


def _growth(kv: KvCache) -> str:
    """How the cache grows: by every layer's values a token up to the first window, then by
    the uncapped layers' alone; the fixed states first; a compressor's entries apart."""
    steps, rate = [], kv.elements_per_token
    for cap in sorted({p.cap for p in kv.parts if p.cap}):
        rate -= sum(p.layers * p.per_token for p in kv.parts if p.cap == cap)
        steps.append(f"then {rate:,} after {cap:,} tokens")
    fixed = sum(p.layers * p.state for p in kv.parts)
    start = f"{fixed:,} values of fixed state, then " if fixed else ""
    compressed = [f"{p.layers} x {p.entry:,} values every {p.rate:,} tokens"
                  for p in kv.parts if p.rate]
    return (f"{start}{kv.elements_per_token:,} values a token"
            + "".join(f", {s}" for s in steps)
            + (f"; and compressed entries, {', '.join(compressed)}" if compressed else ""))
