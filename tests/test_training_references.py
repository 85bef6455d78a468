"""`params --train` against the libraries it follows, measured by them (tests/data/training,
made by tests/fixtures/make_training.py; its README says how): peft's LoRA counts, PyTorch's
optimizer states after a real step, bitsandbytes' 8-bit AdamW and NF4 storage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CONFIGS, DATA

from ffncli.counting.tensors import Tensor
from ffncli.counting.training import Plan, nf4_bytes, optimizer_bytes, training
from ffncli.specs.archs import load_config, spec_from_config

REF = DATA / "training"
LORA = json.loads((REF / "lora.json").read_text())
OPTIMIZERS = json.loads((REF / "optimizers.json").read_text())
BNB = json.loads((REF / "bitsandbytes.json").read_text())

# Targets whose peft count is on the checkpoint's separate matrices. transformers 5 fuses a
# mixture of experts' matrices into 3-D parameters, and peft 0.21 then adapts gate+up as one
# matrix at rank 2r: those cases are compared below on the dense parts only.
SEPARATE = {"llama-2-7b": ("q,k,v,o", "attention", "gate,up,down", "ffn", "all-linear"),
            "gpt2": ("q,k,v,o", "attention", "ffn", "all-linear"),
            "mixtral-8x7b": ("q,k,v,o", "attention", "router"),
            "qwen3-30b-a3b": ("q,k,v,o", "attention", "router")}


def lora_params(spec, targets: str, rank: int) -> int:
    plan = Plan(mode="lora", lora_targets=tuple(targets.split(",")), lora_rank=rank)
    return training(spec, plan).lora_params.total


@pytest.mark.parametrize("model,targets,rank", [
    (m, t, r) for m, ts in SEPARATE.items() for t in ts for r in (8, 64)])
def test_lora_equals_peft(model, targets, rank):
    spec = load_config(CONFIGS / f"{model}.config.json")
    expected = LORA["models"][model]["targets"][targets][f"r={rank}"]["trainable"]
    assert lora_params(spec, targets, rank) == expected


def test_moe_experts_are_counted_on_separate_matrices():
    """peft on transformers 5's fused experts adapts gate_up_proj (E, 2f, d) at rank 2r; on
    the checkpoint's separate w1, w3, w2 it is r (d + f) each. The fixture's fused count and
    ours differ by exactly that."""
    spec = load_config(CONFIGS / "mixtral-8x7b.config.json")
    d, f, e, layers, r = 4096, 14336, 8, 32, 8
    fused = LORA["models"]["mixtral-8x7b"]["targets"]["ffn"]["r=8"]["trainable"]
    assert fused == layers * e * (2 * r * (d + 2 * f) + r * (d + f))
    assert lora_params(spec, "ffn", r) == layers * e * 3 * r * (d + f)
    whole = LORA["models"]["mixtral-8x7b"]["targets"]["all-linear"]["r=8"]["trainable"]
    assert lora_params(spec, "all-linear", r) == whole - fused + layers * e * 3 * r * (d + f)


def tiny_llama(tied: bool):
    config = {**OPTIMIZERS["model"]["config"], "model_type": "llama",
              "tie_word_embeddings": tied}
    return spec_from_config(config, "tiny llama")


OPTIMIZER_NAMES = {"AdamW": "adamw", "Adam": "adam", "SGD(momentum=0)": "sgd",
                   "SGD(momentum=0.9)": "sgd-momentum", "Adafactor": "adafactor"}


@pytest.mark.parametrize("case", ["tied-float32", "tied-bfloat16", "untied-float32",
                                  "untied-bfloat16"])
@pytest.mark.parametrize("torch_name", list(OPTIMIZER_NAMES))
def test_full_training_states_equal_pytorch_s(case, torch_name):
    tied, dtype = case.split("-")
    measured = OPTIMIZERS["cases"][case][torch_name]
    spec = tiny_llama(tied == "tied")
    plan = Plan(optimizer=OPTIMIZER_NAMES[torch_name],
                precision="fp32" if dtype == "float32" else "bf16")
    t = training(spec, plan)
    assert t.trainable_params.total == measured["param_numel"]
    assert t.weights.total == measured["param_bytes"]
    assert t.gradients.total == measured["grad_bytes"]
    assert t.optimizer.total == measured["state_bytes"]
    assert t.master.total == 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_states_by_shape_equal_pytorch_s(dtype):
    for torch_name, shapes in OPTIMIZERS["cases"][f"shapes-{dtype}"].items():
        for shape, state in shapes.items():
            tensor = Tensor("ffn", tuple(json.loads(shape)), 1, "up")
            expected = sum(entry["nbytes"] for entry in state.values())
            size = 4 if dtype == "float32" else 2
            assert optimizer_bytes(OPTIMIZER_NAMES[torch_name], tensor, size) == expected, \
                (torch_name, shape)


@pytest.mark.parametrize("case", list(BNB["adamw8bit"]["tiny_llama"]))
def test_adamw_8bit_equals_bitsandbytes(case):
    measured = BNB["adamw8bit"]["tiny_llama"][case]
    tied, dtype = case.split("-")
    t = training(tiny_llama(tied == "tied"), Plan(
        optimizer="adamw-8bit", precision="fp32" if dtype == "float32" else "bf16"))
    assert measured["distinct_qmap_tensors"] == 2
    assert t.optimizer.total == measured["state_bytes_excluding_qmaps"] \
        + measured["qmap_bytes_once"]


def test_adamw_8bit_single_tensors_equal_bitsandbytes():
    for name, case in BNB["adamw8bit"]["shapes"].items():
        shape = tuple(json.loads(name.split("-")[0]))
        expected = case["state_bytes_excluding_shared_qmaps"]
        assert optimizer_bytes("adamw-8bit", Tensor("ffn", shape, 1, "up"), 4) == expected, name


@pytest.mark.parametrize("shape", list(BNB["nf4"]["double_quant"]))
def test_nf4_equals_bitsandbytes(shape):
    stored = BNB["nf4"]["double_quant"][shape]
    parts = ("packed", "absmax", "code", "offset", "nested_absmax", "nested_code")
    assert nf4_bytes(stored["numel"]) == sum(stored[p]["nbytes"] for p in parts)


def test_the_fixtures_name_their_versions():
    for doc in (LORA, OPTIMIZERS, BNB):
        assert doc["versions"]["torch"].startswith("2.13.0")
    assert LORA["versions"]["peft"] == "0.21.2" and BNB["versions"]["bitsandbytes"] == "0.50.2"
    assert Path(REF / "README.md").is_file()


LORA_V4 = json.loads((REF / "lora-v4.json").read_text())


@pytest.mark.parametrize("model,targets,rank", [
    (m, t, r) for m, entry in LORA_V4["models"].items() for t in entry["targets"]
    for r in (8, 64)])
def test_lora_on_separate_experts_equals_peft_on_transformers_4(model, targets, rank):
    """transformers 4 keeps each expert's matrices as nn.Linear (the checkpoint's layout):
    peft's count there is ours, experts, routers and all-linear included."""
    assert LORA_V4["versions"]["transformers"].startswith("4.")
    spec = load_config(CONFIGS / f"{model}.config.json")
    expected = LORA_V4["models"][model]["targets"][targets][f"r={rank}"]["trainable"]
    assert lora_params(spec, targets, rank) == expected
