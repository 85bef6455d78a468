"""FFN implementations for `permute-check --impl`: correct ones that must pass, and the
mistakes it exists to catch, each of which must fail."""

from __future__ import annotations

import numpy as np

D_MODEL, D_FF = 6, 10
_rng = np.random.default_rng(11)
W1 = _rng.normal(0, 0.5, (D_MODEL, D_FF))
B1 = _rng.normal(0, 0.1, D_FF)
W2 = _rng.normal(0, 0.5, (D_FF, D_MODEL))
B2 = _rng.normal(0, 0.1, D_MODEL)


def good(x):
    """The lesson's FFN, position-wise."""
    return np.maximum(0, x @ W1 + B1) @ W2 + B2


def good_loop(x):
    """The same, one token at a time."""
    return np.array([good(row[None])[0] for row in x])


def good_layernorm_per_token(x):
    """A norm over the feature axis is still position-wise."""
    y = good(x)
    return (y - y.mean(axis=1, keepdims=True)) / (y.std(axis=1, keepdims=True) + 1e-5)


def norm_over_tokens(x):
    """A normalisation over the token axis (batch-norm style): mixes positions."""
    h = x @ W1 + B1
    h = (h - h.mean(axis=0)) / (h.std(axis=0) + 1e-5)
    return np.maximum(0, h) @ W2 + B2


def adds_token_mean(x):
    """Adds the mean of all tokens: every output depends on every token."""
    return good(x) + x.mean(axis=0)


def position_bias(x):
    """A bias that depends on the position: identical tokens give different outputs."""
    return good(x) + 0.01 * np.arange(x.shape[0])[:, None]


def capacity_moe(x):
    """Two experts, top-1, each takes at most ceil(n / 2) tokens in order; the rest dropped."""
    logits = x @ W1[:, :2]
    choice = logits.argmax(axis=1)
    out = np.zeros((x.shape[0], D_MODEL))
    cap = -(-x.shape[0] // 2)
    for e in range(2):
        rows = np.nonzero(choice == e)[0][:cap]
        out[rows] = good(x[rows]) * (e + 1)
    return out


def wrong_shape(x):
    return good(x)[:-1]


def returns_list(x):
    return good(x).tolist()


def raises(x):
    raise RuntimeError("boom")
