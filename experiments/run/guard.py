"""Run one command so that nothing it starts outlives the process that started the guard.

``python -I experiments/run/guard.py FD -- COMMAND [ARGS...]``: a child subreaper that kills
its whole tree when the pipe FD reports its starter's death, passes SIGTERM / SIGINT / SIGHUP
on, and exits as COMMAND did (docs/design.md, "No process outlives its launcher"). Standard
library only, so it starts in tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

#: ``prctl`` options (linux/prctl.h).
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: Seconds between SIGTERM and SIGKILL for what the command leaves behind when it ends.
GRACE_S = 3.0
#: Signals passed on to the command.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def prctl(option: int, value: int) -> None:
    """``prctl(option, value)``; OSError when the kernel refuses it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def descendants(roots: Iterable[int]) -> set[int]:
    """Every process below ``roots`` (read from ``/proc``; zombies included; roots excluded)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parent = int(stat.rsplit(")", 1)[1].split()[1])  # field 2 is in parentheses
        except (OSError, IndexError, ValueError):  # it ended meanwhile
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    frontier = list(roots)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def signal_all(pids: Iterable[int], signum: int) -> None:
    """Send ``signum`` to every PID (those already gone are skipped)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def reap() -> None:
    """Collect every child that has ended (orphans re-parented to the guard included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_tree(roots: Iterable[int], grace_s: float = GRACE_S, subreaper: int | None = None) -> None:
    """Stop ``roots`` and every process below them: SIGTERM, then SIGKILL after ``grace_s``.

    The tree is read again on every pass, so processes started meanwhile (a Ray worker forked
    during the shutdown) are stopped too; ``grace_s`` = 0 sends SIGKILL at once.
    ``subreaper``: this process's PID when it is one (the guard): what is re-parented to it
    belongs to the tree, and its ended children are collected. Otherwise zombies of the
    caller's own children are left for its ``wait()``.
    """
    tree, warned = set(roots), set[int]()
    deadline = time.monotonic() + grace_s
    for _ in range(100):  # passes with SIGKILL (a process stuck in the kernel: given up on)
        while True:
            tree |= descendants([*tree, *([subreaper] if subreaper else [])])
            left = {pid for pid in tree if is_alive(pid)}
            if not left or time.monotonic() >= deadline:
                break
            signal_all(left - warned, signal.SIGTERM)
            warned |= left
            if subreaper:
                reap()
            time.sleep(0.05)
        if not left:
            return
        signal_all(left, signal.SIGKILL)
        if subreaper:
            reap()
        time.sleep(0.01)


def watch_lifeline(fd: int) -> None:
    """Block until the starting process is gone (end-of-file on ``fd``), then kill the tree."""
    while True:
        try:
            data = os.read(fd, 4096)
        except InterruptedError:
            continue
        except OSError:
            break
        if not data:
            break
    stop_tree((), 0.0, subreaper=os.getpid())
    os._exit(128 + signal.SIGKILL)


def exit_like(status: int) -> None:
    """Exit as a process with wait status ``status`` did (its code, or killed by its signal)."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        time.sleep(1.0)  # a signal whose default is not to end the process: exit as the shell
        sys.exit(128 + signum)
    sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main(argv: list[str]) -> None:
    """``guard.py FD -- COMMAND...``: run COMMAND as described in the module docstring."""
    if len(argv) < 4 or argv[2] != "--" or not argv[1].isdigit():
        sys.stderr.write("usage: guard.py FD -- COMMAND [ARGS...]\n")
        sys.exit(2)
    fd, command = int(argv[1]), argv[3:]
    os.set_inheritable(fd, False)
    prctl(PR_SET_CHILD_SUBREAPER, 1)

    guard_pid = os.getpid()

    def die_with_guard() -> None:  # in the child, before exec
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != guard_pid:  # the guard died before the line above
            os._exit(128 + signal.SIGKILL)

    try:
        child = subprocess.Popen(command, preexec_fn=die_with_guard)
    except OSError as err:
        sys.stderr.write(f"error: cannot start {command[0]!r}: {err.strerror or err}\n")
        sys.exit(127)

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    threading.Thread(target=watch_lifeline, args=(fd,), daemon=True).start()
    status = 0
    while True:  # reap every child; stop when the command itself has ended
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == child.pid:
            status = wait_status
            break
    stop_tree((), GRACE_S, subreaper=os.getpid())
    exit_like(status)


if __name__ == "__main__":
    main(sys.argv)
