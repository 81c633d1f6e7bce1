"""FSCD's incremental 1-step transit search (paper Algorithm 2, inner loop).

:class:`TransitSearch` makes the decisions of the dense ``|Pi| x |not Pi| x C`` grid search
(``swap_search_dense`` in tests/reference_solvers.py) while evaluating few swaps;
10-15x faster at 1,000-3,000 candidates (``fedcgd bench fscd-scale``, docs/performance.md).
Pure numpy (threadpoolctl keeps BLAS on one thread).
"""

from __future__ import annotations

import functools
import math
from contextlib import AbstractContextManager
from typing import cast

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import ThreadpoolController  # with scikit-learn, a dependency

from fedcgd_strategy.problem import SchedulingProblem
from fedcgd_strategy.solvers.result import TIE_REL_TOL, ProblemArrays, RunningSums, is_improvement

#: Device or row indices (``np.flatnonzero`` and friends), and float64 arrays.
IndexArray = NDArray[np.intp]
FloatArray = NDArray[np.float64]

#: Pruning margin in units of ``(C + 2) * eps * (2 sum_c G_c + 2 |objective|)`` (the rounding
#: of bound and objective sums of C + 2 terms), with a wide safety factor.
PRUNE_MARGIN_ULPS = 64.0
#: Tie margin in units of ``(C + 1) * eps * |objective|`` (a candidate differs from the dense
#: grid's value by at most half of that each way), with a safety factor.
TIE_MARGIN_ULPS = 8.0
#: Candidates evaluated before the bound is tightened by the best value among them.
EVALUATE_FIRST = 256
#: Up to this many fitting transits, all are evaluated directly (no bound).
EVALUATE_ALL = 4096
#: Up to this many elements ``I * O * C`` a step evaluates the whole grid.
DENSE_GRID = 32768
#: Rows of the bound masked one by one up to this many, else in one pass.
MASK_BY_LOOP = 8


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """The controller of the loaded BLAS libraries (found once: it inspects the process)."""
    return ThreadpoolController()


def single_threaded_blas() -> AbstractContextManager[object]:
    """BLAS on one thread: faster for the search's small products on busy cores (same bits)."""
    return cast(AbstractContextManager[object], _blas_controller().limit(limits=1, user_api="blas"))


def fit_counts(room_hz: FloatArray, sorted_hz: FloatArray, limit_hz: float) -> IndexArray:
    """How many leading entries of ``sorted_hz`` fit each ``room_hz``, with the exact budget test.

    ``out[i]`` (int ``[I]``) = number of ``j`` with ``room_hz[i] + sorted_hz[j] <= limit_hz`` in
    floating point as the dense grid tests it (a prefix: the test is monotone); a binary search,
    then moved past runs of equal values until the test agrees. ``room_hz``: ``sum_Pi B* - B*_v``
    per scheduled ``v``, float ``[I]`` in Hz; ``sorted_hz``: ``B*`` of the unscheduled feasible
    devices, ascending, float ``[O]`` in Hz; ``limit_hz``: ``B`` with the rounding slack, in Hz.
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

    Each step finds, among the transits ``(v, u)`` (scheduled ``v`` leaves, unscheduled feasible
    ``u`` enters) that keep ``sum_v x_v B*_v <= B``, the one of least P1 objective
    ``sum_c G_c |(sum_Pi p_c - p_vc + p_uc) / S - p_c| + sigma / sqrt(T - b_v + b_u)``
    (``S = |Pi|``, ``T = sum_Pi b``; ties: lowest ``v``, then lowest ``u``) and applies it while it
    is an improvement (:func:`~fedcgd_strategy.solvers.result.is_improvement`). Decisions and
    values are those of the dense grid search. A step:

    1. *Budget.* With the unscheduled devices sorted by ``B*``, the transits of ``v`` that fit are
       a prefix of length ``k_v`` (:func:`fit_counts`); ``K = max_v k_v`` columns are considered.
       Up to :data:`DENSE_GRID` elements the grid is evaluated whole, as the dense search does.
    2. *Rows and columns.* With ``w = sum_Pi p - S p``, the triangle inequality bounds every
       transit of the row ``v`` by ``(|w - p_v| . G - max G) / S + sigma / sqrt(T - b_v + max b)``
       and of the column ``u`` by ``(|w + p_u| . G - max G) / S + sigma / sqrt(T - min_Pi b +
       b_u)``; the values along the row and the column of least bound give an upper bound ``U``;
       rows and columns whose bound exceeds ``min(U, current) + margin`` are dropped
       (:meth:`_prefilter`). A kept block of up to :data:`EVALUATE_ALL` transits is evaluated
       whole (step 4).
    3. *Bound.* Otherwise, with ``s_uc = sign(w_c + p_uc)``,
       ``|w_c - p_vc + p_uc| >= s_uc (w_c + p_uc) - s_uc p_vc`` and
       ``sigma / sqrt(T - b_v + b_u) >= sigma / sqrt(T - b_v + max b)``, so one product
       ``[I, C + 2] x [C + 2, K]`` bounds every kept transit from below; ``v``'s dominant class
       ``d`` gets the exact term (adds ``2 G_d max(0, p_vd - w_d - p_ud) / S`` where
       ``s_ud = +1``). Exact values at each row's least bound lower ``U``; only transits with
       bound ``<= min(U, current) + margin`` are candidates, and of those only the ones whose
       bound stays below the best of the :data:`EVALUATE_FIRST` most promising are evaluated.
    4. *Values.* Candidates are evaluated from the running class sums with the dense grid's
       element-wise arithmetic (only the order of the final ``C``-term sum may differ).
    5. *Ties.* Rows with a candidate within :data:`TIE_MARGIN_ULPS` of the best are evaluated bit
       for bit as the dense grid does and the argmin is taken in device order.

    What does not depend on the schedule is computed once, so all sizes ``S`` of
    :func:`~fedcgd_strategy.solvers.heuristics.fscd_stages` share one instance.
    """

    def __init__(self, problem: SchedulingProblem) -> None:
        self.arrays = ProblemArrays.of(problem)
        feasible = np.flatnonzero(problem.feasible)  # by B* ascending, ties by index (Alg. 2, l. 2)
        self.order = feasible[np.argsort(problem.min_bandwidth_hz[feasible], kind="stable")]
        self.position = np.full(problem.num_devices, -1, dtype=np.intp)
        self.position[self.order] = np.arange(self.order.size)
        self.sorted_hz = self.arrays.bandwidth_hz[self.order]
        self.sorted_labels = np.ascontiguousarray(self.arrays.labels[self.order])
        self.sorted_batch = self.arrays.batch[self.order]
        self.max_batch = int(self.sorted_batch.max()) if self.order.size else 0
        self.max_gradient = float(self.arrays.gradient.max())
        self.dominant = np.argmax(self.arrays.labels, axis=1)
        num_classes = self.arrays.target.size
        eps = float(np.finfo(float).eps)
        self.prune_unit = PRUNE_MARGIN_ULPS * (num_classes + 2) * eps
        self.tie_unit = TIE_MARGIN_ULPS * (num_classes + 1) * eps
        self.gradient_scale = 2.0 * float(self.arrays.gradient.sum())
        self.buffers = [np.empty(0), np.empty(0)]  # the slots of :meth:`scratch`

    def run(self, mask: NDArray[np.bool_]) -> tuple[NDArray[np.bool_], float, int]:
        """Search from ``mask`` (feasible, non-empty, bool ``[V]``) until no transit improves.

        Returns ``(selected, objective, swaps)``: the local optimum, its objective as evaluated
        on the dense grid, and the number of accepted transits.
        """
        selected = np.array(mask, dtype=bool, copy=True)
        sums = RunningSums.of(self.arrays, selected)
        current = sums.objective(self.arrays)
        outside = ~selected[self.order]
        swaps = 0
        while (step := self._best_transit(selected, outside, sums, current)) is not None:
            leave, enter, current = step
            selected[leave], selected[enter] = False, True
            outside[self.position[leave]], outside[self.position[enter]] = True, False
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
        inside = selected.nonzero()[0]
        positions = outside.nonzero()[0]
        if positions.size == 0:
            return None
        if inside.size * positions.size * self.arrays.target.size <= DENSE_GRID:
            leave, enter_device, best = self._dense_rows(selected, sums, inside, group=False)
            return (leave, enter_device, best) if is_improvement(best, current) else None
        room_hz = sums.used_hz - self.arrays.bandwidth_hz[inside]
        fits = fit_counts(room_hz, self.sorted_hz[positions], self.arrays.limit_hz)
        if not fits.any():
            return None
        positions = positions[: int(fits.max())]
        keep_rows, keep_cols, upper = self._prefilter(inside, positions, fits, sums, current)
        # Kept column j fits row r iff keep_cols[j] < fits[r] (a prefix of the kept columns).
        inside, fits = inside[keep_rows], np.searchsorted(keep_cols, fits[keep_rows])
        if not fits.any():  # no transit can improve on the current objective
            return None
        positions = positions[keep_cols[: int(fits.max())]]
        if inside.size * positions.size <= EVALUATE_ALL:
            rows = np.repeat(np.arange(inside.size), positions.size)
            values = self._grid(
                sums, sums.class_sum - self.arrays.labels[inside], self.arrays.batch[inside],
                self.order[positions],
            )  # fmt: skip
            values[np.arange(positions.size) >= fits[:, None]] = np.inf
            values = values.ravel()
        else:
            candidates = self._pruned_candidates(inside, positions, fits, sums, current, upper)
            if candidates is None:
                return None
            rows, values = candidates
        lowest = float(values.min())
        tie_margin = self.tie_unit * abs(lowest)
        if lowest - tie_margin >= current - TIE_REL_TOL * abs(current):
            return None
        near = np.unique(inside[rows[values <= lowest + tie_margin]])
        leave, enter_device, best = self._dense_rows(selected, sums, near)
        return (leave, enter_device, best) if is_improvement(best, current) else None

    def _pruned_candidates(
        self,
        inside: IndexArray,
        positions: IndexArray,
        fits: IndexArray,
        sums: RunningSums,
        current: float,
        upper: float,
    ) -> tuple[IndexArray, FloatArray] | None:
        """Step 3 of the class doc: rows (into ``inside``) and values (``inf``: proved not best).

        Row ``r`` fits the first ``fits[r]`` of the columns ``positions``; ``upper`` bounds the
        best objective from above. None if no transit can improve on ``current``.
        """
        width = int(fits.max())
        enter = self.order[positions]
        bound = self._lower_bounds(inside, positions, sums)
        partial = (fits < width).nonzero()[0]
        if partial.size > MASK_BY_LOOP:
            np.putmask(bound, np.arange(width) >= fits[:, None], np.inf)
        else:
            for row in partial:
                bound[row, fits[row] :] = np.inf

        # Upper bound on the best objective: the exact values at each row's least bound.
        least = bound.argmin(axis=1)
        rows = (fits > 0).nonzero()[0]
        if rows.size:
            at_least = self._objectives(sums, inside[rows], enter[least[rows]])
            upper = min(upper, float(at_least.min()))
        rows, cols = np.nonzero(bound <= min(upper, current) + self._margin(current))
        if rows.size == 0:  # every bound exceeds the current objective: no improvement
            return None
        leave, enter, bound = inside[rows], enter[cols], bound[rows, cols]
        if leave.size <= EVALUATE_FIRST:
            return rows, self._objectives(sums, leave, enter)
        values = np.full(leave.size, np.inf)
        first = np.argpartition(bound, EVALUATE_FIRST)[:EVALUATE_FIRST]
        values[first] = self._objectives(sums, leave[first], enter[first])
        best = float(values[first].min())
        rest = bound <= best + self._margin(best)
        rest[first] = False
        values[rest] = self._objectives(sums, leave[rest], enter[rest])
        return rows, values

    def _prefilter(
        self,
        inside: IndexArray,
        positions: IndexArray,
        fits: IndexArray,
        sums: RunningSums,
        current: float,
    ) -> tuple[IndexArray, IndexArray, float]:
        """Step 2 of the class doc: kept rows (into ``inside``), columns (into ``positions``), U."""
        arrays = self.arrays
        size = sums.count
        surplus = sums.class_sum - size * arrays.target
        labels_out = self.sorted_labels[positions]
        batch_out = self.sorted_batch[positions]
        batch_in = arrays.batch[inside]
        total = sums.total_batch
        row_bound = self._terms(
            surplus - arrays.labels[inside], total - batch_in + self.max_batch, size
        )
        col_bound = self._terms(labels_out + surplus, total - int(batch_in.min()) + batch_out, size)
        row, col = int(row_bound.argmin()), int(col_bound.argmin())
        width, rows = int(fits[row]), (fits > col).nonzero()[0]
        along_row = self._terms(
            labels_out[:width] + (surplus - arrays.labels[inside[row]]),
            total - int(batch_in[row]) + batch_out[:width],
            size,
        )
        along_col = self._terms(
            (surplus + labels_out[col]) - arrays.labels[inside[rows]],
            total - batch_in[rows] + int(batch_out[col]),
            size,
        )
        upper = float(np.concatenate([along_row, along_col, [np.inf]]).min())
        # The bounds above without the - max G / S.
        slack = min(upper, current) + self._margin(current) + self.max_gradient / size
        return (row_bound <= slack).nonzero()[0], (col_bound <= slack).nonzero()[0], upper

    def _terms(self, deviation: FloatArray, totals: IndexArray, size: int) -> FloatArray:
        """``|deviation| . G / S + sigma / sqrt(totals)`` per row (the objective's two terms)."""
        return np.abs(deviation) @ self.arrays.gradient / size + self.arrays.sigma / np.sqrt(totals)

    def _margin(self, objective: float) -> float:
        """The pruning margin at ``objective`` (:data:`PRUNE_MARGIN_ULPS`)."""
        return self.prune_unit * (self.gradient_scale + 2.0 * abs(objective))

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
        bound = np.matmul(left, right.T, out=self.scratch(0, inside.size, positions.size))
        # the exact term of each row's dominant class d (step 3), weight = 2 G / S
        weight = 2.0 * arrays.gradient / size
        crossing = np.ascontiguousarray(np.where(shifted >= 0.0, shifted * weight, np.inf).T)
        dominant = self.dominant[inside]
        held = weight[dominant] * arrays.labels[inside, dominant]  # [I]
        excess = np.take(crossing, dominant, axis=0, out=self.scratch(1, *bound.shape))
        np.subtract(held[:, None], excess, out=excess)
        bound += np.maximum(excess, 0.0, out=excess)
        return bound

    def scratch(self, slot: int, *shape: int) -> FloatArray:
        """A float work array of ``shape`` (contents undefined) in the reused buffer ``slot``.

        The steps' large temporaries have the same sizes again and again; fresh ones cost page
        faults (glibc returns large blocks to the system), several times their arithmetic.
        """
        size = math.prod(shape)
        if self.buffers[slot].size < size:
            self.buffers[slot] = np.empty(max(size, 2 * self.buffers[slot].size))
        return self.buffers[slot][:size].reshape(shape)

    def _grid(
        self, sums: RunningSums, removed: FloatArray, removed_batch: IndexArray, enter: IndexArray
    ) -> FloatArray:
        """Objectives of all transits from the rows to the devices ``enter`` [K], float [R, K].

        A row is a schedule less its leaving device: class sums ``removed`` [R, C], batch total
        less ``removed_batch`` [R]. The dense grid's arithmetic (``wemd`` + ``sampling_term``).
        """
        arrays = self.arrays
        grid = np.add(
            removed[:, None, :],
            arrays.labels[enter],
            out=self.scratch(0, removed.shape[0], enter.size, arrays.target.size),
        )
        grid /= sums.count
        grid -= arrays.target
        values = np.abs(grid, out=grid) @ arrays.gradient
        totals = sums.total_batch - removed_batch[:, None] + arrays.batch[enter]
        values += arrays.sigma / np.sqrt(totals)
        return values

    def _objectives(self, sums: RunningSums, leave: IndexArray, enter: IndexArray) -> FloatArray:
        """Objectives of the transits ``(leave[i], enter[i])``, float ``[n]``.

        Class terms are rounded as in the dense grid; only their weighted sum's order may differ.
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
        """Argmin over the dense grid's rows ``leave`` (ascending), bit for bit as the grid does.

        Rows with identical partial sums and batch size are evaluated once (``group=False``: every
        row); each row gets its own budget test. Ties go to the first row, then the first column.
        """
        arrays = self.arrays
        outside = (arrays.feasible & ~selected).nonzero()[0]
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
        values = self._grid(sums, removed, leave_batch, outside)
        if rows is not None:
            values = values[rows]
        room = sums.used_hz - arrays.bandwidth_hz[leave][:, None]
        values = np.where(room + arrays.bandwidth_hz[outside] <= arrays.limit_hz, values, np.inf)
        flat = int(np.argmin(values))
        row, col = divmod(flat, outside.size)
        return int(leave[row]), int(outside[col]), float(values.flat[flat])
