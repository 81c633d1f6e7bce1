"""Greedy scheduling (GS), paper Algorithm 1, vectorised over the candidate devices."""

from __future__ import annotations

import numpy as np

from fedcgd_strategy.problem import SchedulingProblem, sampling_term, wemd
from fedcgd_strategy.solvers.result import TIE_REL_TOL, ProblemArrays, RunningSums, ScheduleResult


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
