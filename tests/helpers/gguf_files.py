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
               tokens=True, raw_as=None, big_endian=False, biases=(), head_dim=None,
               rope_freqs=0, stacked=None) -> dict[str, np.ndarray]:
    """A small llama-shaped GGUF; returns the float32 [in, out] matrices of each layer's FFN
    (before quantising) by GGUF name. ``raw_as`` {name: type}: that tensor is random bytes
    of a type the gguf package cannot quantise (K-quants, Q8_1). ``biases``: the layer
    matrices ("attn_q", "ffn_up", ...) that also get a ``.bias`` of their output width.
    ``head_dim``: written as ``attention.key_length`` (and ``value_length``), the attention
    matrices shaped by it rather than by ``d / heads``. ``rope_freqs``: the length of a
    ``rope_freqs.weight`` table (llama 3's rotary frequency factors), 0 for none.
    ``stacked``: the experts the stacked FFN tensors hold, when not ``experts`` (a file that
    lies: its router and its metadata say otherwise)."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch, endianess=gguf.GGUFEndian.BIG if big_endian
                        else gguf.GGUFEndian.LITTLE)
    meta = {"block_count": layers, "embedding_length": d, "feed_forward_length": f,
            "attention.head_count": heads, "attention.head_count_kv": kv,
            "context_length": 256}
    for key, value in meta.items():
        if key not in drop:
            w.add_uint32(f"{arch}.{key}", value)
    if head_dim is not None:
        w.add_uint32(f"{arch}.attention.key_length", head_dim)
        w.add_uint32(f"{arch}.attention.value_length", head_dim)
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

    def matrix(stem: str, n_in: int, n_out: int) -> None:
        add(f"{stem}.weight", (n_in, n_out))
        if stem.rsplit(".", 1)[-1] in biases:
            add(f"{stem}.bias", (n_out,))

    q_width = d if head_dim is None else heads * head_dim
    kv_width = d * kv // heads if head_dim is None else kv * head_dim
    add("token_embd.weight", (vocab, d)[::-1], quantise=False)
    if rope_freqs:
        w.add_tensor("rope_freqs.weight", np.linspace(1, 8, rope_freqs, dtype=np.float32))
    for i in range(layers):
        add(f"blk.{i}.attn_norm.weight", (d,))
        matrix(f"blk.{i}.attn_q", d, q_width)
        matrix(f"blk.{i}.attn_k", d, kv_width)
        matrix(f"blk.{i}.attn_v", d, kv_width)
        matrix(f"blk.{i}.attn_output", q_width, d)
        add(f"blk.{i}.ffn_norm.weight", (d,))
        if experts:
            add(f"blk.{i}.ffn_gate_inp.weight", (d, experts), quantise=False)
            n = experts if stacked is None else stacked
            add(f"blk.{i}.ffn_gate_exps.weight", (n, d, f))
            add(f"blk.{i}.ffn_up_exps.weight", (n, d, f))
            add(f"blk.{i}.ffn_down_exps.weight", (n, f, d))
        else:
            matrix(f"blk.{i}.ffn_gate", d, f)
            matrix(f"blk.{i}.ffn_up", d, f)
            matrix(f"blk.{i}.ffn_down", f, d)
    add("output_norm.weight", (d,))
    if not tied:
        add("output.weight", (d, vocab), quantise=False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return kept


def header_bytes(metadata: dict[str, str | int], tensors=()) -> bytes:
    """A little-endian GGUF version 3 header written byte by byte from the format's definition
    (not by the gguf package): magic, version, tensor count, metadata count, each key as a
    string (u64 length, UTF-8) with its value type (8 string, 4 uint32) and value, then each
    tensor info ``(name, dims innermost first, GGML type id, offset)``. No padding, no data."""
    import struct

    def string(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, value in metadata.items():
        out += string(key) + (struct.pack("<I", 8) + string(value) if isinstance(value, str)
                              else struct.pack("<II", 4, value))
    for name, dims, type_id, offset in tensors:
        out += string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", n) for n in dims) + struct.pack("<IQ", type_id, offset)
    return out
