"""One layer's FFN built for a command (compute/build.py): the chunk of tokens fits the memory
that is free, or one error line."""

from __future__ import annotations

import numpy as np
import pytest


def test_a_very_wide_hidden_layer_gets_smaller_chunks(monkeypatch):
    """d_ff so wide that 256 tokens of hidden buffer would not fit: fewer tokens per chunk;
    not even one token: one error line."""
    from ffncli.compute import build as runner
    from ffncli.compute import memory
    from ffncli.errors import MemoryBudgetError
    from ffncli.specs.spec import Overrides, apply_overrides, load_preset

    spec = apply_overrides(load_preset("tiny"), Overrides(d_ff=1_000_000))
    # 8,000,064 bytes a token (hidden and gate, float32) + 24 MB of per-unit counters: with
    # 200 MB free, chunks use at most half: 8 tokens (88 MB), not 16 (152 MB).
    monkeypatch.setattr(memory, "available_memory", lambda: 200 * 10**6)
    assert runner._fitting_chunk(spec, np.dtype(np.float32)) == 8
    monkeypatch.setattr(memory, "available_memory", lambda: 10**6)
    with pytest.raises(MemoryBudgetError, match=r"^one FFN layer of tiny \(d_model 4, d_ff "
                       r"1,000,000\) on one token needs 32\.00 MB of memory, over the 1\.00 MB "
                       r"that is free; shrink it"):
        runner._fitting_chunk(spec, np.dtype(np.float32))
