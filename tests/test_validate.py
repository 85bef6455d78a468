"""Values checked in one place (base/validate.py): a value shown in a message is cut short."""

from __future__ import annotations

from ffncli.base.validate import brief


def test_brief_cuts_long_values_short():
    assert brief("x" * 100) == "'" + "x" * 27 + "..." + "x" * 28 + "'"
    assert brief(list(range(100))) == "[0, 1, 2, 3, 4, 5, ...]"
    assert brief({"a": [[[1]]]}) == "{'a': [[...]]}"
    assert brief(10**100) == "1" + "0" * 17 + "..." + "0" * 19
    assert brief(float("nan")) == "nan" and brief(True) == "True"
