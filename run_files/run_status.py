"""What a result folder says about its run: running, completed or failed, and with which settings.

Pure Python (no flwr, no torch): the launcher, ``experiments.compare.policies`` and
``experiments.compare.reproduce`` read it to decide exit codes and whether a kept run may be
reused; the ServerApp writes it.

``status.json`` is written atomically (temporary file, fsync, rename) when a run starts
(``"running"``), and when it ends (``"completed"``; ``"failed"`` with the reason; ``"stopped"``
when a SIGINT / SIGTERM stopped it in this process, with the signal). A folder whose status is
``"running"`` after its process is gone was killed: it may be resumed from its checkpoint, as
a stopped or failed one. ``config.json`` holds the settings the run was started with;
:func:`settings_differences` compares them with the settings asked for now.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

from fedcgd_task.errors import OneLineMessage, StopsRun
from fedcgd_task.imports import first_line
from run_files.atomic_files import atomic_write_text
from run_files.json_files import read_json_object

STATUS_FILE = "status.json"

#: The states a run can be in.
RUNNING, COMPLETED, FAILED, STOPPED = "running", "completed", "failed", "stopped"
STATES = (RUNNING, COMPLETED, FAILED, STOPPED)

#: Files whose presence means a folder already holds a run's results.
RUN_FILES = (
    "config.json",
    "metrics.jsonl",
    "summary.json",
    "model.pt",
    "checkpoint.pt",
    STATUS_FILE,
)


@dataclass(frozen=True)
class RunStatus:
    """The state of the run in one result folder.

    Attributes
    ----------
    state : str
        ``"running"``, ``"completed"``, ``"failed"`` or ``"stopped"``.
    last_round : int
        The last round whose metrics line is written (0: none yet).
    num_server_rounds : int
        Rounds the run was asked for.
    reason : str or None
        Why the run failed or what stopped it (``"failed"``, ``"stopped"``), one line.
    updated_unix_s : float
        Wall-clock time of this write (seconds since the epoch).
    devices_lost : int
        Devices lost to a timeout, a disconnection or an error reply, summed over the rounds
        written (a device lost in two rounds counts twice; :func:`lost_counts`).
    rounds_with_lost_devices : int
        Rounds written in which a device was lost.

    """

    state: str
    last_round: int
    num_server_rounds: int
    reason: str | None = None
    updated_unix_s: float = 0.0
    devices_lost: int = 0
    rounds_with_lost_devices: int = 0

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"run status {self.state!r}; allowed: {', '.join(STATES)}")

    @property
    def succeeded(self) -> bool:
        """True when the run completed."""
        return self.state == COMPLETED


class LostCounts(TypedDict):
    """:class:`RunStatus`'s (and ``summary.json``'s) counts of lost devices."""

    devices_lost: int
    rounds_with_lost_devices: int


def lost_counts(lines: Iterable[Mapping[str, Any]]) -> LostCounts:
    """``devices_lost`` and ``rounds_with_lost_devices`` over a run's metrics lines.

    Each line's ``devices_lost`` (lines written before the count existed count 0).
    """
    per_round = [int(line.get("devices_lost") or 0) for line in lines]
    return LostCounts(
        devices_lost=sum(per_round),
        rounds_with_lost_devices=sum(count > 0 for count in per_round),
    )


def lost_note(devices_lost: int, rounds_with_lost_devices: int) -> str:
    """What the final line adds when devices were lost (``""`` when none was)."""
    if not devices_lost:
        return ""
    return (
        f"; {devices_lost} device-round(s) lost to timeouts, disconnections or errors in "
        f"{rounds_with_lost_devices} round(s) (metrics.jsonl 'lost')"
    )


def stops_the_run(err: BaseException) -> bool:
    """True for what a SIGINT / SIGTERM raises, a ``KeyboardInterrupt`` or a stop of ours.

    Ours: an error of a class marked :class:`fedcgd_task.errors.StopsRun`
    (:class:`experiments.run.processes.Interrupted`).
    """
    return isinstance(err, KeyboardInterrupt | StopsRun)


def ended_by(
    err: BaseException, lines: list[dict[str, Any]], last_round: int, num_server_rounds: int
) -> RunStatus:
    """The status of a run that ``err`` ended after ``last_round``: stopped or failed.

    ``lines``: its metrics lines (for the lost devices).
    """
    lost = lost_counts(lines)
    if stops_the_run(err):
        reason = one_line(err) if str(err) else "stopped by SIGINT (KeyboardInterrupt)"
        return RunStatus(STOPPED, last_round, num_server_rounds, reason=reason, **lost)
    return RunStatus(FAILED, last_round, num_server_rounds, reason=one_line(err), **lost)


def one_line(err: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters), for ``status.json``.

    An error whose message is one complete line (a :class:`~fedcgd_task.errors.OneLineMessage`:
    a failed write, a policy's decision that breaks the budget, a folder in use) is its message
    alone.
    """
    if isinstance(err, OneLineMessage):
        return first_line(err)[:300]
    return f"{type(err).__name__}: {first_line(err)}"[:300]


#: The checkpoint file of a run (:data:`server_app.checkpoint.CHECKPOINT_FILE`, which imports
#: torch).
CHECKPOINT_NAME = "checkpoint.pt"

#: How the ServerApp under ``flwr run`` says in its output why the run failed, when the error
#: is one line (a failed write, a broken budget, a folder in use): ``run failed: <line>``. The
#: commands read it back (:func:`failure_from_output`): a full disk may refuse
#: ``status.json`` too.
FAILURE_MARKER = "run failed: "


def resume_advice(result_dir: Path, *, when: str = "") -> str:
    """What a run that stopped unfinished can do next, true to its folder.

    With a ``checkpoint.pt`` the run continues from it (``resume-from``); without one (the run
    was started with ``checkpoint-every = 0``, or stopped before its first checkpoint) it can
    only run again, in a new folder. ``when`` is said first (``free space on the disk``).
    """
    first = f"{when}, then " if when else ""
    if (Path(result_dir) / CHECKPOINT_NAME).is_file():
        return f"{first}continue it from its checkpoint with resume-from='{result_dir}'"
    return (
        f"{first}run it again in a new folder: '{result_dir}' holds no checkpoint to resume "
        "from (checkpoint-every = 0, or stopped before the first one)"
    )


def failure_line(err: BaseException, result_dir: Path) -> str:
    """Why a run failed, in one line, with what to do next after a failed write.

    :func:`one_line` of ``err``; a failed write (disk full, I/O error: an error with a
    ``disk_full`` attribute, :class:`run_files.atomic_files.ResultWriteError`) is followed by
    :func:`resume_advice`.
    """
    text = one_line(err)
    disk_full = getattr(err, "disk_full", None)
    if disk_full is not None:
        when = "free space on the disk" if disk_full else "fix the file system"
        written = getattr(err, "path", None)  # a file of the run's folder (its real name)
        folder = Path(written).parent if written else Path(result_dir)
        text += f"; {resume_advice(folder, when=when)}"
    return text


def failure_from_output(output: str) -> str | None:
    """The last ``run failed: ...`` line the ServerApp printed (without the marker), or None."""
    found = None
    for line in output.splitlines():
        start = line.find(FAILURE_MARKER)
        if start >= 0:
            found = line[start + len(FAILURE_MARKER) :].strip()
    return found


def write_status(result_dir: Path, status: RunStatus) -> None:
    """Write ``status.json`` atomically (``updated_unix_s`` set to now)."""
    data = {**asdict(status), "updated_unix_s": time.time()}
    atomic_write_text(Path(result_dir) / STATUS_FILE, json.dumps(data, indent=2) + "\n")


def mark_stopped(result_dir: Path, reason: str) -> None:
    """Record a run stopped from outside its process (its launcher was signalled): ``stopped``.

    A ``status.json`` that still says ``running`` becomes ``stopped`` with ``reason``, keeping
    its round; any other status (or none, or an unreadable one) is left as it is.
    """
    try:
        status = read_status(result_dir)
    except ValueError:
        return
    if status is not None and status.state == RUNNING:
        write_status(result_dir, replace(status, state=STOPPED, reason=reason))


def read_status(result_dir: Path) -> RunStatus | None:
    """The run status of ``result_dir``; None when the folder holds no ``status.json``.

    Raises
    ------
    ValueError
        When the file exists but is not a valid status (names the file).
    """
    path = Path(result_dir) / STATUS_FILE
    if not path.is_file():
        return None
    try:
        data = read_json_object(path)
        return RunStatus(
            state=str(data["state"]),
            last_round=int(data["last_round"]),
            num_server_rounds=int(data["num_server_rounds"]),
            reason=None if data.get("reason") is None else str(data["reason"]),
            updated_unix_s=float(data.get("updated_unix_s", 0.0)),
            devices_lost=int(data.get("devices_lost", 0)),
            rounds_with_lost_devices=int(data.get("rounds_with_lost_devices", 0)),
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is not a valid run status ({err})") from err


def holds_run(result_dir: Path) -> bool:
    """True when ``result_dir`` exists and holds any of a run's files (:data:`RUN_FILES`)."""
    folder = Path(result_dir)
    return folder.is_dir() and any((folder / name).exists() for name in RUN_FILES)


def flat_settings(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; values normalised through JSON (tuples become lists)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flat_settings(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: json.loads(json.dumps(value))}


#: Settings added after runs were recorded, with the value every run recorded before them used:
#: a ``config.json`` without the key compares as if it held that value (a run recorded before
#: ``aggregator`` existed aggregated with the scheduler's own FedAvg, today's ``""``).
SETTINGS_ADDED_LATER: dict[str, Any] = {"aggregator": ""}


def settings_differences(
    recorded: Mapping[str, Any],
    requested: Mapping[str, Any],
    *,
    ignore: Iterable[str] = (),
    requested_keys_only: bool = False,
) -> list[str]:
    """The (dotted) settings whose values differ between two resolved run configs, sorted.

    Parameters
    ----------
    recorded : mapping
        The settings a run was started with (its ``config.json``), possibly nested.
    requested : mapping
        The settings asked for now, in the same shape.
    ignore : iterable of str
        Dotted keys that may differ (e.g. ``num_server_rounds`` on resume).
    requested_keys_only : bool
        Compare only the keys present in ``requested`` (``recorded`` may hold values derived
        at run time, such as the parameter count).

    A key of :data:`SETTINGS_ADDED_LATER` missing from ``recorded`` takes the value runs had
    before it existed.
    """
    before = {**SETTINGS_ADDED_LATER, **flat_settings(recorded)}
    now = flat_settings(requested)
    skip = set(ignore)
    names = set(now) if requested_keys_only else set(before) | set(now)
    return sorted(k for k in names if k not in skip and before.get(k) != now.get(k))
