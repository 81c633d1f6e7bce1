"""Problem P1 (hand-computed objective terms, input validation, the checks of a checkpoint's policy
state), the σ̂ / Ĝ / Ĝ_c estimators (paper Section IV-C), RoundInputs, the protocol rule and
Decision terms (pure numpy, no Flower)."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np
import pytest

from fedcgd_strategy import SchedulingProblem
from fedcgd_strategy.estimators import (
    device_gradient_estimates,
    estimate_class_gradient,
    estimate_global_sigma,
    estimate_per_class_gradient,
    gradient_divergence_norms,
)
from fedcgd_strategy.policies import (
    POLICY_NAMES,
    PolicyContext,
    RoundInputs,
    decision_from_mask,
    make_policy,
    policy_class,
    resolve_protocol,
)
from fedcgd_strategy.problem import as_nonnegative_array, check_integer, sampling_term, wemd

NAN, INF = float("nan"), float("inf")
UNIFORM2 = np.array([0.5, 0.5])
UNIFORM3 = np.full(3, 1.0 / 3.0)


def inputs(**changes: Any) -> RoundInputs:
    fields: dict[str, Any] = {
        "candidate": np.array([True, True, False]),
        "label_dist": np.array([[1.0, 0.0], [0.25, 0.75], [0.0, 0.0]]),
        "num_examples": np.array([10.0, 30.0, 0.0]),
        "sigma_v": np.array([1.0, 3.0, 0.0]),
        "min_bandwidth_hz": np.array([1.0, 2.0, np.inf]),
        "gain_lin": np.array([1e-9, 2e-9, 3e-9]),
        "total_bandwidth_hz": 10.0,
        "batch_size": 4,
        "target_dist": np.array([0.5, 0.5]),
    }
    fields.update(changes)
    return RoundInputs(**fields)


def test_non_candidate_rows_are_not_checked_nan_sigma_is_not_computed_and_decision_terms() -> None:
    ok = inputs(sigma_v=np.array([np.nan, np.nan, -5.0]))
    assert math.isnan(ok.global_sigma())
    # eq. (global_est_sigma) by hand: α = [1, 3] / 4, σ̂² = 0.25 · 1² + 0.75 · 3² = 7
    assert inputs().global_sigma() == pytest.approx(math.sqrt(7.0))
    assert estimate_global_sigma([1.0, 3.0], [1.0, 3.0]) == pytest.approx(math.sqrt(7.0))
    assert estimate_global_sigma([2.5, 2.5, 2.5], [1.0, 7.0, 0.0]) == pytest.approx(2.5)
    decision = decision_from_mask(inputs(), np.array([True, True, False]))
    # p̄ = (0.625, 0.375): |0.125| + |0.125| = 0.25; σ̂ / sqrt(b |S|) = sqrt(7) / sqrt(8).
    assert decision.wemd == pytest.approx(0.25)
    assert decision.sampling_term == pytest.approx(math.sqrt(7.0 / 8.0))
    assert decision.bandwidth_used_hz == 3.0


def test_protocol_rule() -> None:
    def rule(name: str, requested: str = "auto") -> str:
        return resolve_protocol(policy_class(name), requested, name)

    auto = {
        "fedcgd-fscd": "query", "fedcgd-gs": "query", "fedcgd-fscd-gc": "query",
        "fedcgd-exact": "query", "fedcgd-cd": "query", "bc": "channel", "bn2": "train-all",
        "poc": "train-all", "fedcbs": "channel", "all": "channel",
    }  # fmt: skip
    assert {name: rule(name) for name in POLICY_NAMES} == auto
    assert rule("bc", "query") == "query"
    with pytest.raises(ValueError, match="'channel' does not work with policy 'fedcgd-fscd'"):
        rule("fedcgd-fscd", "channel")
    with pytest.raises(ValueError, match="'query' does not work with policy 'poc'"):
        rule("poc", "query")
    with pytest.raises(ValueError, match="'policy' = 'xyz'; allowed: fedcgd-fscd, "):
        rule("xyz")
    with pytest.raises(ValueError, match="protocol 'push' does not work with policy 'bc'; allowed"):
        rule("bc", "push")


def test_class_gradient_shapes_figure_labels_and_close_names_of_misspelt_policies():
    context = PolicyContext(num_devices=3, num_classes=2, initial_g=2.0)
    g, gc = (
        make_policy(name, context).class_gradient for name in ("fedcgd-fscd", "fedcgd-fscd-gc")
    )
    assert g is not None and g.tolist() == [2.0]
    assert gc is not None and gc.tolist() == [2.0, 2.0]
    assert make_policy("bc", context).class_gradient is None
    close = r"'policy' = 'fedcgd-fcsd'; did you mean fedcgd-fscd or fedcgd-cd\? allowed: "
    with pytest.raises(ValueError, match=close):
        policy_class("fedcgd-fcsd")
    label = r"'policy' = 'BC \(best chanel\)'; did you mean BC \(best channel\)\? "
    with pytest.raises(ValueError, match=label):
        policy_class("BC (best chanel)")
    # a policy is named by its figure label (any case) and keeps its name
    labels = [
        ("FedCGD-FSCD", "fedcgd-fscd"), ("BC (best channel)", "bc"), ("bc (BEST CHANNEL)", "bc"),
        ("BC", "bc"), ("Fed-CBS", "fedcbs"), ("FEDCGD-FSCD (Ĝ_C)", "fedcgd-fscd-gc"),
    ]  # fmt: skip
    for given, name in labels:
        policy = make_policy(given, PolicyContext(num_devices=4, num_classes=2))
        assert (type(policy), policy.name) == (policy_class(name), name), given


def paper_example(sigma: float = 0.01, budget_hz: float = 2.0) -> SchedulingProblem:
    """The 4-device example of paper Section IV-A; every device needs 1 Hz."""
    return SchedulingProblem(
        label_dist=np.array([[0.51, 0.49], [0.51, 0.49], [0.8, 0.2], [0.2, 0.8]]),
        target_dist=np.array([0.5, 0.5]), min_bandwidth_hz=np.ones(4),
        total_bandwidth_hz=budget_hz, sigma=sigma, class_gradient=1.0, batch_size=32,
    )  # fmt: skip


def test_wemd_sampling_and_objective_hand_values() -> None:
    problem = paper_example(sigma=0.8)
    one_two, three_four = np.array([True, True, False, False]), np.array([False, False, True, True])
    # {1, 2}: mean [0.51, 0.49] -> |0.01| + |-0.01| = 0.02; {3, 4}: mean [0.5, 0.5] -> 0
    assert problem.wemd(one_two) == pytest.approx(0.02, abs=1e-12)
    assert problem.wemd(three_four) == pytest.approx(0.0, abs=1e-12)
    # {3}: |0.8 - 0.5| + |0.2 - 0.5| = 0.6; {1, 3}: mean [0.655, 0.345] -> 0.155 + 0.155 = 0.31
    assert problem.wemd(np.array([False, False, True, False])) == pytest.approx(0.6)
    assert problem.wemd(np.array([True, False, True, False])) == pytest.approx(0.31)
    # G = [2, 0.5]: 2 |0.7 - 0.5| + 0.5 |0.3 - 0.5| = 0.4 + 0.1 = 0.5
    assert wemd([0.7, 0.3], [0.5, 0.5], [2.0, 0.5]) == pytest.approx(0.5)
    np.testing.assert_allclose(wemd(np.array([[0.7, 0.3], [0.5, 0.5]]), UNIFORM2, 1.0), [0.4, 0])
    # 0.8 / sqrt(2 * 32) = 0.8 / 8 = 0.1; {1, 2}: 0.1 + 0.02
    assert problem.sampling_term(three_four) == pytest.approx(0.1)
    assert problem.objective(three_four) == pytest.approx(0.1 + 0.0)
    assert problem.objective(one_two) == pytest.approx(0.12)
    # per-device batch sizes 16 and 48: 0.8 / sqrt(64) = 0.1 as well; {3} alone: 0.8 / sqrt(48)
    mixed = SchedulingProblem(
        problem.label_dist, problem.target_dist, np.ones(4), 2.0, 0.8, 1.0, [32, 32, 16, 48]
    )
    assert mixed.sampling_term(three_four) == pytest.approx(0.1)
    assert mixed.sampling_term(np.array([False, False, False, True])) == pytest.approx(
        0.8 / np.sqrt(48)
    )
    assert sampling_term(2.0, 4) == pytest.approx(1.0)
    empty = np.zeros(4, dtype=bool)  # the empty schedule: infinite, and feasible
    assert problem.objective(empty) == problem.wemd(empty) == problem.sampling_term(empty) == INF
    assert problem.is_feasible(empty)


def test_feasibility_read_only_arrays_masks_and_good_values_unchanged_as_the_math_types():
    def three(need: list[float]) -> SchedulingProblem:  # B = 3, B* = need
        return SchedulingProblem(np.full((3, 2), 0.5), UNIFORM2, np.array(need), 3.0, 1.0)

    problem = three([1.0, np.inf, 2.0])
    np.testing.assert_array_equal(problem.feasible, [True, False, True])
    assert problem.is_feasible(np.array([True, False, True]))  # 1 + 2 = 3 <= 3
    assert not problem.is_feasible(np.array([True, True, False]))  # infeasible device
    assert not three([1.0, 1.5, 2.0]).is_feasible(np.array([False, True, True]))  # 3.5 > 3
    example = paper_example()
    assert not example.label_dist.flags.writeable and not example.min_bandwidth_hz.flags.writeable
    np.testing.assert_array_equal(example.class_gradient_array, [1.0, 1.0])
    np.testing.assert_array_equal(example.batch_size_array, [32, 32, 32, 32])
    assert example.num_devices == 4 and example.num_classes == 2 and example.uniform_batch
    with pytest.raises(ValueError, match=r"mask must be a bool array of shape \(4,\), got dtyp"):
        example.objective(np.array([1, 0, 1, 0]))
    with pytest.raises(ValueError, match="mask"):
        example.objective(np.array([True, False]))
    np.testing.assert_array_equal(as_nonnegative_array([0.0, 2.0], "g", shape=(2,)), [0.0, 2.0])
    for value, expected in [(0, 0), (2.0, 2), (np.int64(5), 5)]:
        out = check_integer(value, "local_steps", minimum=0)
        assert out == expected and type(out) is int


integer = partial(check_integer, name="num_candidates", minimum=0)


@pytest.mark.parametrize(
    ("validate", "args", "match"),
    [
        (partial(as_nonnegative_array, shape=(3,)), ([1.0, 1.0], "g"), r"g must have shape \(3,"),
        (as_nonnegative_array, (np.full(6, -1.0), "x"), r"x\[3\] = -1\.0 \(and 2 more\)"),
        (as_nonnegative_array, ([1.0, INF], "g"), r"g must be finite and >= 0, got g\[1\] = inf"),
        (as_nonnegative_array, (NAN, "s"), r"s must be finite and >= 0, got nan"),
        *[(integer, (v,), "num_candidates must be an integer >= 0, got ") for v in
          (1.5, NAN, INF, "3", None, -1)],
    ],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_argument_and_the_value(validate, args, match) -> None:
    with pytest.raises(ValueError, match=match):
        validate(*args)


def test_device_gradient_estimates_hand_value_and_float32_kept():
    # (w^{j+1} − w^{j}) / (τ η) = [0.2, −0.4] / (2 · 0.1) = [1, −2]
    g = device_gradient_estimates(np.array([[0.2, -0.4]]), learning_rate=0.1, local_steps=2)
    np.testing.assert_allclose(g, [[1.0, -2.0]])
    u = np.ones((3, 5), dtype=np.float32)
    assert device_gradient_estimates(u, 0.5, 1).dtype == np.float32


@pytest.mark.parametrize(
    ("p2", "expected"),
    [
        # eq. (G_est): g1 = [2, 0], g2 = [0, 4], weights [3, 1] -> α = [0.75, 0.25]
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
    # the sign of the updates is irrelevant
    assert estimate_class_gradient(-grads, weights, dist, target, 0.0) == pytest.approx(got)
    assert gradient_divergence_norms(grads, weights).dtype == np.float64


def test_per_class_gradient_hand_values_dominant_class_exclusion_and_no_uploads():
    # eq. (Gc_est), P = 1: g = [3, 0, 0], equal weights -> ∇F̂ = 1; divergences 2, 1, 1.
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
    # Device 0 dominant class 2; device 1 has p = target (excluded): class 1 keeps previous.
    # g = [[4, 0], [0, 0]], weights [1, 3] -> ∇F̂ = [1, 0]; ||g0 − F|| = 3.
    # p0 = [0.1, 0.2, 0.7], target = [0.2, 0.3, 0.5]: L1 = 0.1 + 0.1 + 0.2 = 0.4 -> 3/0.4 = 7.5
    target = np.array([0.2, 0.3, 0.5])
    dist = np.array([[0.1, 0.2, 0.7], [0.2, 0.3, 0.5]])
    grads = np.array([[4.0, 0.0], [0.0, 0.0]])
    out = estimate_per_class_gradient(grads, [1.0, 3.0], dist, target, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(out, [1.0, 2.0, 7.5])
    # both estimates keep the previous without uploads
    empty = np.zeros((0, 10))
    assert estimate_class_gradient(empty, [], np.zeros((0, 2)), UNIFORM2, previous=1.25) == 1.25
    prev = np.array([0.5, 0.25])
    out = estimate_per_class_gradient(np.zeros((0, 7)), [], np.zeros((0, 2)), UNIFORM2, prev)
    np.testing.assert_array_equal(out, prev)
