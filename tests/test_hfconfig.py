"""config.json -> spec, one reader per model type (specs/hfconfig.py): counts against published
exact totals and against transformers' own classes, the reference classes' defaults for the keys
left out, and bad configs as one error line naming the key.

tests/data/arch_totals.json holds totals computed by tests/fixtures/make_arch_totals.py with
transformers itself (each class built on the meta device, unique parameters counted); these
tests do not import torch. Where a model card publishes a figure, it is quoted beside the test.
"""

from __future__ import annotations

import json

import pytest
from conftest import CONFIGS, DATA
from helpers.configs import VALUES, assert_counts_or_fails_in_one_line, assert_one_line
from hypothesis import given, settings
from hypothesis import strategies as st

from ffncli.counting.model import count
from ffncli.errors import FfnError
from ffncli.specs.archs import load_config, spec_from_config

# ---------------------------------------------------------------------------------------------
# Real configs (tests/data/configs): published totals, and what each reader decides.


# config.json: (total, active), published exact totals of the reference classes.
CONFIG_TOTALS = {
    "gpt2.config.json": (124_439_808, None),
    "bert-base-uncased.config.json": (109_482_240, None),
    "all-minilm-l6-v2.config.json": (22_713_216, None),
    "roberta-base.config.json": (124_645_632, None),
    "distilbert-base-uncased.config.json": (66_362_880, None),
    "t5-base.config.json": (222_903_552, None),
    "t5-v1_1-base.config.json": (247_577_856, None),
    "opt-350m.config.json": (331_196_416, None),
    "pythia-70m.config.json": (70_426_624, None),
    "llama-2-7b.config.json": (6_738_415_616, None),
    "llama3-8b.config.json": (8_030_261_248, None),
    "mistral-7b.config.json": (7_241_732_096, None),
    "mixtral-8x7b.config.json": (46_702_792_704, 12_879_925_248),
    "qwen2.5-0.5b.config.json": (494_032_768, None),
    "gemma-2b.config.json": (2_506_172_416, None),
    "phi-2.config.json": (2_779_683_840, None),
}


@pytest.mark.parametrize("name", sorted(CONFIG_TOTALS))
def test_config_totals_match_published(name):
    total, active = CONFIG_TOTALS[name]
    c = count(load_config(CONFIGS / name))
    assert c.total == total
    assert c.active == (active if active is not None else total)


def test_config_without_tie_key_takes_class_default():
    """gemma's config has no tie_word_embeddings: GemmaConfig ties (counting twice is a trap)."""
    spec = load_config(CONFIGS / "gemma-2b.config.json")
    assert spec.embeddings.head == "tied"
    assert spec.ffn.activation == "gelu_tanh" and spec.ffn.gated


def test_t5_v11_is_gated_tanh_gelu_and_v10_is_relu():
    v11 = load_config(CONFIGS / "t5-v1_1-base.config.json").ffn
    v10 = load_config(CONFIGS / "t5-base.config.json").ffn
    assert (v11.gated, v11.activation) == (True, "gelu_tanh")
    assert (v10.gated, v10.activation) == (False, "relu")


# ---------------------------------------------------------------------------------------------
# config.json keys left out take the reference class's defaults.


def _without(name: str, *keys: str) -> dict:
    data = json.loads((CONFIGS / name).read_text())
    for key in keys:
        data.pop(key)
    return data


@pytest.mark.parametrize("name,key", [
    ("llama-2-7b.config.json", "num_key_value_heads"),  # LlamaConfig: None -> heads
    ("mixtral-8x7b.config.json", "num_experts_per_tok"),  # MixtralConfig: 2
    ("bert-base-uncased.config.json", "type_vocab_size"),  # BertConfig: 2
])
def test_config_defaults_of_the_reference_classes(name, key):
    total, active = CONFIG_TOTALS[name]
    c = count(spec_from_config(_without(name, key), name))
    assert (c.total, c.active) == (total, active if active is not None else total)


def test_gpt2_medium_n_inner_null_is_4_d_model():
    """GPT2Config: n_inner None means 4 * n_embd. gpt2-medium: 354,823,168 parameters."""
    data = {**json.loads((CONFIGS / "gpt2.config.json").read_text()),
            "n_embd": 1024, "n_layer": 24, "n_head": 16, "n_inner": None}
    spec = spec_from_config(data, "gpt2-medium")
    assert spec.ffn.d_ff == 4096
    assert count(spec).total == 354_823_168


# ---------------------------------------------------------------------------------------------
# Every supported model type counted as transformers builds it (issue 12).


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


GEMMA_2B = json.loads((CONFIGS / "gemma-2b.config.json").read_text())  # 4.38.0.dev0, "gelu"
TINY_GEMMA = dict(MODELS["fix-gemma-hidden-act"]["config"])  # no transformers_version

# Gemma's activation as the transformers that wrote the config computes it (4.38.2 to 4.47.1:
# hidden_activation, gelu_pytorch_tanh when null; 4.48 on, and transformers 5: hidden_act;
# Gemma 2 and 3: hidden_activation always). (id, config, activation)
GEMMA_ACTIVATIONS = [
    ("gemma-2b-4.38-hidden-act-ignored", {**GEMMA_2B, "hidden_act": "silu"}, "gelu_tanh"),
    ("4.44-null-hidden-activation", {**TINY_GEMMA, "transformers_version": "4.44.2",
                                     "hidden_act": "silu", "hidden_activation": None},
     "gelu_tanh"),
    ("4.47.1-no-hidden-activation", {**TINY_GEMMA, "transformers_version": "4.47.1",
                                     "hidden_act": "relu"}, "gelu_tanh"),
    ("4.48-reads-hidden-act", {**TINY_GEMMA, "transformers_version": "4.48.0",
                               "hidden_act": "silu", "hidden_activation": "gelu_pytorch_tanh"},
     "silu"),
    ("5-reads-hidden-act", {**GEMMA_2B, "transformers_version": "5.24.0", "hidden_act": "silu",
                            "hidden_activation": "gelu_pytorch_tanh"}, "silu"),
    ("no-version-reads-hidden-act", {**TINY_GEMMA, "hidden_act": "silu",
                                     "hidden_activation": "gelu_pytorch_tanh"}, "silu"),
    ("gemma2-reads-hidden-activation", {**TINY_GEMMA, "model_type": "gemma2",
                                        "transformers_version": "5.24.0", "hidden_act": "silu",
                                        "hidden_activation": None}, "gelu_tanh"),
    ("gemma3-reads-hidden-activation", {**TINY_GEMMA, "model_type": "gemma3_text",
                                        "transformers_version": "4.50.0", "hidden_act": "relu",
                                        "hidden_activation": None}, "gelu_tanh"),
]


@pytest.mark.parametrize("config,activation", [c[1:] for c in GEMMA_ACTIVATIONS],
                         ids=[c[0] for c in GEMMA_ACTIVATIONS])
def test_gemma_activation_follows_the_transformers_that_wrote_the_config(config, activation):
    spec = spec_from_config(config, "c")
    assert spec.ffn.activation == activation
    # the count does not depend on the activation: the same with the other key read
    swapped = {**config, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": None}
    assert count(spec).total == count(spec_from_config(swapped, "c")).total


@pytest.mark.parametrize("version", [5, "latest", ["4.48.0"], ""])
def test_a_gemma_transformers_version_that_is_not_one(version):
    config = {**TINY_GEMMA, "transformers_version": version}
    with pytest.raises(FfnError) as info:
        spec_from_config(config, "c")
    assert str(info.value) == ("c: key 'transformers_version': expected a version such as "
                               f"4.38.0, got {version!r}")


@pytest.mark.parametrize("version,hidden_activation,activation", [
    ("5.24.0", "gelu_pytorch_tanh", "silu"), ("4.44.0", None, "gelu_tanh")])
def test_gemma_forward_computes_the_activation_the_config_means(tmp_path, version,
                                                                 hidden_activation, activation):
    """The whole-model forward's FFN (the engine each layer builds) runs the spec's activation."""
    from helpers.forward_cases import checkpoint

    from ffncli.jobs.choices import ModelChoice
    from ffncli.jobs.resolve import open_forward
    from ffncli.specs.spec import Overrides

    folder = checkpoint(tmp_path, "gemma", config={
        "transformers_version": version, "hidden_act": "silu",
        "hidden_activation": hidden_activation})
    with open_forward(ModelChoice(weights=folder), Overrides()) as model:
        assert model.spec.ffn.activation == activation
        assert model.layer(1).engine.act.name == activation


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


# ---------------------------------------------------------------------------------------------
# Bad configs of supported types: one error line naming the key, exit 2; and fuzzing.


def _config(name, drop=(), **changes):
    config = {k: v for k, v in MODELS[name]["config"].items() if k not in drop}
    return {**config, **changes}


BAD = [
    (_config("tiny-qwen3", drop=("intermediate_size",)), "missing key 'intermediate_size'"),
    (_config("tiny-deepseek_v3", drop=("n_routed_experts",)),
     "missing key 'n_routed_experts' (or 'num_local_experts')"),
    # transformers' attribute_map: a key read under either spelling, the error naming the
    # file's (issue 40)
    (_config("tiny-qwen3_moe", drop=("num_experts",), num_local_experts=2.0),
     "key 'num_local_experts': expected a whole number >= 1, got 2.0"),
    (_config("tiny-qwen3_moe", drop=("num_experts",), num_local_experts=2,
             num_experts_per_tok=3),
     "key 'num_experts_per_tok': expected at most num_experts (2), got 3"),
    (_config("tiny-gpt_bigcode", drop=("n_embd",)), "missing key 'n_embd' (or 'hidden_size')"),
    (_config("tiny-qwen3", num_key_value_heads=3),
     "key 'num_key_value_heads': expected a divisor of num_attention_heads (4), got 3"),
    (_config("tiny-olmo2", num_key_value_heads=8),
     "key 'num_key_value_heads': expected a divisor of num_attention_heads (4), got 8"),
    (_config("tiny-granite", hidden_size=30),
     "key 'num_attention_heads': expected a divisor of hidden_size (30), got 4"),
    (_config("tiny-gptj", n_head=5), "key 'n_head': expected a divisor of n_embd (32), got 5"),
    (_config("tiny-bloom", n_head=5),
     "key 'n_head': expected a divisor of hidden_size (32), got 5"),
    (_config("tiny-falcon-new", num_kv_heads=3),
     "key 'num_kv_heads': expected a divisor of num_attention_heads (4), got 3"),
    (_config("tiny-qwen3_moe", num_experts_per_tok=5),
     "key 'num_experts_per_tok': expected at most num_experts (4), got 5"),
    (_config("tiny-deepseek_v3", num_experts_per_tok=9),
     "key 'num_experts_per_tok': expected at most n_routed_experts (4), got 9"),
    ({"model_type": "mixtral", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1,
      "num_attention_heads": 4, "vocab_size": 10, "num_local_experts": 2,
      "num_experts_per_tok": 3},
     "key 'num_experts_per_tok': expected at most num_local_experts (2), got 3"),
    (_config("tiny-deepseek_v3", kv_lora_rank=64),
     "key 'kv_lora_rank': expected at most hidden_size (32), got 64"),
    (_config("tiny-deepseek_v3", q_lora_rank=33),
     "key 'q_lora_rank': expected at most hidden_size (32), got 33"),
    (_config("tiny-deepseek_v3", first_k_dense_replace=3),
     "key 'first_k_dense_replace': expected fewer than num_hidden_layers (3), got 3"),
    (_config("tiny-qwen3_moe", mlp_only_layers=[0, 1, 2, 3]),
     "key 'mlp_only_layers': expected at least one sparse layer (with decoder_sparse_step 1, 4 "
     "layers), got [0, 1, 2, 3]"),
    (_config("tiny-qwen3_moe", mlp_only_layers="1"),
     "key 'mlp_only_layers': expected a list of layer numbers, got '1'"),
    (_config("tiny-mpt", expansion_ratio=3),
     "key 'expansion_ratio': expected 4 (transformers' MptForCausalLM builds a 4 x d_model FFN "
     "whatever the config says), got 3"),
    (_config("tiny-mpt", no_bias=False),
     "key 'no_bias': expected true (transformers' MptForCausalLM has no biases), got False"),
    (_config("tiny-electra", embedding_size=0),
     "key 'embedding_size': expected a whole number >= 1, got 0"),
    (_config("tiny-stablelm", qk_layernorm="yes"), "key 'qk_layernorm': expected true or false, "
     "got 'yes'"),
]


@pytest.mark.parametrize(("name", "key", "stored"), [
    ("tiny-qwen3_moe", "num_experts", "num_local_experts"),  # what transformers 5.25 writes
    ("tiny-deepseek_v3", "n_routed_experts", "num_local_experts"),
    ("tiny-gpt_bigcode", "n_embd", "hidden_size"),
])
def test_either_spelling_of_a_renamed_key_counts_the_same(tmp_path, name, key, stored):
    """transformers' attribute_map: a config saved under the other name is the same model."""
    config = _config(name, drop=(key,), **{stored: MODELS[name]["config"][key]})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert count(load_config(path)).total == MODELS[name]["total"]


@pytest.mark.parametrize("config,message", BAD, ids=range(len(BAD)))
def test_one_line_naming_the_key(cli, tmp_path, config, message):
    assert_one_line(cli, tmp_path, config, message)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(n for n in MODELS if n.startswith(("tiny-", "fix-")))),
       data=st.data())
def test_mutated_configs_count_or_fail_in_one_line(name, data):
    """Any key of a valid config set to any value: a count, or a one-line FfnError."""
    config = dict(MODELS[name]["config"])
    keys = sorted(config) + ["head_dim", "tie_word_embeddings", "mlp_only_layers",
                             "q_lora_rank", "decoder_sparse_step", "num_kv_heads"]
    for _ in range(data.draw(st.integers(1, 3))):
        config[data.draw(st.sampled_from(keys))] = data.draw(VALUES)
    assert_counts_or_fails_in_one_line(config)
