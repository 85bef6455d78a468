"""relu-stats --text/--ids (jobs/sweep.py): every layer's statistics on its real input, checked
against relu-stats run layer by layer on the captured files (the same inputs by another path)
and on PyTorch's inputs (tests/data/forward/<case>/expected.npz); batches change nothing, and
no layer's FFN is kept once the walk has left it."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.forward_cases import FORWARD, expected, ids_of
from helpers.installed_models import minilm

# ---------------------------------------------------------------------------------------------
# relu-stats --text: the sweep


@pytest.mark.slow
def test_sweep_equals_relu_stats_on_captured_inputs(cli, tmp_path):
    """Each layer's statistics on the fly equal relu-stats on the captured file: the same
    counts, exactly, by two paths."""
    model = minilm()
    text = FORWARD / "minilm" / "text.txt"
    assert cli("capture", "--weights", model, "--text", text, "--out", tmp_path / "o").code == 0
    r = cli("relu-stats", "--weights", model, "--text", text, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert [row["layer"] for row in doc["layers"]] == list(range(6))
    assert doc["tokens"] == sum(len(s) for s in ids_of("minilm"))
    for row in doc["layers"]:
        i = row["layer"]
        one = cli("relu-stats", "--weights", model, "--layer", i, "--input",
                  tmp_path / "o" / f"layer{i}.npy", "--json").json()
        for key in ("tokens", "inactive_per_token", "dead_units", "always_active_units",
                    "activity_histogram", "hot_unit_coverage", "aggregated_sparsity"):
            assert row[key] == one[key], (i, key)
        assert row["mean_inactive_fraction"] == pytest.approx(one["mean_inactive_fraction"],
                                                              rel=1e-12)


@pytest.mark.slow
def test_sweep_on_pytorch_inputs(cli, tmp_path):
    """Against PyTorch's inputs: the mean inactive fraction of every layer agrees to a few
    units in a thousand (a unit whose pre-activation is within float error of 0 may flip)."""
    model = minilm()
    want = expected("minilm")
    doc = cli("relu-stats", "--weights", model, "--text", FORWARD / "minilm" / "text.txt",
              "--json").json()
    for row in doc["layers"]:
        i = row["layer"]
        x = tmp_path / f"ref{i}.npy"
        np.save(x, want[f"layer{i}"])
        ref = cli("relu-stats", "--weights", model, "--layer", i, "--input", x, "--json").json()
        assert row["tokens"] == ref["tokens"]
        assert abs(row["mean_inactive_fraction"] - ref["mean_inactive_fraction"]) < 1e-3
        assert 0.3 < row["mean_inactive_fraction"] < 0.95  # real inputs: a sparse hidden layer


@pytest.mark.slow
def test_sweep_one_layer_prints_the_full_statistics(cli):
    model = minilm()
    r = cli("relu-stats", "--weights", model, "--text", FORWARD / "minilm" / "text.txt",
            "--layer", "3")
    assert r.code == 0, r.err
    assert "every layer's FFN on its real input" in r.out
    assert "units by how often they are active" in r.out  # today's single-layer tables
    assert "dead on these 207 tokens (never active): " in r.out  # dead on a sample, said so


def test_sweep_target_sparsity_calibrates_each_layer(cli):
    folder = FORWARD / "gpt2"
    doc = cli("relu-stats", "--weights", folder, "--ids", folder / "ids.txt",
              "--target-sparsity", "0.25", "--json").json()
    for row in doc["layers"]:
        assert row["threshold"] is not None
        assert row["mean_inactive_fraction"] == pytest.approx(0.25, abs=0.02)


# ---------------------------------------------------------------------------------------------
# The sweep in the library: batches change nothing, one layer's FFN in memory


def _gpt2_sweep(**options):
    from ffncli.jobs.choices import ModelChoice, TextChoice
    from ffncli.jobs.resolve import load_sequences, open_forward
    from ffncli.jobs.sweep import sweep
    from ffncli.specs.spec import Overrides

    folder = FORWARD / "gpt2"
    model = open_forward(ModelChoice(weights=folder), Overrides())
    sequences = load_sequences(TextChoice(ids=folder / "ids.txt"), model, folder)
    return model, sweep(model, sequences, (0, 1), **options)


@pytest.mark.parametrize("options", [{}, {"target_sparsity": 0.3}, {"threshold": 0.05}])
def test_sweep_does_not_depend_on_the_batches(options):
    """The calibration uses the text's first tokens whatever the batches: the same numbers
    with batches of one sequence and with one batch of all."""
    from ffncli.present.stats import sweep_json

    _, small = _gpt2_sweep(batch_tokens=1, **options)
    _, large = _gpt2_sweep(batch_tokens=4096, **options)
    a, b = sweep_json(small), sweep_json(large)
    for x, y in zip(a["layers"], b["layers"], strict=True):  # products round with the rows
        assert x["cats_threshold_50"] == pytest.approx(y["cats_threshold_50"], rel=1e-4)
        if x["threshold"] is not None:
            assert x["threshold"] == pytest.approx(y["threshold"], rel=1e-4)
        assert x["tokens"] == y["tokens"]
        assert x["mean_inactive_fraction"] == pytest.approx(y["mean_inactive_fraction"],
                                                            abs=1e-3)


@pytest.mark.parametrize("options", [{}, {"target_sparsity": 0.3}, {"threshold": 0.05}])
def test_sweep_counts_a_dense_ffn_as_the_walk_computes_it(options, monkeypatch):
    """Each layer's gate product is computed once, by the walk: the counts and the calibration
    come from the walk's own FFN, never from a second product of the inputs (which the numbers
    equal: the tests above compare them with relu-stats on the captured inputs)."""
    from ffncli.analysis import calibration, sparsity
    from ffncli.jobs import sweep as sweep_job

    def second_product(*args, **kwargs):
        raise AssertionError("the gate computed a second time")

    for module, name in ((sparsity, "pre_activation"), (calibration, "pre_activation"),
                         (calibration, "gate_and_up"), (sweep_job, "calibrate_threshold")):
        monkeypatch.setattr(module, name, second_product)
    monkeypatch.setattr(calibration, "CALIBRATION_TOKENS", 10)  # calibrated across batches
    _, result = _gpt2_sweep(batch_tokens=4, **options)
    assert all(row.stats.tokens == result.tokens == 21 for row in result.layers)
    assert all(row.cats_threshold_50 > 0 for row in result.layers)


@pytest.mark.slow
def test_sweep_lets_each_layers_ffn_go(monkeypatch):
    """When the walk builds layer i, the FFNs of layers < i - 1 are gone: the sweep keeps no
    layer's weights once the walk has left it (the walk itself holds layer i - 1 until then)."""
    import gc
    import weakref

    from ffncli.jobs.choices import ModelChoice, TextChoice
    from ffncli.jobs.resolve import load_sequences, open_forward
    from ffncli.jobs.sweep import sweep
    from ffncli.specs.spec import Overrides

    folder = minilm()
    model = open_forward(ModelChoice(weights=folder), Overrides())
    sequences = load_sequences(TextChoice(text=FORWARD / "minilm" / "text.txt"), model, folder)
    engines: list[weakref.ref] = []
    alive_at: list[list[bool]] = []
    build = type(model).layer

    def layer(self, i):
        gc.collect()
        alive_at.append([ref() is not None for ref in engines])
        block = build(self, i)
        engines.append(weakref.ref(block.engine))
        return block

    monkeypatch.setattr(type(model), "layer", layer)
    sweep(model, sequences, (0, 1, 2, 3))
    assert alive_at == [[], [True], [False, True], [False, False, True]]


@pytest.mark.parametrize("tokens", [16, 17])
def test_sweep_pairwise_table_up_to_sixteen_tokens(cli, tmp_path, tokens):
    """Up to SMALL_OVERLAP (16) tokens, every layer has the pairwise table of relu-stats, its
    every pair (16 tokens: 120 pairs) with the count by chance of its two set sizes; past
    that, none."""
    gpt2 = FORWARD / "gpt2"
    ids = tmp_path / "ids.txt"
    ids.write_text(" ".join(str(7 + 3 * i) for i in range(tokens)) + "\n")
    doc = cli("relu-stats", "--weights", gpt2, "--ids", ids, "--json").json()
    for layer in doc["layers"]:
        pairs = layer.get("pairwise_overlap")
        if tokens == 17:
            assert pairs is None
            continue
        assert len(pairs) == 16 * 15 // 2
        sizes = layer["inactive_per_token"]
        for p in pairs:
            assert p["by_chance"] == pytest.approx(sizes[p["a"]] * sizes[p["b"]] /
                                                   layer["d_ff"], rel=1e-12)


def test_a_preset_with_weights_takes_the_forward_s_settings_from_the_config_beside(cli,
                                                                                   tmp_path):
    """--preset FILE gives the shapes; the whole model's settings (here Qwen2's sliding window
    of 4 from layer 1, rope_theta 1e6) come from the config.json beside the weights, so the
    sweep is the one of the checkpoint alone, which matches PyTorch (test_forward.py)."""
    case = FORWARD / "qwen2-window"
    preset = tmp_path / "qwen2-window.yaml"
    preset.write_text(
        "family: llama\nd_model: 16\nseq_len: 64\n"
        "ffn: {d_ff: 32, activation: silu, gated: true, bias: false}\n"
        "attention: {heads: 2, kv_heads: 1, head_dim: 8, qkv_bias: true, out_bias: false}\n"
        "norm: {kind: rmsnorm, bias: false, final: true}\nlayers: {decoder: 3}\n"
        "embeddings: {vocab: 128, head: tied}\n")
    args = ("relu-stats", "--weights", case, "--ids", case / "ids.txt", "--json")
    alone = cli(*args).json()
    with_preset = cli(*args, "--preset", preset).json()
    assert with_preset["layers"] == alone["layers"]


def test_sweep_calibrates_on_the_first_tokens_only(cli, tmp_path, monkeypatch):
    """With CALIBRATION_TOKENS at 20 (small, to see it), the sweep's --target-sparsity
    threshold of a layer is relu-stats' on that layer's captured input: both take the
    text's first 20 tokens, whatever the walk's batches held."""
    from ffncli.analysis import calibration

    monkeypatch.setattr(calibration, "CALIBRATION_TOKENS", 20)
    folder = FORWARD / "gpt2"
    ids = folder / "ids.txt"
    swept = cli("relu-stats", "--weights", folder, "--ids", ids, "--layer", "1",
                "--target-sparsity", "0.5", "--json").json()["layers"][0]
    assert cli("capture", "--weights", folder, "--ids", ids, "--layer", "1", "--out",
               tmp_path / "cap").code == 0
    alone = cli("relu-stats", "--weights", folder, "--layer", "1", "--input",
                tmp_path / "cap" / "layer1.npy", "--target-sparsity", "0.5", "--json").json()
    assert swept["tokens"] == alone["tokens"] > 20
    assert swept["threshold"] == pytest.approx(alone["threshold"], rel=1e-6)
    assert swept["mean_inactive_fraction"] == pytest.approx(alone["mean_inactive_fraction"],
                                                            abs=1e-9)
