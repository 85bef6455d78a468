"""The one calibration (analysis/calibration.py): which tokens calibrate, for every path that
calibrates, and the sharded text path's thresholds from the walk's own hidden layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ffncli.analysis import calibration
from ffncli.analysis.calibration import calibrate_threshold, calibration_rows, first_batches
from ffncli.compute.forward.walk import walk
from ffncli.jobs.choices import ModelChoice
from ffncli.jobs.shards.drivers import _calibration_portions
from ffncli.jobs.shards.inputs import TextShard
from ffncli.jobs.shards.tasks import calibrate_text
from ffncli.jobs.shards.workers import TextJob, forward_for, release_forwards
from ffncli.specs.spec import Overrides

FORWARD = Path(__file__).parent / "data" / "forward"


def _sequences(lengths: list[int]) -> list[np.ndarray]:
    return [np.arange(n, dtype=np.int64) % 100 for n in lengths]


@pytest.mark.parametrize(("lengths", "need", "batch", "kept", "left"), [
    ([10] * 10, 25, 20, [10] * 4, -15),  # whole batches: 40 tokens for 25
    ([10] * 10, 20, 20, [10] * 2, 0),
    ([10] * 3, 100, 20, [10] * 3, 70),  # a short text: all of it, 70 still wanted
    ([50, 5, 5], 10, 20, [50], -40),  # a long sequence is a batch of its own
    ([10] * 3, 0, 20, [], 0),
])
def test_first_batches_are_whole_batches_until_enough(lengths, need, batch, kept, left):
    got, still = first_batches(_sequences(lengths), batch, need)
    assert [len(s) for s in got] == kept
    assert still == left


def test_one_constant_rules_every_path(monkeypatch):
    """CALIBRATION_TOKENS, changed in calibration.py alone, is what each path calibrates on:
    a token input's rows, a text's first batches, a layer's gathering, a corpus's shards."""
    monkeypatch.setattr(calibration, "CALIBRATION_TOKENS", 25)
    assert calibration_rows(1000) == 25 and calibration_rows(7) == 7
    assert [len(s) for s in first_batches(_sequences([10] * 10), 20)[0]] == [10] * 4

    class Engine:  # what a Gathering reads of its engine
        weights, d_ff, dtype = None, 4, np.dtype(np.float32)

    assert calibration.Gathering(Engine(), [("cats", 0.5)]).left == 25  # type: ignore[arg-type]
    shards = [TextShard(k, f"s{k}", Path(f"s{k}.txt"), None, tuple(_sequences([10] * 3)),
                        (1, 2, 3), k * 30, "0" * 64) for k in range(3)]
    assert [[len(s) for s in p] for p in _calibration_portions(shards)] == [[10] * 3]
    for tokens, portions in ((45, 2), (60, 2), (61, 3)):  # a shard is one batch here
        monkeypatch.setattr(calibration, "CALIBRATION_TOKENS", tokens)
        assert [[len(s) for s in p] for p in _calibration_portions(shards)] == \
            [[10] * 3] * portions


@pytest.mark.parametrize("model", ["llama", "gpt2", "mixtral"])
@pytest.mark.parametrize("target", [None, 0.3])
def test_sharded_text_calibration_reads_the_walks_hidden_layer(model, target, monkeypatch):
    """The corpus's first shards walked once, each dense layer's |a| kept as the walk
    computes it: no second product of the gate (a mixture's inputs are still calibrated from
    its inputs), and the very thresholds of the former way (every selected layer's inputs
    kept, then calibrate_threshold on their first CALIBRATION_TOKENS), to the bit, with the
    first tokens spread over three portions."""
    monkeypatch.setattr(calibration, "CALIBRATION_TOKENS", 70)
    rng = np.random.default_rng(4)
    portions = [[rng.integers(0, 128, int(n)) for n in rng.integers(3, 20, 4)]
                for _ in range(3)]
    job = TextJob(ModelChoice(weights=FORWARD / model), Overrides())
    try:
        m = forward_for(job)
        layers = list(range(m.n_layers))
        moe = [m.layer(i).engine.weights.__class__.__name__ == "MoEWeights" for i in layers]
        with monkeypatch.context() as patch:
            if not any(moe):
                def second_product(*args, **kwargs):
                    raise AssertionError("the gate computed a second time")
                for name in ("_dense_magnitudes", "pre_activation", "gate_and_up"):
                    patch.setattr(calibration, name, second_product)
            got = calibrate_text(job, portions, layers, 0.05, target)
        inputs: dict[int, list[np.ndarray]] = {i: [] for i in layers}
        for sequences in portions:
            walk(m, sequences, layers, lambda i, block, x: inputs[i].append(x.copy()))
        want = []
        for i in layers:
            sample = np.concatenate(inputs[i])[:70]
            engine = m.layer(i).engine
            want.append((calibrate_threshold(engine, sample, 0.5),
                         0.05 if target is None else calibrate_threshold(engine, sample, target)))
    finally:
        release_forwards()
    assert got == want
