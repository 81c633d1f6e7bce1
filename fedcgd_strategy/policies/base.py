"""The base class of a scheduling rule (:class:`Policy`) and what it learns from (uploads).

A policy turns one round's :class:`~fedcgd_strategy.policies.inputs.RoundInputs` into a
:class:`~fedcgd_strategy.policies.decision.Decision`. Policies are pure numpy objects (no flwr,
no torch): the Flower strategy fills the inputs from messages, calls :meth:`Policy.schedule`,
and after aggregation calls :meth:`Policy.observe_uploads` (FedCGD updates its class-gradient
estimate Ĝ there, paper Algorithm 3, last line).

Writing a policy: subclass :class:`Policy`, implement :meth:`~Policy.schedule`, declare what the
rule needs through the class attributes (they decide the round protocol, see
:mod:`~fedcgd_strategy.policies.protocol`), keep state across rounds in the object and return it
from :meth:`~Policy.state_dict` (checkpoints and resume restore it with
:meth:`~Policy.load_state_dict`). Constructor parameters come from the run config
(:mod:`~fedcgd_strategy.policies.registry`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.policies.decision import Decision
from fedcgd_strategy.policies.inputs import RoundInputs


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
        The run-config value the policy was built from (a built-in name or an import path),
        set by :func:`~fedcgd_strategy.policies.registry.make_policy`; used in logs.
    needs_post_training : bool
        True when the rule ranks devices by values known only after local training (BN2's
        update norm, POC's accumulated loss): then every available device trains first and
        only the scheduled ones upload, as in the paper.
    needs_reports : bool
        False when the rule needs no per-round report before scheduling (BC, all: the channel;
        Fed-CBS: the local distributions reported at discovery): no query phase.
    needs_sigma : bool
        True when the rule uses σ̂ (FedCGD): only then do devices compute it.
    uses_budget : bool
        True (every rule but one): its schedules fit the bandwidth budget B, which every
        round checks (:func:`~fedcgd_strategy.policies.decision_check.check_decision`).
        False only for a reference that schedules without a budget (``all``, the FedAvg
        reference); its runs say so in ``config.json`` (``policy_uses_budget``).

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
        """Return this round's schedule (build it with ``decision_from_mask``).

        Parameters
        ----------
        inputs : RoundInputs
            The round (length-V arrays; only ``inputs.candidate`` devices may be scheduled).
        rng : numpy.random.Generator
            The policy's random stream (derived from the run seed; checkpointed).

        """

    def observe_uploads(self, uploads: UploadedUpdates) -> None:  # noqa: B027 - optional hook
        """Update internal estimates from the scheduled devices' uploads (default: nothing)."""

    def state_dict(self) -> dict[str, object]:
        """The rule's state across rounds (JSON-serialisable; for logs and checkpoints)."""
        return {}

    def load_state_dict(self, state: Mapping[str, object]) -> None:  # noqa: B027 - optional
        """Restore :meth:`state_dict` output (default: the rule keeps no state)."""
