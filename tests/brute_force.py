"""Optimum of P1 by enumeration: the brute-force oracle of the solver tests."""

import numpy as np

from fedcgd_strategy.problem import SchedulingProblem
from fedcgd_strategy.solvers.result import ScheduleResult

#: Brute force enumerates 2^V schedules; refuse beyond this many devices.
MAX_BRUTE_FORCE_DEVICES = 20


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
