"""Statistics over seeds (experiments/analysis/statistics.py) against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from experiments.analysis.statistics import (
    EQUIVALENCE_MARGIN,
    equivalence_test,
    finite,
    holm,
    km_median,
    mean_band,
    mean_ci95,
    paired_test,
)


@pytest.mark.parametrize(
    ("values", "mean", "half"),
    [
        # sd([1, 2, 3]) = 1, t(0.975, 2) = 4.3027: half-width 4.3027 / sqrt(3) = 2.4841
        ([1.0, 2.0, 3.0], 2.0, 2.4841),
        # missing values dropped
        ([1.0, None, 2.0, float("nan"), 3.0], 2.0, 2.4841),
        # [0.5, 0.7]: sd = 0.1414, t(0.975, 1) = 12.706: 12.706 * 0.1414 / 1.4142 = 1.2706
        ([0.5, 0.7], 0.6, 1.2706),
        ([0.7], 0.7, math.nan),  # a mean but no interval
        ([], math.nan, math.nan),
    ],
)
def test_mean_and_ci_by_hand(values: list, mean: float, half: float) -> None:
    got = mean_ci95(values)
    assert got == pytest.approx((mean, half), abs=1e-4, nan_ok=True)
    assert finite([1, None, float("nan"), 2.5]) == [1.0, 2.5]


@pytest.mark.parametrize(
    ("a", "b", "n", "diff", "p"),
    [
        # the common finite seeds: d = 1, 1.5, 3, sd² = 13/12, t = (11/6) / √(13/36) = 11/√13
        (
            {0: 1, 1: 2, 2: 4, 7: 9, 3: None}, {0: 0, 1: 0.5, 2: 1, 3: 1, 5: 1}, 3, 11 / 6,
            2 * stats.t.sf(11 / math.sqrt(13), 2),
        ),
        ({0: 0.7}, {0: 0.6}, 1, 0.1, math.nan),
        ({0: 0.7}, {1: 0.6}, 0, math.nan, math.nan),
        ({0: 0.7, 1: 0.6}, {0: 0.7, 1: 0.6}, 2, 0.0, math.nan),
        ({0: 0.7, 1: 0.6, 2: 0.8}, {0: 0.6, 1: 0.5, 2: 0.7}, 3, 0.1, math.nan),  # no spread
    ],
)  # fmt: skip
def test_the_paired_t_test_of_the_common_finite_seeds_and_where_it_is_undefined(
    a: dict, b: dict, n: int, diff: float, p: float
) -> None:
    """Its formula and sign on more seeds: test_compare_policies.test_tables_from_finished_runs."""
    result = paired_test(a, b)
    assert result.n == n and result.mean_diff == pytest.approx(diff, nan_ok=True)
    assert result.p_value == pytest.approx(p, nan_ok=True)


def _t2_cdf(t: float) -> float:
    """Student t's CDF with 2 degrees of freedom, closed form: 1/2 + t / (2 √(2 + t²))."""
    return 0.5 + t / (2 * math.sqrt(2 + t * t))


@pytest.mark.parametrize(
    ("a", "b", "n", "diff", "p"),
    [
        # d = 0.001, 0.003, 0.002 (seed 5 unpaired): mean 0.002, sd 0.001, se 0.001/√3;
        # t = (0.002 + 0.01)/se = 12√3 and (0.002 − 0.01)/se = −8√3: the larger one-sided p
        # is the upper one's, F(−8√3) = 1/2 − 8√3 / (2√194) = 0.0026: shown within ±0.01
        (
            {0: 0.801, 1: 0.703, 2: 0.902, 5: 0.5}, {0: 0.8, 1: 0.7, 2: 0.9}, 3, 0.002,
            _t2_cdf(-8 * math.sqrt(3)),
        ),
        # d = 0.01, 0.03, 0.02: mean 0.02, se 0.01/√3, t = (0.02 − 0.01)/se = √3: the upper
        # test's p F(√3) = 1/2 + √3/(2√5) = 0.887 (the lower's 1 − F(3√3) is smaller)
        ({0: 0.81, 1: 0.73, 2: 0.92}, {0: 0.8, 1: 0.7, 2: 0.9}, 3, 0.02, _t2_cdf(math.sqrt(3))),
        # the mirror image: d = −0.01, −0.03, −0.02, the lower test's p 1 − F(−√3) = 0.887
        ({0: 0.79, 1: 0.67, 2: 0.88}, {0: 0.8, 1: 0.7, 2: 0.9}, 3, -0.02, _t2_cdf(math.sqrt(3))),
        ({0: 0.7}, {0: 0.6}, 1, 0.1, math.nan),  # one seed
        ({0: 0.7, 1: 0.6}, {0: 0.7, 1: 0.6}, 2, 0.0, math.nan),  # no spread
        ({0: 0.7}, {1: 0.6}, 0, math.nan, math.nan),
    ],
)  # fmt: skip
def test_the_paired_tost_by_hand(a: dict, b: dict, n: int, diff: float, p: float) -> None:
    assert EQUIVALENCE_MARGIN == 0.01  # stated in docs/comparing.md
    result = equivalence_test(a, b)
    assert (result.n, result.margin) == (n, 0.01)
    assert result.mean_diff == pytest.approx(diff, nan_ok=True)
    assert result.p_value == pytest.approx(p, nan_ok=True)
    # a wider margin makes the same differences easier to call equivalent
    if n == 3 and not math.isnan(p):
        assert equivalence_test(a, b, margin=0.05).p_value < result.p_value


def test_holm_by_hand() -> None:
    # finite p's 0.01, 0.04, 0.03, 0.5 (m = 4): 4 · 0.01 = 0.04; 3 · 0.03 = 0.09;
    # 2 · 0.04 = 0.08, raised to the 0.09 before it; 1 · 0.5
    adjusted = holm([0.01, 0.04, None, 0.03, 0.5])
    assert adjusted == pytest.approx([0.04, 0.09, math.nan, 0.09, 0.5], nan_ok=True)
    assert holm([0.6, 0.3]) == pytest.approx([0.6, 0.6]) and holm([]) == []


def test_the_kaplan_meier_median_counts_the_runs_that_never_reach_the_target() -> None:
    # 3 of 5 reach it, at 300, 500, 700: the fraction reached is 0.2, 0.4, 0.6 there
    assert km_median([(300, 1200), (500, 1200), (None, 1200), (None, 1200), (700, 1200)]) == 700
    # one run stopped at round 400 without it: after 300 (4/5 left), at 500 3 at risk, 2 left:
    # 4/5 · 2/3 = 0.533 not reached yet, 0.467 < 1/2 reached: no median (the 2 of 4 reached
    # among the runs that ran past 400 would say 500)
    assert km_median([(300, 1000), (None, 400), (500, 1000), (None, 1000), (None, 1000)]) == (
        math.inf
    )
    assert km_median([(10, 50), (20, 50)]) == 10  # half by round 10
    assert km_median([(None, 50)]) == math.inf and math.isnan(km_median([]))


def test_mean_band_per_round():
    band = mean_band([{1: 0.1, 2: 0.2, 3: 0.3}, {1: 0.3, 2: 0.4}, {1: 0.2, 2: None, 4: 0.5}])
    assert band.x.tolist() == [1, 2, 3, 4]
    assert band.mean == pytest.approx([0.2, 0.3, 0.3, 0.5])
    # round 1: sd 0.1 over 3 seeds; round 2: sd 0.1414 over 2 seeds
    assert band.half_width[0] == pytest.approx(stats.t.ppf(0.975, 2) * 0.1 / math.sqrt(3))
    assert band.half_width[1] == pytest.approx(stats.t.ppf(0.975, 1) * 0.1)
    assert np.isnan(band.half_width[2:]).all()
    assert mean_band([]).x.size == 0
