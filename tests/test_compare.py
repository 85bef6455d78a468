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


@pytest.mark.slow
def test_a_wide_ffn_is_position_wise_in_float32():
    """LLaMA-3-8B's FFN (4096 -> 14336 -> 4096, SwiGLU, weights of std 0.02 as real models
    have) gives outputs near 10, and float32 results of one token and of many differ by about
    2e-5 on some BLAS: the default atol scales with each output column, so permute-check and
    run's summary agree that it is position-wise (with a fixed atol of 1e-5 both said it was
    not)."""
    from ffncli.analysis.compare import column_scale, compare, tolerances
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
    assert 5 < np.abs(y).max() < 20
    one = np.vstack([engine(x[i:i + 1]) for i in range(8)])
    rtol, atol = tolerances(np.float32)
    assert (rtol, atol) == (1.3e-6, 1e-5)
    assert compare(y, one, rtol, atol, column_scale(y)).ok
    assert _lesson_checks(engine, x, y) == {"same_as_one_position_at_a_time": True,
                                           "swapping_positions_only_swaps_the_outputs": True}
    import ffncli

    assert ffncli.permute_check(engine, x, trials=2).passed


# --- the default atol, per output column ----------------------------------------------------


def test_column_scale_is_each_column_s_largest_value_at_least_the_lower_median_and_1():
    y = np.array([[0.5, -3.0, 1e6, 2.0, np.nan, 0.1],
                  [0.2, 1.0, -1e6, -4.0, 7.0, np.inf]])
    # largest finite |value| per column: 0.5, 3, 1e6, 4, 7, 0.1; their lower median 3
    np.testing.assert_array_equal(compare.column_scale(y), [[3.0, 3.0, 1e6, 4.0, 7.0, 3.0]])
    np.testing.assert_array_equal(compare.column_scale(np.array([[1e12, 0.5]])), [[1e12, 1.0]])
    np.testing.assert_array_equal(compare.column_scale(np.full((3, 2), 0.01)), [[1.0, 1.0]])
    assert compare.column_scale(np.zeros((0, 3))).shape == (1, 3)


def _with_channel(y: np.ndarray, value: float) -> np.ndarray:
    out = y.copy()
    out[:, 0] = value
    return out


@pytest.mark.parametrize("channel,leak", [(1e5, 0.05), (1e6, 1e-3), (1e12, 1e-3)])
def test_an_outlier_channel_does_not_hide_a_leak_in_the_others(channel, leak):
    """Outputs of 16 tokens with one channel of ``channel`` (LLMs' massive activations, or a
    constant column), and, in every other channel, ``leak`` of the tokens' mean added: the
    one-token results differ from the many-token ones by ``leak`` * |y_i - mean|, which a
    tolerance scaled by the largest |output| of all (1e5 * 1e-5 = 1) let pass."""
    rng = np.random.default_rng(1)
    y = rng.standard_normal((16, 8))
    leaky = y + leak * y.mean(axis=0)  # many tokens
    alone = y + leak * y  # each token alone: its own mean
    expected, got = _with_channel(leaky, channel), _with_channel(alone, channel)
    rtol, atol = compare.tolerances(np.float32)
    cmp = compare.compare(expected, got, rtol, atol, compare.column_scale(expected))
    assert not cmp.ok
    assert cmp.max_abs == pytest.approx(leak * np.abs(y - y.mean(axis=0))[:, 1:].max())
    everywhere = atol * max(1.0, channel)  # the old rule: one atol, from the largest output
    assert compare.compare(expected, got, rtol, everywhere).ok
    # without the leak, float32 rounding of the outputs passes beside the channel
    rounded = _with_channel(y, channel).astype(np.float32).astype(np.float64)
    assert compare.compare(_with_channel(y, channel), rounded, rtol, atol,
                           compare.column_scale(_with_channel(y, channel))).ok


def test_a_leak_inside_a_huge_column_is_within_its_relative_tolerance():
    """What the rule cannot see, stated: in a column of 1e12 a change below rtol * 1e12
    (1.3e6 in float32, which cannot even hold 1e12 + 1) passes; in the other columns the same
    change fails."""
    expected = np.ones((4, 2))
    expected[:, 0] = 1e12
    got = expected + np.array([[1e5, 0.0]])
    scale = compare.column_scale(expected)
    assert compare.compare(expected, got, 1.3e-6, 1e-5, scale).ok
    assert not compare.compare(expected, expected + np.array([[0.0, 1e-3]]), 1.3e-6, 1e-5,
                               scale).ok


# --- max rel ---------------------------------------------------------------------------------


def test_max_rel_leaves_out_values_within_the_atol():
    """An MoE whose capacity drops a token gives exact zeros: |got - expected| / 0 was
    printed as 1.8e+308 (NumPy's nan_to_num of infinity). Now the ratio is taken where
    |expected| is above its absolute tolerance."""
    expected = np.array([[0.0, 2.0, 1e-9], [4.0, 0.0, 8.0]])
    got = np.array([[0.5, 3.0, 1.0], [4.0, 0.0, 8.0]])
    cmp = compare.compare(expected, got, 0.0, 1e-5)
    assert (cmp.ok, cmp.max_abs, cmp.max_rel) == (False, 1.0, 0.5)  # 1/2, not 0.5/0 or 1/1e-9
    only_zeros = compare.compare(np.zeros((2, 2)), np.array([[0.0, 1.0], [0.0, 0.0]]), 0.0,
                                 1e-5)
    assert (only_zeros.max_abs, only_zeros.max_rel) == (1.0, None)  # no ratio means anything
    zeros = compare.compare(np.zeros((1, 2)), np.zeros((1, 2)), 0.0, 1e-5)
    assert (zeros.ok, zeros.max_rel) == (True, None)
    same = compare.compare(np.ones((1, 2)), np.ones((1, 2)), 0.0, 1e-5)
    assert (same.ok, same.max_rel) == (True, 0.0)
    scaled = compare.compare(np.array([[5.0, 1e6]]), np.array([[6.0, 1e6]]), 0.0, 1e-5,
                             np.array([[1e6, 1e6]]))  # |5| is within atol * 1e6 = 10
    assert (scaled.max_abs, scaled.max_rel) == (1.0, 0.0)
    inf = compare.compare(np.array([[1.0]]), np.array([[np.inf]]), 0.0, 1e-5)
    assert (inf.ok, inf.max_rel, inf.nonfinite) == (False, np.inf, True)
    assert compare.compare(np.array([[np.inf, -np.inf]]), np.array([[np.inf, -np.inf]]), 0.0,
                           0.0).ok
