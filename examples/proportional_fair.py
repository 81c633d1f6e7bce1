"""Proportional-fair scheduling as a user's policy.

How to write one: docs/bring-your-own.md, "Write your own policy".
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from fedcgd_strategy import Decision, Policy, RoundInputs, best_effort_pack, decision_from_mask


@dataclass
class ProportionalFair(Policy):
    """Rank the available devices by instantaneous rate over average throughput; pack into B.

    A device's instantaneous rate per Hz is D_w / (T B*_v) (it needs B*_v Hz to upload the
    model within the deadline), so 1 / B*_v ranks like it. Its average throughput is an
    exponential moving average over ``window`` rounds of the rate it was served (0 when not
    scheduled); never-served devices come first. The averages are the policy's state: they are
    checkpointed and survive a resume.
    """

    window: float = 20.0  # t_c in rounds: policy-params.window
    pack_rule: str = "stop"  # the run's pack-rule, as the baselines use it
    average: list[float] = field(default_factory=list, init=False)
    needs_reports = False  # the channel is enough: no query phase

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule by rate / average throughput (ties: higher rate, then lower index)."""
        usable = inputs.candidate & np.isfinite(inputs.min_bandwidth_hz)
        bandwidth = np.maximum(inputs.min_bandwidth_hz, 1e-300)
        rate = np.divide(1.0, bandwidth, out=np.zeros(inputs.num_devices), where=usable)
        average = np.array(self.average or np.zeros(inputs.num_devices))
        priority = np.divide(rate, average, out=np.full(rate.shape, np.inf), where=average > 0)
        order = [v for v in np.lexsort((-rate, -priority)) if usable[v]]
        selected = best_effort_pack(
            order, inputs.min_bandwidth_hz, inputs.total_bandwidth_hz, self.pack_rule
        )
        self.average = (average + (rate * selected - average) / self.window).tolist()
        return decision_from_mask(inputs, selected)

    def state_dict(self) -> dict[str, object]:
        """The average throughputs (per device, in 1/Hz)."""
        return {"average": list(self.average)}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore the average throughputs."""
        self.average = [float(v) for v in state["average"]]  # type: ignore[attr-defined]
