"""The end of each round: evaluate when due, write the round's line, status and checkpoint, print.

:class:`RoundRecorder` is Flower's ``evaluate_fn``. The round's line and status are written
without an fsync; when a checkpoint is due they are synced first
(:func:`run_files.results.sync_run_files`) and the checkpoint follows, so a checkpoint's round
always has its line. Round 0 (the starting model) is only evaluated and printed, and skipped on
resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flwr.app import ArrayRecord, MetricRecord

from fedcgd_strategy.record import RoundRecord
from fedcgd_task.array_codec import torch_state
from fedcgd_task.settings import default_run_config
from run_files.files import stop_signals_held
from run_files.results import ResultWriter, sync_run_files
from run_files.run_status import RUNNING, RunStatus, lost_counts, write_status
from server_app.checkpoint import save_checkpoint
from server_app.config import parse_run_config
from server_app.setup import RunSetup
from server_app.tensorboard_events import RoundEvents, run_hparams


def evaluation_due(server_round: int, num_rounds: int, eval_every: int) -> bool:
    """True when round ``server_round`` is evaluated: round 0, every ``eval_every``-th, the last."""
    return server_round == 0 or server_round % eval_every == 0 or server_round == num_rounds


def checkpoint_due(server_round: int, num_rounds: int, checkpoint_every: int) -> bool:
    """True after every ``checkpoint_every``-th round and the last; never when it is 0."""
    every = checkpoint_every
    return every > 0 and (server_round % every == 0 or server_round == num_rounds)


class RoundRecorder:
    """Record every round of a run in its result folder; Flower's ``evaluate_fn``.

    ``setup``: the run (its config, central evaluation, checkpoint state, rounds done before);
    ``writer``: its result folder; ``say``: prints one line of the run's own output.
    """

    def __init__(self, setup: RunSetup, writer: ResultWriter, say: Callable[[str], None]) -> None:
        self.setup = setup
        self.writer = writer
        self.say = say
        self._record: RoundRecord | None = None
        defaults = parse_run_config(default_run_config()).to_dict()
        settings = run_hparams(setup.config.to_dict(), defaults)
        self.events = RoundEvents(writer.dir, writer.lines if setup.round_offset else (), settings)

    def add_record(self, record: RoundRecord) -> None:
        """Keep the record of the round just aggregated (the strategy's ``on_record``)."""
        self._record = record

    def __call__(self, flower_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """End of Flower's round ``flower_round``: record it; accuracy and loss when evaluated.

        Raises RuntimeError when the strategy handed over no record of this round (nothing written).
        """
        offset = self.setup.round_offset
        if flower_round == 0 and offset:
            self.writer.start_rounds()
            return None  # resuming: the starting model was evaluated in the interrupted run
        server_round = flower_round + offset
        config = self.setup.config
        metrics: dict[str, int | float | list[int] | list[float]] = {}
        t0 = time.perf_counter()
        if evaluation_due(server_round, config.num_server_rounds, config.eval_every):
            loss, accuracy = self.setup.evaluate(torch_state(arrays))
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
        with stop_signals_held():  # a stop comes after the round's files and its line: they agree
            line = self._write_round(server_round, metrics, eval_s, record, arrays)
            self.say(
                self.writer.progress(
                    server_round,
                    line["accuracy"],
                    record.num_scheduled,
                    record.num_available,
                    discovery_s=record.discovery_s,
                )
            )
        return MetricRecord(metrics) if metrics else None

    def _write_round(
        self,
        server_round: int,
        metrics: dict[str, Any],
        eval_s: float,
        record: RoundRecord,
        arrays: ArrayRecord,
    ) -> dict[str, Any]:
        """Write the round's metrics line, the status and (when due) the checkpoint.

        Line and status without an fsync; when a checkpoint is due both are synced before it.
        """
        writer, num_rounds = self.writer, self.setup.config.num_server_rounds
        line: dict[str, Any] = {"round": server_round, "accuracy": metrics.get("accuracy")}
        line |= {"loss": metrics.get("loss"), "eval_s": eval_s, "wall_time_s": writer.elapsed_s()}
        line.update(record.to_dict())
        writer.append_round(line)
        self.events.add(line)
        lost = lost_counts(writer.lines)
        status = RunStatus(RUNNING, server_round, num_rounds, **lost)
        write_status(writer.dir, status, durable=False)
        if checkpoint_due(server_round, num_rounds, self.setup.config.checkpoint_every):
            sync_run_files(writer.dir)
            state = self.setup.checkpoint(server_round, torch_state(arrays), writer.elapsed_s())
            save_checkpoint(writer.dir, state)
        return line
