"""Fix-sum coordinate descent (FSCD), paper Algorithm 2, with an incremental 1-step transit search.

Each step of the transit search needs the best swap of a scheduled device ``v`` for an
unscheduled feasible device ``u``. Instead of evaluating the whole ``|Pi| x |not Pi| x C`` grid,
:class:`TransitSearch` (i) keeps, for every scheduled ``v``, the number of unscheduled devices that
fit the budget (they are a prefix of the devices sorted by ``B*``), (ii) bounds every fitting swap
from below with one ``[|Pi|, C + 2] x [C + 2, |not Pi|]`` matrix product, (iii) evaluates only the
swaps whose bound does not exceed the best value found so far, and (iv) settles near-ties by
evaluating the few grid rows involved exactly as the dense grid does, so that the decisions (and
the tie-breaking) are those of the dense search,
:func:`~fedcgd_strategy.solvers.reference.swap_search_dense`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.problem import SchedulingProblem, sampling_term, wemd
from fedcgd_strategy.solvers.result import TIE_REL_TOL, ScheduleResult, is_improvement
from fedcgd_strategy.solvers.setup import FloatArray, ProblemArrays, RunningSums

#: Safety margin of the pruning, relative to ``2 sum_c G_c + sigma + objective``. It covers the
#: rounding differences (~1e-15 relative) between the bound, the candidate evaluation and the
#: dense grid; swaps closer than this to the best are re-evaluated exactly as the dense grid does.
PRUNE_REL_MARGIN = 1e-9


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


def fit_counts(room_hz: FloatArray, sorted_hz: FloatArray, limit_hz: float) -> NDArray[np.intp]:
    """How many leading entries of ``sorted_hz`` fit each ``room_hz``, with the exact budget test.

    ``out[i]`` = number of ``j`` with ``room_hz[i] + sorted_hz[j] <= limit_hz`` evaluated in
    floating point exactly as the dense grid does; the test is monotone in ``sorted_hz[j]``, so
    the fitting entries are a prefix. A binary search on ``limit_hz - room_hz`` gives the prefix up
    to rounding; it is then moved past whole runs of equal values until the test agrees.

    Parameters
    ----------
    room_hz
        ``sum_{w in Pi} B*_w - B*_v`` for each scheduled ``v``, float ``[I]`` in Hz.
    sorted_hz
        ``B*`` of the unscheduled feasible devices, ascending, float ``[O]`` in Hz.
    limit_hz
        Budget in Hz (``B`` with the rounding slack).

    Returns
    -------
    numpy.ndarray
        Prefix lengths, int ``[I]``.

    """
    count = np.searchsorted(sorted_hz, limit_hz - room_hz, side="right")
    size = sorted_hz.size
    while True:
        grow = np.flatnonzero(count < size)
        grow = grow[room_hz[grow] + sorted_hz[count[grow]] <= limit_hz]
        shrink = np.flatnonzero(count > 0)
        shrink = shrink[room_hz[shrink] + sorted_hz[count[shrink] - 1] > limit_hz]
        if grow.size == 0 and shrink.size == 0:
            return count
        count[grow] = np.searchsorted(sorted_hz, sorted_hz[count[grow]], side="right")
        count[shrink] = np.searchsorted(sorted_hz, sorted_hz[count[shrink] - 1], side="left")


class TransitSearch:
    """Incremental best-improvement 1-step transit search of one P1 instance (Alg. 2, inner loop).

    Holds what does not depend on the schedule (the feasible devices sorted by ``B*``, their
    labels, the largest batch size), so that all sizes ``S`` of :func:`fscd_stages` share it.

    Each step finds the transit ``(v, u)`` (scheduled ``v`` leaves, unscheduled feasible ``u``
    enters) of least objective among those that keep ``sum_v x_v B*_v <= B``; ties go to the lowest
    ``v``, then the lowest ``u``; the transit is applied while it is an improvement
    (:func:`~fedcgd_strategy.solvers.result.is_improvement`). The result equals the dense search
    (:func:`~fedcgd_strategy.solvers.reference.swap_search_dense`): same swaps, same objective
    values. How a step avoids the dense grid:

    1. *Budget.* With ``u`` sorted by ``B*``, the transits of ``v`` that fit are a prefix of
       length ``k_v`` (:func:`fit_counts`, the dense grid's own floating-point test).
    2. *Bound.* With ``w = sum_{Pi} p - S p`` and ``s_uc = sign(w_c + p_uc)``,
       ``sum_c G_c |w_c - p_vc + p_uc| >= sum_c G_c |w_c + p_uc| - sum_c G_c s_uc p_vc`` (since
       ``|x| >= s x``), and ``sigma / sqrt(T - b_v + b_u) >= sigma / sqrt(T - b_v + max b)``. So
       the objective of ``(v, u)`` is at least ``L = X Y^T`` with ``X = [p_v, 1, floor_v]``
       (``[I, C + 2]``) and ``Y = [-G s_u / S, sum_c G_c |w_c + p_uc| / S, 1]`` (``[K, C + 2]``):
       one matrix product over the fitting block instead of an ``[I, K, C]`` array.
    3. *Prune.* The exact values of each row's least bound give an upper bound ``U`` on the
       best objective; only transits with ``L <= min(U, current) + margin`` are evaluated
       (typically a few hundred of ``I x K`` ~ 10^5).
    4. *Ties.* The rows holding a transit within the margin of the best are evaluated as the
       dense grid evaluates them (same arrays, same reductions, bit for bit), and the argmin is
       taken over those rows in device order, so rounding-level ties are broken as the dense grid
       breaks them. A step whose best candidate is clearly no improvement ends the search at once.

    Parameters
    ----------
    problem
        The P1 instance.

    """

    def __init__(self, problem: SchedulingProblem) -> None:
        self.arrays = ProblemArrays.of(problem)
        self.order = cheapest_order(problem)
        self.position = np.full(problem.num_devices, -1, dtype=np.intp)
        self.position[self.order] = np.arange(self.order.size)
        self.sorted_hz = self.arrays.bandwidth_hz[self.order]
        self.sorted_labels = np.ascontiguousarray(self.arrays.labels[self.order])
        self.max_batch = int(self.arrays.batch[self.order].max()) if self.order.size else 0
        self.margin_scale = 2.0 * float(self.arrays.gradient.sum()) + self.arrays.sigma

    def run(self, mask: NDArray[np.bool_]) -> tuple[NDArray[np.bool_], float, int]:
        """Search from ``mask`` (feasible, non-empty, bool ``[V]``) until no transit improves.

        Returns
        -------
        tuple
            ``(selected, objective, swaps)``: the local optimum (bool ``[V]``), its objective as
            evaluated on the dense grid, and the number of accepted transits.

        Raises
        ------
        ValueError
            If ``mask`` is empty or schedules an infeasible device.

        """
        selected = np.array(mask, dtype=bool, copy=True)
        if not selected.any() or np.any(selected & ~self.arrays.feasible):
            raise ValueError(
                "mask: the transit search needs a non-empty schedule of feasible devices, got "
                f"{np.flatnonzero(selected).tolist()}"
            )
        sums = RunningSums.of(self.arrays, selected)
        current = sums.objective(self.arrays)
        outside = ~selected[self.order]
        swaps = 0
        while True:
            step = self._best_transit(selected, outside, sums, current)
            if step is None:
                break
            leave, enter, best = step
            selected[leave] = False
            selected[enter] = True
            outside[self.position[leave]] = True
            outside[self.position[enter]] = False
            sums.swap(self.arrays, leave, enter)
            current = best
            swaps += 1
        return selected, current, swaps

    def _best_transit(
        self,
        selected: NDArray[np.bool_],
        outside: NDArray[np.bool_],
        sums: RunningSums,
        current: float,
    ) -> tuple[int, int, float] | None:
        """The dense grid's choice ``(leave, enter, objective)``, or None if it does not improve."""
        arrays = self.arrays
        inside = np.flatnonzero(selected)
        positions = np.flatnonzero(outside)
        room_hz = sums.used_hz - arrays.bandwidth_hz[inside]
        fits = fit_counts(room_hz, self.sorted_hz[positions], arrays.limit_hz)
        width = int(fits.max(initial=0))
        if width == 0:
            return None
        enter = self.order[positions[:width]]
        bound = self._lower_bounds(inside, positions[:width], sums)
        np.putmask(bound, np.arange(width) >= fits[:, None], np.inf)

        margin = PRUNE_REL_MARGIN * (self.margin_scale + abs(current))
        rows = np.flatnonzero(fits > 0)
        cols = bound[rows].argmin(axis=1)
        upper = float(self._objectives(sums, inside[rows], enter[cols]).min())
        rows, cols = np.nonzero(bound <= min(upper, current) + margin)
        values = self._objectives(sums, inside[rows], enter[cols])
        lowest = float(values.min())
        if lowest - margin >= current - TIE_REL_TOL * abs(current):
            return None
        near = np.unique(rows[values <= lowest + margin])
        leave, enter_device, best = self._dense_rows(selected, sums, inside[near])
        if not is_improvement(best, current):
            return None
        return leave, enter_device, best

    def _lower_bounds(
        self, inside: NDArray[np.intp], positions: NDArray[np.intp], sums: RunningSums
    ) -> FloatArray:
        """Lower bounds ``L`` of the transit objectives, float ``[I, K]`` (step 2 above)."""
        arrays = self.arrays
        size = sums.count
        num_classes = arrays.target.size
        shifted = (sums.class_sum - size * arrays.target) + self.sorted_labels[positions]
        left = np.empty((inside.size, num_classes + 2))
        left[:, :num_classes] = arrays.labels[inside]
        left[:, num_classes] = 1.0
        left[:, num_classes + 1] = sampling_term(
            arrays.sigma, sums.total_batch - arrays.batch[inside] + self.max_batch
        )
        right = np.empty((positions.size, num_classes + 2))
        right[:, :num_classes] = np.where(shifted >= 0.0, -arrays.gradient, arrays.gradient) / size
        right[:, num_classes] = (np.abs(shifted) @ arrays.gradient) / size
        right[:, num_classes + 1] = 1.0
        return left @ right.T

    def _objectives(
        self, sums: RunningSums, leave: NDArray[np.intp], enter: NDArray[np.intp]
    ) -> FloatArray:
        """Objectives of the transits ``(leave[i], enter[i])``, float ``[n]`` (to ~1e-15)."""
        arrays = self.arrays
        class_sums = sums.class_sum - arrays.labels[leave] + arrays.labels[enter]
        totals = sums.total_batch - arrays.batch[leave] + arrays.batch[enter]
        deviation = np.abs(class_sums / sums.count - arrays.target)
        return deviation @ arrays.gradient + np.asarray(sampling_term(arrays.sigma, totals))

    def _dense_rows(
        self, selected: NDArray[np.bool_], sums: RunningSums, leave: NDArray[np.intp]
    ) -> tuple[int, int, float]:
        """Argmin over the dense grid's rows ``leave`` (ascending), computed as the grid does.

        The values equal the dense grid's bit for bit: the same ``[rows, |not Pi|, C]`` arrays
        and the same reductions (a matrix-vector product per row); ties go to the first row, then
        the first column.
        """
        arrays = self.arrays
        outside = np.flatnonzero(arrays.feasible & ~selected)
        grid = sums.class_sum - arrays.labels[leave][:, None, :] + arrays.labels[outside][None]
        totals = sums.total_batch - arrays.batch[leave][:, None] + arrays.batch[outside]
        values = np.asarray(wemd(grid / sums.count, arrays.target, arrays.gradient))
        values = values + np.asarray(sampling_term(arrays.sigma, totals))
        room = sums.used_hz - arrays.bandwidth_hz[leave][:, None]
        values = np.where(room + arrays.bandwidth_hz[outside] <= arrays.limit_hz, values, np.inf)
        flat = int(np.argmin(values))
        row, col = divmod(flat, outside.size)
        return int(leave[row]), int(outside[col]), float(values.flat[flat])


def swap_search(
    problem: SchedulingProblem, mask: NDArray[np.bool_]
) -> tuple[NDArray[np.bool_], float, int]:
    """Best-improvement 1-step transit search at a fixed schedule size (inner loop of Alg. 2).

    A 1-step transit swaps one scheduled device ``v`` for one unscheduled feasible device ``u``.
    Each step takes the transit of least objective (argmin; the printed "argmax" is a typo,
    DESIGN.md) among those that keep ``sum_v x_v B*_v <= B``, while it strictly decreases the
    objective (beyond the tie tolerance). Ties go to the lowest ``v``, then the lowest ``u``.
    Evaluated incrementally by :class:`TransitSearch`; same decisions as the dense search.

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
    return TransitSearch(problem).run(mask)


def fscd_stages(problem: SchedulingProblem) -> list[FscdStage]:
    """Run the ``S`` loop of FSCD (paper Algorithm 2) and return the stage of every ``S`` tried.

    ``S`` runs from the number of feasible devices down to 1; an ``S`` whose cheapest ``S`` devices
    exceed ``B`` is skipped. After size ``S`` the loop stops early, as printed, if
    ``W(x^(S)) + sigma/sqrt(S b) <= sigma/sqrt((S-1) b)``; with per-device batch sizes the left
    side is the objective of ``x^(S)`` and the right side uses the largest ``S-1`` batch sizes.
    All sizes share one :class:`TransitSearch`.
    """
    search = TransitSearch(problem)
    order = search.order
    fits = np.cumsum(search.sorted_hz) <= problem.bandwidth_limit_hz
    exit_bounds = sampling_term(problem.sigma, largest_batch_totals(problem))
    stages: list[FscdStage] = []
    for size in range(order.size, 0, -1):
        if not fits[size - 1]:
            continue
        start = np.zeros(problem.num_devices, dtype=bool)
        start[order[:size]] = True
        stage = FscdStage(size, start, *search.run(start))
        stages.append(stage)
        if stage.objective <= float(np.asarray(exit_bounds)[size - 1]):
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
