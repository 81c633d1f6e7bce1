"""What a result folder says about its run: running, completed, failed or stopped, and its settings.

Pure Python; the ServerApp writes ``status.json``, the commands read it (docs/design.md,
"Result folders").
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
    """The state of the run in one result folder (``status.json``).

    ``state`` is one of :data:`STATES`; ``last_round`` the last round whose metrics line is
    written (0: none); ``reason`` why it failed or stopped, one line; ``updated_unix_s`` the time
    of this write; ``devices_lost`` the device-rounds lost to timeouts, disconnections or error
    replies (:func:`lost_counts`), in ``rounds_with_lost_devices`` rounds.
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


class LostCounts(TypedDict):
    """:class:`RunStatus`'s (and ``summary.json``'s) counts of lost devices."""

    devices_lost: int
    rounds_with_lost_devices: int


def lost_counts(lines: Iterable[Mapping[str, Any]]) -> LostCounts:
    """``devices_lost`` and ``rounds_with_lost_devices`` over a run's metrics lines."""
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
    """True for a ``KeyboardInterrupt`` or an error marked :class:`fedcgd_task.errors.StopsRun`."""
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
    """``Type: first line of the message`` (at most 300 characters); a ``OneLineMessage`` alone."""
    if isinstance(err, OneLineMessage):
        return first_line(err)[:300]
    return f"{type(err).__name__}: {first_line(err)}"[:300]


#: :data:`server_app.checkpoint.CHECKPOINT_FILE` (that module imports torch).
CHECKPOINT_NAME = "checkpoint.pt"

#: The ServerApp prints ``run failed: <line>``; the commands read it back (a full disk may
#: refuse ``status.json`` too).
FAILURE_MARKER = "run failed: "


def resume_advice(result_dir: Path, *, when: str = "") -> str:
    """What a run that stopped unfinished can do next: resume from its checkpoint, or run again.

    ``when`` is said first (``free space on the disk``).
    """
    first = f"{when}, then " if when else ""
    if (Path(result_dir) / CHECKPOINT_NAME).is_file():
        return f"{first}continue it from its checkpoint with resume-from='{result_dir}'"
    return (
        f"{first}run it again in a new folder: '{result_dir}' holds no checkpoint to resume "
        "from (checkpoint-every = 0, or stopped before the first one)"
    )


def failure_line(err: BaseException, result_dir: Path) -> str:
    """:func:`one_line` of ``err``, followed by :func:`resume_advice` after a failed write."""
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


def write_status(result_dir: Path, status: RunStatus, *, durable: bool = True) -> None:
    """Write ``status.json`` atomically (``updated_unix_s`` set to now).

    ``durable``: fsynced (:func:`run_files.atomic_files.atomic_write`); each round's status is
    not (:func:`run_files.results.sync_run_files` at checkpoints and at the end).
    """
    data = {**asdict(status), "updated_unix_s": time.time()}
    text = json.dumps(data, indent=2) + "\n"
    atomic_write_text(Path(result_dir) / STATUS_FILE, text, durable=durable)


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


#: Settings a ``config.json`` may lack, with the value it then compares as.
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
        Compare only the keys present in ``requested``.
    """
    before = {**SETTINGS_ADDED_LATER, **flat_settings(recorded)}
    now = flat_settings(requested)
    skip = set(ignore)
    names = set(now) if requested_keys_only else set(before) | set(now)
    return sorted(k for k in names if k not in skip and before.get(k) != now.get(k))
