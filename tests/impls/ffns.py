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


# --- misbehaving implementations: each must end the check with exit 2, never a pass --------


def exits(x):
    """A CI gate must not pass because the code under test exited with 0."""
    import sys

    sys.exit(0)


def exits_bare(x):
    import sys

    sys.exit()


def raises_system_exit(x):
    raise SystemExit(0)


def exits_with_message(x):
    raise SystemExit("done here")


def raises_keyboard_interrupt(x):
    raise KeyboardInterrupt


def raises_generator_exit(x):
    raise GeneratorExit


class _Custom(BaseException):
    pass


def raises_base_exception(x):
    raise _Custom("not an Exception")


CALLS = []


def exits_on_second_call(x):
    """Good on the first call, then exits: the check must not keep the first result."""
    CALLS.append(1)
    if len(CALLS) > 1:
        raise SystemExit(0)
    return good(x)


def hangs(x):
    while True:
        pass


def sleeps(x):
    import time

    time.sleep(1e9)


def swallows_and_returns(x):
    """Catches the timeout's exception and returns a correct answer, late."""
    import time

    try:
        time.sleep(1e9)
    except BaseException:  # noqa: BLE001, S110 - the misbehaviour under test
        pass
    return good(x)


def returns_nan(x):
    return np.full((x.shape[0], D_MODEL), np.nan)


def returns_inf_in_one_row(x):
    y = good(x)
    y[-1, 2] = np.inf
    return y


def returns_none(x):
    return None


def returns_1d(x):
    return good(x)[:, 0]


def returns_empty(x):
    """No output columns: every property would hold vacuously."""
    return np.zeros((x.shape[0], 0))


def returns_complex(x):
    return good(x).astype(complex)


def width_depends_on_tokens(x):
    """d_out 6 for many tokens, 5 for one: the outputs cannot be compared."""
    y = good(x)
    return y if x.shape[0] > 1 else y[:, :5]


def changes_input(x):
    """A correct answer, but the caller's tokens are scaled in place."""
    y = good(x)
    x *= 2
    return y


def normalises_input_in_place(x):
    x -= x.mean(axis=1, keepdims=True)
    return good(x)


def flips_zero_sign(x):
    """Changes only -0.0 to 0.0 in its input: a change in place all the same."""
    x[x == 0] = 0.0
    x[0, 0] = -0.0
    return good(x)


def returns_input(x):
    """The identity, as a view of its input: position-wise."""
    return x


def returns_input_view(x):
    """A view of its input, then changes the input (after computing) - caught in place."""
    y = x[:, ::-1]
    x[...] = 0
    return y


_BUFFER = {}


def reuses_buffer(x):
    """A position-wise FFN that writes every output into one buffer it keeps: the check must
    not compare a later call's output with itself."""
    out = _BUFFER.get(x.shape)
    if out is None:
        out = _BUFFER[x.shape] = np.empty((x.shape[0], D_MODEL))
    out[...] = good(x)
    return out


_LAST = []


def returns_last_output(x):
    """Position-wise, but hands back the same array object every call, overwritten each time."""
    y = good(x)
    if _LAST and _LAST[0].shape == y.shape:
        _LAST[0][...] = y
        return _LAST[0]
    _LAST[:] = [y]
    return y


def raises_control_characters(x):
    raise ValueError("bad\x00byte\x1b[31m\nsecond line")


def hard_exits(x):
    """Ends the process at once: a CI gate must not pass because of it."""
    import os

    os._exit(0)


class Scaled:
    """A plain class: built with --impl-args, its instance is the FFN (position-wise)."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def __call__(self, x):
        return good(x) * self.scale


def make_good():
    """A factory (no parameter): returns the FFN."""
    return good


def make_nothing():
    """A factory that returns what is not callable."""
    return 42
