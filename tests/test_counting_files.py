"""A checkpoint counted by its headers (counting/files.py): `params --config --weights` on files
laid out as transformers saves each architecture, every tensor in its group.

The tensor names and shapes come from tests/data/arch_totals.json (state dicts of the classes
built by tests/fixtures/make_arch_totals.py, tied tensors once); the files hold zeros.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import DATA
from safetensors import numpy as safetensors_numpy

FIXTURE = json.loads((DATA / "arch_totals.json").read_text())

WITH_TENSORS = sorted(n for n, m in FIXTURE["models"].items() if "tensors" in m)

TASK_FILES = sorted(FIXTURE["task_files"])

DTYPES = {"F32": np.float32, "I64": np.int64, "BOOL": np.bool_}


def write(tmp_path, entry: dict) -> tuple:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(entry["config"]))
    weights = tmp_path / "model.safetensors"
    arrays = {name: np.zeros(shape, dtype=DTYPES[dtype])
              for name, (shape, dtype) in entry["tensors"].items()}
    safetensors_numpy.save_file(arrays, weights)
    return config, weights


def test_every_new_type_has_a_file_test():
    types = {FIXTURE["models"][n]["config"]["model_type"] for n in WITH_TENSORS}
    assert len(types) >= 25 and {"deepseek_v3", "qwen2_moe", "electra", "mpt"} <= types


@pytest.mark.parametrize("name", WITH_TENSORS)
def test_file_groups_match_the_config(cli, tmp_path, name):
    entry = FIXTURE["models"][name]
    config, weights = write(tmp_path, entry)
    r = cli("params", "--config", config, "--weights", weights, "--json")
    doc = r.json()
    assert (r.code, doc["mismatches"]) == (0, {}), name
    assert doc["file_params"] == doc["total_params"] == entry["total"]
    assert doc["file_groups"]["other"] == 0


@pytest.mark.parametrize("name", TASK_FILES)
def test_files_of_task_classes_count_their_head_as_head(cli, tmp_path, name):
    """BertForMaskedLM's cls.predictions.*, DistilBERT's vocab_*, ELECTRA's
    discriminator_predictions.*: the task class's head, not a mismatch (nor 'other')."""
    config, weights = write(tmp_path, FIXTURE["task_files"][name])
    r = cli("params", "--config", config, "--weights", weights, "--json")
    doc = r.json()
    assert (r.code, doc["matches"], doc["mismatches"]) == (0, True, {})
    assert doc["file_groups"]["head"] > 0 and doc["file_groups"]["other"] == 0
    r = cli("params", "--config", config, "--weights", weights)
    assert r.code == 0 and "task head" in r.out and "matches the spec" in r.out


def test_a_base_model_file_without_its_pooler_is_still_a_mismatch(cli, tmp_path):
    entry = FIXTURE["models"]["fix-roberta-defaults"]
    tensors = {k: v for k, v in entry["tensors"].items() if not k.startswith("pooler.")}
    config, weights = write(tmp_path, {**entry, "tensors": tensors})
    r = cli("params", "--config", config, "--weights", weights, "--json")
    assert r.code == 1 and r.json()["mismatches"] == {"pooler": {"spec": 32 * 32 + 32,
                                                                 "file": 0}}


def test_an_unknown_architecture_is_counted_from_the_file_alone(cli, tmp_path):
    entry = FIXTURE["models"]["tiny-qwen3"]
    config, weights = write(tmp_path, {**entry, "config": {"model_type": "qwen9",
                                                           "hidden_size": 32}})
    r = cli("params", "--config", config, "--weights", weights, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["checked_by_config"] is False
    assert doc["reason"].startswith(f"{config}: unsupported model_type 'qwen9'; supported: ")
    assert doc["file_params"] == entry["total"]
    assert doc["file_groups"] == {"embeddings": 101 * 32, "attention": 2 * (2112 + 2 * 1056 + 2080),
                                  "ffn": 2 * 3 * 32 * 48, "norms": 2 * (2 * 32 + 2 * 16) + 32,
                                  "head": 101 * 32, "pooler": 0, "other": 0}
    r = cli("params", "--config", config, "--weights", weights)
    assert r.code == 0
    assert "counted from tensor names only; no config reader checked it" in r.out
    assert f"{entry['total']:,}" in r.out
    r = cli("params", "--config", config)  # without --weights it stays an error
    assert r.code == 2 and "unsupported model_type 'qwen9'" in r.err


def test_a_gguf_rope_freqs_table_is_a_buffer_not_a_parameter(cli, tmp_path):
    """llama 3's rope_freqs.weight (F32, head_dim / 2 factors) is kept apart: not in any group,
    not in the stored F32 parameters. The rest is write_gguf's default llama, by hand."""
    from helpers.gguf_files import write_gguf

    from ffncli.counting.files import count_gguf
    from ffncli.formats.gguf import read_header

    path = tmp_path / "m.gguf"
    write_gguf(path, rope_freqs=8)
    d, f, vocab, layers, kv_width = 64, 128, 40, 2, 32
    total = vocab * d + layers * (2 * d * d + 2 * d * kv_width + 3 * d * f + 2 * d) + d
    count = count_gguf(read_header(path))
    assert [b.name for b in count.buffers] == ["rope_freqs.weight"]
    assert (count.total, count.groups["other"], count.unplaced) == (total, 0, ())
    assert [(s.kind, s.params, s.bytes) for s in count.stored] == [("F32", total, 4 * total)]
    doc = cli("params", "--weights", path, "--json").json()
    assert doc["file_params"] == doc["total_params"] == total and doc["matches"] is True
    assert doc["buffers"] == [{"name": "rope_freqs.weight", "dtype": "F32", "shape": [8]}]
