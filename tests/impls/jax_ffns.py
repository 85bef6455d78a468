"""JAX / Flax FFNs for `permute-check --impl impls.jax_ffns:NAME`.

Position-wise (must pass): ffn, ffn_jit, FlaxFFN. Broken (must fail): mixes, FlaxSeqNorm.
The sequence (token) axis is -2. The weights are NumPy float64 arrays: JAX computes in
float32 by default and in float64 with JAX_ENABLE_X64=1.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

D_MODEL, D_FF = 8, 16
_rng = np.random.default_rng(3)
W1 = _rng.normal(0, 0.5, (D_MODEL, D_FF))
B1 = _rng.normal(0, 0.1, D_FF)
W2 = _rng.normal(0, 0.5, (D_FF, D_MODEL))
B2 = _rng.normal(0, 0.1, D_MODEL)


def ffn(x):
    """The lesson's FFN, max(0, x W1 + b1) W2 + b2, as a plain jnp function: position-wise."""
    return jnp.maximum(0, jnp.dot(x, W1) + B1) @ W2 + B2


ffn_jit = jax.jit(ffn)


@jax.jit
def mixes(x):
    """Adds the mean over the sequence axis: a token alone gives a different output."""
    return ffn(x) + jnp.mean(x, axis=-2, keepdims=True)


class FlaxFFN(nn.Module):
    """Dense(d_ff) -> ReLU -> Dense(d_model): position-wise."""

    d_ff: int = 16
    d_model: int = 8

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.d_model)(nn.relu(nn.Dense(self.d_ff)(x)))


class FlaxSeqNorm(nn.Module):
    """Dense, then each feature normalised across the positions (axis -2): mixes positions
    (a token alone normalises to zero)."""

    d_ff: int = 16
    d_model: int = 8

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(self.d_ff)(x)
        h = (h - h.mean(axis=-2, keepdims=True)) / (h.std(axis=-2, keepdims=True) + 1e-5)
        return nn.Dense(self.d_model)(nn.relu(h))
