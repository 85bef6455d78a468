"""Multi-head latent attention (MLA: DeepSeek-V2, section 2.1; DeepSeek-V3 and their kin), as
transformers' DeepseekV3Attention computes it. Keys and values come from a latent of
kv_lora_rank values a token (the KV cache's content), the queries from one of q_lora_rank (or
straight from the token); a head's key is its own unrotated part and a rotated part every
head shares:

    c_kv, k_rot = x W_kv_a                  (n, kv_lora_rank), (n, rope)
    [k_nope_h, v_h] = rms(c_kv) W_kv_b      per head: (n, nope), (n, v)
    q_h = rms(x W_q_a) W_q_b  (or x W_q)    per head: (n, nope + rope)
    k_h = [k_nope_h, rope(k_rot)],  q_h = [q_nope_h, rope(q_rot_h)]
    out = softmax(q_h k_h^T * scale + causal) v_h, heads concatenated, times W_o

scale is 1 / sqrt(nope + rope), times YaRN's mscale(factor, mscale_all_dim) squared when the
rotation is scaled (:func:`ffncli.compute.forward.ops.softmax_scale`). The attention itself is
:class:`ffncli.compute.forward.layer.Blockwise`'s, as every other kind's."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ffncli.compute.forward.layer import Blockwise, Bounds
from ffncli.compute.forward.ops import Array, Rope, Scratch, rms_norm


@dataclass(frozen=True)
class LowRank:
    """A projection through a normed bottleneck: rms(x w_a + b_a) w_b, both [in, out]
    (DeepSeek's q_a_proj, q_a_layernorm, q_b_proj)."""

    w_a: Array  # (d_model, rank)
    b_a: Array | None
    norm: Array  # (rank,)
    w_b: Array  # (rank, out)

    def __call__(self, x: Array, eps: float, scratch: Scratch) -> Array:
        """(n, d_model) -> (n, out), a new array."""
        a = np.matmul(x, self.w_a, out=scratch("mla_q_a", (x.shape[0], self.w_a.shape[1])))
        if self.b_a is not None:
            np.add(a, self.b_a, out=a)
        rms_norm(a, self.norm, eps, a, scratch("mla_tmp", a.shape))
        return np.matmul(a, self.w_b)


@dataclass(frozen=True)
class LatentAttention(Blockwise):
    """MLA of one layer (the module docstring's equations). Matrices [in, out], heads side by
    side in their columns as transformers' weights hold them (transposed): ``q`` is q_proj's
    matrix (q_lora_rank null) or the :class:`LowRank` of q_a_proj, q_a_layernorm and q_b_proj;
    ``wkv_a`` kv_a_proj_with_mqa's (the latent, then the shared rotated key); ``kv_a_norm``
    kv_a_layernorm's weight; ``wkv_b`` kv_b_proj's (each head's unrotated key, then its value);
    ``wo`` o_proj's. ``rope`` turns the last ``rope_dim`` values of each query head and the
    shared key (DeepSeek's pairs are interleaved: a Rope made with interleaved=True)."""

    q: Array | LowRank  # (d_model, heads (nope + rope)) or the low-rank path to it
    wkv_a: Array  # (d_model, kv_lora_rank + rope)
    bkv_a: Array | None
    kv_a_norm: Array  # (kv_lora_rank,)
    wkv_b: Array  # (kv_lora_rank, heads (nope + v))
    wo: Array  # (heads v, d_model)
    bo: Array | None
    heads: int
    nope_dim: int  # qk_nope_head_dim
    rope_dim: int  # qk_rope_head_dim
    v_dim: int  # v_head_dim
    scale: float
    rope: Rope
    eps: float = 1e-6  # the latents' RMSNorms (transformers leaves them at 1e-6)
    causal: bool = True
    window: int | None = None
    chunk: int | None = None
    sinks: Array | None = None

    def __call__(self, x: Array, bounds: Bounds, positions: Array, scratch: Scratch) -> Array:
        """(tokens, d_model) -> (tokens, d_model), a new array."""
        n, h, dn, dr, dv = x.shape[0], self.heads, self.nope_dim, self.rope_dim, self.v_dim
        rank = self.kv_a_norm.shape[0]
        q = self.q(x, self.eps, scratch) if isinstance(self.q, LowRank) else x @ self.q
        q_heads = q.reshape(n, h, dn + dr)  # (n, heads, nope + rope)
        ckv = np.matmul(x, self.wkv_a, out=scratch("mla_kv_a", (n, rank + dr)))
        if self.bkv_a is not None:
            np.add(ckv, self.bkv_a, out=ckv)
        latent = rms_norm(ckv[:, :rank], self.kv_a_norm, self.eps,
                          scratch("mla_latent", (n, rank)), scratch("mla_tmp", (n, rank)))
        kv = np.matmul(latent, self.wkv_b).reshape(n, h, dn + dv)  # (n, heads, nope + v)
        k_rot = ckv[:, rank:].reshape(n, 1, dr)  # (n, 1, rope): one for every head
        self.rope(q_heads[:, :, dn:], positions, scratch)
        self.rope(k_rot, positions, scratch)
        k = scratch("mla_k", (n, h, dn + dr))
        k[:, :, :dn] = kv[:, :, :dn]
        k[:, :, dn:] = k_rot
        ctx = scratch("ctx", (n, h * dv))

        def heads_first(a: Array) -> Array:  # (n, heads, w) -> (heads, 1, n, w), a view
            return a.transpose(1, 0, 2)[:, None]

        self.attend(heads_first(q_heads), heads_first(k), heads_first(kv[:, :, dn:]),
                    heads_first(ctx.reshape(n, h, dv)), bounds, scratch)
        out = np.matmul(ctx, self.wo)  # (n, heads v) -> (n, d_model)
        if self.bo is not None:
            np.add(out, self.bo, out=out)
        return out
