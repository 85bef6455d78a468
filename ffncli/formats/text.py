"""Text and token ids in: the model's tokenizer, ``--text`` and ``--ids`` files, windows.

``--text FILE``: UTF-8 text, each non-empty line one sequence. A line is what lies between two
``
`` bytes, with its ``
`` (and a ``
`` before it: Windows line ends) removed; every other
character, leading and trailing spaces and tabs included, reaches the tokenizer as it is (so a
line gives the ids ``tokenizer(line)`` gives in ``transformers``). Lines holding only
whitespace are skipped, as empty ones are; a byte-order mark opening the file is dropped.
Python's ``str.splitlines`` also cuts at ``
``, form feeds and U+2028: those stay inside a
line here, as the tokenizer would see them in one string.

The tokenizer is the model's ``tokenizer.json`` (beside a ``.safetensors`` file or index, or
in the model folder: a ``save_pretrained`` or Hugging Face cache snapshot folder), read by the
``tokenizers`` package (the ``text`` extra) with its truncation and padding switched off
(MiniLM's pads and truncates to 128) and special tokens added as its post-processor adds them
(BERT's ``[CLS] ... [SEP]``). A GGUF file carries its tokenizer in its metadata: a byte-level
BPE (``tokenizer.ggml.model`` ``gpt2``) is rebuilt from its tokens and merges, split as
llama.cpp splits it (``tokenizer.ggml.pre``).

``--ids FILE``: token ids without a tokenizer: an integer ``.npy`` (1-D one sequence, 2-D
sequences x length) or a ``.txt`` with one sequence of space-separated ids per line (an id
is its value: ``007``, or 7 after thousands of zeros, is 7).

A sequence longer than the model's positions is cut into consecutive windows of that many
ids (the last one shorter): special tokens stay where the tokenizer put them (BERT's
``[CLS]`` opens the first window only). Nothing is ever padded.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ffncli.base.files import check_file, open_file
from ffncli.base.validate import brief
from ffncli.errors import InputError, WeightsError

if TYPE_CHECKING:
    import numpy as np

    from ffncli.formats.gguf import GgufHeader


TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_MAX_BYTES = 256 * 2**20  # the largest tokenizer.json files (Gemma's) are ~35 MB
INPUT_MAX_BYTES = 2**30  # a --text or --ids file; its ids are held in memory (int64)
BATCH_LINES = 1024  # lines tokenised at once (tokenizers spreads a batch over the cores)
BATCH_BYTES = 1 << 20
LONG_LINE = 1 << 16  # characters: a longer line is tokenised in pieces cut at spaces (the
# tokenizers package holds ~700 bytes per token of one string: 1.4 GB for a 10 MB line)
MAX_PIECE = 1 << 18  # characters one native call tokenises at most, wherever the cuts fall
# (SmolLM2's byte-level BPE: 0.4 s for 256K characters without a space, 1.9 s for 1M; so
# Ctrl-C is taken within a call's time, and one call's memory is bounded); at least
# 2 * LONG_LINE + CUT_CONTEXT, the most between two places to cut (_cut_points)
CUT_CONTEXT = 256  # characters each side of a cut, tokenised whole and cut, to check the cut
CUT_TRIES = 4  # word boundaries, and characters, tried for a cut where there is no space
_CUT = re.compile(r"\S \S")  # a cut point: one space (U+0020) between two words
_WORD_EDGE = re.compile(r"\b")  # where there is no space: a word beside punctuation
NO_TOKENIZERS = "--text needs the tokenizers package: pip install 'ffncli[text]'"
_SPACE = re.compile(r"\s")
# what is not whole numbers separated by spaces: another character, a sign not before a digit,
# a digit before a sign (a search, not a fullmatch of a repeated group: Python's re keeps
# ~110 bytes of backtracking state per repetition, 450 MB for a 4 MB line)
_NOT_IDS = re.compile(r"[^0-9+\-\s]|[+-](?![0-9])|[0-9](?=[+-])")


@dataclass(frozen=True)
class Sequences:
    """Token ids, one int64 array per window, in text order."""

    ids: tuple[np.ndarray, ...]
    lines: tuple[int, ...]  # where each window came from: its 1-based line (a .npy: row + 1)
    source: str  # the file
    sha256: str  # of the file's bytes

    @property
    def tokens(self) -> int:
        return sum(len(s) for s in self.ids)


_T = TypeVar("_T")


class EncodeError(WeightsError):
    """The tokenizer failed on a text (an unknown-token entry missing from its vocabulary, a
    pre-tokenizer's regular expression past the regex engine's limit): the first line it
    fails on (its index in the batch), and why."""

    def __init__(self, source: str, index: int, reason: str) -> None:
        super().__init__(f"{source}: the tokenizer cannot encode the text: {reason}")
        self.source, self.index, self.reason = source, index, reason


def _tokenizer_failed(exc: BaseException) -> bool:
    """What the tokenizers package raises for a text it cannot encode: a bare Exception, or
    its Rust code's panic (pyo3's PanicException, a BaseException)."""
    return type(exc) is Exception or type(exc).__name__ == "PanicException"


def _stderr_held(call: Callable[[], _T]) -> _T:
    """``call()`` with file descriptor 2 in a temporary file: a panic of the tokenizers
    package's Rust code prints its message and a backtrace there before Python sees it. After
    a return, whatever was written is passed on to stderr; after an exception (the panic) it
    is dropped. Should the process abort meanwhile (a native failure that no exception
    reports), Python's fault handler writes so, and where, to the real stderr: an abort left
    it empty while fd 2 was held."""
    import faulthandler

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no stderr to hold
        return call()
    try:
        held = tempfile.TemporaryFile()
    except OSError:  # no room for it: unheld
        os.close(saved)
        return call()
    was_enabled = faulthandler.is_enabled()
    with held:
        os.dup2(held.fileno(), 2)
        faulthandler.enable(file=saved)
        try:
            result = call()
        finally:
            os.dup2(saved, 2)
            if was_enabled:  # as it was (to fd 2, its own file unknown), else off
                faulthandler.enable(file=2)
            else:
                faulthandler.disable()
            os.close(saved)
        held.seek(0)
        written = held.read()
    if written:
        try:
            os.write(2, written)
        except OSError:
            pass
    return result


class Tokenizer:
    """A ``tokenizers.Tokenizer`` that never truncates or pads, and adds special tokens."""

    def __init__(self, backend: Any, source: str) -> None:
        backend.no_truncation()
        backend.no_padding()
        self._backend = backend
        self.source = source
        self.vocab: int = backend.get_vocab_size(with_added_tokens=True)

    @functools.cached_property
    def bos(self) -> int | None:
        """The id the tokenizer puts before a text's own (its BOS; BERT's [CLS]), or None."""
        plain = self._backend.encode("a", add_special_tokens=False).ids
        special = self._backend.encode("a", add_special_tokens=True).ids
        if len(special) > len(plain) and special[1:1 + len(plain)] == plain:
            return int(special[0])
        return None

    def encode(self, lines: list[str]) -> list[list[int]]:
        """The ids of each line; a text the tokenizer fails on is an :class:`EncodeError`
        naming the first such line, never the package's traceback or panic."""
        try:
            return _stderr_held(lambda: self._encode(lines))
        except BaseException as exc:
            if not _tokenizer_failed(exc):
                raise
            reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise EncodeError(self.source, self._first_failing(lines), reason)

    def _first_failing(self, lines: list[str]) -> int:
        for i, line in enumerate(lines):
            try:
                _stderr_held(partial(self._encode, [line]))
            except BaseException as exc:
                if not _tokenizer_failed(exc):
                    raise
                return i
        return 0  # only the batch fails: name its first line

    def _encode(self, lines: list[str]) -> list[list[int]]:
        short = [line for line in lines if len(line) <= LONG_LINE]
        encoded = iter(self._backend.encode_batch(short, add_special_tokens=True))
        return [next(encoded).ids if len(line) <= LONG_LINE else self._encode_long(line, i)
                for i, line in enumerate(lines)]

    def _encode_long(self, line: str, index: int = 0) -> list[int]:
        """The ids of a long line, tokenised a piece at a time, with the special tokens around
        them as the post-processor adds them. A piece ends before a space between two words,
        where the ids of the text around it whole are those of its two sides (so with BERT's,
        byte-level BPE's and Metaspace pre-tokenizers; not where a normalizer prepends to
        every string, as LLaMA 2's); where there is no such space (a document without
        spaces), at a character where that holds too, of CUT_TRIES tried. No piece is longer
        than MAX_PIECE characters: past it, a piece ends where the check failed, and the ids
        at that cut may differ from those of the line tokenised whole (LLaMA 2's '▁' opens
        each piece; a word cut in two is two words). ``index``: the line's, for an error."""
        backend = self._backend
        cuts = _cut_points(line)
        checks = []
        for tries in cuts:
            for cut in tries:
                left, right = line[max(0, cut - CUT_CONTEXT):cut], line[cut:cut + CUT_CONTEXT]
                checks += [left + right, left, right]
        per_call = max(3, BATCH_BYTES // (2 * CUT_CONTEXT) // 3 * 3)  # whole triples
        encoded = [e.ids for start in range(0, len(checks), per_call)
                   for e in backend.encode_batch(checks[start:start + per_call],
                                                 add_special_tokens=False)]
        passed, at = [], 0
        for tries in cuts:
            good = [cut for k, cut in enumerate(tries, at)
                    if encoded[3 * k] == encoded[3 * k + 1] + encoded[3 * k + 2]]
            passed.append(good[0] if good else None)
            at += len(tries)
        bounds = [0, *_bounded_cuts(cuts, passed, len(line)), len(line)]
        if len(bounds) == 2:  # no cut: the line whole, which is no longer than a piece
            return list(backend.encode(line, add_special_tokens=True).ids)
        probe = line[:bounds[1]]
        plain = backend.encode(probe, add_special_tokens=False).ids
        if not plain:  # the first piece gives no ids (control characters): any text shows
            probe = "a"  # where the specials go
            plain = backend.encode(probe, add_special_tokens=False).ids
        special = backend.encode(probe, add_special_tokens=True).ids
        where = next((k for k in range(len(special) - len(plain) + 1)
                      if special[k:k + len(plain)] == plain), None)
        if where is None or not plain:  # specials not around the ids: no cutting
            if len(line) > MAX_PIECE:
                raise EncodeError(self.source, index, f"a line of {len(line):,} characters "
                                  "cannot be tokenised in pieces (the tokenizer's special "
                                  "tokens are not around the ids of its first piece), and "
                                  f"at most {MAX_PIECE:,} are tokenised at once")
            return list(backend.encode(line, add_special_tokens=True).ids)
        ids = list(special[:where])
        groups: list[list[str]] = [[]]  # pieces of about BATCH_BYTES characters a call
        size = 0
        for a, b in pairwise(bounds):
            if groups[-1] and size + b - a > BATCH_BYTES:
                groups.append([])
                size = 0
            groups[-1].append(line[a:b])
            size += b - a
        for group in groups:
            ids.extend(i for e in backend.encode_batch(group, add_special_tokens=False)
                       for i in e.ids)
        ids.extend(special[where + len(plain):])
        return ids


def _cut_points(line: str) -> list[list[int]]:
    """Where a long line may be cut, each place with the characters to try there in order:
    about every LONG_LINE characters, after the first space between two words in the next
    LONG_LINE characters; else (no such space) the last CUT_TRIES word boundaries in the
    CUT_CONTEXT characters before LONG_LINE characters on, then the last CUT_TRIES characters
    there, none inside a combined character (before a combining mark, a joiner or a variation
    selector). So places are at most 2 * LONG_LINE characters apart."""
    cuts: list[list[int]] = []
    at = LONG_LINE
    while at < len(line) - 1:
        found = _CUT.search(line, at, at + LONG_LINE + 2)
        if found is not None:
            cuts.append([found.start() + 1])
        else:
            cut = at + LONG_LINE
            if cut >= len(line):  # the rest is short enough
                break
            # the last word boundaries (\b: punctuation beside a word) first, then characters
            words = [m.start() for m in _WORD_EDGE.finditer(line, max(at + 1, cut - CUT_CONTEXT),
                                                            cut + 2) if m.start() <= cut]
            tries = [c for c in words[::-1] if not _joined(line, c)][:CUT_TRIES] + \
                [c for c in range(cut, max(at, cut - 64), -1) if not _joined(line, c)][:CUT_TRIES]
            cuts.append(list(dict.fromkeys(tries)) or [cut])  # 64 marks in a row: cut there
        at = cuts[-1][0] + LONG_LINE
    return cuts


def _joined(line: str, at: int) -> bool:
    """Whether ``line[at]`` belongs with the character before it: a combining mark, a
    variation selector, a zero-width joiner or what follows one."""
    import unicodedata

    after, before = line[at], line[at - 1]
    return (unicodedata.category(after) in ("Mn", "Mc", "Me") or after == "\u200d"
            or before == "\u200d" or "\ufe00" <= after <= "\ufe0f")


def _bounded_cuts(cuts: list[list[int]], passed: list[int | None], end: int) -> list[int]:
    """The cuts kept: each that passed its check; one that did not, only where the piece
    would otherwise run past MAX_PIECE characters before the next place to cut."""
    kept: list[int] = []
    last = 0
    for i, (tries, good) in enumerate(zip(cuts, passed, strict=True)):
        following = max(cuts[i + 1]) if i + 1 < len(cuts) else end
        if good is not None or following - last > MAX_PIECE:
            kept.append(good if good is not None else tries[0])
            last = kept[-1]
    return kept


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise InputError(NO_TOKENIZERS) from None
    return tokenizers


# ---------------------------------------------------------------------------------------------
# The tokenizer.


def tokenizer_path(weights: Path) -> Path:
    """Where the tokenizer of ``weights`` is: ``tokenizer.json`` in the model folder, or
    beside the weights file (a ``.safetensors`` file or index)."""
    folder = weights if weights.is_dir() else weights.parent
    path = folder / TOKENIZER_FILE
    if not path.exists():  # a dangling link (a cache blob never fetched) is missing too
        raise WeightsError(f"no {TOKENIZER_FILE} beside the weights: looked for {path}; "
                           "--ids FILE takes token ids without a tokenizer")
    return path


def load_tokenizer(weights: Path, header: GgufHeader | None = None) -> Tokenizer:
    """The tokenizer of a model: its ``tokenizer.json``, or a GGUF file's own metadata
    (``header``: the GGUF file's, when the caller has read it)."""
    tokenizers = _tokenizers()
    if weights.suffix.lower() == ".gguf" and not weights.is_dir():
        return _gguf_tokenizer(weights, tokenizers, header)
    path = tokenizer_path(weights)
    with open_file(path, "tokenizer file", WeightsError, TOKENIZER_MAX_BYTES) as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WeightsError(f"{path}: not a UTF-8 text file") from None
    try:
        backend = tokenizers.Tokenizer.from_str(text)
    except Exception as exc:  # the package raises a bare Exception for any unreadable file
        raise WeightsError(f"{path}: the tokenizers package cannot read this tokenizer: "
                           f"{exc}") from None
    return Tokenizer(backend, str(path))


# GGUF's tokenizer.ggml.pre -> the regular expressions llama.cpp splits text with before its
# byte-level BPE (llama-vocab.cpp, llm_tokenizer_bpe), each piece isolated, in order.
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
                 r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                 r"|\s+(?!\S)|\s+")
GGUF_PRE_SPLITS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("gpt2", "mpt", "olmo", "jais"), (_GPT2_SPLIT,)),
    # digits one by one, then GPT-2's expression
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone"),
                    (r"\p{N}", _GPT2_SPLIT)),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                     "midm-2.0", "lfm2"), (_LLAMA3_SPLIT,)),
}
# llama.cpp's LLAMA3 pre-tokenizers: a piece found whole in the vocabulary is one token
# (ignore_merges), and BOS is added unless tokenizer.ggml.add_bos_token says otherwise.
_LLAMA3 = frozenset(k for k, v in GGUF_PRE_SPLITS.items() if v == (_LLAMA3_SPLIT,))
_TOKENS, _MERGES, _TYPES = "tokenizer.ggml.tokens", "tokenizer.ggml.merges", \
    "tokenizer.ggml.token_type"
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp's token types


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's bytes -> printable characters (``bytes_to_unicode``): the spelling of a
    byte-level vocabulary ("Ġ" is the space)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable},
            **{b: chr(256 + i) for i, b in enumerate(shifted)}}


def _gguf_tokenizer(path: Path, tokenizers: Any,
                    header: GgufHeader | None = None) -> Tokenizer:
    """A byte-level BPE from ``tokenizer.ggml.tokens`` and ``.merges``, split per
    ``tokenizer.ggml.pre``, control tokens kept whole (as ``transformers`` and llama.cpp keep
    them), BOS/EOS added by their ids (whatever their text) when
    ``tokenizer.ggml.add_bos_token``/``add_eos_token`` say so (when a file does not say, as
    llama.cpp does: BOS for the LLAMA3 pre-tokenizers only)."""
    from ffncli.formats.gguf import metadata_arrays, read_header

    if header is None:
        header = read_header(path)
    meta = header.metadata
    model = meta.get("tokenizer.ggml.model")
    if model is None:
        raise WeightsError(f"{path}: no tokenizer in the GGUF metadata (no key "
                           "'tokenizer.ggml.model'); --ids FILE takes token ids without one")
    if model != "gpt2":
        raise WeightsError(f"{path}: GGUF tokenizer {brief(model)} is not read (only 'gpt2', "
                           "a byte-level BPE); --ids FILE takes token ids without a tokenizer")
    pre = meta.get("tokenizer.ggml.pre")
    if pre not in GGUF_PRE_SPLITS:
        raise WeightsError(f"{path}: metadata key 'tokenizer.ggml.pre': GGUF pre-tokenizer "
                           f"{brief(pre)} is not known; known: {', '.join(GGUF_PRE_SPLITS)} "
                           "(--ids FILE takes token ids without a tokenizer)")
    arrays = metadata_arrays(path, (_TOKENS, _MERGES, _TYPES), header)
    tokens, merges = arrays.get(_TOKENS), arrays.get(_MERGES)
    for key, values in ((_TOKENS, tokens), (_MERGES, merges)):
        if not values or not all(isinstance(v, str) for v in values):
            raise WeightsError(f"{path}: metadata key '{key}': expected an array of strings, "
                               f"got {brief(values)}")
    assert tokens is not None and merges is not None  # checked just above
    types = arrays.get(_TYPES) or [0] * len(tokens)
    if len(types) != len(tokens):
        raise WeightsError(f"{path}: metadata key '{_TYPES}': expected {len(tokens):,} token "
                           f"types (one per token), got {len(types):,}")
    alphabet = _byte_alphabet()
    spelled = set(alphabet.values())
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):  # tokens outside the alphabet: spell their bytes
        vocab.setdefault(token if set(token) <= spelled else
                         "".join(alphabet[b] for b in token.encode("utf-8")), i)
    pairs = []
    for i, merge in enumerate(merges):
        pair = tuple(merge.split(" "))
        if len(pair) != 2 or not all(pair):
            raise WeightsError(f"{path}: metadata key '{_MERGES}': merge {i} is {brief(merge)};"
                               " expected two tokens separated by one space")
        pairs.append(pair)
    models, pre_tokenizers = tokenizers.models, tokenizers.pre_tokenizers
    try:
        backend = tokenizers.Tokenizer(models.BPE(vocab, pairs, ignore_merges=pre in _LLAMA3))
    except Exception as exc:  # a merge of tokens not in the vocabulary
        raise WeightsError(f"{path}: the GGUF tokenizer cannot be built: {exc}") from None
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(tokenizers.Regex(r), behavior="isolated")
         for r in GGUF_PRE_SPLITS[pre]]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    backend.decoder = tokenizers.decoders.ByteLevel()
    special = [tokenizers.AddedToken(t, normalized=False, special=True)
               for t, kind in zip(tokens, types, strict=True)
               if kind == _CONTROL and set(t) <= spelled]
    backend.add_special_tokens(special)
    backend.add_tokens([tokenizers.AddedToken(t, normalized=False, special=False)
                        for t, kind in zip(tokens, types, strict=True) if kind == _USER_DEFINED
                        and t in vocab])
    # The template names BOS and EOS by placeholders of ours, mapped to their ids: the token's
    # own text ("$A", "<s> x", "a:b") is data, never template syntax.
    template, specials = ["$A:0"], []
    for end, flag, default in (("bos", "add_bos_token", pre in _LLAMA3),
                               ("eos", "add_eos_token", False)):
        if meta.get(f"tokenizer.ggml.{flag}", default) is True:
            token_id = meta.get(f"tokenizer.ggml.{end}_token_id")
            if (isinstance(token_id, bool) or not isinstance(token_id, int)
                    or not 0 <= token_id < len(tokens)):
                raise WeightsError(f"{path}: metadata key 'tokenizer.ggml.{end}_token_id': "
                                   f"expected a token id below {len(tokens):,} (the file sets "
                                   f"{flag}), got {brief(token_id)}")
            template.insert(0 if end == "bos" else len(template), f"{end}:0")
            specials.append((end, token_id))
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single=" ".join(template), special_tokens=specials)
    return Tokenizer(backend, str(path))


# ---------------------------------------------------------------------------------------------
# --text


def _windows(ids: np.ndarray, max_positions: int | None) -> list[np.ndarray]:
    """``ids`` cut into consecutive windows of ``max_positions`` (the last one shorter)."""
    if max_positions is None or len(ids) <= max_positions:
        return [ids]
    return [ids[i:i + max_positions] for i in range(0, len(ids), max_positions)]


def _check_positions(max_positions: int | None) -> None:
    if max_positions is not None and (isinstance(max_positions, bool) or max_positions < 1):
        raise ValueError(f"max_positions: expected None or a whole number >= 1, got "
                         f"{max_positions!r}")


def _lines(path: Path, f: io.BufferedReader, digest: Any) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of the file's non-blank lines, newline removed."""
    for number, raw in enumerate(f, 1):
        digest.update(raw)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: line {number}: not UTF-8 text (byte "
                             f"0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
                             ) from None
        if number == 1:
            line = line.removeprefix("\ufeff")
        line = line.removesuffix("\n").removesuffix("\r")
        if line.strip():
            yield number, line


def read_text(path: Path, tokenizer: Tokenizer, max_positions: int | None) -> Sequences:
    """Each non-empty line of a UTF-8 text one sequence, tokenised in batches of lines (the
    file is never held whole as one string), cut into windows of ``max_positions``."""
    import numpy as np

    _check_positions(max_positions)
    digest = hashlib.sha256()
    windows: list[np.ndarray] = []
    lines: list[int] = []

    def flush(batch: list[tuple[int, str]]) -> None:
        try:
            encoded = tokenizer.encode([t for _, t in batch])
        except EncodeError as exc:
            raise WeightsError(f"{exc.source}: the tokenizer cannot encode line "
                               f"{batch[exc.index][0]} of {path}: {exc.reason}") from None
        for (number, _), ids in zip(batch, encoded, strict=True):
            if ids:  # a tokenizer may give nothing for a line (a lone control character)
                cut = _windows(np.asarray(ids, dtype=np.int64), max_positions)
                windows.extend(cut)
                lines.extend([number] * len(cut))

    with open_file(path, "text file", InputError, INPUT_MAX_BYTES) as f:
        batch: list[tuple[int, str]] = []
        size = seen = 0
        for number, line in _lines(path, f, digest):
            batch.append((number, line))
            size += len(line)
            seen += 1
            if len(batch) >= BATCH_LINES or size >= BATCH_BYTES:
                flush(batch)
                batch, size = [], 0
        flush(batch)
    if not windows and seen:  # a normalizer may drop everything (control characters)
        raise InputError(f"{path}: no token ids: the tokenizer {tokenizer.source} gives none for "
                         f"any of its {seen:,} non-empty line{'s' if seen > 1 else ''}")
    if not windows:
        raise InputError(f"{path}: no text: every line is empty (expected one sequence per "
                         "non-empty line)")
    return Sequences(tuple(windows), tuple(lines), str(path), digest.hexdigest())


def read_document(path: Path, tokenizer: Tokenizer) -> Sequences:
    """A UTF-8 text as one document, tokenised whole (newlines are text; the tokenizer adds
    its special tokens, a BOS first where it uses one): one sequence of ids, not cut."""
    import numpy as np

    with open_file(path, "text file", InputError, INPUT_MAX_BYTES) as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path}: line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})"
                         ) from None
    if not text.strip():
        raise InputError(f"{path}: no text: the file is empty or blank")
    try:
        ids = tokenizer.encode([text])[0]
    except EncodeError as exc:
        raise WeightsError(f"{exc.source}: the tokenizer cannot encode {path}: {exc.reason}"
                           ) from None
    if not ids:  # a normalizer may drop everything (control characters)
        raise InputError(f"{path}: no token ids: the tokenizer {tokenizer.source} gives none "
                         "for its text")
    return Sequences((np.asarray(ids, dtype=np.int64),), (1,), str(path),
                     hashlib.sha256(raw).hexdigest())


# ---------------------------------------------------------------------------------------------
# --ids


def _out_of_range(where: str, value: object, vocab: int) -> InputError:
    shown = value if isinstance(value, int) else brief(value)
    return InputError(f"{where}: token id {shown} is out of range for a vocabulary of {vocab}")


def read_ids(path: Path, vocab: int, max_positions: int | None) -> Sequences:
    """Token ids from an integer ``.npy`` (1-D one sequence, 2-D sequences x length) or a
    ``.txt`` (one sequence of space-separated ids per line, blank lines skipped), each id
    checked against the vocabulary, cut into windows of ``max_positions``."""
    _check_positions(max_positions)
    if isinstance(vocab, bool) or vocab < 1:
        raise ValueError(f"vocab: expected a whole number >= 1, got {vocab!r}")
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".txt"):
        check_file(path, "token ids file", InputError)
        raise InputError(f"{path}: expected token ids in a .npy or .txt file")
    with open_file(path, "token ids file", InputError, INPUT_MAX_BYTES) as f:
        if suffix == ".npy":
            raw = f.read()
            digest = hashlib.sha256(raw).hexdigest()
            rows = _npy_ids(path, raw, vocab)
        else:
            hashing = hashlib.sha256()
            rows = _txt_ids(path, f, hashing, vocab)
            digest = hashing.hexdigest()
    windows: list[np.ndarray] = []
    lines: list[int] = []
    for number, ids in rows:
        cut = _windows(ids, max_positions)
        windows.extend(cut)
        lines.extend([number] * len(cut))
    if not windows:
        raise InputError(f"{path}: no token ids: every line is empty")
    return Sequences(tuple(windows), tuple(lines), str(path), digest)


def _npy_ids(path: Path, raw: bytes, vocab: int) -> list[tuple[int, np.ndarray]]:
    import numpy as np

    from ffncli.formats.npy import read_npy_header

    header = read_npy_header(io.BytesIO(raw), len(raw), str(path), InputError)
    dtype, shape = header.dtype, header.shape
    if dtype.kind not in "iu":
        what = {"f": "floating-point numbers", "b": "booleans", "O": "Python objects",
                "U": "strings", "S": "bytes", "c": "complex numbers",
                "V": "structured records"}.get(dtype.kind, str(dtype))
        raise InputError(f"{path}: expected integer token ids, got an array of {what} "
                         f"({dtype})")
    if len(shape) not in (1, 2):
        raise InputError(f"{path}: expected a 1-D array (one sequence) or a 2-D array "
                         f"(sequences x length) of token ids, got {len(shape)}-D {shape}")
    if 0 in shape:
        raise InputError(f"{path}: no token ids: the array's shape is {shape}")
    header.check_size(len(raw), str(path), InputError)
    array = np.frombuffer(raw, dtype=dtype, offset=header.offset).reshape(
        shape, order="F" if header.fortran else "C")
    bad = (array < 0) | (array >= vocab)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f"{path}: row {at[0]}, position {at[1]}" if len(at) == 2 else \
            f"{path}: position {at[0]}"
        raise _out_of_range(where, int(array[at]), vocab)
    ids = np.ascontiguousarray(array, dtype=np.int64).reshape(-1, shape[-1])
    return [(i + 1, row) for i, row in enumerate(ids)]


def _txt_ids(path: Path, f: io.BufferedReader, digest: Any,
             vocab: int) -> list[tuple[int, np.ndarray]]:
    """The ids of each non-blank line, read line by line."""
    import numpy as np

    rows = []
    for number, raw in enumerate(f, 1):
        digest.update(raw)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path}: line {number}: expected token ids (whole numbers "
                             "separated by spaces), got bytes that are not UTF-8 text") from None
        if number == 1:
            text = text.removeprefix("\ufeff")  # a byte-order mark, as --text drops it
        if not text.strip():
            continue
        if _NOT_IDS.search(text):
            raise InputError(f"{path}: line {number}: expected token ids (whole numbers "
                             f"separated by spaces), got {brief(text.strip())}")
        chunks = []
        for parts in _split_ids(text):  # a long line a megabyte at a time: ~120 bytes a part
            try:
                ids = np.array(parts, dtype=np.int64)
            except (OverflowError, ValueError):  # beyond int64, or int()'s 4,300 characters
                try:  # an id is its value: 0...07, thousands of zeros long, is 7
                    ids = np.array([_shortest(p) for p in parts], dtype=np.int64)
                except (OverflowError, ValueError):
                    ids = None
            if ids is None or (ids < 0).any() or (ids >= vocab).any():
                raise _out_of_range(f"{path}: line {number}", _first_out_of_range(parts, vocab),
                                    vocab)
            chunks.append(ids)
        rows.append((number, chunks[0] if len(chunks) == 1 else np.concatenate(chunks)))
    return rows


def _split_ids(text: str) -> Iterator[list[str]]:
    """``text.split()``, about BATCH_BYTES characters of the text at a time."""
    start = 0
    while start < len(text):
        found = _SPACE.search(text, start + BATCH_BYTES)
        end = found.start() if found is not None else len(text)
        yield text[start:end].split()
        start = end


def _shortest(part: str) -> str:
    """An id as written (a sign, digits), without its leading zeros: int() refuses more than
    4,300 characters, leading zeros included."""
    digits = part.lstrip("+-")
    return part[:len(part) - len(digits)] + (digits.lstrip("0") or "0")


def _first_out_of_range(parts: list[str], vocab: int) -> int | str:
    """The first id of ``parts`` outside 0..vocab-1: as a number, or as written when it is
    more than 20 digits without its leading zeros (not converted)."""
    for part in parts:
        shortest = _shortest(part)
        if len(shortest.lstrip("+-")) > 20:
            return part
        if not 0 <= int(shortest) < vocab:
            return int(shortest)
    raise AssertionError("no id out of range")  # the caller found one
