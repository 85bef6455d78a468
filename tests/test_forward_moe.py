"""The mixtures of experts of issue 42 in the whole-model forward against transformers 5.25:
Qwen2-MoE (a shared expert behind a sigmoid gate, weights not renormalised, a dense first
layer), Qwen3-MoE (renormalised, a dense first layer, experts saved fused as 3-D tensors) and
OLMoE (Q and K norms over the whole projection, clip_qkv). tests/data/forward/<case>/expected.npz
holds every layer's FFN input, the final states, and each MoE layer's router outputs as
transformers' router module returned them (router{N} logits, chosen{N}, weights{N}); made by
tests/fixtures/make_forward.py, never importing torch here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.forward_cases import check_capture, check_relu_stats, check_routers, expected, ids_of

from ffncli.compute import ffn as F
from ffncli.compute.build import routing_rule
from ffncli.compute.forward.families import open_transformer
from ffncli.compute.forward.walk import hidden_states
from ffncli.jobs.resolve import resolve_spec

FORWARD = Path(__file__).parent / "data" / "forward"
CASES = ["qwen2_moe", "qwen3_moe", "olmoe"]
REL = 1e-4  # the tolerance the other families meet (test_forward.assert_close)
MOE_LAYERS = {"qwen2_moe": [1, 2], "qwen3_moe": [1, 2], "olmoe": [0, 1, 2]}


def load(case: str):
    weights = FORWARD / case / "model.safetensors"
    spec = resolve_spec(None, None, weights=weights, weights_describe=True)
    return open_transformer(spec, weights, np.dtype(np.float32))


def close(got: np.ndarray, want: np.ndarray, what: str, rel: float = REL) -> None:
    """Within ``rel`` of the reference's largest value, and in RMS of its RMS."""
    assert got.shape == want.shape, what
    worst = float(np.abs(got - want).max())
    assert worst <= rel * float(np.abs(want).max()), f"{what}: max error {worst:.3g}"
    rms = np.sqrt(np.mean((got.astype(np.float64) - want) ** 2))
    assert rms <= rel * np.sqrt(np.mean(want.astype(np.float64) ** 2)), f"{what}: rms {rms:.3g}"


def sequences(case: str) -> list[np.ndarray]:
    return [np.array(s, dtype=np.int64) for s in ids_of(case)]


@pytest.mark.parametrize("case", CASES)
def test_states_match_transformers(case):
    want = expected(case)
    with load(case) as model:
        got, final = hidden_states(model, sequences(case), [0, 1, 2])
    for i in range(3):
        close(got[i], want[f"layer{i}"], f"{case} layer {i}")
    close(final, want["final"], f"{case} final")


@pytest.mark.parametrize("case", CASES)
def test_router_outputs_match_transformers(case):
    """On transformers' own FFN input, and on ours: the router logits, the chosen experts (in
    transformers' order, best first) and their weights; dense layers have no router."""
    with load(case) as model:
        check_routers(model, case, MOE_LAYERS[case], close)


@pytest.mark.parametrize("case,layer,kind", [
    ("qwen2_moe", 0, F.GatedWeights), ("qwen3_moe", 0, F.GatedWeights),
    ("olmoe", 0, F.MoEWeights), ("qwen2_moe", 2, F.MoEWeights)])
def test_dense_layers_are_dense(case, layer, kind):
    """mlp_only_layers [0]: layer 0 of the Qwen cases is a gated FFN of intermediate_size."""
    with load(case) as model:
        p = model.layer(layer).engine.weights
    assert isinstance(p, kind)
    if kind is F.GatedWeights:
        assert p.w.shape == (32, 64)


def test_the_config_says_how_to_route():
    """norm_topk_prob, as the config says (Qwen3-MoE's fixture: true; the others false);
    Qwen2-MoE's shared expert and its gate are read, the others have none."""
    rules = {}
    for case in CASES:
        with load(case) as model:
            p = model.layer(2).engine.weights
            rules[case] = p.describe()
            assert (p.shared is not None, p.shared_gate is not None) == \
                ((True, True) if case == "qwen2_moe" else (False, False))
    assert rules == {"qwen2_moe": "softmax top-2", "qwen3_moe": "softmax top-2, renormalised",
                     "olmoe": "softmax top-2"}


@pytest.mark.parametrize("case,change", [
    ("qwen3_moe", "norm_topk_prob"), ("qwen2_moe", "shared_gate"), ("olmoe", "clip_qkv")])
def test_a_wrong_setting_is_seen(case, change):
    """The comparison can fail: routing without renormalising, the shared expert ungated, or
    OLMoE's clip left out each move the last layer's input beyond the tolerance."""
    want = expected(case)
    with load(case) as model:
        if change == "clip_qkv":
            model.clip = None
        else:
            build = model._engine

            def wrong(i: int):
                engine = build(i)
                p = engine.weights
                if isinstance(p, F.MoEWeights):
                    engine.weights = F.MoEWeights(
                        p.router, p.router_bias, p.experts, p.top_k,
                        rule=F.Routing(renormalise=False), shared=p.shared,
                        shared_gate=None if change == "shared_gate" else p.shared_gate)
                return engine
            model._engine = wrong
        got, _ = hidden_states(model, sequences(case), [2])
    with pytest.raises(AssertionError):
        close(got[2], want["layer2"], case)


def test_routing_rule_defaults_to_the_config_class():
    spec = resolve_spec(None, FORWARD / "qwen3_moe" / "config.json")
    assert routing_rule(spec) == F.Routing(renormalise=False)  # Qwen3MoeConfig's default
    assert routing_rule(resolve_spec(None, FORWARD / "mixtral" / "config.json")) == F.Routing()


# ---------------------------------------------------------------------------------------------
# The commands on the fixtures.


def _tensor(case: str, name: str) -> np.ndarray:
    st = pytest.importorskip("safetensors.numpy")
    return st.load_file(str(FORWARD / case / "model.safetensors"))[name]


def _experts_of(case: str, layer: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(gate, up, down) of each expert, [out, in] as stored: one matrix each or fused."""
    prefix = f"model.layers.{layer}.mlp.experts"
    if case == "qwen3_moe":
        gate_up, down = _tensor(case, prefix + ".gate_up_proj"), _tensor(case, prefix +
                                                                         ".down_proj")
        f = gate_up.shape[1] // 2
        return [(gate_up[e, :f], gate_up[e, f:], down[e]) for e in range(gate_up.shape[0])]
    return [tuple(_tensor(case, f"{prefix}.{e}.{m}_proj.weight")  # type: ignore[misc]
                  for m in ("gate", "up", "down")) for e in range(8)]


def _oracle_ffn(case: str, layer: int) -> np.ndarray:
    """The layer's FFN output from transformers' chosen experts and weights, token by token,
    in float64, with the shared expert behind its gate (Qwen2-MoE)."""
    want = expected(case)
    x = want[f"layer{layer}"].astype(np.float64)
    experts = _experts_of(case, layer)
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for e, w in zip(want[f"chosen{layer}"][t], want[f"weights{layer}"][t], strict=True):
            g, u, d = experts[e]
            out[t] += w * (d @ (F.silu(g @ x[t]) * (u @ x[t])))
    if case == "qwen2_moe":
        shared = [_tensor(case, f"model.layers.{layer}.mlp.shared_expert.{m}_proj.weight")
                  for m in ("gate", "up", "down")]
        gate = _tensor(case, f"model.layers.{layer}.mlp.shared_expert_gate.weight")[0]
        for t in range(x.shape[0]):
            y = shared[2] @ (F.silu(shared[0] @ x[t]) * (shared[1] @ x[t]))
            out[t] += y / (1 + np.exp(-(gate @ x[t])))
    return out


@pytest.mark.parametrize("case", CASES)
def test_run_a_layer_on_transformers_input(cli, tmp_path, case):
    """run --input (transformers' FFN input of the last layer) --layer 2: the output is the
    sum over transformers' chosen experts with transformers' weights."""
    np.save(tmp_path / "x.npy", expected(case)["layer2"])
    r = cli("run", "--weights", FORWARD / case, "--layer", "2", "--input", tmp_path / "x.npy",
            "--json")
    assert r.code == 0, r.err
    close(np.array(r.json()["output"]), _oracle_ffn(case, 2), f"{case} run")


@pytest.mark.parametrize("case", CASES)
def test_capture_matches_transformers(cli, tmp_path, case):
    check_capture(cli, tmp_path / "out", case, 3, close)


@pytest.mark.parametrize("case", CASES)
def test_relu_stats_counts_each_expert_on_the_tokens_routed_to_it(cli, case):
    """Each expert's tokens are the tokens transformers routed to it; its inactive units those
    whose gate pre-activation (of transformers' FFN input) is <= 0."""
    check_relu_stats(cli, case, MOE_LAYERS[case], 8,
                     lambda i, e, x: x @ _experts_of(case, i)[e][0].T)


def test_the_fused_fixture_is_fused():
    """Qwen3-MoE's fixture holds the experts as transformers 5 does (3-D), the others one
    matrix an expert, so both readers are tested."""
    header = (FORWARD / "qwen3_moe" / "model.safetensors").read_bytes()
    names = json.loads(header[8:8 + int.from_bytes(header[:8], "little")])
    assert "model.layers.1.mlp.experts.gate_up_proj" in names
    assert not any(".experts.0." in n for n in names)
