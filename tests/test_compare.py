"""The comparison permute-check and run's summary share (analysis/compare.py): the bound
|got - expected| <= atol + rtol |expected|, inclusive, NaN equal to NaN only, and an atol that
scales with the outputs."""

from __future__ import annotations

import numpy as np
import pytest

from ffncli.analysis import compare


def test_compare_bound_is_inclusive_and_relative_to_expected():
    expected = np.array([[1.0, 0.0]])
    # |got - expected| <= atol + rtol * |expected|: 0.75 for 1.0 and 0.25 for 0.0, exactly.
    assert compare.compare(expected, np.array([[1.75, 0.25]]), rtol=0.5, atol=0.25).ok
    assert not compare.compare(expected, np.array([[1.75 + 2**-40, 0.0]]), 0.5, 0.25).ok
    assert not compare.compare(expected, np.array([[1.0, 0.25 + 2**-40]]), 0.5, 0.25).ok
    # rtol scales |expected|, not |got|: 0.9 > 0.25 + 0.5 * 1 (but < 0.25 + 0.5 * 1.9)
    assert not compare.compare(expected, np.array([[1.9, 0.0]]), 0.5, 0.25).ok


def test_compare_nan_equals_nan_only():
    nan = np.nan
    same = compare.compare(np.array([[nan, 1.0]]), np.array([[nan, 1.0]]), 0.0, 0.0)
    assert (same.ok, same.max_abs, same.max_rel, same.bit_identical) == (True, 0.0, 0.0, True)
    for expected, got in (([[nan, 1.0]], [[0.0, 1.0]]), ([[0.0, 1.0]], [[nan, 1.0]])):
        cmp = compare.compare(np.array(expected), np.array(got), 1.0, 1.0)
        assert (cmp.ok, cmp.max_abs, cmp.worst_row, cmp.bit_identical) == (False, np.inf, 0,
                                                                            False)


def test_compare_worst_row_deviations_and_bits():
    expected = np.zeros((3, 2))
    got = np.array([[0.0, 0.0], [0.0, 0.375], [0.25, 0.25]])
    cmp = compare.compare(expected, got, 0.0, 0.3)
    assert (cmp.ok, cmp.max_abs, cmp.worst_row) == (False, 0.375, 1)
    rel = compare.compare(np.array([[2.0, 0.0]]), np.array([[3.0, 0.0]]), 1.0, 0.0)
    assert (rel.ok, rel.max_rel, rel.max_abs) == (True, 0.5, 1.0)
    tiny = compare.compare(np.array([[1.0]]), np.array([[1.0 + 2**-52]]), 0.0, 1e-9)
    assert (tiny.ok, tiny.bit_identical, tiny.max_abs) == (True, False, 2**-52)


def test_a_wide_ffn_is_position_wise_in_float32():
    """LLaMA-3-8B's FFN (4096 -> 14336 -> 4096, SwiGLU) gives outputs near 10, and float32
    results of one token and of many differ by about 2e-5 on some BLAS: the default atol
    scales with the outputs, so permute-check and run's summary agree that it is
    position-wise (with a fixed atol of 1e-5 both said it was not)."""
    from ffncli.analysis.compare import compare, output_scale, tolerances
    from ffncli.compute import ffn as F
    from ffncli.compute.engine import Engine
    from ffncli.jobs.run import _lesson_checks

    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)

    engine = Engine(F.GatedWeights(w(4096, 14336), None, w(4096, 14336), None, w(14336, 4096),
                                   None), "silu")
    x = rng.standard_normal((8, 4096), dtype=np.float32)
    y = engine(x)
    assert 5 < output_scale(y) < 20
    rtol, atol = tolerances(np.float32, scale=output_scale(y))
    assert atol == pytest.approx(1e-5 * output_scale(y))
    assert compare(y, np.vstack([engine(x[i:i + 1]) for i in range(8)]), rtol, atol).ok
    assert _lesson_checks(engine, x, y) == {"same_as_one_position_at_a_time": True,
                                           "swapping_positions_only_swaps_the_outputs": True}
    import ffncli

    assert ffncli.permute_check(engine, x, trials=2).passed
