"""The end of each round (``evaluate_fn``): evaluation, line, status, events, checkpoint, print."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from flwr.app import ArrayRecord, MetricRecord
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from fedcgd_config.schema import SETTINGS
from fedcgd_config.settings import RECORDED, default_run_config
from fedcgd_strategy.record import RoundRecord
from server_app.checkpoint import save_checkpoint
from server_app.config import parse_run_config
from server_app.run_folder.files import held
from server_app.run_folder.results import ResultWriter, sync_run_files
from server_app.run_folder.run_status import (
    RUNNING,
    RunStatus,
    flat_settings,
    lost_counts,
    write_status,
)
from server_app.setup import RunSetup

#: TensorBoard tag -> field of the round's metrics line (docs/running.md, "What a run writes").
SCALARS: dict[str, str] = {
    "accuracy": "accuracy", "loss": "loss", "devices/available": "num_available",
    "devices/scheduled": "num_scheduled", "devices/uploaded": "num_uploaded",
    "devices/lost": "devices_lost", "schedule/wemd": "wemd",
    "schedule/sampling_term": "sampling_term", "schedule/objective": "objective",
    "schedule/bandwidth_used_hz": "bandwidth_used_hz", "estimates/sigma": "sigma",
    "estimates/class_gradient": "class_gradient_used", "dp/clipping_norm": "dp_clipping_norm",
    "dp/noise_std": "dp_noise_std",
}  # fmt: skip

#: Settings every run's hparams name, whatever their value (run-config keys).
ALWAYS: tuple[str, ...] = ("policy", "aggregator", "seed")

HParam = bool | int | float | str


def run_hparams(recorded: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, HParam]:
    """A run's settings for TensorBoard's HParams view (docs/running.md), by run-config key."""
    run, default = flat_settings(recorded), flat_settings(defaults)
    wanted: dict[str, Any] = {}
    for setting in SETTINGS:
        name = RECORDED[setting.key]
        if setting.form == "table":  # flattened: policy_params.window
            params = {k.split(".", 1)[1]: v for k, v in run.items() if k.startswith(name + ".")}
            wanted.update({f"{setting.key}.{k}": v for k, v in params.items()})
        elif name in run and (
            setting.key in ALWAYS or (setting.computes and run[name] != default.get(name))
        ):
            wanted[setting.key] = run[name]
    return {k: v if isinstance(v, HParam) else str(v) for k, v in wanted.items()}


def evaluation_due(server_round: int, num_rounds: int, eval_every: int) -> bool:
    """True when round ``server_round`` is evaluated: round 0, every ``eval_every``-th, the last."""
    return server_round == 0 or server_round % eval_every == 0 or server_round == num_rounds


class RoundRecorder:
    """Record every round of a run in its result folder (Flower's ``evaluate_fn``)."""

    def __init__(self, setup: RunSetup, writer: ResultWriter, say: Callable[[str], None]) -> None:
        self.setup = setup
        self.writer = writer
        self.say = say
        self._record: RoundRecord | None = None
        defaults = parse_run_config(default_run_config()).to_dict()
        settings = run_hparams(setup.config.to_dict(), defaults)
        stale = list(writer.dir.glob("events.out.tfevents.*"))  # a stopped part's (or none)
        self.events = SummaryWriter(log_dir=str(writer.dir))
        metrics = {"accuracy": 0.0, "loss": 0.0}  # names only: the values are the rounds'
        for summary in hparams(dict(settings), metrics):
            self.events._get_file_writer().add_summary(summary, 0)  # the run's own event file
        self.events.flush()  # the hparams on disk from the start (a live TensorBoard shows them)
        for line in writer.lines if setup.round_offset else ():  # resuming: the kept rounds
            self._add_scalars(line)
        for path in stale:  # after the kept rounds are in this file: a crash loses nothing
            path.unlink(missing_ok=True)

    def _add_scalars(self, line: Mapping[str, Any]) -> None:
        """Write the finite numbers of a round's metrics line as TensorBoard scalars."""
        for tag, field in SCALARS.items():
            value = line.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                if math.isfinite(value):
                    self.events.add_scalar(tag, value, int(line["round"]))
        self.events.flush()

    def add_record(self, record: RoundRecord) -> None:
        """Keep the record of the round just aggregated (the strategy's ``on_record``)."""
        self._record = record

    def __call__(self, flower_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """End of Flower's round ``flower_round``: record it; accuracy and loss when evaluated."""
        offset = self.setup.round_offset
        if flower_round == 0 and offset:
            self.writer.start_rounds()
            return None  # resuming: the starting model was evaluated in the interrupted run
        server_round = flower_round + offset
        config = self.setup.config
        metrics: dict[str, int | float | list[int] | list[float]] = {}
        t0 = time.perf_counter()
        if evaluation_due(server_round, config.num_server_rounds, config.eval_every):
            loss, accuracy = self.setup.evaluate(arrays.to_torch_state_dict())
            metrics = {"accuracy": accuracy, "loss": loss}
        eval_s = time.perf_counter() - t0
        if server_round == 0:
            self.say(
                f"initial model: accuracy {metrics['accuracy']:.4f}, loss {metrics['loss']:.4f}"
            )
            self.writer.start_rounds()  # the start-up ends here: not in the ETA
            return MetricRecord(metrics)
        record, self._record = self._record, None  # the record of this round, taken
        if record is None or record.round != server_round:
            raise RuntimeError(f"round {server_round}: the strategy recorded no round")
        writer, num_rounds = self.writer, config.num_server_rounds
        with held():  # a stop comes after the round's files and its line: they agree
            line: dict[str, Any] = {"round": server_round, "accuracy": metrics.get("accuracy")}
            line |= {"loss": metrics.get("loss"), "eval_s": eval_s}
            line |= {"wall_time_s": writer.elapsed_s(), **record.to_dict()}
            writer.append_round(line)
            self._add_scalars(line)
            status = RunStatus(RUNNING, server_round, num_rounds, **lost_counts(writer.lines))
            write_status(writer.dir, status, durable=False)
            every = config.checkpoint_every  # 0: never; else every-th and the last round
            if every > 0 and (server_round % every == 0 or server_round == num_rounds):
                sync_run_files(writer.dir)  # the line and status first: a checkpoint has its line
                model = arrays.to_torch_state_dict()
                save_checkpoint(
                    writer.dir, self.setup.checkpoint(server_round, model, writer.elapsed_s())
                )
            self.say(
                writer.progress(server_round, line["accuracy"], record.num_scheduled,
                                record.num_available, discovery_s=record.discovery_s)
            )  # fmt: skip
        return MetricRecord(metrics) if metrics else None
