"""What every model family of the forward is (:mod:`ffncli.compute.forward.families`): its
embeddings, layers and final norm, read from its checkpoint one layer at a time, with the
helpers the families share (tensors read and checked, the LM head, the weights' fingerprint)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ffncli.base.validate import Keys
from ffncli.compute.build import build_model
from ffncli.compute.engine import Engine
from ffncli.compute.forward.layer import Block, Head
from ffncli.compute.forward.ops import Array, Scratch
from ffncli.compute.weights import refuse_nonfinite
from ffncli.errors import InputError, SpecError, WeightsError
from ffncli.formats.tensors import Tensors
from ffncli.specs.spec import ModelSpec


class Transformer:
    """A model's embeddings, layers and final norm, read from its checkpoint one layer at a
    time. ``embed`` and ``final`` work on packed rows; ``layer(i)`` reads layer i's weights."""

    family = ""
    post_norm = False
    has_head = False  # a decoder's LM head (see head())

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Keys,
                 dtype: np.dtype, names: Mapping[str, str],
                 quirks: frozenset[str] = frozenset()) -> None:
        self.spec, self.weights, self.tensors, self.settings = spec, weights, tensors, settings
        self.names, self.quirks = names, quirks
        self.dtype = np.dtype(dtype)
        self.d_model = spec.d_model
        self.n_layers = spec.layers.encoder or spec.layers.decoder
        held = tensors.layer_count()
        if self.n_layers > held:  # before --layer all lists them, or a walk is sized by them
            raise WeightsError(f"{settings.source}: {self.n_layers:,} layers, but the weights "
                               f"({tensors.path}) hold {tensors.layers_present()}")
        self.scratch = Scratch(self.dtype)
        att = spec.attention
        if att is None:
            raise SpecError(f"{spec.name}: the spec has no attention; the forward needs one")
        self.heads = att.heads
        self.kv_heads = att.kv_heads or att.heads
        self.head_dim = att.head_dim or spec.d_model // att.heads
        self.vocab = 0
        self.max_positions: int | None = None

    def close(self) -> None:
        """Close the checkpoint's files (the layers built so far stay usable)."""
        self.tensors.close()

    def __enter__(self) -> Transformer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- shared helpers -----------------------------------------------------------------------

    def _get(self, stem: str, shape: tuple[int, ...] | None, required: bool = True
             ) -> Array | None:
        return self.tensors.get(stem, shape, self.dtype, required)

    def _need(self, stem: str, shape: tuple[int, ...] | None, finite: bool = False) -> Array:
        """The tensor ``stem`` of ``shape``; with ``finite``, refused if it holds NaN or
        infinity, named as the file names it (as a layer's FFN weights are)."""
        array = self.tensors.need(stem, shape, self.dtype)
        if finite:
            refuse_nonfinite(str(self.tensors.path), f"tensor '{self.tensors.find(stem)}'",
                             array)
        return array

    def _table_rows(self, stem: str) -> int:
        name = self.tensors.find(stem)
        if name is None:
            raise WeightsError(f"{self.tensors.path}: missing tensor '{stem}'")
        shape = self.tensors.shape(name)
        if len(shape) != 2 or shape[1] != self._table_width() or shape[0] < 1:
            raise WeightsError(f"{self.tensors.path}: tensor '{name}': expected shape (rows >= "
                               f"1, {self._table_width()}), got {shape}")
        return shape[0]

    def _position_table(self, stem: str) -> Array:
        """A learned position table: (positions >= 1, width)."""
        table = self._need(stem, None)
        width = self._table_width()
        if table.ndim != 2 or table.shape[1] != width or table.shape[0] < 1:
            raise WeightsError(f"{self.tensors.path}: tensor '{stem}': expected shape "
                               f"(positions >= 1, {width}), got {table.shape}")
        return table

    def _table_width(self) -> int:
        return self.d_model

    def _check_ids(self, ids: Array, positions: Array) -> None:
        if ids.ndim != 1 or positions.shape != ids.shape:
            raise ValueError(f"expected ids and positions of one shape (tokens,), got "
                             f"{ids.shape} and {positions.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab):
            bad = ids[(ids < 0) | (ids >= self.vocab)][0]
            raise InputError(f"token id {bad} is outside the vocabulary of {self.vocab:,} "
                             f"(ids 0 to {self.vocab - 1:,})")
        if self.max_positions is not None and positions.size \
                and positions.max() >= self.max_positions:
            raise InputError(f"a sequence of {int(positions.max()) + 1:,} tokens is longer than "
                             f"the model's {self.max_positions:,} positions")

    def _engine(self, i: int) -> Engine:
        """Layer i's FFN, read through the open checkpoint."""
        return build_model(self.spec, self.weights, i, self.dtype, tensors=self.tensors).engine

    def check_layer(self, i: int) -> None:
        if not 0 <= i < self.n_layers:
            raise InputError(f"layer {i}: expected 0 to {self.n_layers - 1} ({self.spec.name} "
                             f"has {self.n_layers} layers)")

    def _linear(self, stem: str, n_out: int, n_in: int, bias: bool) -> tuple[Array, Array | None]:
        """An nn.Linear's weight (out, in) and its bias (required when ``bias``)."""
        w = self._need(stem + ".weight", (n_out, n_in))
        b = self._get(stem + ".bias", (n_out,), required=bias) if bias else None
        return w, b

    def _fused(self, parts: list[tuple[Array, Array | None]]) -> tuple[Array, Array | None]:
        """Q, K and V of nn.Linear layout fused into one [in, out] matrix and its bias."""
        w = np.concatenate([p[0] for p in parts], axis=0).T  # (out, in) -> (in, out) view
        biases = [p[1] for p in parts]
        if all(b is None for b in biases):
            return w, None
        return w, np.concatenate([b if b is not None else np.zeros(p[0].shape[0], self.dtype)
                                  for p, b in zip(parts, biases, strict=True)])

    # -- the interface ------------------------------------------------------------------------

    def embed(self, ids: Array, positions: Array) -> Array:
        raise NotImplementedError

    def layer(self, i: int) -> Block:
        raise NotImplementedError

    def final(self, h: Array) -> Array:
        return h

    def final_tensors(self) -> tuple[str, ...]:
        """The tensors ``final`` reads (the final norm's): none for an encoder."""
        return ()

    def final_gain(self) -> Array | None:
        """The gain the final norm multiplies by, as it multiplies (Gemma's 1 + weight): none
        for an encoder."""
        return None

    def check_final(self) -> None:
        """Refuse NaN or infinity in the tensors ``final`` reads, naming the first bad one and
        its first bad index; a walk calls it before it first computes the final state."""
        for stem in self.final_tensors():
            self._need(stem, None, finite=True)

    def head(self) -> Head | None:
        """The LM head a decoder predicts the next token with, its table read now and refused
        if it holds NaN or infinity (the head's own or the tied embeddings, named as the file
        names them); None for an encoder."""
        stem = self.head_tensor()
        if stem is None:
            return None
        table = self._need(stem, (self.vocab, self._table_width()), finite=True)
        cap = self.settings.data.get("final_logit_softcapping")
        return Head(table, None if cap is None else self.settings.number(
            "final_logit_softcapping"))

    def head_tensor(self) -> str | None:
        """The tensor the LM head is, checked in the header (there, of shape (vocab, width))
        but not read: the head's own ``lm_head`` (``output.weight`` in a GGUF file), or the
        input embeddings when tied (config.json's tie_word_embeddings; when it says nothing,
        when the checkpoint holds no head of its own, as save_pretrained leaves a tied one
        out). None for an encoder."""
        choice = self._head_choice()
        if choice is None:
            return None
        embed, tied = choice
        name = self.names["head"]
        own = self.tensors.find(name) is not None
        if tied is False and not own:
            raise WeightsError(f"{self.tensors.path}: no LM head: tensor '{name}' is missing "
                               f"and {self.settings.source} says tie_word_embeddings false")
        stem = embed if tied or not own else name
        self.tensors.check(stem, (self.vocab, self._table_width()))
        return stem

    def _head_choice(self) -> tuple[str, bool | None] | None:
        """(the input embeddings' tensor, whether the head is tied to them: None where the
        checkpoint decides); None for an encoder."""
        return None

    def fingerprint(self) -> str:
        """A short hash of the weights (the first rows of the token embeddings, as float32):
        what tells two checkpoints of one shape apart, read in a moment."""
        import hashlib

        stem = self.names.get("embed") or self.names["word"]
        rows = self.tensors.rows(stem, np.arange(min(self.vocab, 16)), np.dtype(np.float32))
        return hashlib.sha256(np.ascontiguousarray(rows).tobytes()).hexdigest()[:16]

    def _tied(self) -> bool | None:
        """config.json's tie_word_embeddings, None where it says nothing."""
        if self.settings.data.get("tie_word_embeddings") is None:
            return None
        return self.settings.flag("tie_word_embeddings", False)
