"""``ffncli outliers`` (analysis/outliers.py, jobs/outliers.py): every layer's peaks against
independent answers (the FFN inputs PyTorch recorded in tests/data/forward, the FFN formulas of
compute/ffn.py run on them, a layer-by-layer loop over the model's blocks), parts of a text
merged against one walk, the flag rules on planted spikes, and the command's output and
errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.forward_cases import FORWARD, checkpoint, expected, ids_of

from ffncli.analysis.outliers import (
    LayerOutliers,
    Peak,
    is_massive,
    massive_threshold,
    persistence,
    spikes,
    super_experts,
    super_weight_layers,
)
from ffncli.compute.ffn import MoEWeights, as_activation, dispatch, ffn, route
from ffncli.jobs.choices import ModelChoice, TextChoice
from ffncli.jobs.confirm import (
    DenseStream,
    SetChannel,
    ZeroWeights,
    down_matrix,
    down_tensor,
    file_index,
    null_cells,
)
from ffncli.jobs.outliers import (
    LayerWatch,
    expert_hidden,
    merge_parts,
    outlier_parts,
    run_outliers,
)
from ffncli.jobs.resolve import open_forward
from ffncli.specs.spec import Overrides

CASES = ["llama", "gpt2", "bert", "distilbert", "qwen2", "gemma", "mixtral"]


def _model(case: str | Path):
    folder = FORWARD / case if isinstance(case, str) else case
    return open_forward(ModelChoice(weights=folder), Overrides())


def _ids(case: str) -> list[np.ndarray]:
    return [np.array(s, dtype=np.int64) for s in ids_of(case)]


def _argmax(x: np.ndarray) -> tuple[float, int, int]:
    r, c = divmod(int(np.argmax(np.abs(x))), x.shape[1])
    return float(abs(x[r, c])), r, c


def _assert_peak(p: Peak, x: np.ndarray) -> None:
    magnitude, row, channel = _argmax(x)
    assert (p.row, p.channel) == (row, channel)
    assert p.magnitude == pytest.approx(magnitude, rel=1e-4)


# ---------------------------------------------------------------------------------------------
# Each peak against an independent answer.


@pytest.mark.parametrize("case", CASES)
def test_peaks_equal_numpy_over_the_recorded_inputs_and_the_ffn_formulas(case):
    """The FFN input's peak equals np.argmax over PyTorch's recorded input; the hidden layer's
    and the output's equal compute/ffn.py's formulas run on that recorded input."""
    ref = expected(case)
    with _model(case) as model:
        layers = outlier_parts(model, _ids(case))
        for x in layers:
            inputs = ref[f"layer{x.layer}"]
            _assert_peak(x.peaks["ffn_input"], inputs)
            weights, act = model.layer(x.layer).engine.weights, model.layer(x.layer).engine.act
            _assert_peak(x.peaks["ffn_output"], ffn(inputs, weights, act))
            if isinstance(weights, MoEWeights):
                _assert_moe_hidden(x, inputs, weights, act)
            else:
                hidden = expert_hidden(inputs, weights, act)
                _assert_peak(x.peaks["hidden"], hidden)
                row = x.peaks["ffn_output"].row  # the hidden layer at the output peak's token
                at = x.hidden_at_output
                assert (at.row, at.channel) == (row, int(np.argmax(np.abs(hidden[row]))))
                assert at.magnitude == pytest.approx(np.abs(hidden[row]).max(), rel=1e-4)


def _assert_moe_hidden(x: LayerOutliers, inputs: np.ndarray, p: MoEWeights, act) -> None:
    """A mixture: the hidden peak over every expert's hidden layer on its tokens, and each
    expert's largest |output|, from route and dispatch run plainly."""
    order, _ = route(inputs, p)
    best, outs = (-1.0, -1, -1), {}
    for e, rows, _ in dispatch(order, p):
        h = expert_hidden(inputs[rows], p.experts[e], as_activation(act))
        m, r, c = _argmax(h)
        best = max(best, (m, -int(rows[r]), -c))
        y = h @ p.experts[e].w2 + (p.experts[e].b2 if p.experts[e].b2 is not None else 0)
        outs[e] = _argmax(y)[0]
    peak = x.peaks["hidden"]
    assert (peak.row, peak.channel) == (-best[1], -best[2])
    assert peak.magnitude == pytest.approx(best[0], rel=1e-4)
    assert sorted(x.experts) == sorted(outs)
    for e, m in outs.items():
        assert x.experts[e].magnitude == pytest.approx(m, rel=1e-4)


@pytest.mark.parametrize("case", ["llama", "gpt2", "bert"])
def test_residual_peaks_equal_a_loop_over_the_blocks(case):
    """The residual stream after each layer: the model's blocks run one sequence at a time in
    a plain loop (no walk, no spill file), np.argmax over its output; the median |h| is
    np.median over every token and channel."""
    seqs = _ids(case)
    with _model(case) as model:
        layers = outlier_parts(model, seqs)
        hs = [model.embed(s, np.arange(s.size)) for s in seqs]
        for x in layers:
            block = model.layer(x.layer)
            hs = [block(h, [(0, h.shape[0])])[1].copy() for h in hs]
            stream = np.concatenate(hs)
            _assert_peak(x.peaks["residual"], stream)
            assert x.median == pytest.approx(float(np.median(np.abs(stream))), rel=1e-5)
            assert np.allclose(x.channel_max, np.abs(stream).max(axis=0), rtol=1e-5)


def test_an_encoders_last_residual_peak_is_pytorchs_last_hidden_state():
    """BERT (post-norm, no final norm): the residual after its last layer is PyTorch's
    last_hidden_state."""
    with _model("bert") as model:
        last = outlier_parts(model, _ids("bert"))[-1]
    _assert_peak(last.peaks["residual"], expected("bert")["final"])


@pytest.mark.parametrize("case", ["llama", "mixtral", "bert"])
def test_parts_of_a_text_merge_to_one_walk(case):
    """Two parts of a text, each walked alone (its rows offset by its first token), merged:
    the same peaks, channel maxima, median and experts as one walk over the whole, exactly
    (one sequence a batch, so both walk the same batches)."""
    seqs = _ids(case)
    with _model(case) as model:
        whole = outlier_parts(model, seqs, batch_tokens=1)
        first = outlier_parts(model, seqs[:1], batch_tokens=1, finished=False)
        rest = outlier_parts(model, seqs[1:], base=seqs[0].size, batch_tokens=1,
                             finished=False)
        merged = merge_parts([rest, first])  # in any order
    for a, b in zip(whole, merged, strict=True):
        assert a.peaks == b.peaks
        assert a.median == b.median and a.tokens == b.tokens
        assert np.array_equal(a.channel_max, b.channel_max)
        assert a.experts == b.experts
        assert (a.hidden_at_output, a.expert_at_output) == \
            (b.hidden_at_output, b.expert_at_output)


# ---------------------------------------------------------------------------------------------
# The rules, on planted spikes.


@pytest.mark.parametrize("magnitude, median, massive", [
    (101.0, 0.1, True), (100.0, 0.01, False),  # > 100, strictly
    (1000.0, 1.0, True), (999.0, 1.0, False),  # >= 1000 x the median
    (5000.0, 4.0, True), (5000.0, 5.5, False),
])
def test_the_massive_rule(magnitude, median, massive):
    assert bool(is_massive(magnitude, median)) is massive
    assert massive_threshold(median) == max(100.0, 1000.0 * median)


def _layer(i: int, hidden: tuple[float, int], output: tuple[float, int],
           channel_max: list[float] | None = None, median: float = 1.0,
           experts: dict[int, float] | None = None) -> LayerOutliers:
    peaks = {"ffn_input": Peak(1.0, 1.0, 0, 0), "hidden": Peak(hidden[0], hidden[0], hidden[1], 3),
             "ffn_output": Peak(output[0], output[0], output[1], 5),
             "residual": Peak(1.0, 1.0, 0, 0)}
    # the largest |hidden| at the output peak's token: the hidden peak's when they share one
    at = hidden[0] if hidden[1] == output[1] else 1.0
    return LayerOutliers(i, peaks, median, massive_threshold(median), (),
                         np.array(channel_max or [1.0, 1.0]),
                         {e: Peak(m, m, 0, 0) for e, m in (experts or {}).items()},
                         Peak(at, at, output[1], 3), 0, 10)


def test_a_super_weight_layer_needs_both_spikes_at_one_token():
    layers = [_layer(0, (2.0, 1), (3.0, 1)), _layer(1, (50.0, 7), (90.0, 7)),
              _layer(2, (3.0, 2), (4.0, 2)), _layer(3, (60.0, 4), (80.0, 5)),
              _layer(4, (2.5, 1), (60.0, 1)), _layer(5, (2.0, 1), (3.0, 1)),
              _layer(6, (3.0, 1), (4.0, 1))]
    # layer 1: both spikes at token 7; layer 3: its hidden spike at token 4, its output's at
    # token 5 (where its hidden layer is no spike); layer 4: an output spike alone
    assert super_weight_layers(layers) == [False, True, False, False, False, False, False]
    assert spikes([1.0, 10.0, 1.0]) == [False, True, False]  # 10 >= 10 x the others' median
    assert spikes([1.0, 9.9, 1.0]) == [False, False, False]
    assert spikes([5.0]) == [False]  # no other layer


def test_a_massive_channel_persists_while_the_rule_holds():
    layers = [_layer(i, (1, 0), (1, 0), [1.0, m]) for i, m in
              enumerate([5.0, 2000.0, 3000.0, 50.0, 1500.0])]
    assert persistence(layers, 1, 1) == [1, 2, 4]
    assert persistence(layers, 0, 0) == []


def test_super_experts_by_the_percentile_and_a_tenth_of_the_largest():
    mags = [1.0] * 30 + [2.0] * 9 + [40.0]
    layers = [_layer(0, (1, 0), (1, 0), experts=dict(enumerate(mags[:20]))),
              _layer(1, (1, 0), (1, 0), experts=dict(enumerate(mags[20:])))]
    cut, found = super_experts(layers)
    assert cut == pytest.approx(float(np.quantile(mags, 0.995)))
    assert found == [(1, 19)]
    # a tenth of the largest: an expert above the percentile but not above 4.0 is no super one
    layers = [_layer(0, (1, 0), (1, 0), experts={0: 1.0, 1: 1.0, 2: 1.0})]
    assert super_experts(layers)[1] == []


def _planted(tmp_path: Path) -> tuple[Path, int, int]:
    """LLaMA's fixture with a super weight planted in layer 0: up_proj's row of unit 7
    scaled 50 times and down_proj[9, 7] set to 100."""
    st = pytest.importorskip("safetensors.numpy")
    w = st.load_file(str(FORWARD / "llama" / "model.safetensors"))
    up = w["model.layers.0.mlp.up_proj.weight"].copy()
    up[7] *= 50
    down = w["model.layers.0.mlp.down_proj.weight"].copy()
    down[9, 7] = 100.0
    return checkpoint(tmp_path, "llama", tensors={
        "model.layers.0.mlp.up_proj.weight": up,
        "model.layers.0.mlp.down_proj.weight": down}), 9, 7


def test_a_planted_super_weight_is_found_named_as_the_file_names_it(tmp_path, cli):
    folder, channel, unit = _planted(tmp_path)
    r = cli("outliers", "--weights", folder, "--ids", FORWARD / "llama" / "ids.txt", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["format"] == "ffncli-outliers/1"
    [c] = doc["super_weights"]
    assert (c["tensor"], c["index"], c["weight"]) == \
        ("model.layers.0.mlp.down_proj.weight", [channel, unit], 100.0)
    assert c["hidden"]["channel"] == unit and c["output"]["channel"] == channel
    assert c["hidden"]["sequence"] == c["output"]["sequence"]
    assert c["hidden"]["position"] == c["output"]["position"]
    [m] = doc["massive"]
    assert (m["layer"], m["channel"]) == (0, channel)
    assert m["max_abs"] > 1000 * doc["layers"][0]["residual_median_abs"]
    assert m["persists"] == [0, 1]
    # the unplanted fixture flags nothing
    plain = cli("outliers", "--weights", FORWARD / "llama", "--ids",
                FORWARD / "llama" / "ids.txt", "--json").json()
    assert plain["super_weights"] == [] and plain["massive"] == []


def test_confirm_scores_the_planted_weight_far_beyond_its_null(tmp_path):
    folder, channel, unit = _planted(tmp_path)
    r = run_outliers(ModelChoice(weights=folder), TextChoice(ids=FORWARD / "llama" / "ids.txt"),
                     confirm_it=True, ctx=6, repeats=4, seed=3)
    c = r.confirm
    assert c is not None and c.repeats == 4 and c.seed == 3
    weight, mean = c.items
    assert weight.what == f"model.layers.0.mlp.down_proj.weight[{channel}, {unit}] = 0"
    assert len(weight.null) == 4
    assert weight.changed.kl_mean > 10 * max(s.kl_mean for s in weight.null)
    assert mean.what.startswith(f"layer 0 channel {channel} = its mean")
    assert mean.changed.kl_mean > 0  # the walk's after hook changed the stream
    # the same seed, the same nulls
    again = run_outliers(ModelChoice(weights=folder),
                         TextChoice(ids=FORWARD / "llama" / "ids.txt"), confirm_it=True, ctx=6,
                         repeats=4, seed=3).confirm
    assert again == c


def test_the_zeroed_weight_is_the_ffn_with_that_weight_zeroed(tmp_path):
    """The --confirm change equals the checkpoint with the weight zeroed in the file: the
    dense perplexity of the edited checkpoint is the change's."""
    folder, channel, unit = _planted(tmp_path)
    st = pytest.importorskip("safetensors.numpy")
    w = st.load_file(str(folder / "model.safetensors"))
    down = w["model.layers.0.mlp.down_proj.weight"].copy()
    down[channel, unit] = 0
    zeroed = checkpoint(tmp_path / "z", "llama", tensors={**w,
                        "model.layers.0.mlp.down_proj.weight": down})
    ids = TextChoice(ids=FORWARD / "llama" / "ids.txt")
    changed = run_outliers(ModelChoice(weights=folder), ids, confirm_it=True, ctx=6,
                           repeats=1).confirm
    plain = run_outliers(ModelChoice(weights=zeroed), ids, confirm_it=True, ctx=6,
                         repeats=1).confirm
    assert changed is not None and plain is not None
    assert changed.items[0].changed.perplexity == pytest.approx(plain.perplexity, rel=1e-5)


# ---------------------------------------------------------------------------------------------
# The command.


def test_the_table_names_each_peak_and_the_rules(cli):
    r = cli("outliers", "--weights", FORWARD / "mixtral", "--ids", FORWARD / "mixtral" /
            "ids.txt")
    assert r.code == 0, r.err
    assert "largest |value| per layer" in r.out
    assert "Sun et al. 2024" in r.out and "Yu et al. 2024" in r.out and "Su et al. 2025" in r.out
    assert "each expert's largest |output|" in r.out


def test_json_lists_every_layer_and_expert(cli):
    doc = cli("outliers", "--weights", FORWARD / "mixtral", "--ids",
              FORWARD / "mixtral" / "ids.txt", "--json").json()
    assert [x["layer"] for x in doc["layers"]] == [0, 1]
    assert len(doc["experts"]) == 8
    assert sum(e["super_expert"] for e in doc["experts"]) >= 1
    assert doc["confirm"] is None
    json.dumps(doc, allow_nan=False)


@pytest.mark.parametrize("args, message", [
    ((), "outliers: give the text with --text FILE or its token ids with --ids FILE"),
    (("--ids", "IDS", "--repeats", "3"), "options --ctx, --repeats and --seed go with "
     "--confirm"),
    (("--ids", "IDS", "--confirm", "--repeats", "0"),
     "option --repeats: expected a whole number >= 1, got 0"),
    (("--ids", "IDS", "--confirm", "--repeats", "101"),
     "option --repeats: expected a whole number from 1 to 100, got 101"),
    (("--ids", "IDS", "--confirm", "--ctx", "1"), "option --ctx: expected a whole number >= 2, "
     "got 1"),
    (("--ids", "IDS", "--confirm", "--ctx", "20"), "the text has 21 tokens; perplexity with "
     "--ctx 20 needs at least 40 (two chunks)"),
    (("--ids", "IDS", "--confirm", "--ctx", "65"), "option --ctx: 65 is more than the model's 64 "
     "positions"),
])
def test_bad_options_are_one_line(cli, args, message):
    ids = str(FORWARD / "llama" / "ids.txt")
    r = cli("outliers", "--weights", FORWARD / "llama", *[ids if a == "IDS" else a for a in args])
    assert (r.code, r.out, r.err) == (2, "", f"error: {message}\n")


def test_an_encoder_takes_no_ctx(cli):
    r = cli("outliers", "--weights", FORWARD / "bert", "--ids", FORWARD / "bert" / "ids.txt",
            "--confirm", "--ctx", "8")
    assert (r.code, r.err) == (2, "error: option --ctx: bert is an encoder: --confirm scores "
                                  "its lines, not chunks (give no --ctx)\n")


# ---------------------------------------------------------------------------------------------
# The candidates' names, and --confirm's changes.


@pytest.mark.parametrize("case, layer, expert, name, linear, stacked, index", [
    ("llama", 1, None, "model.layers.1.mlp.down_proj.weight", True, False, (5, 7)),
    ("gpt2", 0, None, "transformer.h.0.mlp.c_proj.weight", False, False, (7, 5)),
    ("mixtral", 1, 3, "model.layers.1.block_sparse_moe.experts.3.w2.weight", True, False, (5, 7)),
])
def test_the_down_projection_is_named_as_the_file_names_it(case, layer, expert, name, linear,
                                                          stacked, index):
    """The tensor as the checkpoint names it, and the index of (unit 7, channel 5) in the
    order of its axes: nn.Linear [out, in], GPT-2's Conv1D [in, out]; the matrix read is the
    one the forward computes with ([in, out])."""
    with _model(case) as model:
        assert down_tensor(model, layer, expert) == (name, linear, stacked)
        assert file_index(linear, stacked, expert, 7, 5) == index
        p = model.layer(layer).engine.weights
        w = p.experts[expert].w2 if isinstance(p, MoEWeights) else p.w2
        assert np.array_equal(down_matrix(model, layer, expert), w.astype(np.float64))


def test_a_zeroed_expert_weight_is_moe_ffn_with_it_zeroed():
    """ZeroWeights on a mixture: the layer's FFN with expert 2's w2[7, 5] zeroed, against
    compute/ffn.py's moe_ffn on weights zeroed by hand."""
    x = expected("mixtral")["layer1"]
    with _model("mixtral") as model:
        block = model.layer(1)
        p = block.engine.weights
        change = ZeroWeights(1, 2, [(7, 5)])
        assert change.ffn(0, block) is None  # another layer: its own FFN
        zeroed = change.ffn(1, block)
        assert zeroed is not None
        out = np.empty_like(x)
        zeroed(x, out)
        w2 = p.experts[2].w2.copy()
        w2[7, 5] = 0
        experts = list(p.experts)
        experts[2] = replace(experts[2], w2=w2)
        want = ffn(x, replace(p, experts=tuple(experts)), block.engine.act)
        assert np.allclose(out, want, rtol=1e-5, atol=1e-6)
        assert not np.allclose(out, ffn(x, p, block.engine.act), rtol=1e-5, atol=1e-6)
        assert p.experts[2].w2[7, 5] != 0  # the layer's own weights are left alone


def test_set_channel_changes_only_the_massive_rows():
    """The rows where the channel meets Sun et al.'s rule against the exact median |h| of the
    dense model's stream after the layer (what the walk's dense pass showed: the owner's)."""
    stream = DenseStream(3)
    dense = np.array([[0.0, 600.0, 1.0], [0.5, 400.0, 0.5], [0.0, -900.0, 0.5]])
    change, other = SetChannel(stream, 1, 2, -7.0), SetChannel(stream, 1, 0, 3.0)
    for c in (change, other):  # each change is told; the stream keeps its owner's
        c.dense(2, dense * 100)  # another layer: not kept
        c.dense(3, dense)
    assert stream.median == 0.5  # np.median of the nine |h|
    out = dense.copy()
    change.after(2, out)  # another layer: nothing
    assert np.array_equal(out, dense)
    change.after(3, out)  # |h| > 100 and >= 1000 x 0.5: rows 0 and 2, not 400
    assert out[:, 2].tolist() == [-7.0, 0.5, -7.0]
    assert out[:, 1].tolist() == [600.0, 400.0, -900.0]


def test_the_null_draws_weights_nearest_the_candidates_magnitude():
    w2 = np.arange(1.0, 301.0).reshape(20, 15)
    w2[4, 6] = 1000.0  # the candidate
    cells = null_cells(w2, [(4, 6)], np.random.default_rng(0))
    [(j, o)] = cells
    # the 100 nearest |w| to 1000 are the largest 100 others: values 201..300
    assert (j, o) != (4, 6) and w2[j, o] >= 200.0
    drawn = {tuple(null_cells(w2, [(4, 6)], np.random.default_rng(s))[0]) for s in range(40)}
    assert len(drawn) > 10 and all(w2[c] >= 200.0 for c in drawn)


@pytest.mark.parametrize("case", ["llama", "gpt2", "bert", "mixtral"])
def test_the_watched_ffn_has_the_engines_bits(case):
    """The walk's FFN while it is watched is the engine's, bit for bit (the gate's product
    done by the watch as the engine does it)."""
    x = expected(case)["layer0"]
    with _model(case) as model:
        block = model.layer(0)
        watched = np.empty_like(x)
        LayerWatch(block, model.d_model, 0)(x, watched)
        assert np.array_equal(watched, block.engine(x))
