"""Walking the layers over many sequences: layer-major, batch by batch (whole sequences packed
together, BATCH_TOKENS at most), the hidden states kept in a temporary spill file between
layers, read and written with pread/pwrite through one batch buffer. Resident memory is one
layer's weights plus one batch, whatever the text's length."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import IO

import numpy as np

from ffncli.base.validate import whole
from ffncli.compute.forward.layer import Block, Bounds, Ffn
from ffncli.compute.forward.ops import Array
from ffncli.compute.forward.transformer import Transformer
from ffncli.errors import InputError, OutputError, WeightsError

# ---------------------------------------------------------------------------------------------
# Walking the layers over many sequences.

# Tokens of one batch of the walk: whole sequences packed together. Every walk (capture, the
# sweep, each shard of a cluster job) batches alike, so that its bits are those of one walk.
BATCH_TOKENS = 4096

Visit = Callable[[int, Block, np.ndarray], None]


def batches(lengths: Sequence[int], batch_tokens: int | None = None) -> list[tuple[int, int]]:
    """Consecutive sequences grouped into batches of at most ``batch_tokens`` (default
    :data:`BATCH_TOKENS`) tokens (a longer sequence is a batch of its own): (first, end)
    sequence indices."""
    batch_tokens = BATCH_TOKENS if batch_tokens is None else batch_tokens
    batches, first, tokens = [], 0, 0
    for i, n in enumerate(lengths):
        if tokens and tokens + n > batch_tokens:
            batches.append((first, i))
            first, tokens = i, 0
        tokens += n
    if tokens:
        batches.append((first, len(lengths)))
    return batches


def _spill_error(exc: OSError) -> OutputError:
    # not tempfile.gettempdir(): when no folder can take a file, asking again raises again
    folder = tempfile.tempdir or os.environ.get("TMPDIR") or "the temporary folder"
    return OutputError(f"cannot keep the forward's spill file in {folder}: "
                       f"{exc.strerror or exc} (set TMPDIR to a folder with room)")


@dataclass(frozen=True)
class Packing:
    """Sequences packed in the walk's batches: where each sequence's rows start among all the
    tokens (``starts``, one more for the end) and the batches, (first, end) sequence indices."""

    starts: np.ndarray
    batches: list[tuple[int, int]]

    @staticmethod
    def of(lengths: Sequence[int], batch_tokens: int | None = None) -> Packing:
        if batch_tokens is not None:
            whole("batch_tokens", batch_tokens)
        starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return Packing(starts, batches(lengths, batch_tokens))

    @property
    def tokens(self) -> int:
        return int(self.starts[-1])

    def rows(self, a: int, b: int) -> int:
        """The tokens of sequences a..b-1."""
        return int(self.starts[b] - self.starts[a])

    def bounds(self, a: int, b: int) -> list[tuple[int, int]]:
        """Each sequence's rows in the batch a..b-1."""
        return [(int(self.starts[j] - self.starts[a]), int(self.starts[j + 1] - self.starts[a]))
                for j in range(a, b)]

    @property
    def widest(self) -> int:
        """The rows of the largest batch."""
        return max((self.rows(a, b) for a, b in self.batches), default=0)


class Spill:
    """The hidden states of every token of ``variants`` versions of the model between layers,
    in one temporary file (reserved when opened, so a full disk is an error at once; removed
    when closed): variant v's rows of sequence a at byte ``(v tokens + starts[a]) d item``,
    read and written in place with pread/pwrite (no intermediate bytes object)."""

    def __init__(self, packing: Packing, variants: int, d: int, dtype: np.dtype) -> None:
        self.packing, self.variants = packing, variants
        self._row_bytes = d * dtype.itemsize
        self._nbytes = variants * packing.tokens * self._row_bytes
        self._file: IO[bytes] | None = None

    def __enter__(self) -> Spill:
        try:
            self._file = tempfile.TemporaryFile(prefix="ffncli-spill-")
            if hasattr(os, "posix_fallocate") and self._nbytes:
                os.posix_fallocate(self._file.fileno(), 0, self._nbytes)
        except OSError as exc:
            self.close()
            raise _spill_error(exc) from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _where(self, v: int, a: int) -> int:
        return (v * self.packing.tokens + int(self.packing.starts[a])) * self._row_bytes

    def _fd(self) -> int:
        assert self._file is not None, "the spill file is not open"
        return self._file.fileno()

    def write(self, v: int, a: int, rows: Array) -> None:
        """Variant v's ``rows`` from sequence a on."""
        view, fd, offset = np.ascontiguousarray(rows).data.cast("B"), self._fd(), self._where(v, a)
        done = 0
        try:
            while done < len(view):
                done += os.pwrite(fd, view[done:], offset + done)
        except OSError as exc:
            raise _spill_error(exc) from None

    def read(self, v: int, a: int, into: Array) -> Array:
        """Fill ``into`` (contiguous) with variant v's rows from sequence a on, in place."""
        view, fd, offset = into.data.cast("B"), self._fd(), self._where(v, a)
        done = 0
        try:
            while done < len(view):
                got = os.preadv(fd, [view[done:]], offset + done)
                if not got:
                    raise OutputError("the forward's spill file was cut short while in use")
                done += got
        except OSError as exc:
            raise _spill_error(exc) from None
        return into

    def spread(self, buffer: Array) -> None:
        """Variant 0's states to every other variant, batch by batch through ``buffer``."""
        if self.variants < 2:
            return
        for a, b in self.packing.batches:
            h = self.read(0, a, buffer[:self.packing.rows(a, b)])
            for v in range(1, self.variants):
                self.write(v, a, h)


def _checked_ids(model: Transformer, n: int, s: np.ndarray) -> np.ndarray:
    """Sequence ``n`` (1-based): token ids in the vocabulary, no longer than the positions."""
    if s.ndim != 1 or s.size == 0 or s.dtype.kind not in "iu":
        raise InputError(f"sequence {n}: expected a non-empty 1-D array of token ids, got "
                         f"shape {s.shape} of {s.dtype}")
    if s.min() < 0 or s.max() >= model.vocab:
        bad = s[(s < 0) | (s >= model.vocab)][0]
        raise InputError(f"sequence {n}: token id {bad} is outside the vocabulary of "
                         f"{model.vocab:,} (ids 0 to {model.vocab - 1:,})")
    if model.max_positions is not None and s.size > model.max_positions:
        raise InputError(f"sequence {n}: {s.size:,} tokens, more than the model's "
                         f"{model.max_positions:,} positions")
    return s


def _check_finite(model: Transformer, what: str, x: np.ndarray, bounds: Bounds,
                  first: int) -> None:
    """Refuse NaN or infinity in ``x`` (a batch's rows; its sequences are numbered from
    ``first`` + 1): the statistics would count them silently and a capture would keep them."""
    if np.isfinite(x).all():
        return
    row = int(np.argwhere(~np.isfinite(x))[0][0])
    n = first + 1 + next(j for j, (s, e) in enumerate(bounds) if s <= row < e)
    raise WeightsError(f"{model.weights}: {what} of sequence {n} holds NaN or infinity: the "
                       "checkpoint's weights hold some, or its forward overflows")


VariantVisit = Callable[[int, int, Block, np.ndarray], None]
VariantFfn = Callable[[int, int, Block], Ffn | None]
Final = Callable[[Bounds, int, list[np.ndarray]], None]


class _Walker:
    """What every walk does around its loop over the layers: the sequences checked and packed
    in batches, their embeddings written to the spill file, one pass of a layer over every
    batch, the final hidden states; ``progress(done)`` counted as the passes go."""

    def __init__(self, model: Transformer, sequences: Sequence[np.ndarray], variants: int,
                 batch_tokens: int | None, progress: Callable[[int], None] | None) -> None:
        self.model, self.progress, self.done = model, progress, 0
        self.seqs = [_checked_ids(model, n + 1, np.asarray(s)) for n, s in enumerate(sequences)]
        self.packing = p = Packing.of([s.size for s in self.seqs], batch_tokens)
        self.buffer = np.empty((p.widest, model.d_model), dtype=model.dtype)
        self.spill = Spill(p, variants, model.d_model, model.dtype)

    def __enter__(self) -> _Walker:
        self.spill.__enter__()
        try:
            for a, b in self.packing.batches:
                ids = np.concatenate(self.seqs[a:b]).astype(np.int64, copy=False)
                positions = np.concatenate([np.arange(s.size) for s in self.seqs[a:b]])
                self.spill.write(0, a, self.model.embed(ids, positions))
        except BaseException:
            self.spill.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.spill.close()

    def layer(self, i: int, block: Block, v: int, ffn: Ffn | None, visit: VariantVisit | None,
              counts: int = 1, after: VariantVisit | None = None) -> None:
        """Variant v's pass of layer i over every batch, its FFN ``ffn`` (None: the layer's
        own); ``visit(i, v, block, ffn_input)`` sees each batch's FFN input and ``after(i, v,
        block, output)`` its output (the residual stream after the layer, which it may change
        in place before it is kept); the progress counts each row ``counts`` times (a pass
        that stands for several variants')."""
        p = self.packing
        for a, b in p.batches:
            h = self.spill.read(v, a, self.buffer[:p.rows(a, b)])
            bounds = p.bounds(a, b)
            ffn_input, out = block(h, bounds, ffn)
            if visit is not None:
                _check_finite(self.model, f"layer {i}'s FFN input", ffn_input, bounds, a)
                visit(i, v, block, ffn_input)
            if after is not None:
                after(i, v, block, out)
            self.spill.write(v, a, out)
            self.done += h.shape[0] * counts
            if self.progress is not None:
                self.progress(self.done)

    def final(self, final: Final) -> None:
        """``final(bounds, first, states)`` for each batch: every variant's final hidden
        state (``model.final``) of the batch's rows, once the layers' buffers are let go (the
        final phase may read the LM head)."""
        model, p = self.model, self.packing
        model.scratch.release()
        model.check_final()
        for a, b in p.batches:
            bounds, states = p.bounds(a, b), []
            for v in range(self.spill.variants):
                h = self.spill.read(v, a, np.empty((p.rows(a, b), model.d_model), model.dtype))
                state = model.final(h)
                _check_finite(model, "the final hidden state", state, bounds, a)
                states.append(state)
            final(bounds, a, states)


def _last_layer(model: Transformer, layers: Collection[int], final: object | None
                ) -> int | None:
    """The last layer a walk computes (every layer with ``final``), the layers checked; None
    when there is nothing to compute."""
    for i in layers:
        model.check_layer(i)
    if final is not None:
        return model.n_layers - 1
    return max(layers, default=None)


def walk(model: Transformer, sequences: Sequence[np.ndarray], layers: Collection[int],
         visit: Visit, *, batch_tokens: int | None = None,
         progress: Callable[[int], None] | None = None,
         final: Callable[[np.ndarray], None] | None = None) -> None:
    """Run the sequences through layers 0..max(layers), layer-major, and call ``visit(i,
    block, ffn_input)`` for every selected layer and batch (batches in text order; the
    ffn_input rows are the batch's tokens in order). Layers past max(layers) are not computed.

    The hidden states of all tokens live in a temporary spill file between layers, read and
    written with pread/pwrite through one batch buffer: memory holds one layer's weights and
    one batch. ``progress(done)`` counts tokens through layers (of tokens x (max(layers) + 1)).
    With ``final``, every layer is computed and ``final(model.final(h))`` is called for each
    batch of the last layer's output."""
    last = _last_layer(model, layers, final)
    if last is None:
        return
    chosen = set(layers)

    def seen(i: int, v: int, block: Block, x: np.ndarray) -> None:
        visit(i, block, x)

    with _Walker(model, sequences, 1, batch_tokens, progress) as w:
        for i in range(last + 1):
            w.layer(i, model.layer(i), 0, None, seen if i in chosen else None)
        if final is not None:
            w.final(lambda bounds, first, states: final(states[0]))


def walk_variants(model: Transformer, sequences: Sequence[np.ndarray], variants: int,
                  visit: VariantVisit | None = None, *, layers: Collection[int] = (),
                  ffn: VariantFfn | None = None, final: Final | None = None,
                  batch_tokens: int | None = None, alike: int = 0,
                  progress: Callable[[int], None] | None = None,
                  after: VariantVisit | None = None) -> None:
    """Run ``variants`` versions of the model over the same sequences in one walk, each layer's
    weights read once for all of them: variant ``v``'s FFN in layer ``i`` is ``ffn(i, v,
    block)`` (None: the layer's own engine). Layer-major; within a layer, variant by variant in
    order, each over every batch, so variant 0's pass of a layer (the dense model, whose
    statistics may calibrate the others) is over before variant 1's begins.

    ``visit(i, v, block, ffn_input)`` sees each pass's FFN input, batch by batch, in the layers
    of ``layers`` (with ``final``, the model's every layer is computed; without, layers up to
    max(layers)). With ``final``, ``final(bounds, first, states)`` is called for each batch
    after the last layer: ``states[v]`` is variant v's final hidden state (``model.final``) of
    the batch's rows, whose sequences start at index ``first`` and lie at ``bounds``.
    ``after(i, v, block, output)`` sees each pass's output of layer i (every computed layer),
    batch by batch, and may change it in place before the next layer reads it.

    The hidden states of every variant live in one temporary spill file between layers: memory
    holds one layer's weights and one batch per variant. ``progress(done)`` counts tokens
    through layers and variants.

    Layers below ``alike`` are the same in every variant (the caller's word: ``ffn`` None for
    every variant but 0 there): they are computed once, for variant 0 (whom alone ``visit``
    sees there), whose hidden states the other variants then start from."""
    last = _last_layer(model, layers, final)
    if last is None:
        return
    chosen = set(layers)
    shared = min(max(alike, 0), last + 1)  # the first layer each variant computes
    with _Walker(model, sequences, variants, batch_tokens, progress) as w:
        for i in range(last + 1):
            if i == shared:
                w.spill.spread(w.buffer)  # the layers below: variant 0's, for every variant
            block = model.layer(i)
            for v in range(variants if i >= shared else 1):
                w.layer(i, block, v, ffn(i, v, block) if ffn is not None else None,
                        visit if i in chosen else None, 1 if i >= shared else variants, after)
            del block  # its weights go before the next layer's are read
        if shared > last:
            w.spill.spread(w.buffer)
        if final is not None:
            w.final(final)


def hidden_states(model: Transformer, sequences: Sequence[np.ndarray],
                  layers: Collection[int], *, batch_tokens: int | None = None
                  ) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """Every selected layer's FFN input and the final hidden state (after the final norm),
    all tokens of all sequences in order: small inputs, in memory (tests, notebooks)."""
    found: dict[int, list[np.ndarray]] = {i: [] for i in layers}
    finals: list[np.ndarray] = []
    walk(model, sequences, layers, lambda i, block, x: found[i].append(x),
         batch_tokens=batch_tokens, final=finals.append)
    return ({i: np.concatenate(parts) for i, parts in found.items()}, np.concatenate(finals))
