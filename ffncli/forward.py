"""The whole model in NumPy: token ids in, every layer's FFN input out.

The FFN of each layer is the ``Engine`` that ``run`` builds (``runner.build_model``); this
module adds what surrounds it: the embeddings, the norms and the attention, read from the
same checkpoints (a ``.safetensors`` file, a sharded index, a model folder, a GGUF file).

Rows are packed: a batch is whole sequences one after another, no padding. Projections, norms
and the FFN work on all of a batch's rows at once; attention works on each sequence's rows
(``bounds``), all heads in one batched product, as picoGPT writes it::

    attention(q, k, v) = softmax(q k^T / sqrt(d_head) + mask) v

So a sequence gives the same states alone or in any batch. ``walk`` goes layer by layer over
all sequences, keeping the hidden states in a spill file between layers: resident memory is
one layer's weights plus one batch, whatever the text's length.

Families: BERT (bert, roberta, distilbert, electra), gpt2, and the LLaMA family (llama,
mistral, mixtral, qwen2, qwen3, gemma; GGUF files of the llama architecture).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ffncli.checkpoint import Checkpoint, open_checkpoint
from ffncli.engine import Engine
from ffncli.errors import ConfigError, InputError, OutputError, SpecError, WeightsError
from ffncli.spec import ModelSpec
from ffncli.validate import brief, flag, number, whole

if TYPE_CHECKING:
    from ffncli.gguf import GgufHeader

Array = np.ndarray
Bounds = Sequence[tuple[int, int]]
SCORE_ELEMENTS = 1 << 22  # attention scores held at once (16 MB in float32): longer
# sequences are done a block of queries at a time

# ---------------------------------------------------------------------------------------------
# The math, one small function per equation. ``out`` may be ``x`` (in place); ``tmp`` is a
# scratch array shaped like ``x``.


def layer_norm(x: Array, w: Array, b: Array | None, eps: float, out: Array,
               tmp: Array) -> Array:
    """(x - mean) / sqrt(var + eps) * w + b over the last axis."""
    mean = x.mean(axis=-1, keepdims=True)  # (n, d) -> (n, 1)
    np.subtract(x, mean, out=out)
    np.multiply(out, out, out=tmp)
    std = tmp.mean(axis=-1, keepdims=True)
    np.add(std, eps, out=std)
    np.sqrt(std, out=std)
    np.divide(out, std, out=out)
    np.multiply(out, w, out=out)
    if b is not None:
        np.add(out, b, out=out)
    return out


def rms_norm(x: Array, w: Array, eps: float, out: Array, tmp: Array) -> Array:
    """x / sqrt(mean(x^2) + eps) * w over the last axis (Gemma's w is 1 + its weight)."""
    np.multiply(x, x, out=tmp)
    rms = tmp.mean(axis=-1, keepdims=True)  # (n, d) -> (n, 1)
    np.add(rms, eps, out=rms)
    np.sqrt(rms, out=rms)
    np.divide(x, rms, out=out)
    np.multiply(out, w, out=out)
    return out


def softmax_(s: Array) -> Array:
    """Softmax over the last axis, in place: exp(s - max) / sum."""
    np.subtract(s, s.max(axis=-1, keepdims=True), out=s)
    np.exp(s, out=s)
    np.divide(s, s.sum(axis=-1, keepdims=True), out=s)
    return s


@functools.lru_cache(maxsize=64)
def causal_mask(offset: int, rows: int, cols: int, window: int | None) -> Array | None:
    """The additive mask of a block of queries (positions offset..offset+rows, counted from
    the first key) against cols keys: -inf where the key is later than the query, or (with a
    sliding window) ``window`` or more positions earlier; None when nothing is masked."""
    i = np.arange(offset, offset + rows)[:, None]
    j = np.arange(cols)[None, :]
    blocked = j > i
    if window is not None:
        blocked |= i - j >= window
    if not blocked.any():
        return None
    mask = np.where(blocked, np.float32(-np.inf), np.float32(0))
    mask.flags.writeable = False
    return mask


class Rope:
    """Rotary positions (the rotate-half form of HF transformers): the pair (x_i, x_{i+d/2})
    of each head is turned by the angle position * inv_freq_i."""

    def __init__(self, inv_freq: Array) -> None:
        self.inv_freq = inv_freq.astype(np.float32)  # (d_head / 2,)
        self._cos = self._sin = np.empty((0, inv_freq.size), dtype=np.float32)

    def tables(self, n: int) -> tuple[Array, Array]:
        """cos and sin of positions 0..n-1, (n, d_head / 2), computed once as float32 does."""
        if self._cos.shape[0] < n:
            angles = np.arange(max(n, 2 * self._cos.shape[0]), dtype=np.float32)[:, None] \
                * self.inv_freq[None, :]
            self._cos, self._sin = np.cos(angles), np.sin(angles)
        return self._cos[:n], self._sin[:n]

    def __call__(self, x: Array, positions: Array, scratch: Scratch) -> None:
        """Rotate x (tokens, heads, d_head) in place: x1' = x1 cos - x2 sin, x2' = x2 cos +
        x1 sin, where x1, x2 are the halves of each head."""
        if positions.size == 0:
            return
        cos_t, sin_t = self.tables(int(positions.max()) + 1)
        cos, sin = cos_t[positions][:, None, :], sin_t[positions][:, None, :]  # (n, 1, half)
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        a, b = scratch("rope_a", x1.shape), scratch("rope_b", x1.shape)
        np.multiply(x2, sin, out=a)
        np.multiply(x1, sin, out=b)
        np.multiply(x1, cos, out=x1)
        np.subtract(x1, a, out=x1)
        np.multiply(x2, cos, out=x2)
        np.add(x2, b, out=x2)


def rope_frequencies(settings: Settings, head_dim: int, default_theta: float) -> Array:
    """inv_freq_i = theta^(-2i / d_head), scaled as the config's rope_scaling (or transformers
    5's rope_parameters) says: linear divides every frequency by its factor; llama3 divides
    the low frequencies, keeps the high ones and blends the band between."""
    rope = settings.mapping("rope_parameters") or settings.mapping("rope_scaling") or {}
    where = "rope_parameters" if "rope_parameters" in settings.data else "rope_scaling"
    scaled = Settings(rope, f"{settings.source}: key '{where}'")
    theta = scaled.number("rope_theta", settings.number("rope_theta", default_theta))
    kind = scaled.text("rope_type", scaled.text("type", "default"))
    partial = rope.get("partial_rotary_factor", settings.data.get("partial_rotary_factor", 1))
    if partial != 1:
        raise ConfigError(f"{settings.source}: key 'partial_rotary_factor': the forward "
                          f"rotates whole heads, expected 1, got {brief(partial)}")
    # as transformers computes it, in float32
    inv = 1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / np.float32(scaled.number("factor"))
    if kind == "llama3":
        factor, low, high = (scaled.number(k) for k in ("factor", "low_freq_factor",
                                                           "high_freq_factor"))
        old = scaled.number("original_max_position_embeddings",
                            settings.number("max_position_embeddings", 0) or None)
        wavelen = 2 * np.pi / inv.astype(np.float64)
        llama = np.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        blended = (1 - smooth) * llama / factor + smooth * llama
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        return np.where(medium, blended, llama).astype(np.float32)
    raise ConfigError(f"{settings.source}: key '{where}': rope type {brief(kind)} is not "
                      "computed; the forward knows default, linear and llama3")


# ---------------------------------------------------------------------------------------------
# Buffers, settings and tensors.


class Scratch:
    """Named float buffers reused from batch to batch (grown, never shrunk): ``scratch(name,
    shape)`` is a view of the buffer, its contents undefined."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self._buffers: dict[str, Array] = {}

    def __call__(self, name: str, shape: tuple[int, ...]) -> Array:
        n = math.prod(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.size < n:
            buf = np.empty(n, dtype=self.dtype)
            self._buffers[name] = buf
        return buf[:n].reshape(shape)


class Settings:
    """The non-FFN settings of a model (heads' norms' epsilon, rotary theta and scaling,
    sliding window...), read from its config.json or a GGUF file's metadata, each value
    checked with an error naming the file and the key."""

    def __init__(self, data: dict[str, Any], source: str) -> None:
        self.data, self.source = data, source

    def where(self, key: str) -> str:
        return f"{self.source}: key '{key}'"

    def _fail(self, key: str, expected: str) -> ConfigError:
        return ConfigError(f"{self.where(key)}: expected {expected}, got "
                           f"{brief(self.data.get(key))}")

    def number(self, key: str, default: float | None = None) -> float:
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise ConfigError(f"{self.source}: missing key '{key}'")
            return default
        return number(self.where(key), value, positive=True, error=ConfigError)

    def whole(self, key: str, default: int | None = None, minimum: int = 0) -> int | None:
        value = self.data.get(key)
        if value is None:
            return default
        return whole(self.where(key), value, minimum, error=ConfigError)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        return default if value is None else flag(self.where(key), value, ConfigError)

    def text(self, key: str, default: str) -> str:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._fail(key, "a string")
        return value

    def mapping(self, key: str) -> dict[str, Any] | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, dict):
            raise self._fail(key, "an object")
        return value


def read_settings(path: Path) -> Settings:
    """A config.json, read by the reader of ``--config`` (hfconfig.read_config)."""
    from ffncli.hfconfig import read_config

    data = read_config(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {brief(data)}")
    return Settings(data, str(path))


class Tensors:
    """Named weights of a checkpoint, read one at a time, shapes checked before reading."""

    path: Path

    def find(self, name: str) -> str | None:
        raise NotImplementedError

    def shape(self, name: str) -> tuple[int, ...]:
        raise NotImplementedError

    def _read(self, name: str, rows: Array | None) -> Array:
        raise NotImplementedError

    def get(self, stem: str, shape: tuple[int, ...] | None, dtype: np.dtype,
            required: bool = True) -> Array | None:
        """The tensor ``stem`` (under any prefix), checked to have ``shape`` (None: any)."""
        name = self.find(stem)
        if name is None:
            if required and self.find(stem.removesuffix(".weight") + ".qweight") is not None:
                raise WeightsError(f"{self.path}: tensor '{stem}' is quantised (GPTQ or AWQ "
                                   "qweight); the whole-model forward reads float checkpoints "
                                   "and GGUF files")
            if required:
                raise WeightsError(f"{self.path}: missing tensor '{stem}'")
            return None
        if shape is not None and self.shape(name) != shape:
            raise WeightsError(f"{self.path}: tensor '{name}': expected shape {shape}, got "
                               f"{self.shape(name)}")
        return self._read(name, None).astype(dtype, copy=False)

    def need(self, stem: str, shape: tuple[int, ...] | None, dtype: np.dtype) -> Array:
        array = self.get(stem, shape, dtype)
        assert array is not None  # required
        return array

    def rows(self, stem: str, ids: Array, dtype: np.dtype) -> Array:
        """Rows ``ids`` of a 2-D table (the embeddings of a batch), reading only those."""
        name = self.find(stem)
        if name is None:
            raise WeightsError(f"{self.path}: missing tensor '{stem}'")
        unique, inverse = np.unique(ids, return_inverse=True)
        return self._read(name, unique).astype(dtype, copy=False)[inverse.ravel()]


class SafetensorsTensors(Tensors):
    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint, self.path = checkpoint, checkpoint.path

    def find(self, name: str) -> str | None:
        from ffncli.weights import find_tensor

        return find_tensor(self.checkpoint.shard_of, name)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.checkpoint.tensor(name)[1].shape

    def _read(self, name: str, rows: Array | None) -> Array:
        from ffncli.weights import read_tensor

        return read_tensor(*self.checkpoint.tensor(name), rows=rows)


class GgufTensors(Tensors):
    def __init__(self, header: GgufHeader) -> None:
        self.header, self.path = header, header.path

    def find(self, name: str) -> str | None:
        return name if name in self.header.tensors else None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.header.tensors[name].shape)

    def _read(self, name: str, rows: Array | None) -> Array:
        from ffncli.gguf import dequantised

        return dequantised(self.header, self.header.tensors[name], rows)


# ---------------------------------------------------------------------------------------------
# One layer: attention and the FFN around the residual stream.


@dataclass(frozen=True)
class Norm:
    """LayerNorm (weight and bias) or RMSNorm (weight only) over d_model."""

    weight: Array
    bias: Array | None
    eps: float
    rms: bool = False

    def __call__(self, x: Array, out: Array, tmp: Array) -> Array:
        if self.rms:
            return rms_norm(x, self.weight, self.eps, out, tmp)
        return layer_norm(x, self.weight, self.bias, self.eps, out, tmp)


@dataclass(frozen=True)
class Attention:
    """Multi-head (grouped-query when kv_heads < heads) self-attention of one layer. Q, K and
    V come from one product with the fused [in, out] matrix ``wqkv`` (query heads, then key
    heads, then value heads)."""

    wqkv: Array  # (d_model, (heads + 2 kv_heads) d_head)
    bqkv: Array | None
    wo: Array  # (heads d_head, d_model)
    bo: Array | None
    heads: int
    kv_heads: int
    head_dim: int
    scale: float  # 1 / sqrt(d_head), as the family scales
    causal: bool
    window: int | None = None  # sliding window: a query sees this many keys, itself included
    rope: Rope | None = None
    q_norm: Array | None = None  # Qwen3: RMSNorm of each query and key head before rotating
    k_norm: Array | None = None
    qk_eps: float = 1e-6

    def __call__(self, x: Array, bounds: Bounds, positions: Array, scratch: Scratch) -> Array:
        """(tokens, d_model) -> (tokens, d_model), a new array."""
        n, hd, nq, nkv = x.shape[0], self.head_dim, self.heads, self.kv_heads
        group = nq // nkv
        qkv = np.matmul(x, self.wqkv, out=scratch("qkv", (n, (nq + 2 * nkv) * hd)))
        if self.bqkv is not None:
            np.add(qkv, self.bqkv, out=qkv)
        heads = qkv.reshape(n, nq + 2 * nkv, hd)  # (n, heads of q, k, v, d_head)
        for norm, part in ((self.q_norm, heads[:, :nq]), (self.k_norm, heads[:, nq:nq + nkv])):
            if norm is not None:
                rms_norm(part, norm, self.qk_eps, part, scratch("qk_norm", part.shape))
        if self.rope is not None:
            self.rope(heads[:, :nq + nkv], positions, scratch)
        # (kv heads, queries per kv head, n, d_head): views of the packed rows
        q = qkv[:, :nq * hd].reshape(n, nkv, group, hd).transpose(1, 2, 0, 3)
        k = qkv[:, nq * hd:(nq + nkv) * hd].reshape(n, nkv, 1, hd).transpose(1, 2, 0, 3)
        v = qkv[:, (nq + nkv) * hd:].reshape(n, nkv, 1, hd).transpose(1, 2, 0, 3)
        ctx = scratch("ctx", (n, nq * hd))
        c = ctx.reshape(n, nkv, group, hd).transpose(1, 2, 0, 3)
        for s, e in bounds:
            self.sequence(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], c[:, :, s:e], scratch)
        out = np.matmul(ctx, self.wo)  # (n, heads d_head) -> (n, d_model)
        if self.bo is not None:
            np.add(out, self.bo, out=out)
        return out

    def sequence(self, q: Array, k: Array, v: Array, out: Array, scratch: Scratch) -> None:
        """softmax(q k^T / sqrt(d_head) + mask) v for one sequence, every head at once, a
        block of queries at a time when the scores would not fit in SCORE_ELEMENTS. Causal:
        a block's keys stop at its last query (and start at its first query's window)."""
        length = q.shape[2]
        step = max(1, min(length, SCORE_ELEMENTS // (self.heads * length)))
        for r0 in range(0, length, step):
            r1 = min(length, r0 + step)
            k0, k1 = 0, length
            if self.causal:
                k0, k1 = (max(0, r0 - self.window + 1) if self.window else 0), r1
            s = np.matmul(q[:, :, r0:r1], k[:, :, k0:k1].swapaxes(-1, -2),
                          out=scratch("scores", (*q.shape[:2], r1 - r0, k1 - k0)))
            np.multiply(s, self.scale, out=s)  # (kv, group, queries, keys)
            mask = causal_mask(r0 - k0, r1 - r0, k1 - k0, self.window) if self.causal else None
            if mask is not None:
                np.add(s, mask, out=s)
            softmax_(s)
            np.matmul(s, v[:, :, k0:k1], out=out[:, :, r0:r1])  # -> (kv, group, queries, hd)


class Block:
    """One layer: attention, then the FFN (``engine``), each around the residual stream.
    Post-norm (BERT): x = norm1(h + attn(h)), out = norm2(x + ffn(x)). Pre-norm (GPT-2,
    LLaMA): h1 = h + attn(norm1(h)), x = norm2(h1), out = h1 + ffn(x). x is the FFN's input."""

    def __init__(self, engine: Engine, attention: Attention, norm1: Norm, norm2: Norm,
                 post_norm: bool, scratch: Scratch) -> None:
        self.engine, self.attention = engine, attention
        self.norm1, self.norm2, self.post_norm = norm1, norm2, post_norm
        self._scratch = scratch

    def __call__(self, h: Array, bounds: Bounds) -> tuple[Array, Array]:
        """(ffn_input, output), both (tokens, d_model), new arrays; ``h`` is not modified."""
        scratch, d = self._scratch, self.engine.d_model
        if h.ndim != 2 or h.shape[1] != d:
            raise ValueError(f"expected (tokens, {d}), got {h.shape}")
        h = np.ascontiguousarray(h, dtype=scratch.dtype)
        n = h.shape[0]
        positions = np.concatenate([np.arange(e - s) for s, e in bounds]) if bounds else \
            np.zeros(0, dtype=np.int64)
        tmp, ffn_out = scratch("norm_tmp", (n, d)), scratch("ffn_out", (n, d))
        if self.post_norm:
            a = self.attention(h, bounds, positions, scratch)
            np.add(a, h, out=a)
            x = self.norm1(a, a, tmp)
            self.engine(x, out=ffn_out)
            np.add(ffn_out, x, out=ffn_out)
            return x, self.norm2(ffn_out, np.empty_like(x), tmp)
        normed = self.norm1(h, scratch("normed", (n, d)), tmp)
        h1 = self.attention(normed, bounds, positions, scratch)
        np.add(h1, h, out=h1)
        x = self.norm2(h1, np.empty_like(h1), tmp)
        self.engine(x, out=ffn_out)
        np.add(h1, ffn_out, out=h1)
        return x, h1


# ---------------------------------------------------------------------------------------------
# Families.


class Transformer:
    """A model's embeddings, layers and final norm, read from its checkpoint one layer at a
    time. ``embed`` and ``final`` work on packed rows; ``layer(i)`` reads layer i's weights."""

    family = ""
    post_norm = False

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Settings,
                 dtype: np.dtype) -> None:
        self.spec, self.weights, self.tensors, self.settings = spec, weights, tensors, settings
        self.dtype = np.dtype(dtype)
        self.d_model = spec.d_model
        self.n_layers = spec.layers.encoder or spec.layers.decoder
        self.scratch = Scratch(self.dtype)
        att = spec.attention
        if att is None:
            raise SpecError(f"{spec.name}: the spec has no attention; the forward needs one")
        self.heads = att.heads
        self.kv_heads = att.kv_heads or att.heads
        self.head_dim = att.head_dim or spec.d_model // att.heads
        self.vocab = 0
        self.max_positions: int | None = None

    # -- shared helpers -----------------------------------------------------------------------

    def _get(self, stem: str, shape: tuple[int, ...] | None, required: bool = True
             ) -> Array | None:
        return self.tensors.get(stem, shape, self.dtype, required)

    def _need(self, stem: str, shape: tuple[int, ...] | None) -> Array:
        return self.tensors.need(stem, shape, self.dtype)

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
        from ffncli.runner import build_model

        header = self.tensors.header if isinstance(self.tensors, GgufTensors) else None
        return build_model(self.spec, self.weights, i, self.dtype, gguf_header=header).engine

    def _check_layer(self, i: int) -> None:
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


class BertLike(Transformer):
    """BERT, RoBERTa, DistilBERT, ELECTRA: word + position (+ token type 0) embeddings and a
    LayerNorm, then post-norm layers with bidirectional attention; no final norm."""

    post_norm = True
    names = {"word": "embeddings.word_embeddings.weight",
             "position": "embeddings.position_embeddings.weight",
             "type": "embeddings.token_type_embeddings.weight",
             "norm": "embeddings.LayerNorm",
             "q": "layer.{i}.attention.self.query", "k": "layer.{i}.attention.self.key",
             "v": "layer.{i}.attention.self.value", "o": "layer.{i}.attention.output.dense",
             "norm1": "layer.{i}.attention.output.LayerNorm",
             "norm2": "layer.{i}.output.LayerNorm"}

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Settings,
                 dtype: np.dtype) -> None:
        super().__init__(spec, weights, tensors, settings, dtype)
        kind = settings.text("position_embedding_type", "absolute")
        if kind != "absolute":
            raise ConfigError(f"{settings.source}: key 'position_embedding_type': the forward "
                              f"computes absolute positions, got {brief(kind)}")
        self.eps = settings.number("layer_norm_eps", 1e-12)
        self.vocab = self._table_rows(self.names["word"])
        self.pad = self.offset = 0  # RoBERTa: positions start after the padding index
        if settings.data.get("model_type") in ("roberta", "xlm-roberta"):
            self.pad = settings.whole("pad_token_id", 1) or 0
            self.offset = self.pad + 1
        self.positions = self._position_table(self.names["position"])
        self.max_positions = self.positions.shape[0] - self.offset
        if self.max_positions < 1:  # RoBERTa: no row left after the padding index
            raise ConfigError(f"{settings.source}: key 'pad_token_id': positions start after "
                              f"it, so expected below {self.positions.shape[0] - 1} (the "
                              f"position table has {self.positions.shape[0]} rows), got "
                              f"{self.pad}")
        self.type0 = None
        if spec.embeddings is not None and spec.embeddings.token_types:
            self.type0 = self._need(self.names["type"], (spec.embeddings.token_types,
                                                         self._table_width()))[0]
        width = self._table_width()
        self.norm = Norm(self._need(self.names["norm"] + ".weight", (width,)),
                         self._need(self.names["norm"] + ".bias", (width,)), self.eps)

    def _rows_of_positions(self, ids: Array, positions: Array) -> Array:
        if not self.offset:
            return positions
        # RoBERTa numbers the non-padding tokens of a sequence from pad + 1; padding tokens
        # take the padding row (transformers' create_position_ids_from_input_ids)
        real = (ids != self.pad).astype(np.int64)
        count = np.cumsum(real)
        starts = np.flatnonzero(positions == 0)
        before = np.repeat(count[starts] - real[starts], np.diff(np.append(starts, ids.size)))
        return (count - before) * real + self.pad

    def embed(self, ids: Array, positions: Array) -> Array:
        self._check_ids(ids, positions)
        h = self.tensors.rows(self.names["word"], ids, self.dtype)  # (n,) -> (n, d)
        h += self.positions[self._rows_of_positions(ids, positions)]
        if self.type0 is not None:
            h += self.type0
        return self.norm(h, h, self.scratch("norm_tmp", h.shape))

    def _attention_weights(self, i: int) -> tuple[Array, Array | None, Array, Array | None]:
        d, n = self.d_model, self.heads * self.head_dim
        qkv = self._fused([self._linear(self.names[p].format(i=i), n, d, True)
                           for p in ("q", "k", "v")])
        wo, bo = self._linear(self.names["o"].format(i=i), d, n, True)
        return qkv[0], qkv[1], wo.T, bo

    def layer(self, i: int) -> Block:
        self._check_layer(i)
        wqkv, bqkv, wo, bo = self._attention_weights(i)
        attention = Attention(wqkv, bqkv, wo, bo, self.heads, self.heads, self.head_dim,
                              1 / math.sqrt(self.head_dim), causal=False)
        d = self.d_model
        norms = [Norm(self._need(self.names[k].format(i=i) + ".weight", (d,)),
                      self._need(self.names[k].format(i=i) + ".bias", (d,)), self.eps)
                 for k in ("norm1", "norm2")]
        return Block(self._engine(i), attention, norms[0], norms[1], True, self.scratch)


class DistilBert(BertLike):
    names = {**BertLike.names,
             "q": "layer.{i}.attention.q_lin", "k": "layer.{i}.attention.k_lin",
             "v": "layer.{i}.attention.v_lin", "o": "layer.{i}.attention.out_lin",
             "norm1": "layer.{i}.sa_layer_norm", "norm2": "layer.{i}.output_layer_norm"}

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Settings,
                 dtype: np.dtype) -> None:
        settings = Settings({**settings.data, "layer_norm_eps": 1e-12}, settings.source)
        super().__init__(spec, weights, tensors, settings, dtype)


class Electra(BertLike):
    """ELECTRA: BERT's encoder behind embeddings embedding_size wide, projected to d_model."""

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Settings,
                 dtype: np.dtype) -> None:
        self._width = (spec.embeddings.dim if spec.embeddings is not None else None) \
            or spec.d_model
        super().__init__(spec, weights, tensors, settings, dtype)
        self.project = self._linear("embeddings_project", spec.d_model, self._width, True) \
            if self._width != spec.d_model else None

    def _table_width(self) -> int:
        return self._width

    def embed(self, ids: Array, positions: Array) -> Array:
        h = super().embed(ids, positions)
        if self.project is None:
            return h
        w, b = self.project
        out = h @ w.T  # (n, embedding_size) -> (n, d_model)
        if b is not None:
            out += b
        return out


class Gpt2(Transformer):
    """GPT-2: word + learned position embeddings, pre-norm layers with causal attention (Conv1D
    weights, [in, out]), a final LayerNorm (ln_f)."""

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Settings,
                 dtype: np.dtype) -> None:
        super().__init__(spec, weights, tensors, settings, dtype)
        self.eps = settings.number("layer_norm_epsilon", 1e-5)
        self.scaled = settings.flag("scale_attn_weights", True)
        self.by_layer = settings.flag("scale_attn_by_inverse_layer_idx", False)
        self.vocab = self._table_rows("wte.weight")
        self.positions = self._position_table("wpe.weight")
        self.max_positions = self.positions.shape[0]
        d = self.d_model
        self.ln_f = Norm(self._need("ln_f.weight", (d,)), self._need("ln_f.bias", (d,)), self.eps)

    def embed(self, ids: Array, positions: Array) -> Array:
        self._check_ids(ids, positions)
        h = self.tensors.rows("wte.weight", ids, self.dtype)  # (n,) -> (n, d)
        h += self.positions[positions]
        return h

    def layer(self, i: int) -> Block:
        self._check_layer(i)
        d = self.d_model
        wqkv = self._need(f"h.{i}.attn.c_attn.weight", (d, 3 * d))  # Conv1D: [in, out]
        bqkv = self._need(f"h.{i}.attn.c_attn.bias", (3 * d,))
        wo = self._need(f"h.{i}.attn.c_proj.weight", (d, d))
        bo = self._need(f"h.{i}.attn.c_proj.bias", (d,))
        scale = (1 / math.sqrt(self.head_dim) if self.scaled else 1.0) \
            / (i + 1 if self.by_layer else 1)
        attention = Attention(wqkv, bqkv, wo, bo, self.heads, self.heads, self.head_dim, scale,
                              causal=True)
        norms = [Norm(self._need(f"h.{i}.{k}.weight", (d,)), self._need(f"h.{i}.{k}.bias", (d,)),
                      self.eps) for k in ("ln_1", "ln_2")]
        return Block(self._engine(i), attention, norms[0], norms[1], False, self.scratch)

    def final(self, h: Array) -> Array:
        return self.ln_f(h, np.empty_like(h), self.scratch("norm_tmp", h.shape))


_HF_LLAMA = {"embed": "embed_tokens.weight", "norm": "norm.weight",
             "attn_norm": "layers.{i}.input_layernorm.weight",
             "ffn_norm": "layers.{i}.post_attention_layernorm.weight",
             "q": "layers.{i}.self_attn.q_proj", "k": "layers.{i}.self_attn.k_proj",
             "v": "layers.{i}.self_attn.v_proj", "o": "layers.{i}.self_attn.o_proj",
             "q_norm": "layers.{i}.self_attn.q_norm.weight",
             "k_norm": "layers.{i}.self_attn.k_norm.weight"}
_GGUF_LLAMA = {"embed": "token_embd.weight", "norm": "output_norm.weight",
               "attn_norm": "blk.{i}.attn_norm.weight", "ffn_norm": "blk.{i}.ffn_norm.weight",
               "q": "blk.{i}.attn_q", "k": "blk.{i}.attn_k", "v": "blk.{i}.attn_v",
               "o": "blk.{i}.attn_output", "q_norm": "blk.{i}.attn_q_norm.weight",
               "k_norm": "blk.{i}.attn_k_norm.weight"}


def unpermute(w: Array, heads: int) -> Array:
    """Undo llama.cpp's converter, which reorders each head's Q and K rows so that rotated
    pairs are neighbours (x_0, x_{d/2}, x_1, ...): back to transformers' halves."""
    rest = w.shape[1:]
    return w.reshape(heads, -1, 2, *rest).swapaxes(1, 2).reshape(w.shape)


class LlamaLike(Transformer):
    """LLaMA and its relatives: token embeddings, pre-RMSNorm layers with rotary, causal,
    grouped-query attention (Mistral's sliding window, Qwen2's Q/K/V biases, Qwen3's per-head
    Q/K norms), a gated FFN or Mixtral's mixture of experts, a final RMSNorm. Gemma scales
    the embeddings by sqrt(d_model) and its norms by (1 + weight)."""

    default_theta = 10000.0
    default_eps = 1e-6

    def __init__(self, spec: ModelSpec, weights: Path, tensors: Tensors, settings: Settings,
                 dtype: np.dtype, names: dict[str, str] | None = None,
                 permuted: bool = False) -> None:
        super().__init__(spec, weights, tensors, settings, dtype)
        self.names = names or _HF_LLAMA
        self.permuted = permuted  # GGUF: Q and K rows in llama.cpp's order
        model_type = settings.data.get("model_type")
        self.gemma = model_type == "gemma"
        self.eps = settings.number("rms_norm_eps", self.default_eps)
        self.vocab = self._table_rows(self.names["embed"])
        self.max_positions = spec.seq_len
        self.rope = Rope(rope_frequencies(settings, self.head_dim, self.default_theta))
        self.qk_norm = spec.attention is not None and spec.attention.qk_norm == "head"
        self.norm = self._norm(self.names["norm"])

    def _norm(self, name: str) -> Norm:
        w = self._need(name, (self.d_model,))
        return Norm(w + 1 if self.gemma else w, None, self.eps, rms=True)

    def window(self, i: int) -> int | None:
        """The layer's sliding window: Mistral's (and Mixtral's) when the config sets one;
        Qwen's only with use_sliding_window, on the layers layer_types (or max_window_layers)
        makes sliding."""
        s = self.settings
        model_type = s.data.get("model_type")
        if model_type in ("mistral", "mixtral"):
            return s.whole("sliding_window", minimum=1)  # 0 would mask every key
        if model_type in ("qwen2", "qwen3") and s.flag("use_sliding_window", False):
            types = s.data.get("layer_types")
            if isinstance(types, list) and i < len(types):
                sliding = types[i] == "sliding_attention"
            else:
                sliding = i >= (s.whole("max_window_layers", 28) or 0)
            return s.whole("sliding_window", 4096, minimum=1) if sliding else None
        return None

    def embed(self, ids: Array, positions: Array) -> Array:
        self._check_ids(ids, positions)
        h = self.tensors.rows(self.names["embed"], ids, self.dtype)  # (n,) -> (n, d)
        if self.gemma:
            np.multiply(h, self.dtype.type(math.sqrt(self.d_model)), out=h)
        return h

    def layer(self, i: int) -> Block:
        self._check_layer(i)
        att = self.spec.attention
        assert att is not None  # checked in __init__
        d, hd, nq, nkv = self.d_model, self.head_dim, self.heads, self.kv_heads
        q, k, v = (self._linear(self.names[p].format(i=i), n * hd, d, att.qkv_bias)
                   for p, n in (("q", nq), ("k", nkv), ("v", nkv)))
        if self.permuted:
            q = (unpermute(q[0], nq), None if q[1] is None else unpermute(q[1], nq))
            k = (unpermute(k[0], nkv), None if k[1] is None else unpermute(k[1], nkv))
        wqkv, bqkv = self._fused([q, k, v])
        wo, bo = self._linear(self.names["o"].format(i=i), d, nq * hd, att.out_bias)
        q_norm = k_norm = None
        if self.qk_norm:
            q_norm = self._need(self.names["q_norm"].format(i=i), (hd,))
            k_norm = self._need(self.names["k_norm"].format(i=i), (hd,))
        attention = Attention(wqkv, bqkv, wo.T, bo, nq, nkv, hd, 1 / math.sqrt(hd),
                              causal=True, window=self.window(i), rope=self.rope,
                              q_norm=q_norm, k_norm=k_norm, qk_eps=self.eps)
        norm1 = self._norm(self.names["attn_norm"].format(i=i))
        norm2 = self._norm(self.names["ffn_norm"].format(i=i))
        return Block(self._engine(i), attention, norm1, norm2, False, self.scratch)

    def final(self, h: Array) -> Array:
        return self.norm(h, np.empty_like(h), self.scratch("norm_tmp", h.shape))


class Mixtral(LlamaLike):
    default_theta = 1e6
    default_eps = 1e-5


FAMILIES: dict[str, type[Transformer]] = {
    "bert": BertLike, "roberta": BertLike, "xlm-roberta": BertLike, "distilbert": DistilBert,
    "electra": Electra, "gpt2": Gpt2, "llama": LlamaLike, "mistral": LlamaLike,
    "mixtral": Mixtral, "qwen2": LlamaLike, "qwen3": LlamaLike, "gemma": LlamaLike,
}
GGUF_ARCHITECTURES = ("llama",)


def _no_forward(source: str, what: str) -> SpecError:
    return SpecError(f"{source}: {what} has no whole-model forward; these do: "
                     f"{', '.join(FAMILIES)} (GGUF: {', '.join(GGUF_ARCHITECTURES)})")


def open_transformer(spec: ModelSpec, weights: Path, dtype: np.dtype,
                     config: Path | None = None) -> Transformer:
    """The model whose FFN ``spec`` describes, from the checkpoint at ``weights`` (a
    .safetensors file, an index, a model folder or a .gguf file). Its other settings come from
    ``config`` (else the config.json beside the weights) or the GGUF metadata."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise InputError(f"the forward computes in float32 or float64, got {dtype}")
    if weights.suffix.lower() == ".gguf":
        return _open_gguf(spec, weights, dtype)
    if weights.suffix.lower() == ".npz":
        raise InputError(f"{weights}: an .npz holds one FFN; the whole-model forward reads a "
                         "checkpoint (.safetensors, an index, a model folder or .gguf)")
    from ffncli.model import config_beside

    tensors = SafetensorsTensors(open_checkpoint(weights))
    config = config or config_beside(weights)
    if config is None:
        raise ConfigError(f"{weights}: the forward reads the model's config.json (norms, "
                          "positions, rotary settings); none beside the weights: give --config")
    settings = read_settings(config)
    model_type = settings.data.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise _no_forward(str(config), f"model_type {brief(model_type)}")
    return family(spec, weights, tensors, settings, dtype)


def _open_gguf(spec: ModelSpec, weights: Path, dtype: np.dtype) -> Transformer:
    from ffncli.gguf import read_header

    header = read_header(weights)
    arch = header.architecture
    if arch not in GGUF_ARCHITECTURES:
        raise _no_forward(str(weights), f"GGUF architecture {brief(arch)}")
    meta = header.metadata

    def key(name: str) -> Any:
        return meta.get(f"{arch}.{name}")

    scaling = key("rope.scaling.type")
    if (scaling not in (None, "none", "linear")) or "rope_freqs.weight" in header.tensors:
        raise WeightsError(f"{weights}: GGUF rope scaling {brief(scaling or 'rope_freqs')} is "
                           "not computed; the forward knows none and linear")
    data: dict[str, Any] = {"model_type": arch, "rms_norm_eps": key(
        "attention.layer_norm_rms_epsilon"), "rope_theta": key("rope.freq_base")}
    if scaling == "linear":
        data["rope_scaling"] = {"rope_type": "linear", "factor": key("rope.scaling.factor")}
    settings = Settings(data, f"{weights} (GGUF metadata)")
    transformer = LlamaLike(spec, weights, GgufTensors(header), settings, dtype,
                            names=_GGUF_LLAMA, permuted=True)
    rotated = key("rope.dimension_count")
    if rotated is not None and rotated != transformer.head_dim:
        raise WeightsError(f"{weights}: metadata key '{arch}.rope.dimension_count': the "
                           f"forward rotates whole heads of {transformer.head_dim}, got "
                           f"{brief(rotated)}")
    return transformer


# ---------------------------------------------------------------------------------------------
# Walking the layers over many sequences.

Visit = Callable[[int, Block, np.ndarray], None]


def _batches(lengths: Sequence[int], batch_tokens: int) -> list[tuple[int, int]]:
    """Consecutive sequences grouped into batches of at most ``batch_tokens`` tokens (a
    longer sequence is a batch of its own): (first, end) sequence indices."""
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
         visit: Visit, *, batch_tokens: int = 4096,
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
    chosen = set(layers)
    for i in chosen:
        model._check_layer(i)
    if not chosen and final is None:
        return
    last = model.n_layers - 1 if final is not None else max(chosen)
    seqs = [_checked_ids(model, n + 1, np.asarray(s)) for n, s in enumerate(sequences)]
    lengths = [s.size for s in seqs]
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    batches = _batches(lengths, whole("batch_tokens", batch_tokens))
    d, item = model.d_model, model.dtype.itemsize
    rows = max(int(starts[b] - starts[a]) for a, b in batches) if batches else 0
    buffer = np.empty((rows, d), dtype=model.dtype)
    done = 0
    with _spill(int(starts[-1]) * d * item) as fd:
        for a, b in batches:
            ids = np.concatenate(seqs[a:b]).astype(np.int64, copy=False)
            positions = np.concatenate([np.arange(n) for n in lengths[a:b]])
            _pwrite(fd, model.embed(ids, positions), int(starts[a]) * d * item)
        for i in range(last + 1):
            block = model.layer(i)
            for a, b in batches:
                offset = int(starts[a]) * d * item
                h = buffer[:int(starts[b] - starts[a])]
                _pread(fd, h, offset)
                bounds = [(int(starts[j] - starts[a]), int(starts[j + 1] - starts[a]))
                          for j in range(a, b)]
                ffn_input, out = block(h, bounds)
                if i in chosen:
                    _check_finite(model, f"layer {i}'s FFN input", ffn_input, bounds, a)
                    visit(i, block, ffn_input)
                if i < last:
                    _pwrite(fd, out, offset)
                elif final is not None:
                    state = model.final(out)
                    _check_finite(model, "the final hidden state", state, bounds, a)
                    final(state)
                done += h.shape[0]
                if progress is not None:
                    progress(done)
            del block


def hidden_states(model: Transformer, sequences: Sequence[np.ndarray],
                  layers: Collection[int], *, batch_tokens: int = 4096
                  ) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """Every selected layer's FFN input and the final hidden state (after the final norm),
    all tokens of all sequences in order: small inputs, in memory (tests, notebooks)."""
    found: dict[int, list[np.ndarray]] = {i: [] for i in layers}
    finals: list[np.ndarray] = []
    walk(model, sequences, layers, lambda i, block, x: found[i].append(x),
         batch_tokens=batch_tokens, final=finals.append)
    return ({i: np.concatenate(parts) for i, parts in found.items()}, np.concatenate(finals))

