"""The result object every P1 solver returns, and the tie tolerance the solvers share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.problem import SchedulingProblem

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

    Attributes
    ----------
    selected
        Scheduled devices, bool ``[V]`` (read-only).
    objective, wemd, sampling_term
        P1 objective, WEMD (paper eq. (G1)) and ``sigma / sqrt(sum_v x_v b_v)`` of ``selected``;
        ``inf`` for the empty schedule.
    bandwidth_used_hz
        ``sum_v x_v B*_v`` in Hz.
    iterations
        Solver-specific iteration count (see each solver's docstring).
    method
        Name of the solver that produced the schedule.
    lower_bound
        Proven lower bound on the optimum of P1 (exact solver only; NaN for the heuristics).
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
        selected = np.array(mask, dtype=bool, copy=True)
        selected.setflags(write=False)
        return cls(
            selected=selected,
            objective=problem.objective(selected),
            wemd=problem.wemd(selected),
            sampling_term=problem.sampling_term(selected),
            bandwidth_used_hz=problem.bandwidth_used_hz(selected),
            iterations=int(iterations),
            method=method,
        )
