"""Slow, obviously-correct references for the P1 solvers: loop versions and brute force.

The loop versions follow the same algorithms and tie-breaking as the vectorised solvers but
evaluate every candidate with :meth:`SchedulingProblem.objective` (or ``wemd``) on a fresh mask.
They are the test oracle and the benchmark baseline; use :func:`fedcgd_strategy.solve` otherwise.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.problem import SchedulingProblem
from fedcgd_strategy.solvers.coordinate_descent import random_start
from fedcgd_strategy.solvers.result import TIE_REL_TOL, ScheduleResult, is_improvement

#: Brute force enumerates 2^V schedules; refuse beyond this many devices.
MAX_BRUTE_FORCE_DEVICES = 20


def _with(mask: NDArray[np.bool_], device: int, value: bool) -> NDArray[np.bool_]:
    out = mask.copy()
    out[device] = value
    return out


def greedy_loop(problem: SchedulingProblem) -> ScheduleResult:
    """Greedy scheduling (paper Algorithm 1), one ``problem.wemd`` call per candidate.

    Same algorithm, candidates and tie-breaking as
    :func:`~fedcgd_strategy.solvers.greedy.greedy_schedule`.
    """
    selected = np.zeros(problem.num_devices, dtype=bool)
    added = 0
    while True:
        best_device, best_wemd = -1, np.inf
        for device in range(problem.num_devices):
            if selected[device]:
                continue
            trial = _with(selected, device, True)
            if not problem.is_feasible(trial):
                continue
            value = problem.wemd(trial)
            if best_device < 0 or value < best_wemd:
                best_device, best_wemd = device, value
        if best_device < 0:
            break
        trial = _with(selected, best_device, True)
        if added > 0:
            current_wemd = problem.wemd(selected)
            current_sampling = problem.sampling_term(selected)
            decrease = (current_wemd - best_wemd) + (
                current_sampling - problem.sampling_term(trial)
            )
            if decrease < -TIE_REL_TOL * (current_wemd + current_sampling):
                break
        selected = trial
        added += 1
    return ScheduleResult.from_mask(problem, selected, iterations=added, method="gs")


def swap_search_loop(
    problem: SchedulingProblem, mask: NDArray[np.bool_]
) -> tuple[NDArray[np.bool_], int]:
    """Best-improvement 1-step transit search at fixed size, one objective call per transit."""
    selected = mask.copy()
    current = problem.objective(selected)
    swaps = 0
    while True:
        best_trial: NDArray[np.bool_] | None = None
        best_value = np.inf
        for leave in range(problem.num_devices):
            if not selected[leave]:
                continue
            for enter in range(problem.num_devices):
                if selected[enter] or not problem.feasible[enter]:
                    continue
                trial = _with(_with(selected, leave, False), enter, True)
                if not problem.is_feasible(trial):
                    continue
                value = problem.objective(trial)
                if value < best_value:
                    best_trial, best_value = trial, value
        if best_trial is None or not is_improvement(best_value, current):
            break
        selected, current = best_trial, best_value
        swaps += 1
    return selected, swaps


def fscd_loop(problem: SchedulingProblem) -> ScheduleResult:
    """Fix-sum coordinate descent (paper Algorithm 2), one objective call per transit.

    Same algorithm, early exit and tie-breaking as
    :func:`~fedcgd_strategy.solvers.fscd.fscd_schedule`.
    """
    feasible = [v for v in range(problem.num_devices) if problem.feasible[v]]
    by_cost = sorted(feasible, key=lambda v: (problem.min_bandwidth_hz[v], v))
    batch_desc = sorted((int(problem.batch_size_array[v]) for v in feasible), reverse=True)
    best_mask = np.zeros(problem.num_devices, dtype=bool)
    best_value = np.inf
    iterations = 0
    for size in range(len(feasible), 0, -1):
        start = np.zeros(problem.num_devices, dtype=bool)
        start[by_cost[:size]] = True
        if not problem.is_feasible(start):
            continue
        selected, swaps = swap_search_loop(problem, start)
        iterations += swaps + 1
        value = problem.objective(selected)
        if is_improvement(value, best_value):
            best_mask, best_value = selected, value
        smaller = sum(batch_desc[: size - 1])
        bound = problem.sigma / np.sqrt(smaller) if smaller > 0 else np.inf
        if value <= bound:
            break
    return ScheduleResult.from_mask(problem, best_mask, iterations=iterations, method="fscd")


def coordinate_descent_loop(problem: SchedulingProblem, rng: np.random.Generator) -> ScheduleResult:
    """Plain coordinate descent, one objective call per flip.

    Same start (:func:`~fedcgd_strategy.solvers.coordinate_descent.random_start`), flips and
    tie-breaking as :func:`~fedcgd_strategy.solvers.coordinate_descent.coordinate_descent_schedule`.
    """
    selected = random_start(problem, rng)
    current = problem.objective(selected)
    flips = 0
    while True:
        best_trial: NDArray[np.bool_] | None = None
        best_value = np.inf
        for device in range(problem.num_devices):
            if not problem.feasible[device]:
                continue
            trial = _with(selected, device, not selected[device])
            if not trial.any() or not problem.is_feasible(trial):
                continue
            value = problem.objective(trial)
            if value < best_value:
                best_trial, best_value = trial, value
        if best_trial is None or not is_improvement(best_value, current):
            break
        selected, current = best_trial, best_value
        flips += 1
    return ScheduleResult.from_mask(problem, selected, iterations=flips, method="cd")


def brute_force(problem: SchedulingProblem) -> ScheduleResult:
    """Optimum of P1 by enumerating all ``2^V`` schedules (``V <= 20``).

    Every schedule's sums are formed by a matrix product with the 0/1 matrix of all masks; masks
    with an infeasible device or over budget are discarded. Ties go to the smallest mask number
    (``sum_v x_v 2^v``). ``iterations`` = number of schedules enumerated.

    Raises
    ------
    ValueError
        If ``V`` exceeds :data:`MAX_BRUTE_FORCE_DEVICES`.

    """
    num = problem.num_devices
    if num > MAX_BRUTE_FORCE_DEVICES:
        raise ValueError(
            f"brute force enumerates 2^V schedules; V = {num} exceeds the allowed "
            f"{MAX_BRUTE_FORCE_DEVICES}"
        )
    codes = np.arange(2**num)
    masks = ((codes[:, None] >> np.arange(num)) & 1).astype(bool)
    count = masks.sum(axis=1)
    sums = masks.astype(float) @ problem.label_dist
    mean = sums / np.maximum(count, 1)[:, None]
    wemd_values = np.abs(mean - problem.target_dist) @ problem.class_gradient_array
    total_batch = masks.astype(float) @ problem.batch_size_array.astype(float)
    sampling = problem.sigma / np.sqrt(np.maximum(total_batch, 1.0))
    finite_hz = np.where(problem.feasible, problem.min_bandwidth_hz, 0.0)
    used_hz = masks.astype(float) @ finite_hz
    valid = (
        (count > 0)
        & ~np.any(masks & ~problem.feasible, axis=1)
        & (used_hz <= problem.bandwidth_limit_hz)
    )
    objective = np.where(valid, wemd_values + sampling, np.inf)
    best = int(np.argmin(objective))
    mask = masks[best] if np.isfinite(objective[best]) else np.zeros(num, dtype=bool)
    return ScheduleResult.from_mask(problem, mask, iterations=2**num, method="brute_force")
