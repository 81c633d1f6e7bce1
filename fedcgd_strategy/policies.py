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
from collections.abc import Callable
from dataclasses import dataclass, field
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
from fedcgd_strategy.problem import SchedulingProblem
from fedcgd_strategy.selectors import best_channel, best_norm, power_of_choice
from fedcgd_strategy.solvers import solve

#: Fewer uploads than this leave Ĝ unchanged (see :meth:`FedCGDPolicy.observe_uploads`).
MIN_UPLOADS_FOR_G = 2

#: Policy names accepted by :func:`make_policy` (and the run-config key ``policy``).
POLICY_NAMES: tuple[str, ...] = (
    "fedcgd-fscd",
    "fedcgd-gs",
    "fedcgd-fscd-gc",
    "fedcgd-exact",
    "fedcgd-cd",
    "bc",
    "bn2",
    "poc",
    "fedcbs",
    "all",
)


@dataclass(frozen=True)
class RoundInputs:
    """What a policy may use to schedule one round (all arrays have length V).

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

    @property
    def num_devices(self) -> int:
        """Number of devices V in the cell."""
        return int(self.candidate.shape[0])

    def global_sigma(self) -> float:
        """σ̂ over the candidates, paper eq. (global_est_sigma); 0 when nobody reported."""
        idx = np.flatnonzero(self.candidate)
        if idx.size == 0:
            return 0.0
        return estimate_global_sigma(self.sigma_v[idx], self.num_examples[idx])


@dataclass(frozen=True)
class Decision:
    """A policy's schedule for one round.

    Attributes
    ----------
    selected : bool[V]
        Scheduled devices (a subset of the candidates).
    sigma : float
        Global σ̂ of the round (eq. global_est_sigma), logged for every policy.
    class_gradient : float or list of float
        Ĝ (or Ĝ_c) the policy used; NaN for policies that do not use it.
    solver_objective : float
        Value of problem P1 reported by the FedCGD solver (NaN for baselines).
    solver_iterations : int
        Solver iterations (0 for baselines).

    """

    selected: NDArray[np.bool_]
    sigma: float
    class_gradient: float | list[float] = float("nan")
    solver_objective: float = float("nan")
    solver_iterations: int = 0


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
        only the scheduled ones upload, as in the paper.

    """

    name: str = "policy"
    needs_post_training: ClassVar[bool] = False

    @abstractmethod
    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Return this round's schedule."""

    def observe_uploads(self, uploads: UploadedUpdates) -> None:  # noqa: B027 - optional hook
        """Update internal estimates from the scheduled devices' uploads (default: nothing)."""

    def state_dict(self) -> dict[str, object]:
        """Loggable internal state."""
        return {}


@dataclass
class FedCGDPolicy(Policy):
    """FedCGD: solve problem P1 with σ̂ of this round and Ĝ (or Ĝ_c) of the previous round.

    Paper Algorithm 3: σ̂ from eq. (global_est_sigma) over the reporting devices; Ĝ from the
    previous round's uploads (eq. G_est), or per class Ĝ_c (eq. Gc_est) when ``per_class``.
    First round: no Ĝ exists yet, ``initial_g`` is used (DESIGN.md) and recorded in the log.

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

    def __post_init__(self) -> None:
        self._g = np.full(self.num_classes if self.per_class else 1, float(self.initial_g))

    @property
    def class_gradient(self) -> float | NDArray[np.float64]:
        """Current Ĝ (scalar) or Ĝ_c (float[C])."""
        return self._g.copy() if self.per_class else float(self._g[0])

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Solve P1 over the candidates (paper Algorithm 3, "Call Alg. 1 or Alg. 2")."""
        idx = np.flatnonzero(inputs.candidate)
        sigma = inputs.global_sigma()
        g_used: float | list[float] = (
            [float(v) for v in self._g] if self.per_class else float(self._g[0])
        )
        selected = np.zeros(inputs.num_devices, dtype=bool)
        if idx.size == 0:
            return Decision(selected, sigma, g_used)
        problem = SchedulingProblem(
            label_dist=inputs.label_dist[idx],
            target_dist=inputs.target_dist,
            min_bandwidth_hz=inputs.min_bandwidth_hz[idx],
            total_bandwidth_hz=inputs.total_bandwidth_hz,
            sigma=sigma,
            class_gradient=self.class_gradient,
            batch_size=inputs.batch_size,
        )
        result = solve(problem, self.method, rng=rng, milp_time_limit_s=self.exact_time_limit_s)
        selected[idx[result.selected]] = True
        return Decision(
            selected,
            sigma,
            g_used,
            solver_objective=float(result.objective),
            solver_iterations=int(result.iterations),
        )

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


def _candidate_bandwidth(inputs: RoundInputs) -> NDArray[np.float64]:
    """B* with non-candidates made infeasible, so selectors never take them."""
    return np.where(inputs.candidate, inputs.min_bandwidth_hz, np.inf)


@dataclass
class BestChannelPolicy(Policy):
    """BC (Amiri et al.): by channel gain, descending, best effort (DESIGN.md)."""

    pack_rule: str = "stop"
    name: str = "bc"

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule by gain."""
        mask = best_channel(
            inputs.candidate,
            inputs.gain_lin,
            _candidate_bandwidth(inputs),
            inputs.total_bandwidth_hz,
            rule=self.pack_rule,
        )
        return Decision(np.asarray(mask, dtype=bool), inputs.global_sigma())


@dataclass
class BestNormPolicy(Policy):
    """BN2 (Amiri et al.): by the L2 norm of the local update, descending, best effort."""

    pack_rule: str = "stop"
    name: str = "bn2"
    needs_post_training: ClassVar[bool] = True

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule by update norm (needs post-training reports)."""
        if inputs.update_norm is None:
            raise ValueError("policy 'bn2' needs update norms: every available device must train")
        mask = best_norm(
            inputs.candidate,
            inputs.update_norm,
            _candidate_bandwidth(inputs),
            inputs.total_bandwidth_hz,
            rule=self.pack_rule,
        )
        return Decision(np.asarray(mask, dtype=bool), inputs.global_sigma())


@dataclass
class PowerOfChoicePolicy(Policy):
    """POC (Cho et al.): V' candidates drawn uniformly, by accumulated loss, best effort."""

    num_candidates: int = 0
    pack_rule: str = "stop"
    name: str = "poc"
    needs_post_training: ClassVar[bool] = True

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule by this round's training loss (needs post-training reports)."""
        if inputs.train_loss is None:
            raise ValueError(
                "policy 'poc' needs training losses: every available device must train"
            )
        mask = power_of_choice(
            inputs.candidate,
            inputs.train_loss,
            _candidate_bandwidth(inputs),
            inputs.total_bandwidth_hz,
            self.num_candidates,
            rng,
            rule=self.pack_rule,
        )
        return Decision(np.asarray(mask, dtype=bool), inputs.global_sigma())


@dataclass
class FedCBSPolicy(Policy):
    """Fed-CBS (Zhang et al. 2023): QCID-driven CUCB sampling until the next device does not fit."""

    num_devices: int = 1
    lam: float = 10.0
    name: str = "fedcbs"
    state: FedCBSState = field(init=False)

    def __post_init__(self) -> None:
        self.state = FedCBSState(self.num_devices)

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Sample sequentially; selection counts persist across rounds in :attr:`state`."""
        mask = fedcbs_select(
            self.state,
            inputs.candidate,
            inputs.label_dist,
            inputs.num_examples,
            _candidate_bandwidth(inputs),
            inputs.total_bandwidth_hz,
            rng,
            lam=self.lam,
        )
        return Decision(np.asarray(mask, dtype=bool), inputs.global_sigma())

    def state_dict(self) -> dict[str, object]:
        """Selection counts and round counter."""
        return dict(self.state.to_dict())


@dataclass
class AllFeasiblePolicy(Policy):
    """Every available device that can meet the deadline (FedAvg reference; no bandwidth budget)."""

    name: str = "all"

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule every candidate with finite B*."""
        mask = inputs.candidate & np.isfinite(inputs.min_bandwidth_hz)
        return Decision(mask, inputs.global_sigma())


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
    fedcgd: dict[str, Callable[[], Policy]] = {
        "fedcgd-fscd": lambda: FedCGDPolicy("fscd", False, initial_g, num_classes, name),
        "fedcgd-gs": lambda: FedCGDPolicy("gs", False, initial_g, num_classes, name),
        "fedcgd-fscd-gc": lambda: FedCGDPolicy("fscd", True, initial_g, num_classes, name),
        "fedcgd-exact": lambda: FedCGDPolicy(
            "exact", False, initial_g, num_classes, name, exact_time_limit_s
        ),
        "fedcgd-cd": lambda: FedCGDPolicy("cd", False, initial_g, num_classes, name),
        "bc": lambda: BestChannelPolicy(pack_rule),
        "bn2": lambda: BestNormPolicy(pack_rule),
        "poc": lambda: PowerOfChoicePolicy(poc_candidates, pack_rule),
        "fedcbs": lambda: FedCBSPolicy(num_devices, fedcbs_lambda),
        "all": lambda: AllFeasiblePolicy(),
    }
    if name not in fedcgd:
        raise ValueError(f"policy: got {name!r}; allowed: {', '.join(POLICY_NAMES)}")
    return fedcgd[name]()
