"""The mixtures of experts of issue 42 in the whole-model forward against transformers 5.25:
Qwen2-MoE (a shared expert behind a sigmoid gate, weights not renormalised, a dense first
layer), Qwen3-MoE (renormalised, a dense first layer, experts saved fused as 3-D tensors; and
with decoder_sparse_step 2, a dense layer after a sparse one) and OLMoE (Q and K norms over the
whole projection, clip_qkv). tests/data/forward/<case>/expected.npz
holds every layer's FFN input, the final states, and each MoE layer's router outputs as
transformers' router module returned them (router{N} logits, chosen{N}, weights{N}); made by
tests/fixtures/make_forward.py, never importing torch here."""

from __future__ import annotations

import json
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

from ffncli.compute import ffn as F
from ffncli.compute.build import routing_rule
from ffncli.compute.forward.families import open_transformer
from ffncli.compute.forward.walk import hidden_states
from ffncli.jobs.resolve import resolve_spec

FORWARD = Path(__file__).parent / "data" / "forward"
CASES = ["qwen2_moe", "qwen3_moe", "olmoe", "qwen3_moe-step", "qwen3_moe-all"]
FAMILIES = CASES[:3]
REL = 1e-4  # the tolerance the other families meet (test_forward.assert_close)
MOE_LAYERS = {"qwen2_moe": [1, 2], "qwen3_moe": [1, 2], "olmoe": [0, 1, 2],
              "qwen3_moe-step": [1], "qwen3_moe-all": [0, 1, 2]}
# DeepSeek-V2, DeepSeek-V3 (experts fused) and GLM-4.5, each with a shared expert of its own
# (no gate) and a dense first layer (their own checks: test_forward_deepseek.py)
DEEPSEEK = ["deepseek_v2", "deepseek_v3", "glm4_moe"]
CASES += DEEPSEEK
MOE_LAYERS |= dict.fromkeys(DEEPSEEK, [1, 2])


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
    ("olmoe", 0, F.MoEWeights), ("qwen2_moe", 2, F.MoEWeights),
    ("qwen3_moe-step", 0, F.GatedWeights), ("qwen3_moe-step", 1, F.MoEWeights),
    ("qwen3_moe-step", 2, F.GatedWeights)])
def test_dense_layers_are_dense(case, layer, kind):
    """mlp_only_layers [0]: layer 0 of the Qwen cases is a gated FFN of intermediate_size;
    decoder_sparse_step 2: layers 0 and 2 (a dense layer after a sparse one)."""
    with load(case) as model:
        p = model.layer(layer).engine.weights
    assert isinstance(p, kind)
    if kind is F.GatedWeights:
        assert p.w.shape == (32, 64)


def test_the_config_says_how_to_route():
    """norm_topk_prob, as the config says (Qwen3-MoE's fixture: true; the others false);
    Qwen2-MoE's shared expert and its gate are read, the others have none."""
    rules = {}
    for case in FAMILIES:
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
    if case in ("qwen3_moe", "deepseek_v3"):  # saved fused
        gate_up, down = _tensor(case, prefix + ".gate_up_proj"), _tensor(case, prefix +
                                                                         ".down_proj")
        f = gate_up.shape[1] // 2
        return [(gate_up[e, :f], gate_up[e, f:], down[e]) for e in range(gate_up.shape[0])]
    return [tuple(_tensor(case, f"{prefix}.{e}.{m}_proj.weight")  # type: ignore[misc]
                  for m in ("gate", "up", "down")) for e in range(8)]


def _oracle_ffn(case: str, layer: int) -> np.ndarray:
    """The layer's FFN output from transformers' chosen experts and weights, token by token,
    in float64, with the shared expert behind its gate (Qwen2-MoE) or ungated (DeepSeek's,
    GLM-4.5's)."""
    want = expected(case)
    x = want[f"layer{layer}"].astype(np.float64)
    experts = _experts_of(case, layer)
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for e, w in zip(want[f"chosen{layer}"][t], want[f"weights{layer}"][t], strict=True):
            g, u, d = experts[e]
            out[t] += w * (d @ (F.silu(g @ x[t]) * (u @ x[t])))
    stem = {"qwen2_moe": "shared_expert", **dict.fromkeys(DEEPSEEK, "shared_experts")}.get(case)
    if stem is not None:
        shared = [_tensor(case, f"model.layers.{layer}.mlp.{stem}.{m}_proj.weight")
                  for m in ("gate", "up", "down")]
        gate = _tensor(case, f"model.layers.{layer}.mlp.shared_expert_gate.weight")[0] \
            if case == "qwen2_moe" else None
        for t in range(x.shape[0]):
            y = shared[2] @ (F.silu(shared[0] @ x[t]) * (shared[1] @ x[t]))
            out[t] += y if gate is None else y / (1 + np.exp(-(gate @ x[t])))
    return out


@pytest.mark.parametrize("case", CASES)
def test_run_a_layer_on_transformers_input(cli, tmp_path, case):
    """run --input (transformers' FFN input of the last MoE layer) --layer N: the output is
    the sum over transformers' chosen experts with transformers' weights."""
    i = MOE_LAYERS[case][-1]
    check_run(cli, tmp_path, case, i, _oracle_ffn(case, i), close)


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


# ---------------------------------------------------------------------------------------------
# Bad checkpoints and configs: one line, exit 2.


def _edited(tmp_path: Path, case: str, config: dict | None = None, drop: str | None = None,
            tensors: dict[str, np.ndarray] | None = None) -> Path:
    st = pytest.importorskip("safetensors.numpy")
    folder = tmp_path / case
    folder.mkdir()
    settings = json.loads((FORWARD / case / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**settings, **(config or {})}))
    weights = st.load_file(str(FORWARD / case / "model.safetensors"))
    weights = {k: v for k, v in weights.items() if k != drop}
    st.save_file({**weights, **(tensors or {})}, str(folder / "model.safetensors"))
    return folder


L1 = "model.layers.1.mlp"
HOSTILE = [
    ("qwen3_moe", None, f"{L1}.experts.down_proj", None,
     "{w}/model.safetensors: no tensor 'layers.1.mlp.experts.down_proj' for layer 1 (the file "
     "has layers 0-2)"),
    ("qwen3_moe", None, None, {f"{L1}.experts.gate_up_proj": np.zeros((7, 32, 32), np.float32)},
     "{w}/model.safetensors: 'layers.1.mlp.experts.gate_up_proj': expected 8 experts of shape "
     "(32, 32), got shape (7, 32, 32)"),
    ("qwen2_moe", None, f"{L1}.shared_expert_gate.weight", None,
     "{w}/model.safetensors: no tensor 'layers.1.mlp.shared_expert_gate.weight' for layer 1 "
     "(the file has layers 0-2)"),
    ("qwen2_moe", None, None, {f"{L1}.shared_expert_gate.weight": np.zeros((2, 32), np.float32)},
     "{w}/model.safetensors: 'shared_gate': expected shape (32, 1), got (32, 2)"),
    ("qwen3_moe", {"norm_topk_prob": "yes"}, None, None,
     "{w}/config.json: key 'norm_topk_prob': expected true or false, got 'yes'"),
    ("olmoe", {"clip_qkv": -1}, None, None,
     "{w}/config.json: key 'clip_qkv': expected a positive number, got -1"),
]


@pytest.mark.parametrize("case,config,drop,tensors,message", HOSTILE)
def test_bad_mixtures_are_one_line(cli, tmp_path, case, config, drop, tensors, message):
    folder = _edited(tmp_path, case, config, drop, tensors)
    (tmp_path / "ids.txt").write_text("1 2 3\n")
    r = cli("capture", "--weights", folder, "--ids", tmp_path / "ids.txt", "--out",
            tmp_path / "out", "--layer", "1")
    assert (r.code, r.err) == (2, f"error: {message.format(w=folder)}\n")


# ---------------------------------------------------------------------------------------------
# GGUF files of qwen3moe and olmoe, written with the gguf package from the all-MoE fixtures.

GGUF_CASES = {"qwen3moe": ("qwen3_moe-all", "softmax top-2, renormalised"),
              "olmoe": ("olmoe", "softmax top-2")}


def moe_gguf(path: Path, arch: str) -> Path:
    """The fixture's tensors under llama.cpp's names (convert_hf_to_gguf.py's Qwen3MoeModel
    and OlmoeModel: no Q/K reordering, the experts stacked [experts, out, in]) and their
    metadata keys (OLMoE's clip_qkv as attention.clamp_kqv), float32."""
    gguf = pytest.importorskip("gguf")
    st = pytest.importorskip("safetensors.numpy")
    case = GGUF_CASES[arch][0]
    c = json.loads((FORWARD / case / "config.json").read_text())
    t = st.load_file(str(FORWARD / case / "model.safetensors"))
    n, e = c["num_hidden_layers"], c.get("num_experts") or c["num_local_experts"]
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in {"block_count": n, "context_length": c["max_position_embeddings"],
                       "embedding_length": c["hidden_size"],
                       "feed_forward_length": c["intermediate_size"],
                       "attention.head_count": c["num_attention_heads"],
                       "attention.head_count_kv": c["num_key_value_heads"],
                       "attention.key_length": c["head_dim"],
                       "attention.value_length": c["head_dim"], "expert_count": e,
                       "expert_used_count": c["num_experts_per_tok"],
                       "expert_feed_forward_length": c.get("moe_intermediate_size")
                       or c["intermediate_size"]}.items():
        w.add_uint32(f"{arch}.{key}", value)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", c["rms_norm_eps"])
    w.add_float32(f"{arch}.rope.freq_base", c["rope_theta"])
    if c.get("clip_qkv") is not None:
        w.add_clamp_kqv(c["clip_qkv"])
    w.add_token_list([f"t{i}" for i in range(c["vocab_size"])])
    w.add_tensor("token_embd.weight", t["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", t["model.norm.weight"])
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "mlp.gate": "ffn_gate_inp"}
    for i in range(n):
        for ours, theirs in names.items():
            w.add_tensor(f"blk.{i}.{theirs}.weight", t[f"model.layers.{i}.{ours}.weight"])
        for m in ("gate", "up", "down"):
            w.add_tensor(f"blk.{i}.ffn_{m}_exps.weight", np.stack([
                t[f"model.layers.{i}.mlp.experts.{x}.{m}_proj.weight"] for x in range(e)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("arch", GGUF_CASES)
def test_a_moe_gguf_runs_as_transformers(tmp_path, arch):
    """llama.cpp's qwen3moe and olmoe: Q and K rows as transformers has them, the top-k weights
    renormalised or not as the architecture fixes it (not a key), the experts stacked;
    OLMoE's clamp read from attention.clamp_kqv."""
    path = moe_gguf(tmp_path / "model.gguf", arch)
    case, rule = GGUF_CASES[arch]
    want = expected(case)
    spec = resolve_spec(None, None, weights=path, weights_describe=True)
    with open_transformer(spec, path, np.dtype(np.float32)) as model:
        got, final = hidden_states(model, sequences(case), [0, 1, 2])
        for i in range(3):
            close(got[i], want[f"layer{i}"], f"{arch} gguf layer {i}")
            p = model.layer(i).engine.weights
            assert p.describe() == rule
            np.testing.assert_array_equal(F.route(want[f"layer{i}"], p)[0], want[f"chosen{i}"])
    close(final, want["final"], f"{arch} gguf final")


def test_a_moe_gguf_through_capture(cli, tmp_path):
    path = moe_gguf(tmp_path / "model.gguf", "qwen3moe")
    r = cli("capture", "--weights", path, "--ids", FORWARD / "qwen3_moe-all" / "ids.txt",
            "--out", tmp_path / "out", "--layer", "2")
    assert r.code == 0, r.err
    close(np.load(tmp_path / "out" / "layer2.npy"), expected("qwen3_moe-all")["layer2"], "gguf")


# ---------------------------------------------------------------------------------------------
# The rules of the families the forward does not run yet (their attention or their dense
# layers), read from the config for who routes their inputs.


def _rule_of(path: Path, **edits: object) -> F.Routing:
    from ffncli.base.validate import Keys
    from ffncli.specs.archs import spec_from_config

    data = {**json.loads(path.read_text()), **edits}
    return routing_rule(spec_from_config(data, str(path)), Keys(data, str(path)))


ZOO = Path(__file__).parent / "data" / "zoo" / "configs"
V3 = Path(__file__).parent / "data" / "configs" / "deepseek-v3.config.json"


@pytest.mark.parametrize("path,edits,rule", [
    (V3, {}, F.Routing(score="sigmoid", groups=8, top_groups=4, scale=2.5)),
    (V3, {"norm_topk_prob": False, "routed_scaling_factor": 1.5},
     F.Routing(score="sigmoid", renormalise=False, groups=8, top_groups=4, scale=1.5)),
    (ZOO / "glm4_moe.config.json", {}, F.Routing(score="sigmoid")),
    (ZOO / "deepseek_v2.config.json", {"num_experts_per_tok": 6}, F.Routing(renormalise=False)),
    (ZOO / "deepseek_v2.config.json", {"num_experts_per_tok": 6, "n_group": 8,
                                        "topk_group": 3, "topk_method": "group_limited_greedy",
                                        "routed_scaling_factor": 16.0},
     F.Routing(renormalise=False, groups=8, top_groups=3, group_score="max", scale=16.0)),
])
def test_the_routing_rules_of_deepseek_and_glm_from_their_configs(path, edits, rule):
    assert _rule_of(path, **edits) == rule


@pytest.mark.parametrize("edits,got", [({"n_group": 7}, "7 and 4"),
                                       ({"topk_group": 9}, "8 and 9")])
def test_groups_that_do_not_fit_are_refused(edits, got):
    from ffncli.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        _rule_of(V3, **edits)
    assert str(exc.value) == (f"{V3}: keys 'n_group' and 'topk_group': expected groups "
                              f"dividing the 256 experts, at most n_group of them chosen, got "
                              f"{got}")


@pytest.mark.parametrize("arch", GGUF_CASES)
def test_run_a_gguf_layer_routes_as_llama_cpp(cli, tmp_path, arch):
    """run --weights model.gguf --layer 1 (no config.json: the rule the architecture fixes)
    on transformers' input: transformers' chosen experts and weights."""
    case = GGUF_CASES[arch][0]
    path = moe_gguf(tmp_path / "model.gguf", arch)
    np.save(tmp_path / "x.npy", expected(case)["layer1"])
    r = cli("run", "--weights", path, "--layer", "1", "--input", tmp_path / "x.npy", "--json")
    assert r.code == 0, r.err
    close(np.array(r.json()["output"]), _oracle_ffn(case, 1), f"{arch} gguf run")


def test_the_library_reads_the_rule_beside_the_weights():
    """ffncli.build_ffn(spec, weights=folder): the config.json beside the weights says how
    the router chooses (Qwen3-MoE's fixture: renormalised, not Qwen3MoeConfig's default)."""
    import ffncli

    spec = resolve_spec(None, FORWARD / "qwen3_moe" / "config.json")
    ffn = ffncli.build_ffn(spec, weights=FORWARD / "qwen3_moe", layer=1)
    assert ffn.weights.describe() == "softmax top-2, renormalised"


QWEN_RULES = {"qwen2_moe": "softmax top-2", "qwen3_moe": "softmax top-2, renormalised",
              "olmoe": "softmax top-2", "qwen3_moe-step": "softmax top-2, renormalised",
              "qwen3_moe-all": "softmax top-2, renormalised"}


@pytest.mark.parametrize("case", CASES[:5])
def test_experts_equal_the_router_records(cli, case):
    """The experts command profiles the MoE layers only (dense ones left out), its loads are
    counts of transformers' chosen experts, its rule and shared experts the family's."""
    check_experts(cli, case, MOE_LAYERS[case], 8, 1 if case == "qwen2_moe" else 0,
                  QWEN_RULES[case])
