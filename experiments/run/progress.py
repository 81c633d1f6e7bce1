"""Progress of long commands: a loop of steps (:func:`step_reporter`), many runs (RunProgress)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress, TimeElapsedColumn


def format_duration(seconds: float) -> str:
    """``"42 s"``, ``"3 min 05 s"``, ``"2 h 07 min"``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def step_reporter(description: str) -> Callable[[int, int], None]:
    """``report(done, total)`` for a loop: a bar on a terminal, else a line per tenth on stderr."""
    console = Console(stderr=True)
    if console.is_terminal:
        bar = Progress(*Progress.get_default_columns(), MofNCompleteColumn(), TimeElapsedColumn(),
                       console=console)  # fmt: skip
        task = bar.add_task(description, total=None)

        def show(done: int, total: int) -> None:
            bar.start()  # the first call starts it; later ones do nothing
            bar.update(task, completed=done, total=total)
            if done >= total:
                bar.stop()

        return show
    start, shown = time.perf_counter(), [-1]

    def print_line(done: int, total: int) -> None:
        if done * 10 // max(total, 1) > shown[0]:
            shown[0] = done * 10 // max(total, 1)
            elapsed = time.perf_counter() - start
            print(f"{description} {done}/{total} ({elapsed:.1f} s)", file=sys.stderr, flush=True)

    return print_line


@dataclass
class RunProgress:
    """Counts a command's runs (``total``, kept ones included) and estimates the time left."""

    total: int
    clock: Callable[[], float] = time.monotonic
    workers: int = 1
    ran: int = 0
    kept: int = 0
    failed: int = 0
    run_s: float = 0.0
    going: dict[Hashable, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def seconds_left(self) -> float | None:
        """Estimated seconds until the last run ends; None before any run has run."""
        executed = self.ran + self.failed
        done = executed + self.kept
        return self.run_s / executed * (self.total - done) / self.workers if executed else None

    def header(self) -> str:
        """The overall progress text for the run about to start."""
        going = self.ran + self.kept + self.failed + len(self.going)
        counts = [f"{self.ran} done"]
        counts += [f"{n} {word}" for n, word in ((self.kept, "kept"), (self.failed, "failed")) if n]
        left = self.seconds_left()
        return (
            f"[run {min(going + 1, self.total)}/{self.total} | {', '.join(counts)} | "
            f"{format_duration(self.clock() - self.started)} elapsed | "
            + ("time left unknown]" if left is None else f"~{format_duration(left)} left]")
        )

    def start_run(self, key: Hashable = None) -> None:
        """Run ``key`` starts executing (not for kept runs); one key per run going at once."""
        self.going[key] = self.clock()

    def end_run(self, key: Hashable = None, *, kept: bool = False, failed: bool = False) -> None:
        """Run ``key`` ended: executed (``failed`` or not) or ``kept`` from earlier."""
        if kept:
            self.kept += 1
            return
        self.run_s += self.clock() - self.going.pop(key, self.clock())
        self.failed += failed
        self.ran += not failed
