"""Perplexity and its protocols, and how far a changed model's predictions are from the dense
model's: NLL, KL, top-1 agreement (decoders), cosine of hidden states (encoders).

The protocols, each named beside every number it gives (T tokens, N = ctx):

- ``llama.cpp`` (llama-perplexity, the default): chunks of N tokens, ``ids[cN:(c+1)N]``, the
  first one of each replaced by BOS where the model's tokenizer adds one; only the second half
  scored: positions N/2 .. N-2 predict tokens N/2+1 .. N-1.
- ``all``: the same chunks, every position 0 .. N-2 scored.
- ``stride S`` (Hugging Face's "perplexity of fixed-length models", its loop exactly): windows
  of N tokens starting every S tokens, the last one ending at the text's end (shorter than N
  where T - N is no multiple of S); the first scores positions 0 .. N-2, each later one only
  the tokens the previous did not: every token but the first, once.

Under llama.cpp's protocol and ``all``, a final chunk shorter than N is dropped, as
llama-perplexity drops it. Sums are float64 and merge exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ffncli.base.validate import PARAMETERS, Words
from ffncli.compute.forward.layer import Head
from ffncli.compute.forward.ops import dot_sum
from ffncli.errors import InputError

Array = np.ndarray
LOGIT_ELEMENTS = 1 << 22  # logits held at once: rows x vocab (16 MB in float32)
SCORES = ("half", "all")


# ---------------------------------------------------------------------------------------------
# Protocols: which windows, which positions scored.


@dataclass(frozen=True)
class Protocol:
    ctx: int
    stride: int | None = None
    score: str = "half"

    @property
    def name(self) -> str:
        if self.stride is not None:
            return "stride"
        return "llama.cpp" if self.score == "half" else "all"

    def describe(self) -> str:
        n = self.ctx
        if self.stride is not None:
            return (f"windows of {n} tokens every {self.stride}, the last one ending at the "
                    "text's end (Hugging Face's stride recipe): each scores the tokens the "
                    "previous one did not")
        scored = f"positions {n // 2}..{n - 2} scored" if self.score == "half" else \
            f"positions 0..{n - 2} scored"
        return f"chunks of {n} tokens (llama.cpp's llama-perplexity), {scored}" \
            if self.score == "half" else f"chunks of {n} tokens, {scored}"

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "ctx": self.ctx, "stride": self.stride,
                "score": self.score, "description": self.describe()}


@dataclass(frozen=True)
class Windows:
    """The windows a protocol runs (each ``ctx`` ids, but a stride's last) and the first
    position each scores (positions first .. len-2 predict the next token); ``dropped``: ids
    past the last full chunk (none under a stride)."""

    ids: tuple[Array, ...]
    first: tuple[int, ...]
    dropped: int

    @property
    def scored(self) -> int:
        return sum(len(w) - 1 - f for w, f in zip(self.ids, self.first, strict=True))


def check_protocol(protocol: Protocol, max_positions: int | None,
                   words: Words = PARAMETERS) -> None:
    """The protocol's ``ctx``, ``stride`` and ``score``, each in its range and together one
    protocol; errors name them in ``words`` (a command's: ``option --ctx``)."""
    _check_ctx(protocol, max_positions, words)
    n, s = protocol.ctx, protocol.stride
    if s is not None and (isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= n):
        raise InputError(f"{words.where('stride')}: expected a whole number from 1 to "
                         f"{words.name('ctx')} ({n}), got {s!r}")
    if protocol.score not in SCORES:
        raise InputError(f"{words.where('score')}: expected half or all, got "
                         f"{protocol.score!r}")
    if s is not None and protocol.score != "half":
        both = f"{words.name('stride')} and {words.given('score', 'all')}"
        raise InputError(f"{'options ' if words.options else ''}{both}: give one (a stride "
                         "window scores what the previous one did not)")


def _check_ctx(protocol: Protocol, max_positions: int | None, words: Words) -> None:
    n, where = protocol.ctx, words.where("ctx")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise InputError(f"{where}: expected a whole number >= 2, got {n!r}")
    if n < 3 and protocol.score == "half" and protocol.stride is None:
        raise InputError(f"{where}: {n} scores no token under llama.cpp's protocol "
                         f"(positions {n // 2}..{n - 2}); expected a whole number >= 3, or "
                         f"{words.given('score', 'all')}")
    if max_positions is not None and n > max_positions:
        raise InputError(f"{where}: {n:,} is more than the model's {max_positions:,} "
                         "positions")


def chunks(ids: Array, ctx: int, bos: int | None) -> list[Array]:
    """Consecutive chunks of ``ctx`` ids (a final shorter one dropped), the first id of each
    replaced by ``bos`` when given."""
    out = []
    for start in range(0, len(ids) - ctx + 1, ctx):
        chunk = np.array(ids[start:start + ctx], dtype=np.int64)
        if bos is not None:
            chunk[0] = bos
        out.append(chunk)
    return out


def windows(ids: Array, protocol: Protocol, bos: int | None,
            words: Words = PARAMETERS) -> Windows:
    """The windows ``protocol`` runs on the document ``ids``; a text shorter than two windows'
    worth (2 ctx tokens, as llama-perplexity asks) is refused, naming ``ctx`` in ``words``."""
    n, t = protocol.ctx, len(ids)
    if t < 2 * n:
        raise InputError(f"the text has {t:,} tokens; perplexity with "
                         f"{words.given('ctx', n)} needs at least {2 * n:,} (two chunks)")
    if protocol.stride is None:
        parts = chunks(ids, n, bos)
        half = n // 2 if protocol.score == "half" else 0
        return Windows(tuple(parts), (half,) * len(parts), t - len(parts) * n)
    return _recipe(ids, n, protocol.stride)


def _recipe(ids: Array, n: int, s: int) -> Windows:
    """Hugging Face's recipe, as its loop reads: a window ``ids[b:min(b + n, T)]`` for b = 0,
    s, 2s, ... until one ends at T (the last one shorter where T - n is no multiple of s);
    each scores its last ``end - previous end`` targets (the first window every position)."""
    t = len(ids)
    parts, first, previous = [], [], 0
    for b in range(0, t, s):
        end = min(b + n, t)
        window = np.array(ids[b:end], dtype=np.int64)
        parts.append(window)
        first.append(max(0, len(window) - (end - previous) - 1))  # its last end - previous
        previous = end
        if end == t:
            break
    return Windows(tuple(parts), tuple(first), 0)


# ---------------------------------------------------------------------------------------------
# Scores of next-token predictions.


def log_softmax(logits: Array) -> Array:
    """log softmax over the last axis, in the logits' dtype and in their place (``logits``,
    a fresh array, is overwritten and returned), its normaliser summed in float64 (float32
    logits: within 1e-6 of a float64 log softmax)."""
    z = np.subtract(logits, logits.max(axis=-1, keepdims=True), out=logits)
    total = np.exp(z).sum(axis=-1, keepdims=True, dtype=np.float64)
    z -= np.log(total).astype(z.dtype)
    return z


@dataclass
class Nll:
    """Summed negative log-likelihood of the scored tokens (float64; sums merge exactly)."""

    total: float = 0.0
    tokens: int = 0

    def add(self, other: Nll) -> None:
        self.total += other.total
        self.tokens += other.tokens

    @property
    def mean(self) -> float:
        return self.total / self.tokens if self.tokens else math.nan

    @property
    def perplexity(self) -> float:
        return math.exp(self.mean) if self.tokens else math.nan


@dataclass
class Agreement:
    """A changed model's predictions against the dense model's on the same scored tokens."""

    nll: Nll = field(default_factory=Nll)
    kl: float = 0.0  # sum over tokens of KL(dense || changed), nats
    same_top1: int = 0

    def add(self, other: Agreement) -> None:
        self.nll.add(other.nll)
        self.kl += other.kl
        self.same_top1 += other.same_top1

    @property
    def kl_mean(self) -> float:
        return self.kl / self.nll.tokens if self.nll.tokens else math.nan

    @property
    def top1(self) -> float:
        return self.same_top1 / self.nll.tokens if self.nll.tokens else math.nan


def scored_rows(bounds: Sequence[tuple[int, int]], firsts: Sequence[int]) -> tuple[Array, Array]:
    """(rows, next rows) of a batch: each scored position of its windows and the position of
    the token it predicts, in batch rows."""
    rows = [np.arange(s + f, e - 1) for (s, e), f in zip(bounds, firsts, strict=True)]
    r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    return r, r + 1


def score(head: Head, dense: Array, targets: Array, nll: Nll,
          changed: Sequence[Array] = (), agreements: Sequence[Agreement] = ()) -> None:
    """Add the NLL of ``targets`` under the dense model's final states ``dense`` (rows) to
    ``nll``, and for each changed model's states the NLL, KL(dense || changed) and top-1
    agreement, a block of rows at a time (never rows x vocab for the whole batch)."""
    if not len(targets):
        return
    step = max(1, LOGIT_ELEMENTS // head.vocab)
    for start in range(0, len(targets), step):
        t = targets[start:start + step]
        picked = np.arange(len(t))
        ld = log_softmax(head(dense[start:start + step]))
        nll.total -= float(ld[picked, t].sum(dtype=np.float64))
        nll.tokens += len(t)
        if not changed:
            continue
        pd, top = np.exp(ld), ld.argmax(axis=1)
        for states, agreement in zip(changed, agreements, strict=True):
            ls = log_softmax(head(states[start:start + step]))
            agreement.nll.total -= float(ls[picked, t].sum(dtype=np.float64))
            agreement.nll.tokens += len(t)
            agreement.same_top1 += int(np.count_nonzero(ls.argmax(axis=1) == top))
            agreement.kl += dot_sum(pd, np.subtract(ld, ls, out=ls))


# ---------------------------------------------------------------------------------------------
# Encoders: how close the changed hidden states are.


@dataclass
class Cosines:
    """Mean cosine similarity of dense and changed final hidden states, per token and of the
    mean-pooled sentence embedding of each sequence (line)."""

    token: float = 0.0
    tokens: int = 0
    sentence: float = 0.0
    sentences: int = 0
    worst_sentence: float = 1.0

    def add(self, other: Cosines) -> None:
        self.token += other.token
        self.tokens += other.tokens
        self.sentence += other.sentence
        self.sentences += other.sentences
        self.worst_sentence = min(self.worst_sentence, other.worst_sentence)

    @property
    def token_mean(self) -> float:
        return self.token / self.tokens if self.tokens else math.nan

    @property
    def sentence_mean(self) -> float:
        return self.sentence / self.sentences if self.sentences else math.nan


def _cosine(a: Array, b: Array) -> Array:
    a, b = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    return np.einsum("...i,...i->...", a, b) / np.where(norms == 0, 1.0, norms)


def add_cosines(dense: Array, changed: Array, bounds: Sequence[tuple[int, int]],
                into: Cosines) -> None:
    into.token += float(_cosine(dense, changed).sum())
    into.tokens += dense.shape[0]
    for s, e in bounds:
        c = float(_cosine(dense[s:e].mean(axis=0), changed[s:e].mean(axis=0)))
        into.sentence += c
        into.sentences += 1
        into.worst_sentence = min(into.worst_sentence, c)
