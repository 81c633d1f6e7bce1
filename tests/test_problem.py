"""Problem P1: hand-computed objective terms and input validation."""

import numpy as np
import pytest

from fedcgd_strategy import SchedulingProblem
from fedcgd_strategy.problem import sampling_term, wemd


def paper_example(sigma: float = 0.01, budget_hz: float = 2.0) -> SchedulingProblem:
    """The 4-device example of paper Section IV-A; every device needs 1 Hz."""
    return SchedulingProblem(
        label_dist=np.array([[0.51, 0.49], [0.51, 0.49], [0.8, 0.2], [0.2, 0.8]]),
        target_dist=np.array([0.5, 0.5]),
        min_bandwidth_hz=np.ones(4),
        total_bandwidth_hz=budget_hz,
        sigma=sigma,
        class_gradient=1.0,
        batch_size=32,
    )


def test_wemd_hand_values() -> None:
    problem = paper_example()
    # {1, 2}: mean [0.51, 0.49] -> |0.01| + |-0.01| = 0.02
    assert problem.wemd(np.array([True, True, False, False])) == pytest.approx(0.02, abs=1e-12)
    # {3, 4}: mean [0.5, 0.5] -> 0
    assert problem.wemd(np.array([False, False, True, True])) == pytest.approx(0.0, abs=1e-12)
    # {3}: |0.8 - 0.5| + |0.2 - 0.5| = 0.6
    assert problem.wemd(np.array([False, False, True, False])) == pytest.approx(0.6)
    # {1, 3}: mean [0.655, 0.345] -> 0.155 + 0.155 = 0.31
    assert problem.wemd(np.array([True, False, True, False])) == pytest.approx(0.31)


def test_wemd_class_weights() -> None:
    # G = [2, 0.5]: 2 |0.7 - 0.5| + 0.5 |0.3 - 0.5| = 0.4 + 0.1 = 0.5
    assert wemd([0.7, 0.3], [0.5, 0.5], [2.0, 0.5]) == pytest.approx(0.5)
    batch = wemd(np.array([[0.7, 0.3], [0.5, 0.5]]), [0.5, 0.5], 1.0)
    np.testing.assert_allclose(batch, [0.4, 0.0])


def test_sampling_and_objective_hand_values() -> None:
    problem = paper_example(sigma=0.8)
    two = np.array([False, False, True, True])
    # 0.8 / sqrt(2 * 32) = 0.8 / 8 = 0.1
    assert problem.sampling_term(two) == pytest.approx(0.1)
    assert problem.objective(two) == pytest.approx(0.1 + 0.0)
    # {1, 2}: 0.1 + 0.02
    assert problem.objective(np.array([True, True, False, False])) == pytest.approx(0.12)
    # per-device batch sizes 16 and 48: 0.8 / sqrt(64) = 0.1 as well; {3} alone: 0.8 / sqrt(48)
    mixed = SchedulingProblem(
        problem.label_dist, problem.target_dist, np.ones(4), 2.0, 0.8, 1.0, [32, 32, 16, 48]
    )
    assert mixed.sampling_term(two) == pytest.approx(0.1)
    assert mixed.sampling_term(np.array([False, False, False, True])) == pytest.approx(
        0.8 / np.sqrt(48)
    )
    assert sampling_term(2.0, 4) == pytest.approx(1.0)


def test_empty_schedule_is_infinite() -> None:
    problem = paper_example()
    empty = np.zeros(4, dtype=bool)
    assert problem.objective(empty) == np.inf
    assert problem.wemd(empty) == np.inf
    assert problem.sampling_term(empty) == np.inf
    assert problem.is_feasible(empty)


def test_feasibility() -> None:
    problem = SchedulingProblem(
        np.full((3, 2), 0.5), np.array([0.5, 0.5]), np.array([1.0, np.inf, 2.0]), 3.0, 1.0
    )
    np.testing.assert_array_equal(problem.feasible, [True, False, True])
    assert problem.is_feasible(np.array([True, False, True]))  # 1 + 2 = 3 <= 3
    assert not problem.is_feasible(np.array([True, True, False]))  # infeasible device
    tight = SchedulingProblem(
        np.full((3, 2), 0.5), np.array([0.5, 0.5]), np.array([1.0, 1.5, 2.0]), 3.0, 1.0
    )
    assert not tight.is_feasible(np.array([False, True, True]))  # 3.5 > 3


def test_arrays_are_read_only_and_broadcast() -> None:
    problem = paper_example()
    assert not problem.label_dist.flags.writeable
    assert not problem.min_bandwidth_hz.flags.writeable
    np.testing.assert_array_equal(problem.class_gradient_array, [1.0, 1.0])
    np.testing.assert_array_equal(problem.batch_size_array, [32, 32, 32, 32])
    assert problem.num_devices == 4 and problem.num_classes == 2 and problem.uniform_batch


def test_bad_mask() -> None:
    problem = paper_example()
    with pytest.raises(ValueError, match="mask"):
        problem.objective(np.array([1, 0, 1, 0]))
    with pytest.raises(ValueError, match="mask"):
        problem.objective(np.array([True, False]))
