"""``ffncli perplexity`` (jobs/perplexity.py, jobs/thresholds.py, the command): the dense run
and its sparsified variants in one walk, each variant what it would be alone; thresholds
saved and applied again; an encoder's fidelity; bad input as one line. The values against
PyTorch are in tests/test_perplexity_torch.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest

from ffncli.analysis.perplexity import Protocol
from ffncli.errors import InputError, Interrupted
from ffncli.formats.text import Sequences
from ffncli.jobs.choices import ModelChoice
from ffncli.jobs.perplexity import Variant, perplexity
from ffncli.jobs.resolve import open_forward
from ffncli.specs.spec import Overrides

DATA = Path(__file__).parent / "data"
FORWARD = DATA / "forward"
IDS = np.random.default_rng(22).integers(0, 128, 300)


def _model(case: str):
    return open_forward(ModelChoice(weights=FORWARD / case / "model.safetensors"), Overrides())


def _document(ids=IDS) -> Sequences:
    return Sequences((np.asarray(ids, dtype=np.int64),), (1,), "ids", "0" * 64)


@pytest.fixture(scope="module")
def ids_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ids") / "ids.txt"
    path.write_text(" ".join(map(str, IDS)) + "\n")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_variants_in_one_walk_are_each_what_they_are_alone(case):
    with _model(case) as m:
        together = perplexity(m, _document(), Protocol(32), variants=[
            Variant("cats", 0.5), Variant("teal", 0.5), Variant("topk", 0.25)])
        for v in together.variants:
            alone = perplexity(m, _document(), Protocol(32),
                               variants=[Variant(v.rule, v.target)]).variants[0]
            assert v.perplexity == pytest.approx(alone.perplexity, rel=1e-12)
            assert v.kl_mean == pytest.approx(alone.kl_mean, rel=1e-9)
            assert [c.cut for c in v.layers] == [c.cut for c in alone.layers]
        dense = perplexity(m, _document(), Protocol(32))
    assert together.perplexity == pytest.approx(dense.perplexity, rel=1e-12)
    assert dense.tokens_scored == 9 * 15 and dense.windows == 9 and dense.dropped == 12


@pytest.mark.slow
@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_layers_before_the_first_sparsified_are_computed_once(case, monkeypatch):
    """Sparsifying layer 1 alone: layer 0 is the same in every variant, so the walk computes
    it once (for the dense model) and the variants start from its stream; every number is the
    walk's that computes layer 0 for each variant, and the progress still reaches its end."""
    from ffncli.compute.forward.layer import Block
    from ffncli.jobs import variants as walks  # where perplexity's walk is called
    from ffncli.jobs.progress import Progress

    variants = [Variant("cats", 0.5), Variant("topk", 0.25)]
    attends: list[int] = []
    joins: list[int] = []
    attend, join = Block.attend, Block.join

    def counted_attend(self, h, bounds):
        attends.append(self.engine.d_model)
        return attend(self, h, bounds)

    def counted_join(self, x, r, ffn=None):
        joins.append(self.engine.d_model)
        return join(self, x, r, ffn)

    class Seen(Progress):
        def __init__(self) -> None:
            self.total = self.done = 0

        def start(self, total: int, *args, **kwargs) -> None:
            self.total = total

        def update(self, done: int) -> None:
            self.done = done

    monkeypatch.setattr(Block, "attend", counted_attend)
    monkeypatch.setattr(Block, "join", counted_join)
    seen = Seen()
    with _model(case) as m:
        shared = perplexity(m, _document(), Protocol(32), variants=variants, layers=[1],
                            batch_tokens=128, progress=seen)
        counts = len(attends), len(joins)
        plain = walks.walk_variants
        monkeypatch.setattr(walks, "walk_variants", lambda *a, alike=0, **k: plain(*a, **k))
        every = perplexity(m, _document(), Protocol(32), variants=variants, layers=[1],
                           batch_tokens=128)
    batches = 3  # 288 tokens in chunks of 32, 128 tokens a batch
    # layer 0 once, layer 1 per variant (its attention too: 2026-12-05, see docs/measured.md)
    assert counts == (batches * (1 + 3), batches * (1 + 3))
    # from layer 0 on: every layer per variant
    assert (len(attends) - counts[0], len(joins) - counts[1]) == \
        (2 * batches * 3, 2 * batches * 3)
    assert seen.done == seen.total == 288 * 2 * 3
    assert shared.perplexity == every.perplexity
    for a, b in zip(shared.variants, every.variants, strict=True):
        assert (a.perplexity, a.kl_mean, a.top1) == (b.perplexity, b.kl_mean, b.top1)
        assert [(c.cut, c.sparsity, c.ffn_error) for c in a.layers] == \
            [(c.cut, c.sparsity, c.ffn_error) for c in b.layers]


@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_the_lm_head_is_read_when_the_walk_has_left_the_layers(case):
    """The head (SmolLM2's: 113 MB, eight of its layers) is checked when the job is planned
    but read once, after the last layer, when the layers' buffers are gone."""
    events: list[object] = []
    with _model(case) as m:
        layer, head = m.layer, m.head
        m.layer = lambda i: events.append(i) or layer(i)
        m.head = lambda: events.append(("head", len(m.scratch._buffers))) or head()
        r = perplexity(m, _document(), Protocol(32), variants=[Variant("topk", 0.5)],
                       batch_tokens=128)
    assert events == [0, 1, ("head", 1)]  # the final norm's one buffer, none of the layers'
    assert r.tokens_scored == 9 * 15


@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_a_cut_that_keeps_every_unit_changes_nothing(case):
    with _model(case) as m:
        r = perplexity(m, _document(), Protocol(32, stride=16), variants=[Variant("topk", 0.0)])
    v = r.variants[0]
    assert v.perplexity == pytest.approx(r.perplexity, rel=1e-6) and v.top1 == 1.0
    assert v.kl_mean == pytest.approx(0.0, abs=1e-9) and v.sparsity == 0.0
    assert all(c.ffn_error < 1e-6 and c.macs_saved == 0 for c in v.layers)


def test_sparsity_and_savings_are_counted_per_layer():
    with _model("llama") as m:
        v = perplexity(m, _document(), Protocol(32), variants=[Variant("topk", 0.5),
                                                               Variant("teal", 0.4)]).variants
    topk, teal = v
    # topk keeps round(0.5 * 128) units of every token, in every layer; each zeroed unit
    # saves its down column and up row (d_model each)
    assert all(c.sparsity == 0.5 and c.macs_saved == 64 * 64 * 2 for c in topk.layers)
    assert topk.macs == 2 * 3 * 64 * 128 and topk.sparsity == 0.5
    for c in teal.layers:  # the two cuts, weighted by the multiply-adds they skip
        assert 0.3 < c.sparsity_in < 0.5 and 0.3 < c.sparsity_down < 0.5
        weighted = (c.sparsity_in * 2 * 64 * 128 + c.sparsity_down * 64 * 128) / (3 * 64 * 128)
        assert c.sparsity == pytest.approx(weighted, rel=1e-12)


def test_an_encoder_reports_fidelity_per_line():
    with _model("bert") as m:
        doc = Sequences(tuple(np.asarray(IDS[i:i + 40]) for i in range(0, 200, 40)),
                        (1, 2, 3, 4, 5), "ids", "0" * 64)
        r = perplexity(m, doc, None, variants=[Variant("cats", 0.5), Variant("topk", 0.0)])
    cats, keep_all = r.variants
    assert r.kind == "encoder" and r.perplexity is None and r.tokens == 200
    assert 0.5 < cats.sentence_cosine < 0.9999 and 0.5 < cats.token_cosine < 0.9999
    assert cats.worst_sentence <= cats.sentence_cosine
    assert keep_all.sentence_cosine == pytest.approx(1.0, abs=1e-6)


@pytest.mark.slow
def test_calibration_on_another_text_is_used(tmp_path):
    with _model("llama") as m:
        other = _document(IDS[::-1].copy())
        own = perplexity(m, _document(), Protocol(32), variants=[Variant("cats", 0.5)])
        theirs = perplexity(m, _document(), Protocol(32), variants=[Variant("cats", 0.5)],
                            calibration=other)
        same = perplexity(m, _document(), Protocol(32), variants=[Variant("cats", 0.5)],
                          calibration=_document())
    assert theirs.calibration["evaluated_text"] is False
    assert [c.cut for c in own.variants[0].layers] == [c.cut for c in same.variants[0].layers]
    assert [c.cut for c in own.variants[0].layers] != [c.cut for c in theirs.variants[0].layers]


# ---------------------------------------------------------------------------------------------
# The command.


@pytest.mark.slow
def test_thresholds_saved_and_applied_again_give_the_same_model(cli, tmp_path, ids_file):
    w = FORWARD / "llama" / "model.safetensors"
    saved = tmp_path / "t.json"
    r = cli("perplexity", "--weights", w, "--ids", ids_file, "--ctx", "32", "--sparsify",
            "teal", "--target-sparsity", "0.25,0.5", "--save-thresholds", saved, "--json")
    assert r.code == 0, r.err
    first = r.json()
    doc = json.loads(saved.read_text())
    assert doc["model"] == {"name": "model.safetensors", "layers": 2, "d_model": 64,
                            "d_ff": 128, "fingerprint": doc["model"]["fingerprint"]}
    assert len(doc["model"]["fingerprint"]) == 16
    assert [(e["rule"], e["target"]) for e in doc["entries"]] == [("teal", 0.25),
                                                                  ("teal", 0.5)]
    assert doc["entries"][1]["layers"][0]["threshold"] == \
        first["variants"][1]["layers"][0]["threshold"]
    again = cli("perplexity", "--weights", w, "--ids", ids_file, "--ctx", "32", "--thresholds",
                saved, "--json")
    assert again.code == 0, again.err
    for a, b in zip(first["variants"], again.json()["variants"], strict=True):
        assert a["perplexity"] == b["perplexity"] and a["layers"] == b["layers"]
    assert first["protocol"]["name"] == "llama.cpp" and first["tokens_scored"] == 135


@pytest.mark.slow
def test_relu_stats_applies_a_saved_cats_threshold(cli, tmp_path, ids_file):
    w = FORWARD / "llama" / "model.safetensors"
    saved = tmp_path / "t.json"
    assert cli("perplexity", "--weights", w, "--ids", ids_file, "--ctx", "32", "--sparsify",
               "cats", "--target-sparsity", "0.3,0.6", "--save-thresholds", saved,
               "--quiet").code == 0
    cuts = {e["target"]: [x["threshold"] for x in e["layers"]]
            for e in json.loads(saved.read_text())["entries"]}
    r = cli("relu-stats", "--weights", w, "--ids", ids_file, "--thresholds", saved,
            "--target-sparsity", "0.6", "--json")
    assert r.code == 0, r.err
    layers = r.json()["layers"]
    for layer, t in zip(layers, cuts[0.6], strict=True):
        assert layer["threshold"] == t and 0.5 < layer["mean_inactive_fraction"] < 0.7
    two = cli("relu-stats", "--weights", w, "--ids", ids_file, "--thresholds", saved)
    assert two.code == 2 and two.err == (
        f"error: {saved}: relu-stats applies one cats entry; the file's cats targets: 0.3, "
        "0.6; pick one with --target-sparsity\n")


def test_the_report_draws_the_curve_and_the_layers(cli, tmp_path, ids_file):
    page = tmp_path / "r.html"
    r = cli("perplexity", "--weights", FORWARD / "gpt2" / "model.safetensors", "--ids",
            ids_file, "--ctx", "32", "--sparsify", "cats", "--target-sparsity", "0.25,0.5",
            "--report", page, "--json")
    assert r.code == 0, r.err
    html = page.read_text()
    assert html.count("<svg") == 3 and "<polyline" in html and 'id="variants"' in html
    for v in r.json()["variants"]:
        assert f"{v['perplexity']:,.4f}" in html


def _copy(case: str, tmp_path: Path, **edits) -> Path:
    folder = tmp_path / case
    shutil.copytree(FORWARD / case, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **edits}))
    return folder


@pytest.mark.parametrize("args, message", [
    (("--ctx", "65"), "option --ctx: 65 is more than the model's 64 positions"),
    (("--ctx", "32", "--stride", "40"), "option --stride: expected a whole number from 1 to "
                                        "--ctx (32), got 40"),
    (("--ctx", "32", "--stride", "8", "--score", "all"),
     "options --stride and --score all: give one (a stride window scores what the previous "
     "one did not)"),
    (("--ctx", "32", "--thresholds", "t.json", "--sparsify", "cats"),
     "option --thresholds replaces --sparsify and --target-sparsity: give one or the other"),
    (("--ctx", "32", "--save-thresholds", "t.json"),
     "option --save-thresholds needs --sparsify and --target-sparsity"),
    (("--ctx", "32", "--sparsify", "cats", "--target-sparsity", "1"),
     "option --target-sparsity: expected a share from 0 to below 1, got 1.0"),
    (("--ctx", "32", "--sparsify", "cats", "--target-sparsity", "-0.1"),
     "option --target-sparsity: expected a share from 0 to below 1, got -0.1"),
    (("--ctx", "32", "--sparsify", "cats", "--target-sparsity", "half"),
     "option --target-sparsity: expected shares such as 0.5 or 0.25,0.5, got 'half'"),
    (("--ctx", "32", "--sparsify", "deja-vu", "--target-sparsity", "0.5"),
     "option --sparsify: expected one of cats, teal, topk, got 'deja-vu'"),
    (("--ctx", "32", "--sparsify", "cats"),
     "option --sparsify needs --target-sparsity S[,S...], e.g. 0.5"),
])
def test_bad_options_are_one_line(cli, ids_file, args, message):
    r = cli("perplexity", "--weights", FORWARD / "llama" / "model.safetensors", "--ids",
            ids_file, *args)
    assert (r.code, r.err) == (2, f"error: {message}\n")


def test_a_text_shorter_than_two_chunks_is_refused(cli, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text(" ".join(map(str, IDS[:40])) + "\n")
    r = cli("perplexity", "--weights", FORWARD / "gpt2" / "model.safetensors", "--ids", short,
            "--ctx", "32")
    assert (r.code, r.err) == (2, "error: the text has 40 tokens; perplexity with --ctx 32 "
                                  "needs at least 64 (two chunks)\n")


def test_an_encoder_without_a_sparsified_variant_is_refused(cli):
    """It printed a header and nothing else, exit 0."""
    r = cli("perplexity", "--weights", FORWARD / "bert" / "model.safetensors", "--ids",
            FORWARD / "bert" / "ids.txt")
    assert (r.code, r.err) == (2, "error: perplexity: bert is an encoder, with no LM head: it "
                                  "has no perplexity; give --sparsify RULE --target-sparsity S "
                                  "(or --thresholds) for the fidelity of its sparsified hidden "
                                  "states\n")


def test_an_encoder_has_no_protocol(cli, ids_file):
    r = cli("perplexity", "--weights", FORWARD / "bert" / "model.safetensors", "--ids",
            FORWARD / "bert" / "ids.txt", "--stride", "8")
    assert r.code == 2 and r.err.startswith("error: option --stride: ") and \
        "is an encoder, with no LM head" in r.err and r.err.count("\n") == 1


@pytest.mark.parametrize("case", ["llama", "gpt2"])  # GPT-2's wte was used whatever it said
def test_a_decoder_without_its_lm_head_is_refused(cli, tmp_path, ids_file, case):
    folder = _copy(case, tmp_path, tie_word_embeddings=False)
    r = cli("perplexity", "--weights", folder, "--ids", ids_file, "--ctx", "32")
    assert (r.code, r.err) == (2, f"error: {folder / 'model.safetensors'}: no LM head: tensor "
                                  f"'lm_head.weight' is missing and {folder / 'config.json'} "
                                  "says tie_word_embeddings false\n")


@pytest.mark.slow
def test_a_thresholds_file_for_another_model_is_refused(cli, tmp_path, ids_file):
    saved = tmp_path / "t.json"
    assert cli("perplexity", "--weights", FORWARD / "llama" / "model.safetensors", "--ids",
               ids_file, "--ctx", "32", "--sparsify", "cats", "--target-sparsity", "0.5",
               "--save-thresholds", saved, "-q").code == 0
    gpt2 = cli("perplexity", "--weights", FORWARD / "gpt2" / "model.safetensors", "--ids",
               ids_file, "--ctx", "32", "--thresholds", saved)
    assert gpt2.code == 2 and gpt2.err.startswith(f"error: {saved}: made for another model: "
                                                  "its fingerprint is ")
    doc = json.loads(saved.read_text())
    doc["model"]["layers"] = 3
    saved.write_text(json.dumps(doc))
    r = cli("perplexity", "--weights", FORWARD / "llama" / "model.safetensors", "--ids",
            ids_file, "--ctx", "32", "--thresholds", saved)
    assert (r.code, r.err) == (2, f"error: {saved}: made for another model: its layers is 3, "
                                  f"this model's ({FORWARD / 'llama' / 'model.safetensors'}) "
                                  "is 2\n")
    saved.write_text("{not json")
    r = cli("perplexity", "--weights", FORWARD / "llama" / "model.safetensors", "--ids",
            ids_file, "--ctx", "32", "--thresholds", saved)
    assert r.code == 2 and r.err.startswith(f"error: {saved}: not a thresholds file (not valid "
                                            "JSON at line 1")


def test_a_mixture_of_experts_is_sparsified(cli, tmp_path, ids_file):
    """Once refused; now each chosen expert's hidden layer is cut (tests/test_sparse_moe.py)."""
    r = cli("perplexity", "--weights", FORWARD / "mixtral" / "model.safetensors", "--ids",
            ids_file, "--ctx", "32", "--sparsify", "topk", "--target-sparsity", "0.5", "--json")
    assert r.code == 0, r.err
    assert r.json()["variants"][0]["sparsity"] == pytest.approx(0.5, abs=0.01)


def test_save_thresholds_never_overwrites_an_input(cli, ids_file):
    r = cli("perplexity", "--weights", FORWARD / "llama" / "model.safetensors", "--ids",
            ids_file, "--ctx", "32", "--sparsify", "cats", "--target-sparsity", "0.5",
            "--save-thresholds", ids_file)
    assert r.code == 2 and "--save-thresholds" in r.err and r.err.count("\n") == 1
    assert ids_file.read_text().split()[0] == str(IDS[0])


# ---------------------------------------------------------------------------------------------
# Hostile input found in review (issue 22): each a traceback or a silent nonsense before.


def _worded(tmp_path: Path) -> Path:
    """The tiny GPT-2 with a word-level tokenizer.json whose BERT normalizer drops control
    characters (a text of them is not blank, but gives no ids) and adds no BOS."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, normalizers, pre_tokenizers

    folder = _copy("gpt2", tmp_path)
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")} | {"[UNK]": 127}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_a_text_the_tokenizer_gives_no_ids_for_is_one_line(cli, tmp_path):
    folder = _worded(tmp_path)
    control = tmp_path / "control.txt"
    control.write_text("\x01\x02\n\x03\n")
    r = cli("perplexity", "--weights", folder, "--text", control, "--ctx", "8")
    assert (r.code, r.err) == (2, f"error: {control}: no token ids: the tokenizer "
                                  f"{folder}/tokenizer.json gives none for its text\n")
    words = tmp_path / "words.txt"
    words.write_text(" ".join("abcdefghij" * 10) + "\n")
    r = cli("perplexity", "--weights", folder, "--text", words, "--ctx", "8", "--sparsify",
            "cats", "--target-sparsity", "0.5", "--calibration-text", control)
    assert (r.code, r.err) == (2, f"error: {control}: no token ids: the tokenizer "
                                  f"{folder}/tokenizer.json gives none for its text\n")


def test_the_smallest_chunks_each_protocol_scores_from(cli, ids_file):
    """--ctx 2 under llama.cpp's protocol scores positions 1..0: none (perplexity nan, exit 0
    before); --score all and a stride score one token a chunk."""
    w = FORWARD / "gpt2" / "model.safetensors"
    r = cli("perplexity", "--weights", w, "--ids", ids_file, "--ctx", "2")
    assert (r.code, r.err) == (2, "error: option --ctx: 2 scores no token under llama.cpp's "
                                  "protocol (positions 1..0); expected a whole number >= 3, "
                                  "or --score all\n")
    for more in (("--score", "all"), ("--stride", "2")):
        r = cli("perplexity", "--weights", w, "--ids", ids_file, "--ctx", "2", *more, "--json")
        assert r.code == 0, r.err
        assert r.json()["tokens_scored"] == 150
    three = cli("perplexity", "--weights", w, "--ids", ids_file, "--ctx", "3", "--json")
    assert three.code == 0 and three.json()["tokens_scored"] == 100


def test_a_calibration_text_shorter_than_one_chunk_is_one_line(cli, tmp_path):
    """That was a KeyError from the calibration walk of no sequence."""
    folder = _worded(tmp_path)
    words = tmp_path / "words.txt"
    words.write_text(" ".join("abcdefghij" * 10) + "\n")
    few = tmp_path / "few.txt"
    few.write_text("a b c\n")
    r = cli("perplexity", "--weights", folder, "--text", words, "--ctx", "8", "--sparsify",
            "cats", "--target-sparsity", "0.5", "--calibration-text", few)
    assert (r.code, r.err) == (2, f"error: option --calibration-text: {few} has 3 tokens, not "
                                  "one chunk of --ctx 8: nothing to calibrate on\n")
    eight = tmp_path / "eight.txt"
    eight.write_text("a b c d e f g h\n")  # one chunk is enough
    r = cli("perplexity", "--weights", folder, "--text", words, "--ctx", "8", "--sparsify",
            "cats", "--target-sparsity", "0.5", "--calibration-text", eight, "--json")
    assert r.code == 0, r.err
    assert r.json()["calibration"]["tokens"] == 8


@pytest.fixture(scope="module")
def saved(tmp_path_factory, ids_file) -> dict:
    """A thresholds file of the tiny GPT-2, cats at 0.5, both layers."""
    from ffncli.cli.main import run

    path = tmp_path_factory.mktemp("saved") / "t.json"
    assert run(["perplexity", "--weights", str(FORWARD / "gpt2" / "model.safetensors"),
                "--ids", str(ids_file), "--ctx", "32", "--sparsify", "cats",
                "--target-sparsity", "0.5", "--save-thresholds", str(path), "--quiet"]) == 0
    return json.loads(path.read_text())


def _layers(doc: dict, entry: int = 0) -> list:
    return doc["entries"][entry]["layers"]


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(extra=1), "unknown key 'extra'; its keys: format, version, model, "
                                  "calibration, entries"),
    (lambda d: d["model"].update(size=3), "key 'model': unknown key 'size'; its keys: name, "
                                          "layers, d_model, d_ff, fingerprint"),
    (lambda d: d.update(calibration=5), "key 'calibration': expected an object, got 5"),
    (lambda d: d["entries"][0].update(note="x"), "entry 1: unknown key 'note'; its keys: rule, "
                                                 "target, layers"),
    (lambda d: _layers(d)[0].update(treshold=_layers(d)[0].pop("threshold")),
     "entry 1: layer entry 1: unknown key 'treshold' (did you mean 'threshold'?); its keys: "
     "layer, threshold"),
    (lambda d: _layers(d)[0].update(down=0.1),  # a cats entry's down would be ignored
     "entry 1: layer entry 1: unknown key 'down'; its keys: layer, threshold"),
    (lambda d: d["entries"].append(json.loads(json.dumps(d["entries"][0]))),
     "entry 2: cats at target 0.5 is entry 1 already"),
    (lambda d: d["entries"].append({"rule": "cats", "target": 0.25,
                                    "layers": _layers(d)[:1]}),
     "entry 2: cuts layers 0, but entry 1 cuts 0-1: every entry of a thresholds file cuts the "
     "same layers"),
])
def test_a_thresholds_file_is_read_strictly(cli, tmp_path, ids_file, saved, edit, message):
    doc = json.loads(json.dumps(saved))
    edit(doc)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    r = cli("perplexity", "--weights", FORWARD / "gpt2" / "model.safetensors", "--ids",
            ids_file, "--ctx", "32", "--thresholds", path)
    assert (r.code, r.err) == (2, f"error: {path}: {message}\n")


WHOLE, TEXT = "a whole number >= 1", "a non-empty string"


@pytest.mark.parametrize("where, key, value, expected", [
    # accepted before: true == 1 and 128.0 == 128 in Python's comparison
    (None, "version", True, WHOLE), (None, "version", 1.0, WHOLE), (None, "version", 2, "1"),
    ("model", "d_ff", 128.0, WHOLE), ("model", "d_model", 64.0, WHOLE),
    ("model", "layers", 2.0, WHOLE), ("model", "layers", True, WHOLE),
    ("model", "d_ff", "128", WHOLE), ("model", "fingerprint", None, TEXT),
    ("model", "name", 5, TEXT), ("calibration", "tokens", 288.0, WHOLE),
    ("calibration", "evaluated_text", 1, "true or false"), ("calibration", "sha256", None, TEXT),
])
def test_a_thresholds_files_numbers_are_of_their_type(cli, tmp_path, ids_file, saved, where,
                                                     key, value, expected):
    """Booleans are not numbers, 128.0 is not a whole number: base/validate's whole(), name()
    and flag(), as every config key is read."""
    doc = json.loads(json.dumps(saved))
    (doc if where is None else doc[where])[key] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    line = (f"error: {path}: " + ("" if where is None else f"key '{where}': ")
            + f"key '{key}': expected {expected}, got {value!r}\n")
    for command in (("perplexity", "--ctx", "32"), ("relu-stats",)):
        r = cli(command[0], "--weights", FORWARD / "gpt2" / "model.safetensors", "--ids",
                ids_file, *command[1:], "--thresholds", path)
        assert (r.code, r.out, r.err) == (2, "", line)


def test_a_target_of_minus_zero_is_zero(cli, tmp_path, ids_file, saved):
    doc = json.loads(json.dumps(saved))
    doc["entries"][0]["target"] = -0.0
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    for args, label in ((("--thresholds", path), "cats 0%"),
                        (("--sparsify", "topk", "--target-sparsity=-0,0"), "topk 0%")):
        r = cli("perplexity", "--weights", FORWARD / "gpt2" / "model.safetensors", "--ids",
                ids_file, "--ctx", "32", *args, "--json")
        assert r.code == 0, r.err
        assert [(v["label"], str(v["target"])) for v in r.json()["variants"]] == \
            [(label, "0.0")]


@pytest.mark.slow
def test_layers_a_thresholds_file_does_not_cut_are_refused(cli, tmp_path, ids_file, saved):
    """relu-stats --layer 1 with a file cutting layer 0 only was an IndexError; --layer 0-1
    silently dropped layer 1. perplexity applies the file's model whole."""
    doc = json.loads(json.dumps(saved))
    doc["entries"][0]["layers"] = _layers(doc)[:1]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    w = FORWARD / "gpt2" / "model.safetensors"
    for command in ("relu-stats", "perplexity"):
        for layer in ("1", "0-1"):
            r = cli(command, "--weights", w, "--ids", ids_file, "--thresholds", path,
                    "--layer", layer, *(("--ctx", "32") if command == "perplexity" else ()))
            assert (r.code, r.err) == (2, f"error: option --layer: {path} cuts layers 0, but "
                                          f"--layer selects {layer} (no threshold for layer "
                                          "1)\n")
        alone = cli(command, "--weights", w, "--ids", ids_file, "--thresholds", path, "--json",
                    *(("--ctx", "32") if command == "perplexity" else ()))
        assert alone.code == 0, alone.err
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(saved))
    r = cli("perplexity", "--weights", w, "--ids", ids_file, "--ctx", "32", "--thresholds",
            whole, "--layer", "1")
    assert (r.code, r.err) == (2, f"error: option --layer: {whole} cuts layers 0-1, but --layer "
                                  "selects 1\n")
    assert cli("relu-stats", "--weights", w, "--ids", ids_file, "--thresholds", whole,
               "--layer", "1", "--json").json()["layers"][0]["layer"] == 1


def test_layer_ranges_join_runs():
    from ffncli.jobs.thresholds import layer_ranges

    assert layer_ranges([5, 0, 2, 3, 4]) == "0, 2-5" and layer_ranges([7]) == "7"


@pytest.mark.slow
def test_calibration_takes_the_first_4096_tokens_in_chunk_order():
    """A text longer than the calibration: the thresholds are the quantiles over the dense
    model's FFN inputs of the first 4,096 tokens of the chunks (85 chunks of 48 and 16 tokens
    of the next; a batch holds 85), not all."""
    from ffncli.analysis.calibration import calibrate_cut
    from ffncli.analysis.perplexity import chunks
    from ffncli.compute.forward.walk import hidden_states

    ids = np.random.default_rng(5).integers(0, 128, 5000)
    with _model("llama") as m:
        r = perplexity(m, _document(ids), Protocol(48),
                       variants=[Variant("cats", 0.5), Variant("teal", 0.4)])
        inputs, _ = hidden_states(m, chunks(ids, 48, None)[:86], [0, 1])
        for v in r.variants:
            for c in v.layers:
                want = calibrate_cut(m.layer(c.layer).engine, inputs[c.layer][:4096], v.rule,
                                     v.target)
                assert c.cut.threshold == pytest.approx(want.threshold, rel=1e-6)
                assert c.cut.down == pytest.approx(want.down, rel=1e-6)
    assert r.calibration["tokens"] == 4096


@pytest.mark.slow
def test_no_room_for_any_file_is_one_line_and_leaves_nothing(tmp_path, ids_file):
    """A file-size limit of 0 (set in the process, as CPython ignores SIGXFSZ): the spill file
    cannot be made; one line, exit 2, no thresholds file or report left behind."""
    import subprocess
    import sys

    limit = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))"
    done = subprocess.run(
        [sys.executable, "-c", f"{limit}; from ffncli.cli import main; main()", "perplexity",
         "--weights", str(FORWARD / "llama"), "--ids", str(ids_file), "--ctx", "32",
         "--sparsify", "cats", "--target-sparsity", "0.5", "--save-thresholds", "t.json",
         "--report", "r.html"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith("error: cannot keep the forward's spill file in ")
    assert done.stderr.count("\n") == 1 and os.listdir(tmp_path) == []


@pytest.mark.slow
def test_each_option_of_the_command_changes_what_it_reports(cli, tmp_path, ids_file):
    w = FORWARD / "llama" / "model.safetensors"
    base = ("perplexity", "--weights", w, "--ids", ids_file, "--ctx", "32", "--json")

    def run(*extra):
        r = cli(*base, *extra)
        assert r.code == 0, r.err
        return r.json()

    dense = run()
    assert (dense["tokens_scored"], dense["protocol"]["name"]) == (135, "llama.cpp")
    every = run("--score", "all")
    assert (every["tokens_scored"], every["protocol"]["name"]) == (279, "all")
    strided = run("--stride", "16")
    assert (strided["tokens_scored"], strided["windows"]) == (299, 18)  # 300 ids, HF's recipe
    assert strided["dropped_tokens"] == 0 and dense["dropped_tokens"] == 300 - 9 * 32
    sparse = ["--sparsify", "cats", "--target-sparsity", "0.5"]
    whole = run(*sparse)["variants"][0]
    one = run(*sparse, "--layer", "1")["variants"][0]
    assert [c["layer"] for c in whole["layers"]] == [0, 1]
    assert [c["layer"] for c in one["layers"]] == [1] and one["perplexity"] != whole["perplexity"]
    assert run("--dtype", "float64")["perplexity"] == pytest.approx(dense["perplexity"],
                                                                    rel=1e-5)


@pytest.mark.slow
def test_calibration_text_calibrates_in_place_of_the_evaluated_one(cli, tmp_path):
    from helpers.installed_models import minilm

    text, other = tmp_path / "text.txt", tmp_path / "other.txt"
    text.write_text("Alice was beginning to get very tired of sitting by her sister.\n"
                    "So she was considering in her own mind.\n")
    other.write_text("The Rabbit took a watch out of its waistcoat-pocket, and looked at it.\n")
    base = ("perplexity", "--weights", minilm(), "--text", text, "--sparsify", "cats",
            "--target-sparsity", "0.5", "--json")
    own, theirs = cli(*base), cli(*base, "--calibration-text", other)
    assert own.code == theirs.code == 0, (own.err, theirs.err)
    assert own.json()["calibration"]["evaluated_text"] is True
    assert theirs.json()["calibration"]["source"] == str(other)
    assert theirs.json()["calibration"]["evaluated_text"] is False
    assert own.json()["variants"][0]["layers"][0]["threshold"] != \
        theirs.json()["variants"][0]["layers"][0]["threshold"]


# ---------------------------------------------------------------------------------------------
# --save-thresholds with --report: all or nothing, as capture is.


def _both(tmp_path: Path, ids_file: Path) -> tuple[Path, Path, tuple]:
    saved, report = tmp_path / "t.json", tmp_path / "r.html"
    args = ("perplexity", "--weights", FORWARD / "gpt2" / "model.safetensors", "--ids",
            ids_file, "--ctx", "32", "--sparsify", "cats", "--target-sparsity", "0.5",
            "--save-thresholds", saved, "--report", report, "--quiet")
    return saved, report, args


def _after_the_work(monkeypatch, then) -> list:
    """The command's job (run_asked, as the single-file path calls it) as it was,
    ``then(result)`` after it; what it saw in the folder."""
    import ffncli.cli.single as job

    run, seen = job.run_asked, []

    def wrapped(*args, **kwargs):
        result = run(*args, **kwargs)
        seen.append(then(result))
        return result

    monkeypatch.setattr(job, "run_asked", wrapped)
    return seen


def test_both_outputs_are_reserved_before_the_work(cli, tmp_path, ids_file, monkeypatch):
    """While the walk runs, each output's hidden temporary file exists beside it (a folder
    that cannot be written fails before the work); after, only the two files."""
    saved, report, args = _both(tmp_path, ids_file)
    seen = _after_the_work(monkeypatch, lambda result: sorted(os.listdir(tmp_path)))
    r = cli(*args)
    assert (r.code, r.err) == (0, "")
    assert [re.sub(r"\.[0-9a-f]{8}\.", ".HEX.", n) for n in seen[0]] == \
        [".r.html.HEX.tmp", ".t.json.HEX.tmp"]
    assert sorted(os.listdir(tmp_path)) == ["r.html", "t.json"]
    assert json.loads(saved.read_text())["format"] == "ffncli thresholds"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["report-fails", "report-is-a-directory", "interrupted"])
def test_a_report_that_fails_leaves_no_thresholds_file(cli, tmp_path, ids_file, monkeypatch,
                                                       how):
    """The thresholds file was written in the job, before the report was made: a report that
    could not be made or written left it behind (exit 2). Now neither is named."""
    import ffncli.present.perplexity as present

    saved, report, args = _both(tmp_path, ids_file)
    line = "error: the report could not be drawn\n"
    if how == "report-fails":
        def failing(*a):
            raise InputError(line[7:-1])

        monkeypatch.setattr(present, "perplexity_report", failing)
    elif how == "report-is-a-directory":  # taken by a folder while the walk ran
        _after_the_work(monkeypatch, lambda result: report.mkdir())
        line = f"error: option --report: cannot write {report}: Is a directory\n"
    else:
        def interrupt(result):  # SIGTERM as main()'s handler raises it, after the walk
            raise Interrupted(signal.SIGTERM)

        _after_the_work(monkeypatch, interrupt)
    if how == "interrupted":
        with pytest.raises(Interrupted):
            cli(*args)
    else:
        r = cli(*args)
        assert (r.code, r.out, r.err) == (2, "", line)
    assert not saved.exists()
    assert sorted(os.listdir(tmp_path)) == (["r.html"] if how == "report-is-a-directory"
                                            else [])
