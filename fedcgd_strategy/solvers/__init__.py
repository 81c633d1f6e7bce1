"""Solvers for problem P1 (paper Section IV-B): greedy, FSCD, coordinate descent and exact.

The entry point is :func:`solve`; each algorithm also has its own module. The slow, loop-based
versions used as test oracles are in tests/reference_solvers.py
(not installed). Pure numpy/scipy.
"""

from fedcgd_strategy.solvers.dispatch import METHODS, solve
from fedcgd_strategy.solvers.result import ScheduleResult

__all__ = ["METHODS", "ScheduleResult", "solve"]
