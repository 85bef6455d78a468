"""The ground floor: value checks, guarded file reading and atomic writing, strict JSON and
YAML. Imports nothing of ffncli but the errors, and never NumPy."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

# How many of a text's first tokens calibrate a threshold (--target-sparsity, perplexity's
# cuts): stated here, NumPy-free, so that the command line's help states it too;
# ffncli.analysis.calibration applies it.
CALIBRATION_TOKENS = 4096


class Frozen:
    """The ``__eq__``, ``__hash__`` and ``__repr__`` that ``@dataclass(frozen=True)`` writes,
    written once: a record on ``params``' start-up is declared ``@dataclass(frozen=True,
    eq=False, repr=False)`` and inherits them, with the same values. Dataclass compiles those
    three from source for each class, about a third of the cost of defining one, which every
    ``ffncli params`` paid at start-up (docs/measured.md, 2026-12-05)."""

    __slots__ = ()

    def _compared(self) -> tuple[Any, ...]:
        names = _FIELDS.get(self.__class__)
        if names is None:  # once a class
            names = _FIELDS[self.__class__] = tuple(
                f.name for f in fields(self))  # type: ignore[arg-type]
        return tuple([getattr(self, name) for name in names])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._compared() == other._compared()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._compared())

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}"
                          for f in fields(self))  # type: ignore[arg-type]
        return f"{self.__class__.__qualname__}({shown})"


_FIELDS: dict[type, tuple[str, ...]] = {}  # each Frozen class's fields, in order
