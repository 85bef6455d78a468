"""An FFN's hidden layer as the analyses read it: the one FFN on every token, or each chosen
expert's on the tokens routed to it, and its activation in place."""

from __future__ import annotations

import numpy as np

from ffncli.compute.engine import Engine, activate_inplace
from ffncli.compute.ffn import ExpertWeights, MoEWeights, dispatch, route


def expert_activation(ffn: Engine, pre: np.ndarray) -> np.ndarray:
    """act(pre) in place (pre is a fresh array of the caller's)."""
    activate_inplace(pre, ffn.act)
    return pre


def expert_inputs(ffn: Engine, x: np.ndarray, room: list[int] | None = None
                  ) -> list[tuple[int, ExpertWeights, np.ndarray]]:
    """(expert, its weights, token rows): the one FFN on all rows, or each chosen expert's
    tokens (``room``: the places capped experts have left, for a chunk of a longer input)."""
    p = ffn.weights
    if not isinstance(p, MoEWeights):
        return [(0, p, np.arange(x.shape[0]))]
    order, _ = route(x, p)
    return [(e, p.experts[e], rows) for e, rows, _ in dispatch(order, p, room)]
