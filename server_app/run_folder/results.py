"""A run's result files, progress lines and which code computed it (docs/running.md)."""

from __future__ import annotations

import hashlib
import json
import math
import platform
import time
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from server_app.run_folder.files import (
    append_line,
    atomic_write,
    held,
    parse_json,
    read_json_object,
    sync_files,
)

CONFIG_FILE, METRICS_FILE, SUMMARY_FILE = "config.json", "metrics.jsonl", "summary.json"
STATUS_FILE, MODEL_FILE, CHECKPOINT_FILE = "status.json", "model.pt", "checkpoint.pt"
#: Files whose presence means a folder already holds a run's results.
RUN_FILES = (CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, MODEL_FILE, CHECKPOINT_FILE, STATUS_FILE)
#: Longest line of ``metrics.jsonl`` read (bytes).
MAX_METRICS_LINE_BYTES = 16 * 2**20
#: The packages whose sources decide what a run computes (not plots, launchers, benchmarks).
COMPUTING_PACKAGES = tuple(
    "channel client_app fedcgd_config fedcgd_strategy fedcgd_task server_app".split()
)
#: Libraries whose versions can change a run's arithmetic.
LIBRARIES = ("numpy", "scipy", "torch", "flwr")
#: The key of ``config.json`` that holds the list of code entries.
CODE_KEY = "code"
_ROOT = Path(__file__).resolve().parents[2]


def source_digest(root: Path, packages: Sequence[str], versions: Mapping[str, str]) -> str:
    """SHA-256 (16 hex digits) of each ``.py`` file's path and bytes, then the ``versions``."""
    digest = hashlib.sha256()
    paths = sorted(p for package in packages for p in (root / package).rglob("*.py"))
    for path in paths:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    for name in sorted(versions):
        digest.update(f"{name}={versions[name]}\n".encode())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=1)
def code_identity() -> dict[str, Any]:
    """The checkout's ``{"digest": ..., "versions": {...}}`` (computed once per process)."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    versions["python"] = platform.python_version()
    return {"digest": source_digest(_ROOT, COMPUTING_PACKAGES, versions), "versions": versions}


def code_entries(
    recorded: Mapping[str, Any] | None, from_round: int, current: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The ``code`` list of ``config.json`` (a resume adds ``current`` if its digest is new)."""
    entry = {**current, "from_round": from_round}
    kept = recorded.get(CODE_KEY) if recorded is not None else None
    if not isinstance(kept, list) or not all(
        isinstance(e, dict) and isinstance(e.get("digest"), str) for e in kept
    ):
        unknown = {"digest": "unknown", "versions": {}, "from_round": 1}  # recorded none
        return [entry] if recorded is None or from_round == 1 else [unknown, entry]
    return list(kept) if kept and kept[-1]["digest"] == current["digest"] else [*kept, entry]


def run_digests(config: Mapping[str, Any] | None) -> str:
    """The digests of a run's ``config.json`` in order, space-separated ("unknown": none)."""
    kept = config.get(CODE_KEY) if config is not None else None
    if not isinstance(kept, list) or not kept:
        return "unknown"
    return " ".join(str(e.get("digest", "unknown")) for e in kept if isinstance(e, dict))


def mixed_code_line(digests: Sequence[str]) -> str | None:
    """A warning when runs (their :func:`run_digests`) come from more than one code; else None."""
    distinct = sorted({d for run in digests for d in run.split()})
    if len(distinct) <= 1:
        return None
    return (
        f"warning: these {len(digests)} runs were computed by {len(distinct)} versions of the "
        f"code ({', '.join(distinct)}; runs.csv's code column says which): their differences "
        "may come from the code, not from the settings"
    )


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
    """Writes a run's files and progress lines (``kept_lines``: a resumed run's, else None)."""

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
        self._last_end_s = elapsed_s  # the ETA's clock (reset by start_rounds)
        self._round_s: list[float] = []
        self.lines: list[dict[str, Any]] = list(kept_lines or [])
        self._resumed = kept_lines is not None
        atomic_write(self.dir / METRICS_FILE, "".join(json.dumps(x) + "\n" for x in self.lines))

    def write_config(self, config: dict[str, Any]) -> None:
        """Write the resolved run config and the code that computes it (:func:`code_entries`)."""
        recorded = read_json_object(self.dir / CONFIG_FILE) if self._resumed else None
        entries = code_entries(recorded, len(self.lines) + 1, code_identity())
        text = json.dumps(json_ready({**config, CODE_KEY: entries}), indent=2, sort_keys=True)
        atomic_write(self.dir / CONFIG_FILE, text)

    def append_round(self, line: dict[str, Any]) -> None:
        """Append one round's metrics line (fsynced later: :func:`sync_run_files`)."""
        clean = json_ready(line)
        with held():
            append_line(self.dir / METRICS_FILE, json.dumps(clean))
            self.lines.append(clean)

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write ``summary.json``."""
        atomic_write(self.dir / SUMMARY_FILE, json.dumps(json_ready(summary), indent=2))

    def elapsed_s(self) -> float:
        """Seconds since the writer was created (plus those before a resume)."""
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
        """One progress line: round i/N, accuracy, scheduled, elapsed, ETA."""
        elapsed = self.elapsed_s()
        self._round_s.append(max(elapsed - self._last_end_s - discovery_s, 0.0))
        self._last_end_s = elapsed
        timed = self._round_s[1:] or self._round_s  # the first left out: one-time costs
        eta = sum(timed) / len(timed) * max(self.num_rounds - server_round, 0)
        acc = "  -   " if accuracy is None else f"{accuracy:6.2%}"
        return (
            f"round {server_round:>4}/{self.num_rounds} | acc {acc} | scheduled "
            f"{scheduled:>3}/{available:<3} available | elapsed {elapsed:7.1f} s | ETA {eta:7.1f} s"
        )


def sync_run_files(result_dir: str | Path) -> None:
    """Fsync ``metrics.jsonl``, ``status.json`` and the folder (at checkpoints and the end)."""
    sync_files(result_dir, (METRICS_FILE, STATUS_FILE))


def holds_run(result_dir: str | Path) -> bool:
    """True when ``result_dir`` exists and holds any of a run's files (:data:`RUN_FILES`)."""
    folder = Path(result_dir)
    return folder.is_dir() and any((folder / name).exists() for name in RUN_FILES)


def check_new_result_dir(result_dir: str | Path) -> None:
    """Refuse (one line) a folder holding a run's results (the claim refuses the rest)."""
    folder = Path(result_dir)
    if present := [name for name in RUN_FILES if (folder / name).exists()]:
        raise ValueError(
            f"run-config key 'result-dir' = '{folder}' already holds a run's results "
            f"({', '.join(present)}); choose a new folder, or continue that run with "
            f"resume-from='{folder}'"
        )


def read_metrics_lines(
    result_dir: str | Path, through_round: int | None = None
) -> list[dict[str, Any]]:
    """A run's metrics lines without a torn last one; ``through_round`` (to resume): 1 .. it."""
    path = Path(result_dir) / METRICS_FILE
    resume = through_round is not None
    where = f"run-config key 'resume-from': {path}" if resume else str(path)
    after = "the folder cannot be resumed" if resume else "it was edited or damaged"
    lines: list[dict[str, Any]] = []
    try:
        with path.open("rb") as handle:
            rows = iter(lambda: handle.readline(MAX_METRICS_LINE_BYTES + 1), b"")
            for number, raw in enumerate(rows, start=1):
                try:  # a JSON object with an integer round
                    line = parse_json(raw, "") if len(raw) <= MAX_METRICS_LINE_BYTES else None
                except ValueError:
                    line = None
                if isinstance(line, dict) and isinstance(line.get("round"), int):
                    lines.append(line)
                elif (raw.strip() and raw.endswith(b"\n")) or len(raw) > MAX_METRICS_LINE_BYTES:
                    raise ValueError(
                        f"{where} line {number} is not a metrics line (a JSON object with an "
                        f"integer round); {after}"
                    )
    except OSError as err:
        if not resume:
            raise
        raise ValueError(f"{where} cannot be read ({err.strerror}); {after}") from err
    if through_round is None:
        return lines
    kept = [x for x in lines if x["round"] <= through_round]
    rounds = [x["round"] for x in kept]
    if rounds != list(range(1, through_round + 1)):
        held = f"rounds {rounds[0]}..{rounds[-1]} ({len(rounds)} lines)" if rounds else "no rounds"
        raise ValueError(
            f"{where} holds {held} but the checkpoint is after round {through_round}: lines are "
            "missing or repeated; the folder cannot be resumed"
        )
    return kept
