"""The model's tokenizer: its ``tokenizer.json`` (beside a ``.safetensors`` file or index, or in
the model folder: a ``save_pretrained`` or Hugging Face cache snapshot folder), read by the
``tokenizers`` package (the ``text`` extra) with its truncation and padding switched off
(MiniLM's pads and truncates to 128) and special tokens added as its post-processor adds them
(BERT's ``[CLS] ... [SEP]``). A GGUF file's tokenizer is rebuilt from its metadata
(:mod:`ffncli.formats.gguf_tokenizer`). Long lines are tokenised in checked pieces, and a
panic of the package's native code is one error line."""

from __future__ import annotations

import functools
import os
import re
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ffncli.base.files import open_file
from ffncli.base.validate import PARAMETERS, Words
from ffncli.errors import InputError, WeightsError
from ffncli.formats.gguf_tokenizer import gguf_tokenizer, ids_instead

if TYPE_CHECKING:
    from ffncli.formats.gguf import GgufHeader

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_MAX_BYTES = 256 * 2**20  # the largest tokenizer.json files (Gemma's) are ~35 MB
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

    def pieces(self, ids: list[int]) -> list[str]:
        """Each id's text alone, as the tokenizer decodes it (a byte-level piece of a longer
        character: U+FFFD); ``neurons`` shows its contexts with them."""
        return [self._backend.decode([i], skip_special_tokens=False) for i in ids]

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
        bounds = self._bounds(line)
        if len(bounds) == 2:  # no cut: the line whole, which is no longer than a piece
            return list(self._backend.encode(line, add_special_tokens=True).ids)
        around = self._specials_around(line[:bounds[1]])
        if around is None:  # specials not around the ids: no cutting
            if len(line) > MAX_PIECE:
                raise EncodeError(self.source, index, f"a line of {len(line):,} characters "
                                  "cannot be tokenised in pieces (the tokenizer's special "
                                  "tokens are not around the ids of its first piece), and "
                                  f"at most {MAX_PIECE:,} are tokenised at once")
            return list(self._backend.encode(line, add_special_tokens=True).ids)
        before, after = around
        ids = list(before)
        for group in _groups(line, bounds):
            ids.extend(i for e in self._backend.encode_batch(group, add_special_tokens=False)
                       for i in e.ids)
        return ids + list(after)

    def _bounds(self, line: str) -> list[int]:
        """Where the pieces of a long line begin and end: 0, the cuts kept, the line's end.
        A cut is kept where the ids of the text around it whole are those of its two sides
        (the first of its tries that passes), or, failing that, where a piece would
        otherwise exceed MAX_PIECE."""
        cuts = _cut_points(line)
        checks = []
        for tries in cuts:
            for cut in tries:
                left, right = line[max(0, cut - CUT_CONTEXT):cut], line[cut:cut + CUT_CONTEXT]
                checks += [left + right, left, right]
        per_call = max(3, BATCH_BYTES // (2 * CUT_CONTEXT) // 3 * 3)  # whole triples
        encoded = [e.ids for start in range(0, len(checks), per_call)
                   for e in self._backend.encode_batch(checks[start:start + per_call],
                                                       add_special_tokens=False)]
        passed, at = [], 0
        for tries in cuts:
            good = [cut for k, cut in enumerate(tries, at)
                    if encoded[3 * k] == encoded[3 * k + 1] + encoded[3 * k + 2]]
            passed.append(good[0] if good else None)
            at += len(tries)
        return [0, *_bounded_cuts(cuts, passed, len(line)), len(line)]

    def _specials_around(self, probe: str) -> tuple[list[int], list[int]] | None:
        """The special tokens the post-processor puts before and after a text's ids, seen on
        ``probe`` (the first piece); None when they are not around its ids."""
        backend = self._backend
        plain = backend.encode(probe, add_special_tokens=False).ids
        if not plain:  # the first piece gives no ids (control characters): any text shows
            probe = "a"  # where the specials go
            plain = backend.encode(probe, add_special_tokens=False).ids
        special = backend.encode(probe, add_special_tokens=True).ids
        where = next((k for k in range(len(special) - len(plain) + 1)
                      if special[k:k + len(plain)] == plain), None)
        if where is None or not plain:
            return None
        return list(special[:where]), list(special[where + len(plain):])


def _groups(line: str, bounds: list[int]) -> list[list[str]]:
    """The pieces between ``bounds``, in groups of about BATCH_BYTES characters: one native
    call each."""
    groups: list[list[str]] = [[]]
    size = 0
    for a, b in pairwise(bounds):
        if groups[-1] and size + b - a > BATCH_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(line[a:b])
        size += b - a
    return groups


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


def _tokenizers(words: Words) -> Any:
    try:
        import tokenizers
    except ImportError:
        raise InputError(f"{words.name('text')} needs the tokenizers package: pip install "
                         "'ffncli[text]'") from None
    return tokenizers


def tokenizer_path(weights: Path, words: Words = PARAMETERS) -> Path:
    """Where the tokenizer of ``weights`` is: ``tokenizer.json`` in the model folder, or
    beside the weights file (a ``.safetensors`` file or index)."""
    folder = weights if weights.is_dir() else weights.parent
    path = folder / TOKENIZER_FILE
    if not path.exists():  # a dangling link (a cache blob never fetched) is missing too
        raise WeightsError(f"no {TOKENIZER_FILE} beside the weights: looked for {path}; "
                           f"{ids_instead(words)}")
    return path


def load_tokenizer(weights: Path, header: GgufHeader | None = None,
                   words: Words = PARAMETERS) -> Tokenizer:
    """The tokenizer of a model: its ``tokenizer.json``, or a GGUF file's own metadata
    (``header``: the GGUF file's, when the caller has read it). Errors name ``text`` and
    ``ids`` in ``words`` (a command's: ``--ids FILE takes token ids without a tokenizer``)."""
    tokenizers = _tokenizers(words)
    if weights.suffix.lower() == ".gguf" and not weights.is_dir():
        return Tokenizer(gguf_tokenizer(weights, tokenizers, header, words), str(weights))
    path = tokenizer_path(weights, words)
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
