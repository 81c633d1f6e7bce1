"""The run's result directory: resolved config, one JSON line per round, final model, progress."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
MODEL_FILE = "model.pt"
SUMMARY_FILE = "summary.json"


def json_ready(value: Any) -> Any:
    """Replace non-finite floats by None (in nested dicts, lists and tuples) for strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


class ResultWriter:
    """Writes ``config.json``, appends ``metrics.jsonl`` lines and formats progress lines.

    Parameters
    ----------
    result_dir : str or Path
        Absolute folder; created if missing.
    num_rounds : int
        Rounds of the run (for the ETA).
    resume_after : int, optional
        Continue a run whose last checkpoint is after this round: ``metrics.jsonl`` keeps its
        lines up to that round (later ones, written before a crash, are dropped, since those
        rounds run again) instead of starting empty.
    elapsed_s : float
        Seconds the run had taken before (a resumed run's clock goes on from there).

    """

    def __init__(
        self,
        result_dir: str | Path,
        num_rounds: int,
        *,
        resume_after: int | None = None,
        elapsed_s: float = 0.0,
    ) -> None:
        self.dir = Path(result_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.num_rounds = num_rounds
        self.t_start = time.perf_counter() - elapsed_s
        self.lines: list[dict[str, Any]] = []
        if resume_after is not None:
            previous = (self.dir / METRICS_FILE).read_text().splitlines()
            self.lines = [json.loads(x) for x in previous if x.strip()]
            self.lines = [x for x in self.lines if x["round"] <= resume_after]
        (self.dir / METRICS_FILE).write_text("".join(json.dumps(x) + "\n" for x in self.lines))

    def write_config(self, config: dict[str, Any]) -> None:
        """Write the resolved run config as JSON."""
        (self.dir / CONFIG_FILE).write_text(
            json.dumps(json_ready(config), indent=2, sort_keys=True)
        )

    def append_round(self, line: dict[str, Any]) -> None:
        """Append one round's metrics as a JSON line (flushed to disk: nothing lost on a crash)."""
        clean = json_ready(line)
        with (self.dir / METRICS_FILE).open("a") as fh:
            fh.write(json.dumps(clean) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.lines.append(clean)

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write the end-of-run summary."""
        (self.dir / SUMMARY_FILE).write_text(json.dumps(json_ready(summary), indent=2))

    def elapsed_s(self) -> float:
        """Seconds since the writer was created."""
        return time.perf_counter() - self.t_start

    def progress(
        self, server_round: int, accuracy: float | None, scheduled: int, available: int
    ) -> str:
        """One progress line: round i/N, accuracy, scheduled, elapsed, ETA."""
        elapsed = self.elapsed_s()
        eta = elapsed / server_round * (self.num_rounds - server_round) if server_round else 0.0
        acc = "  -   " if accuracy is None else f"{accuracy:6.2%}"
        return (
            f"round {server_round:>4}/{self.num_rounds} | acc {acc} | scheduled "
            f"{scheduled:>3}/{available:<3} available | elapsed {elapsed:7.1f} s | ETA {eta:7.1f} s"
        )
