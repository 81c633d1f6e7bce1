"""Starting and stopping what a run starts; nothing outlives its starter, ``kill -9`` included.

See docs/design.md, "No process outlives its launcher".
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

MARK = "FEDCGD_TREE_"  # prefix of the environment variable that marks a tree
GRACE_S = 3.0  # seconds between SIGTERM and SIGKILL
_TOKENS: dict[int, str] = {}
_WATCHER: tuple[int, int, subprocess.Popen[bytes]] | None = None  # (PID, write end, watcher)
_ROOT = str(Path(__file__).resolve().parents[2])


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity; Linux, as ``/proc`` is), at least 1."""
    return max(1, len(os.sched_getaffinity(0)))


def _scan(tokens: Collection[str]) -> tuple[set[int], dict[int, list[int]], set[int]]:
    """From ``/proc``: the processes marked with ``tokens``, everyone's children, the live ones."""
    needles = {f"{MARK}{token}=1".encode() for token in tokens}
    marked, children, live = set(), dict[int, list[int]](), set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                state, parent = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[:2]
                environ = Path(entry.path, "environ").read_bytes()
            except (OSError, ValueError):  # gone meanwhile, or not ours
                continue
            pid = int(entry.name)
            children.setdefault(int(parent), []).append(pid)
            if state != "Z":
                live.add(pid)
                if not needles.isdisjoint(environ.split(b"\0")):
                    marked.add(pid)
    return marked, children, live


def stop_marked(tokens: Collection[str], grace_s: float = GRACE_S) -> None:
    """Stop the marked processes and all below them: SIGTERM, SIGKILL after ``grace_s``."""
    deadline, tree, warned = time.monotonic() + grace_s, set[int](), set[int]()
    while time.monotonic() < deadline + 10.0:
        marked, children, live = _scan(tokens)
        frontier = list(marked | (tree & live))
        tree |= marked
        while frontier:
            for child in children.get(frontier.pop(), []):
                if child not in tree:
                    tree.add(child)
                    frontier.append(child)
        left = (tree & live) - {os.getpid()}
        if not left:
            return
        late = time.monotonic() >= deadline
        for pid in left if late else left - warned:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
        warned |= left
        time.sleep(0.05)


def stop(procs: Iterable[subprocess.Popen[Any]], grace_s: float = GRACE_S) -> None:
    """Stop the trees of processes started with :func:`popen`, then reap them."""
    procs = list(procs)
    stop_marked([_TOKENS[proc.pid] for proc in procs if proc.pid in _TOKENS], grace_s)
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


def popen(command: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen``, its tree marked and told to the watcher (kills it when we end)."""
    global _WATCHER
    if _WATCHER is None or _WATCHER[0] != os.getpid():  # a forked child needs its own
        read_end, write_end = os.pipe()  # neither end is inherited by what starts later
        code = f"import sys; sys.path.insert(0, {_ROOT!r}); import {__name__} as p; p.watch()"
        watcher = subprocess.Popen(
            [sys.executable, "-I", "-c", code],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to this process's group does not reach it
        )
        os.close(read_end)
        _WATCHER = (os.getpid(), write_end, watcher)
    token = secrets.token_hex(8)
    kwargs["env"] = {**(kwargs.get("env") or os.environ), MARK + token: "1"}
    os.write(_WATCHER[1], f"{token}\n".encode())  # before the start: no unwatched moment
    proc = subprocess.Popen(list(command), **kwargs)
    _TOKENS[proc.pid] = token
    return proc


def watch() -> None:
    """The watcher's body."""
    stop_marked(sys.stdin.read().split(), grace_s=0.0)
