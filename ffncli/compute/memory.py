"""How much memory work may take: the budget for random weights (``--max-memory``, never more
than is free), the engine's buffers per chunk, and a one-line refusal of work that would not
fit instead of a MemoryError or the out-of-memory killer later."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np

from ffncli.base.validate import LIBRARY_SIZING, Sizing, brief
from ffncli.compute import memory as W
from ffncli.counting.parts import ffn_params
from ffncli.errors import MemoryBudgetError, WeightsError
from ffncli.formats.tokens import TokenInput
from ffncli.specs.spec import ModelSpec

DEFAULT_BUDGET = 2 * 10**9
EXPERT_OVERHEAD = 1024  # bytes: one expert's weight objects and array headers, measured ~700


# ---------------------------------------------------------------------------------------------
# Memory budget.


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


MAX_SIZE = 2**53  # bytes: 9 PB, past any machine's memory (the largest whole option value)


def parse_size(text: str, names: Sizing = LIBRARY_SIZING) -> int:
    """'2GB', '512MB', '1.5G', '1000000' -> bytes (powers of 1000; KiB, MiB, GiB of 1024), from
    1 to MAX_SIZE. Computed exactly (a Fraction, not a float: 400 digits would overflow to
    infinity), the digits' length bounded before they are turned into a number."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)\s*", text.lower())
    if not m:
        raise WeightsError(f"{names.value}: expected a size such as 2GB or 512MB, "
                           f"got {brief(text)}")
    unit = m.group(2).rstrip("b")
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
             "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}[unit]
    whole, _, fraction = m.group(1).partition(".")
    whole = whole.lstrip("0")
    # more than 20 whole digits is past MAX_SIZE whatever the unit; fraction digits past 24
    # move the size by less than a byte
    size = MAX_SIZE + 1 if len(whole) > 20 else \
        int(Fraction(f"{whole or 0}.{fraction[:24] or 0}") * scale)
    if size < 1:
        raise WeightsError(f"{names.value}: expected a size above 0, got {brief(text)}")
    if size > MAX_SIZE:
        raise WeightsError(f"{names.value}: expected a size of at most 2**53 bytes "
                           f"(9 PB), got {brief(text)}")
    return size


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 10**8 else f"{n / 1e6:.2f} MB"


def check_budget(spec: ModelSpec, dtype: np.dtype, budget: int | None,
                 names: Sizing = LIBRARY_SIZING) -> int:
    """Refuse random weights that would not fit; returns the bytes they need (with each
    expert's own bookkeeping: a million tiny experts are mostly Python objects)."""
    experts = spec.ffn.experts if spec.ffn.is_moe else 0
    need = ffn_params(spec.d_model, spec.ffn) * np.dtype(dtype).itemsize \
        + experts * EXPERT_OVERHEAD
    free = available_memory()
    limit = memory_limit(budget)
    assert limit is not None  # a default is given
    if need > limit:
        raise MemoryBudgetError(
            f"the random weights of one FFN layer of {spec.name} need {_size(need)} in "
            f"{np.dtype(dtype).name}, over the {_size(limit)} budget; shrink it "
            f"({names.shape}) or raise {names.budget}"
            + ("" if free is None or need <= free else
               f" (only {_size(free)} of memory is free)")
        )
    return need


def memory_limit(budget: int | None, default: int | None = DEFAULT_BUDGET) -> int | None:
    """The budget in force: ``--max-memory`` (else ``default``), never more than is free."""
    limit = default if budget is None else budget
    free = available_memory()
    if free is not None:
        limit = free if limit is None else min(limit, free)
    return limit


def check_working_set(what: str, need: int, how: str) -> None:
    """Refuse work whose buffers would not fit in the memory that is free: one line saying
    what to change, instead of a MemoryError (or the system's out-of-memory killer) later."""
    free = available_memory()
    if free is not None and need > free:
        raise MemoryBudgetError(f"{what} needs {_size(need)} of memory, over the "
                                f"{_size(free)} that is free; {how}")


def engine_bytes(d_model: int, d_ff: int, experts: int, dtype: np.dtype,
                 chunk_tokens: int) -> int:
    """The engine's buffers for one chunk (hidden, gate, input, two outputs) and the
    per-unit counters of relu-stats (three int64 per unit of every expert)."""
    item = np.dtype(dtype).itemsize
    return chunk_tokens * (2 * d_ff + 4 * d_model) * item + 24 * d_ff * experts


def check_in_memory(tokens: TokenInput, dtype: np.dtype, copies: int, what: str) -> None:
    """Refuse to hold ``copies`` copies of the whole input in memory when they would not fit."""
    need = copies * tokens.n_tokens * tokens.d_model * np.dtype(dtype).itemsize
    W.check_working_set(f"{what} on {tokens.n_tokens:,} tokens of d_model {tokens.d_model:,}",
                        need, "give fewer or narrower tokens")
