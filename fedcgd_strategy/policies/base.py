"""The base class of a scheduling rule (:class:`Policy`) and what it learns from (uploads).

The Flower strategy fills the round's inputs, calls :meth:`Policy.schedule`, and after
aggregation :meth:`Policy.observe_uploads` (FedCGD updates Ĝ there, paper Algorithm 3, last
line). How to write one: docs/bring-your-own.md, "Write your own policy". Pure numpy.
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
    """Base class of a scheduling rule.

    Attributes
    ----------
    name : str
        The run-config value the policy was built from (set by ``make_policy``; used in logs).
    needs_post_training : bool
        The rule ranks on values known only after local training (BN2, POC): every available
        device trains first.
    needs_reports : bool
        False when the rule needs no per-round report before scheduling: no query phase.
    needs_sigma : bool
        The rule uses σ̂ (FedCGD): only then do devices compute it.
    uses_budget : bool
        False only for a reference that schedules without the budget B (``all``); every other
        rule's schedules are checked against it (``config.json``: ``policy_uses_budget``).
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
