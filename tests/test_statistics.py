"""Statistics over seeds (experiments/analysis/statistics.py) against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from experiments.analysis.statistics import (
    ci95_halfwidth,
    finite,
    first_round_reaching,
    mean_band,
    mean_ci95,
    paired_test,
)


def test_ci_of_one_two_three_by_hand():
    # sd([1, 2, 3]) = 1, t(0.975, 2) = 4.3027: half-width 4.3027 / sqrt(3) = 2.4841
    mean, half = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(4.302652729749462 / math.sqrt(3))
    assert half == pytest.approx(2.4841, abs=1e-4)


def test_ci_of_two_values_by_hand():
    # [0.5, 0.7]: sd = 0.1414, t(0.975, 1) = 12.706: 12.706 * 0.1414 / 1.4142 = 1.2706
    assert ci95_halfwidth([0.5, 0.7]) == pytest.approx(1.27062047, abs=1e-6)


def test_one_value_has_a_mean_but_no_interval():
    mean, half = mean_ci95([0.7])
    assert mean == 0.7 and math.isnan(half)
    mean, half = mean_ci95([])
    assert math.isnan(mean) and math.isnan(half)


def test_missing_values_are_dropped():
    assert finite([1, None, float("nan"), 2.5]) == [1.0, 2.5]
    assert mean_ci95([1.0, None, 2.0, float("nan"), 3.0]) == mean_ci95([1.0, 2.0, 3.0])


def test_paired_t_test_matches_the_formula():
    a = {0: 0.70, 1: 0.74, 2: 0.69, 3: 0.75}
    b = {0: 0.60, 1: 0.66, 2: 0.65, 3: 0.62}
    d = np.array([a[s] - b[s] for s in range(4)])  # 0.10, 0.08, 0.04, 0.13
    t = d.mean() / (d.std(ddof=1) / math.sqrt(4))
    p = 2 * stats.t.sf(abs(t), 3)
    result = paired_test(a, b)
    assert result.n == 4
    assert result.mean_diff == pytest.approx(0.0875)
    assert result.p_value == pytest.approx(p)
    # by hand: sd(d) = 0.03775, t = 0.0875 / (0.03775 / 2) = 4.636 on 3 df: p = 0.0189
    assert t == pytest.approx(4.636, abs=1e-3)
    assert result.p_value == pytest.approx(0.0189, abs=1e-4)
    # the sign follows values - reference
    assert paired_test(b, a).mean_diff == pytest.approx(-0.0875)
    assert paired_test(b, a).p_value == pytest.approx(p)


def test_paired_test_uses_only_common_finite_seeds():
    a = {0: 1.0, 1: 2.0, 2: 4.0, 7: 9.0, 3: None}
    b = {0: 0.0, 1: 0.5, 2: 1.0, 3: 1.0, 5: 1.0}
    result = paired_test(a, b)
    assert result.n == 3
    d = np.array([1.0, 1.5, 3.0])
    t = d.mean() / (d.std(ddof=1) / math.sqrt(3))
    assert result.mean_diff == pytest.approx(d.mean())
    assert result.p_value == pytest.approx(2 * stats.t.sf(t, 2))


def test_paired_test_undefined_cases():
    one = paired_test({0: 0.7}, {0: 0.6})
    assert one.n == 1 and one.mean_diff == pytest.approx(0.1) and math.isnan(one.p_value)
    none = paired_test({0: 0.7}, {1: 0.6})
    assert none.n == 0 and math.isnan(none.mean_diff) and math.isnan(none.p_value)
    same = paired_test({0: 0.7, 1: 0.6}, {0: 0.7, 1: 0.6})
    assert same.mean_diff == 0.0 and math.isnan(same.p_value)
    shifted = paired_test({0: 0.7, 1: 0.6, 2: 0.8}, {0: 0.6, 1: 0.5, 2: 0.7})
    assert shifted.mean_diff == pytest.approx(0.1) and math.isnan(shifted.p_value)


def test_first_round_reaching():
    assert first_round_reaching([1, 2, 3, 4], [0.2, 0.61, 0.5, 0.7], 0.6) == 2
    assert first_round_reaching([5, 10], [0.2, 0.6], 0.6) == 10
    assert first_round_reaching([1, 2], [0.2, 0.3], 0.6) is None
    assert first_round_reaching([1, 2], [0.2, 0.3], None) is None


def test_mean_band_per_round():
    band = mean_band([{1: 0.1, 2: 0.2, 3: 0.3}, {1: 0.3, 2: 0.4}, {1: 0.2, 2: None, 4: 0.5}])
    assert band.x.tolist() == [1, 2, 3, 4]
    assert band.n.tolist() == [3, 2, 1, 1]
    assert band.mean == pytest.approx([0.2, 0.3, 0.3, 0.5])
    # round 1: sd 0.1 over 3 seeds; round 2: sd 0.1414 over 2 seeds
    assert band.half_width[0] == pytest.approx(stats.t.ppf(0.975, 2) * 0.1 / math.sqrt(3))
    assert band.half_width[1] == pytest.approx(stats.t.ppf(0.975, 1) * 0.1)
    assert np.isnan(band.half_width[2:]).all()
    assert mean_band([]).x.size == 0


def test_mean_band_equals_mean_ci95_round_by_round():
    """The all-rounds-at-once band against the per-round oracle, with gaps, None, NaN, inf."""
    rng = np.random.default_rng(7)
    curves = []
    for _ in range(5):
        curve = {}
        for r in range(1, 41):
            draw = rng.random()
            if draw < 0.15:
                continue  # round missing
            curve[r] = None if draw < 0.2 else float("nan") if draw < 0.25 else rng.normal()
        curve[41] = float("inf")
        curves.append(curve)
    band = mean_band(curves)
    for i, r in enumerate(band.x):
        mean, half = mean_ci95(curve.get(r) for curve in curves)
        assert band.n[i] == len(finite(curve.get(r) for curve in curves))
        np.testing.assert_allclose([band.mean[i], band.half_width[i]], [mean, half], rtol=1e-12)
