"""The runs under a folder, a line each (``fedcgd runs``): what each is and how far it got.

Pure Python. A run is a folder that holds ``config.json`` or ``status.json``; single runs,
comparisons (``<policy>/seed-<s>``) and presets are found alike, at any depth.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from run_files.json_files import read_json_object
from run_files.results import CONFIG_FILE, read_metrics_lines
from run_files.run_status import STATUS_FILE, read_status

#: The widest a cell is shown (a longer one keeps its end: a class path's name).
MAX_CELL_CHARS = 40
#: The columns of :func:`runs_table`.
HEADER = ("folder", "policy", "aggregator", "seed", "rounds", "status", "final", "best", "lost")


@dataclass(frozen=True)
class RunLine:
    """One run as :func:`runs_table` lists it (``"?"`` where its files do not say).

    Attributes
    ----------
    folder : Path
        The run's folder.
    started_unix_s : float
        When its ``config.json`` was written (its start), for the order.
    cells : tuple of str
        The values of :data:`HEADER` after the folder.
    """

    folder: Path
    started_unix_s: float
    cells: tuple[str, ...]


def find_runs(root: Path) -> list[Path]:
    """Every run folder at or below ``root`` (links are not followed; a run's inside is not)."""
    found: list[Path] = []
    for here, folders, files in os.walk(root):
        if CONFIG_FILE in files or STATUS_FILE in files:
            found.append(Path(here))
            folders.clear()
        else:
            folders.sort()
    return found


def _cell(value: object, most: int = MAX_CELL_CHARS) -> str:
    """``value`` as one printable cell of at most ``most`` characters."""
    text = "".join(char if char.isprintable() else "?" for char in str(value))
    return text if len(text) <= most else "…" + text[-(most - 1) :]


def _percent(value: Any) -> str:
    if isinstance(value, int | float) and math.isfinite(value):
        return f"{100 * value:.2f}%"
    return "-"


def read_run(folder: Path) -> RunLine:
    """What ``folder``'s files say of its run; an unreadable file leaves ``?`` in its cells."""
    config: dict[str, Any] = {}
    started = 0.0
    try:
        config = read_json_object(folder / CONFIG_FILE)
        started = (folder / CONFIG_FILE).stat().st_mtime
    except (OSError, ValueError):
        pass
    task = config.get("task")
    if not isinstance(task, dict):
        task = {}
    try:
        status = read_status(folder)
    except ValueError:
        status = None
    try:
        accuracies = [
            line["accuracy"]
            for line in read_metrics_lines(folder)
            if isinstance(line.get("accuracy"), int | float)
        ]
    except (OSError, ValueError):
        accuracies = []
    aggregator = config.get("aggregator", "?")
    planned = config.get("num_server_rounds", status.num_server_rounds if status else "?")
    cells = (
        _cell(config.get("policy", "?")),
        "FedAvg" if aggregator == "" else _cell(aggregator),
        _cell(task.get("seed", "?")),
        _cell(f"{status.last_round if status else '?'}/{planned}"),
        status.state if status else "?",
        _percent(accuracies[-1]) if accuracies else "-",
        _percent(max(accuracies)) if accuracies else "-",
        str(status.devices_lost) if status else "?",
    )
    return RunLine(folder, started, cells)


def runs_table(root: Path) -> str:
    """The runs under ``root`` as a text table, oldest first (folders relative to ``root``).

    Raises
    ------
    ValueError
        ``root`` is not a folder, or holds no run.
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root} is not a folder")
    runs = sorted((read_run(folder) for folder in find_runs(root)), key=lambda r: r.started_unix_s)
    if not runs:
        raise ValueError(f"{root} holds no run (no config.json or status.json below it)")
    rows = [
        (_cell(run.folder.relative_to(root), 4096) if run.folder != root else ".", *run.cells)
        for run in runs
    ]
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [HEADER, *rows]
    )
