"""``ffncli outliers`` and ``ffncli neurons`` against PyTorch (tests/data/units, made by
tests/fixtures/make_units.py from the llama, gpt2 and bert checkpoints of tests/data/forward):
every per-layer maximum and its place, every unit's moments, frequency and top-5 rows of layer
1, and the vocabulary projection against a torch logit-lens of down_proj's columns. The
commands are run as a user runs them (``--json``); no torch here.

Conventions: torch's rows are the tokens of all sequences in order (each sequence run alone);
the JSON names a token by its sequence (``outliers``: ``sequence``, 1-based) or line of the ids
file (``neurons``: ``line``, 1-based; one sequence a line here) and its ``position`` in it
(0-based), so row = the sequence's first row + position. The residual after layer l is the
layer's output: transformers' ``hidden_states[l + 1]``, but for a decoder's last layer, whose
``hidden_states[-1]`` has the final norm applied (the fixture maker checks both). The FFN
output is the down projection's output (BERT's: ``output.dense``, before its dropout, residual
and LayerNorm). Kurtosis is the excess (population) kurtosis, m4 / m2^2 - 3, on both sides.
Places within a relative 1e-4 of a tie are recorded as such by the maker and only their values
asserted (none of the 24 maxima; 9 of the 384 units' top-5 rows; 1 of the 256 lens units)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"
FAMILIES = ["llama", "gpt2", "bert"]
KINDS = ("ffn_input", "hidden", "ffn_output", "residual")
TOP_TIES = {"llama": 3, "gpt2": 5, "bert": 1}  # units with two of their top 6 within 1e-4


def _reference(family: str) -> tuple[dict, dict[str, np.ndarray]]:
    d = DATA / "units" / family
    with np.load(d / "units.npz", allow_pickle=False) as z:
        return json.loads((d / "maxima.json").read_text()), {k: z[k] for k in z.files}


def _starts(family: str) -> np.ndarray:
    lines = (DATA / "forward" / family / "ids.txt").read_text().splitlines()
    return np.concatenate([[0], np.cumsum([len(s.split()) for s in lines])])


def _args(family: str) -> list[object]:
    d = DATA / "forward" / family
    return ["--weights", d, "--ids", d / "ids.txt", "--json"]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_layers_maxima_and_their_places_equal_torchs(cli, family):
    ref, _ = _reference(family)
    r = cli("outliers", *_args(family))
    assert r.code == 0, r.err
    starts, layers = _starts(family), r.json()["layers"]
    assert [x["layer"] for x in layers] == list(range(len(ref["maxima"])))
    for x in layers:
        for kind in KINDS:
            want, got = ref["maxima"][f"layer{x['layer']}"][kind], x[kind]
            what = f"layer {x['layer']} {kind}"
            assert got["max_abs"] == pytest.approx(want["magnitude"], rel=1e-4), what
            assert got["value"] == pytest.approx(want["value"], rel=1e-4), what
            assert not want["ambiguous"]  # none is: every place is asserted
            row = starts[got["sequence"] - 1] + got["position"]
            assert (row, got["channel"]) == (want["row"], want["channel"]), what


def _units(cli, family: str) -> list[dict]:
    vocab = [] if family == "bert" else ["--vocab", "--vocab-top", "5"]
    r = cli("neurons", *_args(family), "--layer", "1", "--top-k", "5", "--window", "0",
            "--samples", "0", "--quiet", *vocab)
    assert r.code == 0, r.err
    (layer,) = r.json()["layers"]
    assert layer["layer"] == 1
    return layer["units"]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_units_moments_frequency_and_top_rows_equal_torchs(cli, family):
    ref, want = _reference(family)
    units, starts = _units(cli, family), _starts(family)
    assert [u["neuron_id"]["neuron_index"] for u in units] == list(range(128))
    got = {k: np.array([u[k] for u in units]) for k in
           ("frequency", "mean", "variance", "skewness", "kurtosis")}
    scale = np.sqrt(want["variance"])
    np.testing.assert_allclose(got["mean"], want["mean"], rtol=1e-4, atol=1e-5 * scale.max())
    np.testing.assert_allclose(got["variance"], want["variance"], rtol=1e-4)
    np.testing.assert_allclose(got["skewness"], want["skewness"], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(got["kurtosis"], want["kurtosis"], rtol=1e-3, atol=1e-4)
    # > 0 counted alike; a value within 1e-4 of 0 (zero_near of them) may flip its sign
    counts = [np.round(f * ref["tokens"]).astype(int) for f in (got["frequency"],
                                                               want["frequency"])]
    assert (np.abs(counts[0] - counts[1]) <= want["zero_near"]).all()
    np.testing.assert_array_equal(*(c[want["zero_near"] == 0] for c in counts))
    for j, u in enumerate(units):
        top = u["most_positive_activation_records"]
        np.testing.assert_allclose([t["activation"] for t in top], want["top_values"][:, j],
                                   rtol=1e-4, atol=1e-5 * np.abs(want["top_values"]).max())
        rows = [starts[t["line"] - 1] + t["position"] for t in top]
        if not want["top_tie"][j]:
            assert rows == want["top_index"][:, j].tolist(), f"unit {j}"
    assert want["top_tie"].sum() == TOP_TIES[family]  # the units whose rows are not asserted


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_the_vocabulary_projection_equals_torchs_logit_lens(cli, family):
    _, want = _reference(family)
    units = _units(cli, family)
    for side, name in (("top", "promotes"), ("bottom", "suppresses")):
        ids = np.array([[p["id"] for p in u[name]] for u in units])
        logits = np.array([[p["logit"] for p in u[name]] for u in units])
        np.testing.assert_allclose(logits, want[f"{side}_logits"], rtol=1e-5,
                                   atol=1e-6 * np.abs(want[f"{side}_logits"]).max())
        sure = ~want["lens_tie"]
        np.testing.assert_array_equal(ids[sure], want[f"{side}_ids"][sure])
    assert want["lens_tie"].sum() == (family == "llama")  # the unit whose order is not asserted
