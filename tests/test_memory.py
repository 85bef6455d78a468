"""Memory (compute/memory.py): one layer's random weights within the budget, and sizes as people
write them (2GB, 512MiB)."""

from __future__ import annotations

import numpy as np
import pytest

from ffncli.compute.memory import check_budget, parse_size
from ffncli.errors import MemoryBudgetError
from ffncli.specs.spec import load_preset


def test_memory_budget_refuses_the_full_mixtral_layer():
    spec = load_preset("mixtral-8x7b")
    with pytest.raises(MemoryBudgetError, match=r"need 5\.64 GB in float32, over the 2\.00 GB"):
        check_budget(spec, np.dtype(np.float32), None)
    assert parse_size("2GB") == 2 * 10**9 and parse_size("512MiB") == 512 * 2**20
