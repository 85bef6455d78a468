"""Specs (specs/spec.py): the keys of a YAML preset, counted as the config readers count them,
their cross-key rules as one-line errors, and the what-if overrides (--match-params, --experts,
--beta, --d-model) applied to a spec."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

from ffncli.counting.model import count
from ffncli.counting.parts import attention_widths, ffn_params
from ffncli.errors import SpecError
from ffncli.specs.spec import (
    FfnSpec,
    Overrides,
    apply_overrides,
    load_preset,
    match_gated_d_ff,
    spec_from_mapping,
)

# ---------------------------------------------------------------------------------------------
# The spec keys added for issue 12, from a YAML preset: same counts as the config
# readers, and their cross-key rules as one-line errors.


MODELS = json.loads((DATA / "arch_totals.json").read_text())["models"]

# tiny-deepseek_v3 (transformers: 46,940 total, 37,724 active) written as a preset.
DEEPSEEK = """\
family: deepseek_v3
d_model: 32
ffn: {d_ff: 24, activation: silu, gated: true, bias: false, experts: 4, top_k: 2,
      shared_d_ff: 48}
dense_ffn: {d_ff: 48, activation: silu, gated: true, bias: false}
attention: {heads: 4, head_dim: 12, qkv_bias: false, out_bias: false, kv_lora_rank: 8,
            q_lora_rank: 12, rope_head_dim: 4, v_head_dim: 6}
norm: {kind: rmsnorm, bias: false}
layers: {decoder: 3, dense: 1}
embeddings: {vocab: 101, head: untied}
"""

# tiny-olmo2 (22,080): Q/K norms as wide as Q and K; tiny-olmo (18,784): weightless norms.
OLMO2 = """\
d_model: 32
ffn: {d_ff: 48, activation: silu, gated: true, bias: false}
attention: {heads: 4, kv_heads: 2, qkv_bias: false, out_bias: false, qk_norm: heads}
norm: {kind: rmsnorm, bias: false}
layers: {decoder: 2}
embeddings: {vocab: 101, head: untied}
"""

OLMO = """\
d_model: 32
ffn: {d_ff: 48, activation: silu, gated: true, bias: false}
attention: {heads: 4, kv_heads: 2, qkv_bias: true, out_bias: true}
norm: {affine: false}
layers: {decoder: 2}
embeddings: {vocab: 101, head: tied}
"""


@pytest.mark.parametrize("text,name", [(DEEPSEEK, "tiny-deepseek_v3"), (OLMO2, "tiny-olmo2"),
                                       (OLMO, "tiny-olmo")])
def test_presets_count_as_transformers(tmp_path, text, name):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    c = count(load_preset(str(path)))
    assert (c.total, c.active) == (MODELS[name]["total"], MODELS[name]["active"])


@pytest.mark.parametrize("change,message", [
    (("layers: {decoder: 3, dense: 1}", "layers: {decoder: 3, dense: 4}"),
     "key 'layers.dense': expected at most layers.decoder (3), got 4"),
    (("dense_ffn: {d_ff: 48, activation: silu, gated: true, bias: false}\n", ""),
     "key 'dense_ffn': layers.dense (1) needs the dense layers' FFN"),
    (("experts: 4, top_k: 2,", "experts: 1, top_k: 1,"),
     "key 'ffn.shared_d_ff': only a mixture of experts (ffn.experts > 1) has a shared expert"),
    (("kv_lora_rank: 8", "kv_lora_rank: 33"),
     "key 'attention.kv_lora_rank': expected at most d_model (32), got 33"),
    (("rope_head_dim: 4", "rope_head_dim: 12"),
     "key 'attention.rope_head_dim': latent attention needs attention.head_dim (nope + rope) "
     "larger than rope_head_dim"),
    (("kv_lora_rank: 8,", "kv_lora_rank: 0,"),
     "key 'attention.kv_lora_rank': q_lora_rank and rope_head_dim belong to latent "
     "attention (kv_lora_rank > 0)"),
])
def test_rules_of_the_new_keys(cli, tmp_path, change, message):
    path = tmp_path / "p.yaml"
    path.write_text(DEEPSEEK.replace(*change))
    with pytest.raises(SpecError) as info:
        load_preset(str(path))
    assert str(info.value) == f"{path}: {message}"
    r = cli("params", "--preset", path)
    assert (r.code, r.err) == (2, f"error: {path}: {message}\n")


def test_qk_norm_choices(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(OLMO2.replace("qk_norm: heads", "qk_norm: head_dim"))
    with pytest.raises(SpecError, match="key 'attention.qk_norm': expected one of none, head, "
                                        "heads, got 'head_dim'"):
        load_preset(str(path))


# ---------------------------------------------------------------------------------------------
# Overrides.


def test_match_params_two_thirds_rule():
    # Without biases, g = 2f/3: LLaMA's 4 * 4096 = 16384 -> 10923 (nearest), 11008 (mult. 256).
    assert match_gated_d_ff(4096, 16384, bias=False) == 10923
    assert match_gated_d_ff(4096, 16384, bias=False, multiple_of=256) == 11008
    # With biases, g = f (2d + 1) / (3d + 2): base -> 1365, within one unit of the 2-matrix FFN.
    g = match_gated_d_ff(512, 2048, bias=True)
    assert g == 1365
    dense = ffn_params(512, FfnSpec(d_ff=2048))
    gated = ffn_params(512, FfnSpec(d_ff=g, gated=True))
    assert abs(gated - dense) <= 3 * 512 + 2  # one unit of g is 3d + 2 parameters
    assert gated - dense == 170


def test_match_params_override_on_base():
    spec = apply_overrides(load_preset("base"), Overrides(activation="swiglu", match_params=True))
    assert (spec.ffn.gated, spec.ffn.activation, spec.ffn.d_ff) == (True, "silu", 1365)


def test_beta_override_reaches_the_spec():
    spec = apply_overrides(load_preset("base"), Overrides(activation="swish", beta=1.5))
    assert (spec.ffn.activation, spec.ffn.beta) == ("swish", 1.5)


def test_fewer_experts_than_top_k_clamps_top_k():
    """Mixtral with one expert is Mistral-7B, parameter for parameter."""
    spec = apply_overrides(load_preset("mixtral-8x7b"), Overrides(experts=1))
    assert (spec.ffn.experts, spec.ffn.top_k) == (1, 1)
    assert (count(spec).total, count(spec).active) == (7_241_732_096, 7_241_732_096)


def test_match_params_uses_the_overridden_d_model():
    # g = f (2d + 1) / (3d + 2) at d = 256: 2048 x 513 / 770 = 1364.45 -> 1364 (not d = 512's 1365)
    spec = apply_overrides(load_preset("base"), Overrides(d_model=256, activation="swiglu",
                                                          match_params=True))
    assert (spec.d_model, spec.ffn.d_ff) == (256, 1364)


def test_explicit_head_dim_needs_no_divisible_d_model():
    spec = spec_from_mapping({"d_model": 10, "ffn": {"d_ff": 4},
                              "attention": {"heads": 4, "head_dim": 8}}, "t")
    assert attention_widths(10, spec.attention) == (32, 32)
    with pytest.raises(SpecError, match="d_model 10 is not divisible by 4 heads"):
        spec_from_mapping({"d_model": 10, "ffn": {"d_ff": 4}, "attention": {"heads": 4}}, "t")
