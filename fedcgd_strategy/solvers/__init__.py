"""Solvers for problem P1 (paper Section IV-B): greedy, FSCD, coordinate descent and exact.

Oracles: tests/reference_solvers.py. Pure numpy/scipy.
"""

from __future__ import annotations

import numpy as np

from fedcgd_strategy.problem import SchedulingProblem
from fedcgd_strategy.solvers.exact import exact_schedule
from fedcgd_strategy.solvers.heuristics import (
    coordinate_descent_schedule,
    fscd_schedule,
    greedy_schedule,
)
from fedcgd_strategy.solvers.result import ScheduleResult

__all__ = ["METHODS", "ScheduleResult", "solve"]

#: Solver names accepted by :func:`solve`.
METHODS = ("gs", "fscd", "cd", "exact")


def solve(
    problem: SchedulingProblem,
    method: str,
    *,
    rng: np.random.Generator | None = None,
    milp_time_limit_s: float | None = None,
) -> ScheduleResult:
    """Solve P1 with ``method``: ``"gs"`` (Alg. 1), ``"fscd"`` (Alg. 2), ``"cd"`` or ``"exact"``.

    ``rng``: ``"cd"``'s random start; ``milp_time_limit_s`` caps each MILP of ``"exact"`` (None:
    the optimum). No feasible device: an empty schedule, objective ``inf``. ValueError: ``method``.
    """
    if method == "gs":
        return greedy_schedule(problem)
    if method == "fscd":
        return fscd_schedule(problem)
    if method == "cd":
        if rng is None:
            raise ValueError("rng: method 'cd' needs a numpy.random.Generator, got None")
        return coordinate_descent_schedule(problem, rng)
    if method == "exact":
        return exact_schedule(problem, milp_time_limit_s=milp_time_limit_s)
    raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
