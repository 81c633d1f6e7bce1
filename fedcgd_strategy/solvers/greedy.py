"""Greedy scheduling (GS), paper Algorithm 1, vectorised over the candidate devices."""

from __future__ import annotations

import numpy as np

from fedcgd_strategy.problem import SchedulingProblem, sampling_term, wemd
from fedcgd_strategy.solvers.result import TIE_REL_TOL, ScheduleResult
from fedcgd_strategy.solvers.setup import ProblemArrays, RunningSums


def greedy_schedule(problem: SchedulingProblem) -> ScheduleResult:
    """Solve P1 approximately with greedy scheduling (paper Algorithm 1).

    Problem P1: minimise ``sigma / sqrt(sum_v x_v b_v) + sum_c G_c |sum_v x_v p_vc / sum_v x_v
    - p_c|`` over ``x in {0,1}^V`` subject to ``sum_v x_v B*_v <= B`` and ``x_v = 0`` where
    ``B*_v = inf``.

    Algorithm: start from the empty schedule ``Pi``. In each pass, among the candidate devices pick
    ``v_k = argmin_v W(Pi u {v})`` (the paper's ``argmax_v W(Pi) - W(Pi u {v})``); add it while
    ``W(Pi) - W(Pi u {v_k}) + sigma/sqrt(T) - sigma/sqrt(T + b_vk) >= 0`` with ``T = sum_{v in Pi}
    b_v`` (for uniform ``b`` this is the paper's ``sigma/sqrt(b) (1/sqrt|Pi| - 1/sqrt(|Pi|+1))``),
    else stop. The first device has an infinite sampling gain, so it is always added: it is the
    device with the smallest ``W({v})``. All candidate additions of a pass are evaluated at once
    from the running class sums.

    Decisions (docs/design.md, "Greedy scheduling"): only devices that are feasible (finite
    ``B*_v``) and still fit the remaining bandwidth are candidates. Ties go to the lowest device
    index; a decrease test within :data:`~fedcgd_strategy.solvers.result.TIE_REL_TOL` of zero counts
    as ``>= 0``.

    Returns
    -------
    ScheduleResult
        ``iterations`` = number of devices added (loop passes that accepted a device). If no
        device is feasible or fits, the schedule is empty with objective ``inf``.

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
