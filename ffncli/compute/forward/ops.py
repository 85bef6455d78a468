"""The forward's math, one small function per equation: LayerNorm, RMSNorm, softmax in place,
the causal (and sliding-window) mask, rotary positions and their frequencies, and named
scratch buffers reused from batch to batch. ``out`` may be ``x`` (in place); ``tmp`` is a
scratch array shaped like ``x``."""

from __future__ import annotations

import functools
import math

import numpy as np

from ffncli.base.validate import Keys, brief
from ffncli.errors import ConfigError

Array = np.ndarray
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


def dot_sum(a: Array, b: Array) -> float:
    """The sum of a * b over (rows, n) arrays: each row's in the arrays' dtype (vectorised; a
    float32 row carries about 1e-7 of the sum of its terms' magnitudes), the rows' in float64
    (several times faster than a float64 einsum, which converts every element)."""
    return float(np.einsum("ij,ij->i", a, b).sum(dtype=np.float64))


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


def rope_frequencies(settings: Keys, head_dim: int, default_theta: float) -> Array:
    """inv_freq_i = theta^(-2i / d_head) (d_head even), scaled as the config's rope_scaling (or
    transformers 5's rope_parameters) says: linear divides every frequency by its factor;
    llama3 divides the low frequencies, keeps the high ones and blends the band between."""
    if head_dim % 2:  # the halves of rotate-half would differ in width
        raise ConfigError(f"{settings.source}: heads of {head_dim} values: rotary positions "
                          "turn pairs of a head's values, so its width must be even "
                          "(transformers does not compute an odd one either)")
    rope = settings.mapping("rope_parameters") or settings.mapping("rope_scaling") or {}
    where = "rope_parameters" if "rope_parameters" in settings.data else "rope_scaling"
    scaled = Keys(rope, f"{settings.source}: key '{where}'")
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

    def release(self) -> None:
        """Let every buffer go (a later call allocates it again): when a walk has left the
        layers, before the LM head is read."""
        self._buffers.clear()


