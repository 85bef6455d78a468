"""gpt-oss and Llama 4's text model (issue 42) in the whole-model forward against transformers
5.25: tests/data/forward/{gpt_oss,llama4_text} (made by tests/fixtures/make_forward.py, never
importing torch here) hold every layer's FFN input, the final states and each MoE layer's router
outputs (router{N} logits, chosen{N}, weights{N}); their dense perplexity is
tests/test_perplexity_torch.py's (tests/data/perplexity/<case>).

- gpt-oss: sinks, a sliding layer (window 5 on a 13-token sequence) then a full one, YaRN,
  the clamped SwiGLU (swiglu_limit 1.5: about a fifth of the gates and a third of the ups
  clamped), gate and up interleaved, expert and router biases, a softmax over the chosen.
- Llama 4: layers 0 and 1 rotated (interleaved, llama3 scaling), weightless Q/K norms after
  the rotation, chunks of 4; layer 2 neither, with the temperature (floor_scale 4); a mixture
  on layer 1 only (interleave_moe_layer_step 2): top-1 sigmoid scaling the expert's input,
  the shared expert; dense layers of intermediate_size_mlp."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.forward_cases import (
    check_capture,
    check_experts,
    check_relu_stats,
    check_routers,
    check_run,
    expected,
    ids_of,
)
from test_forward_moe import close

from ffncli.compute import ffn as F
from ffncli.compute.build import activation
from ffncli.compute.engine import Engine
from ffncli.compute.forward.families import open_transformer
from ffncli.compute.forward.walk import hidden_states
from ffncli.compute.weights import layer_ffn
from ffncli.jobs.resolve import resolve_spec

DATA = Path(__file__).parent / "data"
FORWARD = DATA / "forward"
CASES = ["gpt_oss", "llama4_text"]
LAYERS = {"gpt_oss": 2, "llama4_text": 3, "gpt_oss_mxfp4": 2}
MOE_LAYERS = {"gpt_oss": [0, 1], "llama4_text": [1], "gpt_oss_mxfp4": [0, 1]}
EXPERTS = 4


def load(case: str, folder: Path | None = None):
    weights = (folder or FORWARD / case) / "model.safetensors"
    spec = resolve_spec(None, None, weights=weights, weights_describe=True)
    return open_transformer(spec, weights, np.dtype(np.float32))


def sequences(case: str) -> list[np.ndarray]:
    return [np.array(s, dtype=np.int64) for s in ids_of(case)]


@pytest.mark.parametrize("case", [*CASES, "gpt_oss_mxfp4"])
def test_states_match_transformers(case):
    want = expected(case)
    n = LAYERS[case]
    with load(case) as model:
        got, final = hidden_states(model, sequences(case), range(n))
    for i in range(n):
        close(got[i], want[f"layer{i}"], f"{case} layer {i}")
    close(final, want["final"], f"{case} final")


@pytest.mark.parametrize("case", [*CASES, "gpt_oss_mxfp4"])
def test_router_outputs_match_transformers(case):
    """On transformers' FFN input and on ours: the logits, the chosen experts in transformers'
    order and their weights (gpt-oss's softmax over the chosen; Llama 4's sigmoid)."""
    with load(case) as model:
        check_routers(model, case, MOE_LAYERS[case], close)


def test_the_layers_are_read_as_configured():
    with load("gpt_oss") as model:
        p = model.layer(0).engine.weights
        assert isinstance(p, F.MoEWeights) and p.router_bias is not None
        assert p.describe() == "softmax top-2, softmax over the chosen"
        assert all(e.b is not None and e.c is not None and e.b2 is not None for e in p.experts)
        assert model.layer(0).engine.act == F.Activation("silu", 1.702, 1.5)
        assert [model.layer(i).attention.window for i in range(2)] == [5, None]
    with load("llama4_text") as model:
        kinds = [model.layer(i).engine.weights for i in range(3)]
        assert [type(k) for k in kinds] == [F.GatedWeights, F.MoEWeights, F.GatedWeights]
        assert kinds[0].w.shape == (64, 32) and kinds[1].shared is not None
        assert kinds[1].describe() == "sigmoid top-1, on the expert's input"
        att = [model.layer(i).attention for i in range(3)]
        assert [a.chunk for a in att] == [4, 4, None]
        assert [a.rope is not None for a in att] == [True, True, False]
        assert [a.temperature for a in att] == [None, None, (4.0, 0.1)]


def _gpt_oss_glu(gate: np.ndarray, up: np.ndarray, limit: float, alpha: float) -> np.ndarray:
    """transformers' GptOssExperts._apply_gate, written out."""
    gate = np.minimum(gate, limit)
    up = np.clip(up, -limit, limit)
    return (up + 1) * (gate * (1 / (1 + np.exp(-gate * alpha))))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_clamped_swiglu_is_gpt_oss_formula(dtype):
    """The plain gated FFN and the engine (a block at a time, in place) against the formula,
    on values on both sides of the limit."""
    rng = np.random.default_rng(0)
    d, f, limit = 8, 12, 1.5
    p = F.GatedWeights(*(rng.normal(0, 1, s).astype(dtype) for s in
                         ((d, f), (f,), (d, f), (f,), (f, d), (d,))))
    x = rng.normal(0, 1, (40, d)).astype(dtype)
    gate, up = x @ p.w + p.b, x @ p.v + p.c
    assert (gate > limit).any() and (np.abs(up) > limit).any()
    want = _gpt_oss_glu(gate, up, limit, 1.702) @ p.w2 + p.b2
    act = F.Activation("silu", 1.702, limit)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(F.gated_ffn(x, p, act), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(Engine(p, act, 16)(x), want, rtol=tol, atol=tol)
    plain = _gpt_oss_glu(gate, up, np.inf, 1.702) @ p.w2 + p.b2  # the limit matters here
    assert np.abs(plain - want).max() > 0.1


def test_the_activation_defaults_to_gpt_oss_config_class():
    spec = resolve_spec(None, FORWARD / "gpt_oss" / "config.json")
    assert activation(spec) == F.Activation("silu", 1.702, 7.0)  # GptOssConfig's defaults


@pytest.mark.parametrize("case,change", [
    ("gpt_oss", "limit"), ("gpt_oss", "sinks"), ("llama4_text", "scales_input"),
    ("llama4_text", "temperature")])
def test_a_wrong_setting_is_seen(case, change):
    """The comparison can fail: gpt-oss without its clamp or its sinks, Llama 4 with the
    weight on the expert's output or without the temperature each move the final states
    beyond the tolerance."""
    want = expected(case)
    with load(case) as model:
        if change in ("limit", "scales_input"):
            build = model._engine

            def wrong(i: int) -> Engine:
                engine = build(i)
                if change == "limit":
                    engine.act = replace(engine.act, limit=None)
                elif isinstance(engine.weights, F.MoEWeights):
                    engine.weights = replace(engine.weights, rule=replace(
                        engine.weights.rule, scales_input=False))
                return engine
            model._engine = wrong
        else:
            kinds = model._kinds

            def without(i: int) -> dict:
                return {k: v for k, v in kinds(i).items() if k not in ("sinks", "temperature")}
            model._kinds = without
        _, final = hidden_states(model, sequences(case), [])
    with pytest.raises(AssertionError):
        close(final, want["final"], case)


def test_moe_layers_default_to_the_interleave_step(tmp_path):
    """Without moe_layers (published configs), the MoE layers are every
    interleave_moe_layer_step-th (Llama4TextConfig's default): here layer 1 of 3."""
    config = json.loads((FORWARD / "llama4_text" / "config.json").read_text())
    del config["moe_layers"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = resolve_spec(None, tmp_path / "config.json")
    assert [layer_ffn(spec, i).is_moe for i in range(3)] == [False, True, False]


# ---------------------------------------------------------------------------------------------
# The commands on the fixtures.


def _tensor(case: str, name: str) -> np.ndarray:
    st = pytest.importorskip("safetensors.numpy")
    return st.load_file(str(FORWARD / case / "model.safetensors"))[name].astype(np.float64)


def _expert(case: str, layer: int, e: int) -> tuple[np.ndarray, ...]:
    """(gate, up, down, gate bias, up bias, down bias), [in, out], of expert e."""
    if case == "gpt_oss":
        p = f"model.layers.{layer}.mlp.experts."
        gu, gub = _tensor(case, p + "gate_up_proj")[e], _tensor(case, p + "gate_up_proj_bias")[e]
        return (gu[:, ::2], gu[:, 1::2], _tensor(case, p + "down_proj")[e], gub[::2], gub[1::2],
                _tensor(case, p + "down_proj_bias")[e])
    p = f"model.layers.{layer}.feed_forward.experts."
    gu, f = _tensor(case, p + "gate_up_proj")[e], 16
    zero = np.zeros(64)
    return gu[:, :f], gu[:, f:], _tensor(case, p + "down_proj")[e], zero[:f], zero[:f], zero


def _oracle_ffn(case: str, layer: int) -> np.ndarray:
    """The layer's FFN output from transformers' chosen experts and weights, in float64:
    gpt-oss's clamped SwiGLU with biases, the weight on the output; Llama 4's SwiGLU on the
    weighted input, plus its shared expert."""
    want = expected(case)
    x = want[f"layer{layer}"].astype(np.float64)
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for e, w in zip(want[f"chosen{layer}"][t], want[f"weights{layer}"][t], strict=True):
            g, u, d, bg, bu, bd = _expert(case, layer, e)
            if case == "gpt_oss":
                out[t] += w * (_gpt_oss_glu(x[t] @ g + bg, x[t] @ u + bu, 1.5, 1.702) @ d + bd)
            else:
                xe = w * x[t]
                out[t] += (F.silu(xe @ g) * (xe @ u)) @ d
    if case == "llama4_text":
        g, u, d = (_tensor(case, f"model.layers.{layer}.feed_forward.shared_expert.{m}_proj"
                           ".weight") for m in ("gate", "up", "down"))
        out += (F.silu(x @ g.T) * (x @ u.T)) @ d.T
    return out


@pytest.mark.parametrize("case", CASES)
def test_run_a_layer_on_transformers_input(cli, tmp_path, case):
    layer = MOE_LAYERS[case][-1]
    check_run(cli, tmp_path, case, layer, _oracle_ffn(case, layer), close)


@pytest.mark.parametrize("case", CASES)
def test_capture_matches_transformers(cli, tmp_path, case):
    check_capture(cli, tmp_path / "out", case, LAYERS[case], close)


@pytest.mark.parametrize("case", CASES)
def test_relu_stats_counts_each_expert_on_the_tokens_routed_to_it(cli, case):
    """Each expert's tokens are those transformers routed to it; its inactive units those whose
    gate pre-activation (bias included) of transformers' FFN input is <= 0."""
    def pre(i: int, e: int, x: np.ndarray) -> np.ndarray:
        g, _, _, bg, _, _ = _expert(case, i, e)
        return x.astype(np.float64) @ g + bg
    check_relu_stats(cli, case, MOE_LAYERS[case], EXPERTS, pre)


@pytest.mark.parametrize("case", CASES)
def test_experts_equal_the_router_records(cli, case):
    """The experts command's loads are counts of transformers' chosen experts."""
    check_experts(cli, case, MOE_LAYERS[case], EXPERTS, 1 if case == "llama4_text" else 0)


# ---------------------------------------------------------------------------------------------
# gpt-oss as published: MXFP4 experts (tests/data/forward/gpt_oss_mxfp4, quantised by the
# fixture maker, its expected states those of transformers' own dequantisation; above).


def test_mxfp4_codes_and_scales_are_the_formats():
    """FP4 E2M1 codes, the low nibble first, times 2^(scale - 127): written out by hand."""
    from ffncli.formats.mxfp4 import dequantise

    blocks = np.zeros((1, 1, 16), dtype=np.uint8)
    blocks[0, 0, :4] = [0x71, 0xF8, 0x2A, 0x5C]  # (0.5, 6), (-0, -6), (-1, 1), (-2, 3)
    got = dequantise(blocks, np.array([[128]], dtype=np.uint8), "x")
    assert got.shape == (1, 32) and got.dtype == np.float32
    assert got[0, :8].tolist() == [1.0, 12.0, -0.0, -12.0, -2.0, 2.0, -4.0, 6.0]
    assert not got[0, 8:].any()
    small = dequantise(blocks, np.array([[120]], dtype=np.uint8), "x")  # 2^-7
    np.testing.assert_array_equal(small, got / 256)


def test_mxfp4_experts_are_read_dequantised(cli):
    """The fixture holds only blocks and scales for its experts; params counts two values a
    byte and matches the spec; the forward's experts are the dequantised values (each a
    float32 exactly: FP4 times a power of two)."""
    header = (FORWARD / "gpt_oss_mxfp4" / "model.safetensors").read_bytes()
    names = json.loads(header[8:8 + int.from_bytes(header[:8], "little")])
    assert names["model.layers.0.mlp.experts.gate_up_proj_blocks"]["dtype"] == "U8"
    assert "model.layers.0.mlp.experts.gate_up_proj" not in names
    r = cli("params", "--weights", FORWARD / "gpt_oss_mxfp4")
    assert r.code == 0 and "matches the spec" in r.out, r.out + r.err
    with load("gpt_oss_mxfp4") as model:
        p = model.layer(0).engine.weights
    assert isinstance(p, F.MoEWeights) and p.experts[0].w.shape == (64, 32)
    values = np.abs(np.concatenate([e.w.ravel() for e in p.experts]))
    mantissa, _ = np.frexp(values[values > 0])
    assert set(np.round(mantissa * 4).tolist()) <= {2.0, 3.0, 4.0}  # 1, 1.5 (and 0.5) x 2^k


def test_an_mxfp4_stack_of_the_wrong_shape_is_refused(tmp_path, cli):
    st = pytest.importorskip("safetensors.numpy")
    from helpers.forward_cases import checkpoint

    name = "model.layers.0.mlp.experts.gate_up_proj_scales"
    scales = st.load_file(str(FORWARD / "gpt_oss_mxfp4" / "model.safetensors"))[name]
    folder = checkpoint(tmp_path, "gpt_oss_mxfp4", tensors={name: scales[:, :, :1].copy()})
    r = cli("run", "--weights", folder, "--random", "2")
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: {folder}/model.safetensors: tensor 'model.layers.0.mlp.experts."
                     "gate_up_proj_blocks': MXFP4 blocks of shape (4, 64, 2, 16) and scales of "
                     "shape (4, 64, 1): expected (..., groups, 16) and (..., groups)\n")


def test_calibration_sees_the_clamped_up():
    """sparse.gate_and_up (what the sparsifying rules calibrate on) gives gpt-oss's activated
    gate and its clamped up plus 1, as the FFN multiplies them."""
    from ffncli.compute.sparse import gate_and_up

    rng = np.random.default_rng(1)
    p = F.GatedWeights(*(rng.normal(0, 1, s) for s in ((8, 12), (12,), (8, 12), (12,), (12, 8),
                                                      (8,))))
    x = rng.normal(0, 1, (30, 8))
    act = F.Activation("silu", 1.702, 1.5)
    a, u = gate_and_up(x, p, Engine(p, act, 16))
    gate, up = x @ p.w + p.b, x @ p.v + p.c
    np.testing.assert_allclose(a * u, _gpt_oss_glu(gate, up, 1.5, 1.702), rtol=1e-12)
