"""Fix-sum coordinate descent (FSCD), paper Algorithm 2, with all swaps evaluated at once."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.problem import SchedulingProblem, sampling_term, wemd
from fedcgd_strategy.solvers.result import ScheduleResult, is_improvement


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


def swap_search(
    problem: SchedulingProblem, mask: NDArray[np.bool_]
) -> tuple[NDArray[np.bool_], float, int]:
    """Best-improvement 1-step transit search at a fixed schedule size (inner loop of Alg. 2).

    A 1-step transit swaps one scheduled device ``v`` for one unscheduled feasible device ``u``.
    Each step evaluates the whole ``|Pi| x |not Pi|`` grid of transits from the running class
    sums (array ``[|Pi|, |not Pi|, C]``), discards those that break ``sum_v x_v B*_v <= B``, and
    takes the best one (argmin of the objective; the printed "argmax" is a typo, DESIGN.md)
    while it strictly decreases the objective (beyond the tie tolerance). Ties go to the lowest
    ``v``, then the lowest ``u``.

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
        evaluated by the running sums, and the number of accepted transits.

    """
    labels = problem.label_dist
    target = problem.target_dist
    gradient = problem.class_gradient_array
    batch = problem.batch_size_array
    bandwidth = problem.min_bandwidth_hz
    limit_hz = problem.bandwidth_limit_hz
    feasible = problem.feasible

    selected = np.array(mask, dtype=bool, copy=True)
    size = int(selected.sum())
    class_sum = labels[selected].sum(axis=0)
    total_batch = int(batch[selected].sum())
    used_hz = float(bandwidth[selected].sum())
    current = float(wemd(class_sum / size, target, gradient)) + float(
        sampling_term(problem.sigma, total_batch)
    )
    swaps = 0
    while True:
        inside = np.flatnonzero(selected)
        outside = np.flatnonzero(feasible & ~selected)
        if outside.size == 0:
            break
        sums = class_sum - labels[inside][:, None, :] + labels[outside][None, :, :]
        objective = np.asarray(wemd(sums / size, target, gradient)) + np.asarray(
            sampling_term(problem.sigma, total_batch - batch[inside][:, None] + batch[outside])
        )
        fits = used_hz - bandwidth[inside][:, None] + bandwidth[outside][None, :] <= limit_hz
        objective = np.where(fits, objective, np.inf)
        flat = int(np.argmin(objective))
        best = float(objective.flat[flat])
        if not is_improvement(best, current):
            break
        row, col = divmod(flat, outside.size)
        leave, enter = int(inside[row]), int(outside[col])
        selected[leave] = False
        selected[enter] = True
        class_sum = class_sum - labels[leave] + labels[enter]
        total_batch += int(batch[enter]) - int(batch[leave])
        used_hz += float(bandwidth[enter]) - float(bandwidth[leave])
        current = best
        swaps += 1
    return selected, current, swaps


def cheapest_order(problem: SchedulingProblem) -> NDArray[np.intp]:
    """Feasible devices sorted by ``B*`` ascending, ties by the lower index (Alg. 2, line 2)."""
    candidates = np.flatnonzero(problem.feasible)
    return candidates[np.argsort(problem.min_bandwidth_hz[candidates], kind="stable")]


def cheapest_start(problem: SchedulingProblem, size: int) -> NDArray[np.bool_] | None:
    """FSCD's starting point: the ``size`` feasible devices with the least ``B*`` (Alg. 2, line 2).

    Ties in ``B*`` go to the lower index. Returns ``None`` if fewer than ``size`` devices are
    feasible or the cheapest ``size`` already exceed ``B`` (such an ``S`` is skipped, DESIGN.md).
    """
    order = cheapest_order(problem)
    if size < 1 or size > order.size:
        return None
    mask = np.zeros(problem.num_devices, dtype=bool)
    mask[order[:size]] = True
    if not problem.is_feasible(mask):
        return None
    return mask


def largest_batch_totals(problem: SchedulingProblem) -> NDArray[np.int64]:
    """``out[k]`` = largest ``sum_v b_v`` over ``k`` feasible devices, ``k = 0 .. #feasible``.

    Used by FSCD's early exit: no schedule with ``k`` or fewer devices has a sampling term below
    ``sigma / sqrt(out[k])``.
    """
    batch = np.sort(problem.batch_size_array[problem.feasible])[::-1]
    return np.concatenate([[0], np.cumsum(batch)]).astype(np.int64)


def fscd_stages(problem: SchedulingProblem) -> list[FscdStage]:
    """Run the ``S`` loop of FSCD (paper Algorithm 2) and return the stage of every ``S`` tried.

    ``S`` runs from the number of feasible devices down to 1; an ``S`` whose cheapest ``S`` devices
    exceed ``B`` is skipped. After size ``S`` the loop stops early, as printed, if
    ``W(x^(S)) + sigma/sqrt(S b) <= sigma/sqrt((S-1) b)``; with per-device batch sizes the left
    side is the objective of ``x^(S)`` and the right side uses the largest ``S-1`` batch sizes.
    """
    order = cheapest_order(problem)
    cheapest_hz = np.cumsum(problem.min_bandwidth_hz[order])
    batch_totals = largest_batch_totals(problem)
    stages: list[FscdStage] = []
    for size in range(order.size, 0, -1):
        if cheapest_hz[size - 1] > problem.bandwidth_limit_hz:
            continue
        start = np.zeros(problem.num_devices, dtype=bool)
        start[order[:size]] = True
        selected, objective, swaps = swap_search(problem, start)
        stages.append(FscdStage(size, start, selected, objective, swaps))
        if objective <= float(sampling_term(problem.sigma, int(batch_totals[size - 1]))):
            break
    return stages


def fscd_schedule(problem: SchedulingProblem) -> ScheduleResult:
    """Solve P1 approximately with fix-sum coordinate descent (paper Algorithm 2).

    Problem P1: minimise ``sigma / sqrt(sum_v x_v b_v) + sum_c G_c |sum_v x_v p_vc / sum_v x_v
    - p_c|`` over ``x in {0,1}^V`` subject to ``sum_v x_v B*_v <= B`` and ``x_v = 0`` where
    ``B*_v = inf``.

    Algorithm: for each schedule size ``S`` (see :func:`fscd_stages`) start from the ``S`` feasible
    devices with the least ``B*`` and apply the best 1-step transit (swap of a scheduled and an
    unscheduled feasible device, :func:`swap_search`) while it strictly decreases the objective and
    keeps ``sum_v x_v B*_v <= B``; stop the ``S`` loop by the paper's early exit; return the best
    local optimum over the sizes tried (ties: the larger ``S``).

    DESIGN.md decisions: "argmax" in the printed algorithm means argmin; transits must keep the
    bandwidth budget; an ``S`` whose cheapest ``S`` devices exceed ``B`` is skipped.

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
