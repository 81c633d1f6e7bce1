"""P1 solvers: hand-solvable cases, brute force, loop oracles and properties."""

import numpy as np
import pytest
import reference_solvers as reference
from reference_solvers import brute_force
from test_policies import paper_example  # paper Section IV-A: room for two

from fedcgd_strategy import METHODS, SchedulingProblem, solve
from fedcgd_strategy.solvers.exact import size_batch_pairs
from fedcgd_strategy.solvers.heuristics import fscd_stages

TOL = 1e-9


def random_problem(
    rng: np.random.Generator, num_devices: int, *, mixed_batch: bool = False
) -> SchedulingProblem:
    """Dirichlet label mixes, uniform B* with ~10 % infeasible devices, a random sigma/G ratio."""
    num_classes = int(rng.integers(2, 6))
    alpha = float(rng.choice([0.1, 1.0, 10.0]))
    labels = rng.dirichlet(np.full(num_classes, alpha), size=num_devices)
    bandwidth = rng.uniform(0.5e6, 5e6, num_devices)
    bandwidth[rng.random(num_devices) < 0.1] = np.inf
    batch = rng.choice([16, 32, 48], num_devices) if mixed_batch else 32
    return SchedulingProblem(
        label_dist=labels,
        target_dist=np.full(num_classes, 1.0 / num_classes),
        min_bandwidth_hz=bandwidth,
        total_bandwidth_hz=float(rng.uniform(3e6, 15e6)),
        sigma=float(rng.choice([0.1, 0.3, 1.0, 3.0]) * np.sqrt(32)),
        class_gradient=rng.uniform(0.5, 2.0, num_classes) if rng.random() < 0.5 else 1.0,
        batch_size=batch,
    )


def test_paper_example_optimum_is_devices_3_and_4_and_the_heuristics_stop_short() -> None:
    # sigma / sqrt(2 * 32) = 0.01 / 8 = 0.00125; sigma / sqrt(32) = 0.0017678
    # {3, 4}: 0.00125 + 0       = 0.00125     <- optimum
    # {1, 2}: 0.00125 + 0.02    = 0.02125
    # {1, 3}: 0.00125 + 0.31    = 0.31125     ({1,4}, {2,3}, {2,4} alike)
    # {1}:    0.0017678 + 0.02  = 0.0217678   ({3} or {4}: 0.0017678 + 0.6)
    problem = paper_example()
    expected = np.array([False, False, True, True])
    exact = solve(problem, "exact")
    np.testing.assert_array_equal(exact.selected, expected)
    assert exact.objective == pytest.approx(0.00125)
    np.testing.assert_array_equal(brute_force(problem).selected, expected)
    # FSCD (budget fits S <= 2): S = 2 starts from the cheapest two, {1, 2} (ties by index),
    # W = 0.02. Every transit is worse: {1,3}/{2,3}: 0.31, {1,4}/{2,4}: |0.355 - 0.5| * 2 = 0.29,
    # so {1, 2} is a local optimum (reaching {3, 4} needs two swaps). No early exit (0.02125 >
    # 0.0017678). S = 1: {1}, 0.0217678; swaps to {3}/{4} give 0.6 + ... -> stays.
    # Best over S: {1, 2}, 0.02125; iterations = 0 swaps + 2 sizes.
    fscd = solve(problem, "fscd")
    np.testing.assert_array_equal(fscd.selected, [True, True, False, False])
    assert fscd.objective == pytest.approx(0.02125)
    assert fscd.iterations == 2
    # GS: first pick argmin W({v}) = device 1 (W = 0.02, tie with 2 -> lowest index).
    # Next: W({1,2}) = 0.02 (decrease 0), W({1,3}) = 0.31, W({1,4}) = |0.355-0.5|*2 = 0.29.
    # v_k = 2, decrease 0 + 0.0017678 - 0.00125 >= 0 -> added; budget full -> stop.
    result = solve(problem, "gs")
    np.testing.assert_array_equal(result.selected, [True, True, False, False])
    assert result.objective == pytest.approx(0.02125)
    assert result.iterations == 2


def test_greedy_hand_instance_with_sampling_stop() -> None:
    # Two classes, p = [.5, .5], b = 32, sigma = 0.08 (sigma/sqrt(32) = 0.0141421).
    # devices: A [.5, .5], B [.9, .1], huge budget.
    # GS: first A (W = 0). Then B: W({A,B}) = |0.7-0.5|*2 = 0.4; decrease = -0.4
    # + 0.0141421 - 0.01 < 0 -> stop. Schedule {A}, objective 0.0141421.
    problem = SchedulingProblem(
        np.array([[0.5, 0.5], [0.9, 0.1]]), np.array([0.5, 0.5]), np.ones(2), 10.0, 0.08
    )
    result = solve(problem, "gs")
    np.testing.assert_array_equal(result.selected, [True, False])
    assert result.objective == pytest.approx(0.08 / np.sqrt(32))
    assert result.iterations == 1


@pytest.mark.parametrize("method", METHODS)
def test_nothing_feasible_gives_empty_schedule(method: str) -> None:
    labels = np.array([[0.5, 0.5], [0.2, 0.8]])
    for bandwidth in (np.array([np.inf, np.inf]), np.array([5.0, 6.0])):
        problem = SchedulingProblem(labels, np.array([0.5, 0.5]), bandwidth, 1.0, 1.0)
        result = solve(problem, method, rng=np.random.default_rng(0))
        assert not result.selected.any()
        assert result.objective == np.inf
        assert result.bandwidth_used_hz == 0.0


def test_unknown_method_missing_rng_and_too_many_batch_pairs() -> None:
    with pytest.raises(ValueError, match="gs"):
        solve(paper_example(), "annealing")
    with pytest.raises(ValueError, match="rng"):
        solve(paper_example(), "cd")
    rng = np.random.default_rng(3)
    labels, b = rng.dirichlet(np.ones(3), size=40), rng.integers(1, 10_000, 40)
    problem = SchedulingProblem(labels, np.full(3, 1 / 3), np.full(40, 1.0), 100.0, 1.0, 1.0, b)
    with pytest.raises(ValueError, match="batch_size"):
        size_batch_pairs(problem)


def test_exact_equals_brute_force_on_random_instances() -> None:
    rng = np.random.default_rng(2024)
    for index in range(100):
        problem = random_problem(rng, int(rng.integers(6, 13)), mixed_batch=index % 4 == 0)
        exact = solve(problem, "exact")
        brute = brute_force(problem)
        assert problem.is_feasible(exact.selected)
        if brute.objective == np.inf:
            assert exact.objective == np.inf
            continue
        assert exact.objective == pytest.approx(brute.objective, rel=TOL), index
        assert exact.lower_bound <= exact.objective * (1 + TOL)


def test_brute_force_matches_plain_enumeration() -> None:
    rng = np.random.default_rng(5)
    for _ in range(10):
        problem = random_problem(rng, 6, mixed_batch=True)
        best = np.inf
        for code in range(2**6):
            mask = np.array([(code >> v) & 1 == 1 for v in range(6)])
            if mask.any() and problem.is_feasible(mask):
                best = min(best, problem.objective(mask))
        assert brute_force(problem).objective == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("mixed_batch", [False, True])
def test_vectorised_solvers_equal_loop_oracles(mixed_batch: bool) -> None:
    rng = np.random.default_rng(7 + mixed_batch)
    for index in range(25):
        problem = random_problem(rng, int(rng.integers(5, 25)), mixed_batch=mixed_batch)
        pairs = [
            (solve(problem, "gs"), reference.greedy_loop(problem)),
            (solve(problem, "fscd"), reference.fscd_loop(problem)),
            (
                solve(problem, "cd", rng=np.random.default_rng(index)),
                reference.coordinate_descent_loop(problem, np.random.default_rng(index)),
            ),
        ]
        for fast, slow in pairs:
            np.testing.assert_array_equal(fast.selected, slow.selected, err_msg=fast.method)
            assert fast.iterations == slow.iterations, fast.method
            assert fast.objective == slow.objective


def test_heuristics_feasible_and_not_better_than_exact() -> None:
    rng = np.random.default_rng(11)
    for index in range(40):
        problem = random_problem(rng, int(rng.integers(4, 13)), mixed_batch=index % 3 == 0)
        optimum = brute_force(problem).objective
        for method in ("gs", "fscd", "cd"):
            result = solve(problem, method, rng=np.random.default_rng(index))
            assert problem.is_feasible(result.selected)
            assert not np.any(result.selected & ~problem.feasible)
            assert result.objective >= optimum * (1 - TOL)
            assert result.objective == pytest.approx(problem.objective(result.selected))
            assert result.wemd + result.sampling_term == pytest.approx(result.objective)
            used = problem.min_bandwidth_hz[result.selected].sum()
            assert result.bandwidth_used_hz == pytest.approx(used)


def test_fscd_stages_never_worse_than_their_start() -> None:
    rng = np.random.default_rng(13)
    for _ in range(40):
        problem = random_problem(rng, int(rng.integers(4, 20)))
        stages = fscd_stages(problem)
        sizes = [stage.size for stage in stages]
        assert sizes == sorted(sizes, reverse=True)
        for stage in stages:
            assert int(stage.selected.sum()) == stage.size == int(stage.start.sum())
            assert problem.is_feasible(stage.start) and problem.is_feasible(stage.selected)
            assert stage.objective <= problem.objective(stage.start) * (1 + 1e-12)
            # start = the S feasible devices with the least B*
            cost = problem.min_bandwidth_hz
            assert cost[stage.start].max() <= cost[~stage.start & problem.feasible].min(
                initial=np.inf
            )
        result = solve(problem, "fscd")
        if stages:
            assert result.objective == pytest.approx(min(s.objective for s in stages))
            assert result.iterations == len(stages) + sum(s.swaps for s in stages)


def test_exact_on_large_instance_beats_heuristics() -> None:
    rng = np.random.default_rng(19)
    labels, need = rng.dirichlet(np.full(10, 1.0), size=40), rng.uniform(1e6, 4e6, 40)
    problem = SchedulingProblem(labels, np.full(10, 0.1), need, 20e6, 3.0 * np.sqrt(32))
    exact = solve(problem, "exact")
    assert exact.lower_bound == pytest.approx(exact.objective, rel=1e-6)
    for method in ("gs", "fscd"):
        assert solve(problem, method).objective >= exact.objective * (1 - TOL)
