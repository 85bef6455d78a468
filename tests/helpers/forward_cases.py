"""The tiny checkpoints of tests/data/forward (made by tests/fixtures/make_forward.py): their
PyTorch references, their ids, and copies with a config key or a tensor changed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

FORWARD = Path(__file__).parents[1] / "data" / "forward"
IDS = FORWARD / "gpt2" / "ids.txt"  # 3 sequences, ids below 128: every fixture's vocabulary


def checkpoint(tmp_path: Path, base: str, config: dict | None = None,
               tensors: dict[str, np.ndarray] | None = None) -> Path:
    """A copy of the fixture ``base`` with some config keys and tensors replaced."""
    st = pytest.importorskip("safetensors.numpy")
    folder = tmp_path / f"{base}-edited"
    folder.mkdir(parents=True)
    settings = json.loads((FORWARD / base / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**settings, **(config or {})}))
    weights = st.load_file(str(FORWARD / base / "model.safetensors"))
    st.save_file({**weights, **(tensors or {})}, str(folder / "model.safetensors"))
    return folder


def nan_at(base: str, name: str, tmp_path: Path, value: float = np.nan) -> Path:
    st = pytest.importorskip("safetensors.numpy")
    w = st.load_file(str(FORWARD / base / "model.safetensors"))[name].copy()
    w.flat[0] = value
    return checkpoint(tmp_path, base, tensors={name: w})


def capture(cli, weights: Path, ids: Path, out: Path, *extra: str):
    return cli("capture", "--weights", weights, "--ids", ids, "--out", out, *extra)


def expected(case: str) -> dict[str, np.ndarray]:
    with np.load(FORWARD / case / "expected.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def ids_of(case: str) -> list[list[int]]:
    lines = (FORWARD / case / "ids.txt").read_text().splitlines()
    return [[int(t) for t in line.split()] for line in lines if line.strip()]


def assert_close(got: np.ndarray, want: np.ndarray, what: str, rel: float = 1e-4) -> None:
    """Within ``rel`` of the reference's largest value, and in RMS of its RMS."""
    assert got.shape == want.shape, what
    worst = np.abs(got - want).max()
    rms = np.sqrt(np.mean((got.astype(np.float64) - want) ** 2))
    assert worst <= rel * np.abs(want).max(), f"{what}: max error {worst:.3g}"
    assert rms <= rel * np.sqrt(np.mean(want.astype(np.float64) ** 2)), f"{what}: rms {rms:.3g}"


def check_routers(model, case: str, layers: list[int], close) -> None:
    """On transformers' own FFN input of each MoE layer, and on ours (``model``'s): the router
    logits, the chosen experts (in transformers' order, best first) and their weights equal
    the fixture's records, ``close`` comparing floats; the records are of those layers only."""
    from ffncli.compute import ffn as F
    from ffncli.compute.forward.walk import hidden_states

    want = expected(case)
    assert sorted(int(k[6:]) for k in want if k.startswith("router")) == layers
    ours, _ = hidden_states(model, [np.array(s, dtype=np.int64) for s in ids_of(case)], layers)
    for i in layers:
        p = model.layer(i).engine.weights
        assert isinstance(p, F.MoEWeights)
        for x in (want[f"layer{i}"], ours[i]):
            close(F.router_logits(x, p), want[f"router{i}"], f"{case} router {i}")
            order, weights = F.route(x, p)
            np.testing.assert_array_equal(order, want[f"chosen{i}"])
            close(weights, want[f"weights{i}"], f"{case} weights {i}")


def check_capture(cli, out: Path, case: str, layers: int, close) -> None:
    """capture of the fixture's ids writes every layer's FFN input as transformers' records."""
    want = expected(case)
    folder = FORWARD / case
    r = capture(cli, folder, folder / "ids.txt", out, "--json")
    assert r.code == 0, r.err
    assert r.json()["layers"] == list(range(layers))
    for i in range(layers):
        close(np.load(out / f"layer{i}.npy"), want[f"layer{i}"], f"{case} {i}")


def check_relu_stats(cli, case: str, layers: list[int], experts: int, pre) -> None:
    """relu-stats --ids on the fixture: each expert's tokens are those transformers routed to
    it; its inactive units those whose gate pre-activation ``pre(layer, expert, x)`` of
    transformers' FFN input rows x is <= 0."""
    want = expected(case)
    folder = FORWARD / case
    r = cli("relu-stats", "--weights", folder, "--ids", folder / "ids.txt", "--json")
    assert r.code == 0, r.err
    found = {d["layer"]: d for d in r.json()["layers"]}
    for i in layers:
        x = want[f"layer{i}"]
        per_expert = {d["expert"]: d for d in found[i]["per_expert"]}
        for e in range(experts):
            rows = np.flatnonzero((want[f"chosen{i}"] == e).any(axis=1))
            if rows.size == 0:
                assert per_expert.get(e, {"tokens": 0})["tokens"] == 0
                continue
            h = pre(i, e, x[rows])  # (tokens routed, d_ff)
            assert per_expert[e]["tokens"] == rows.size
            assert per_expert[e]["mean_inactive_fraction"] == pytest.approx(
                float((h <= 0).mean()), abs=1e-12)


def check_run(cli, tmp_path: Path, case: str, layer: int, oracle, close) -> None:
    """run --input (transformers' FFN input of ``layer``) --layer: the output is ``oracle``'s
    (the sum over transformers' chosen experts with transformers' weights)."""
    np.save(tmp_path / "x.npy", expected(case)[f"layer{layer}"])
    r = cli("run", "--weights", FORWARD / case, "--layer", str(layer), "--input",
            tmp_path / "x.npy", "--json")
    assert r.code == 0, r.err
    close(np.array(r.json()["output"]), oracle, f"{case} run")


def check_experts(cli, case: str, layers: list[int], experts: int, shared: int,
                  rule: str | None = None) -> None:
    """The experts command profiles the MoE ``layers`` only (dense ones left out), its loads
    are counts of transformers' chosen experts, its shared experts (and rule) the family's."""
    folder = FORWARD / case
    r = cli("experts", "--weights", folder, "--ids", folder / "ids.txt", "--json", "--quiet")
    assert r.code == 0, r.err
    doc = r.json()
    want = expected(case)
    assert [x["layer"] for x in doc["layers"]] == layers
    for x in doc["layers"]:
        chosen = want[f"chosen{x['layer']}"]
        assert x["load"] == np.bincount(chosen.ravel(), minlength=experts).tolist()
        assert x["shared_experts"] == shared
        assert rule is None or x["rule"] == rule
