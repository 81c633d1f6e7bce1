"""Fix-sum coordinate descent (FSCD), paper Algorithm 2: the loop over schedule sizes ``S``.

The transits come from :mod:`fedcgd_strategy.solvers.transit_search`; the decisions the paper
leaves open are in docs/design.md, "FSCD". Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.problem import SchedulingProblem, sampling_term
from fedcgd_strategy.solvers.result import ScheduleResult, is_improvement
from fedcgd_strategy.solvers.transit_search import TransitSearch, single_threaded_blas


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


def largest_batch_totals(problem: SchedulingProblem) -> NDArray[np.int64]:
    """``out[k]`` = largest ``sum_v b_v`` over ``k`` feasible devices, ``k = 0 .. #feasible``.

    Used by FSCD's early exit: no schedule with ``k`` or fewer devices has a sampling term below
    ``sigma / sqrt(out[k])``.
    """
    batch = np.sort(problem.batch_size_array[problem.feasible])[::-1]
    return np.concatenate([[0], np.cumsum(batch)]).astype(np.int64)


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
    exit_bounds = np.asarray(sampling_term(problem.sigma, largest_batch_totals(problem)))
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
