"""Walking the layers over many sequences: layer-major, batch by batch (whole sequences packed
together, BATCH_TOKENS at most), the hidden states kept in a temporary spill file between
layers, read and written with pread/pwrite through one batch buffer. Resident memory is one
layer's weights plus one batch, whatever the text's length."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence

import numpy as np

from ffncli.base.validate import whole
from ffncli.compute.forward.families import Transformer
from ffncli.compute.forward.layer import Block, Bounds, Ffn
from ffncli.compute.forward.ops import Array
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


def _batches_of(lengths: Sequence[int], batch_tokens: int | None) -> list[tuple[int, int]]:
    if batch_tokens is not None:
        whole("batch_tokens", batch_tokens)
    return batches(lengths, batch_tokens)


def _spill_error(exc: OSError) -> OutputError:
    # not tempfile.gettempdir(): when no folder can take a file, asking again raises again
    folder = tempfile.tempdir or os.environ.get("TMPDIR") or "the temporary folder"
    return OutputError(f"cannot keep the forward's spill file in {folder}: "
                       f"{exc.strerror or exc} (set TMPDIR to a folder with room)")


@contextlib.contextmanager
def _spill(nbytes: int) -> Iterator[int]:
    """A temporary file of ``nbytes`` (reserved now, so a full disk is an error at once),
    removed when done; its descriptor."""
    try:
        spill = tempfile.TemporaryFile(prefix="ffncli-spill-")
        if hasattr(os, "posix_fallocate") and nbytes:
            os.posix_fallocate(spill.fileno(), 0, nbytes)
    except OSError as exc:
        raise _spill_error(exc) from None
    with spill:
        yield spill.fileno()


def _pwrite(fd: int, a: Array, offset: int) -> None:
    view = np.ascontiguousarray(a).data.cast("B")
    done = 0
    try:
        while done < len(view):
            done += os.pwrite(fd, view[done:], offset + done)
    except OSError as exc:
        raise _spill_error(exc) from None


def _pread(fd: int, a: Array, offset: int) -> None:
    """Fill ``a`` from the spill file, in place (no intermediate bytes object)."""
    view = a.data.cast("B")
    done = 0
    try:
        while done < len(view):
            got = os.preadv(fd, [view[done:]], offset + done)
            if not got:
                raise OutputError("the forward's spill file was cut short while in use")
            done += got
    except OSError as exc:
        raise _spill_error(exc) from None


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
    walk_variants(model, sequences, 1, lambda i, v, block, x: visit(i, block, x),
                  layers=layers, batch_tokens=batch_tokens, progress=progress,
                  final=None if final is None else lambda bounds, first, states: final(states[0]))


VariantVisit = Callable[[int, int, Block, np.ndarray], None]
VariantFfn = Callable[[int, int, Block], Ffn | None]
Final = Callable[[Bounds, int, list[np.ndarray]], None]


def walk_variants(model: Transformer, sequences: Sequence[np.ndarray], variants: int,
                  visit: VariantVisit | None = None, *, layers: Collection[int] = (),
                  ffn: VariantFfn | None = None, final: Final | None = None,
                  batch_tokens: int | None = None, alike: int = 0,
                  progress: Callable[[int], None] | None = None) -> None:
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

    The hidden states of every variant live in one temporary spill file between layers: memory
    holds one layer's weights and one batch per variant. ``progress(done)`` counts tokens
    through layers and variants.

    Layers below ``alike`` are the same in every variant (the caller's word: ``ffn`` None for
    every variant but 0 there): they are computed once, for variant 0 (whom alone ``visit``
    sees there), and so is layer ``alike``'s attention: the other variants start from
    variant 0's residual stream after it, and differ from its FFN on."""
    chosen = set(layers)
    for i in chosen:
        model.check_layer(i)
    if not chosen and final is None:
        return
    last = model.n_layers - 1 if final is not None else max(chosen)
    seqs = [_checked_ids(model, n + 1, np.asarray(s)) for n, s in enumerate(sequences)]
    lengths = [s.size for s in seqs]
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    batches = _batches_of(lengths, batch_tokens)
    d, item, total = model.d_model, model.dtype.itemsize, int(starts[-1])
    rows = max(int(starts[b] - starts[a]) for a, b in batches) if batches else 0
    buffer = np.empty((rows, d), dtype=model.dtype)

    def where(v: int, a: int) -> int:  # byte offset of variant v's rows of sequence a
        return (v * total + int(starts[a])) * d * item

    shared = min(max(alike, 0), last + 1)  # the first layer each variant computes

    def spread() -> None:  # variant 0's final states to the others, when no layer differed
        for a, b in batches:
            h = buffer[:int(starts[b] - starts[a])]
            _pread(fd, h, where(0, a))
            for v in range(1, variants):
                _pwrite(fd, h, where(v, a))

    def bounds_of(a: int, b: int) -> list[tuple[int, int]]:
        return [(int(starts[j] - starts[a]), int(starts[j + 1] - starts[a]))
                for j in range(a, b)]

    done = 0
    with _spill(variants * total * d * item) as fd:
        for a, b in batches:
            ids = np.concatenate(seqs[a:b]).astype(np.int64, copy=False)
            positions = np.concatenate([np.arange(n) for n in lengths[a:b]])
            _pwrite(fd, model.embed(ids, positions), where(0, a))
        for i in range(last + 1):
            block = model.layer(i)
            for v in range(variants if i >= shared else 1):
                layer_ffn = ffn(i, v, block) if ffn is not None else None
                for a, b in batches:
                    h = buffer[:int(starts[b] - starts[a])]
                    _pread(fd, h, where(v, a))
                    bounds = bounds_of(a, b)
                    if i == shared and variants > 1:  # the first layer that differs: its
                        # attention is variant 0's, whose stream the others read back as h
                        r = h
                        if v == 0:
                            r = block.attend(h, bounds)
                            for u in range(1, variants):
                                _pwrite(fd, r, where(u, a))
                        ffn_input = block.ffn_input(r)
                        out = block.join(ffn_input, r, layer_ffn)
                    else:
                        ffn_input, out = block(h, bounds, layer_ffn)
                    if i in chosen and visit is not None:
                        _check_finite(model, f"layer {i}'s FFN input", ffn_input, bounds, a)
                        visit(i, v, block, ffn_input)
                    _pwrite(fd, out, where(v, a))
                    done += h.shape[0] * (1 if i >= shared else variants)
                    if progress is not None:
                        progress(done)
            del block
        if shared == last + 1 and variants > 1:
            spread()
        if final is None:
            return
        model.scratch.release()  # the layers' buffers: the final phase may read the LM head
        model.check_final()
        for a, b in batches:
            bounds, states = bounds_of(a, b), []
            for v in range(variants):
                h = np.empty((int(starts[b] - starts[a]), d), dtype=model.dtype)  # kept
                _pread(fd, h, where(v, a))
                state = model.final(h)
                _check_finite(model, "the final hidden state", state, bounds, a)
                states.append(state)
            final(bounds, a, states)


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
