"""How a run ended: its exit code and last line, from what it raised or its ``status.json``.

``flwr run`` exits 0 even when the ServerApp raises, so its exit code is not the outcome: 0
completed, 1 failed (or no status written), 2 refused before the start.
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

#: Exit codes.
COMPLETED_CODE, FAILED_CODE, REFUSED_CODE = 0, 1, 2


@dataclass(frozen=True)
class Outcome:
    """How a run ended: the exit code (0, 1, 2) and the last line to print."""

    code: int
    message: str


def refused(err: BaseException) -> Outcome:
    """The outcome of a run refused before it started (exit code 2)."""
    return Outcome(REFUSED_CODE, f"error: {err}")


def failure_outcome(err: BaseException, result_dir: Path) -> Outcome:
    """The outcome of a run whose ServerApp raised ``err`` (exit code 1, one line with advice)."""
    return Outcome(FAILED_CODE, f"failed: {failure_line(err, result_dir)}")


def run_outcome(
    result_dir: Path,
    launched_unix_s: float,
    failure: BaseException | None = None,
    output: str = "",
) -> Outcome:
    """The outcome of the run launched at ``launched_unix_s`` that writes to ``result_dir``.

    Only a ``status.json`` written since the launch counts. What the run said itself wins over
    the status (a full disk may have kept it from being written): ``failure`` it raised, or the
    ``run failed: ...`` line in ``output``.
    """
    if failure is not None:
        return failure_outcome(failure, result_dir)
    printed = failure_from_output(output)
    if printed is not None:
        return Outcome(FAILED_CODE, f"failed: {printed}")
    try:
        status = read_status(result_dir)
    except ValueError as err:
        return Outcome(FAILED_CODE, f"failed: {err}")
    fresh = status is not None and status.updated_unix_s >= launched_unix_s
    if status is None or not fresh:
        return Outcome(
            FAILED_CODE,
            f"failed: the run wrote no status in {result_dir} since it was launched (the "
            "ServerApp stopped before its start or crashed; see the log above)",
        )
    if status.state == COMPLETED:
        lost = lost_note(status.devices_lost, status.rounds_with_lost_devices)
        return Outcome(
            COMPLETED_CODE,
            f"completed: {status.last_round} rounds, results in {result_dir}{lost}",
        )
    if status.state == FAILED:
        return Outcome(FAILED_CODE, f"failed: {status.reason}")
    if status.state == STOPPED:
        return Outcome(
            FAILED_CODE,
            f"failed: {status.reason} after round {status.last_round} of "
            f"{status.num_server_rounds}; {resume_advice(result_dir)}",
        )
    return Outcome(
        FAILED_CODE,
        f"failed: the run stopped after round {status.last_round} of "
        f"{status.num_server_rounds} without finishing (killed?); {resume_advice(result_dir)}",
    )
