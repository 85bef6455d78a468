"""KV cache in `params`: closed forms per attention kind, the JSON keys, --batch."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

from ffncli.counting.model import kv_cache
from ffncli.specs.archs import spec_from_config
from ffncli.specs.spec import load_preset

MODELS = json.loads((DATA / "arch_totals.json").read_text())["models"]


def _spec(name):
    return spec_from_config(dict(MODELS[name]["config"]), name)


# name: (kind, values cached per token = layers x per-layer width), each a closed form.
CASES = {
    # LLaMA-2-7B, full multi-head: 32 layers x K and V x 4096. 2 bytes each: 0.5 MiB a token.
    "llama2-7b": ("mha", 32 * 2 * 4096),
    # LLaMA-3-8B, grouped queries: 32 layers x K and V x 8 kv heads x 128.
    "llama3-8b": ("gqa", 32 * 2 * 8 * 128),
    "mixtral-8x7b": ("gqa", 32 * 2 * 8 * 128),
    # T5: each decoder layer caches self- and cross-attention K and V (12 x 2 x 2 x 768).
    "t5-base": ("mha", 12 * 2 * 2 * 12 * 64),
    # BERT: an encoder keeps no cache.
    "bert-base": ("none", 0),
}
CONFIG_CASES = {
    # StarCoderBase, multi-query: 40 layers x K and V x one head of 128.
    "starcoderbase": ("mqa", 40 * 2 * 128),
    # Falcon-7B: multi-query, 32 layers x 2 x 64.
    "falcon-7b": ("mqa", 32 * 2 * 64),
    # DeepSeek-V3, latent attention: 61 layers x (kv_lora_rank 512 + rope key 64) = the
    # DeepSeek-V2 paper's (d_c + d_h^R) l, 576 per layer; 70,272 bytes a token in bf16.
    "DeepSeek-V3": ("mla", 61 * (512 + 64)),
    # Gemma-3-1B: one kv head of 256, 26 layers (sliding windows not modelled: an upper bound).
    "gemma-3-1b": ("mqa", 26 * 2 * 256),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_presets(name):
    kv = kv_cache(load_preset(name), seq_len=100, batch=3)
    assert (kv.kind, kv.elements_per_token) == CASES[name]
    assert kv.bytes_per_token() == {"float16": 2 * CASES[name][1], "bfloat16": 2 * CASES[name][1],
                                    "fp8": CASES[name][1], "int8": CASES[name][1]}
    assert kv.bytes()["bfloat16"] == 300 * 2 * CASES[name][1]


@pytest.mark.parametrize("name", sorted(CONFIG_CASES))
def test_configs(name):
    kv = kv_cache(_spec(name), seq_len=1, batch=1)
    assert (kv.kind, kv.elements_per_token) == CONFIG_CASES[name]


def test_published_per_token_figures():
    assert kv_cache(load_preset("llama2-7b"), 1).bytes_per_token()["float16"] == 2**19  # 0.5 MiB
    assert kv_cache(_spec("DeepSeek-V3"), 1).bytes_per_token()["bfloat16"] == 70_272


def test_params_json_keys_and_batch(cli):
    r = cli("params", "--preset", "llama3-8b", "--seq-len", "8192", "--batch", "4", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["kv_cache"] == {
        "kind": "gqa", "layers": 32, "elements_per_token": 65_536,
        "bytes_per_token": {"float16": 131_072, "bfloat16": 131_072, "fp8": 65_536,
                            "int8": 65_536},
        "seq_len": 8192, "batch": 4,
        "bytes": {"float16": 4 * 2**30, "bfloat16": 4 * 2**30, "fp8": 2 * 2**30,
                  "int8": 2 * 2**30},
    }
    total = 8_030_261_248
    assert doc["memory_bytes"] == {"float32": 4 * total, "bfloat16": 2 * total, "int8": total,
                                   "int4": total // 2}
    one = cli("params", "--preset", "llama3-8b", "--seq-len", "8192", "--json").json()
    assert one["kv_cache"]["batch"] == 1 and one["kv_cache"]["bytes"]["fp8"] == 2**29


def test_params_table_shows_the_cache(cli):
    r = cli("params", "--preset", "mistral-7b", "--seq-len", "1000", "--batch", "2")
    assert r.code == 0
    assert "KV cache (grouped-query: K and V per kv head; 32 layers, 65,536 values per token)" \
        in r.out
    assert "262,144,000" in r.out  # 131,072 bytes x 1,000 x 2 in float16
    assert "int4" in r.out
    r = cli("params", "--preset", "bert-base")
    assert "KV cache: none (no decoder layers)" in r.out


def test_int4_rounds_up_to_whole_bytes():
    from ffncli.counting.model import count

    assert count(load_preset("tiny")).weight_bytes()["int4"] == (148 + 1) // 2


def test_batch_must_be_positive(cli):
    r = cli("params", "--preset", "tiny", "--batch", "0")
    assert r.code == 2 and r.err.startswith("error: ") and "--batch" in r.err
