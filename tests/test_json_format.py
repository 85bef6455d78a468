"""Every --json document names its format and version first (docs/json.md): one name per
shape of document, the sharded run and capture each with one of their own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ffncli.present.jsondoc import JSON_NAMES, json_format

ROOT = Path(__file__).resolve().parents[1]
GPT2 = ROOT / "tests" / "data" / "forward" / "gpt2"
IDS = GPT2 / "ids.txt"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Token files (one, and a folder of two), a folder of two ids files, and GPT-2's weights
    without a config beside them."""
    tmp = tmp_path_factory.mktemp("json")
    rng = np.random.default_rng(0)
    (tmp / "tokens").mkdir()
    for name in ("a", "b"):
        np.save(tmp / "tokens" / f"{name}.npy", rng.standard_normal((3, 4)).astype(np.float32))
    (tmp / "texts").mkdir()
    for name in ("a", "b"):
        shutil.copy(IDS, tmp / "texts" / f"{name}.txt")
    (tmp / "bare").mkdir()
    shutil.copy(GPT2 / "model.safetensors", tmp / "bare" / "model.safetensors")
    return {"tmp": tmp, "npy": tmp / "tokens" / "a.npy", "tokens": tmp / "tokens",
            "texts": tmp / "texts", "bare": tmp / "bare" / "model.safetensors"}


def _invocations(f: dict[str, Path]) -> list[tuple[str, list[object]]]:
    out = f["tmp"]
    return [
        ("params", ["params", "--preset", "base"]),
        ("params", ["params", "--preset", "base", "--train", "lora", "--fit", "24GB"]),
        ("params-file", ["params", "--weights", f["bare"]]),
        ("presets", ["presets"]),
        ("run", ["run", "--preset", "tiny", "--input", f["npy"]]),
        ("run-shards", ["run", "--preset", "tiny", "--input", f["tokens"], "--out",
                        out / "run-out"]),
        ("permute-check", ["permute-check", "--preset", "tiny", "--random", "8"]),
        ("relu-stats", ["relu-stats", "--preset", "tiny", "--input", f["npy"]]),
        ("relu-stats", ["relu-stats", "--preset", "tiny", "--input", f["tokens"]]),
        ("relu-stats-sweep", ["relu-stats", "--weights", GPT2, "--ids", IDS, "--quiet"]),
        ("relu-stats-sweep", ["relu-stats", "--weights", GPT2, "--ids", f["texts"], "--quiet"]),
        ("capture", ["capture", "--weights", GPT2, "--ids", IDS, "--out", out / "cap",
                     "--quiet"]),
        ("capture-shards", ["capture", "--weights", GPT2, "--ids", f["texts"], "--out",
                            out / "caps", "--quiet"]),
        ("perplexity", ["perplexity", "--weights", GPT2, "--ids", IDS, "--ctx", "8",
                        "--quiet"]),
        ("experts", ["experts", "--weights", GPT2.parent / "mixtral", "--ids",
                     GPT2.parent / "mixtral" / "ids.txt", "--quiet"]),
        ("neurons", ["neurons", "--weights", GPT2, "--ids", IDS, "--units", "0-1", "--quiet"]),
    ]


def test_every_document_names_its_format_first(cli, files):
    seen = set()
    for name, argv in _invocations(files):
        r = cli(*argv, "--json")
        assert r.code == 0, (argv, r.err)
        doc = json.loads(r.out)
        assert next(iter(doc)) == "format" and doc["format"] == f"ffncli-{name}/1", argv
        seen.add(name)
    assert seen == set(JSON_NAMES)  # every name is a document some command writes


def test_a_name_no_document_has_is_a_bug_not_a_line():
    with pytest.raises(ValueError, match="no JSON document is named 'sweep'"):
        json_format("sweep")


def test_docs_json_md_names_every_format():
    text = (ROOT / "docs" / "json.md").read_text()
    for name in JSON_NAMES:
        assert f"`ffncli-{name}/1`" in text, name
