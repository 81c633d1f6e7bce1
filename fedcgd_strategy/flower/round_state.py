"""What one round of :class:`~.strategy.ScheduledStrategy` carries from phase to phase.

:class:`RoundInProgress` is what :meth:`~.strategy.ScheduledStrategy.configure_train` leaves for
:meth:`~.strategy.ScheduledStrategy.aggregate_train` of the same round.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from flwr.app import Message
from numpy.typing import NDArray

from channel import RoundDraw
from fedcgd_strategy.policies import Decision, RoundInputs
from fedcgd_task.settings import TrainingSettings

#: A model as named numpy arrays (the global model sent this round).
Arrays = dict[str, NDArray[np.generic]]


@dataclass
class RoundInProgress:
    """What the strategy's ``configure_train`` leaves for ``aggregate_train`` of the same round."""

    draw: RoundDraw
    training: TrainingSettings
    reference: Arrays
    available: list[int]
    server_round: int = 0
    query_s: float = 0.0
    schedule_s: float = 0.0
    t_sent: float = 0.0
    inputs: RoundInputs | None = None
    decision: Decision | None = None
    failed: dict[int, str] = field(default_factory=dict)
    discovery_failed: dict[int, str] = field(default_factory=dict)
    discovery_s: float = 0.0
    busy: dict[int, int] = field(default_factory=dict)
    trainees: list[int] = field(default_factory=list)
    sent: list[Message] = field(default_factory=list)
    lost: set[int] = field(default_factory=set)
    dp_noise: tuple[float, float] | None = None

    @property
    def reachable(self) -> list[int]:
        """Available devices not busy with an earlier, unanswered message."""
        return [v for v in self.available if v not in self.busy]
