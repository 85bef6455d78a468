"""``--sparsify`` on a mixture of experts (issue 42 §1): each chosen expert's hidden layer is
cut by the layer's rule on the tokens routed to it, the routing and the shared experts dense.

The oracle: the fixtures' own weights read with safetensors (test_forward_moe's readers),
transformers' FFN input of the layer, its chosen experts and their weights (expected.npz),
and compute/ffn.py's plain formulas written out token by token in float64."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.forward_cases import expected
from test_forward_moe import FORWARD, _experts_of, _tensor, load

from ffncli.compute import ffn as F
from ffncli.compute.sparse import Cut, SparseFfn

CASES = ["qwen2_moe", "qwen3_moe"]
LAYER = 1  # each fixture's first MoE layer (layer 0 is dense in both)


def _shared(case: str, x: np.ndarray) -> np.ndarray:
    """Qwen2-MoE's shared expert behind its sigmoid gate, dense (the cut leaves it)."""
    if case != "qwen2_moe":
        return np.zeros_like(x)
    stem = f"model.layers.{LAYER}.mlp."
    g, u, d = (_tensor(case, f"{stem}shared_expert.{m}_proj.weight")
               for m in ("gate", "up", "down"))
    gate = _tensor(case, f"{stem}shared_expert_gate.weight")[0]
    y = (F.silu(x @ g.T) * (x @ u.T)) @ d.T
    return y * F.sigmoid(x @ gate)[:, None]


def _oracle(case: str, cut: Cut) -> tuple[np.ndarray, int, int]:
    """The sparsified FFN output of layer LAYER on transformers' input, and the hidden units
    (cats, topk; teal: down inputs) and input entries (teal) zeroed, over the routed pairs."""
    want = expected(case)
    x = want[f"layer{LAYER}"].astype(np.float64)
    experts = _experts_of(case, LAYER)
    out, zeroed, zeroed_in = _shared(case, x), 0, 0
    for t in range(x.shape[0]):
        for e, w in zip(want[f"chosen{LAYER}"][t], want[f"weights{LAYER}"][t], strict=True):
            g, u, d = (m.astype(np.float64) for m in experts[e])
            xt = x[t].copy()
            if cut.rule == "teal":
                small = np.abs(xt) <= cut.threshold
                zeroed_in += int(small.sum())
                xt[small] = 0
            a = F.silu(g @ xt)
            if cut.rule == "cats":
                off = np.abs(a) <= cut.threshold
            elif cut.rule == "topk":
                off = np.ones(a.size, dtype=bool)
                off[np.argsort(-np.abs(a))[:cut.keep]] = False
            else:
                off = np.zeros(a.size, dtype=bool)
            h = np.where(off, 0, a) * (u @ xt)
            if cut.rule == "teal":
                off = np.abs(h) <= cut.down
                h[off] = 0
            zeroed += int(off.sum())
            out[t] += w * (d @ h)
    return out, zeroed, zeroed_in


def _gap(values: np.ndarray, share: float) -> float:
    """A threshold near the ``share`` quantile of ``values`` in the widest gap between two
    neighbours there: no value near it, so float32 and float64 cut the same units."""
    v = np.sort(np.abs(values).ravel())
    lo, hi = int(len(v) * (share - 0.1)), int(len(v) * (share + 0.1))
    k = lo + int(np.argmax(np.diff(v[lo:hi + 1])))
    return float((v[k] + v[k + 1]) / 2)


def _cuts(case: str) -> list[Cut]:
    """A cut of each rule near half of the layer's values (transformers' routing)."""
    want = expected(case)
    x = want[f"layer{LAYER}"].astype(np.float64)
    experts = _experts_of(case, LAYER)
    a = np.concatenate([F.silu(x[t] @ experts[e][0].T.astype(np.float64))
                        for t in range(x.shape[0]) for e in want[f"chosen{LAYER}"][t]])
    h = np.concatenate([F.silu(x[t] @ experts[e][0].T) * (x[t] @ experts[e][1].T)
                        for t in range(x.shape[0]) for e in want[f"chosen{LAYER}"][t]])
    return [Cut("cats", threshold=_gap(a, 0.5)),
            Cut("teal", threshold=_gap(x, 0.3), down=_gap(h, 0.5)),
            Cut("topk", keep=6)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rule", ["cats", "teal", "topk"])
def test_the_sparsified_mixture_equals_the_oracle(case, rule):
    """SparseFfn of the layer's mixture equals the oracle's experts cut one by one (shared
    expert dense), and counts the same units zeroed over the 21 x 2 routed pairs."""
    cut = next(c for c in _cuts(case) if c.rule == rule)
    want, zeroed, zeroed_in = _oracle(case, cut)
    x = expected(case)[f"layer{LAYER}"]
    engine = load(case).layer(LAYER).engine
    sparse = SparseFfn(engine, cut)
    out = np.empty_like(x)
    sparse(x, out)
    dense = engine(x)
    assert np.abs(out - want).max() <= 1e-4 * np.abs(want).max()
    assert np.abs(out - dense).max() > 1e-2 * np.abs(dense).max()  # the cut changed it
    c = sparse.counts
    assert (c.tokens, c.zeroed, c.zeroed_in) == (21 * 2, zeroed, zeroed_in)
    assert c.error2 == pytest.approx(float(np.sum((out - dense) ** 2.0)), rel=1e-4)
    assert zeroed > 0 and (rule != "topk" or zeroed == 21 * 2 * (16 - 6))


def _perplexity(cli, case: str, *args: str) -> dict:
    r = cli("perplexity", "--weights", FORWARD / case, "--ids", FORWARD / case / "ids.txt",
            "--ctx", "8", "--json", *args)
    assert r.code == 0, r.err
    return r.json()


@pytest.mark.parametrize("case", CASES)
def test_perplexity_sparsifies_the_experts_to_the_target(cli, case):
    """cats at 0.5 over the fixture's MoE layer 1 alone (its input the dense stream's, so
    routed as calibrated): achieved 0.5 within the calibration's 0.01 (test_perplexity_torch's
    tolerance); over every layer (the stream changed by the layers before) within 0.02; the
    perplexity moved from the dense one."""
    one = _perplexity(cli, case, "--sparsify", "cats", "--target-sparsity", "0.5",
                      "--layer", str(LAYER))
    (v,) = one["variants"]
    assert abs(v["sparsity"] - 0.5) <= 0.01
    assert [c["layer"] for c in v["layers"]] == [LAYER]
    # the layer's routed pairs: 16 hidden units of the expert each, 2 per token
    assert v["macs_per_token"] == 3 * 32 * 16
    assert v["perplexity"] != pytest.approx(one["perplexity"], rel=1e-4)
    every = _perplexity(cli, case, "--sparsify", "cats", "--target-sparsity", "0.5")
    (v,) = every["variants"]
    assert abs(v["sparsity"] - 0.5) <= 0.02
    assert all(abs(c["sparsity"] - 0.5) <= 0.02 for c in v["layers"])
    assert v["perplexity"] != pytest.approx(every["perplexity"], rel=1e-4)
    assert every["perplexity"] == one["perplexity"]  # the dense model's, either way


@pytest.mark.parametrize("case", CASES)
def test_a_zero_top_k_target_is_the_dense_model(cli, case):
    """topk at 0 keeps every unit: the mixture's routed sum as the engine's, to the bit."""
    d = _perplexity(cli, case, "--sparsify", "topk", "--target-sparsity", "0")
    (v,) = d["variants"]
    assert (v["perplexity"], v["sparsity"]) == (d["perplexity"], 0.0)
    assert all(c["ffn_relative_error"] == 0.0 for c in v["layers"])


@pytest.mark.parametrize("rule", ["teal", "topk"])
def test_thresholds_saved_on_a_mixture_are_applied_again(cli, tmp_path, rule):
    """--save-thresholds then --thresholds: the same variant again. topk keeps 48 of the dense
    layer 0's 64 units and 12 of an expert's 16 (each layer's width, not the spec's d_ff: the
    file was refused before, 48 being past 16)."""
    saved = tmp_path / "t.json"
    first = _perplexity(cli, "qwen2_moe", "--sparsify", rule, "--target-sparsity", "0.25",
                        "--save-thresholds", saved)
    again = _perplexity(cli, "qwen2_moe", "--thresholds", saved)
    assert again["variants"][0]["perplexity"] == first["variants"][0]["perplexity"]
    assert again["variants"][0]["sparsity"] == first["variants"][0]["sparsity"]
    if rule == "topk":
        doc = json.loads(saved.read_text())
        assert [c["keep"] for c in doc["entries"][0]["layers"]] == [48, 12, 12]
        doc["entries"][0]["layers"][1]["keep"] = 17
        saved.write_text(json.dumps(doc))
        r = cli("perplexity", "--weights", FORWARD / "qwen2_moe", "--ids",
                FORWARD / "qwen2_moe" / "ids.txt", "--ctx", "8", "--thresholds", saved)
        assert (r.code, r.err) == (2, f"error: {saved}: entry 1: layer entry 2: key 'keep': "
                                      "expected a whole number from 0 to 16, got 17\n")


def test_a_sharded_run_equals_one_process(cli):
    """Two workers (calibration sent with the tasks, sums merged) give one process's result."""
    one, two = (_perplexity(cli, "qwen3_moe", "--sparsify", "cats", "--target-sparsity", "0.5",
                            "--workers", w) for w in ("1", "2"))
    assert two["variants"] == one["variants"] and two["perplexity"] == one["perplexity"]
