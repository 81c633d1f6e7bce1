"""FedCGD (paper Algorithm 3): schedule by problem P1 with this round's σ̂ and the last Ĝ."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.estimators import (
    device_gradient_estimates,
    estimate_class_gradient,
    estimate_per_class_gradient,
)
from fedcgd_strategy.policies.core import (
    Decision,
    Policy,
    RoundInputs,
    UploadedUpdates,
    decision_from_mask,
)
from fedcgd_strategy.problem import SchedulingProblem
from fedcgd_strategy.solvers import solve
from fedcgd_strategy.validation import as_nonnegative_array

#: Fewer uploads than this leave Ĝ unchanged (see :meth:`FedCGDPolicy.observe_uploads`).
MIN_UPLOADS_FOR_G = 2


@dataclass
class FedCGDPolicy(Policy):
    """FedCGD: solve problem P1 with σ̂ of this round and Ĝ (or Ĝ_c) of the previous round.

    Paper Algorithm 3: σ̂ from eq. (global_est_sigma); Ĝ from the previous uploads (eq. G_est), or
    Ĝ_c (eq. Gc_est) when ``per_class``; ``initial_g`` before the first upload (docs/design.md,
    "First round").

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
    exact_time_limit_s : float
        Cap on each MILP of the ``"exact"`` method in seconds (0: no cap).
    """

    method: str = "fscd"
    per_class: bool = False
    initial_g: float = 1.0
    num_classes: int = 10
    exact_time_limit_s: float = 0.0
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
            return decision_from_mask(inputs, selected, self._g)
        problem = SchedulingProblem(
            label_dist=inputs.label_dist[idx],
            target_dist=inputs.target_dist,
            min_bandwidth_hz=inputs.min_bandwidth_hz[idx],
            total_bandwidth_hz=inputs.total_bandwidth_hz,
            sigma=inputs.global_sigma(),
            class_gradient=self._g if self.per_class else float(self._g[0]),
            batch_size=inputs.batch_size,
        )
        time_limit_s = self.exact_time_limit_s or None
        result = solve(problem, self.method, rng=rng, milp_time_limit_s=time_limit_s)
        selected[idx[result.selected]] = True
        return decision_from_mask(inputs, selected, self._g, result)

    def observe_uploads(self, uploads: UploadedUpdates) -> None:
        """Update Ĝ (eq. G_est) or Ĝ_c (eq. Gc_est); kept with fewer than two uploads."""
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
        """Restore Ĝ (Ĝ_c) from :meth:`state_dict` output (finite, >= 0, of this rule's shape)."""
        g = np.asarray(state["class-gradient"], dtype=np.float64)
        if g.shape != self._g.shape:
            raise ValueError(f"class-gradient has shape {g.shape}; expected {self._g.shape}")
        self._g = as_nonnegative_array(g, "class-gradient")
