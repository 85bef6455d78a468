"""ffncli.base.Frozen: the __eq__, __hash__ and __repr__ of a frozen dataclass, written once,
give what @dataclass(frozen=True) writes for each class (start-up, issue 40)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from ffncli.base import Frozen
from ffncli.specs.spec import LayerKind, ModelSpec, Overrides, load_preset


@dataclass(frozen=True, eq=False, repr=False)
class Point(Frozen):
    x: int
    y: tuple[int, ...] = ()
    z: str | None = None


@dataclass(frozen=True)
class Twin:  # what dataclass writes itself
    x: int
    y: tuple[int, ...] = ()
    z: str | None = None


VALUES = [(1, (), None), (1, (2, 3), "a"), (2, (2, 3), "a"), (1, (2,), "a'b")]


@pytest.mark.parametrize("a", VALUES)
@pytest.mark.parametrize("b", VALUES)
def test_equality_and_hash_as_dataclass_writes_them(a, b):
    assert (Point(*a) == Point(*b)) == (Twin(*a) == Twin(*b))
    assert (Point(*a) != Point(*b)) == (Twin(*a) != Twin(*b))
    assert hash(Point(*a)) == hash(Twin(*a))  # both hash the tuple of the fields


@pytest.mark.parametrize("a", VALUES)
def test_repr_as_dataclass_writes_it(a):
    assert repr(Point(*a)) == repr(Twin(*a)).replace("Twin(", "Point(", 1)


def test_another_class_is_never_equal():
    assert Point(1) != Twin(1)
    assert Point(1).__eq__(Twin(1)) is NotImplemented


def test_still_frozen():
    p = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.x  # type: ignore[misc]


def test_specs_compare_hash_and_show_by_value():
    assert load_preset("base") == load_preset("base")
    assert hash(load_preset("base")) == hash(load_preset("base"))
    assert load_preset("base") != load_preset("tiny")
    assert len({LayerKind(), LayerKind(), LayerKind(name="dense decoder")}) == 2
    assert Overrides() == Overrides() and Overrides(d_ff=3) != Overrides()
    assert repr(Overrides(d_ff=3)).startswith("Overrides(d_model=None, d_ff=3, ")
    assert isinstance(load_preset("base"), ModelSpec)
