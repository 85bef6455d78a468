"""tools/mutants.py's mutants apply to today's source: a change that moves or rewrites a line
a mutant names rewrites the mutant in the same commit (a stale one is never run, and the code
it covered loses its mutation coverage unseen)."""

from __future__ import annotations

import pytest
from helpers.tools import tool


@pytest.fixture(scope="module")
def mutants():
    with tool("mutants") as module:
        yield module


@pytest.mark.slow
def test_every_mutant_applies_to_todays_source(mutants):
    found = [f"{i} {m.file}: {m.what}: {why}" for i, m, why in mutants.stale()]
    assert found == [], "stale mutants in tools/mutants.py: rewrite them to the code's new place"


def test_a_mutant_whose_line_moved_or_does_not_compile_is_stale(mutants):
    source = "def f(x):\n    return x + 1\n"
    moved = mutants.Mutant("m.py", "return x + 2", "return x", "moved")
    broken = mutants.Mutant("m.py", "return x + 1", "return x +", "broken")
    twice = mutants.Mutant("m.py", "x", "y", "twice")
    good = mutants.Mutant("m.py", "x + 1", "x - 1", "good")
    assert mutants.applied(source, moved) == "fragment not found"
    assert mutants.applied(source, broken).startswith("the mutant does not compile")
    assert mutants.applied(source, twice) == "fragment found 2 times"
    assert mutants.applied(source, good) == source.index("x + 1")
