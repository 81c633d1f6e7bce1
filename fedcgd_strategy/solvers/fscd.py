"""Fix-sum coordinate descent (FSCD), paper Algorithm 2: the loop over schedule sizes ``S``.

For each size ``S`` the search starts from the ``S`` feasible devices with the least ``B*`` and
applies the best 1-step transit while it improves the objective; the transits are found by the
incremental search of :mod:`fedcgd_strategy.solvers.transit_search`, whose decisions are those
of the dense search (:func:`~experiments.bench.reference_solvers.swap_search_dense`). Pure numpy.
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

    Attributes
    ----------
    size
        Schedule size ``S``.
    start
        Starting schedule (the ``S`` feasible devices with the least ``B*``), bool ``[V]``.
    selected
        Local optimum reached by 1-step transits, bool ``[V]``.
    objective
        P1 objective of ``selected``.
    swaps
        Number of accepted 1-step transits.

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

    A 1-step transit swaps one scheduled device ``v`` for one unscheduled feasible device ``u``.
    Each step takes the transit of least objective (argmin; the printed "argmax" is a typo,
    docs/design.md, "FSCD") among those that keep ``sum_v x_v B*_v <= B``, while it strictly
    decreases the objective (beyond the tie tolerance). Ties go to the lowest ``v``, then the lowest
    ``u``. Evaluated incrementally by :class:`TransitSearch`; same decisions as the dense search.

    Parameters
    ----------
    problem
        The P1 instance.
    mask
        Feasible non-empty starting schedule, bool ``[V]``.

    Returns
    -------
    tuple
        ``(selected, objective, swaps)``: the local optimum (bool ``[V]``), its objective as
        evaluated on the swap grid, and the number of accepted transits.

    """
    with single_threaded_blas():
        return TransitSearch(problem).run(mask)


def fscd_stages(problem: SchedulingProblem) -> list[FscdStage]:
    """Run the ``S`` loop of FSCD (paper Algorithm 2) and return the stage of every ``S`` tried.

    ``S`` runs from the number of feasible devices down to 1; an ``S`` whose cheapest ``S`` devices
    exceed ``B`` is skipped. After size ``S`` the loop stops early, as printed, if
    ``W(x^(S)) + sigma/sqrt(S b) <= sigma/sqrt((S-1) b)``; with per-device batch sizes the left
    side is the objective of ``x^(S)`` and the right side uses the largest ``S-1`` batch sizes.
    All sizes share one :class:`TransitSearch`; BLAS runs on one thread meanwhile.
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
    """Solve P1 approximately with fix-sum coordinate descent (paper Algorithm 2).

    Problem P1: minimise ``sigma / sqrt(sum_v x_v b_v) + sum_c G_c |sum_v x_v p_vc / sum_v x_v
    - p_c|`` over ``x in {0,1}^V`` subject to ``sum_v x_v B*_v <= B`` and ``x_v = 0`` where
    ``B*_v = inf``.

    Algorithm: for each schedule size ``S`` (see :func:`fscd_stages`) start from the ``S`` feasible
    devices with the least ``B*`` and apply the best 1-step transit (swap of a scheduled and an
    unscheduled feasible device, :class:`TransitSearch`) while it strictly decreases the objective
    and keeps ``sum_v x_v B*_v <= B``; stop the ``S`` loop by the paper's early exit; return the
    best local optimum over the sizes tried (ties: the larger ``S``).

    Decisions (docs/design.md, "FSCD"): "argmax" in the printed algorithm means argmin; transits
    must keep the bandwidth budget; an ``S`` whose cheapest ``S`` devices exceed ``B`` is skipped.

    Returns
    -------
    ScheduleResult
        ``iterations`` = total accepted transits + number of sizes ``S`` tried. Empty schedule with
        objective ``inf`` when no device is feasible or fits.

    """
    stages = fscd_stages(problem)
    iterations = sum(stage.swaps for stage in stages) + len(stages)
    best_mask = np.zeros(problem.num_devices, dtype=bool)
    best_objective = np.inf
    for stage in stages:
        if is_improvement(stage.objective, best_objective):
            best_mask, best_objective = stage.selected, stage.objective
    return ScheduleResult.from_mask(problem, best_mask, iterations=iterations, method="fscd")
