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


# ---------------------------------------------------------------------------------------------
# Hostile sizes: computed exactly (no float to overflow), bounded, one line each.

_TOO_BIG = "option --max-memory: expected a size of at most 2**53 bytes (9 PB), got "
HOSTILE_SIZES = [  # (id, --max-memory, its error line)
    ("400-digits", "9" * 400, _TOO_BIG + "'" + "9" * 27 + "..." + "9" * 28 + "'"),
    ("400-digits-tib", "9" * 400 + "TiB", _TOO_BIG + "'" + "9" * 27 + "..." + "9" * 25 + "TiB'"),
    ("5000-digits", "1" * 5000, _TOO_BIG + "'" + "1" * 27 + "..." + "1" * 28 + "'"),
    ("one-past-2**53", "9007199254740993", _TOO_BIG + "'9007199254740993'"),
    ("11-pb-in-tb", "11000TB", _TOO_BIG + "'11000TB'"),
    ("tiny-fraction", "0." + "0" * 300 + "1",
     "option --max-memory: expected a size above 0, got '0." + "0" * 25 + "..." + "0" * 27
     + "1'"),
]


@pytest.mark.parametrize("size,line", [c[1:] for c in HOSTILE_SIZES],
                         ids=[c[0] for c in HOSTILE_SIZES])
def test_hostile_max_memory_is_one_line(cli, size, line):
    r = cli("run", "--preset", "tiny", "--random", "2", "--max-memory", size)
    assert (r.code, r.out, r.err) == (2, "", f"error: {line}\n")

