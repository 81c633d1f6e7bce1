"""What the P1 solvers share: their result, the tie tolerance, the instance's arrays and sums.

The running sums of a schedule ``Pi`` (class sums, size, batch total, bandwidth) are updated
with fixed floating-point expressions, shared with the dense FSCD oracle
(tests/reference_solvers.py), so that the solvers' decisions agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.problem import SchedulingProblem, read_only, sampling_term, wemd

FloatArray = NDArray[np.float64]

#: Objective changes smaller than this fraction of the current objective are ties (rounding
#: noise), so the vectorised solvers and their loop references take the same decisions.
TIE_REL_TOL = 1e-12


def is_improvement(new_objective: float, current_objective: float) -> bool:
    """Check that ``new_objective`` beats ``current_objective`` by more than rounding noise.

    Any finite value improves on ``inf`` (the empty schedule); otherwise the decrease must exceed
    ``TIE_REL_TOL * |current_objective|``.
    """
    if not np.isfinite(current_objective):
        return bool(new_objective < current_objective)
    return bool(new_objective < current_objective - TIE_REL_TOL * abs(current_objective))


@dataclass(frozen=True)
class ScheduleResult:
    """A schedule for problem P1 and its diagnostics.

    ``selected`` bool ``[V]`` (read-only); ``objective``, ``wemd`` (paper eq. (G1)) and
    ``sampling_term`` (``sigma / sqrt(sum_v x_v b_v)``) of it, ``inf`` for the empty schedule;
    ``bandwidth_used_hz`` ``sum_v x_v B*_v`` in Hz; ``iterations`` as each solver's docstring
    says; ``method`` the solver's name; ``lower_bound`` a proven lower bound on P1's optimum
    (exact solver only; NaN for the heuristics).
    """

    selected: NDArray[np.bool_]
    objective: float
    wemd: float
    sampling_term: float
    bandwidth_used_hz: float
    iterations: int
    method: str
    lower_bound: float = float("nan")

    @property
    def num_selected(self) -> int:
        """Number of scheduled devices."""
        return int(np.count_nonzero(self.selected))

    @classmethod
    def from_mask(
        cls,
        problem: SchedulingProblem,
        mask: NDArray[np.bool_],
        iterations: int,
        method: str,
    ) -> ScheduleResult:
        """Build the result for ``mask``, evaluating every term with ``problem``'s methods."""
        selected = read_only(np.array(mask, dtype=bool))
        return cls(
            selected=selected,
            objective=problem.objective(selected),
            wemd=problem.wemd(selected),
            sampling_term=problem.sampling_term(selected),
            bandwidth_used_hz=problem.bandwidth_used_hz(selected),
            iterations=int(iterations),
            method=method,
        )


@dataclass(frozen=True)
class ProblemArrays:
    """The arrays of a P1 instance under the short names the vectorised solvers use (read-only).

    ``limit_hz`` is the budget with the rounding slack (``bandwidth_limit_hz``).
    """

    labels: FloatArray
    target: FloatArray
    gradient: FloatArray
    batch: NDArray[np.int64]
    bandwidth_hz: FloatArray
    limit_hz: float
    feasible: NDArray[np.bool_]
    sigma: float

    @classmethod
    def of(cls, problem: SchedulingProblem) -> ProblemArrays:
        """Collect the arrays of ``problem``."""
        return cls(
            labels=problem.label_dist,
            target=problem.target_dist,
            gradient=problem.class_gradient_array,
            batch=problem.batch_size_array,
            bandwidth_hz=problem.min_bandwidth_hz,
            limit_hz=problem.bandwidth_limit_hz,
            feasible=problem.feasible,
            sigma=problem.sigma,
        )


@dataclass
class RunningSums:
    """Running sums of a schedule ``Pi``, updated in place as devices enter and leave.

    ``class_sum`` = ``sum_{v in Pi} p_v`` [C], ``count`` = ``|Pi|``, ``total_batch`` =
    ``sum_{v in Pi} b_v``, ``used_hz`` = ``sum_{v in Pi} B*_v`` in Hz.
    """

    class_sum: FloatArray
    count: int
    total_batch: int
    used_hz: float

    @classmethod
    def of(cls, arrays: ProblemArrays, mask: NDArray[np.bool_]) -> RunningSums:
        """Sums of the schedule ``mask`` (bool ``[V]``; all False gives zeros)."""
        return cls(
            class_sum=arrays.labels[mask].sum(axis=0),
            count=int(mask.sum()),
            total_batch=int(arrays.batch[mask].sum()),
            used_hz=float(arrays.bandwidth_hz[mask].sum()),
        )

    def objective(self, arrays: ProblemArrays) -> float:
        """P1 objective ``W + sigma / sqrt(sum b)`` evaluated from the sums (``count >= 1``)."""
        return float(wemd(self.class_sum / self.count, arrays.target, arrays.gradient)) + float(
            sampling_term(arrays.sigma, self.total_batch)
        )

    def flip(self, arrays: ProblemArrays, device: int, step: int) -> None:
        """Add (``step = 1``) or remove (``step = -1``) ``device``."""
        self.class_sum = self.class_sum + step * arrays.labels[device]
        self.count += step
        self.total_batch += step * int(arrays.batch[device])
        self.used_hz += step * float(arrays.bandwidth_hz[device])

    def swap(self, arrays: ProblemArrays, leave: int, enter: int) -> None:
        """Apply the 1-step transit that replaces ``leave`` by ``enter`` (size unchanged)."""
        self.class_sum = self.class_sum - arrays.labels[leave] + arrays.labels[enter]
        self.total_batch += int(arrays.batch[enter]) - int(arrays.batch[leave])
        self.used_hz += float(arrays.bandwidth_hz[enter]) - float(arrays.bandwidth_hz[leave])
