"""The heuristic P1 solvers: GS (paper Algorithm 1), CD (the paper's baseline), FSCD (Alg. 2).

Greedy scheduling, plain coordinate descent and fix-sum coordinate descent. GS and CD are
vectorised over the candidate devices; FSCD's transits come from
:mod:`fedcgd_strategy.solvers.transit_search`. The decisions the paper leaves open are in
docs/design.md, "Greedy scheduling" and "FSCD". Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.problem import SchedulingProblem, sampling_term, wemd
from fedcgd_strategy.solvers.result import (
    TIE_REL_TOL,
    ProblemArrays,
    RunningSums,
    ScheduleResult,
    is_improvement,
)
from fedcgd_strategy.solvers.transit_search import TransitSearch, single_threaded_blas


def greedy_schedule(problem: SchedulingProblem) -> ScheduleResult:
    """Solve P1 (:mod:`fedcgd_strategy.problem`) approximately with greedy scheduling (Algorithm 1).

    From the empty schedule, each pass picks ``v_k = argmin_v W(Pi u {v})`` among the devices that
    are feasible and fit the remaining bandwidth, and adds it while
    ``W(Pi) - W(Pi u {v_k}) + sigma/sqrt(T) - sigma/sqrt(T + b_vk) >= 0`` (``T = sum_{v in Pi}
    b_v``; the first device is always added); ties go to the lowest index, a decrease within
    :data:`~fedcgd_strategy.solvers.result.TIE_REL_TOL` of zero counts as ``>= 0`` (docs/design.md,
    "Greedy scheduling"). ``iterations`` = devices added.
    """
    arrays = ProblemArrays.of(problem)
    selected = np.zeros(problem.num_devices, dtype=bool)
    sums = RunningSums.of(arrays, selected)
    current_wemd = np.inf
    current_sampling = np.inf
    while True:
        fits = sums.used_hz + arrays.bandwidth_hz <= arrays.limit_hz
        candidates = np.flatnonzero(arrays.feasible & ~selected & fits)
        if candidates.size == 0:
            break
        new_wemd = wemd(
            (sums.class_sum + arrays.labels[candidates]) / (sums.count + 1),
            arrays.target,
            arrays.gradient,
        )
        best = int(np.argmin(new_wemd))
        device = int(candidates[best])
        best_wemd = float(np.asarray(new_wemd)[best])
        new_sampling = float(
            sampling_term(arrays.sigma, sums.total_batch + int(arrays.batch[device]))
        )
        if sums.count > 0:
            decrease = (current_wemd - best_wemd) + (current_sampling - new_sampling)
            if decrease < -TIE_REL_TOL * (current_wemd + current_sampling):
                break
        selected[device] = True
        sums.flip(arrays, device, 1)
        current_wemd = best_wemd
        current_sampling = new_sampling
    return ScheduleResult.from_mask(problem, selected, iterations=sums.count, method="gs")


def random_start(problem: SchedulingProblem, rng: np.random.Generator) -> NDArray[np.bool_]:
    """Seeded random 0/1 starting schedule of coordinate descent, repaired to fit the budget.

    Each device draws ``x_v = 1`` with probability 1/2 (one ``rng.random(V)``), infeasible ones are
    cleared, and while the schedule exceeds ``B`` scheduled devices are dropped in a random order
    (one ``rng.permutation``; the paper leaves this open). Returns bool ``[V]``, possibly empty.
    """
    mask = (rng.random(problem.num_devices) < 0.5) & problem.feasible
    if not problem.is_feasible(mask):
        for device in rng.permutation(np.flatnonzero(mask)):
            mask[device] = False
            if problem.is_feasible(mask):
                break
    return mask


def coordinate_descent_schedule(
    problem: SchedulingProblem, rng: np.random.Generator
) -> ScheduleResult:
    """Solve P1 approximately with plain coordinate descent (the paper's CD baseline, Sec. IV-B).

    From :func:`random_start`, move to the best budget-keeping 1-step neighbour (one feasible flip;
    argmin, the printed "argmax" being a typo as in Alg. 2) while it strictly improves; ties go to
    the lowest index. ``iterations`` = accepted flips; an empty schedule with objective ``inf`` when
    no device is feasible or fits.
    """
    arrays = ProblemArrays.of(problem)
    candidates = np.flatnonzero(arrays.feasible)
    selected = random_start(problem, rng)
    sums = RunningSums.of(arrays, selected)
    current = problem.objective(selected)
    flips = 0
    cand_labels = arrays.labels[candidates]
    cand_batch = arrays.batch[candidates]
    cand_bandwidth = arrays.bandwidth_hz[candidates]
    while candidates.size:
        sign = np.where(selected[candidates], -1, 1)
        new_count = sums.count + sign
        new_sums = sums.class_sum + sign[:, None] * cand_labels
        safe_count = np.where(new_count > 0, new_count, 1)
        objective = np.asarray(
            wemd(new_sums / safe_count[:, None], arrays.target, arrays.gradient)
        ) + np.asarray(sampling_term(arrays.sigma, sums.total_batch + sign * cand_batch))
        fits = sums.used_hz + sign * cand_bandwidth <= arrays.limit_hz
        objective = np.where((new_count > 0) & fits, objective, np.inf)
        best = int(np.argmin(objective))
        if not is_improvement(float(objective[best]), current):
            break
        device = int(candidates[best])
        step = int(sign[best])
        selected[device] = step > 0
        sums.flip(arrays, device, step)
        current = float(objective[best])
        flips += 1
    return ScheduleResult.from_mask(problem, selected, iterations=flips, method="cd")


@dataclass(frozen=True)
class FscdStage:
    """The outcome of FSCD for one schedule size ``S``.

    ``start`` (the ``S`` feasible devices with the least ``B*``) and ``selected`` (the local
    optimum) are bool ``[V]``; ``objective`` is that of ``selected``, ``swaps`` the transits.
    """

    size: int
    start: NDArray[np.bool_]
    selected: NDArray[np.bool_]
    objective: float
    swaps: int


def swap_search(
    problem: SchedulingProblem, mask: NDArray[np.bool_]
) -> tuple[NDArray[np.bool_], float, int]:
    """Best-improvement 1-step transit search at a fixed schedule size (inner loop of Alg. 2).

    The objective's argmin among the budget-keeping transits, while it strictly improves (ties:
    lowest ``v``, then lowest ``u``), by :class:`TransitSearch`. ``mask`` is a feasible non-empty
    bool ``[V]`` start. Returns ``(selected, objective, swaps)``.
    """
    with single_threaded_blas():
        return TransitSearch(problem).run(mask)


def fscd_stages(problem: SchedulingProblem) -> list[FscdStage]:
    """Run the ``S`` loop of FSCD (paper Algorithm 2) and return the stage of every ``S`` tried.

    ``S`` runs from the number of feasible devices down to 1, skipping an ``S`` whose cheapest
    devices exceed ``B``, and stops early, as printed, when
    ``W(x^(S)) + sigma/sqrt(S b) <= sigma/sqrt((S-1) b)`` (per-device batch sizes: the objective of
    ``x^(S)`` against the largest ``S-1`` batch sizes).
    """
    search = TransitSearch(problem)
    # B* >= 0, so the sizes whose cheapest devices fit are 1 .. largest.
    largest = int(np.count_nonzero(np.cumsum(search.sorted_hz) <= problem.bandwidth_limit_hz))
    # exit_bounds[k]: sigma / sqrt(largest sum of b_v over k feasible devices), k = 0 .. #feasible
    batch = np.sort(problem.batch_size_array[problem.feasible])[::-1]
    totals = np.concatenate([[0], np.cumsum(batch)]).astype(np.int64)
    exit_bounds = np.asarray(sampling_term(problem.sigma, totals))
    stages: list[FscdStage] = []
    with single_threaded_blas():
        for size in range(largest, 0, -1):
            start = np.zeros(problem.num_devices, dtype=bool)
            start[search.order[:size]] = True
            stages.append(FscdStage(size, start, *search.run(start)))
            if stages[-1].objective <= float(exit_bounds[size - 1]):
                break
    return stages


def fscd_schedule(problem: SchedulingProblem) -> ScheduleResult:
    """Solve P1 (:mod:`fedcgd_strategy.problem`) approximately with FSCD (paper Algorithm 2).

    The best local optimum over the sizes of :func:`fscd_stages` (ties: the larger ``S``).
    ``iterations`` = accepted transits + sizes tried; an empty schedule with objective ``inf`` when
    no device is feasible or fits.
    """
    stages = fscd_stages(problem)
    iterations = sum(stage.swaps for stage in stages) + len(stages)
    best_mask = np.zeros(problem.num_devices, dtype=bool)
    best_objective = np.inf
    for stage in stages:
        if is_improvement(stage.objective, best_objective):
            best_mask, best_objective = stage.selected, stage.objective
    return ScheduleResult.from_mask(problem, best_mask, iterations=iterations, method="fscd")
