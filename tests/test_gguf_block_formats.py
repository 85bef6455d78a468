"""GGUF's block formats counted by their logical parameters (a tensor's elements), with the
bytes that store them from each format's block size: 32 values in 17 bytes for gpt-oss's
MXFP4, 256 in 144 for Q4_K, 256 in 66 for IQ2_XXS, 2 bytes a value for BF16 (llama.cpp's
ggml-common.h; the gguf package's GGML_QUANT_SIZES and its GGUFReader are the oracles for every
other format). Known formats are never refused; an unknown one is one error line
(tests/test_formats_gguf.py, "unknown tensor type")."""

from __future__ import annotations

import pytest
from helpers.gguf_files import Q, write_gguf
from helpers.zoo_gguf import write_header_only

from ffncli.counting.files import count_gguf
from ffncli.formats import gguf as G

gguf = pytest.importorskip("gguf")

# format -> (values a block, bytes a block), from llama.cpp's block structs: MXFP4 an 8-bit
# shared exponent and 16 bytes of 4-bit values; Q4_K two half scales, 12 bytes of 6-bit
# scales, 128 bytes of 4-bit values; IQ2_XXS a half scale and 64 bytes of 2-bit grid indices.
BY_HAND = {"MXFP4": (32, 1 + 16), "Q4_K": (256, 2 + 2 + 12 + 128), "IQ2_XXS": (256, 2 + 64),
           "BF16": (1, 2)}


def test_params_counts_quantised_experts_by_their_values(tmp_path, cli):
    """A file whose FFN is MXFP4, Q4_K and IQ2_XXS and whose attention is BF16: the
    parameters are the spec's (the file matches it), each format stores its own."""
    d, f, layers, kv_width, vocab = 256, 512, 2, 128, 40
    path = tmp_path / "m.gguf"
    write_gguf(path, d=d, f=f, layers=layers, heads=4, kv=2, vocab=vocab, qtype=Q.BF16,
               raw_as={f"blk.{i}.ffn_{m}.weight": t for i in range(layers) for m, t in
                       (("gate", Q.MXFP4), ("up", Q.Q4_K), ("down", Q.IQ2_XXS))})
    r = cli("params", "--weights", path, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    matrix = layers * d * f
    attention = layers * (2 * d * d + 2 * d * kv_width)
    total = vocab * d + layers * 2 * d + d + attention + 3 * matrix
    assert doc["total_params"] == doc["file_params"] == total and doc["matches"] is True
    stored = {s["kind"]: (s["params"], s["bytes"]) for s in doc["stored"]}
    assert stored == {
        "MXFP4": (matrix, matrix // 32 * 17), "Q4_K": (matrix, matrix // 256 * 144),
        "IQ2_XXS": (matrix, matrix // 256 * 66), "BF16": (attention, 2 * attention),
        "F32": (total - 3 * matrix - attention, 4 * (total - 3 * matrix - attention))}


FLOATING = [name for name, _, _ in G.GGML_TYPES.values() if name not in G.INTEGER_TYPES]


@pytest.mark.parametrize("name", FLOATING)
def test_every_known_format_is_counted_by_its_values(tmp_path, name):
    """One tensor of 2 x 2048 values (whole blocks of every format) in each format: counted as
    4,096 parameters, its bytes those of the gguf package's table and of its reader."""
    qtype = Q[name]
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    write_header_only(w, path, {"blk.0.ffn_up.weight": ((2, 2048), qtype)})
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    want = 4096 // block * size
    if name in BY_HAND:
        assert (block, size) == BY_HAND[name]
    (tensor,) = gguf.GGUFReader(str(path)).tensors
    header = G.read_header(path)
    assert header.tensors["blk.0.ffn_up.weight"].nbytes == int(tensor.n_bytes) == want
    count = count_gguf(header)
    assert (count.total, count.groups["ffn"]) == (4096, 4096)
    assert [(s.kind, s.params, s.bytes) for s in count.stored] == [(name, 4096, want)]


def test_rows_of_a_part_of_a_block_are_refused_in_one_line(tmp_path, cli):
    """A row of 48 MXFP4 values is a block and a half: one error line, not a count."""
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    write_header_only(w, path, {"blk.0.ffn_up.weight": ((2, 64), Q.MXFP4)})
    data = bytearray(path.read_bytes())
    at = data.index(b"blk.0.ffn_up.weight") + len(b"blk.0.ffn_up.weight") + 4
    data[at:at + 8] = (48).to_bytes(8, "little")  # dims innermost first: 64 -> 48
    path.write_bytes(bytes(data))
    r = cli("params", "--weights", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: tensor 'blk.0.ffn_up.weight': its "
                                             "rows of 48 are not whole MXFP4 blocks of 32\n")
