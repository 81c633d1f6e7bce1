"""Rate and minimum bandwidth (paper eq. (lambert)): hand values, a slow reference, properties."""

from __future__ import annotations

import math

import numpy as np
import pytest

import channel

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


def test_rate_by_hand() -> None:
    # S H / N0 = 1 W * 3e-14 / 1e-20 W/Hz = 3e6 Hz; B = 1 MHz: 1e6 * log2(1 + 3) = 2e6 bit/s.
    assert float(channel.rate_bps(1e6, 1.0, 3e-14, 1e-20)) == pytest.approx(2e6, rel=1e-12)
    assert float(channel.rate_bps(0.0, 1.0, 3e-14, 1e-20)) == 0.0
    # B -> inf: S H / (N0 ln 2) = 3e6 / 0.6931471805599453 = 4328085.122666891 bit/s
    assert float(channel.rate_bps(math.inf, 1.0, 3e-14, 1e-20)) == pytest.approx(
        4328085.122666891, rel=1e-12
    )


def test_min_bandwidth_matches_slow_reference() -> None:
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


def test_gamma_near_one_and_tiny() -> None:
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


def test_min_bandwidth_monotone_in_gain_and_model_size() -> None:
    gains = np.geomspace(1e-13, 1e-6, 400)
    bandwidth = channel.min_bandwidth_hz(1e6, 1.0, 0.2, gains, 1.6e-20)
    assert np.all(np.isfinite(bandwidth))
    assert np.all(np.diff(bandwidth) < 0.0)
    sizes = np.geomspace(1e3, 1e7, 50)
    by_size = channel.min_bandwidth_hz(sizes, 1.0, 0.2, 1e-9, 1.6e-20)
    assert np.all(np.diff(by_size[np.isfinite(by_size)]) > 0.0)


def test_min_bandwidth_of_zero_bits_is_zero() -> None:
    assert float(channel.min_bandwidth_hz(0.0, 1.0, 1.0, 1e-10, 1e-20)) == 0.0


def test_count_fit_cheapest_first_by_hand() -> None:
    # sorted finite demands 1, 2, 3, 5 -> running sums 1, 3, 6, 11; budget 6 fits three.
    assert channel.count_fit_cheapest_first(np.array([5.0, math.inf, 1.0, 3.0, 2.0]), 6.0) == 3
    assert channel.count_fit_cheapest_first(np.array([5.0, math.inf]), 4.0) == 0
    assert channel.count_fit_cheapest_first(np.array([]), 4.0) == 0
    assert channel.count_fit_cheapest_first(np.zeros(7), 0.0) == 7


def test_matches_paper_lambert_formula_literally() -> None:
    # Paper eq. (lambert) evaluated as printed, W on the k = -1 branch, for moderate Γ.
    from scipy.special import lambertw

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
