"""Plain coordinate descent (CD), the paper's baseline for problem P1, all flips at once."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.problem import SchedulingProblem, sampling_term, wemd
from fedcgd_strategy.solvers.result import (
    ProblemArrays,
    RunningSums,
    ScheduleResult,
    is_improvement,
)


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
