"""``params --weights`` on a checkpoint of each 2025-26 family: every tensor in its part
(embeddings, attention or the mixer in its place, norms, FFN with its routed experts, shared
experts and router apart, head, other), checked on a header-only safetensors file of the names
and shapes transformers 5.25 builds for the type's defaults (tests/helpers/zoo_checkpoints.py)
against the zoo's truth (total, each decoder layer's FFN) and ffncli's count of the same config
(each group, and each FFN part from the count's rows)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import DATA
from helpers.zoo_checkpoints import (
    NAMES,
    decoder_stack,
    ffn_parts,
    layer_of,
    shapes,
    truth,
    write_safetensors,
)

import ffncli
from ffncli.counting.files import ffn_part_of, group_of

# Keys a type's defaults leave null that transformers needs (as tests/test_zoo_counts.py).
COMPLETED = {"deepseek_v2": {"num_experts_per_tok": 6}}


def _config(tmp_path, model_type):
    data = json.loads((DATA / "zoo" / "configs" / f"{model_type}.config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**data, **COMPLETED.get(model_type, {})}))
    return path


def _spec_ffn_parts(path) -> dict[str, int]:
    return ffn_parts(ffncli.count(ffncli.load_spec(config=path)))


@pytest.mark.parametrize("model_type", sorted(NAMES))
def test_each_tensor_is_in_its_part(cli, tmp_path, model_type):
    config = _config(tmp_path, model_type)
    weights = write_safetensors(tmp_path / "model.safetensors", shapes(model_type))
    r = cli("params", "--config", config, "--weights", weights, "--json")
    assert r.code == 0, r.err
    doc, want = r.json(), truth(model_type)
    assert (doc["mismatches"], doc["file_groups"]["other"] == doc["groups"].get("other", 0)) \
        == ({}, True)
    assert doc["file_params"] == doc["total_params"] == want["total"]
    assert doc["file_ffn_parts"] == _spec_ffn_parts(config)
    ffn: dict[int, int] = {}
    for name, shape in shapes(model_type).items():
        i = layer_of(name)
        if i is not None and group_of(name) == "ffn":
            ffn[i] = ffn.get(i, 0) + math.prod(shape)
    stack = decoder_stack(model_type)
    assert [ffn.get(i, 0) for i in range(len(stack["ffn"]))] == stack["ffn"]


# The families whose parts are checked above, by what is new in them.
FAMILIES = {
    "shared experts and a router": ("qwen2_moe", "deepseek_v3", "glm4_moe", "llama4_text",
                                    "qwen3_next", "ernie4_5_moe"),
    "latent attention (MLA)": ("deepseek_v2", "deepseek_v3", "minicpm3"),
    "attention sinks, fused experts with biases": ("gpt_oss",),
    "Mamba and linear-attention mixers": ("jamba", "mamba2", "qwen3_next"),
    "AltUp, LAuReL, per-layer inputs": ("gemma3n_text",),
}


def test_every_family_has_a_checkpoint():
    assert {t for types in FAMILIES.values() for t in types} <= set(NAMES)


def _per_expert(model_type: str) -> dict[str, tuple[int, ...]]:
    """The type's tensors as its checkpoints on the Hub keep experts: one gate, up and down
    matrix per expert (transformers 5 fuses them on load)."""
    out: dict[str, tuple[int, ...]] = {}
    for name, shape in shapes(model_type).items():
        stem, _, leaf = name.rpartition(".")
        if leaf == "gate_up_proj":
            e, two_f, d = shape
            for k in range(e):
                out[f"{stem}.{k}.gate_proj.weight"] = out[f"{stem}.{k}.up_proj.weight"] = \
                    (two_f // 2, d)
        elif leaf == "down_proj" and len(shape) == 3:
            for k in range(shape[0]):
                out[f"{stem}.{k}.down_proj.weight"] = shape[1:]
        else:
            out[name] = shape
    return out


@pytest.mark.parametrize("model_type", ["qwen3_moe", "deepseek_v3", "qwen2_moe"])
def test_experts_one_matrix_each_as_the_hub_keeps_them(cli, tmp_path, model_type):
    config = _config(tmp_path, model_type)
    weights = write_safetensors(tmp_path / "model.safetensors", _per_expert(model_type))
    doc = cli("params", "--config", config, "--weights", weights, "--json").json()
    assert doc["mismatches"] == {} and doc["file_params"] == truth(model_type)["total"]
    assert doc["file_ffn_parts"] == _spec_ffn_parts(config)


@pytest.mark.parametrize(("name", "group", "part"), [
    ("model.layers.3.mlp.gate.weight", "ffn", "router"),  # DeepSeek, Qwen-MoE, Mixtral (v5)
    ("model.layers.0.block_sparse_moe.gate.weight", "ffn", "router"),  # Mixtral on the Hub
    ("model.layers.0.mlp.router.bias", "ffn", "router"),  # gpt-oss
    ("model.layers.1.mlp.gate.moe_statics.e_score_correction_bias", "ffn", "router"),  # ERNIE
    ("model.layers.0.mlp.experts.gate_up_proj_bias", "ffn", "experts"),  # gpt-oss
    ("model.layers.0.mlp.experts.7.w1.weight", "ffn", "experts"),
    ("model.layers.0.mlp.shared_expert_gate.weight", "ffn", "shared experts"),  # Qwen2-MoE
    ("model.layers.0.mlp.shared_experts.down_proj.weight", "ffn", "shared experts"),
    ("model.layers.0.feed_forward.shared_expert.up_proj.weight", "ffn", "shared experts"),
    ("model.layers.0.mlp.gate_proj.weight", "ffn", "ffn"),  # a dense FFN
    ("model.layers.0.self_attn.sinks", "attention", None),  # gpt-oss
    ("model.layers.0.linear_attn.norm.weight", "attention", None),  # Gated DeltaNet's norm
    ("model.layers.0.mamba.dt_layernorm.weight", "attention", None),  # Jamba's mixer
    ("backbone.layers.0.mixer.norm.weight", "attention", None),  # Mamba-2's mixer
    ("backbone.layers.0.norm.weight", "norms", None),
    ("model.layers.0.laurel.post_laurel_norm.weight", "other", None),  # Gemma 3n
    ("model.altup_unembed_projections.0.weight", "other", None),
    ("model.embed_tokens_per_layer.weight", "embeddings", None),
])
def test_group_and_part_of_a_name(name, group, part):
    assert group_of(name) == group
    if part is not None:
        assert ffn_part_of(name) == part


def test_ernie_s_score_correction_bias_is_a_parameter_deepseek_s_a_buffer():
    """ERNIE 4.5 keeps the router's bias in a module of its own, as a parameter (its truth
    counts it); DeepSeek-V3's is a buffer."""
    from ffncli.counting.files import is_buffer
    from ffncli.formats.safetensors import TensorInfo

    assert not is_buffer(TensorInfo("model.layers.1.mlp.gate.moe_statics.e_score_correction_bias",
                                    "F32", (1, 64), 0, 256))
    assert is_buffer(TensorInfo("model.layers.3.mlp.gate.e_score_correction_bias", "F32",
                                (256,), 0, 1024))
