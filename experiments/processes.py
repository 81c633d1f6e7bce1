"""Stopping what a run started: process trees by PID, and SIGINT / SIGTERM as an exception.

Flower's SuperLink starts ``flower-superexec`` and ``flwr-simulation`` (which starts Ray) in
sessions of their own, so signalling the SuperLink's process group misses them. Here the whole
tree below a process is read from ``/proc`` *before* anything is signalled (once a parent is
gone its children are re-parented and can no longer be found), every process in it gets
SIGTERM, and whatever is still alive after a short grace period gets SIGKILL.

:func:`stop_on_signals` turns the first SIGINT or SIGTERM into :class:`Interrupted` (a
``BaseException``, like ``KeyboardInterrupt``, so ``except Exception`` does not swallow it),
which unwinds through the ``finally`` blocks that stop the processes; the command line then
exits with ``128 + signal`` (130 for Ctrl-C, 143 for SIGTERM) and one line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType

#: Seconds between SIGTERM and SIGKILL.
GRACE_S = 3.0

#: Signals turned into :class:`Interrupted`.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """Raised in the main thread by the first SIGINT or SIGTERM (see :func:`stop_on_signals`).

    Attributes
    ----------
    signum : int
        The signal received.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal number (130 SIGINT, 143 SIGTERM)."""
        return 128 + self.signum

    @property
    def message(self) -> str:
        """One line for stderr."""
        return (
            f"stopped by {signal.Signals(self.signum).name}: every process of the run was "
            f"stopped (exit code {self.exit_code})"
        )


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Raise :class:`Interrupted` on the first SIGINT / SIGTERM; ignore repeats while stopping.

    The previous handlers are restored on exit. Only usable in the main thread.
    """
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if received:  # already stopping: let the clean-up finish
            return
        received.append(signum)
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def exit_code_stopping_on_signals(command: Callable[[], int]) -> int:
    """Run ``command`` (a command line's body) and return its exit code; stop cleanly on signals.

    On SIGINT / SIGTERM the body unwinds (its ``finally`` blocks stop what it started), one
    line says so on stderr, and the exit code is 130 (SIGINT, Ctrl-C) or 143 (SIGTERM).
    """
    with stop_on_signals():
        try:
            return command()
        except Interrupted as stop:
            print(stop.message, file=sys.stderr, flush=True)
            return stop.exit_code


def parent_pids() -> dict[int, int]:
    """PID -> parent PID of every process visible in ``/proc``."""
    table: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        # the command name (field 2) is in parentheses and may hold spaces
        table[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return table


def process_tree(roots: Iterable[int]) -> set[int]:
    """``roots`` and every process below them (children, grandchildren, ...)."""
    table = parent_pids()
    found = {pid for pid in roots if pid in table}
    frontier = set(found)
    while frontier:
        frontier = {pid for pid, parent in table.items() if parent in frontier} - found
        found |= frontier
    return found


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def stop_tree(roots: Iterable[int], grace_s: float = GRACE_S) -> None:
    """Stop ``roots`` and all their descendants: SIGTERM, then SIGKILL after ``grace_s``.

    The tree is read again while waiting, so processes started meanwhile (e.g. a Ray worker
    forked during the shutdown) are stopped too. Zombies of our own children are left for the
    caller's ``wait()``.
    """
    tree = process_tree(roots)
    _signal_all(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        newcomers = process_tree(tree) - tree
        if newcomers:
            _signal_all(newcomers, signal.SIGTERM)
            tree |= newcomers
        if not any(is_alive(pid) for pid in tree):
            return
        time.sleep(0.1)
    tree |= process_tree(tree)
    _signal_all([pid for pid in tree if is_alive(pid)], signal.SIGKILL)
