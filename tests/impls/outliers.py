"""NumPy FFNs for the gate's tolerance (`permute-check --impl impls.outliers:NAME`): one output
channel far larger than the others (LLMs' massive activations: 1e5, 1e6; a constant column of
1e12) beside a leak across tokens in every other channel, which a tolerance scaled by the
largest output of all let pass; a normalisation over the sequence, which is NaN on one token.
`massive` is position-wise and must pass; the rest must fail."""

from __future__ import annotations

import numpy as np

from .ffns import good


def massive(x):
    """The lesson's FFN with 1e6 added to channel 0: position-wise."""
    y = good(x)
    y[:, 0] += 1e6
    return y


def massive_leaks_5pct(x):
    """Channel 0 near 1e5; every other channel gets 5% of the tokens' mean."""
    y = good(x)
    y[:, 1:] += 0.05 * y[:, 1:].mean(axis=0)
    y[:, 0] += 1e5
    return y


def massive_leaks_1e_3(x):
    """Channel 0 near 1e6; every other channel gets 1e-3 of the tokens' mean."""
    y = good(x)
    y[:, 1:] += 1e-3 * y[:, 1:].mean(axis=0)
    y[:, 0] += 1e6
    return y


def constant_running_sum(x):
    """Channel 0 a constant 1e12; every other channel gets the running sum of the tokens'
    outputs up to its own (a causal, cumulative operation)."""
    y = good(x)
    y[:, 1:] += np.cumsum(y[:, 1:], axis=0)
    y[:, 0] = 1e12
    return y


def std_over_tokens(x):
    """Normalised by the mean and standard deviation over the tokens (axis 0), as BatchNorm
    in training mode: on one token alone the deviation is 0, and the output NaN."""
    y = good(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (y - y.mean(axis=0)) / y.std(axis=0)
