"""A policy's schedule of one round (:class:`Decision`) and the numbers a round record needs.

Pure numpy. A policy builds its :class:`Decision` from a boolean mask with
:func:`decision_from_mask`, which checks the mask and evaluates the schedule's WEMD and
sampling term once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.policies.inputs import RoundInputs
from fedcgd_strategy.problem import sampling_term, wemd
from fedcgd_strategy.solvers import ScheduleResult


@dataclass(frozen=True)
class Decision:
    """A policy's schedule for one round, with the numbers a round record needs.

    Build it with :func:`decision_from_mask`, which evaluates the schedule's terms once.

    Attributes
    ----------
    selected : bool[V]
        Scheduled devices (a subset of the candidates).
    sigma : float
        Global σ̂ of the round (eq. global_est_sigma), logged for every policy.
    wemd : float
        Plain WEMD Σ_c |p̄_c − p_c| of the schedule (G = 1, paper eq. (G1), comparable with the
        paper's Table II); NaN when nothing is scheduled.
    sampling_term : float
        σ̂ / sqrt(b |S|), the first term of P1; NaN when nothing is scheduled.
    bandwidth_used_hz : float
        Σ_v x_v B*_v in Hz.
    class_gradient : float[1] or float[C] or None
        Ĝ (or Ĝ_c) the policy used; None for policies that do not use it.
    solver : ScheduleResult or None
        The P1 solver's result on the candidates (FedCGD policies only): objective with Ĝ,
        iterations, method.

    """

    selected: NDArray[np.bool_]
    sigma: float
    wemd: float
    sampling_term: float
    bandwidth_used_hz: float
    class_gradient: NDArray[np.float64] | None = None
    solver: ScheduleResult | None = None


def decision_from_mask(
    inputs: RoundInputs,
    selected: NDArray[np.bool_],
    class_gradient: NDArray[np.float64] | None = None,
    solver: ScheduleResult | None = None,
) -> Decision:
    """Wrap a schedule into a :class:`Decision`, evaluating its WEMD and sampling term once.

    Parameters
    ----------
    inputs : RoundInputs
        The round's inputs.
    selected : bool[V]
        The schedule; must be a subset of the candidates.
    class_gradient : float[1] or float[C], optional
        Ĝ (Ĝ_c) used by the policy.
    solver : ScheduleResult, optional
        The solver's result (FedCGD).

    """
    selected = np.asarray(selected, dtype=bool)
    if selected.shape != inputs.candidate.shape or np.any(selected & ~inputs.candidate):
        raise ValueError("a policy scheduled a device that is not a candidate this round")
    sigma, wemd_g1, sampling = _schedule_terms(inputs, selected)
    bandwidth = inputs.min_bandwidth_hz[selected]
    return Decision(
        selected=selected,
        sigma=sigma,
        wemd=wemd_g1,
        sampling_term=sampling,
        bandwidth_used_hz=float(np.sum(bandwidth[np.isfinite(bandwidth)])),
        class_gradient=None if class_gradient is None else np.array(class_gradient, float),
        solver=solver,
    )


def _schedule_terms(inputs: RoundInputs, mask: NDArray[np.bool_]) -> tuple[float, float, float]:
    """(σ̂, plain WEMD Σ_c |p̄_c − p_c|, σ̂ / sqrt(b |S|)) of the devices in ``mask``; NaN if empty."""
    sigma = inputs.global_sigma()
    count = int(mask.sum())
    if not count:
        return sigma, float("nan"), float("nan")
    mean = inputs.label_dist[mask].sum(axis=0) / count
    return (
        sigma,
        float(wemd(mean, inputs.target_dist, 1.0)),
        float(sampling_term(sigma, inputs.batch_size * count)),
    )


def with_reported_terms(decision: Decision, reported: RoundInputs) -> Decision:
    """The decision with σ̂, WEMD and sampling term taken from the devices that reported.

    For protocol ``"channel"`` (:class:`~fedcgd_strategy.policies.protocol.Protocol`), where
    the schedule was made before any device reported: the terms are evaluated over the
    scheduled devices whose training replies are in ``reported``.
    """
    sigma, wemd_g1, sampling = _schedule_terms(reported, decision.selected & reported.candidate)
    return replace(decision, sigma=sigma, wemd=wemd_g1, sampling_term=sampling)
