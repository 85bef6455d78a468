"""ffncli.base.record: a frozen dataclass written for a sixth of the cost of defining one (its
methods written once, not compiled per class: start-up, issue 40) behaves as
@dataclass(frozen=True) does: the same __init__, equality, hash and repr, and no assignment or
deletion after __init__."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass

import pytest

from ffncli.base import record
from ffncli.specs.spec import LayerKind, ModelSpec, Overrides, load_preset


@record
class Point:
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


@pytest.mark.parametrize("change", [
    lambda p: setattr(p, "x", 2),
    lambda p: setattr(p, "z", "b"),
    lambda p: setattr(p, "w", 1),  # not a field: never set either
    lambda p: delattr(p, "x"),
    lambda p: delattr(p, "w"),
])
def test_nothing_is_assigned_or_deleted_after_init(change):
    p = Point(1, (2,), "a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        change(p)
    assert p == Point(1, (2,), "a")


def test_a_dataclass_still():
    p = Point(1, z="a")
    assert dataclasses.is_dataclass(p)
    assert [f.name for f in dataclasses.fields(p)] == ["x", "y", "z"]
    assert dataclasses.replace(p, x=5) == Point(5, (), "a")
    assert dataclasses.asdict(p) == {"x": 1, "y": (), "z": "a"}
    assert pickle.loads(pickle.dumps(p)) == p
    assert copy.deepcopy(p) == p and copy.copy(p) == p
    with pytest.raises(TypeError):
        Point()  # type: ignore[call-arg]


def test_specs_compare_hash_and_show_by_value():
    assert load_preset("base") == load_preset("base")
    assert hash(load_preset("base")) == hash(load_preset("base"))
    assert load_preset("base") != load_preset("tiny")
    assert len({LayerKind(), LayerKind(), LayerKind(name="dense decoder")}) == 2
    assert Overrides() == Overrides() and Overrides(d_ff=3) != Overrides()
    assert repr(Overrides(d_ff=3)).startswith("Overrides(d_model=None, d_ff=3, ")
    spec = load_preset("base")
    assert isinstance(spec, ModelSpec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.d_model = 3  # type: ignore[misc]
