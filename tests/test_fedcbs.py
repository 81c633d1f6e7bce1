"""Tests of QCID and Fed-CBS sequential sampling under a bandwidth budget."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from fedcgd_strategy.selectors import (
    QCID_FLOOR,
    FedCBSState,
    cucb_first_pick_probabilities,
    fedcbs_select,
    qcid_with_each_candidate,
    sequential_pick_probabilities,
)


def qcid(p, n) -> float:
    """Oracle: QCID(B) = Σ_c (Σ_k n_k p_{k,c} / Σ_k n_k − 1/C)² by its definition (Fed-CBS)."""
    p, n = np.asarray(p, dtype=float), np.asarray(n, dtype=float)
    return float(np.sum(((n @ p) / n.sum() - 1.0 / p.shape[1]) ** 2))


@pytest.mark.parametrize(
    ("p", "n", "expected"),
    [
        # one client [1, 0]: (1 − 0.5)² + (0 − 0.5)² = 0.5
        ([[1.0, 0.0]], [5.0], 0.5),
        # group = [0.75, 0.25] -> 2 · 0.25² = 0.125
        ([[1.0, 0.0], [0.0, 1.0]], [3.0, 1.0], 0.125),
        # three single-class clients of equal size cover C = 3 uniformly: group = [1/3]*3
        (np.eye(3), [4.0, 4.0, 4.0], 0.0),
    ],
)
def test_qcid_by_hand(p, n, expected):
    p, n = np.asarray(p), np.asarray(n)  # the group less its last client, then with it
    with_last = qcid_with_each_candidate(n[:-1] @ p[:-1], n[:-1].sum(), p[-1:], n[-1:])
    assert qcid(p, n) == pytest.approx(expected, abs=1e-15)
    assert with_last[0] == pytest.approx(expected, abs=1e-15)


def test_qcid_with_each_candidate_matches_qcid_of_the_union():
    rng = np.random.default_rng(1)
    c = 5
    group_p = rng.dirichlet(np.ones(c), size=3)
    group_n = np.array([10.0, 20.0, 5.0])
    cand_p = rng.dirichlet(np.ones(c), size=4)
    cand_n = np.array([7.0, 1.0, 30.0, 12.0])
    got = qcid_with_each_candidate(group_n @ group_p, group_n.sum(), cand_p, cand_n)
    for k in range(4):
        union_p = np.vstack([group_p, cand_p[k]])
        union_n = np.append(group_n, cand_n[k])
        assert got[k] == pytest.approx(qcid(union_p, union_n), abs=1e-14)
    # empty group: QCID of each candidate alone
    alone = qcid_with_each_candidate(np.zeros(c), 0.0, cand_p, cand_n)
    for k in range(4):
        assert alone[k] == pytest.approx(qcid(cand_p[k : k + 1], cand_n[k : k + 1]))


def test_first_and_sequential_pick_probabilities_hand_values_floor_and_large_beta():
    q = [0.5, 0.125, 0.5]
    # t = 1: ln 1 = 0, no exploration: weights 1/q = [2, 8, 2] -> [1/6, 2/3, 1/6]
    np.testing.assert_allclose(
        cucb_first_pick_probabilities(q, [0, 0, 0], 1, 10.0), [1 / 6, 2 / 3, 1 / 6]
    )
    # t = 3, T = [1, 2, 0] (0 floored to 1), λ = 10:
    # bonus(T) = 10 sqrt(3 ln 3 / (2 T)): T = 1 -> 12.8371, T = 2 -> 9.0772
    b1 = 10 * math.sqrt(3 * math.log(3) / 2)
    b2 = 10 * math.sqrt(3 * math.log(3) / 4)
    w = np.array([2 + b1, 8 + b2, 2 + b1])
    np.testing.assert_allclose(cucb_first_pick_probabilities(q, [1, 2, 0], 3, 10.0), w / w.sum())
    assert b1 == pytest.approx(12.8371, abs=1e-4)
    # QCID 0 is floored at 1e-12: 1/QCID dominates any bonus (λ sqrt(3 ln t / 2) <= 10·2.2)
    assert cucb_first_pick_probabilities([0.0, 0.5], [300, 0], 301, 10.0)[0] > 1 - 1e-9
    # the later picks (sequential_pick_probabilities):
    # β = 2: weights 1/0.28125² = 12.6420, 1/0.03125² = 1024 -> p = [0.012195, 0.987805]
    p = sequential_pick_probabilities([0.28125, 0.03125], 2.0)
    np.testing.assert_allclose(p, [12.641975 / 1036.641975, 1024 / 1036.641975], rtol=1e-6)
    # QCID 0 and round-off negatives are floored: equal weights among them
    p = sequential_pick_probabilities([0.0, -1e-17, 0.5], 3.0)
    assert p[0] == pytest.approx(0.5)
    assert p[1] == pytest.approx(0.5)
    assert p[2] == pytest.approx((QCID_FLOOR / 0.5) ** 3 / 2, rel=1e-6)
    # β = 40 would overflow 1/q^β = 1e480 in linear space; log space stays finite
    p = sequential_pick_probabilities([1e-12, 2e-12, 0.9], 40.0)
    assert np.all(np.isfinite(p))
    assert p.sum() == pytest.approx(1.0)
    assert p[0] == pytest.approx(1.0 / (1.0 + 2.0**-40))


def _three_device_case():
    # devices: 0 = [1, 0], 1 = [0.75, 0.25], 2 = [0, 1]; 10 samples each; 1 Hz each, budget 2 Hz
    p = np.array([[1.0, 0.0], [0.75, 0.25], [0.0, 1.0]])
    return p, np.full(3, 10.0), np.ones(3), 2.0


def test_selection_frequencies_match_hand_computed_probabilities():
    # Fresh state each draw (t = 1: no exploration). First pick ∝ 1/QCID({k}):
    #   QCID = [0.5, 0.125, 0.5] -> P(first) = [1/6, 2/3, 1/6].
    # Second pick (β_2 = 2), ∝ 1/QCID(B ∪ {k})²:
    #   after 0: {0,1} -> [0.875, 0.125], QCID = 2·0.375² = 0.28125; {0,2} -> QCID 0 (floored)
    #            -> P(2 | 0) = 1 − O(1e-23)
    #   after 1: {1,0} QCID 0.28125; {1,2} -> [0.375, 0.625], QCID = 2·0.125² = 0.03125
    #            -> P(2 | 1) = 1024 / (1024 + 12.641975) = 0.987805
    #   after 2: {2,0} QCID 0 -> P(0 | 2) = 1 − O(1e-21)
    # The third device is then drawn, needs 1 Hz with 0 Hz left -> stop. Pairs:
    #   P({0,2}) = 1/6 + 1/6 = 1/3;  P({1,2}) = 2/3 · 0.987805;  P({0,1}) = 2/3 · 0.012195
    p, n, need, total = _three_device_case()
    p21 = 1024 / (1024 + 1 / 0.28125**2)
    expected = {(0, 2): 1 / 3, (1, 2): 2 / 3 * p21, (0, 1): 2 / 3 * (1 - p21)}
    rng = np.random.default_rng(123)
    draws = 3000
    seen = dict.fromkeys(expected, 0)
    for _ in range(draws):
        state = FedCBSState(3)
        mask = fedcbs_select(state, np.ones(3, bool), p, n, need, total, rng)
        seen[tuple(np.flatnonzero(mask).tolist())] += 1  # KeyError if not a pair
    obs = np.array([seen[k] for k in expected])
    exp = draws * np.array(list(expected.values()))
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    # complementary pairs dominate: {0,2} and {1,2} ~99 % of the draws, {0,1} ~0.8 %
    assert seen[(0, 1)] < 0.03 * draws


def test_stop_rule_budget_availability_and_feasibility_and_same_seed_same_selection():
    # two identical single-class devices, each drawn first with probability 1/2;
    # device 0 needs 1 Hz, device 1 needs 5 Hz, budget 3 Hz.
    #   first = 1 -> does not fit -> stop: {}      first = 0 -> taken, then 1 drawn -> stop: {0}
    # A "skip" rule would always give {0}; {1} is impossible.
    p = np.array([[1.0, 0.0], [1.0, 0.0]])
    outcomes = set()
    for seed in range(200):
        need, rng = np.array([1.0, 5.0]), np.random.default_rng(seed)
        mask = fedcbs_select(FedCBSState(2), np.ones(2, bool), p, np.ones(2), need, 3.0, rng)
        outcomes.add(tuple(np.flatnonzero(mask).tolist()))
    assert outcomes == {(), (0,)}
    # never an unavailable or infeasible device, never over the budget; one seed, one selection
    rng = np.random.default_rng(9)
    v, c = 10, 4
    states = [FedCBSState(v), FedCBSState(v)]  # one state across rounds, twice
    for _ in range(200):
        p = rng.dirichlet(np.full(c, 0.5), size=v)
        avail = rng.random(v) < 0.6
        p[~avail] = 0.0  # rows of non-candidates are ignored (may be zero)
        need = rng.uniform(0.1, 1.0, size=v)
        need[rng.random(v) < 0.2] = np.inf
        n = rng.integers(1, 50, size=v).astype(float)
        seed = int(rng.integers(1000))
        a, b = (
            fedcbs_select(st, avail, p, n, need, 2.5, np.random.default_rng(seed)) for st in states
        )
        np.testing.assert_array_equal(a, b)
        assert not np.any(a & ~avail)
        assert not np.any(a & ~np.isfinite(need))
        assert need[a].sum() <= 2.5
    assert states[0].to_dict() == states[1].to_dict()


def test_counts_persist_and_increase_and_the_state_round_trips_and_is_validated():
    p, n, need, total = _three_device_case()
    state = FedCBSState(3)
    rng = np.random.default_rng(0)
    total_masks = np.zeros(3, dtype=int)
    for r in range(1, 21):
        before = state.counts.copy()
        mask = fedcbs_select(state, np.ones(3, bool), p, n, need, total, rng)
        total_masks += mask
        np.testing.assert_array_equal(state.counts, before + mask)
        assert state.round_index == r
    np.testing.assert_array_equal(state.counts, total_masks)
    assert state.counts.sum() == 40  # two devices per round
    # a round with nobody available still advances t and keeps the counts
    fedcbs_select(state, np.zeros(3, bool), p, n, need, total, rng)
    assert state.round_index == 21
    np.testing.assert_array_equal(state.counts, total_masks)
    # the state round-trips through JSON; bad counts, sizes and rounds are refused
    state = FedCBSState(3, counts=[1, 0, 4], round_index=5)
    data = json.loads(json.dumps(state.to_dict()))
    back = FedCBSState.from_dict(data)
    np.testing.assert_array_equal(back.counts, [1, 0, 4])
    assert back.round_index == 5
    assert back.counts.dtype == np.int64
    with pytest.raises(ValueError, match="counts"):
        FedCBSState(2, counts=[1, -1])
    with pytest.raises(ValueError, match="counts"):
        FedCBSState(2, counts=[1, 2, 3])
    with pytest.raises(ValueError, match="num_devices"):
        FedCBSState(0)
    with pytest.raises(ValueError, match="round"):
        FedCBSState.from_dict({"num-devices": 2, "counts": [0, 0]})


def test_exploration_brings_back_unselected_devices():
    # C = 10: device 0 single-class, QCID 0.9 (1/QCID = 1.11); device 1 two classes, QCID
    # 2·0.4² + 8·0.1² = 0.4 (2.5). Without exploration (λ = 0) device 0 is the first (and only)
    # pick with probability 1.11 / (1.11 + 2.5) = 0.4 / 1.3 = 0.3077 every round; with λ = 10
    # the bonus λ sqrt(3 ln t / (2 T_k)) of the less-selected device pulls the counts together.
    p = np.zeros((2, 10))
    p[0, 0] = 1.0
    p[1, :2] = 0.5
    rounds = 600
    share = {}
    for lam in (0.0, 10.0):
        state = FedCBSState(2)
        rng = np.random.default_rng(8)
        for _ in range(rounds):
            fedcbs_select(state, np.ones(2, bool), p, np.ones(2), np.ones(2), 1.0, rng, lam=lam)
        share[lam] = state.counts[0] / rounds
        if lam == 0.0:
            assert stats.binomtest(int(state.counts[0]), rounds, 0.4 / 1.3).pvalue > 1e-3
    assert share[10.0] > 0.38 > share[0.0]
