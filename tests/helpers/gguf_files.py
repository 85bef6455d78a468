"""Small GGUF files, written with the gguf package's own GGUFWriter: a llama-shaped model whose
sizes, tensor types and metadata each test chooses (tests/test_formats_gguf.py,
tests/test_specs_gguf.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

Q = gguf.GGMLQuantizationType


def _encode(array: np.ndarray, qtype) -> np.ndarray:
    """A float32 [rows, cols] array as GGUF stores it in qtype."""
    if qtype == Q.F32:
        return array.astype(np.float32)
    if qtype == Q.F16:
        return array.astype(np.float16)
    return gguf.quants.quantize(array.astype(np.float32), qtype)


def write_gguf(path: Path, *, d=64, f=128, layers=2, heads=4, kv=2, vocab=40, qtype=Q.F32,
               experts=0, top_k=2, arch="llama", tied=True, drop=(), seed=0,
               tokens=True, raw_as=None, big_endian=False) -> dict[str, np.ndarray]:
    """A small llama-shaped GGUF; returns the float32 [in, out] matrices of each layer's FFN
    (before quantising) by GGUF name. ``raw_as`` {name: type}: that tensor is random bytes
    of a type the gguf package cannot quantise (K-quants, Q8_1)."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch, endianess=gguf.GGUFEndian.BIG if big_endian
                        else gguf.GGUFEndian.LITTLE)
    meta = {"block_count": layers, "embedding_length": d, "feed_forward_length": f,
            "attention.head_count": heads, "attention.head_count_kv": kv,
            "context_length": 256}
    for key, value in meta.items():
        if key not in drop:
            w.add_uint32(f"{arch}.{key}", value)
    if experts:
        w.add_uint32(f"{arch}.expert_count", experts)
        w.add_uint32(f"{arch}.expert_used_count", top_k)
    if tokens:
        w.add_token_list([f"t{i}" for i in range(vocab)])
    kept: dict[str, np.ndarray] = {}

    def add(name: str, shape_in_out: tuple[int, ...], quantise: bool = True) -> None:
        if len(shape_in_out) == 1:
            w.add_tensor(name, rng.normal(0, 1, shape_in_out).astype(np.float32))
            return
        value = rng.normal(0, 0.5, shape_in_out).astype(np.float32)  # [in, out] (or [E, in, out])
        kept[name] = value
        stored = np.swapaxes(value, -1, -2)  # GGUF keeps [out, in]: dims [in, out]
        t = qtype if quantise else Q.F32
        if raw_as and name in raw_as:
            t = raw_as[name]
            block, size = gguf.GGML_QUANT_SIZES[t]
            shape = stored.shape[:-1] + (stored.shape[-1] // block * size,)
            encoded = rng.integers(0, 256, shape, dtype=np.uint8)
        else:
            encoded = _encode(stored, t)
        w.add_tensor(name, encoded, raw_dtype=t if t not in (Q.F32, Q.F16) else None)

    add("token_embd.weight", (vocab, d)[::-1], quantise=False)
    for i in range(layers):
        add(f"blk.{i}.attn_norm.weight", (d,))
        add(f"blk.{i}.attn_q.weight", (d, d))
        add(f"blk.{i}.attn_k.weight", (d, d * kv // heads))
        add(f"blk.{i}.attn_v.weight", (d, d * kv // heads))
        add(f"blk.{i}.attn_output.weight", (d, d))
        add(f"blk.{i}.ffn_norm.weight", (d,))
        if experts:
            add(f"blk.{i}.ffn_gate_inp.weight", (d, experts), quantise=False)
            add(f"blk.{i}.ffn_gate_exps.weight", (experts, d, f))
            add(f"blk.{i}.ffn_up_exps.weight", (experts, d, f))
            add(f"blk.{i}.ffn_down_exps.weight", (experts, f, d))
        else:
            add(f"blk.{i}.ffn_gate.weight", (d, f))
            add(f"blk.{i}.ffn_up.weight", (d, f))
            add(f"blk.{i}.ffn_down.weight", (f, d))
    add("output_norm.weight", (d,))
    if not tied:
        add("output.weight", (d, vocab), quantise=False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return kept
