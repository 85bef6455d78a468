"""The ground floor: value checks, guarded file reading and atomic writing, strict JSON and
YAML, and the frozen records every layer declares (``record``). Imports nothing of ffncli but
the errors, and never NumPy."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # typing has it from Python 3.11; a type checker's business alone
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: Any) -> Any:
        return lambda decorator: decorator

T = TypeVar("T")

# How many of a text's first tokens calibrate a threshold (--target-sparsity, perplexity's
# cuts): stated here, NumPy-free, so that the command line's help states it too;
# ffncli.analysis.calibration applies it.
CALIBRATION_TOKENS = 4096


@dataclass_transform(frozen_default=True)
def record(cls: type[T]) -> type[T]:
    """``@dataclass(frozen=True)``, as ffncli declares its records, for under half the cost of
    defining one (a class of 30 fields: 5.1M instructions against 12.4M): the same fields and
    ``__init__``, values compared, hashed and shown alike, and assigning or deleting a field
    after ``__init__`` raises ``FrozenInstanceError``. Dataclass compiles a frozen class's
    ``__eq__``, ``__hash__``, ``__repr__``, ``__setattr__`` and ``__delattr__`` from source for
    each class (the last two with every field's name in them, its ``__init__`` setting each
    field through ``object.__setattr__``); here they are written once, and ``__init__`` is
    dataclass's plain one. Every ``ffncli params`` paid that compiling at start-up
    (docs/measured.md, 2026-12-05). Type checkers see a frozen dataclass."""
    made = dataclass(eq=False, repr=False)(cls)
    for name, method in _METHODS.items():
        setattr(made, name, method)
    return made


_FIELDS: dict[type, tuple[str, ...]] = {}  # each record class's field names, in order


def _compared(self: Any) -> tuple[Any, ...]:
    names = _FIELDS.get(self.__class__)
    if names is None:  # once a class
        names = _FIELDS[self.__class__] = tuple(f.name for f in fields(self))
    return tuple([getattr(self, name) for name in names])


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is self.__class__:
        return _compared(self) == _compared(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(_compared(self))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
    return f"{self.__class__.__qualname__}({shown})"


def _setattr(self: Any, name: str, value: Any) -> None:
    """Each field set once, by ``__init__``; nothing else set, ever."""
    if name in self.__dict__ or name not in self.__dataclass_fields__:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


_METHODS = {"__eq__": _eq, "__hash__": _hash, "__repr__": _repr, "__setattr__": _setattr,
            "__delattr__": _delattr}
