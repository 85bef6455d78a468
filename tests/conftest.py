"""Shared test set-up: a fixed terminal, and the CLI run in-process through its one boundary."""

from __future__ import annotations

import json
import os

# Pin the terminal before Typer or Rich is imported, so output does not depend on the runner.
os.environ["COLUMNS"] = "200"
os.environ["TERMINAL_WIDTH"] = "200"
os.environ["_TYPER_FORCE_DISABLE_TERMINAL"] = "1"
os.environ["NO_COLOR"] = "1"
# Never the real Hub: params --model reads a model that is not cached from it. The tests that
# mean to (test_hub_remote.py) clear this and point HF_ENDPOINT at a server of their own.
os.environ["HF_HUB_OFFLINE"] = "1"

from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from ffncli.cli.main import run

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


@pytest.fixture
def cli(capsys):
    def invoke(*args: str) -> Result:
        capsys.readouterr()
        code = run([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return invoke


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """MiniLM in three shards with its config (helpers/checkpoints.py), made once a module."""
    from helpers.checkpoints import minilm_in_shards

    return minilm_in_shards(tmp_path_factory.mktemp("sharded"))


@pytest.fixture
def in_tests(monkeypatch):
    """In tests/, where `--impl impls.ffns:NAME` imports the FFNs permute-check is tested on."""
    monkeypatch.chdir(Path(__file__).parent)
