"""One round's record (one JSON line of the run's metrics file), built by a pure function."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.policies import Decision, RoundInputs


@dataclass(frozen=True)
class RoundRecord:
    """What happened in one round: the columns of ``metrics.jsonl`` (docs/running.md).

    Lists hold partition ids; ``failed_reasons`` is keyed by the id as a string (JSON);
    ``discovery_failed`` by node id. ``lost`` are devices drawn available that the round lost to
    something outside the simulated physics (no connected node, no reply, an error reply); a device
    whose reply was refused is ``failed``, not lost. ``dp_clipping_norm`` and ``dp_noise_std``:
    the clipping norm C and the noise's standard deviation z C / n of a DP aggregator's round
    (None without DP, or when the round kept the model).
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


def round_record(
    server_round: int,
    *,
    num_available: int,
    inputs: RoundInputs,
    decision: Decision,
    uploaded: Sequence[int],
    disconnected: Iterable[int],
    class_gradient_next: NDArray[np.float64] | None,
    timings: Mapping[str, float],
    failed_reasons: Mapping[int, str],
    model_kept_reason: str | None,
    discovery_failed: Mapping[int, str],
    lost: Iterable[int],
    dp_noise: tuple[float, float] | None = None,
) -> RoundRecord:
    """Build one round's :class:`RoundRecord` (fields: docs/running.md) from what the policy saw
    and decided; ``timings``: its ``*_s`` fields, seconds of server wall clock; ``dp_noise``:
    (C, z C / n) of a DP aggregator's round."""  # noqa: D205, D209
    selected, solver = decision.selected, decision.solver
    scheduled = bool(selected.any())
    reasons = {int(k): str(v) for k, v in failed_reasons.items()}
    clipping_norm, noise_std = dp_noise or (None, None)
    return RoundRecord(
        round=server_round,
        num_available=num_available,
        num_candidates=int(inputs.candidate.sum()),
        num_feasible=int(np.sum(inputs.candidate & np.isfinite(inputs.min_bandwidth_hz))),
        num_scheduled=int(selected.sum()),
        num_uploaded=len(uploaded),
        scheduled=np.flatnonzero(selected).tolist(),
        uploaded=[int(v) for v in uploaded],
        failed=sorted(reasons),
        disconnected=sorted(int(v) for v in disconnected),
        wemd=decision.wemd,
        sampling_term=decision.sampling_term,
        objective=float(solver.objective) if solver is not None and scheduled else float("nan"),
        sigma=float(decision.sigma),
        class_gradient_used=class_gradient_value(decision.class_gradient),
        class_gradient_next=class_gradient_value(class_gradient_next),
        bandwidth_used_hz=decision.bandwidth_used_hz,
        solver_iterations=int(solver.iterations) if solver is not None else 0,
        **timings,
        model_kept=model_kept_reason is not None,
        failed_reasons={str(k): reasons[k] for k in sorted(reasons)},
        model_kept_reason=model_kept_reason,
        discovery_failed={str(k): str(v) for k, v in sorted(discovery_failed.items())},
        devices_lost=len(set(lost)),
        lost=sorted({int(v) for v in lost}),
        dp_clipping_norm=clipping_norm,
        dp_noise_std=noise_std,
    )
