"""The test oracles of the P1 solvers: brute force, loop versions and the dense FSCD.

Slow and obviously correct; the product uses :func:`fedcgd_strategy.solve`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.problem import SchedulingProblem, sampling_term, wemd
from fedcgd_strategy.solvers.heuristics import FscdStage, random_start
from fedcgd_strategy.solvers.result import (
    TIE_REL_TOL,
    ProblemArrays,
    RunningSums,
    ScheduleResult,
    is_improvement,
)


def _with(mask: NDArray[np.bool_], device: int, value: bool) -> NDArray[np.bool_]:
    out = mask.copy()
    out[device] = value
    return out


def greedy_loop(problem: SchedulingProblem) -> ScheduleResult:
    """Greedy scheduling (paper Algorithm 1), one ``problem.wemd`` call per candidate.

    Same algorithm, candidates and tie-breaking as
    :func:`~fedcgd_strategy.solvers.heuristics.greedy_schedule`.
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


def _descend(
    problem: SchedulingProblem,
    start: NDArray[np.bool_],
    neighbours: Callable[[NDArray[np.bool_]], Iterator[NDArray[np.bool_]]],
) -> tuple[NDArray[np.bool_], int]:
    """Best-improvement local search, one ``problem.objective`` call per neighbour.

    ``neighbours(selected)`` yields the trial masks in tie-breaking order; the first trial with
    the least objective among the non-empty, feasible ones is taken while it is an improvement
    (:func:`~fedcgd_strategy.solvers.result.is_improvement`). Returns the local optimum and the
    number of accepted moves.
    """
    selected = start.copy()
    current = problem.objective(selected)
    moves = 0
    while True:
        best_trial: NDArray[np.bool_] | None = None
        best_value = np.inf
        for trial in neighbours(selected):
            if not trial.any() or not problem.is_feasible(trial):
                continue
            value = problem.objective(trial)
            if value < best_value:
                best_trial, best_value = trial, value
        if best_trial is None or not is_improvement(best_value, current):
            break
        selected, current = best_trial, best_value
        moves += 1
    return selected, moves


def swap_search_loop(
    problem: SchedulingProblem, mask: NDArray[np.bool_]
) -> tuple[NDArray[np.bool_], int]:
    """Best-improvement 1-step transit search at fixed size, one objective call per transit."""

    def transits(selected: NDArray[np.bool_]) -> Iterator[NDArray[np.bool_]]:
        for leave in range(problem.num_devices):
            if not selected[leave]:
                continue
            for enter in range(problem.num_devices):
                if selected[enter] or not problem.feasible[enter]:
                    continue
                yield _with(_with(selected, leave, False), enter, True)

    return _descend(problem, mask, transits)


def fscd_loop(problem: SchedulingProblem) -> ScheduleResult:
    """Fix-sum coordinate descent (paper Algorithm 2), one objective call per transit.

    Same algorithm, early exit and tie-breaking as
    :func:`~fedcgd_strategy.solvers.heuristics.fscd_schedule`.
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


def swap_search_dense(
    problem: SchedulingProblem, mask: NDArray[np.bool_]
) -> tuple[NDArray[np.bool_], float, int]:
    """Best-improvement 1-step transit search at fixed size, whole grid from scratch each step.

    The FSCD inner loop (paper Algorithm 2) evaluated densely: every transit (swap scheduled ``v``
    for unscheduled feasible ``u``) within the budget, argmin while it improves (the printed
    "argmax" is a typo, docs/design.md, "FSCD"); ties to the lowest ``v``, then ``u``. Oracle of
    :func:`~fedcgd_strategy.solvers.heuristics.swap_search` (same arguments and return value).
    """
    arrays = ProblemArrays.of(problem)
    selected = np.array(mask, dtype=bool, copy=True)
    sums = RunningSums.of(arrays, selected)
    size = sums.count
    current = sums.objective(arrays)
    swaps = 0
    while True:
        inside = np.flatnonzero(selected)
        outside = np.flatnonzero(arrays.feasible & ~selected)
        if outside.size == 0:
            break
        class_sums = (
            sums.class_sum - arrays.labels[inside][:, None, :] + arrays.labels[outside][None, :, :]
        )
        totals = sums.total_batch - arrays.batch[inside][:, None] + arrays.batch[outside]
        objective = np.asarray(wemd(class_sums / size, arrays.target, arrays.gradient))
        objective = objective + np.asarray(sampling_term(arrays.sigma, totals))
        room = sums.used_hz - arrays.bandwidth_hz[inside][:, None]
        objective = np.where(
            room + arrays.bandwidth_hz[outside] <= arrays.limit_hz, objective, np.inf
        )
        flat = int(np.argmin(objective))
        best = float(objective.flat[flat])
        if not is_improvement(best, current):
            break
        row, col = divmod(flat, outside.size)
        leave, enter = int(inside[row]), int(outside[col])
        selected[leave] = False
        selected[enter] = True
        sums.swap(arrays, leave, enter)
        current = best
        swaps += 1
    return selected, current, swaps


def fscd_dense_stages(problem: SchedulingProblem) -> list[FscdStage]:
    """The ``S`` loop of FSCD (paper Algorithm 2) with :func:`swap_search_dense`; every stage tried.

    ``S`` runs from the number of feasible devices down to 1; an ``S`` whose cheapest ``S``
    devices (ties in ``B*`` by the lower index) exceed ``B`` is skipped. After size ``S`` the loop
    stops if the objective of ``x^(S)`` is at most ``sigma / sqrt(sum of the S-1 largest b_v)``.
    Oracle of :func:`~fedcgd_strategy.solvers.heuristics.fscd_stages`.
    """
    feasible = np.flatnonzero(problem.feasible)
    by_cost = feasible[np.argsort(problem.min_bandwidth_hz[feasible], kind="stable")]
    cheapest_hz = np.cumsum(problem.min_bandwidth_hz[by_cost])
    batch_desc = np.sort(problem.batch_size_array[feasible])[::-1]
    largest_totals = np.concatenate([[0], np.cumsum(batch_desc)]).astype(np.int64)
    stages: list[FscdStage] = []
    for size in range(by_cost.size, 0, -1):
        if cheapest_hz[size - 1] > problem.bandwidth_limit_hz:
            continue
        start = np.zeros(problem.num_devices, dtype=bool)
        start[by_cost[:size]] = True
        selected, objective, swaps = swap_search_dense(problem, start)
        stages.append(FscdStage(size, start, selected, objective, swaps))
        if objective <= float(sampling_term(problem.sigma, int(largest_totals[size - 1]))):
            break
    return stages


def fscd_dense(problem: SchedulingProblem) -> ScheduleResult:
    """FSCD (paper Algorithm 2) evaluating the whole swap grid at every step.

    Same algorithm, early exit and ties as
    :func:`~fedcgd_strategy.solvers.heuristics.fscd_schedule`; ``iterations`` = accepted transits +
    sizes tried.
    """
    stages = fscd_dense_stages(problem)
    best_mask = np.zeros(problem.num_devices, dtype=bool)
    best_objective = np.inf
    for stage in stages:
        if is_improvement(stage.objective, best_objective):
            best_mask, best_objective = stage.selected, stage.objective
    iterations = sum(stage.swaps for stage in stages) + len(stages)
    return ScheduleResult.from_mask(problem, best_mask, iterations=iterations, method="fscd")


def coordinate_descent_loop(problem: SchedulingProblem, rng: np.random.Generator) -> ScheduleResult:
    """Plain coordinate descent, one objective call per flip.

    Same start (:func:`~fedcgd_strategy.solvers.heuristics.random_start`), flips and
    tie-breaking as :func:`~fedcgd_strategy.solvers.heuristics.coordinate_descent_schedule`.
    """

    def flips(selected: NDArray[np.bool_]) -> Iterator[NDArray[np.bool_]]:
        for device in range(problem.num_devices):
            if problem.feasible[device]:
                yield _with(selected, device, not selected[device])

    selected, count = _descend(problem, random_start(problem, rng), flips)
    return ScheduleResult.from_mask(problem, selected, iterations=count, method="cd")


#: Brute force enumerates 2^V schedules; refuse beyond this many devices.
MAX_BRUTE_FORCE_DEVICES = 20


def brute_force(problem: SchedulingProblem) -> ScheduleResult:
    """Optimum of P1 by enumerating all ``2^V`` schedules (``V <= 20``).

    Every schedule's sums are formed by a matrix product with the 0/1 matrix of all masks; masks
    with an infeasible device or over budget are discarded. Ties go to the smallest mask number
    (``sum_v x_v 2^v``). ``iterations`` = number of schedules enumerated.
    """
    num = problem.num_devices
    assert num <= MAX_BRUTE_FORCE_DEVICES, f"brute force enumerates 2^V schedules; V = {num}"
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
