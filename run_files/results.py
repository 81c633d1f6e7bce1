"""A run's result files: ``config.json``, ``metrics.jsonl``, ``summary.json``, progress lines.

Writes go through :mod:`run_files.atomic_files`; reads are bounded (docs/design.md, "Result
folders").
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from run_files.atomic_files import append_line, atomic_write_text, stop_signals_held, sync_files
from run_files.code_identity import CODE_KEY, code_entries, code_identity
from run_files.json_files import MAX_METRICS_LINE_BYTES, json_depth_exceeds, read_json_object
from run_files.run_status import RUN_FILES, STATUS_FILE, holds_run

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

    ``kept_lines``: continue a run, ``metrics.jsonl`` rewritten with the lines up to its last
    checkpoint (None: a new run, an empty file); ``elapsed_s``: the seconds it had taken before.
    """

    def __init__(
        self,
        result_dir: str | Path,
        num_rounds: int,
        *,
        kept_lines: list[dict[str, Any]] | None = None,
        elapsed_s: float = 0.0,
    ) -> None:
        self.dir = Path(result_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.num_rounds = num_rounds
        self.t_start = time.perf_counter() - elapsed_s
        # the ETA's clock (:meth:`start_rounds`; until it is called, the writer's creation)
        self._last_end_s = elapsed_s
        self._round_s: list[float] = []
        self.lines: list[dict[str, Any]] = list(kept_lines or [])
        self._resumed = kept_lines is not None
        text = "".join(json.dumps(x) + "\n" for x in self.lines)
        atomic_write_text(self.dir / METRICS_FILE, text)

    def write_config(self, config: dict[str, Any]) -> None:
        """Write the resolved run config as JSON (atomically), with the code that computes it.

        ``code`` (:func:`run_files.code_identity.code_entries`): a resumed run keeps the entries
        its ``config.json`` had and adds this code's when it differs.
        """
        recorded: dict[str, Any] | None = None
        if self._resumed:
            try:
                recorded = read_json_object(self.dir / CONFIG_FILE)
            except (OSError, ValueError):
                recorded = {}
        from_round = len(self.lines) + 1
        config = {**config, CODE_KEY: code_entries(recorded, from_round, code_identity())}
        text = json.dumps(json_ready(config), indent=2, sort_keys=True)
        atomic_write_text(self.dir / CONFIG_FILE, text)

    def append_round(self, line: dict[str, Any]) -> None:
        """Append one round's metrics as a JSON line, not fsynced (:func:`sync_run_files`).

        A killed process keeps the line; a stop signal waits until it is both in the file and in
        :attr:`lines`.
        """
        clean = json_ready(line)
        with stop_signals_held():
            append_line(self.dir / METRICS_FILE, json.dumps(clean))
            self.lines.append(clean)

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write the end-of-run summary (atomically)."""
        atomic_write_text(self.dir / SUMMARY_FILE, json.dumps(json_ready(summary), indent=2))

    def elapsed_s(self) -> float:
        """Seconds since the writer was created (plus those of the run before a resume)."""
        return time.perf_counter() - self.t_start

    def start_rounds(self) -> None:
        """The rounds begin now: the start-up (first evaluation included) stays out of the ETA."""
        self._last_end_s = self.elapsed_s()
        self._round_s = []

    def progress(
        self,
        server_round: int,
        accuracy: float | None,
        scheduled: int,
        available: int,
        *,
        discovery_s: float = 0.0,
    ) -> str:
        """One progress line: round i/N, accuracy, scheduled, elapsed, ETA (:func:`eta_s`).

        A round's own time runs from the previous round's end, without its node discovery
        (``discovery_s``).
        """
        elapsed = self.elapsed_s()
        self._round_s.append(max(elapsed - self._last_end_s - discovery_s, 0.0))
        self._last_end_s = elapsed
        eta = eta_s(self._round_s, self.num_rounds - server_round)
        acc = "  -   " if accuracy is None else f"{accuracy:6.2%}"
        return (
            f"round {server_round:>4}/{self.num_rounds} | acc {acc} | scheduled "
            f"{scheduled:>3}/{available:<3} available | elapsed {elapsed:7.1f} s | ETA {eta:7.1f} s"
        )


def sync_run_files(result_dir: str | Path) -> None:
    """Make a run's per-round files durable: fsync ``metrics.jsonl``, ``status.json``, the folder.

    Each round appends its metrics line and replaces ``status.json`` without an fsync (a killed
    process keeps both; a crash of the system may lose what came after the last sync). The
    ServerApp calls this before each checkpoint (so a checkpoint's round always has its line,
    also after a power loss) and at the end of the run.

    Raises
    ------
    ResultWriteError
        Naming the file or folder that could not be synced.
    """
    sync_files(result_dir, (METRICS_FILE, STATUS_FILE))


def eta_s(round_s: Sequence[float], rounds_left: int) -> float:
    """Seconds left: the mean own time of the finished rounds times the rounds left.

    The first round is left out once others have finished (it holds one-time costs); see
    docs/design.md, "Stopped runs" (ETA).

    Raises
    ------
    ValueError
        When no round has finished yet.
    """
    if not round_s:
        raise ValueError("eta_s: no finished round; the ETA needs one")
    timed = round_s[1:] if len(round_s) > 1 else round_s
    return sum(timed) / len(timed) * max(rounds_left, 0)


def check_new_result_dir(result_dir: str | Path) -> None:
    """Refuse a folder a new run cannot use: a file, another run's results, or not creatable.

    Nothing is left behind (whether a file can be created is tried and undone).

    Raises
    ------
    ValueError
        One line naming ``result-dir``, the folder and what to do.
    """
    folder = Path(result_dir)
    key = f"run-config key 'result-dir' = '{folder}'"
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{key} is a file; give a new or empty folder")
    if holds_run(folder):
        present = ", ".join(name for name in RUN_FILES if (folder / name).exists())
        raise ValueError(
            f"{key} already holds a run's results ({present}); choose a new folder, or "
            f"continue that run with resume-from='{folder}'"
        )
    ancestor = folder
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"{key} cannot be created: '{ancestor}' is a file")
    if not os.access(ancestor, os.W_OK | os.X_OK) or not can_create_in(ancestor):
        raise ValueError(f"{key} cannot be created: no write permission in '{ancestor}'")


def can_create_in(folder: Path) -> bool:
    """True when a file can really be created in ``folder`` (tried, and removed at once)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".fedcgd-write-test-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


def _valid_line(text: str) -> dict[str, Any] | None:
    """One metrics line as a dict with an int ``round``; None when it is not one."""
    if len(text) > MAX_METRICS_LINE_BYTES or json_depth_exceeds(text):
        return None
    try:
        line = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(line, dict) or not isinstance(line.get("round"), int):
        return None
    return line


def _metrics_rows(path: Path) -> tuple[list[str], bool]:
    """The lines of ``metrics.jsonl`` (too long ones cut) and whether it ends with a newline."""
    rows: list[str] = []
    ends_with_newline = True
    with path.open("rb") as handle:
        while True:
            raw = handle.readline(MAX_METRICS_LINE_BYTES + 1)
            if not raw:
                break
            ends_with_newline = raw.endswith(b"\n")
            if not ends_with_newline and len(raw) > MAX_METRICS_LINE_BYTES:
                while raw and not raw.endswith(b"\n"):  # skip the rest of the long line
                    raw = handle.readline(MAX_METRICS_LINE_BYTES)
                ends_with_newline = True
                rows.append("x" * (MAX_METRICS_LINE_BYTES + 1))
                continue
            rows.append(raw.rstrip(b"\n").decode("utf-8", errors="replace"))
    return rows, ends_with_newline


def read_metrics_lines(result_dir: str | Path) -> list[dict[str, Any]]:
    """Every line of a run's ``metrics.jsonl``, for plots and tables; a torn last line is left out.

    Raises
    ------
    OSError
        When the file cannot be read.
    ValueError
        One line naming the file and the line.
    """
    path = Path(result_dir) / METRICS_FILE
    rows, ends_with_newline = _metrics_rows(path)
    lines: list[dict[str, Any]] = []
    for number, text in enumerate(rows, start=1):
        if not text.strip():
            continue
        line = _valid_line(text)
        if line is None:
            if number == len(rows) and not ends_with_newline:
                break  # torn while written
            raise ValueError(
                f"{path} line {number} is not a metrics line (a JSON object with an integer "
                "round); the file was edited or damaged"
            )
        lines.append(line)
    return lines


def read_metrics(result_dir: str | Path, through_round: int) -> list[dict[str, Any]]:
    """The metrics lines of rounds 1 .. ``through_round`` (a checkpoint's round), for resuming.

    A torn last line after that round is dropped; any other bad line, or missing or repeated
    rounds up to it, raise ValueError (one line naming the file).
    """
    path = Path(result_dir) / METRICS_FILE
    where = f"run-config key 'resume-from': {path}"
    if not path.is_file():
        raise ValueError(f"{where} is missing; the folder cannot be resumed")
    try:
        rows, _ = _metrics_rows(path)
    except OSError as err:
        raise ValueError(f"{where} cannot be read ({err}); the folder cannot be resumed") from err
    lines: list[dict[str, Any]] = []
    for number, text in enumerate(rows, start=1):
        if not text.strip():
            continue
        line = _valid_line(text)
        if line is not None:
            lines.append(line)
            continue
        is_last = not any(rest.strip() for rest in rows[number:])
        reached = any(x["round"] >= through_round for x in lines)
        if is_last and reached:
            break  # torn while written, after the checkpoint's round: that round runs again
        raise ValueError(
            f"{where} line {number} is not a metrics line (corrupt at or before the "
            f"checkpoint's round {through_round}); the folder cannot be resumed"
        )
    kept = [x for x in lines if x["round"] <= through_round]
    rounds = [x["round"] for x in kept]
    if rounds != list(range(1, through_round + 1)):
        held = f"rounds {rounds[0]}..{rounds[-1]} ({len(rounds)} lines)" if rounds else "no rounds"
        raise ValueError(
            f"{where} holds {held} but the checkpoint is after round {through_round}: lines are "
            "missing or repeated; the folder cannot be resumed"
        )
    return kept
