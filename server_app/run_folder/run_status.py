"""What a run folder says about its run: status, exit code and its line, settings, runs table."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypedDict

from fedcgd_config.imports import first_line
from fedcgd_config.schema import flatten
from fedcgd_strategy.errors import OneLineMessage
from server_app.run_folder.files import Interrupted, atomic_write, read_json_object
from server_app.run_folder.results import CONFIG_FILE, STATUS_FILE, read_metrics_lines

RUNNING, COMPLETED, FAILED, STOPPED = "running", "completed", "failed", "stopped"
STATES = (RUNNING, COMPLETED, FAILED, STOPPED)
#: The ServerApp prints ``run failed: <line>``; the commands read it back.
FAILURE_MARKER = "run failed: "


@dataclass(frozen=True)
class RunStatus:
    """A run's ``status.json`` (``last_round``: the last round whose metrics line is written)."""

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


def one_line(err: BaseException) -> str:
    """``Type: first line`` (300 characters at most; a ``OneLineMessage`` without its type)."""
    head = "" if isinstance(err, OneLineMessage) else f"{type(err).__name__}: "
    return (head + first_line(err))[:300]


def ended_by(
    err: BaseException, lines: list[dict[str, Any]], last_round: int, num_server_rounds: int
) -> RunStatus:
    """The status of a run that ``err`` ended after ``last_round``."""
    stop = isinstance(err, KeyboardInterrupt | Interrupted)
    reason = "stopped by SIGINT (KeyboardInterrupt)" if stop and not str(err) else one_line(err)
    state = STOPPED if stop else FAILED
    return RunStatus(state, last_round, num_server_rounds, reason, **lost_counts(lines))


def failure_from_output(output: str) -> str | None:
    """The last ``run failed: ...`` line the ServerApp printed (without the marker), or None."""
    found = [line.partition(FAILURE_MARKER)[2] for line in output.splitlines()]
    return next((line.strip() for line in reversed(found) if line), None)


def write_status(result_dir: Path, status: RunStatus, *, durable: bool = True) -> None:
    """Write ``status.json`` (``updated_unix_s``: now); ``durable``: fsynced before its rename."""
    text = json.dumps({**asdict(status), "updated_unix_s": time.time()}, indent=2) + "\n"
    atomic_write(Path(result_dir) / STATUS_FILE, text, durable=durable)


def mark_stopped(result_dir: Path, reason: str) -> None:
    """Record a run stopped from outside its process: ``running`` becomes ``stopped``."""
    if (status := read_status(result_dir, quiet=True)) is not None and status.state == RUNNING:
        write_status(result_dir, replace(status, state=STOPPED, reason=reason))


def read_status(result_dir: Path, *, quiet: bool = False) -> RunStatus | None:
    """The run status of ``result_dir`` (None: no ``status.json``, or ``quiet`` and invalid);
    ValueError when invalid."""  # noqa: D205, D209
    path = Path(result_dir) / STATUS_FILE
    try:
        if not path.is_file():
            return None
        data = read_json_object(path)
        reason = data.get("reason")
        return RunStatus(
            str(data["state"]), int(data["last_round"]), int(data["num_server_rounds"]),
            None if reason is None else str(reason), float(data.get("updated_unix_s", 0.0)),
            int(data.get("devices_lost", 0)), int(data.get("rounds_with_lost_devices", 0)),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as err:
        if quiet:
            return None
        raise ValueError(f"{path} is not a valid run status ({err})") from err


@dataclass(frozen=True)
class Outcome:
    """How a run ended: the exit code (0 completed, 1 failed) and the last line to print."""

    code: int
    message: str


def run_outcome(
    result_dir: Path,
    launched_unix_s: float,
    failure: BaseException | None = None,
    output: str = "",
) -> Outcome:
    """How the run launched at ``launched_unix_s`` ended: the ``failure`` it raised or its
    ``run failed: ...`` line in ``output``, else its ``status.json`` if written since then.
    """  # noqa: D205
    if failure is not None:
        return Outcome(1, f"failed: {one_line(failure)}")
    if (printed := failure_from_output(output)) is not None:
        return Outcome(1, f"failed: {printed}")
    try:
        status = read_status(result_dir)
    except ValueError as err:
        return Outcome(1, f"failed: {err}")
    if status is None or status.updated_unix_s < launched_unix_s:
        why = (
            f"the run wrote no status in {result_dir} since it was launched (the ServerApp "
            "stopped before its start or crashed; see the log above)"
        )
    elif status.state == COMPLETED:
        lost = lost_note(status.devices_lost, status.rounds_with_lost_devices)
        return Outcome(0, f"completed: {status.last_round} rounds, results in {result_dir}{lost}")
    elif status.state == FAILED:
        why = str(status.reason)
    else:  # how it continues: the command's last line
        stopped = status.state == STOPPED
        why = (
            f"{status.reason if stopped else 'the run stopped'} after round {status.last_round} "
            f"of {status.num_server_rounds}{'' if stopped else ' without finishing (killed?)'}"
        )
    return Outcome(1, f"failed: {why}")


def flat_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The dotted settings, their values normalised through JSON (tuples: lists)."""
    return json.loads(json.dumps(flatten(settings)))


HEADER = ("folder", "policy", "aggregator", "seed", "rounds", "status", "final", "best", "lost")


def _cell(value: object, most: int = 40) -> str:
    """``value`` printable, at most ``most`` characters (keeping its end)."""
    text = "".join(char if char.isprintable() else "?" for char in str(value))
    return text if len(text) <= most else "…" + text[-(most - 1) :]


def _percent(value: Any) -> str:
    return f"{100 * value:.2f}%" if isinstance(value, int | float) and math.isfinite(value) else "-"


def _read(read: Callable[[], Any], default: Any) -> Any:
    """``read()``, or ``default`` when the file is missing or unreadable."""
    try:
        return read()
    except (OSError, ValueError):
        return default


def _row(folder: Path, root: Path) -> tuple[float, list[str]]:
    """When ``folder``'s run started, and its cells (``?`` where its files do not say)."""
    config: dict[str, Any] = _read(lambda: read_json_object(folder / CONFIG_FILE), {})
    started = _read(lambda: (folder / CONFIG_FILE).stat().st_mtime, 0.0) if config else 0.0
    task = config["task"] if isinstance(config.get("task"), dict) else {}
    status = read_status(folder, quiet=True)
    lines: list[dict[str, Any]] = _read(lambda: read_metrics_lines(folder), [])
    accuracies = [x["accuracy"] for x in lines if isinstance(x.get("accuracy"), int | float)]
    aggregator = config.get("aggregator", "?")
    planned = config.get("num_server_rounds", status.num_server_rounds if status else "?")
    return started, [
        _cell(folder.relative_to(root), 4096) if folder != root else ".",
        _cell(config.get("policy", "?")),
        "FedAvg" if aggregator == "" else _cell(aggregator),
        _cell(task.get("seed", "?")),
        _cell(f"{status.last_round if status else '?'}/{planned}"),
        status.state if status else "?",
        _percent(accuracies[-1]) if accuracies else "-",
        _percent(max(accuracies)) if accuracies else "-",
        str(status.devices_lost) if status else "?",
    ]


def runs_table(root: Path) -> str:
    """The runs under ``root`` as a text table, oldest first; ValueError when there is none."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root} is not a folder")
    rows = []
    for here, folders, files in os.walk(root):
        if CONFIG_FILE in files or STATUS_FILE in files:
            rows.append(_row(Path(here), root))
            folders.clear()  # a run's inside holds no other run
        folders.sort()
    if not rows:
        raise ValueError(f"{root} holds no run (no config.json or status.json below it)")
    table = [list(HEADER), *(cells for _, cells in sorted(rows, key=lambda row: row[0]))]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in table
    )
