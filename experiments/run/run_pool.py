"""Run many in-process federations side by side: one process per run, ``jobs`` at a time.

Each run writes its output to ``run.log`` in its folder; on a signal or an error every run still
going is stopped by PID (docs/performance.md, "Runs side by side").
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.run.processes import popen, stop
from experiments.run.run_config import format_run_config
from run_files.files import open_log

#: Log file of a run started by :func:`run_jobs` for a comparison, in its result folder.
RUN_LOG = "run.log"


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def resolve_jobs(jobs: Any, engine: str) -> int:
    """The number of runs to keep going at once: ``jobs``, or every usable core for 0.

    Raises
    ------
    ValueError
        For a value that is not a whole number >= 0, or more than one job on an engine other than
        ``inprocess`` (the others run clients in parallel and start servers on fixed ports).
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(
            f"jobs: got {jobs!r}; allowed: a whole number >= 1 (runs at once), or 0 for one "
            f"per usable CPU core ({usable_cores()} here)"
        )
    count = jobs or usable_cores()
    if count > 1 and engine != "inprocess":
        raise ValueError(
            f"jobs: got {jobs!r} with engine {engine!r}; runs side by side need the inprocess "
            "engine (the simulation engine and deployments already run clients in parallel): "
            "use jobs=1 or the inprocess engine"
        )
    return count


def inprocess_command(overrides: Mapping[str, Any], *, cohort_threads: int = 0) -> list[str]:
    """The command line of one in-process run with these overrides and ``--cohort-threads``."""
    return [
        sys.executable,
        "-m",
        "experiments.cli",
        "inprocess",
        "--run-config",
        format_run_config(overrides),
        "--cohort-threads",
        str(cohort_threads),
    ]


def cores_per_job(jobs: int) -> int:
    """Usable cores per run when ``jobs`` runs go at once (at least 1)."""
    return max(1, usable_cores() // max(1, jobs))


@dataclass(frozen=True)
class Job:
    """One command to run: its argument vector and the file its output is appended to."""

    argv: list[str]
    log: Path


def run_jobs(
    jobs: Sequence[Job],
    workers: int,
    on_start: Callable[[int], bool | None],
    on_end: Callable[[int, int], None],
) -> None:
    """Run every job, at most ``workers`` at a time, in list order; stop those left by PID.

    Each job gets stdin from ``/dev/null``, its output appended to its log and a session of its
    own. ``on_start(i)`` runs just before job ``i`` starts (False keeps it from starting);
    ``on_end(i, exit_code)`` after it ended, in the order they end; both in the calling thread.
    """
    if workers < 1:
        raise ValueError(f"workers: got {workers}; allowed: >= 1")
    running: dict[Future[int], tuple[int, subprocess.Popen[bytes]]] = {}

    def end_one() -> None:
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in done:
            on_end(running.pop(future)[0], future.result())

    with ThreadPoolExecutor(workers) as waiters:
        try:
            for i, job in enumerate(jobs):
                while len(running) >= workers:
                    end_one()
                if on_start(i) is False:
                    continue
                job.log.parent.mkdir(parents=True, exist_ok=True)
                with open_log(job.log) as log:
                    proc = popen(
                        job.argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                running[waiters.submit(proc.wait)] = (i, proc)
            while running:
                end_one()
        finally:
            stop(proc for _, proc in running.values())
