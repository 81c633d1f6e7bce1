"""FSCD's incremental 1-step transit search (paper Algorithm 2, inner loop).

Each step of the transit search needs the best swap of a scheduled device ``v`` for an
unscheduled feasible device ``u``. Instead of evaluating the whole ``|Pi| x |not Pi| x C`` grid,
:class:`TransitSearch` (i) finds, for every scheduled ``v``, the unscheduled devices that fit the
budget (a prefix of the devices sorted by ``B*``), (ii) bounds every fitting swap from below with
one ``[|Pi|, C + 2] x [C + 2, |not Pi|]`` matrix product plus an exact term for each ``v``'s
dominant class, (iii) evaluates only the swaps whose bound does not exceed the best value found,
and (iv) settles near-ties by evaluating the few grid rows involved exactly as the dense grid
does, so that the decisions, tie-breaking included, are those of the dense search
(:func:`~experiments.bench.reference_solvers.swap_search_dense`). At 1,000-3,000 candidate devices
this is 10-20 times faster (``fedcgd bench fscd-scale``). Pure numpy (threadpoolctl,
when installed, only to keep BLAS on one thread).
"""

from __future__ import annotations

import contextlib
import functools
from contextlib import AbstractContextManager
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.problem import SchedulingProblem, sampling_term, wemd
from fedcgd_strategy.solvers.result import TIE_REL_TOL, is_improvement
from fedcgd_strategy.solvers.setup import FloatArray, ProblemArrays, RunningSums

#: Device or row indices (``np.flatnonzero`` and friends).
IndexArray = NDArray[np.intp]

#: Safety margin of the pruning by the lower bound, in units of ``(C + 2) * eps * (2 sum_c G_c +
#: 2 |objective|)``: the bound and the objective values each sum at most ``C + 2`` rounded terms of
#: at most that size, so they are off by a few ``(C + 2) * eps`` of it; 64 is a wide safety factor.
#: A larger margin only costs more candidate evaluations.
PRUNE_MARGIN_ULPS = 64.0
#: Tie margin in units of ``(C + 1) * eps * |objective|``: a candidate value differs from the dense
#: grid's value of the same transit only in the order of the ``C``-term weighted sum and one
#: addition (the same rounded class terms enter both), i.e. by at most ``(C + 1) eps / 2`` of the
#: objective each way; 8 is a safety factor. Rows with a candidate this close to the best are
#: evaluated as the dense grid evaluates them.
TIE_MARGIN_ULPS = 8.0
#: Candidates evaluated before the bound is tightened by the best value among them.
EVALUATE_FIRST = 256
#: Up to this many fitting transits, all are evaluated directly (no bound).
EVALUATE_ALL = 4096
#: Up to this many elements ``I * O * C`` a step evaluates the whole grid as the dense search does
#: (cheaper than the bookkeeping below this size).
DENSE_GRID = 32768
#: Up to this many rows of the bound with fewer fitting transits than the widest are masked one
#: by one; more are masked in one pass.
MASK_BY_LOOP = 8


@functools.cache
def _blas_controller() -> Any:
    """The threadpoolctl controller of the loaded BLAS libraries (None without threadpoolctl)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # threadpoolctl comes with scikit-learn, a dependency
        return None
    return ThreadpoolController()


def single_threaded_blas() -> AbstractContextManager[object]:
    """Context in which BLAS runs on one thread (a no-op without threadpoolctl).

    The transit search makes hundreds of small matrix products; BLAS threads speed them up
    little and, on a machine whose cores are busy (the simulation engine's clients), make each
    one up to ten times slower. The matrix-vector products of the dense grid give the same bits
    for any thread count at these sizes, so the search's decisions do not change.
    """
    controller = _blas_controller()
    if controller is None:
        return contextlib.nullcontext()
    return cast(AbstractContextManager[object], controller.limit(limits=1, user_api="blas"))


def cheapest_order(problem: SchedulingProblem) -> IndexArray:
    """Feasible devices sorted by ``B*`` ascending, ties by the lower index (Alg. 2, line 2)."""
    candidates = np.flatnonzero(problem.feasible)
    return candidates[np.argsort(problem.min_bandwidth_hz[candidates], kind="stable")]


def fit_counts(room_hz: FloatArray, sorted_hz: FloatArray, limit_hz: float) -> IndexArray:
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
    last = sorted_hz.size - 1
    if last < 0:
        return count
    while True:
        after = sorted_hz[np.minimum(count, last)]
        grow = (count <= last) & (room_hz + after <= limit_hz)
        before = sorted_hz[np.maximum(count - 1, 0)]
        shrink = (count > 0) & (room_hz + before > limit_hz)
        if not (grow.any() or shrink.any()):
            return count
        count[grow] = np.searchsorted(sorted_hz, after[grow], side="right")
        count[shrink] = np.searchsorted(sorted_hz, before[shrink], side="left")


class TransitSearch:
    """Incremental best-improvement 1-step transit search of one P1 instance (Alg. 2, inner loop).

    Problem solved at each step: among the transits ``(v, u)`` (scheduled ``v`` leaves,
    unscheduled feasible ``u`` enters) that keep ``sum_v x_v B*_v <= B``, find the one of least
    P1 objective ``sum_c G_c |(sum_Pi p_c - p_vc + p_uc) / S - p_c| + sigma / sqrt(T - b_v +
    b_u)`` (``S = |Pi|``, ``T = sum_Pi b``); ties go to the lowest ``v``, then the lowest ``u``.
    The transit is applied while it is an improvement
    (:func:`~fedcgd_strategy.solvers.result.is_improvement`). The decisions and the objective
    values are those of the dense search
    (:func:`~experiments.bench.reference_solvers.swap_search_dense`), which evaluates the whole
    ``[I, O, C]`` grid (``I = |Pi|``, ``O`` unscheduled feasible devices) at every step. A step
    here:

    1. *Budget.* With the unscheduled devices sorted by ``B*``, the transits of ``v`` that fit
       are a prefix of length ``k_v`` (:func:`fit_counts`, with the dense grid's own
       floating-point test); ``K = max_v k_v`` columns are considered.
    2. *Small grids.* A grid of at most :data:`DENSE_GRID` elements ``I * O * C`` is evaluated
       whole, as the dense search does. Otherwise, if at most :data:`EVALUATE_ALL` transits fit,
       all of them are evaluated (step 4).
    3. *Bound.* Otherwise, with ``w = sum_Pi p - S p`` and ``s_uc = sign(w_c + p_uc)``,
       ``|w_c - p_vc + p_uc| >= s_uc (w_c + p_uc) - s_uc p_vc`` for every class and
       ``sigma / sqrt(T - b_v + b_u) >= sigma / sqrt(T - b_v + max b)``, so one matrix product
       ``[I, C + 2] x [C + 2, K]`` bounds every transit from below. For the class ``d`` in which
       ``v`` holds most of its samples (rows are grouped by it) the exact term replaces the
       linear one: where ``s_ud = +1`` it adds ``2 G_d max(0, p_vd - w_d - p_ud) / S``. The exact
       values at each row's least bound give an upper bound ``U`` on the best objective; only
       transits with bound ``<= min(U, current) + margin`` are candidates (typically a few hundred
       of ``I x K ~ 10^5``), and of those only the ones whose bound stays below the best of the
       :data:`EVALUATE_FIRST` most promising are evaluated.
    4. *Values.* Candidates are evaluated from the running class sums with the dense grid's
       element-wise arithmetic (only the order of the final ``C``-term sum may differ).
    5. *Ties.* The rows holding a candidate within :data:`TIE_MARGIN_ULPS` rounding units of the
       best are evaluated exactly as the dense grid evaluates them (same arrays, same reductions,
       bit for bit) and the argmin is taken over them in device order, so ties, including
       rounding-level ones, are broken as the dense grid breaks them. A step whose best candidate
       is clearly no improvement ends the search without this.

    Everything that does not depend on the schedule (feasible devices sorted by ``B*``, their
    labels, each device's dominant class, the largest batch size) is computed once, so that all
    sizes ``S`` of :func:`~fedcgd_strategy.solvers.fscd.fscd_stages` share one instance.
    :func:`~fedcgd_strategy.solvers.fscd.fscd_stages` and
    :func:`~fedcgd_strategy.solvers.fscd.swap_search` run it with BLAS on one thread
    (:func:`single_threaded_blas`).

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
        self.dominant = np.argmax(self.arrays.labels, axis=1)
        num_classes = self.arrays.target.size
        eps = float(np.finfo(float).eps)
        self.prune_unit = PRUNE_MARGIN_ULPS * (num_classes + 2) * eps
        self.tie_unit = TIE_MARGIN_ULPS * (num_classes + 1) * eps
        self.gradient_scale = 2.0 * float(self.arrays.gradient.sum())

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
        while (step := self._best_transit(selected, outside, sums, current)) is not None:
            leave, enter, current = step
            selected[leave] = False
            selected[enter] = True
            outside[self.position[leave]] = True
            outside[self.position[enter]] = False
            sums.swap(self.arrays, leave, enter)
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
        inside = np.flatnonzero(selected)
        positions = np.flatnonzero(outside)
        if positions.size == 0:
            return None
        if inside.size * positions.size * self.arrays.target.size <= DENSE_GRID:
            leave, enter_device, best = self._dense_rows(selected, sums, inside, group=False)
            return (leave, enter_device, best) if is_improvement(best, current) else None
        inside = inside[np.argsort(self.dominant[inside], kind="stable")]
        room_hz = sums.used_hz - self.arrays.bandwidth_hz[inside]
        fits = fit_counts(room_hz, self.sorted_hz[positions], self.arrays.limit_hz)
        area = int(fits.sum())
        if area == 0:
            return None
        if area <= EVALUATE_ALL:
            rows = np.repeat(np.arange(inside.size), fits)
            cols = np.arange(area) - np.repeat(np.cumsum(fits) - fits, fits)
            enter = self.order[positions[cols]]
            values = self._objectives(sums, inside[rows], enter)
        else:
            candidates = self._pruned_candidates(inside, positions, fits, sums, current)
            if candidates is None:
                return None
            rows, values = candidates
        lowest = float(values.min())
        tie_margin = self.tie_unit * abs(lowest)
        if lowest - tie_margin >= current - TIE_REL_TOL * abs(current):
            return None
        near = np.unique(inside[rows[values <= lowest + tie_margin]])
        leave, enter_device, best = self._dense_rows(selected, sums, near)
        if not is_improvement(best, current):
            return None
        return leave, enter_device, best

    def _pruned_candidates(
        self,
        inside: IndexArray,
        positions: IndexArray,
        fits: IndexArray,
        sums: RunningSums,
        current: float,
    ) -> tuple[IndexArray, FloatArray] | None:
        """Rows (into ``inside``) and values of the transits that may be best (step 3).

        A value is ``inf`` where the bound proved the transit not best. None if no transit can
        improve on ``current``.
        """
        width = int(fits.max())
        enter = self.order[positions[:width]]
        bound = self._lower_bounds(inside, positions[:width], sums)
        partial = np.flatnonzero(fits < width)
        if partial.size > MASK_BY_LOOP:
            np.putmask(bound, np.arange(width) >= fits[:, None], np.inf)
        else:
            for row in partial:
                bound[row, fits[row] :] = np.inf

        # Upper bound on the best objective: the exact values at each row's least bound.
        least = bound.argmin(axis=1)
        rows = np.flatnonzero(fits > 0)
        upper = float(self._objectives(sums, inside[rows], enter[least[rows]]).min())
        threshold = min(upper, current) + self.prune_unit * (
            self.gradient_scale + 2.0 * abs(current)
        )
        active = np.flatnonzero(bound[np.arange(inside.size), least] <= threshold)
        rows, cols = np.nonzero(bound[active] <= threshold)
        if rows.size == 0:  # every bound exceeds the current objective: no improvement
            return None
        rows = active[rows]
        return rows, self._candidate_values(sums, inside[rows], enter[cols], bound[rows, cols])

    def _candidate_values(
        self,
        sums: RunningSums,
        leave: IndexArray,
        enter: IndexArray,
        bound: FloatArray,
    ) -> FloatArray:
        """Objectives of the candidate transits, ``inf`` where the bound proves them not best.

        The :data:`EVALUATE_FIRST` candidates of least bound are evaluated first; of the others,
        only those whose bound does not exceed the best value found (plus the prune margin).
        """
        if leave.size <= EVALUATE_FIRST:
            return self._objectives(sums, leave, enter)
        values = np.full(leave.size, np.inf)
        first = np.argpartition(bound, EVALUATE_FIRST)[:EVALUATE_FIRST]
        values[first] = self._objectives(sums, leave[first], enter[first])
        best = float(values[first].min())
        rest = bound <= best + self.prune_unit * (self.gradient_scale + 2.0 * abs(best))
        rest[first] = False
        values[rest] = self._objectives(sums, leave[rest], enter[rest])
        return values

    def _lower_bounds(
        self, inside: IndexArray, positions: IndexArray, sums: RunningSums
    ) -> FloatArray:
        """Lower bounds of the transit objectives, float ``[I, K]`` (step 3 of the class doc)."""
        arrays = self.arrays
        size = sums.count
        num_classes = arrays.target.size
        shifted = (sums.class_sum - size * arrays.target) + self.sorted_labels[positions]
        left = np.empty((inside.size, num_classes + 2))
        left[:, :num_classes] = arrays.labels[inside]
        left[:, num_classes] = 1.0
        left[:, num_classes + 1] = arrays.sigma / np.sqrt(
            sums.total_batch - arrays.batch[inside] + self.max_batch
        )
        right = np.empty((positions.size, num_classes + 2))
        right[:, :num_classes] = np.where(shifted >= 0.0, -arrays.gradient, arrays.gradient) / size
        right[:, num_classes] = (np.abs(shifted) @ arrays.gradient) / size
        right[:, num_classes + 1] = 1.0
        bound = left @ right.T
        # Exact term for each row's dominant class d (rows are grouped by it): where the bound
        # took s = +1 (w_d + p_ud >= 0), G_d |w_d + p_ud - p_vd| / S exceeds the linear term by
        # weight_d max(0, p_vd - w_d - p_ud) with weight_d = 2 G_d / S.
        weight = 2.0 * arrays.gradient / size
        crossing = np.ascontiguousarray(np.where(shifted >= 0.0, shifted * weight, np.inf).T)
        dominant = self.dominant[inside]
        held = weight[dominant] * arrays.labels[inside, dominant]  # [I]
        starts = np.flatnonzero(np.diff(dominant, prepend=-1))
        for start, stop in zip(starts, [*starts[1:], inside.size], strict=True):
            excess = np.subtract.outer(held[start:stop], crossing[dominant[start]])
            bound[start:stop] += np.maximum(excess, 0.0, out=excess)
        return bound

    def _objectives(self, sums: RunningSums, leave: IndexArray, enter: IndexArray) -> FloatArray:
        """Objectives of the transits ``(leave[i], enter[i])``, float ``[n]``.

        The class terms ``|(sum_Pi p - p_v + p_u) / S - p_c|`` are rounded exactly as in the dense
        grid; only the order of their weighted sum may differ (see :data:`TIE_MARGIN_ULPS`).
        Batch totals are positive (``u`` enters), so the sampling term is ``sigma / sqrt(T)``.
        """
        arrays = self.arrays
        class_sums = sums.class_sum - arrays.labels[leave] + arrays.labels[enter]
        totals = sums.total_batch - arrays.batch[leave] + arrays.batch[enter]
        deviation = np.abs(class_sums / sums.count - arrays.target)
        return deviation @ arrays.gradient + arrays.sigma / np.sqrt(totals)

    def _dense_rows(
        self,
        selected: NDArray[np.bool_],
        sums: RunningSums,
        leave: IndexArray,
        group: bool = True,
    ) -> tuple[int, int, float]:
        """Argmin over the dense grid's rows ``leave`` (ascending), computed as the grid does.

        The values equal the dense grid's bit for bit: the same ``[rows, |not Pi|, C]`` arrays
        and the same reductions (one matrix-vector product per row). Rows whose partial sums
        ``sum_Pi p - p_v`` and batch size are identical (devices whose labels differ below the
        rounding of the sums) have identical values and are evaluated once; each row then gets its
        own budget test (``group=False`` evaluates every row). Ties go to the first row, then the
        first column.
        """
        arrays = self.arrays
        outside = np.flatnonzero(arrays.feasible & ~selected)
        removed = sums.class_sum - arrays.labels[leave]
        leave_batch = arrays.batch[leave]
        rows: IndexArray | None = None
        if group and leave.size > 1:
            # first[rows[i]] = the first row with the same partial sums and batch size as row i
            same = np.all(removed[:, None, :] == removed[None, :, :], axis=2)
            first, rows = np.unique(
                np.argmax(same & (leave_batch[:, None] == leave_batch[None, :]), axis=1),
                return_inverse=True,
            )
            removed, leave_batch = removed[first], leave_batch[first]
        grid = removed[:, None, :] + arrays.labels[outside][None]
        totals = sums.total_batch - leave_batch[:, None] + arrays.batch[outside]
        values = np.asarray(wemd(grid / sums.count, arrays.target, arrays.gradient))
        values = values + np.asarray(sampling_term(arrays.sigma, totals))
        if rows is not None:
            values = values[rows]
        room = sums.used_hz - arrays.bandwidth_hz[leave][:, None]
        values = np.where(room + arrays.bandwidth_hz[outside] <= arrays.limit_hz, values, np.inf)
        flat = int(np.argmin(values))
        row, col = divmod(flat, outside.size)
        return int(leave[row]), int(outside[col]), float(values.flat[flat])
