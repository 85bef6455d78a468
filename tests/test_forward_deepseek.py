"""DeepSeek-V2, DeepSeek-V3 and GLM-4.5 (``glm4_moe``) in the whole-model forward against
transformers 5.25 (issue 42 section 1): MLA (V2 through q_proj, V3 through q_lora_rank with
biases and YaRN), GLM-4.5's biased, qk-normed, half-rotated heads; a dense first layer, then
8 routed experts in 4 groups (V2: softmax, groups by their best, scaled; V3 and GLM-4.5:
sigmoid plus the score-correction bias for choosing, groups by their two best, renormalised,
scaled) and a shared expert. tests/data/forward/<case>/expected.npz holds every layer's FFN
input, the final states and each MoE layer's router outputs as transformers' router module
returned them; tests/data/perplexity/<case>/expected.json transformers' perplexity. Both made
by tests/fixtures/make_forward.py and make_perplexity.py; torch is never imported here."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.forward_cases import expected
from test_forward_moe import FORWARD, close, load, sequences
from test_perplexity_torch import PROTOCOLS, _as_fixture, _expected, _ids, _open

from ffncli.analysis.perplexity import Protocol
from ffncli.compute import ffn as F
from ffncli.compute.forward import deepseek, ops
from ffncli.compute.forward.walk import hidden_states
from ffncli.jobs import experts as experts_job
from ffncli.jobs.perplexity import perplexity

CASES = ["deepseek_v2", "deepseek_v3", "glm4_moe"]
MOE_LAYERS = [1, 2]  # first_k_dense_replace 1
D, EXPERTS, WIDTH, DENSE_WIDTH = 64, 8, 8, 32  # hidden, n_routed_experts, their widths


def by_expert(chosen: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each token's chosen experts in index order, their weights alongside: transformers'
    DeepSeek routers call torch.topk(sorted=False), which promises no order."""
    order = np.argsort(chosen, axis=1, kind="stable")
    return np.take_along_axis(chosen, order, 1), np.take_along_axis(weights, order, 1)


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
    """On transformers' own FFN input, and on ours: the router logits, the chosen experts and
    their weights (the scaling factor and the renormalisation in them)."""
    want = expected(case)
    assert sorted(int(k[6:]) for k in want if k.startswith("router")) == MOE_LAYERS
    with load(case) as model:
        ours, _ = hidden_states(model, sequences(case), MOE_LAYERS)
        for i in MOE_LAYERS:
            p = model.layer(i).engine.weights
            assert isinstance(p, F.MoEWeights)
            chosen, weights = by_expert(want[f"chosen{i}"], want[f"weights{i}"])
            for x in (want[f"layer{i}"], ours[i]):
                close(F.router_logits(x, p), want[f"router{i}"], f"{case} router {i}")
                got_chosen, got_weights = by_expert(*F.route(x, p))
                np.testing.assert_array_equal(got_chosen, chosen)
                close(got_weights, weights, f"{case} weights {i}")


@pytest.mark.parametrize("case", CASES)
def test_the_layers_are_read_as_the_config_says(case):
    """Layer 0 dense (intermediate_size 32), layers 1 and 2 eight experts of 8 and one shared
    expert of 8 (n_shared_experts 1), no gate on it; the score-correction bias read where the
    router is sigmoid; the rule named from the config."""
    rules = {"deepseek_v2": "softmax top-2, 4 groups top-2 by max, x1.5",
             "deepseek_v3": "sigmoid + bias top-2, renormalised, 4 groups top-2, x2.5",
             "glm4_moe": "sigmoid + bias top-2, renormalised, 4 groups top-2, x2"}
    with load(case) as model:
        dense = model.layer(0).engine.weights
        assert isinstance(dense, F.GatedWeights) and dense.w.shape == (D, DENSE_WIDTH)
        for i in MOE_LAYERS:
            p = model.layer(i).engine.weights
            assert isinstance(p, F.MoEWeights) and len(p.experts) == EXPERTS
            assert isinstance(p.shared, F.GatedWeights) and p.shared.w.shape == (D, WIDTH)
            assert p.shared_gate is None and p.describe() == rules[case]
            assert (p.choice_bias is None) == (case == "deepseek_v2")
            if p.choice_bias is not None:
                bias = _tensor(case, f"model.layers.{i}.mlp.gate.e_score_correction_bias")
                np.testing.assert_array_equal(p.choice_bias, bias)


def _without_choice_bias(model) -> None:
    build = model._engine

    def engine(i: int):
        e = build(i)
        if isinstance(e.weights, F.MoEWeights):
            e.weights = F.MoEWeights(e.weights.router, None, e.weights.experts,
                                     e.weights.top_k, rule=e.weights.rule,
                                     shared=e.weights.shared)
        return e
    model._engine = engine


@pytest.mark.parametrize("case,change", [
    ("deepseek_v3", "choice_bias"), ("glm4_moe", "choice_bias"),
    ("deepseek_v3", "softmax_scale"), ("deepseek_v3", "yarn"), ("deepseek_v2", "interleaved"),
    ("glm4_moe", "partial")])
def test_a_wrong_setting_is_seen(case, change, monkeypatch):
    """The comparison can fail: choosing without the score-correction bias, MLA's softmax
    scale without YaRN's mscale squared, the rotation without YaRN, V2's pairs rotated as
    halves, or all of GLM-4.5's head rotated each move the last layer's input (or the final
    states) beyond the tolerance."""
    want = expected(case)
    if change == "softmax_scale":
        monkeypatch.setattr(deepseek, "softmax_scale", lambda s, scale: scale)
    with load(case) as model:
        att = model.spec.attention
        if change == "choice_bias":
            _without_choice_bias(model)
        elif change == "yarn":
            model.rope = ops.Rope(ops.base_frequencies(10000.0, att.rope_head_dim),
                                  interleaved=True)
        elif change == "interleaved":
            model.rope = ops.rotary(model.settings, att.rope_head_dim, 10000.0)
        elif change == "partial":
            model.rope = ops.rotary(model.settings, model.head_dim, 10000.0, default_partial=1.0)
        got, final = hidden_states(model, sequences(case), [2])
    with pytest.raises(AssertionError):
        close(got[2], want["layer2"], case)
        close(final, want["final"], case)


# ---------------------------------------------------------------------------------------------
# The commands on the fixtures.


def _tensor(case: str, name: str) -> np.ndarray:
    st = pytest.importorskip("safetensors.numpy")
    return st.load_file(str(FORWARD / case / "model.safetensors"))[name]


def _experts_of(case: str, layer: int) -> list[tuple[np.ndarray, ...]]:
    """(gate, up, down) of each routed expert, then of the shared one, [out, in] as stored:
    one matrix each or fused (V3's fixture)."""
    st = pytest.importorskip("safetensors.numpy")
    tensors = st.load_file(str(FORWARD / case / "model.safetensors"))
    prefix = f"model.layers.{layer}.mlp."
    if prefix + "experts.gate_up_proj" in tensors:
        gate_up, down = tensors[prefix + "experts.gate_up_proj"], tensors[prefix +
                                                                            "experts.down_proj"]
        routed = [(gate_up[e, :WIDTH], gate_up[e, WIDTH:], down[e]) for e in range(EXPERTS)]
    else:
        routed = [tuple(tensors[f"{prefix}experts.{e}.{m}_proj.weight"]
                        for m in ("gate", "up", "down")) for e in range(EXPERTS)]
    shared = tuple(tensors[f"{prefix}shared_experts.{m}_proj.weight"]
                   for m in ("gate", "up", "down"))
    return [*routed, shared]


def _oracle_ffn(case: str, layer: int) -> np.ndarray:
    """The layer's FFN output from transformers' chosen experts and weights, token by token,
    in float64, plus the shared expert."""
    want = expected(case)
    x = want[f"layer{layer}"].astype(np.float64)
    experts = _experts_of(case, layer)

    def swiglu(e: int, t: int) -> np.ndarray:
        g, u, d = experts[e]
        return d @ (F.silu(g @ x[t]) * (u @ x[t]))

    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for e, w in zip(want[f"chosen{layer}"][t], want[f"weights{layer}"][t], strict=True):
            out[t] += w * swiglu(int(e), t)
        out[t] += swiglu(EXPERTS, t)
    return out


@pytest.mark.parametrize("case", CASES)
def test_run_a_layer_on_transformers_input(cli, tmp_path, case):
    np.save(tmp_path / "x.npy", expected(case)["layer2"])
    r = cli("run", "--weights", FORWARD / case, "--layer", "2", "--input", tmp_path / "x.npy",
            "--json")
    assert r.code == 0, r.err
    close(np.array(r.json()["output"]), _oracle_ffn(case, 2), f"{case} run")


@pytest.mark.parametrize("case", CASES)
def test_capture_matches_transformers(cli, tmp_path, case):
    want = expected(case)
    folder = FORWARD / case
    r = cli("capture", "--weights", folder, "--ids", folder / "ids.txt", "--out",
            tmp_path / "out", "--json")
    assert r.code == 0, r.err
    assert r.json()["layers"] == [0, 1, 2]
    for i in range(3):
        close(np.load(tmp_path / "out" / f"layer{i}.npy"), want[f"layer{i}"], f"{case} {i}")


@pytest.mark.parametrize("case", CASES)
def test_relu_stats_counts_each_expert_on_the_tokens_routed_to_it(cli, case):
    """Each expert's tokens are those transformers routed to it; its inactive units those
    whose gate pre-activation (of transformers' FFN input) is <= 0; layer 0 dense."""
    want = expected(case)
    folder = FORWARD / case
    r = cli("relu-stats", "--weights", folder, "--ids", folder / "ids.txt", "--json")
    assert r.code == 0, r.err
    layers = {d["layer"]: d for d in r.json()["layers"]}
    assert not layers[0].get("per_expert")
    for i in MOE_LAYERS:
        x = want[f"layer{i}"]
        experts = _experts_of(case, i)
        per_expert = {d["expert"]: d for d in layers[i]["per_expert"]}
        for e in range(EXPERTS):
            rows = np.flatnonzero((want[f"chosen{i}"] == e).any(axis=1))
            if rows.size == 0:
                assert per_expert.get(e, {"tokens": 0})["tokens"] == 0
                continue
            pre = x[rows] @ experts[e][0].T  # (tokens routed, d_ff)
            assert per_expert[e]["tokens"] == rows.size
            assert per_expert[e]["mean_inactive_fraction"] == pytest.approx(
                float((pre <= 0).mean()), abs=1e-12)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_perplexity_is_transformers(case, protocol):
    want = _expected(case)["float32"]["dense"][protocol]
    with _open(case) as m:
        r = perplexity(m, _as_fixture(_ids(case), 32, want), Protocol(32, **PROTOCOLS[protocol]))
    assert (r.tokens_scored, r.windows) == (want["tokens_scored"], want.get("windows", r.windows))
    assert r.perplexity == pytest.approx(want["perplexity"], rel=1e-4)
    assert r.nll_mean == pytest.approx(want["nll_mean"], rel=1e-4)


@pytest.fixture
def seen(monkeypatch) -> dict[int, list[np.ndarray]]:
    """The chosen experts the experts job counts, per RoutingCounts (one a layer)."""
    found: dict[int, list[np.ndarray]] = {}

    class Keeping(experts_job.RoutingCounts):
        def update(self, chosen, positions, **kw):  # type: ignore[no-untyped-def]
            found.setdefault(id(self), []).append(chosen.copy())
            super().update(chosen, positions, **kw)

    monkeypatch.setattr(experts_job, "RoutingCounts", Keeping)
    return found


@pytest.mark.parametrize("case", CASES)
def test_experts_chooses_as_transformers_router(cli, seen, case):
    """experts: every token's chosen experts in layers 1 and 2 are those transformers'
    router chose, the loads a count of them, layer 0 listed dense, the shared expert apart."""
    want = expected(case)
    folder = FORWARD / case
    r = cli("experts", "--weights", folder, "--ids", folder / "ids.txt", "--json", "--quiet")
    assert r.code == 0, r.err
    doc = r.json()
    assert (doc["tokens"], doc["dense_layers"]) == (21, [0])
    chosen = [np.concatenate(parts) for parts in seen.values()]
    assert len(chosen) == len(MOE_LAYERS)
    for i, got, summary in zip(MOE_LAYERS, chosen, doc["layers"], strict=True):
        theirs = want[f"chosen{i}"]
        np.testing.assert_array_equal(np.sort(got, 1), np.sort(theirs, 1))
        assert summary["layer"] == i
        assert summary["load"] == np.bincount(theirs.ravel(), minlength=EXPERTS).tolist()
        assert json.dumps(summary).count("shared") >= 1


def test_the_v3_fixture_is_fused_the_others_are_not():
    """Both of transformers 5's ways of saving experts are read: V3's fixture holds them
    fused (3-D), V2's and GLM-4.5's one matrix an expert."""
    def names(case: str) -> set[str]:
        raw = (FORWARD / case / "model.safetensors").read_bytes()
        return set(json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")]))

    assert "model.layers.1.mlp.experts.gate_up_proj" in names("deepseek_v3")
    for case in ("deepseek_v2", "glm4_moe"):
        assert "model.layers.1.mlp.experts.0.gate_proj.weight" in names(case)
