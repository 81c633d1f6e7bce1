"""One round's record: one JSON line of the run's metrics file."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class RoundRecord:
    """What happened in one round: the columns of ``metrics.jsonl`` (docs/running.md).

    Lists hold partition ids; ``failed_reasons`` is keyed by the id as a string (JSON),
    ``discovery_failed`` by node id; a device whose reply was refused is ``failed``, not ``lost``.
    """

    round: int
    num_available: int
    num_candidates: int
    num_feasible: int
    num_scheduled: int
    num_uploaded: int
    scheduled: list[int]
    uploaded: list[int]
    failed: list[int]
    disconnected: list[int]
    wemd: float
    sampling_term: float
    objective: float
    sigma: float
    class_gradient_used: float | list[float] | None
    class_gradient_next: float | list[float] | None
    bandwidth_used_hz: float
    solver_iterations: int
    query_s: float
    schedule_s: float
    train_phase_s: float
    aggregate_s: float
    client_train_s: float
    model_kept: bool
    failed_reasons: dict[str, str]
    model_kept_reason: str | None
    discovery_failed: dict[str, str]
    discovery_s: float = 0.0
    devices_lost: int = 0
    lost: list[int] = field(default_factory=list)
    dp_clipping_norm: float | None = None
    dp_noise_std: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return asdict(self)


def class_gradient_value(g: NDArray[np.float64] | None) -> float | list[float] | None:
    """Ĝ as written to the metrics file: a float for Ĝ (length 1), a list for Ĝ_c, else None."""
    if g is None:
        return None
    values = [float(v) for v in np.asarray(g, dtype=float).ravel()]
    return values[0] if len(values) == 1 else values
