"""Bad configs of supported types: one error line naming the key, exit 2; and fuzzing."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from ffncli.counting.model import count
from ffncli.errors import FfnError
from ffncli.specs.archs import spec_from_config

MODELS = json.loads((DATA / "arch_totals.json").read_text())["models"]


def _config(name, drop=(), **changes):
    config = {k: v for k, v in MODELS[name]["config"].items() if k not in drop}
    return {**config, **changes}


BAD = [
    (_config("tiny-qwen3", drop=("intermediate_size",)), "missing key 'intermediate_size'"),
    (_config("tiny-deepseek_v3", drop=("n_routed_experts",)), "missing key 'n_routed_experts'"),
    (_config("tiny-gpt_bigcode", drop=("n_embd",)), "missing key 'n_embd'"),
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


@pytest.mark.parametrize("config,message", BAD, ids=range(len(BAD)))
def test_one_line_naming_the_key(cli, tmp_path, config, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = cli("params", "--config", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: {message}\n")


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 70), st.floats(allow_nan=True),
                    st.text(max_size=4), st.lists(st.integers(-1, 5), max_size=3))


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(n for n in MODELS if n.startswith(("tiny-", "fix-")))),
       data=st.data())
def test_mutated_configs_count_or_fail_in_one_line(name, data):
    """Any key of a valid config set to any value: a count, or a one-line FfnError."""
    config = dict(MODELS[name]["config"])
    keys = sorted(config) + ["head_dim", "tie_word_embeddings", "mlp_only_layers",
                             "q_lora_rank", "decoder_sparse_step", "num_kv_heads"]
    for _ in range(data.draw(st.integers(1, 3))):
        config[data.draw(st.sampled_from(keys))] = data.draw(_VALUES)
    try:
        c = count(spec_from_config(config, "c.json"))
    except FfnError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("c.json")
    else:
        assert c.total > 0 and c.active <= c.total
