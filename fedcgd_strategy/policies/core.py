"""The policy core: what a rule sees (:class:`RoundInputs`), what it is (:class:`Policy`), its
:class:`Protocol` and its :class:`Decision`. Pure numpy. Writing one: docs/bring-your-own.md,
"Write your own policy"; the checks: docs/design.md, "Checked decisions"."""  # noqa: D205, D209

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.errors import RuleBrokenError
from fedcgd_strategy.estimators import estimate_global_sigma
from fedcgd_strategy.problem import BANDWIDTH_REL_TOL, read_only, sampling_term, wemd
from fedcgd_strategy.solvers import ScheduleResult

#: Relative slack of the budget test (the solvers' rounding slack).
BUDGET_REL_TOL = BANDWIDTH_REL_TOL


@dataclass(frozen=True)
class RoundInputs:
    """What a policy may use to schedule one round (read-only arrays; :func:`round_inputs`).

    The fields (arrays of length V indexed by partition id): docs/bring-your-own.md, "Write your
    own policy"; rows of non-candidates are ignored, σ̂_v is NaN where not computed, B*_v ``inf``
    where the deadline cannot be met.
    """

    candidate: NDArray[np.bool_]
    label_dist: NDArray[np.float64]
    num_examples: NDArray[np.float64]
    sigma_v: NDArray[np.float64]
    min_bandwidth_hz: NDArray[np.float64]
    gain_lin: NDArray[np.float64]
    total_bandwidth_hz: float
    batch_size: int
    target_dist: NDArray[np.float64]
    train_loss: NDArray[np.float64] | None = None
    update_norm: NDArray[np.float64] | None = None
    local_dist: NDArray[np.float64] | None = None

    @property
    def num_devices(self) -> int:
        """Number of devices V in the cell."""
        return int(self.candidate.shape[0])

    def global_sigma(self) -> float:
        """σ̂ over the candidates, paper eq. (global_est_sigma); 0 with none, NaN if not computed."""
        idx = np.flatnonzero(self.candidate)
        if idx.size == 0:
            return 0.0
        if np.any(np.isnan(self.sigma_v[idx])):
            return float("nan")
        return estimate_global_sigma(self.sigma_v[idx], self.num_examples[idx])


def _row_distributions(counts: NDArray[np.int64]) -> NDArray[np.float64]:
    """Rows of ``counts`` normalised to sum 1 (zero rows stay zero)."""
    totals = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros(counts.shape), where=totals > 0)


def round_inputs(
    *, available: NDArray[np.bool_], min_bandwidth_hz: NDArray[np.float64],
    gain_lin: NDArray[np.float64], total_bandwidth_hz: float, batch_size: int, num_classes: int,
    target_dist: NDArray[np.float64] | None, reports: Sequence[Any] | None = None,
    post_training: bool = False, local_counts: NDArray[np.int64] | None = None,
) -> RoundInputs:  # fmt: skip
    """Assemble the policy's view of one round (the one place a :class:`RoundInputs` is built).

    ``available`` bool[V]: reachable and drawn available, with B*_v (Hz) and H̄_v float[V].
    ``reports``: the phase's valid device reports (``partition_id``, ``label_hist`` int[C],
    ``num_examples``, ``sigma``; ``post_training``: ``train_loss``, ``update_norm``, NaN where
    missing); they are the candidates, else (no ``reports``) every available device, at the
    target p, σ̂_v NaN, |D_v| from ``local_counts`` int[V, C] (class counts from discovery, zero
    rows unknown; 1 without). p: ``target_dist``, else the reported histograms' union, else
    uniform (docs/design.md, "WEMD target").
    """
    num_devices = int(np.shape(available)[0])
    train_loss = update_norm = None
    if reports is not None:
        reported = np.zeros(num_devices, dtype=bool)
        label_hist = np.zeros((num_devices, num_classes), dtype=np.int64)
        sizes, sigma_v = np.zeros(num_devices), np.zeros(num_devices)
        if post_training:
            train_loss, update_norm = np.full(num_devices, np.nan), np.full(num_devices, np.nan)
        for r in reports:
            v = r.partition_id
            reported[v] = True
            label_hist[v], sizes[v], sigma_v[v] = r.label_hist, r.num_examples, r.sigma
            if train_loss is not None and update_norm is not None:
                train_loss[v] = np.nan if r.train_loss is None else r.train_loss
                update_norm[v] = np.nan if r.update_norm is None else r.update_norm
    if target_dist is not None:
        target = np.asarray(target_dist, dtype=float)
    elif reports is not None and reported.any():
        total = label_hist[reported].sum(axis=0).astype(float)
        target = total / total.sum()
    else:
        target = np.full(num_classes, 1.0 / num_classes)
    if reports is None:
        sizes = np.ones(num_devices) if local_counts is None else local_counts.sum(axis=1)
        candidate, sigma_v = np.asarray(available, dtype=bool), np.full(num_devices, np.nan)
        label_dist = np.broadcast_to(target, (num_devices, num_classes))
    else:
        candidate, label_dist = reported, _row_distributions(label_hist)
    return RoundInputs(
        candidate=read_only(np.asarray(candidate, dtype=bool)),
        label_dist=read_only(label_dist),
        num_examples=read_only(np.asarray(sizes, dtype=float)),
        sigma_v=read_only(sigma_v),
        min_bandwidth_hz=read_only(np.asarray(min_bandwidth_hz, dtype=float)),
        gain_lin=read_only(np.asarray(gain_lin, dtype=float)),
        total_bandwidth_hz=total_bandwidth_hz,
        batch_size=batch_size,
        target_dist=read_only(target),
        train_loss=read_only(train_loss),
        update_norm=read_only(update_norm),
        local_dist=read_only(None if local_counts is None else _row_distributions(local_counts)),
    )


@dataclass(frozen=True)
class Decision:
    """A policy's schedule for one round; build it with :func:`decision_from_mask`.

    ``selected`` bool[V] (candidates only); ``sigma`` the global σ̂ (eq. global_est_sigma);
    ``wemd`` the plain WEMD Σ_c |p̄_c − p_c| (G = 1, paper eq. (G1), as in Table II) and
    ``sampling_term`` σ̂ / sqrt(b |S|), the first term of P1 (both NaN if nothing is scheduled);
    ``bandwidth_used_hz`` Σ_v x_v B*_v in Hz; ``class_gradient`` Ĝ float[1] or Ĝ_c float[C] the
    policy used; ``solver`` the P1 solver's result on the candidates (FedCGD policies only).
    """

    selected: NDArray[np.bool_]
    sigma: float
    wemd: float
    sampling_term: float
    bandwidth_used_hz: float
    class_gradient: NDArray[np.float64] | None = None
    solver: ScheduleResult | None = None


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


def decision_from_mask(
    inputs: RoundInputs, selected: NDArray[np.bool_],
    class_gradient: NDArray[np.float64] | None = None, solver: ScheduleResult | None = None,
) -> Decision:  # fmt: skip
    """Wrap a schedule (bool[V], candidates only) into a :class:`Decision`, evaluating it once.

    Its rules (candidates only, the deadline, the budget) are checked by
    :func:`~.check.check_decision`, after ``schedule`` returns.
    """
    selected = np.asarray(selected, dtype=bool)
    if selected.shape != inputs.candidate.shape:
        raise RuleBrokenError(
            f"decision_from_mask got a mask of shape {selected.shape}; it must be a bool mask of "
            f"shape ({inputs.num_devices},), one entry per device"
        )
    sigma, wemd_g1, sampling = _schedule_terms(inputs, selected)
    bandwidth = inputs.min_bandwidth_hz[selected]
    return Decision(
        selected=selected,
        sigma=sigma,
        wemd=wemd_g1,
        sampling_term=sampling,
        bandwidth_used_hz=float(np.sum(bandwidth[np.isfinite(bandwidth)])),
        class_gradient=class_gradient,
        solver=solver,
    )


def with_reported_terms(decision: Decision, reported: RoundInputs) -> Decision:
    """The decision with σ̂, WEMD and sampling term over the scheduled devices that reported.

    For protocol ``"channel"``, where the schedule was made before any device reported.
    """
    sigma, wemd_g1, sampling = _schedule_terms(reported, decision.selected & reported.candidate)
    return replace(decision, sigma=sigma, wemd=wemd_g1, sampling_term=sampling)


@dataclass(frozen=True)
class UploadedUpdates:
    """The scheduled devices' uploads of one round, for the Ĝ estimate (paper eqs. G_est, Gc_est).

    ``updates`` float[K, P] are the flattened w_v^{(j+1)} − w^{(j)}, ``weights`` |D_v|,
    ``label_dist`` p_v float[K, C], ``target_dist`` p, with the round's η and τ.
    """

    updates: NDArray[np.float64]
    weights: NDArray[np.float64]
    label_dist: NDArray[np.float64]
    target_dist: NDArray[np.float64]
    learning_rate: float
    local_steps: int


class Policy(ABC):
    """Base class of a scheduling rule; its class attributes say what the rule needs.

    The strategy calls :meth:`schedule` each round and, after aggregation,
    :meth:`observe_uploads` (FedCGD updates Ĝ there, paper Algorithm 3, last line); ``name`` is
    the run-config value it was built from. The attributes and hooks: docs/bring-your-own.md,
    "Write your own policy".
    """

    name: str = "policy"
    needs_post_training: ClassVar[bool] = False
    needs_reports: ClassVar[bool] = True
    needs_sigma: ClassVar[bool] = False
    uses_budget: ClassVar[bool] = True

    @property
    def class_gradient(self) -> NDArray[np.float64] | None:
        """Ĝ ([1]) or Ĝ_c ([C]) the next round will use; None for rules without it."""
        return None

    @abstractmethod
    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Return this round's schedule (``decision_from_mask``) of ``inputs.candidate`` devices.

        ``rng`` is the policy's random stream (derived from the run seed; checkpointed).
        """

    def observe_uploads(self, uploads: UploadedUpdates) -> None:  # noqa: B027 - optional hook
        """Update internal estimates from the scheduled devices' uploads (default: nothing)."""

    def state_dict(self) -> dict[str, object]:
        """The rule's state across rounds (JSON-serialisable; for logs and checkpoints)."""
        return {}

    def load_state_dict(self, state: Mapping[str, object]) -> None:  # noqa: B027 - optional
        """Restore :meth:`state_dict` output (default: the rule keeps no state)."""


class Protocol(StrEnum):
    """How a round is run: the values of run-config key ``protocol`` (docs/design.md)."""

    CHANNEL = "channel"
    QUERY = "query"
    TRAIN_ALL = "train-all"


#: Values of the run-config key ``protocol`` (``auto``: derived from the policy's class).
PROTOCOL_CHOICES: tuple[str, ...] = ("auto", *(p.value for p in Protocol))


def resolve_protocol(
    policy_type: type[Policy], requested: str = "auto", policy_label: str | None = None
) -> Protocol:
    """The round protocol of a policy class; ``"auto"``: the least work that gives it its data.

    Post-training rankers need train-all; rules with ``needs_reports`` need query or train-all;
    the others may use any. Raises ValueError (naming ``policy_label``) otherwise.
    """
    first = 2 if policy_type.needs_post_training else int(policy_type.needs_reports)
    allowed = list(Protocol)[first:]
    if requested == "auto":
        return allowed[0]
    if requested not in allowed:
        raise ValueError(
            f"protocol {requested!r} does not work with policy "
            f"{policy_label or policy_type.__name__!r}; allowed: 'auto' or "
            + " or ".join(repr(p.value) for p in allowed)
        )
    return Protocol(requested)
