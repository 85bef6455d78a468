"""DeepSeek-V2, DeepSeek-V3 and GLM-4.5 (``glm4_moe``) in the whole-model forward against
transformers 5.25 (issue 42 section 1): MLA (V2 through q_proj, V3 through q_lora_rank with
biases and YaRN), GLM-4.5's biased, qk-normed, half-rotated heads; a dense first layer, then
8 routed experts in 4 groups (V2: softmax, groups by their best, scaled; V3 and GLM-4.5:
sigmoid plus the score-correction bias for choosing, groups by their two best, renormalised,
scaled) and a shared expert. What every MoE family meets (states, router outputs, run,
capture, relu-stats) is tests/test_forward_moe.py's, these cases among its own; perplexity is
tests/test_perplexity_torch.py's. Here: how the layers are read, that each setting matters,
and ``experts`` against transformers' router. Fixtures made by tests/fixtures/make_forward.py;
torch is never imported here."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.forward_cases import expected
from test_experts import seen  # noqa: F401  (the fixture)
from test_forward_moe import DEEPSEEK, FORWARD, _tensor, close, load, sequences

from ffncli.compute import ffn as F
from ffncli.compute.forward import deepseek, ops
from ffncli.compute.forward.families import open_transformer
from ffncli.compute.forward.walk import hidden_states
from ffncli.jobs.resolve import resolve_spec

CASES = DEEPSEEK
MOE_LAYERS = [1, 2]  # first_k_dense_replace 1
D, EXPERTS, WIDTH, DENSE_WIDTH = 64, 8, 8, 32  # hidden, n_routed_experts, their widths
RULES = {"deepseek_v2": "softmax top-2, 4 groups top-2 by max, x1.5",
         "deepseek_v3": "sigmoid + bias top-2, renormalised, 4 groups top-2, x2.5",
         "glm4_moe": "sigmoid + bias top-2, renormalised, 4 groups top-2, x2"}


@pytest.mark.parametrize("case", CASES)
def test_the_layers_are_read_as_the_config_says(case):
    """Layer 0 dense (intermediate_size 32), layers 1 and 2 eight experts of 8 and one shared
    expert of 8 (n_shared_experts 1), no gate on it; the score-correction bias read where the
    router is sigmoid; the rule named from the config."""
    with load(case) as model:
        dense = model.layer(0).engine.weights
        assert isinstance(dense, F.GatedWeights) and dense.w.shape == (D, DENSE_WIDTH)
        for i in MOE_LAYERS:
            p = model.layer(i).engine.weights
            assert isinstance(p, F.MoEWeights) and len(p.experts) == EXPERTS
            assert isinstance(p.shared, F.GatedWeights) and p.shared.w.shape == (D, WIDTH)
            assert p.shared_gate is None and p.describe() == RULES[case]
            assert (p.choice_bias is None) == (case == "deepseek_v2")
            if p.choice_bias is not None:
                bias = _tensor(case, f"model.layers.{i}.mlp.gate.e_score_correction_bias")
                np.testing.assert_array_equal(p.choice_bias, bias)


def load_from(weights):
    spec = resolve_spec(None, None, weights=weights, weights_describe=True)
    return open_transformer(spec, weights, np.dtype(np.float32))


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


@pytest.mark.parametrize("case", ["deepseek_v3", "glm4_moe"])
def test_the_multi_token_prediction_layer_is_left_out(tmp_path, case):
    """A checkpoint as DeepSeek-V3 and GLM-4.5 publish them: after the num_hidden_layers
    layers, the multi-token-prediction layer (here layer 3: a copy of layer 2 with eh_proj,
    enorm, hnorm, its own embed_tokens and shared_head's norm and head). The forward runs the
    3 layers of the main model, ending in its own norm; its head is the main model's."""
    st = pytest.importorskip("safetensors.numpy")
    tensors = st.load_file(str(FORWARD / case / "model.safetensors"))
    rng = np.random.default_rng(0)
    extra = {k.replace("layers.2.", "layers.3."): v for k, v in tensors.items()
             if k.startswith("model.layers.2.")}
    extra |= {f"model.layers.3.{n}.weight": rng.normal(size=D).astype(np.float32)
              for n in ("enorm", "hnorm", "shared_head.norm")}
    extra |= {"model.layers.3.eh_proj.weight": rng.normal(size=(D, 2 * D)).astype(np.float32),
              "model.layers.3.embed_tokens.weight": rng.normal(size=(128, D)).astype(np.float32),
              "model.layers.3.shared_head.head.weight":
                  rng.normal(size=(128, D)).astype(np.float32)}
    st.save_file(tensors | extra, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_bytes((FORWARD / case / "config.json").read_bytes())
    assert json.loads((tmp_path / "config.json").read_text())["num_nextn_predict_layers"] == 1
    want = expected(case)
    with load_from(tmp_path / "model.safetensors") as model:
        assert model.n_layers == 3 and model.head_tensor() == "model.embed_tokens.weight"
        _, final = hidden_states(model, sequences(case), [])
    close(final, want["final"], f"{case} final")


# ---------------------------------------------------------------------------------------------
# The commands on the fixtures.


@pytest.mark.parametrize("case", CASES)
def test_experts_chooses_as_transformers_router(cli, seen, case):  # noqa: F811
    """experts: every token's chosen experts in layers 1 and 2 are those transformers'
    router chose (as sets: transformers' DeepSeek routers call torch.topk(sorted=False)), the
    loads a count of them, layer 0 listed dense, the shared expert apart, the rule named."""
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
        assert (summary["layer"], summary["shared_experts"]) == (i, 1)
        assert summary["load"] == np.bincount(theirs.ravel(), minlength=EXPERTS).tolist()
        assert summary["rule"] == RULES[case]


def test_the_v3_fixture_is_fused_the_others_are_not():
    """Both of transformers 5's ways of saving experts are read: V3's fixture holds them
    fused (3-D), V2's and GLM-4.5's one matrix an expert."""
    def names(case: str) -> set[str]:
        raw = (FORWARD / case / "model.safetensors").read_bytes()
        return set(json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")]))

    assert "model.layers.1.mlp.experts.gate_up_proj" in names("deepseek_v3")
    for case in ("deepseek_v2", "glm4_moe"):
        assert "model.layers.1.mlp.experts.0.gate_proj.weight" in names(case)
