"""A policy's schedule of one round (:class:`Decision`) and the numbers a round record needs."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.policies.inputs import RoundInputs
from fedcgd_strategy.problem import sampling_term, wemd
from fedcgd_strategy.solvers import ScheduleResult


@dataclass(frozen=True)
class Decision:
    """A policy's schedule for one round; build it with :func:`decision_from_mask`.

    Attributes
    ----------
    selected : bool[V]
        Scheduled devices (a subset of the candidates).
    sigma : float
        Global σ̂ of the round (eq. global_est_sigma).
    wemd : float
        Plain WEMD Σ_c |p̄_c − p_c| (G = 1, paper eq. (G1), as in Table II); NaN if empty.
    sampling_term : float
        σ̂ / sqrt(b |S|), the first term of P1; NaN if empty.
    bandwidth_used_hz : float
        Σ_v x_v B*_v in Hz.
    class_gradient : float[1] or float[C] or None
        Ĝ (or Ĝ_c) the policy used.
    solver : ScheduleResult or None
        The P1 solver's result on the candidates (FedCGD policies only).
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
    """Wrap a schedule (bool[V], candidates only) into a :class:`Decision`, evaluating it once."""
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
    """The decision with σ̂, WEMD and sampling term over the scheduled devices that reported.

    For protocol ``"channel"``, where the schedule was made before any device reported.
    """
    sigma, wemd_g1, sampling = _schedule_terms(reported, decision.selected & reported.candidate)
    return replace(decision, sigma=sigma, wemd=wemd_g1, sampling_term=sampling)
