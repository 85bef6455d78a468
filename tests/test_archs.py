"""Every supported model type counted as transformers builds it (issue 12).

tests/data/arch_totals.json holds totals computed by tests/fixtures/make_arch_totals.py with
transformers itself (each class built on the meta device, unique parameters counted); these
tests do not import torch. Where a model card publishes a figure, it is quoted beside the test.
"""

from __future__ import annotations

import json

import pytest
from conftest import DATA

from ffncli.counting.model import count
from ffncli.specs.archs import spec_from_config

FIXTURE = json.loads((DATA / "arch_totals.json").read_text())
MODELS = FIXTURE["models"]


def counted(name: str):
    return count(spec_from_config(dict(MODELS[name]["config"]), name))


def test_fixture_records_its_versions():
    assert FIXTURE["transformers"] == "5.24.0" and FIXTURE["torch"].startswith("2.13.0")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_total_and_active_match_transformers(name):
    c = counted(name)
    assert (c.total, c.active) == (MODELS[name]["total"], MODELS[name]["active"])


# The six configs ffncli miscounted before issue 12 (each of these failed on main).
FIXES = {
    # GemmaConfig's head_dim defaults to 256, not hidden_size / heads (-307,200 as 8).
    "fix-gemma-no-head-dim": 176_448,
    # Phi's qk_layernorm adds a LayerNorm (weight and bias) of head_dim on Q and on K.
    "fix-phi-qk-layernorm": 21_573,
    # OPT without layer_norm_elementwise_affine has weightless LayerNorms.
    "fix-opt-no-affine": 20_096,
    # Mistral has no attention biases, whatever attention_bias says.
    "fix-mistral-attention-bias": 21_984,
    # Qwen2 always has Q/K/V biases, whatever attention_bias says.
    "fix-qwen2-no-attention-bias": 22_112,
    # RobertaConfig defaults: vocab_size 50265 and type_vocab_size 2 (not BERT's 30522, nor 1).
    "fix-roberta-defaults": 1_641_056,
}


@pytest.mark.parametrize("name", sorted(FIXES))
def test_the_six_fixed_configs(name):
    assert counted(name).total == FIXES[name] == MODELS[name]["total"]


def test_gemma_reads_hidden_act_when_hidden_activation_is_null():
    """transformers 5 reads hidden_act ("gelu" meaning the tanh GELU); older ones read
    hidden_activation. Either way the tanh GELU, and an unknown name is refused."""
    base = dict(MODELS["fix-gemma-hidden-act"]["config"])
    assert spec_from_config(base, "c").ffn.activation == "gelu_tanh"
    silu = {**base, "hidden_act": "silu"}
    assert spec_from_config(silu, "c").ffn.activation == "silu"
    newer = {**base, "hidden_act": "silu", "hidden_activation": "gelu_pytorch_tanh"}
    assert spec_from_config(newer, "c").ffn.activation == "gelu_tanh"


def test_distilbert_sinusoidal_positions_are_still_parameters():
    """create_sinusoidal_embeddings fills a frozen nn.Embedding: parameters() lists it and
    the checkpoint holds it, so the count does too."""
    c = counted("fix-distilbert-sinusoidal")
    assert c.total == MODELS["fix-distilbert-sinusoidal"]["total"] == 20_352
    assert any(r.name == "position embeddings" and r.params == 64 * 32 for r in c.other_rows)


# Published figures (model cards, rounded as published) beside the exact transformers totals.
PUBLISHED = {
    # Qwen3-0.6B card: "Number of Parameters: 0.6B"; "Number of Paramaters (Non-Embedding): 0.44B"
    "Qwen3-0.6B": (0.6, None),
    # Qwen3-30B-A3B card: "Number of Parameters: 30.5B in total and 3.3B activated"
    "Qwen3-30B-A3B": (30.5, 3.3),
    # Qwen1.5-MoE-A2.7B card: "14.3B parameters in total and 2.7B activated parameters"
    "Qwen1.5-MoE-A2.7B": (14.3, 2.7),
    # gemma-2-2b: 2,614,341,888 parameters (the safetensors' parameter count on its model page)
    "gemma-2-2b": (2.6, None),
    # Phi-3-mini card: "a 3.8B parameters, lightweight, state-of-the-art open model"
    "Phi-3-mini-4k": (3.8, None),
    # starcoder2-3b card: "StarCoder2-3B model is a 3B parameter model"
    "starcoder2-3b": (3, None),
    # StarCoderBase card: "The StarCoderBase models are 15.5B parameter models"
    "starcoderbase": (15.5, None),
    # santacoder card: "The SantaCoder models are a series of 1.1B parameter models"
    "santacoder-gpt_bigcode": (1.1, None),
    # stablelm-2-1_6b card: "a 1.6 billion parameter decoder-only language model"
    "stablelm-2-1_6b": (1.6, None),
    # bloom-560m card: "559,214,592 parameters"
    "bloom-560m": (0.56, None),
    # MPT-7B card: "n_parameters 6.7B"
    "mpt-7b": (6.7, None),
    # DeepSeek-V3 card: "671B total parameters with 37B activated for each token" (the 14B
    # multi-token-prediction module is not part of DeepseekV3ForCausalLM)
    "DeepSeek-V3": (671, 37),
    # C4AI Command-R card: "a 35 billion parameter" model
    "c4ai-command-r-v01": (35, None),
}


def _agrees(count: int, published: float) -> bool:
    """Within one unit of the published figure's last digit (cards round and truncate)."""
    text = repr(published)
    step = 10.0 ** -(len(text.split(".")[1]) if "." in text else 0)
    return abs(count / 1e9 - published) <= step


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_real_configs_agree_with_published_figures(name):
    c = counted(name)
    total, active = PUBLISHED[name]
    assert _agrees(c.total, total)
    if active is not None:
        assert _agrees(c.active, active)


def test_exact_published_totals():
    assert counted("bloom-560m").total == 559_214_592
    assert counted("gemma-2-2b").total == 2_614_341_888
    assert counted("stablelm-2-1_6b").total == 1_644_515_328
    assert counted("xlm-roberta-base").total == 278_043_648
