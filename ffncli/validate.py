"""Numbers given on the command line, checked once: finite, and in the range they mean.

Typer turns ``--rtol nan`` into a float NaN and ``--beta inf`` into infinity; comparisons
with NaN are false, so ``value <= 0`` lets NaN through. Every numeric option goes through
:func:`number` instead. No NumPy here: ``params`` uses it too.
"""

from __future__ import annotations

import math

from ffncli.errors import FfnError, InputError


def number(option: str, value: float, *, positive: bool = False,
           error: type[FfnError] = InputError) -> float:
    """``value`` if it is a finite number >= 0 (> 0 with ``positive``), else one error line
    naming the option: ``option --rtol: expected a number >= 0, got nan``."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0 or (positive and value == 0)):
        raise error(f"option {option}: expected a number {'>' if positive else '>='} 0, "
                    f"got {value}")
    return value
