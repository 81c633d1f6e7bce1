"""Tests of the σ̂ / Ĝ / Ĝ_c estimators (paper Section IV-C)."""

import math

import numpy as np
import pytest

from fedcgd_strategy.estimators import (
    device_gradient_estimates,
    estimate_class_gradient,
    estimate_global_sigma,
    estimate_per_class_gradient,
    gradient_divergence_norms,
)

UNIFORM2 = np.array([0.5, 0.5])
UNIFORM3 = np.full(3, 1.0 / 3.0)


# --- eq. (global_est_sigma) -----------------------------------------------------------------


def test_global_sigma_hand_values():
    # α = [1, 3] / 4 = [0.25, 0.75]; σ̂² = 0.25·1² + 0.75·3² = 0.25 + 6.75 = 7
    assert estimate_global_sigma([1.0, 3.0], [1.0, 3.0]) == pytest.approx(math.sqrt(7.0))
    assert estimate_global_sigma([2.5, 2.5, 2.5], [1.0, 7.0, 0.0]) == pytest.approx(2.5)


# --- device gradients --------------------------------------------------------------------------


def test_device_gradient_estimates_hand_value_and_float32_kept():
    # (w^{j+1} − w^{j}) / (τ η) = [0.2, −0.4] / (2 · 0.1) = [1, −2]
    g = device_gradient_estimates(np.array([[0.2, -0.4]]), learning_rate=0.1, local_steps=2)
    np.testing.assert_allclose(g, [[1.0, -2.0]])
    u = np.ones((3, 5), dtype=np.float32)
    assert device_gradient_estimates(u, 0.5, 1).dtype == np.float32


# --- eq. (G_est) --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p2", "expected"),
    [
        # g1 = [2, 0], g2 = [0, 4], weights [3, 1] -> α = [0.75, 0.25]
        # ∇F̂ = 0.75·[2, 0] + 0.25·[0, 4] = [1.5, 1]
        # ||g1 − F|| = ||[0.5, −1]|| = sqrt(1.25); ||g2 − F|| = ||[−1.5, 3]|| = 1.5 √5
        # p = [0.5, 0.5]; p1 = [1, 0] -> L1 = 1;  p2 = [0.25, 0.75] -> L1 = 0.5
        # ratios: sqrt(1.25) / 1 = 1.118,  1.5 √5 / 0.5 = 3 √5 = 6.708 -> Ĝ = 3 √5
        ([0.25, 0.75], 3.0 * math.sqrt(5.0)),
        # p2 = p exactly: device 2 is left out, only device 1's ratio counts (∇F̂ still uses
        # both devices: [1.5, 1])
        ([0.5, 0.5], math.sqrt(1.25)),
    ],
)
def test_class_gradient_two_devices_hand_value(p2, expected):
    grads = np.array([[2.0, 0.0], [0.0, 4.0]])
    dist = np.array([[1.0, 0.0], p2])
    g = estimate_class_gradient(grads, [3.0, 1.0], dist, UNIFORM2, previous=99.0)
    assert g == pytest.approx(expected)
    # everybody at the target: Ĝ keeps its previous value
    assert estimate_class_gradient(grads, [1.0, 1.0], np.full((2, 2), 0.5), UNIFORM2, 0.7) == 0.7


def test_both_estimates_keep_the_previous_without_uploads():
    empty = np.zeros((0, 10))
    assert estimate_class_gradient(empty, [], np.zeros((0, 2)), UNIFORM2, previous=1.25) == 1.25
    prev = np.array([0.5, 0.25])
    out = estimate_per_class_gradient(np.zeros((0, 7)), [], np.zeros((0, 2)), UNIFORM2, prev)
    np.testing.assert_array_equal(out, prev)


def test_class_gradient_matches_slow_reference_on_random_input():
    rng = np.random.default_rng(3)
    k, p_len, c = 6, 40, 4
    grads = rng.normal(size=(k, p_len)).astype(np.float32)
    weights = rng.uniform(1, 5, size=k)
    dist = rng.dirichlet(np.ones(c), size=k)
    target = rng.dirichlet(np.ones(c))
    # slow reference: plain Python sums over parameters and classes
    alpha = [w / sum(weights) for w in weights]
    glob = [sum(alpha[v] * float(grads[v, i]) for v in range(k)) for i in range(p_len)]
    ratios = []
    for v in range(k):
        norm = math.sqrt(sum((float(grads[v, i]) - glob[i]) ** 2 for i in range(p_len)))
        l1 = sum(abs(dist[v, j] - target[j]) for j in range(c))
        ratios.append(norm / l1)
    got = estimate_class_gradient(grads, weights, dist, target, previous=0.0)
    assert got == pytest.approx(max(ratios), rel=1e-6)
    norms = gradient_divergence_norms(grads, weights)
    assert norms.dtype == np.float64


def test_class_gradient_sign_of_updates_is_irrelevant():
    rng = np.random.default_rng(0)
    grads = rng.normal(size=(4, 30))
    dist = rng.dirichlet(np.ones(3), size=4)
    w = [1.0, 2.0, 3.0, 4.0]
    a = estimate_class_gradient(grads, w, dist, UNIFORM3, 0.0)
    b = estimate_class_gradient(-grads, w, dist, UNIFORM3, 0.0)
    assert a == pytest.approx(b)


# --- eq. (Gc_est) -------------------------------------------------------------------------------


def test_per_class_gradient_hand_values():
    # P = 1: g = [3, 0, 0], equal weights -> ∇F̂ = 1; divergences |3−1| = 2, 1, 1.
    # p = [1/3]*3.  p1 = [1,0,0] (class 0): L1 = 2/3 + 1/3 + 1/3 = 4/3 -> ratio 2/(4/3) = 1.5
    #               p2 = [0,1,0] (class 1): L1 = 4/3 -> ratio 1/(4/3) = 0.75
    #               p3 = [0.8,0.2,0] (class 0): L1 = 7/15 + 2/15 + 5/15 = 14/15 -> 15/14
    # Ĝ_0 = max(1.5, 15/14) = 1.5, Ĝ_1 = 0.75, Ĝ_2 keeps previous (no device of class 2).
    grads = np.array([[3.0], [0.0], [0.0]])
    dist = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.8, 0.2, 0.0]])
    prev = np.array([9.0, 9.0, 4.0])
    out = estimate_per_class_gradient(grads, [1.0, 1.0, 1.0], dist, UNIFORM3, prev)
    np.testing.assert_allclose(out, [1.5, 0.75, 4.0])
    np.testing.assert_array_equal(prev, [9.0, 9.0, 4.0])  # input not modified
    # Ĝ (eq. G_est) over the same devices is the max over classes: 1.5
    assert estimate_class_gradient(grads, [1.0] * 3, dist, UNIFORM3, 0.0) == pytest.approx(1.5)


def test_per_class_gradient_dominant_class_and_exclusion():
    # Device 0 dominant class 2; device 1 has p = target (excluded): class 1 keeps previous.
    # g = [[4, 0], [0, 0]], weights [1, 3] -> ∇F̂ = [1, 0]; ||g0 − F|| = 3.
    # p0 = [0.1, 0.2, 0.7], target = [0.2, 0.3, 0.5]: L1 = 0.1 + 0.1 + 0.2 = 0.4 -> 3/0.4 = 7.5
    target = np.array([0.2, 0.3, 0.5])
    dist = np.array([[0.1, 0.2, 0.7], [0.2, 0.3, 0.5]])
    grads = np.array([[4.0, 0.0], [0.0, 0.0]])
    out = estimate_per_class_gradient(grads, [1.0, 3.0], dist, target, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(out, [1.0, 2.0, 7.5])
