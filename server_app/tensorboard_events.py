"""A run's TensorBoard events: each round's metrics line as scalars, in the run's own folder.

``tensorboard --logdir results/`` then shows every run below ``results/`` (single runs,
comparisons, presets), named by its folder, while it runs. Written with
:class:`torch.utils.tensorboard.SummaryWriter` (torch's writer of the format; ``tensorboard``
itself is needed to view them anyway), flushed after every round; no fsync (a crash loses at
most the round in flight, as ``metrics.jsonl``'s torn last line).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from fedcgd_task.schema import SETTINGS
from fedcgd_task.settings import RECORDED
from run_files.run_status import flat_settings

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


#: Settings every run's hparams name, whatever their value (run-config keys).
ALWAYS: tuple[str, ...] = ("policy", "aggregator", "seed")
#: The metrics TensorBoard's HParams view shows beside the settings (scalar tags above).
HPARAM_METRICS: tuple[str, ...] = ("accuracy", "loss")

HParam = bool | int | float | str


def run_hparams(recorded: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, HParam]:
    """A run's settings for TensorBoard's HParams view, by run-config key.

    :data:`ALWAYS`, then every setting that changes what a run computes
    (:attr:`fedcgd_task.setting.Setting.computes`) and differs from its default; where or how a
    run runs or reports (folders, timeouts, ``device``) is left out. ``recorded`` and
    ``defaults``: :meth:`server_app.config.RunConfig.to_dict` of the run and of the default run
    config. A value that is no bool, int, float or string (a list, None) is shown as its text.
    """
    run, default = flat_settings(recorded), flat_settings(defaults)
    out: dict[str, HParam] = {}
    for setting in SETTINGS:
        name = RECORDED[setting.key]
        if name not in run:
            continue
        value = run[name]
        wanted = setting.key in ALWAYS or (setting.computes and value != default.get(name))
        if wanted:
            out[setting.key] = value if isinstance(value, HParam) else str(value)
    return out


class RoundEvents:
    """The TensorBoard event file of one run in its ``folder``: one file, each round once.

    ``kept``: when resuming, the metrics lines kept from the stopped part (rounds up to the
    checkpoint); they are written again into this file and the stopped part's event files are
    then removed, so TensorBoard shows each round once whatever order it reads files in (their
    names sort by the second they were made in, then by a counter as text). ``settings``
    (:func:`run_hparams`) are written once, for TensorBoard's HParams view beside
    :data:`HPARAM_METRICS`.
    """

    def __init__(
        self,
        folder: Path,
        kept: Sequence[Mapping[str, Any]] = (),
        settings: Mapping[str, HParam] | None = None,
    ) -> None:
        stale = list(folder.glob("events.out.tfevents.*"))  # a stopped part's (or none)
        self._writer = SummaryWriter(log_dir=str(folder))
        if settings:
            metrics = dict.fromkeys(HPARAM_METRICS, 0.0)  # names only: the values are the rounds'
            file_writer = self._writer._get_file_writer()  # the run's own event file
            for summary in hparams(dict(settings), metrics):
                file_writer.add_summary(summary, 0)
        for line in kept:
            self._scalars(line)
        self._writer.flush()
        for path in stale:  # after the kept rounds are in this file: a crash loses nothing
            path.unlink(missing_ok=True)

    def _scalars(self, line: Mapping[str, Any]) -> None:
        step = int(line["round"])
        for tag, field in SCALARS.items():
            value = line.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                if math.isfinite(value):
                    self._writer.add_scalar(tag, value, step)

    def add(self, line: Mapping[str, Any]) -> None:
        """Write the finite numbers of a round's metrics line as scalars at its round."""
        self._scalars(line)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()
