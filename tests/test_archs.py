"""The table of architectures (specs/table.py): each new model type's FFN layout, read by
run --weights from the model's own checkpoint layout, against transformers' MLP.

tests/data/arch_ffn/ holds layer 1's FFN tensors of each tiny model (names as the model saves
them, random normal(0, 0.3) values) and that layer's output on six tokens, computed by the
model's own MLP module (tests/fixtures/make_arch_ffn_reference.py). No torch needed here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import DATA

from ffncli.compute import ffn as F
from ffncli.compute.weights import checkpoint_weights as safetensors_weights
from ffncli.errors import WeightsError
from ffncli.specs.archs import spec_from_config, with_ffn_layout

FOLDER = DATA / "arch_ffn"

REFERENCE = np.load(FOLDER / "reference.npz", allow_pickle=False)

MODELS = json.loads((DATA / "arch_totals.json").read_text())["models"]

NAMES = sorted(k[2:] for k in REFERENCE.files if k.startswith("x_"))


def _spec(name):
    return spec_from_config(dict(MODELS[name]["config"]), name)


def test_every_layout_of_a_new_type_is_tested():
    new = {"qwen3", "gemma2", "gemma3_text", "phi3", "olmo", "olmo2", "granite", "starcoder2",
           "gpt_bigcode", "gptj", "falcon", "stablelm", "bloom", "mpt", "electra", "cohere"}
    assert new <= set(with_ffn_layout())
    assert {_spec(n).family for n in NAMES} == new | {"bert"}  # xlm-roberta reads as bert


@pytest.mark.parametrize("name", NAMES)
def test_layer_matches_transformers_mlp(name):
    spec = _spec(name)
    weights = safetensors_weights(FOLDER / f"{name}.safetensors", spec, 1, np.dtype("f4"))
    y = F.ffn(REFERENCE[f"x_{name}"], weights, spec.ffn.activation)  # the plain formulas
    np.testing.assert_allclose(y, REFERENCE[f"y_{name}"], rtol=2e-5, atol=2e-5)


def test_phi3_fused_gate_up_splits_gate_rows_first():
    """gate_up_proj's first d_ff rows are the activated gate: swapping halves changes y."""
    spec = _spec("tiny-phi3")
    weights = safetensors_weights(FOLDER / "tiny-phi3.safetensors", spec, 1, np.dtype("f4"))
    swapped = F.GatedWeights(weights.v, weights.c, weights.w, weights.b, weights.w2, weights.b2)
    x = REFERENCE["x_tiny-phi3"]
    assert not np.allclose(F.ffn(x, swapped, "silu"), REFERENCE["y_tiny-phi3"], atol=1e-3)


def test_missing_layer_names_the_tensor():
    spec = _spec("tiny-gptj")
    with pytest.raises(WeightsError, match=r"no tensor 'h\.0\.mlp\.fc_in\.weight' for layer 0 "
                                           r"\(the file has layers 1-1\)"):
        safetensors_weights(FOLDER / "tiny-gptj.safetensors", spec, 0, np.dtype("f4"))


def test_run_cli_on_a_falcon_layer(cli, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MODELS["tiny-falcon-new"]["config"]))
    x = tmp_path / "x.npy"
    np.save(x, REFERENCE["x_tiny-falcon-new"])
    r = cli("run", "--config", config, "--weights", FOLDER / "tiny-falcon-new.safetensors",
            "--layer", "1", "--input", x, "--json")
    assert r.code == 0, r.err
    np.testing.assert_allclose(np.array(r.json()["output"]), REFERENCE["y_tiny-falcon-new"],
                               rtol=2e-5, atol=2e-5)
