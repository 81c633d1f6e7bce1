"""A run's TensorBoard events: each round's metrics line as scalars, in the run's own folder.

``tensorboard --logdir results/`` then shows every run below ``results/`` (single runs,
comparisons, presets), named by its folder, while it runs. Written with
:class:`torch.utils.tensorboard.SummaryWriter` (torch's writer of the format; ``tensorboard``
itself is needed to view them anyway), flushed after every round; no fsync (a crash loses at
most the round in flight, as ``metrics.jsonl``'s torn last line).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

#: TensorBoard tag -> field of the round's metrics line (docs/running.md, "What a run writes").
SCALARS: dict[str, str] = {
    "accuracy": "accuracy",
    "loss": "loss",
    "devices/available": "num_available",
    "devices/scheduled": "num_scheduled",
    "devices/uploaded": "num_uploaded",
    "devices/lost": "devices_lost",
    "schedule/wemd": "wemd",
    "schedule/sampling_term": "sampling_term",
    "schedule/objective": "objective",
    "schedule/bandwidth_used_hz": "bandwidth_used_hz",
    "estimates/sigma": "sigma",
    "estimates/class_gradient": "class_gradient_used",
    "dp/clipping_norm": "dp_clipping_norm",
    "dp/noise_std": "dp_noise_std",
}


class RoundEvents:
    """The TensorBoard event file of one run (or of one resumed part of it).

    Parameters
    ----------
    folder : Path
        The run's folder.
    resumed_after : int
        The checkpoint's round when resuming (0: a new run). Events of later rounds that the
        stopped run had written are dropped from the view (TensorBoard's ``purge_step``), so
        each round shows once.
    """

    def __init__(self, folder: Path, resumed_after: int = 0) -> None:
        purge = resumed_after + 1 if resumed_after else None
        self._writer = SummaryWriter(log_dir=str(folder), purge_step=purge)

    def add(self, line: Mapping[str, Any]) -> None:
        """Write the finite numbers of a round's metrics line as scalars at its round."""
        step = int(line["round"])
        for tag, field in SCALARS.items():
            value = line.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                if math.isfinite(value):
                    self._writer.add_scalar(tag, value, step)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()
