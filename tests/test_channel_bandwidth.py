"""Units, LOS probability and path loss against hand-computed values; rate and minimum bandwidth
(paper eq. (lambert)): hand values, a slow reference, properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import lambertw

import channel
from channel.pathloss import breakpoint_distance_m, pathloss_umi_los_pl1_db, pathloss_umi_los_pl2_db

LN2 = math.log(2.0)


def reference_rate_bps(bandwidth_hz: float, power_w: float, gain: float, noise: float) -> float:
    """Scalar paper rate B log2(1 + S H / (B N0))."""
    return bandwidth_hz * math.log1p(power_w * gain / (bandwidth_hz * noise)) / LN2


def reference_min_bandwidth_hz(
    bits: float, deadline_s: float, power_w: float, gain: float, noise: float
) -> float:
    """Slow reference: bisection on the (increasing) scalar rate, in log-bandwidth."""
    target = bits / deadline_s
    if power_w * gain / (noise * LN2) <= target:
        return math.inf
    low, high = 1e-300, 1.0
    while reference_rate_bps(high, power_w, gain, noise) < target:
        high *= 2.0
    for _ in range(3000):
        middle = math.sqrt(low * high)
        if reference_rate_bps(middle, power_w, gain, noise) < target:
            low = middle
        else:
            high = middle
        if high / low - 1.0 < 1e-14:
            break
    return high


def test_rate_units_and_count_fit_cheapest_first_by_hand() -> None:
    # S H / N0 = 1 W * 3e-14 / 1e-20 W/Hz = 3e6 Hz; B = 1 MHz: 1e6 * log2(1 + 3) = 2e6 bit/s.
    assert float(channel.rate_bps(1e6, 1.0, 3e-14, 1e-20)) == pytest.approx(2e6, rel=1e-12)
    assert float(channel.rate_bps(0.0, 1.0, 3e-14, 1e-20)) == 0.0
    # B -> inf: S H / (N0 ln 2) = 3e6 / 0.6931471805599453 = 4328085.122666891 bit/s
    assert float(channel.rate_bps(math.inf, 1.0, 3e-14, 1e-20)) == pytest.approx(
        4328085.122666891, rel=1e-12
    )
    # 30 dBm = 1 W, 20 dB = 100 (23 dBm and -174 dBm/Hz + 6 dB: test_channel_cell's Table I test)
    assert float(channel.dbm_to_w(30.0)) == pytest.approx(1.0, rel=1e-12)
    assert float(channel.db_to_linear(20.0)) == pytest.approx(100.0)
    # sorted finite demands 1, 2, 3, 5 -> running sums 1, 3, 6, 11; budget 6 fits three.
    assert channel.count_fit_cheapest_first(np.array([5.0, math.inf, 1.0, 3.0, 2.0]), 6.0) == 3
    assert channel.count_fit_cheapest_first(np.array([5.0, math.inf]), 4.0) == 0
    assert channel.count_fit_cheapest_first(np.array([]), 4.0) == 0
    assert channel.count_fit_cheapest_first(np.zeros(7), 0.0) == 7


def test_min_bandwidth_matches_the_slow_reference_and_the_papers_lambert_formula() -> None:
    rng = np.random.default_rng(11)
    gains = 10.0 ** rng.uniform(-15.0, -6.0, 60)
    bits, deadline, power, noise = 8_284_736.0, 2.0, 0.2, 1.5848931924611108e-20
    got = channel.min_bandwidth_hz(bits, deadline, power, gains, noise)
    for gain, value in zip(gains, got, strict=True):
        expected = reference_min_bandwidth_hz(bits, deadline, power, float(gain), noise)
        if math.isinf(expected):
            assert math.isinf(value)
        else:
            assert value == pytest.approx(expected, rel=1e-10)
    # Paper eq. (lambert) evaluated as printed, W on the k = -1 branch, for moderate Γ.
    bits, deadline, power, noise = 1e6, 1.0, 1.0, 1e-20
    gammas = np.linspace(0.01, 0.99, 99)
    gains = noise * bits * LN2 / (deadline * power * gammas)  # Γ = N0 D ln2 / (d S H)
    w = lambertw(-gammas * np.exp(-gammas), k=-1).real
    expected = -bits * LN2 / (deadline * (w + gammas))
    got = channel.min_bandwidth_hz(bits, deadline, power, gains, noise)
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    # The principal branch gives the trivial root W_0 = -Γ (division by ~0), not B*.
    w0 = lambertw(-gammas * np.exp(-gammas), k=0).real
    np.testing.assert_allclose(w0, -gammas, rtol=1e-12)


def test_min_bandwidth_for_gamma_near_one_and_tiny_and_monotone_in_gain_and_model_size() -> None:
    # Γ = (D/d) / (S H / (N0 ln 2)); S = N0 = 1, D/d = 1: Γ = ln2 / H, so H = ln2 / Γ.
    gammas = np.array([1e-300, 1e-100, 1e-20, 1e-3, 0.5, 1 - 1e-4, 1 - 1e-8, 1 - 1e-12, 1 - 1e-15])
    gains = LN2 / gammas
    bandwidth = channel.min_bandwidth_hz(1.0, 1.0, 1.0, gains, 1.0)
    assert np.all(np.isfinite(bandwidth))
    assert np.all(bandwidth > 0.0)
    assert np.all(np.diff(bandwidth) > 0.0)  # worse channel (larger Γ), more bandwidth
    np.testing.assert_allclose(channel.rate_bps(bandwidth, 1.0, gains, 1.0), 1.0, rtol=1e-9)
    # Small x = S H / (B N0): ln(1 + x) = Γ x gives x ≈ 2 (1 - Γ), so B* ≈ H / (2 (1 - Γ)).
    near_one = gammas[-3]  # 1 - 1e-8
    assert bandwidth[-3] == pytest.approx(LN2 / near_one / (2e-8), rel=1e-6)
    gains = np.geomspace(1e-13, 1e-6, 400)
    bandwidth = channel.min_bandwidth_hz(1e6, 1.0, 0.2, gains, 1.6e-20)
    assert np.all(np.isfinite(bandwidth))
    assert np.all(np.diff(bandwidth) < 0.0)
    sizes = np.geomspace(1e3, 1e7, 50)
    by_size = channel.min_bandwidth_hz(sizes, 1.0, 0.2, 1e-9, 1.6e-20)
    assert np.all(np.diff(by_size[np.isfinite(by_size)]) > 0.0)


def test_infeasible_exactly_at_the_boundary() -> None:
    # inf exactly when S H / (N0 ln 2) <= D / d; walk gains ulp by ulp across the boundary.
    power, noise, bits, deadline = 0.2, 1.5848931924611108e-20, 153_920.0, 0.002
    boundary_gain = (bits / deadline) * noise * LN2 / power
    gains = [boundary_gain]
    for _ in range(20):
        gains.append(np.nextafter(gains[-1], np.inf))
        gains.insert(0, np.nextafter(gains[0], 0.0))
    gains_array = np.array([*gains, boundary_gain * (1 + 1e-9), boundary_gain * (1 - 1e-9)])
    bandwidth = channel.min_bandwidth_hz(bits, deadline, power, gains_array, noise)
    infeasible = power * gains_array / (noise * LN2) <= bits / deadline
    assert infeasible.any() and (~infeasible).any()
    np.testing.assert_array_equal(np.isinf(bandwidth), infeasible)
    assert np.all(bandwidth[~infeasible] > 0.0)
    rate = channel.rate_bps(bandwidth[~infeasible], power, gains_array[~infeasible], noise)
    np.testing.assert_allclose(rate, bits / deadline, rtol=1e-9)
    assert float(channel.min_bandwidth_hz(bits, deadline, power, 0.0, noise)) == math.inf
    assert float(channel.min_bandwidth_hz(0.0, 1.0, 1.0, 1e-10, 1e-20)) == 0.0  # nothing to send


FC_HZ = 3.5e9


def test_los_probability_by_hand_range_monotone_and_continuous_at_18_m() -> None:
    # d <= 18 m: 1.  d = 36 m: 18/36 + exp(-36/36) (1 - 18/36) = 0.5 + 0.5/e = 0.6839397205857212
    # d = 100 m: 0.18 + exp(-100/36) * 0.82 = 0.23098474969813537
    d2d_m = np.array([0.0, 5.0, 18.0, 36.0, 100.0])
    expected = np.array([1.0, 1.0, 1.0, 0.6839397205857212, 0.23098474969813537])
    np.testing.assert_allclose(channel.los_probability(d2d_m), expected, rtol=1e-12)
    d2d_m = np.linspace(0.0, 5000.0, 20001)
    probability = channel.los_probability(d2d_m)
    assert np.all((probability >= 0.0) & (probability <= 1.0))
    assert np.all(np.diff(probability) <= 0.0)
    assert np.all(probability[d2d_m <= 18.0] == 1.0)
    just_above = float(channel.los_probability(18.0 + 1e-9))
    assert just_above == pytest.approx(1.0, abs=1e-9)
    assert just_above < 1.0
    # The paper's printed bracket would give 18/20 + exp(-(20/36)(1 - 18/20)) = 1.846 > 1 at 20 m.
    assert float(channel.los_probability(20.0)) < 1.0


# At 100 m: d3D = sqrt(100^2 + (10 - 1.5)^2) = 100.36059983878135 m, log10(d3D) =
# 2.001563248356944, log10(3.5) = 0.5440680443502757. PL1 = 32.4 + 21 log d3D + 20 log fc =
# 85.31418910250133 dB; paper NLOS = 32.4 + 20 log fc + 31.9 log d3D = 107.13122850959202;
# PL'_NLOS = 35.3 log d3D + 22.4 + 21.3 log fc - 0.3 * 0 = 104.64383201166098 dB, and tr38901
# NLOS = max(PL1, PL') = PL'. At 240 m > d'_BP = 210 m: d3D = 240.15047366182728, log10 =
# 2.380483447558429; PL2 = 32.4 + 40 log d3D + 20 log fc - 9.5 log10(210^2 + 8.5^2 = 44172.25)
# [= 4.645149521461176] = 94.37177833546149 dB; the paper model has no breakpoint: PL1 = 32.4 +
# 21 * 2.380483447558429 + 10.8814 = 93.27151328573251; PL' = 35.3 * 2.380483447558429 + 22.4 +
# 21.3 * 0.5440680443502757 = 118.01971504347338.
@pytest.mark.parametrize(
    ("d2d_m", "los", "model", "expected_db"),
    [
        (100.0, True, "paper", 85.31418910250133),
        (100.0, False, "paper", 107.13122850959202),
        (100.0, True, "tr38901", 85.31418910250133),
        (100.0, False, "tr38901", 104.64383201166098),
        (240.0, True, "tr38901", 94.37177833546149),
        (240.0, True, "paper", 93.27151328573251),
        (240.0, False, "tr38901", 118.01971504347338),
    ],
)
def test_pathloss_by_hand(d2d_m: float, los: bool, model: str, expected_db: float) -> None:
    assert float(channel.pathloss_db(d2d_m, los, model=model)) == pytest.approx(
        expected_db, abs=1e-9
    )


def test_los_pathloss_continuous_at_breakpoint_and_an_unknown_model_refused() -> None:
    # At d2D = d'_BP, d3D^2 = d'_BP^2 + dh^2, so
    # PL2 - PL1 = 40 log d3D - 9.5 * 2 log d3D - 21 log d3D = 0.
    d_bp_m = breakpoint_distance_m(10.0, 1.5, FC_HZ)
    assert d_bp_m == pytest.approx(210.0, rel=1e-12)  # 4 * (10 - 1) * (1.5 - 1) * 3.5e9 / 3e8
    d3d_m = math.hypot(d_bp_m, 8.5)
    pl1 = float(pathloss_umi_los_pl1_db(d3d_m, FC_HZ))
    pl2 = float(pathloss_umi_los_pl2_db(d3d_m, FC_HZ, 10.0, 1.5))
    assert pl1 == pytest.approx(pl2, abs=1e-9)
    below = float(channel.pathloss_db(d_bp_m - 1e-7, True, model="tr38901"))
    above = float(channel.pathloss_db(d_bp_m + 1e-7, True, model="tr38901"))
    assert above - below == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="model"):
        channel.pathloss_db(100.0, True, model="umi")


@pytest.mark.parametrize("model", ["paper", "tr38901"])
def test_pathloss_increases_with_distance_nlos_never_below_los_and_broadcasting(model: str) -> None:
    for los in (True, False):
        loss_db = channel.pathloss_db(np.linspace(10.0, 5000.0, 5000), los, model=model)
        assert np.all(np.diff(loss_db) > 0.0)
    d2d_m = np.linspace(10.0, 1000.0, 200)
    los_db = channel.pathloss_db(d2d_m, True, model=model)
    nlos_db = channel.pathloss_db(d2d_m, False, model=model)
    assert np.all(nlos_db >= los_db)
    mixed = channel.pathloss_db(d2d_m[:, None], np.array([True, False])[None, :], model=model)
    assert mixed.shape == (200, 2)
    np.testing.assert_array_equal(mixed[:, 0], los_db)
    np.testing.assert_array_equal(mixed[:, 1], nlos_db)
