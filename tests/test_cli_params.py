"""`ffncli params` and `ffncli presets` through the CLI: output values, JSON, errors."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CONFIGS

from ffncli.specs.table import SUPPORTED_MODEL_TYPES

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def test_params_base_prints_the_lesson_figures(cli):
    r = cli("params", "--preset", "base")
    assert r.code == 0 and r.err == ""
    assert "FFN weights per layer: 2,099,712\n" in r.out
    assert "encoder layer total:   3,152,384\n" in r.out
    assert "share in the FFN:      66.6%\n" in r.out
    assert "63,082,496" in r.out


def test_params_json_schema(cli):
    r = cli("params", "--preset", "base", "--json")
    assert r.code == 0 and r.err == ""
    doc = r.json()
    assert doc["total_params"] == doc["active_params"] == 63_082_496
    enc, dec = doc["layers"]
    assert (enc["kind"], enc["count"], enc["ffn"], enc["attention"], enc["norm"], enc["total"]) == (
        "encoder", 6, 2_099_712, 1_050_624, 2_048, 3_152_384)
    assert round(enc["ffn_share"], 3) == 0.666
    assert (dec["kind"], dec["count"], dec["total"]) == ("decoder", 6, 4_204_032)
    assert [row["name"] for row in enc["ffn_rows"]] == ["W1", "b1", "W2", "b2"]
    flops = doc["flops_per_token"]
    assert flops["seq_len"] == 512 and flops["ffn"] == 12 * 2 * 2 * 512 * 2048
    assert doc["memory_bytes"]["float32"] == 4 * 63_082_496


def test_params_mixtral_json_active(cli):
    doc = cli("params", "--preset", "mixtral-8x7b", "--json").json()
    assert (doc["total_params"], doc["active_params"]) == (46_702_792_704, 12_879_925_248)
    (layer,) = doc["layers"]
    assert (layer["kind"], layer["count"], layer["ffn"], layer["ffn_active"]) == (
        "decoder", 32, 1_409_318_912, 352_354_304)
    assert {"name": "router", "shape": "4096 x 8", "params": 32_768} in layer["ffn_rows"]


def test_params_from_config(cli):
    doc = cli("params", "--config", CONFIGS / "gpt2.config.json", "--json").json()
    assert doc["total_params"] == 124_439_808
    assert doc["activation"] == "gelu_tanh"


def test_params_overrides_and_match_params(cli):
    doc = cli("params", "--preset", "base", "--activation", "swiglu", "--match-params",
              "--json").json()
    assert (doc["d_ff"], doc["gated"], doc["ffn_kind"]) == (1365, True, "swiglu")
    assert doc["layers"][0]["ffn"] == 3 * 512 * 1365 + 2 * 1365 + 512
    doc = cli("params", "--preset", "llama2-7b", "--d-ff", "16384", "--match-params",
              "--multiple-of", "256", "--json").json()
    assert doc["d_ff"] == 11008 and doc["total_params"] == 6_738_415_616
    doc = cli("params", "--preset", "base", "--experts", "8", "--top-k", "2", "--json").json()
    assert doc["active_params"] < doc["total_params"]
    doc = cli("params", "--preset", "base", "--seq-len", "1024", "--json").json()
    assert doc["layers"][0]["flops_per_token"]["attention_scores"] == 2 * 2 * 1024 * 512


def test_params_gated_flags(cli):
    gated = cli("params", "--preset", "base", "--gated", "--json").json()
    assert (gated["gated"], gated["ffn_kind"]) == (True, "reglu")
    assert gated["layers"][0]["ffn"] == 3 * 512 * 2048 + 2 * 2048 + 512
    dense = cli("params", "--preset", "llama2-7b", "--no-gated", "--json").json()
    assert dense["gated"] is False
    assert dense["layers"][0]["ffn"] == 2 * 4096 * 11008


def test_params_ffn_only_spec(cli):
    doc = cli("params", "--preset", "tiny", "--json").json()
    assert doc["total_params"] == 148
    assert [(layer["kind"], layer["ffn"]) for layer in doc["layers"]] == [("ffn", 148)]


def test_presets_lists_every_preset(cli):
    doc = cli("presets", "--json").json()
    totals = {row["name"]: row["total_params"] for row in doc["presets"]}
    assert totals["base"] == 63_082_496 and totals["gemma-2b"] == 2_506_172_416
    assert len(totals) == 15
    r = cli("presets")
    assert "mixtral-8x7b" in r.out and "46,702,792,704" in r.out


# --- counting from a .safetensors header ----------------------------------------------------


def _bert_like_tensors(d=8, f=32, vocab=50, layers=2):
    rng = np.random.default_rng(0)
    t = {
        "embeddings.word_embeddings.weight": (vocab, d),
        "embeddings.position_embeddings.weight": (16, d),
        "embeddings.token_type_embeddings.weight": (2, d),
        "embeddings.LayerNorm.weight": (d,), "embeddings.LayerNorm.bias": (d,),
        "pooler.dense.weight": (d, d), "pooler.dense.bias": (d,),
    }
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            t[p + f"attention.self.{name}.weight"] = (d, d)
            t[p + f"attention.self.{name}.bias"] = (d,)
        t[p + "attention.output.dense.weight"] = (d, d)
        t[p + "attention.output.dense.bias"] = (d,)
        t[p + "attention.output.LayerNorm.weight"] = (d,)
        t[p + "attention.output.LayerNorm.bias"] = (d,)
        t[p + "intermediate.dense.weight"] = (f, d)
        t[p + "intermediate.dense.bias"] = (f,)
        t[p + "output.dense.weight"] = (d, f)
        t[p + "output.dense.bias"] = (d,)
        t[p + "output.LayerNorm.weight"] = (d,)
        t[p + "output.LayerNorm.bias"] = (d,)
    arrays = {k: rng.normal(size=s).astype(np.float32) for k, s in t.items()}
    arrays["embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    return arrays


def _bert_preset(tmp_path, d=8, f=32):
    path = tmp_path / "small-bert.yaml"
    path.write_text(
        f"d_model: {d}\nfamily: bert\nffn: {{d_ff: {f}, activation: gelu}}\n"
        "attention: {heads: 2}\nnorm: {final: false}\nlayers: {encoder: 2, decoder: 0}\n"
        "embeddings: {vocab: 50, positions: 16, token_types: 2, norm: true, head: none}\n"
        "pooler: true\n"
    )
    return path


def test_weights_header_count_matches_spec(cli, tmp_path):
    arrays = _bert_like_tensors()
    st = tmp_path / "model.safetensors"
    safetensors_numpy.save_file(arrays, st)
    r = cli("params", "--preset", _bert_preset(tmp_path), "--weights", st, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    expected = sum(a.size for k, a in arrays.items() if a.dtype == np.float32)
    assert doc["file_params"] == doc["total_params"] == expected
    assert doc["matches"] is True
    assert doc["buffers"] == [{"name": "embeddings.position_ids", "dtype": "I64", "shape": [1, 16]}]
    assert doc["file_groups"]["ffn"] == 2 * (8 * 32 + 32 + 32 * 8 + 8)


def test_weights_header_mismatch_exits_1_and_names_the_group(cli, tmp_path):
    arrays = _bert_like_tensors()
    del arrays["pooler.dense.weight"], arrays["pooler.dense.bias"]
    st = tmp_path / "model.safetensors"
    safetensors_numpy.save_file(arrays, st)
    r = cli("params", "--preset", _bert_preset(tmp_path), "--weights", st, "--json")
    assert r.code == 1
    doc = r.json()
    assert doc["matches"] is False
    assert doc["mismatches"] == {"pooler": {"spec": 8 * 8 + 8, "file": 0}}
    r = cli("params", "--preset", _bert_preset(tmp_path), "--weights", st)
    assert r.code == 1 and "pooler" in r.out and "does NOT match the spec" in r.out


def test_weights_header_reads_no_tensor_data(cli, tmp_path):
    """A header that claims 40 GB of data in a file that has it only on paper still counts."""
    import json
    import struct

    header = {"w": {"dtype": "BF16", "shape": [100_000, 200_000], "data_offsets": [0, 4 * 10**10]}}
    raw = json.dumps(header).encode()
    st = tmp_path / "sparse.safetensors"
    with open(st, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + 4 * 10**10)  # a sparse file: no data is written or read
    r = cli("params", "--preset", "tiny", "--weights", st, "--json")
    assert r.code == 1
    assert r.json()["file_params"] == 2 * 10**10


# --- bad input: one error line, exit 2 ------------------------------------------------------

BAD_PRESETS = [
    ("d_model: [\n", "invalid YAML at line 2, column 1"),
    ("d_model: 4\nffn: {d_ff: 8, dff: 3}\n",
     "unknown key 'ffn.dff' (did you mean 'd_ff'?); allowed keys: d_ff, activation"),
    ("d_model: abc\nffn: {d_ff: 8}\n", "key 'd_model': expected a whole number >= 1, got 'abc'"),
    ("d_model: 4\nffn: {d_ff: 0}\n", "key 'ffn.d_ff': expected a whole number >= 1, got 0"),
    ("d_model: 4\nffn: {d_ff: 8, activation: rleu}\n",
     "key 'ffn.activation': expected one of relu, gelu, gelu_tanh, silu, swish, sigmoid, "
     "identity, got 'rleu' (did you mean 'relu'?)"),
    ("d_model: 4\n", "missing key 'ffn'"),
    ("d_model: 4\nffn: {d_ff: 8, gated: yes please}\n", "key 'ffn.gated': expected true or false"),
    ("d_model: 4\nffn: {d_ff: 8, experts: 2, top_k: 3}\n",
     "key 'ffn.top_k': expected at most ffn.experts (2), got 3"),
    ("- 1\n- 2\n", "expected a mapping of keys to values, got list"),
    ("d_model: 4\nffn: {d_ff: 8}\nattention: {heads: 3}\n", "d_model 4 is not divisible by 3"),
    ("d_model: 4\nffn: {d_ff: 8}\nwidth: 3\n", "unknown key 'width'"),
    ("!!python/object/apply:os.system ['echo hacked']\n", "invalid YAML"),
]


@pytest.mark.parametrize("text,message", BAD_PRESETS)
def test_bad_preset_files(cli, tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    r = cli("params", "--preset", path)
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith(f"error: {path}: ")
    assert message in r.err


def test_bad_inputs_exact_lines(cli, tmp_path):
    cases = [
        (("params", "--preset", "bsae"), "error: unknown preset 'bsae' (did you mean 'base'?); "
         "built-in presets: base, bert-base, big, gemma-2b, gpt2, llama2-7b, llama3-8b, "
         "minilm-l6, mistral-7b, mixtral-8x7b, opt-125m, qwen2.5-0.5b, t5-base, tiny, toy"),
        (("params", "--preset", tmp_path / "missing.yaml"),
         f"error: preset file not found: {tmp_path / 'missing.yaml'}"),
        (("params", "--config", tmp_path / "none.json"),
         f"error: config file not found: {tmp_path / 'none.json'}"),
        (("params",), "error: give a model: --preset NAME|FILE or --config config.json"),
        (("params", "--preset", "base", "--config", CONFIGS / "gpt2.config.json"),
         "error: give --preset or --config, not both"),
        (("params", "--preset", "base", "--match-params"),
         "error: option --match-params: needs a gated FFN; add --activation swiglu (or geglu, "
         "reglu, glu, bilinear) or --gated"),
        (("params", "--preset", "base", "--activation", "swiglue"),
         "error: option --activation: expected one of relu, gelu, gelu_tanh, silu, swish, "
         "sigmoid, identity, glu, reglu, geglu, swiglu, bilinear, got 'swiglue' (did you mean "
         "'swiglu'?)"),
        (("params", "--preset", "base", "--weights", tmp_path / "none.safetensors"),
         f"error: weights file not found: {tmp_path / 'none.safetensors'}"),
    ]
    for args, line in cases:
        r = cli(*args)
        assert (r.code, r.out, r.err) == (2, "", line + "\n"), args


BAD_CONFIGS = [
    # a type of transformers ffncli refuses says what it lacks for it (issue 40)
    ('{"model_type": "mllama"}', "unsupported model_type 'mllama': ffncli lacks its language "
     "model's cross-attention layers (mllama_text_model) and its vision tower"),
    # the table's first eight, and how many more: one readable line, not two hundred names
    ('{"model_type": "qwen9"}', "unsupported model_type 'qwen9'; supported: gpt2, bert, "
     f"roberta, distilbert, t5, opt, gpt_neox, llama and {len(SUPPORTED_MODEL_TYPES) - 8} more "
     "(docs/specs.md lists them)\n"),
    # A near miss may be another architecture (qwen3 is not qwen2): only spelling is suggested.
    ('{"model_type": "lama", "hidden_size": 8}', "unsupported model_type 'lama'; supported: "),
    ('{"model_type": "Qwen2", "hidden_size": 8}', "unsupported model_type 'Qwen2' (did you "
     "mean 'qwen2'?)"),
    ('{"hidden_size": 8}', "missing key 'model_type'"),
    ('{"model_type": "gpt2", "n_embd": "big"}', "key 'n_embd': expected a whole "
     "number >= 1, got 'big'"),
    ('{"model_type": "llama", "hidden_size": 64}', "missing key 'num_attention_heads'"),
    ('{"model_type": "gpt2", "activation_function": "mish"}', "unsupported activation 'mish'"),
    ('{"model_type": "gpt2",', "invalid JSON at line 1, column 23"),
    ('[1, 2]', "expected a JSON object, got list"),
]


@pytest.mark.parametrize("text,message", BAD_CONFIGS)
def test_bad_configs(cli, tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    r = cli("params", "--config", path)
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith(f"error: {path}: ")
    assert message in r.err


@pytest.mark.parametrize("content", [b"", b"abc", b"\xff" * 8 + b"{}", b"\x02\x00\x00\x00\x00"
                                     b"\x00\x00\x00[]"])
def test_bad_safetensors(cli, tmp_path, content):
    path = tmp_path / "w.safetensors"
    path.write_bytes(content)
    r = cli("params", "--preset", "tiny", "--weights", path)
    assert r.code == 2 and r.out == ""
    assert r.err.startswith(f"error: {path}: not a safetensors file") and r.err.count("\n") == 1


def test_typer_usage_errors_exit_2(cli):
    r = cli("params", "--d-model", "many")
    assert r.code == 2 and "Traceback" not in r.err
