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

#: The guard every started command runs under (``python -I``: tens of milliseconds).
GUARD_SCRIPT = Path(__file__).resolve().with_name("guard.py")

#: This process's lifeline: (its PID, read end, write end). The write end is never inherited
#: nor closed, so the kernel closes it exactly when this process ends.
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
    """``command`` under the guard: its argument vector and the ``pass_fds`` it needs."""
    fd = lifeline_fd()
    return [sys.executable, "-I", str(GUARD_SCRIPT), str(fd), "--", *command], (fd,)


def guarded_popen(command: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(command, **kwargs)`` under the guard (the process returned)."""
    argv, fds = guarded(command)
    kwargs["pass_fds"] = tuple(kwargs.get("pass_fds", ())) + fds
    return subprocess.Popen(argv, **kwargs)


#: Signals turned into :class:`Interrupted`.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(OneLineMessage, StopsRun, BaseException):
    """Raised in the main thread by the first SIGINT or SIGTERM (:func:`stop_on_signals`).

    Its message (``stopped by SIGINT``) is the whole story; a run it ends is ``stopped``, not
    ``failed``. ``signum``: the signal received.
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
    """Run a command line's body and return its exit code; stop cleanly on signals (130 / 143).

    After a signal, one line says so on stderr, then ``last_words()`` (called once everything is
    stopped) if it gives one.
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

    The process becomes a subreaper; whatever is still below it at the end is stopped by PID. For
    the commands' ``__main__`` only (in a test it would stop the test's own children).
    """
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no subreaper
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        return main()
    finally:
        left = {pid for pid in descendants([os.getpid()]) if is_alive(pid)}
        if left:
            stop_tree(left)
