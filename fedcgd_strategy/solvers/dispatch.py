"""One entry point for all P1 solvers: :func:`solve`."""

from __future__ import annotations

import numpy as np

from fedcgd_strategy.problem import SchedulingProblem
from fedcgd_strategy.solvers.coordinate_descent import coordinate_descent_schedule
from fedcgd_strategy.solvers.exact import exact_schedule
from fedcgd_strategy.solvers.fscd import fscd_schedule
from fedcgd_strategy.solvers.greedy import greedy_schedule
from fedcgd_strategy.solvers.result import ScheduleResult

#: Solver names accepted by :func:`solve`.
METHODS = ("gs", "fscd", "cd", "exact")


def solve(
    problem: SchedulingProblem,
    method: str,
    *,
    rng: np.random.Generator | None = None,
    milp_time_limit_s: float | None = None,
) -> ScheduleResult:
    """Solve problem P1 with the named method.

    Parameters
    ----------
    problem
        The P1 instance.
    method
        ``"gs"`` (greedy, paper Alg. 1), ``"fscd"`` (fix-sum coordinate descent, Alg. 2), ``"cd"``
        (plain coordinate descent baseline; needs ``rng``) or ``"exact"`` (MILP per size).
    rng
        Random generator for the random start of ``"cd"``; ignored by the other methods.
    milp_time_limit_s
        ``"exact"`` only: cap on each MILP (None = no cap, the true optimum). With a cap the
        result may be suboptimal and carries a proven ``lower_bound``.

    Returns
    -------
    ScheduleResult
        The schedule. When no device is feasible or fits, ``selected`` is all False and
        ``objective`` is ``inf`` (no exception).

    Raises
    ------
    ValueError
        For an unknown ``method``, or ``"cd"`` without ``rng``.

    """
    if method == "gs":
        return greedy_schedule(problem)
    if method == "fscd":
        return fscd_schedule(problem)
    if method == "cd":
        if rng is None:
            raise ValueError(
                "rng: method 'cd' starts from a random schedule and needs a "
                "numpy.random.Generator, got None"
            )
        return coordinate_descent_schedule(problem, rng)
    if method == "exact":
        return exact_schedule(problem, milp_time_limit_s=milp_time_limit_s)
    raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
