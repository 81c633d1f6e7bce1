"""Scheduling policies by name: FedCGD variants and the BC / BN2 / POC / Fed-CBS / all baselines.

A policy turns one round's device reports and channel draw (:class:`RoundInputs`) into a
schedule (:class:`Decision`). Policies are pure numpy objects (no flwr, no torch): the Flower
strategy in :mod:`fedcgd_strategy.strategy` only fills :class:`RoundInputs` from messages, calls
:meth:`Policy.schedule`, and after aggregation calls :meth:`Policy.observe_uploads` so that
FedCGD can update its class-gradient estimate Ĝ (paper Algorithm 3, last line).

Every array in :class:`RoundInputs` has one entry per device of the cell (length V), indexed by
partition id; ``candidate`` marks the devices that are available this round *and* reported
valid statistics. Non-candidates are never scheduled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.estimators import (
    device_gradient_estimates,
    estimate_class_gradient,
    estimate_global_sigma,
    estimate_per_class_gradient,
)
from fedcgd_strategy.fedcbs import FedCBSState, fedcbs_select
from fedcgd_strategy.problem import SchedulingProblem, sampling_term, wemd
from fedcgd_strategy.selectors import best_channel, best_norm, power_of_choice
from fedcgd_strategy.solvers import ScheduleResult, solve
from fedcgd_strategy.validation import (
    as_bool_mask,
    as_float_array,
    as_label_distributions,
    as_min_bandwidths,
    as_nonnegative_array,
    as_target_distribution,
    check_integer,
    check_total_bandwidth,
)

#: Fewer uploads than this leave Ĝ unchanged (see :meth:`FedCGDPolicy.observe_uploads`).
MIN_UPLOADS_FOR_G = 2

#: Round protocols: ``"channel"`` (schedule from the channel draw alone, no query phase),
#: ``"query"`` (pre-training statistics, only the scheduled devices train) and ``"train-all"``
#: (every available device trains, only the scheduled ones are aggregated).
PROTOCOLS: tuple[str, ...] = ("channel", "query", "train-all")
#: Values of the run-config key ``protocol``: ``"auto"`` derives it from the policy.
PROTOCOL_CHOICES: tuple[str, ...] = ("auto", *PROTOCOLS)


@dataclass(frozen=True)
class RoundInputs:
    """What a policy may use to schedule one round (all arrays have length V), validated.

    Construction checks every field (shapes, candidates' label distributions on the simplex,
    |D_v| > 0 and σ̂_v >= 0 or NaN = not computed for candidates, B* >= 0 or inf, B > 0,
    b >= 1) and raises ValueError naming the field, the bad value and what is allowed.

    Attributes
    ----------
    candidate : bool[V]
        Available this round and reported valid statistics.
    label_dist : float[V, C]
        Label distribution p_v of the samples each device uses this round (rows of
        non-candidates are ignored and may be zero).
    num_examples : float[V]
        Local dataset size |D_v| (FedAvg weight); 0 for non-candidates.
    sigma_v : float[V]
        Per-device sampling-variance estimate σ̂_v, paper eq. (local_est_sigma).
    min_bandwidth_hz : float[V]
        Minimum bandwidth B*_v in Hz, paper eq. (lambert); ``inf`` = cannot meet the deadline.
    gain_lin : float[V]
        Average channel gain H̄_v (linear).
    total_bandwidth_hz : float
        Bandwidth budget B in Hz.
    batch_size : int
        Mini-batch size b.
    target_dist : float[C]
        WEMD target distribution p.
    train_loss : float[V] or None
        Loss accumulated over this round's local steps (only after local training).
    update_norm : float[V] or None
        L2 norm of the local update (only after local training).
    local_dist : float[V, C] or None
        Each device's whole local class distribution, reported once at discovery (Fed-CBS's
        p_v); rows of candidates are distributions.

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

    def __post_init__(self) -> None:
        """Validate every array where the round's data enters the scheduling math."""
        num_devices = int(np.shape(self.candidate)[0]) if np.ndim(self.candidate) == 1 else -1
        cand = as_bool_mask(self.candidate, max(num_devices, 0), "candidate")
        target = as_target_distribution(self.target_dist)
        as_label_distributions(self.label_dist, num_rows=num_devices, rows=cand)
        if np.shape(self.label_dist)[-1] != target.shape[0]:
            raise ValueError(
                f"label_dist has {np.shape(self.label_dist)[-1]} classes, target_dist "
                f"{target.shape[0]}; they must match"
            )
        vector = (num_devices,)
        as_nonnegative_array(
            self.num_examples, "num_examples", shape=vector, strict=True, where=cand
        )
        sigma_v = as_float_array(self.sigma_v, "sigma_v", shape=vector)
        as_nonnegative_array(sigma_v, "sigma_v", where=cand & ~np.isnan(sigma_v))
        as_min_bandwidths(self.min_bandwidth_hz, num_devices)
        as_nonnegative_array(self.gain_lin, "gain_lin", shape=vector)
        check_total_bandwidth(self.total_bandwidth_hz)
        check_integer(self.batch_size, "batch_size", minimum=1)
        if self.local_dist is not None:
            as_label_distributions(self.local_dist, "local_dist", num_rows=num_devices, rows=cand)
        for name in ("train_loss", "update_norm"):
            if getattr(self, name) is not None:
                as_float_array(getattr(self, name), name, shape=vector)

    @property
    def num_devices(self) -> int:
        """Number of devices V in the cell."""
        return int(self.candidate.shape[0])

    def global_sigma(self) -> float:
        """σ̂ over the candidates, paper eq. (global_est_sigma).

        0 when nobody reported; NaN when σ̂_v was not computed (the rule does not need it).
        """
        idx = np.flatnonzero(self.candidate)
        if idx.size == 0:
            return 0.0
        if np.any(np.isnan(self.sigma_v[idx])):
            return float("nan")
        return estimate_global_sigma(self.sigma_v[idx], self.num_examples[idx])

    @classmethod
    def from_channel(
        cls,
        available: NDArray[np.bool_],
        min_bandwidth_hz: NDArray[np.float64],
        gain_lin: NDArray[np.float64],
        *,
        total_bandwidth_hz: float,
        batch_size: int,
        target_dist: NDArray[np.float64],
        local_counts: NDArray[np.int64] | None = None,
        reported: ReportedStats | None = None,
    ) -> RoundInputs:
        """Inputs from the round's channel draw and, where devices replied, their statistics.

        The candidates are the ``available`` devices. ``local_counts`` (int[V, C], class counts
        of the whole local datasets, reported at discovery) gives the local distributions (rows
        normalised, zero rows stay zero). ``reported`` holds the candidates' replies of this
        round. Without it, a rule that needs the channel only (protocol ``"channel"``): nothing
        was reported, so every candidate's round label distribution stands at the target, σ̂_v
        at NaN (not computed) and |D_v| at the row sums of ``local_counts`` (1 without); the
        round's record takes the uploaded devices' statistics from their training replies.
        """
        num_devices, num_classes = int(available.shape[0]), int(target_dist.shape[0])
        local_dist = None
        if local_counts is not None:
            totals = local_counts.sum(axis=1, keepdims=True)
            local_dist = np.divide(
                local_counts, totals, out=np.zeros(local_counts.shape), where=totals > 0
            )
        if reported is None:
            sizes = np.ones(num_devices)
            if local_counts is not None:
                sizes = local_counts.sum(axis=1).astype(float)
            reported = ReportedStats(
                label_dist=np.broadcast_to(target_dist, (num_devices, num_classes)).copy(),
                num_examples=sizes,
                sigma_v=np.full(num_devices, np.nan),
            )
        return cls(
            candidate=np.asarray(available, dtype=bool),
            label_dist=reported.label_dist,
            num_examples=reported.num_examples,
            sigma_v=reported.sigma_v,
            min_bandwidth_hz=min_bandwidth_hz,
            gain_lin=gain_lin,
            total_bandwidth_hz=total_bandwidth_hz,
            batch_size=batch_size,
            target_dist=target_dist,
            train_loss=reported.train_loss,
            update_norm=reported.update_norm,
            local_dist=local_dist,
        )


@dataclass(frozen=True)
class ReportedStats:
    """The statistics the candidates reported this round (length-V arrays, as in RoundInputs).

    Rows of devices that did not report are ignored; ``train_loss`` and ``update_norm`` come
    with training replies only (None otherwise).
    """

    label_dist: NDArray[np.float64]
    num_examples: NDArray[np.float64]
    sigma_v: NDArray[np.float64]
    train_loss: NDArray[np.float64] | None = None
    update_norm: NDArray[np.float64] | None = None


@dataclass(frozen=True)
class Decision:
    """A policy's schedule for one round, with the numbers a round record needs.

    Build it with :func:`decide`, which evaluates the schedule's terms once.

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


def decide(
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

    For protocol ``"channel"``, where the schedule was made before any device reported: the
    terms are evaluated over the scheduled devices whose training replies are in ``reported``.
    """
    sigma, wemd_g1, sampling = _schedule_terms(reported, decision.selected & reported.candidate)
    return replace(decision, sigma=sigma, wemd=wemd_g1, sampling_term=sampling)


@dataclass(frozen=True)
class UploadedUpdates:
    """The scheduled devices' uploads of one round, for the Ĝ estimate (paper eqs. G_est, Gc_est).

    Attributes
    ----------
    updates : float[K, P]
        Flattened local updates w_v^{(j+1)} − w^{(j)}.
    weights : float[K]
        Aggregation weights |D_v|.
    label_dist : float[K, C]
        Label distributions p_v of the uploading devices.
    target_dist : float[C]
        WEMD target p.
    learning_rate : float
        η.
    local_steps : int
        τ.

    """

    updates: NDArray[np.float64]
    weights: NDArray[np.float64]
    label_dist: NDArray[np.float64]
    target_dist: NDArray[np.float64]
    learning_rate: float
    local_steps: int


class Policy(ABC):
    """Base class of a scheduling rule.

    Attributes
    ----------
    name : str
        The policy's name in :data:`POLICY_NAMES`.
    needs_post_training : bool
        True when the rule ranks devices by values known only after local training (BN2's
        update norm, POC's accumulated loss): then every available device trains first and
        only the scheduled ones upload, as in the paper (see :func:`resolve_protocol`).
    needs_reports : bool
        False when the rule needs no per-round report before scheduling (BC, all: the channel;
        Fed-CBS: the local distributions reported at discovery): no query phase.
    needs_sigma : bool
        True when the rule uses σ̂ (FedCGD): only then do devices compute it.

    """

    name: str = "policy"
    needs_post_training: ClassVar[bool] = False
    needs_reports: ClassVar[bool] = True
    needs_sigma: ClassVar[bool] = False

    @property
    def class_gradient(self) -> NDArray[np.float64] | None:
        """Ĝ ([1]) or Ĝ_c ([C]) the next round will use; None for rules without it."""
        return None

    @abstractmethod
    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Return this round's schedule."""

    def observe_uploads(self, uploads: UploadedUpdates) -> None:  # noqa: B027 - optional hook
        """Update internal estimates from the scheduled devices' uploads (default: nothing)."""

    def state_dict(self) -> dict[str, object]:
        """The rule's state across rounds (JSON-serialisable; for logs and checkpoints)."""
        return {}

    def load_state_dict(self, state: Mapping[str, object]) -> None:  # noqa: B027 - optional
        """Restore :meth:`state_dict` output (default: the rule keeps no state)."""


@dataclass
class FedCGDPolicy(Policy):
    """FedCGD: solve problem P1 with σ̂ of this round and Ĝ (or Ĝ_c) of the previous round.

    Paper Algorithm 3: σ̂ from eq. (global_est_sigma) over the reporting devices; Ĝ from the
    previous round's uploads (eq. G_est), or per class Ĝ_c (eq. Gc_est) when ``per_class``.
    First round: no Ĝ exists yet, ``initial_g`` is used (docs/design.md, "First round") and recorded
    in the log.

    Parameters
    ----------
    method : str
        Solver for P1: ``"fscd"``, ``"gs"``, ``"exact"`` or ``"cd"``.
    per_class : bool
        Estimate G per class (FedCGD-FSCD-Gc).
    initial_g : float
        Ĝ (every Ĝ_c) before the first upload.
    num_classes : int
        C.
    name : str
        Policy name for logs.
    exact_time_limit_s : float or None
        Cap on each MILP of the ``"exact"`` method (None: no cap, the true optimum).

    """

    method: str = "fscd"
    per_class: bool = False
    initial_g: float = 1.0
    num_classes: int = 10
    name: str = "fedcgd-fscd"
    exact_time_limit_s: float | None = None
    _g: NDArray[np.float64] = field(init=False, repr=False)
    needs_sigma: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._g = np.full(self.num_classes if self.per_class else 1, float(self.initial_g))

    @property
    def class_gradient(self) -> NDArray[np.float64]:
        """Ĝ (float[1]) or Ĝ_c (float[C]) the next round will use."""
        return self._g.copy()

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Solve P1 over the candidates (paper Algorithm 3, "Call Alg. 1 or Alg. 2")."""
        idx = np.flatnonzero(inputs.candidate)
        selected = np.zeros(inputs.num_devices, dtype=bool)
        if idx.size == 0:
            return decide(inputs, selected, self._g)
        problem = SchedulingProblem(
            label_dist=inputs.label_dist[idx],
            target_dist=inputs.target_dist,
            min_bandwidth_hz=inputs.min_bandwidth_hz[idx],
            total_bandwidth_hz=inputs.total_bandwidth_hz,
            sigma=inputs.global_sigma(),
            class_gradient=self._g if self.per_class else float(self._g[0]),
            batch_size=inputs.batch_size,
        )
        result = solve(problem, self.method, rng=rng, milp_time_limit_s=self.exact_time_limit_s)
        selected[idx[result.selected]] = True
        return decide(inputs, selected, self._g, result)

    def observe_uploads(self, uploads: UploadedUpdates) -> None:
        """Update Ĝ (eq. G_est) or Ĝ_c (eq. Gc_est) from this round's uploads.

        With fewer than two uploads the old value is kept: ∇F̂ is then the single device's own
        gradient, so every ratio of eq. (G_est) is 0 by construction, which says nothing about G
        (the paper is silent; an estimate of 0 would make the next round ignore the WEMD).
        """
        if uploads.updates.shape[0] < MIN_UPLOADS_FOR_G:
            return
        grads = device_gradient_estimates(
            uploads.updates, uploads.learning_rate, uploads.local_steps
        )
        if self.per_class:
            self._g = np.asarray(
                estimate_per_class_gradient(
                    grads, uploads.weights, uploads.label_dist, uploads.target_dist, self._g
                ),
                dtype=np.float64,
            )
        else:
            g = estimate_class_gradient(
                grads, uploads.weights, uploads.label_dist, uploads.target_dist, float(self._g[0])
            )
            self._g = np.array([g], dtype=np.float64)

    def state_dict(self) -> dict[str, object]:
        """Ĝ (or Ĝ_c) after the last update."""
        return {"class-gradient": [float(v) for v in self._g]}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore Ĝ (Ĝ_c) from :meth:`state_dict` output."""
        g = np.asarray(state["class-gradient"], dtype=np.float64)
        if g.shape != self._g.shape:
            raise ValueError(f"class-gradient has shape {g.shape}; expected {self._g.shape}")
        self._g = g


def _candidate_bandwidth(inputs: RoundInputs) -> NDArray[np.float64]:
    """B* with non-candidates made infeasible, so selectors never take them."""
    return np.where(inputs.candidate, inputs.min_bandwidth_hz, np.inf)


def _ranking_args(
    inputs: RoundInputs, scores: NDArray[np.float64] | None, policy: str, what: str
) -> tuple[NDArray[np.bool_], NDArray[np.float64], NDArray[np.float64], float]:
    """(eligible, scores, B*, B) for a selector of :mod:`fedcgd_strategy.selectors`."""
    if scores is None:
        raise ValueError(f"policy {policy!r} needs {what}: every available device must train")
    return inputs.candidate, scores, _candidate_bandwidth(inputs), inputs.total_bandwidth_hz


@dataclass
class BestChannelPolicy(Policy):
    """BC (Amiri et al.): by channel gain, descending, best effort.

    See docs/design.md, "Best effort".
    """

    pack_rule: str = "stop"
    name: str = "bc"
    needs_reports: ClassVar[bool] = False

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule by gain."""
        args = _ranking_args(inputs, inputs.gain_lin, self.name, "channel gains")
        return decide(inputs, best_channel(*args, rule=self.pack_rule))


@dataclass
class BestNormPolicy(Policy):
    """BN2 (Amiri et al.): by the L2 norm of the local update, descending, best effort."""

    pack_rule: str = "stop"
    name: str = "bn2"
    needs_post_training: ClassVar[bool] = True

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule by update norm (needs post-training reports)."""
        args = _ranking_args(inputs, inputs.update_norm, self.name, "update norms")
        return decide(inputs, best_norm(*args, rule=self.pack_rule))


@dataclass
class PowerOfChoicePolicy(Policy):
    """POC (Cho et al.): V' candidates drawn uniformly, by accumulated loss, best effort."""

    num_candidates: int = 0
    pack_rule: str = "stop"
    name: str = "poc"
    needs_post_training: ClassVar[bool] = True

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule by this round's training loss (needs post-training reports)."""
        args = _ranking_args(inputs, inputs.train_loss, self.name, "training losses")
        mask = power_of_choice(*args, self.num_candidates, rng, rule=self.pack_rule)
        return decide(inputs, mask)


@dataclass
class FedCBSPolicy(Policy):
    """Fed-CBS (Zhang et al. 2023): QCID-driven CUCB sampling until the next device does not fit.

    QCID uses each device's whole local class distribution (``inputs.local_dist``, reported
    once at discovery), as Fed-CBS defines it; so the rule needs no query phase.
    """

    num_devices: int = 1
    lam: float = 10.0
    name: str = "fedcbs"
    state: FedCBSState = field(init=False)
    needs_reports: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.state = FedCBSState(self.num_devices)

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Sample sequentially; selection counts persist across rounds in :attr:`state`."""
        if inputs.local_dist is None:
            raise ValueError("policy 'fedcbs' needs the devices' local class distributions")
        mask = fedcbs_select(
            self.state,
            inputs.candidate,
            inputs.local_dist,
            inputs.num_examples,
            _candidate_bandwidth(inputs),
            inputs.total_bandwidth_hz,
            rng,
            lam=self.lam,
        )
        return decide(inputs, mask)

    def state_dict(self) -> dict[str, object]:
        """Selection counts and round counter."""
        return dict(self.state.to_dict())

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore the selection counts and round counter."""
        self.state = FedCBSState.from_dict(state)


@dataclass
class AllFeasiblePolicy(Policy):
    """Every available device that can meet the deadline (FedAvg reference; no bandwidth budget)."""

    name: str = "all"
    needs_reports: ClassVar[bool] = False

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule every candidate with finite B*."""
        return decide(inputs, inputs.candidate & np.isfinite(inputs.min_bandwidth_hz))


#: Policy name -> (class, P1 solver for FedCGD variants, per-class Ĝ_c).
_POLICIES: dict[str, tuple[type[Policy], str, bool]] = {
    "fedcgd-fscd": (FedCGDPolicy, "fscd", False),
    "fedcgd-gs": (FedCGDPolicy, "gs", False),
    "fedcgd-fscd-gc": (FedCGDPolicy, "fscd", True),
    "fedcgd-exact": (FedCGDPolicy, "exact", False),
    "fedcgd-cd": (FedCGDPolicy, "cd", False),
    "bc": (BestChannelPolicy, "", False),
    "bn2": (BestNormPolicy, "", False),
    "poc": (PowerOfChoicePolicy, "", False),
    "fedcbs": (FedCBSPolicy, "", False),
    "all": (AllFeasiblePolicy, "", False),
}
#: Policy names accepted by :func:`make_policy` (and the run-config key ``policy``).
POLICY_NAMES: tuple[str, ...] = tuple(_POLICIES)


def policy_class(name: str) -> type[Policy]:
    """The class of the policy called ``name`` (its ClassVars say what the rule needs)."""
    if name not in _POLICIES:
        raise ValueError(f"policy: got {name!r}; allowed: {', '.join(POLICY_NAMES)}")
    return _POLICIES[name][0]


def resolve_protocol(policy: str, requested: str = "auto") -> str:
    """Return the round protocol for ``policy`` (the one place this rule lives).

    ``"auto"`` does no work the rule does not need: rules that rank devices on post-training
    values (:attr:`Policy.needs_post_training`: BN2, POC) get ``"train-all"``; rules that need
    the channel only (:attr:`Policy.needs_reports` false: BC, all) get ``"channel"`` (no query
    phase); the others (FedCGD, Fed-CBS) get ``"query"``. A protocol with more work than needed
    may be asked for (same schedules and model: useful to compare protocols).

    Parameters
    ----------
    policy : str
        One of :data:`POLICY_NAMES`.
    requested : str
        One of :data:`PROTOCOL_CHOICES`; ``"auto"`` derives the protocol from the policy.

    Raises
    ------
    ValueError
        For an unknown policy or protocol, or ``"query"`` with a post-training rule.

    """
    kind = policy_class(policy)
    if requested not in PROTOCOL_CHOICES:
        raise ValueError(f"protocol: got {requested!r}; allowed: {', '.join(PROTOCOL_CHOICES)}")
    if kind.needs_post_training:
        allowed: tuple[str, ...] = ("train-all",)
    elif kind.needs_reports:
        allowed = ("query", "train-all")
    else:
        allowed = PROTOCOLS
    if requested == "auto":
        return allowed[0]
    if requested not in allowed:
        raise ValueError(
            f"protocol {requested!r} does not work with policy {policy!r}; allowed: 'auto' or "
            + " or ".join(repr(a) for a in allowed)
        )
    return requested


def make_policy(
    name: str,
    *,
    num_devices: int,
    num_classes: int,
    initial_g: float = 1.0,
    pack_rule: str = "stop",
    poc_candidates: int = 0,
    fedcbs_lambda: float = 10.0,
    exact_time_limit_s: float | None = None,
) -> Policy:
    """Build a policy by its name.

    Parameters
    ----------
    name : str
        One of :data:`POLICY_NAMES`.
    num_devices, num_classes : int
        V and C.
    initial_g : float
        FedCGD's Ĝ before the first upload.
    pack_rule : str
        Best-effort rule of the baselines, ``"stop"`` or ``"skip"``.
    poc_candidates : int
        POC's V' (0 = all available).
    fedcbs_lambda : float
        Fed-CBS exploration weight λ.
    exact_time_limit_s : float or None
        ``fedcgd-exact`` only: cap on each MILP (None = no cap).

    Returns
    -------
    Policy
        A fresh policy object (it may hold state across rounds).

    Raises
    ------
    ValueError
        For an unknown name.

    """
    kind = policy_class(name)
    _, method, per_class = _POLICIES[name]
    if kind is FedCGDPolicy:
        time_limit = exact_time_limit_s if method == "exact" else None
        return FedCGDPolicy(method, per_class, initial_g, num_classes, name, time_limit)
    if kind is PowerOfChoicePolicy:
        return PowerOfChoicePolicy(poc_candidates, pack_rule)
    if kind is FedCBSPolicy:
        return FedCBSPolicy(num_devices, fedcbs_lambda)
    if kind in (BestChannelPolicy, BestNormPolicy):
        return kind(pack_rule)
    return kind()
