"""Starting and stopping what a run starts: guarded process trees, stops by PID, signals.

Every process goes through :func:`guarded_popen` (docs/design.md, "No process outlives its
launcher"). A tree is read from ``/proc`` before anything is signalled (the SuperLink starts its
children in sessions of their own), then SIGTERM, then SIGKILL after a grace period.
:func:`stop_on_signals` turns SIGINT / SIGTERM into :class:`Interrupted`, which unwinds through
the ``finally`` blocks; the commands then exit 130 / 143.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from experiments.run.guard import (
    PR_SET_CHILD_SUBREAPER,
    descendants,
    is_alive,
    prctl,
    stop_tree,
)
from fedcgd_task.errors import OneLineMessage, StopsRun

#: The guard every started command runs under (a script: ``python -I`` runs it in a few tens
#: of milliseconds, importing nothing of the project).
GUARD_SCRIPT = Path(__file__).resolve().with_name("guard.py")

#: This process's lifeline: (its PID, the pipe's read end, its write end). Created once per
#: process; the write end is never inherited (``os.pipe`` gives non-inheritable ends) and never
#: closed, so the kernel closes it exactly when this process ends.
_LIFELINE: tuple[int, int, int] | None = None


def lifeline_fd() -> int:
    """The read end of this process's lifeline pipe (handed to every guard it starts).

    A forked child (whose parent's write end it shares) gets a pipe of its own.
    """
    global _LIFELINE
    if _LIFELINE is None or _LIFELINE[0] != os.getpid():
        read_end, write_end = os.pipe()
        _LIFELINE = (os.getpid(), read_end, write_end)
    return _LIFELINE[1]


def guarded(command: Sequence[str]) -> tuple[list[str], tuple[int, ...]]:
    """``command`` run under the guard: its argument vector and the ``pass_fds`` it needs.

    For ``subprocess.run(argv, pass_fds=fds, ...)``; :func:`guarded_popen` does the same for
    ``Popen``. The guard passes its standard streams, environment and working folder on, and
    exits as the command did.
    """
    fd = lifeline_fd()
    return [sys.executable, "-I", str(GUARD_SCRIPT), str(fd), "--", *command], (fd,)


def guarded_popen(command: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(command, **kwargs)`` under the guard (see the module docstring).

    The returned process is the guard: signals sent to it reach the command; its exit code is
    the command's; :func:`stop_tree` on its PID reaches everything the command started.
    """
    argv, fds = guarded(command)
    kwargs["pass_fds"] = tuple(kwargs.get("pass_fds", ())) + fds
    return subprocess.Popen(argv, **kwargs)


#: Signals turned into :class:`Interrupted`.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(OneLineMessage, StopsRun, BaseException):
    """Raised in the main thread by the first SIGINT or SIGTERM (see :func:`stop_on_signals`).

    Its message (``stopped by SIGINT``) is the whole story (:class:`OneLineMessage`): a run's
    ``status.json`` records it as the reason, without the class name.

    Attributes
    ----------
    signum : int
        The signal received.

    A run it ends is ``stopped``, not ``failed`` (:class:`~fedcgd_task.errors.StopsRun`,
    :func:`run_files.run_status.ended_by`).
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

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


def exit_code_stopping_on_signals(
    command: Callable[[], int], last_words: Callable[[], str | None] | None = None
) -> int:
    """Run ``command`` (a command line's body) and return its exit code; stop cleanly on signals.

    On SIGINT / SIGTERM the body unwinds (its ``finally`` blocks stop what it started), one
    line says so on stderr, and the exit code is 130 (SIGINT, Ctrl-C) or 143 (SIGTERM).
    ``last_words()``, called once everything is stopped, gives the line printed after it
    (how to continue: :mod:`experiments.run.resume_command`); None prints nothing more.
    """
    with stop_on_signals():
        try:
            return command()
        except Interrupted as stop:
            print(stop.message, file=sys.stderr, flush=True)
            line = last_words() if last_words is not None else None
            if line:
                print(line, file=sys.stderr, flush=True)
            return stop.exit_code


def run_as_command(main: Callable[[], int | None]) -> int | None:
    """Run a command's ``main`` as this process's whole life; nothing it started survives it.

    The process becomes a subreaper first, so that a process orphaned below it (its guard
    killed by hand, say) stays below it; whatever is still below it when ``main`` returns or
    raises is stopped by PID (:func:`stop_tree`). For the ``__main__`` of the commands only:
    called from a test, it would stop the test's own children.
    """
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no subreaper
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        return main()
    finally:
        left = {pid for pid in descendants([os.getpid()]) if is_alive(pid)}
        if left:
            stop_tree(left)
