"""One layer of the whole model: the norms, the attention and the block that puts them around
the FFN and the residual stream (post-norm BERT, pre-norm GPT-2 and LLaMA)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ffncli.base.blas import one_thread
from ffncli.base.parallel import each_in_parallel
from ffncli.compute.engine import Engine
from ffncli.compute.forward.ops import (
    Array,
    Rope,
    Scratch,
    causal_mask,
    layer_norm,
    rms_norm,
    softmax_,
)

Bounds = Sequence[tuple[int, int]]
Ffn = Callable[[Array, Array], None]  # (ffn_input, out): the FFN of x into out
CAUSAL_BLOCK = 128  # queries at a time in causal attention (faster: docs/measured.md)
SCORE_ELEMENTS = 1 << 22  # attention scores held at once (16 MB in float32): longer


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


class Blockwise:
    """softmax(q k^T * scale + mask) v over the sequences of a batch, a block of queries at a
    time: what every kind of attention shares (:class:`Attention`, and MLA's
    :class:`ffncli.compute.forward.latent.LatentAttention`). The classes using it are frozen
    dataclasses with these fields:

    - ``causal``, with ``window`` (a query sees this many keys, itself included: Mistral's,
      gpt-oss's sliding layers) or ``chunk`` (Llama 4: the sequence is cut into chunks of this
      many tokens and a query sees only the keys of its own chunk);
    - ``sinks``: gpt-oss's learned logit of each query head, a column more in the softmax,
      dropped after."""

    heads: int
    scale: float
    causal: bool
    window: int | None
    chunk: int | None
    sinks: Array | None

    def attend(self, q: Array, k: Array, v: Array, c: Array, bounds: Bounds,
               scratch: Scratch) -> None:
        """Into c: q, k, v and c are (kv heads, queries per kv head (k, v: 1), tokens, width),
        views of packed rows; v and c may be narrower or wider than q and k (MLA)."""
        sink = None if self.sinks is None else \
            self.sinks.astype(scratch.dtype).reshape(q.shape[0], q.shape[1], 1, 1)

        def one(task: tuple[int, int, int, int], worker: int) -> None:
            s, e, r0, r1 = task
            self.queries(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], c[:, :, s:e], r0, r1,
                         scratch, f"scores{worker}", sink)

        # many small products (L x d_head x L a head): one BLAS thread each, side by side
        with one_thread():
            each_in_parallel([(s, e, r0, r1) for s, e in self.pieces(bounds)
                              for r0, r1 in self.blocks(e - s)], one)

    def pieces(self, bounds: Bounds) -> Bounds:
        """The spans attended apart: the sequences, or with ``chunk`` their chunks (chunked
        causal attention is causal attention within each chunk)."""
        if self.chunk is None:
            return bounds
        return [(a, min(e, a + self.chunk)) for s, e in bounds for a in range(s, e, self.chunk)]

    def blocks(self, length: int) -> list[tuple[int, int]]:
        """The blocks of queries of a sequence, (first, end): all of it, or as many as fit in
        SCORE_ELEMENTS scores; causal, at most CAUSAL_BLOCK (a block's keys stop at its last
        query: the masked half is not computed)."""
        step = max(1, min(length, SCORE_ELEMENTS // (self.heads * length)))
        if self.causal:
            step = min(step, CAUSAL_BLOCK)
        return [(r0, min(length, r0 + step)) for r0 in range(0, length, step)]

    def queries(self, q: Array, k: Array, v: Array, out: Array, r0: int, r1: int,
                scratch: Scratch, name: str = "scores", sink: Array | None = None) -> None:
        """softmax(q k^T * scale + mask) v for queries r0..r1 of one sequence, every head at
        once, into out[:, :, r0:r1]. Causal: the keys stop at the last query (and start at the
        first query's window). ``name``: the scratch buffer of the scores; ``sink``: the
        sinks, (kv heads, group, 1, 1)."""
        k0, k1 = 0, q.shape[2]
        if self.causal:
            k0, k1 = (max(0, r0 - self.window + 1) if self.window else 0), r1
        s = np.matmul(q[:, :, r0:r1], k[:, :, k0:k1].swapaxes(-1, -2),
                      out=scratch(name, (*q.shape[:2], r1 - r0, k1 - k0)))
        np.multiply(s, self.scale, out=s)  # (kv, group, queries, keys)
        mask = causal_mask(r0 - k0, r1 - r0, k1 - k0, self.window) if self.causal else None
        if mask is not None:
            np.add(s, mask, out=s)
        softmax_(s, sink)
        np.matmul(s, v[:, :, k0:k1], out=out[:, :, r0:r1])  # -> (kv, group, queries, width)


@dataclass(frozen=True)
class Attention(Blockwise):
    """Multi-head (grouped-query when kv_heads < heads) self-attention of one layer. Q, K and
    V come from one product with the fused [in, out] matrix ``wqkv`` (query heads, then key
    heads, then value heads). The kinds of 2025-26 (each a field, off by default): gpt-oss's
    sinks and sliding layers, Llama 4's chunks, its norm after the rotation and its
    temperature on layers without rotation, GLM's partial rotation (the Rope's)."""

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
    chunk: int | None = None  # Llama 4: a query sees the keys of its chunk of this many tokens
    sinks: Array | None = None  # gpt-oss: (heads,), a logit more in each head's softmax
    norm_after_rope: bool = False  # Llama 4: q_norm and k_norm after rotating, not before
    # Llama 4's temperature (floor_scale, attn_scale): the queries at position p times
    # 1 + attn_scale ln(1 + floor((p + 1) / floor_scale))
    temperature: tuple[float, float] | None = None
    clip: float | None = None  # OLMoE: Q, K and V clamped to [-clip, clip]

    def __call__(self, x: Array, bounds: Bounds, positions: Array, scratch: Scratch) -> Array:
        """(tokens, d_model) -> (tokens, d_model), a new array."""
        n, hd, nq, nkv = x.shape[0], self.head_dim, self.heads, self.kv_heads
        group = nq // nkv
        qkv = np.matmul(x, self.wqkv, out=scratch("qkv", (n, (nq + 2 * nkv) * hd)))
        if self.bqkv is not None:
            np.add(qkv, self.bqkv, out=qkv)
        heads = qkv.reshape(n, nq + 2 * nkv, hd)  # (n, heads of q, k, v, d_head)
        if not self.norm_after_rope:
            self.norm_heads(heads, scratch)
        if self.clip is not None:  # OLMoE's clip_qkv, after the norms
            np.clip(qkv, -self.clip, self.clip, out=qkv)
        if self.rope is not None:
            self.rope(heads[:, :nq + nkv], positions, scratch)
        if self.norm_after_rope:
            self.norm_heads(heads, scratch)
        if self.temperature is not None:
            np.multiply(heads[:, :nq], temperatures(positions, *self.temperature, heads.dtype),
                        out=heads[:, :nq])
        # (kv heads, queries per kv head, n, d_head): views of the packed rows
        q = qkv[:, :nq * hd].reshape(n, nkv, group, hd).transpose(1, 2, 0, 3)
        k = qkv[:, nq * hd:(nq + nkv) * hd].reshape(n, nkv, 1, hd).transpose(1, 2, 0, 3)
        v = qkv[:, (nq + nkv) * hd:].reshape(n, nkv, 1, hd).transpose(1, 2, 0, 3)
        ctx = scratch("ctx", (n, nq * hd))
        self.attend(q, k, v, ctx.reshape(n, nkv, group, hd).transpose(1, 2, 0, 3), bounds,
                    scratch)
        out = np.matmul(ctx, self.wo)  # (n, heads d_head) -> (n, d_model)
        if self.bo is not None:
            np.add(out, self.bo, out=out)
        return out

    def norm_heads(self, heads: Array, scratch: Scratch) -> None:
        """RMSNorm, in place, of each query head by q_norm and each key head by k_norm (or of
        all query heads together and all key heads together when the norm is that wide)."""
        nq, nkv = self.heads, self.kv_heads
        for norm, lo, hi in ((self.q_norm, 0, nq), (self.k_norm, nq, nq + nkv)):
            if norm is not None:  # over each head (head_dim) or all of them (OLMoE)
                part = heads[:, lo:hi].reshape(heads.shape[0], -1, norm.shape[0])  # a view
                rms_norm(part, norm, self.qk_eps, part, scratch("qk_norm", part.shape))


def temperatures(positions: Array, floor_scale: float, attn_scale: float,
                 dtype: np.dtype) -> Array:
    """Llama 4's query temperature at each position p (Nakanishi 2025, 'Scalable-Softmax'):
    1 + attn_scale ln(1 + floor((p + 1) / floor_scale)), (tokens, 1, 1), in float32 as
    transformers computes it."""
    p = positions.astype(np.float32) + np.float32(1)
    t = np.log1p(np.floor(p / np.float32(floor_scale))) * np.float32(attn_scale) + np.float32(1)
    return t.astype(dtype)[:, None, None]


class SelfAttention(Protocol):
    """What a layer's attention is to its Block (:class:`Attention`, MLA's LatentAttention):
    (tokens, d_model) -> (tokens, d_model), a new array, given each sequence's bounds and each
    token's position in its sequence."""

    def __call__(self, x: Array, bounds: Bounds, positions: Array,
                 scratch: Scratch) -> Array: ...


class Block:
    """One layer: attention, then the FFN (``engine``), each around the residual stream.
    Post-norm (BERT): x = norm1(h + attn(h)), out = norm2(x + ffn(x)). Pre-norm (GPT-2,
    LLaMA): h1 = h + attn(norm1(h)), x = norm2(h1), out = h1 + ffn(x). x is the FFN's input."""

    def __init__(self, engine: Engine, attention: SelfAttention, norm1: Norm, norm2: Norm,
                 post_norm: bool, scratch: Scratch) -> None:
        self.engine, self.attention = engine, attention
        self.norm1, self.norm2, self.post_norm = norm1, norm2, post_norm
        self._scratch = scratch

    def __call__(self, h: Array, bounds: Bounds, ffn: Ffn | None = None
                 ) -> tuple[Array, Array]:
        """(ffn_input, output), both (tokens, d_model), new arrays; ``h`` is not modified.
        ``ffn(x, out)`` replaces the layer's FFN (a sparsified one); default the engine."""
        r = self.attend(h, bounds)
        x = self.ffn_input(r)
        return x, self.join(x, r, ffn)

    def attend(self, h: Array, bounds: Bounds) -> Array:
        """The layer's first half: the residual stream after attention, a new array (pre-norm
        h + attn(norm1(h)); post-norm norm1(h + attn(h)), which is also the FFN's input);
        ``h`` is not modified."""
        scratch, d = self._scratch, self.engine.d_model
        if h.ndim != 2 or h.shape[1] != d:
            raise ValueError(f"expected (tokens, {d}), got {h.shape}")
        h = np.ascontiguousarray(h, dtype=scratch.dtype)
        n = h.shape[0]
        positions = np.concatenate([np.arange(e - s) for s, e in bounds]) if bounds else \
            np.zeros(0, dtype=np.int64)
        tmp = scratch("norm_tmp", (n, d))
        if self.post_norm:
            a = self.attention(h, bounds, positions, scratch)
            np.add(a, h, out=a)
            return self.norm1(a, a, tmp)
        normed = self.norm1(h, scratch("normed", (n, d)), tmp)
        h1 = self.attention(normed, bounds, positions, scratch)
        np.add(h1, h, out=h1)
        return h1

    def ffn_input(self, r: Array) -> Array:
        """The FFN's input from :meth:`attend`'s stream: pre-norm norm2(r), a new array;
        post-norm r itself."""
        if self.post_norm:
            return r
        return self.norm2(r, np.empty_like(r), self._scratch("norm_tmp", r.shape))

    def join(self, x: Array, r: Array, ffn: Ffn | None = None) -> Array:
        """The layer's output from the FFN's input ``x`` and :meth:`attend`'s stream ``r``:
        pre-norm r + ffn(x), in r's place; post-norm norm2(x + ffn(x)), a new array."""
        scratch = self._scratch
        ffn_out = scratch("ffn_out", x.shape)
        (ffn or self._dense)(x, ffn_out)
        if self.post_norm:
            np.add(ffn_out, x, out=ffn_out)
            return self.norm2(ffn_out, np.empty_like(x), scratch("norm_tmp", x.shape))
        np.add(r, ffn_out, out=r)
        return r

    def _dense(self, x: Array, out: Array) -> None:
        self.engine(x, out=out)


@dataclass(frozen=True)
class Head:
    """The language-model head: logits = h @ weight.T, the weight (vocab, d_model) the LM
    head's own or the tied input embeddings; with ``cap``, soft-capped as
    cap * tanh(logits / cap) (Gemma 2's final_logit_softcapping)."""

    weight: Array
    cap: float | None = None

    @property
    def vocab(self) -> int:
        return int(self.weight.shape[0])

    def __call__(self, h: Array) -> Array:
        """(rows, d_model) -> (rows, vocab), a new array in the weight's dtype."""
        logits = np.matmul(h, self.weight.T)
        if self.cap is not None:
            np.divide(logits, self.cap, out=logits)
            np.tanh(logits, out=logits)
            np.multiply(logits, self.cap, out=logits)
        return logits
