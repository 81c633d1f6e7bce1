"""The experiment tables: one CSV writer for every command."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from server_app.run_folder.files import atomic_write


def write_csv(
    path: Path, rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None
) -> None:
    """Write ``rows`` as CSV atomically (``columns``: default the first row's keys)."""
    fieldnames = list(columns) if columns is not None else list(rows[0]) if rows else []
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = io.StringIO(newline="")
    if fieldnames:
        writer = csv.DictWriter(handle, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    atomic_write(path, handle.getvalue())
