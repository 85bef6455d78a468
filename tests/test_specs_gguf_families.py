"""``params`` on a GGUF file of each llama.cpp architecture of the 2025-26 families: the spec
its metadata implies (READINGS in ffncli/specs/gguf.py) counted exactly as transformers 5.25
builds the type's defaults (tests/data/zoo/truths.json: total, active, each layer's FFN), and
the header's tensors beside it, each in its part. The files are written as llama.cpp's converter
writes them (tests/helpers/zoo_gguf.py): metadata keys from the config, the tensors transformers
builds under llama.cpp's names, data a hole in a sparse file."""

from __future__ import annotations

import json

import pytest
from conftest import DATA
from helpers.zoo_checkpoints import decoder_stack, ffn_parts, truth
from helpers.zoo_gguf import ARCHS, config, write_zoo_gguf

import ffncli
from ffncli.formats.gguf import read_header
from ffncli.specs.gguf import READINGS, spec_from_header
from ffncli.specs.table import GGUF_ARCHITECTURES


@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_the_metadata_counts_as_transformers_builds_it(tmp_path, model_type):
    path = tmp_path / "model.gguf"
    write_zoo_gguf(path, model_type)
    counted = ffncli.count(spec_from_header(read_header(path)))
    want = truth(model_type)
    stack = decoder_stack(model_type)
    assert (counted.total, counted.active, counted.decoder_ffn()) == \
        (want["total"], want["active"] or counted.active, tuple(stack["ffn"]))


@pytest.mark.parametrize("model_type", sorted(ARCHS))
def test_params_puts_each_tensor_in_its_part(tmp_path, cli, model_type):
    path = tmp_path / "model.gguf"
    write_zoo_gguf(path, model_type)
    r = cli("params", "--weights", path, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert (doc["matches"], doc["mismatches"]) == (True, {})
    assert doc["file_params"] == doc["total_params"] == truth(model_type)["total"]
    counted = ffncli.count(spec_from_header(read_header(path)))
    assert doc["file_ffn_parts"] == ffn_parts(counted)


def test_the_readings_are_the_table_s_architectures():
    """Every architecture READINGS reads is one a row of the table claims (gguf=...)."""
    assert set(READINGS) <= set(GGUF_ARCHITECTURES)


MIXERS = {"full_attention": "full", "sliding_attention": "sliding",
          "chunked_attention": "chunked", "linear_attention": "linear"}


@pytest.mark.parametrize("model_type", ["gpt_oss", "gemma3_text", "llama4_text", "qwen3_next",
                                        "cohere2", "gemma3n_text", "qwen3_5_text",
                                        "exaone4"])  # s5-gguf-a
def test_the_layer_pattern_is_the_config_s(tmp_path, model_type):
    """The pattern llama.cpp fixes per architecture (gpt-oss: sliding and full attention
    alternating; Gemma 3: five sliding layers to one full; Llama 4: three chunked to one full;
    Qwen3-Next: full attention every full_attention_interval-th layer; Command R7B: three
    sliding to one full; Gemma 3n and EXAONE 4: the file's sliding_window_pattern, one flag a
    layer) is the config's
    layer_types, and so is the KV cache."""
    path = tmp_path / "model.gguf"
    write_zoo_gguf(path, model_type)
    mine = spec_from_header(read_header(path))
    want = [MIXERS[t] for t in config(model_type)["layer_types"]]
    assert [k.mixer for k in mine.decoder_kinds()] == want
    assert ffncli.count(mine).layers == ffncli.count(ffncli.load_spec(
        config=DATA / "zoo" / "configs" / f"{model_type}.config.json")).layers


@pytest.mark.parametrize(("model_type", "key"), [
    ("gpt_oss", "gpt-oss.attention.sliding_window"),
    ("deepseek_v3", "deepseek2.expert_count"),
    ("qwen3_next", "qwen3next.ssm.state_size"),
    ("llama4_text", "llama4.expert_feed_forward_length"),
    ("qwen2_moe", "qwen2moe.expert_shared_feed_forward_length"),
    ("glm4_moe", "glm4moe.expert_used_count"),
])
def test_a_key_the_architecture_needs_missing_is_one_line(tmp_path, cli, model_type, key):
    """What an architecture cannot be read without is named in one line, as a config's missing
    key is (the key renamed in the header, in place: the file is sparse)."""
    path = tmp_path / "model.gguf"
    write_zoo_gguf(path, model_type)
    with path.open("r+b") as f:
        head = f.read(1 << 20)
        assert head.count(key.encode()) == 1
        f.seek(head.index(key.encode()) + len(key) - 1)
        f.write(b"_")
    r = cli("params", "--weights", path)
    assert (r.code, r.out, r.err) == (2, "", f"error: {path}: missing metadata key '{key}'\n")


# s5-gguf-a: the zoo's configs are their readers' defaults, so a key read wrong could go unseen
# above: here the metadata says other shapes (real models' where there is one), and the spec is
# the one the same config.json gives.
RESHAPED = {
    "gpt2": ({"n_embd": 1024, "n_layer": 24, "n_head": 16, "n_positions": 2048}, {}),
    "gpt_bigcode": ({"n_embd": 2048, "n_layer": 24, "n_head": 16, "n_positions": 2048}, {}),
    "gptj": ({"n_embd": 2048, "n_layer": 8, "n_head": 16, "n_positions": 1024}, {}),
    "mpt": ({"d_model": 4096, "n_layers": 32, "n_heads": 32, "max_seq_len": 4096}, {}),
    "gpt_neox": ({"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 8,
                  "num_hidden_layers": 16}, {}),
    "phi": ({"hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 32,
             "num_key_value_heads": 32}, {}),
    # stabilityai/stablelm-2-1_6b: biased q, k and v
    "stablelm": ({"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
                  "use_qkv_bias": True}, {"blk.0.attn_q.bias": (2048,)}),
    # tiiuae/falcon-40b: the new decoder, grouped key-value heads, two attention norms
    "falcon": ({"hidden_size": 8192, "num_attention_heads": 128, "num_kv_heads": 8,
                "num_hidden_layers": 60, "new_decoder_architecture": True,
                "ffn_hidden_size": 32768}, {"blk.0.attn_norm_2.weight": (8192,)}),
    # CohereForAI/c4ai-command-r-plus: q and k norms, one a head
    "cohere": ({"hidden_size": 12288, "intermediate_size": 33792, "num_attention_heads": 96,
                "num_key_value_heads": 8, "num_hidden_layers": 64, "use_qk_norm": True},
               {"blk.0.attn_q_norm.weight": (96, 128)}),
    "nemotron": ({"hidden_size": 3072, "intermediate_size": 9216, "num_attention_heads": 24,
                  "num_hidden_layers": 32}, {}),
}


@pytest.mark.parametrize("model_type", sorted(RESHAPED))
def test_the_metadata_is_read_not_the_reader_s_defaults(tmp_path, model_type):
    reshaped, more = RESHAPED[model_type]
    path = tmp_path / "model.gguf"
    write_zoo_gguf(path, model_type, reshaped, more)
    data = json.loads((DATA / "zoo" / "configs" / f"{model_type}.config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, **reshaped}))
    mine = ffncli.count(spec_from_header(read_header(path)))
    want = ffncli.count(ffncli.load_spec(config=tmp_path / "config.json"))
    assert (mine.total, mine.decoder_ffn()) == (want.total, want.decoder_ffn())
    assert mine.total != truth(model_type)["total"]  # not the defaults'


# s5-gguf-b
@pytest.mark.parametrize("model_type", ["afmoe", "exaone_moe"])
def test_the_layer_pattern_of_more_architectures_is_the_config_s(tmp_path, model_type):
    """AFMoE: the three sliding layers to one full llama.cpp fixes; EXAONE MoE: the file's
    sliding_window_pattern, one flag a layer."""
    test_the_layer_pattern_is_the_config_s(tmp_path, model_type)


def test_jamba_s_attention_layers_not_a_pattern_are_one_line(tmp_path, cli, monkeypatch):
    """Jamba's attention layers are the ones with KV heads (llama.cpp writes no pattern key):
    layers 4, 12 and 28 are no i % period == offset, which is all Jamba's config can say."""
    from helpers import zoo_gguf

    monkeypatch.setattr(zoo_gguf.gguf.GGUFWriter, "add_head_count_kv",
                        lambda w, value, real=zoo_gguf.gguf.GGUFWriter.add_head_count_kv:
                        real(w, [8 if i in (4, 12, 28) else 0 for i in range(32)]))
    path = tmp_path / "model.gguf"
    write_zoo_gguf(path, "jamba")
    r = cli("params", "--weights", path)
    assert (r.code, r.out, r.err) == (
        2, "", f"error: {path}: the layers with metadata key 'attention.head_count_kv' > 0: "
        "expected every n-th layer from one, got layers [4, 12, 28]\n")


@pytest.mark.parametrize(("model_type", "buffer"), [("deepseek_v3", True),
                                                    ("ernie4_5_moe", False)])
def test_a_router_bias_is_a_parameter_where_transformers_builds_one(
        tmp_path, cli, monkeypatch, model_type, buffer):
    """exp_probs_b (the converter's e_score_correction bias): DeepSeek-V3's is a buffer in
    transformers, ERNIE 4.5 MoE's (moe_statics) a parameter of its router; each file still
    matches its spec, the bias where transformers has it."""
    from helpers import zoo_gguf

    tensors = zoo_gguf._tensors

    def with_bias(mt, c):
        out = tensors(mt, c)
        bias = {f"blk.{i}.exp_probs_b.bias": (1, 64) for i in range(1, c["num_hidden_layers"])}
        return {**out, **bias}
    monkeypatch.setattr(zoo_gguf, "_tensors", with_bias)
    path = tmp_path / "model.gguf"
    write_zoo_gguf(path, model_type)
    doc = cli("params", "--weights", path, "--json").json()
    buffers = [b for b in doc["buffers"] if ".exp_probs_b." in b["name"]]
    assert (doc["matches"], bool(buffers)) == (True, buffer)
