"""The forward's math, one small function per equation: LayerNorm, RMSNorm, softmax in place,
the causal (and sliding-window) mask, rotary positions and their frequencies, and named
scratch buffers reused from batch to batch. ``out`` may be ``x`` (in place); ``tmp`` is a
scratch array shaped like ``x``."""

from __future__ import annotations

import functools
import math
from typing import Any

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


def softmax_(s: Array, sink: Array | None = None) -> Array:
    """Softmax over the last axis, in place: exp(s - max) / sum. With ``sink`` (gpt-oss's
    learned logit of each head, broadcast against s's rows): a logit more in every row,
    counted in the sum and dropped after, exp(s - m) / (sum + exp(sink - m))."""
    if sink is not None:
        return _softmax_with_sink(s, sink)
    np.subtract(s, s.max(axis=-1, keepdims=True), out=s)
    np.exp(s, out=s)
    np.divide(s, s.sum(axis=-1, keepdims=True), out=s)
    return s


def _softmax_with_sink(s: Array, sink: Array) -> Array:
    top = np.maximum(s.max(axis=-1, keepdims=True), sink)  # the max over the row and its sink
    np.subtract(s, top, out=s)
    np.exp(s, out=s)
    total = s.sum(axis=-1, keepdims=True)
    total += np.exp(sink - top)
    np.divide(s, total, out=s)
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
    """Rotary positions (the rotate-half form of HF transformers): the pair (x_i, x_{i+r/2})
    of each head's first r = 2 len(inv_freq) values is turned by the angle position *
    inv_freq_i (r below d_head: partial rotary, GLM's; the rest passes unturned); cos and sin
    are scaled by ``attention_factor`` (YaRN's). ``interleaved``: the pairs are neighbours
    (x_0, x_1), (x_2, x_3), ... (DeepSeek, Llama 4): they are first gathered into halves, so
    the head comes out in rotate-half order. Queries and keys are gathered alike, so every
    q . k is the one transformers computes, and so is a norm over the head."""

    def __init__(self, inv_freq: Array, attention_factor: float = 1.0,
                 interleaved: bool = False) -> None:
        self.inv_freq = inv_freq.astype(np.float32)  # (r / 2,)
        self.attention_factor, self.interleaved = attention_factor, interleaved
        self.width = 2 * inv_freq.size  # r, the values turned of each head
        self._cos = self._sin = np.empty((0, inv_freq.size), dtype=np.float32)

    def tables(self, n: int) -> tuple[Array, Array]:
        """cos and sin of positions 0..n-1, (n, r / 2), computed once as float32 does."""
        if self._cos.shape[0] < n:
            angles = np.arange(max(n, 2 * self._cos.shape[0]), dtype=np.float32)[:, None] \
                * self.inv_freq[None, :]
            self._cos, self._sin = np.cos(angles), np.sin(angles)
            if self.attention_factor != 1:
                factor = np.float32(self.attention_factor)
                np.multiply(self._cos, factor, out=self._cos)
                np.multiply(self._sin, factor, out=self._sin)
        return self._cos[:n], self._sin[:n]

    def __call__(self, x: Array, positions: Array, scratch: Scratch) -> None:
        """Rotate x (tokens, heads, d_head) in place: x1' = x1 cos - x2 sin, x2' = x2 cos +
        x1 sin, where x1, x2 are the halves of each head's first r values."""
        if x.shape[-1] < self.width:
            raise ValueError(f"expected heads of at least {self.width} values, got {x.shape}")
        if positions.size == 0:
            return
        cos_t, sin_t = self.tables(int(positions.max()) + 1)
        cos, sin = cos_t[positions][:, None, :], sin_t[positions][:, None, :]  # (n, 1, half)
        x = x[..., :self.width]
        if self.interleaved:  # (x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...)
            x[...] = x[..., np.r_[0:self.width:2, 1:self.width:2]]
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        a, b = scratch("rope_a", x1.shape), scratch("rope_b", x1.shape)
        np.multiply(x2, sin, out=a)
        np.multiply(x1, sin, out=b)
        np.multiply(x1, cos, out=x1)
        np.subtract(x1, a, out=x1)
        np.multiply(x2, cos, out=x2)
        np.add(x2, b, out=x2)


def base_frequencies(theta: float, head_dim: int) -> Array:
    """inv_freq_i = theta^(-2i / d) over the d = ``head_dim`` values turned, as transformers
    computes it, in float32."""
    return 1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))


def rope_frequencies(settings: Keys, head_dim: int, default_theta: float) -> Array:
    """The frequencies of :func:`rope_scaling` for a family whose Rope turns whole heads and
    scales nothing: a partial rotary factor or an attention factor (YaRN's) is refused, as
    this Rope would leave it out. A family that computes them builds :func:`rotary`."""
    inv, attention_factor = rope_scaling(settings, head_dim, default_theta)
    rope, where = _rope_keys(settings)
    if 2 * inv.size != head_dim:
        partial = rope.get("partial_rotary_factor", settings.data.get("partial_rotary_factor"))
        raise ConfigError(f"{settings.source}: key 'partial_rotary_factor': the forward "
                          f"rotates whole heads, expected 1, got {brief(partial)}")
    if attention_factor != 1:
        raise ConfigError(f"{settings.source}: key '{where}': rope type "
                          f"{brief(rope.get('rope_type', rope.get('type')))} scales cos and "
                          f"sin by {attention_factor:.6g}; this family's forward does not")
    return inv


def rotary(settings: Keys, head_dim: int, default_theta: float, *,
           default_partial: float = 1.0, interleaved: bool = False) -> Rope:
    """The Rope the config describes, for heads of ``head_dim`` (MLA: the rotated part's
    width, qk_rope_head_dim): frequencies, attention factor and partial rotary of
    :func:`rope_scaling`; ``interleaved`` as :class:`Rope` says."""
    inv, attention_factor = rope_scaling(settings, head_dim, default_theta, default_partial)
    return Rope(inv, attention_factor, interleaved)


def _rope_keys(settings: Keys) -> tuple[dict[str, Any], str]:
    """The rotary mapping (transformers 5's rope_parameters, or the older rope_scaling) and
    its key's name."""
    rope = settings.mapping("rope_parameters") or settings.mapping("rope_scaling") or {}
    return rope, ("rope_parameters" if "rope_parameters" in settings.data else "rope_scaling")


def rope_scaling(settings: Keys, head_dim: int, default_theta: float,
                 default_partial: float = 1.0) -> tuple[Array, float]:
    """(inv_freq, attention_factor): inv_freq_i = theta^(-2i / r) over the r values of a head
    turned (r = d_head * partial_rotary_factor, even; ``default_partial`` when the config
    gives none: GLM-4.5's 0.5), scaled as the config's rope_scaling (or transformers 5's
    rope_parameters) says: linear divides every frequency by its factor; llama3 divides the
    low frequencies, keeps the high ones and blends the band between; yarn blends divided and
    kept frequencies by a ramp (:func:`yarn`). attention_factor scales cos and sin (1 but for
    yarn)."""
    rope, where = _rope_keys(settings)
    scaled = Keys(rope, f"{settings.source}: key '{where}'")
    theta = scaled.number("rope_theta", settings.number("rope_theta", default_theta))
    kind = scaled.text("rope_type", scaled.text("type", "default"))
    partial = scaled.number("partial_rotary_factor",
                            settings.number("partial_rotary_factor", default_partial))
    dim = int(head_dim * partial)
    if partial == 1 and head_dim % 2:  # the halves of rotate-half would differ in width
        raise ConfigError(f"{settings.source}: heads of {head_dim} values: rotary positions "
                          "turn pairs of a head's values, so its width must be even "
                          "(transformers does not compute an odd one either)")
    if dim % 2 or partial > 1:
        raise ConfigError(f"{settings.source}: key 'partial_rotary_factor': heads of "
                          f"{head_dim} values, {dim} of them turned; expected an even width "
                          f"of at most {head_dim} turned, got a factor of {partial:g}")
    inv = base_frequencies(theta, dim)
    if kind == "default":
        return inv, 1.0
    if kind == "linear":
        return inv / np.float32(scaled.number("factor")), 1.0
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
        return np.where(medium, blended, llama).astype(np.float32), 1.0
    if kind == "yarn":
        return yarn(scaled, settings, theta, dim)
    raise ConfigError(f"{settings.source}: key '{where}': rope type {brief(kind)} is not "
                      "computed; the forward knows default, linear, llama3 and yarn")


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's 0.1 mscale ln(factor) + 1 (eq. 21 of the paper), 1 for factor <= 1."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _optional(scaled: Keys, key: str) -> float:
    """A positive number, or 0 when missing, null or 0 (transformers' 'not set')."""
    value = scaled.data.get(key)
    return 0.0 if value is None or (value == 0 and not isinstance(value, bool)) \
        else scaled.number(key)


def yarn(scaled: Keys, settings: Keys, theta: float, dim: int) -> tuple[Array, float]:
    """YaRN (Peng et al. 2023, transformers' _compute_yarn_parameters): frequencies turning
    fewer than beta_slow times over original_max_position_embeddings are divided by factor,
    those turning more than beta_fast times kept, a linear ramp between (its ends floored and
    ceiled unless truncate is false); attention_factor the config's, else mscale(factor,
    mscale) / mscale(factor, mscale_all_dim) when both are set, else mscale(factor)."""
    old = scaled.number("original_max_position_embeddings")
    factor = _optional(scaled, "factor") or settings.number("max_position_embeddings") / old
    attention_factor = _optional(scaled, "attention_factor")
    mscale, mscale_all = _optional(scaled, "mscale"), _optional(scaled, "mscale_all_dim")
    if not attention_factor:
        attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all) \
            if mscale and mscale_all else yarn_mscale(factor)
    fast = _optional(scaled, "beta_fast") or 32.0
    slow = _optional(scaled, "beta_slow") or 1.0

    def turned(rotations: float) -> float:  # the dimension turning this often over ``old``
        return dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = turned(fast), turned(slow)
    if scaled.flag("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - np.float32(low))
                   / np.float32(high - low), 0, 1)
    kept = 1 - ramp  # (r / 2,): 1 where the frequency is kept (extrapolated)
    powers = np.float32(theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
    inv = (1 / (np.float32(factor) * powers)) * (1 - kept) + (1 / powers) * kept
    return inv.astype(np.float32), float(attention_factor)


def softmax_scale(settings: Keys, scale: float) -> float:
    """MLA's softmax scale (transformers' yarn_apply_mscale): ``scale`` times mscale(factor,
    mscale_all_dim) squared when the rope is scaled (not default) and mscale_all_dim is set,
    so that the unrotated dimensions are scaled too (DeepSeek's reference code)."""
    rope, where = _rope_keys(settings)
    scaled = Keys(rope, f"{settings.source}: key '{where}'")
    if scaled.text("rope_type", scaled.text("type", "default")) == "default":
        return scale
    mscale_all = _optional(scaled, "mscale_all_dim")
    if not mscale_all:
        return scale
    mscale = yarn_mscale(scaled.number("factor"), mscale_all)
    return scale * mscale * mscale


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


