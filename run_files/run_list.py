"""The runs under a folder, a line each (``fedcgd runs``): what each is and how far it got.

A run is a folder that holds ``config.json`` or ``status.json``, at any depth.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from run_files.files import read_json_object
from run_files.results import CONFIG_FILE, STATUS_FILE, read_metrics_lines
from run_files.run_status import read_status

#: The columns of :func:`runs_table`.
HEADER = ("folder", "policy", "aggregator", "seed", "rounds", "status", "final", "best", "lost")


def _cell(value: object, most: int = 40) -> str:
    """``value`` as one printable cell of at most ``most`` characters (keeping its end)."""
    text = "".join(char if char.isprintable() else "?" for char in str(value))
    return text if len(text) <= most else "…" + text[-(most - 1) :]


def _percent(value: Any) -> str:
    return f"{100 * value:.2f}%" if isinstance(value, int | float) and math.isfinite(value) else "-"


def _row(folder: Path, root: Path) -> tuple[float, list[str]]:
    """When ``folder``'s run started, and its cells (``?`` where its files do not say)."""
    config: dict[str, Any] = {}
    started = 0.0
    try:
        config = read_json_object(folder / CONFIG_FILE)
        started = (folder / CONFIG_FILE).stat().st_mtime
    except (OSError, ValueError):
        pass
    task = config["task"] if isinstance(config.get("task"), dict) else {}
    try:
        status = read_status(folder)
    except ValueError:
        status = None
    try:
        lines = read_metrics_lines(folder)
    except (OSError, ValueError):
        lines = []
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
    """The runs under ``root`` (links not followed) as a text table, oldest first.

    Raises ValueError when ``root`` is not a folder or holds no run.
    """
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
