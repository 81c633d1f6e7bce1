"""Tests of the BC / BN2 / POC baselines and best-effort packing (paper Section V-A)."""

import itertools

import numpy as np
import pytest
from scipy import stats

from fedcgd_strategy.selectors import (
    PACK_RULES,
    best_effort_pack,
    best_score_first,
    power_of_choice,
)

INF = np.inf


def _slow_pack(order, need, total, rule):
    """Obviously-correct reference of best-effort packing."""
    taken, used = set(), 0.0
    for dev in order:
        if need[dev] == INF:
            continue
        if used + need[dev] <= total:
            taken.add(dev)
            used += need[dev]
        elif rule == "stop":
            break
    return taken


def _slow_rank(scores, available):
    """Reference ranking: descending score, ties by lowest index, NaN / unavailable left out."""
    devs = [i for i in range(len(scores)) if available[i] and not np.isnan(scores[i])]
    return sorted(devs, key=lambda i: (-scores[i], i))


NEED = [3.0, 5.0, 2.0, INF, 1.0]


@pytest.mark.parametrize(
    ("order", "need", "total", "rule", "expected"),
    [
        # budget 9: take 0 (3), 1 (3 + 5 = 8); 2 needs 8 + 2 = 10 > 9: "stop" ends there;
        # "skip" passes 2 and the infeasible 3, takes 4 (8 + 1 = 9 <= 9)
        ([0, 1, 2, 3, 4], NEED, 9.0, "stop", [0, 1]),
        ([0, 1, 2, 3, 4], NEED, 9.0, "skip", [0, 1, 4]),
        # an infeasible device is never a reason to stop: 3 passed over, 4 (1 Hz), 0 (4 Hz)
        ([3, 4, 0], NEED, 4.0, "stop", [0, 4]),
        ([1, 0], [0.0, 1.0], 0.0, "stop", []),  # zero budget
        ([1, 0], [0.0, 1.0], 0.0, "skip", [0]),
        ([], [0.0, 1.0], 5.0, "stop", []),  # empty order
    ],
)
def test_pack_hand_cases(order, need, total, rule, expected):
    mask = best_effort_pack(np.array(order, int), np.array(need), total, rule)
    assert np.flatnonzero(mask).tolist() == expected and mask.size == len(need)
    with pytest.raises(ValueError, match="stop, skip"):
        best_effort_pack(order, need, total, "greedy")


def test_pack_matches_slow_reference():
    rng = np.random.default_rng(11)
    for _ in range(300):
        v = int(rng.integers(1, 12))
        need = rng.uniform(0.1, 3.0, size=v)
        need[rng.random(v) < 0.2] = INF
        order = rng.permutation(v)[: int(rng.integers(0, v + 1))]
        total = float(rng.uniform(0, 10))
        for rule in PACK_RULES:
            mask = best_effort_pack(order, need, total, rule)
            assert set(np.flatnonzero(mask).tolist()) == _slow_pack(order, need, total, rule)
            assert need[mask].sum() <= total + 1e-12


def test_best_channel_and_poc_hand_cases_with_ties_nan_and_unavailable():
    gain = np.array([1.0, 5.0, 5.0, 3.0, np.nan, 10.0])
    avail = np.array([True, True, True, True, True, False])
    need = np.ones(6)
    # available, non-NaN, by gain descending, ties to the lowest index: 1, 2, 3, 0
    # budget 3 Hz -> {1, 2, 3}; device 5 (best gain, unavailable) and 4 (NaN) never taken
    np.testing.assert_array_equal(
        best_score_first(avail, gain, need, 3.0), [False, True, True, True, False, False]
    )
    # budget 1 Hz: the tie between 1 and 2 goes to the lower index
    np.testing.assert_array_equal(
        best_score_first(avail, gain, need, 1.0), [False, True, False, False, False, False]
    )
    # POC with all candidates ranks by loss: candidates = available with a loss: 0, 1, 3;
    # by loss: 1, 3, 0; 2 Hz -> {1, 3}
    loss = np.array([0.5, 2.0, np.nan, 1.0, 3.0])
    avail = np.array([True, True, True, True, False])
    for d in (0, 3, 10):
        mask = power_of_choice(avail, loss, np.ones(5), 2.0, d, np.random.default_rng(0))
        np.testing.assert_array_equal(mask, [False, True, False, True, False])


def test_ranked_selectors_match_slow_reference_and_poc_never_takes_bad_devices():
    rng = np.random.default_rng(5)
    for _ in range(300):
        v = int(rng.integers(1, 15))
        scores = rng.integers(0, 4, size=v).astype(float)  # many ties on purpose
        scores[rng.random(v) < 0.1] = np.nan
        avail = rng.random(v) < 0.7
        need = rng.uniform(0.1, 2.0, size=v)
        need[rng.random(v) < 0.2] = INF
        total = float(rng.uniform(0, 6))
        for rule in PACK_RULES:
            mask = best_score_first(avail, scores, need, total, rule=rule)
            expect = _slow_pack(_slow_rank(scores, avail), need, total, rule)
            assert set(np.flatnonzero(mask).tolist()) == expect
            assert not np.any(mask & ~avail)
            assert not np.any(mask & ~np.isfinite(need))
            assert not np.any(mask & np.isnan(scores))
            # POC (scores as losses): same seed, same draw; at most V' = 4 of the eligible
            a, b = (
                power_of_choice(avail, scores, need, total, 4, np.random.default_rng(7), rule)
                for _ in range(2)
            )
            np.testing.assert_array_equal(a, b)
            assert not np.any(a & ~(avail & np.isfinite(need) & ~np.isnan(scores)))
            assert a.sum() <= 4


def test_poc_candidate_draw_is_uniform():
    # 4 available devices, V' = 2, budget for 1 device: the scheduled device is the higher-loss
    # device of a uniformly drawn pair. With losses 0 < 1 < 2 < 3 device k is taken iff it is
    # in the pair and every other member has a lower loss: P(k) = k / C(4, 2) = k / 6.
    loss = np.array([0.0, 1.0, 2.0, 3.0])
    avail = np.ones(4, dtype=bool)
    need = np.ones(4)
    n = 6000
    counts = np.zeros(4)
    rng_one = np.random.default_rng(1)
    for _ in range(n):
        counts += power_of_choice(avail, loss, need, 1.0, 2, rng_one)
    pairs = dict.fromkeys(itertools.combinations(range(4), 2), 0)
    rng_pair = np.random.default_rng(2)
    for _ in range(n):
        both = power_of_choice(avail, loss, need, 2.0, 2, rng_pair)  # the whole pair fits
        pairs[tuple(np.flatnonzero(both).tolist())] += 1
    expected = n * np.array([0.0, 1.0, 2.0, 3.0]) / 6.0
    assert counts[0] == 0
    assert stats.chisquare(counts[1:], expected[1:]).pvalue > 1e-3
    assert stats.chisquare(list(pairs.values())).pvalue > 1e-3  # 6 pairs, uniform
