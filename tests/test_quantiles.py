"""The calibration's exact quantiles: np.quantile's default (linear) values to the bit, by
either method (``method=``), which the tests run through the parameter."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from ffncli.analysis import quantiles as module
from ffncli.analysis.quantiles import METHODS, quantile, quantiles


@pytest.fixture(params=METHODS)
def method(request):
    """Magnitudes' order statistics by either method, both with numpy's bits, at every
    size."""
    return request.param


def test_the_default_method_is_the_buckets_chosen_by_no_timing():
    """One default (the buckets: never much worse, docs/measured.md), stated in the
    signatures; nothing in the module times anything at run time (an earlier version timed
    both methods once per process and kept the faster)."""
    for f in (quantile, quantiles):
        assert inspect.signature(f).parameters["method"].default == "buckets"
    text = inspect.getsource(module)
    assert "perf_counter" not in text and "import time" not in text


@pytest.mark.parametrize("bad", ["bucket", "", "auto"])
def test_an_unknown_method_is_refused(bad):
    values = np.abs(np.random.default_rng(1).standard_normal(100)).astype(np.float32)
    with pytest.raises(ValueError) as err:
        quantiles(values, [0.5], method=bad)
    assert str(err.value) == f"method: expected one of buckets, partitions, got {bad!r}"


@pytest.mark.parametrize("n", [1, 2, 3, 10, 4097, 100_003])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_quantiles_are_numpys_to_the_bit(n, dtype, method):
    """One partition per target gives np.quantile's default (linear) values exactly, with the
    targets as an array (float64 results) and one float at a time (the values' dtype): ties
    (rounded values), both ends, and targets whose (n - 1) q falls on an index."""
    rng = np.random.default_rng(n)
    values = np.abs(rng.standard_normal(n)).astype(dtype)
    values[: n // 3] = np.round(values[: n // 3], 1)  # ties
    targets = [0.0, 0.1, 0.25, 0.4, 0.5, 0.65, 0.9, 0.999, 0.5 + 1e-9, 1 / 3]
    expected = [float(q) for q in np.quantile(values, targets)]
    assert quantiles(values.copy(), targets, method=method) == expected
    one_at_a_time = [float(np.quantile(values, q)) for q in targets]
    assert [quantile(values.copy(), q, method=method) for q in targets] == one_at_a_time
    if dtype == np.float32 and n > 3:  # the two really differ: float32 against float64
        assert one_at_a_time != expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("signs", ["negative", "negative zero", "zeros and infinity"])
def test_quantiles_of_values_with_a_sign_bit_are_numpys_too(dtype, signs, method):
    """Magnitudes are partitioned as integers (their bits' order); values that order
    otherwise (a negative value, -0.0, which ties with 0.0) are partitioned as floats."""
    rng = np.random.default_rng(7)
    values = np.abs(rng.standard_normal(5003)).astype(dtype)
    values[::7] = 0.0
    if signs == "negative":
        values[::3] *= -1
    elif signs == "negative zero":
        values[::5] = -0.0
    else:
        values[-3:] = np.inf
    targets = [0.0, 0.1, 0.25, 0.4, 0.5, 0.65, 0.9, 0.9995]
    got = quantiles(values.copy(), targets, method=method)
    assert got == [float(q) for q in np.quantile(values, targets)]
    assert [quantile(values.copy(), q, method=method) for q in targets] == \
        [float(np.quantile(values, q)) for q in targets]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("case", ["one value", "two values", "edges", "wide"])
def test_quantiles_counted_by_buckets_are_numpys(dtype, case, method):
    """Magnitudes are counted in buckets of their top bits and only the buckets that hold a
    wanted rank are partitioned: a rank and the one after it in two buckets, every value in
    one bucket, values from subnormal to infinity, give np.quantile's values exactly."""
    rng = np.random.default_rng(11)
    n = 20_001
    if case == "one value":
        values = np.full(n, 0.75, dtype=dtype)
    elif case == "two values":  # every wanted rank between the two: each in its own bucket
        values = np.where(np.arange(n) % 2 == 0, 1.0, 2.0).astype(dtype)
    elif case == "edges":  # the values around each target's index in neighbouring buckets
        values = np.repeat(np.array([1.0, 1.001, 1.5, 1.51, 3.0], dtype=dtype), n // 5 + 1)[:n]
        rng.shuffle(values)
    else:
        info = np.finfo(dtype)  # subnormal to near the largest value, every exponent
        powers = rng.uniform(np.log10(info.smallest_subnormal), info.maxexp * np.log10(2) - 1, n)
        values = (rng.uniform(1, 2, n) * 10.0 ** powers).astype(dtype)
        values[:5] = [0.0, np.inf, np.finfo(dtype).tiny / 4, np.finfo(dtype).max, 0.0]
    targets = [0.0, 0.1, 0.2, 0.25, 0.4, 0.5, 0.6, 0.65, 0.8, 0.9999, 0.99999]
    with np.errstate(invalid="ignore"):  # numpy's own: infinity less infinity, at the top
        expected = np.quantile(values, targets)
        one_at_a_time = [np.quantile(values, q) for q in targets]
        got = quantiles(values.copy(), targets, method=method)
        got_one = [quantile(values.copy(), q, method=method) for q in targets]
    np.testing.assert_array_equal(got, expected)  # NaN (numpy's too) equal to NaN, bit for bit
    np.testing.assert_array_equal(got_one, np.array(one_at_a_time, dtype=np.float64))
    assert np.isfinite(expected[:4]).all()


def test_quantiles_counted_block_by_block_are_numpys(monkeypatch):
    """Blocks of a few keys (a rank's bucket spread over many blocks, the last one short)
    give np.quantile's values exactly."""
    from ffncli.analysis import quantiles as module

    monkeypatch.setattr(module, "_BLOCK", 999)
    rng = np.random.default_rng(12)
    values = np.abs(rng.standard_normal(100_003)).astype(np.float32)
    values[::4] = np.round(values[::4], 2)  # ties, across blocks
    targets = [0.0, 0.25, 0.4, 0.5, 0.65, 0.999]
    assert quantiles(values.copy(), targets, method="buckets") == \
        [float(q) for q in np.quantile(values, targets)]


@pytest.mark.slow
def test_quantiles_need_little_memory_beside_the_values(method):
    """A layer's calibration magnitudes (Llama's 4,096 x 14,336 are 235 MB): the quantiles
    count and gather them block by block, so what they allocate beside them stays a few
    blocks, not copies of the whole (which made 3 times the values' size)."""
    import tracemalloc

    values = np.abs(np.random.default_rng(13).standard_normal(8_000_000)).astype(np.float32)
    tracemalloc.start()
    try:
        quantiles(values, [0.25, 0.4, 0.5, 0.65], method=method)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 * 2**20  # the values: 32 MB; a block's temporaries about 13 MB


def test_quantiles_let_the_values_go_at_once(method):
    """No reference cycle keeps the values (a layer's calibration: 25 MB for MiniLM) alive
    until the garbage collector next runs: relu-stats --layer all kept every layer's."""
    import gc
    import weakref

    values = np.abs(np.random.default_rng(5).standard_normal(10_000)).astype(np.float32)
    gone = weakref.ref(values)
    gc.disable()
    try:
        quantiles(values, [0.25, 0.4, 0.5, 0.65], method=method)
        quantile(values, 0.5, method=method)
        del values
        assert gone() is None
    finally:
        gc.enable()
