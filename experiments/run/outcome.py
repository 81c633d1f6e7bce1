"""How a run ended: its exit code (0 completed, 1 failed, 2 refused) and last line.

``flwr run`` exits 0 even when the ServerApp raises, so what the run raised, printed or wrote in
its ``status.json`` decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from run_files.run_status import (
    COMPLETED,
    FAILED,
    STOPPED,
    failure_from_output,
    failure_line,
    lost_note,
    read_status,
    resume_advice,
)


@dataclass(frozen=True)
class Outcome:
    """How a run ended: the exit code (0, 1, 2) and the last line to print."""

    code: int
    message: str


def run_outcome(
    result_dir: Path,
    launched_unix_s: float,
    failure: BaseException | None = None,
    output: str = "",
) -> Outcome:
    """The outcome of the run launched at ``launched_unix_s`` that writes to ``result_dir``.

    What the run said itself wins (a full disk may have kept the status from being written):
    ``failure`` it raised, or the ``run failed: ...`` line in ``output``; then a
    ``status.json`` written since the launch.
    """
    if failure is not None:
        return Outcome(1, f"failed: {failure_line(failure, result_dir)}")
    printed = failure_from_output(output)
    if printed is not None:
        return Outcome(1, f"failed: {printed}")
    try:
        status = read_status(result_dir)
    except ValueError as err:
        return Outcome(1, f"failed: {err}")
    if status is None or status.updated_unix_s < launched_unix_s:
        return Outcome(
            1,
            f"failed: the run wrote no status in {result_dir} since it was launched (the "
            "ServerApp stopped before its start or crashed; see the log above)",
        )
    after = f"round {status.last_round} of {status.num_server_rounds}"
    if status.state == COMPLETED:
        lost = lost_note(status.devices_lost, status.rounds_with_lost_devices)
        return Outcome(0, f"completed: {status.last_round} rounds, results in {result_dir}{lost}")
    if status.state == FAILED:
        return Outcome(1, f"failed: {status.reason}")
    if status.state == STOPPED:
        return Outcome(1, f"failed: {status.reason} after {after}; {resume_advice(result_dir)}")
    return Outcome(
        1,
        f"failed: the run stopped after {after} without finishing (killed?); "
        f"{resume_advice(result_dir)}",
    )
