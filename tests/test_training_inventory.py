"""--train against the exact count: the tensor inventory fine-tuning memory is built from must
hold every parameter ``params`` counts, or the plan is refused in one line. 64 of the 249 types
ffncli reads had an inventory short of or past their count (gpt-oss's sinks, Qwen3-Next's linear
attention, Gemma 4's per-layer inputs, ...), so --train answered a wrong memory silently (8 of
them, DeepSeek-V3.2's indexer and gated attention, raised a KeyError instead)."""

from __future__ import annotations

import json

import pytest
from conftest import DATA

import ffncli
from ffncli.counting.tensors import tensors
from ffncli.counting.training import Plan, training
from ffncli.errors import FfnError, SpecError

ZOO = DATA / "zoo"
DOC = json.loads((ZOO / "truths.json").read_text())
CONFIGS = sorted({e["config"] for e in [*DOC["types"].values(), *DOC["flagships"].values()]
                  if isinstance(e.get("config"), str) and not e["config"].startswith("failed")})


def _spec(config):
    try:
        return ffncli.load_spec(config=ZOO / config)
    except FfnError:
        return None  # a type ffncli refuses (test_zoo_counts.py)


@pytest.mark.parametrize("config", CONFIGS)
def test_training_memory_is_of_every_parameter_or_refused(config):
    spec = _spec(config)
    if spec is None:
        return
    try:
        t = training(spec, Plan())
    except SpecError as e:
        assert str(e).count("\n") == 0 and "not counted yet (the tensor inventory " in str(e)
        return
    assert t.trainable_params.total == sum(x.numel * x.count for x in tensors(spec)) \
        == ffncli.count(spec).total


@pytest.mark.parametrize("model_type, held, total", [
    ("gpt_oss", 116_829_154_368, 116_829_156_672),  # its attention sinks, 64 a layer
    ("inkling_text", 974_227_296_768, 975_340_270_146),
])
def test_an_inventory_short_of_the_count_is_one_line(cli, model_type, held, total):
    path = ZOO / "configs" / f"{model_type}.config.json"
    r = cli("params", "--config", path, "--train", "full")
    assert (r.code, r.out) == (2, "")
    assert r.err == (f"error: {model_type}: option --train: the memory of fine-tuning it is not "
                     f"counted yet (the tensor inventory holds {held:,} of its {total:,} "
                     "parameters); params counts its parameters exactly\n")


def test_latent_attention_with_an_indexer_no_longer_raises(cli):
    """DeepSeek-V3.2's indexer matrices have no LoRA target name: a KeyError before."""
    r = cli("params", "--config", ZOO / "flagships" / "DeepSeek-V3.2-Exp.config.json",
            "--train", "lora")
    assert (r.code, r.out) == (2, "")
    assert r.err.startswith("error: deepseek_v32: option --train: the memory of fine-tuning it "
                            "is not counted yet (the tensor inventory holds ")
    assert r.err.count("\n") == 1
