"""permute-check on a function under test, through the guard, as the tests of the properties
and of the JUnit report call it; and the options that check one of tests/impls from the
command line (the guard's and the report's tests)."""

from __future__ import annotations

from ffncli.analysis import guard, properties


def run_check(fn, x, **kw):
    return properties.permute_check(guard.guarded(fn, "f", x.dtype), x, target="f",
                                input_shape=x.shape, **kw)


IMPL = ("--d-model", "6", "--random", "20")
