"""Waiting for replies in a simulation: as long as the host needs, and a stuck run stops
(``stall-limit-s``; docs/design.md, "Host load and simulated time")."""  # noqa: D205, D209

from __future__ import annotations

import contextlib
import ctypes
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, cast

from flwr.app import Message
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

from fedcgd_strategy.errors import OneLineMessage

#: Error codes of a reply that the link made, not the device: the message expired, its reply
#: expired, the node is gone. In a simulation none of them is part of the physics.
LINK_ERRORS = (
    ErrorCode.MESSAGE_UNAVAILABLE,
    ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
    ErrorCode.NODE_UNAVAILABLE,
)


class SimulationStalledError(OneLineMessage, RuntimeError):
    """A simulated run got no reply for ``stall-limit-s`` (or its link dropped a message)."""


def outside_flower(*, colored: bool | None = None) -> None:
    """Run Flower's message code in a process no Flower runtime started (the in-process engine):
    the task identity set as a ServerApp's (run 1); ``colored``: Flower's log colours or not."""  # noqa: D205, D209
    from flwr.supercore.logger import update_console_handler
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 0
    update_console_handler(colored=colored)


def is_simulation(grid: Grid) -> bool:
    """Whether ``grid`` says ``simulated``, else whether it is Flower's ``InMemoryGrid``."""
    from flwr.superlink.grid import InMemoryGrid  # loaded by both of Flower's ServerApp runners

    return bool(getattr(grid, "simulated", isinstance(grid, InMemoryGrid)))


def describe_unanswered(waiting: list[Message], stall_limit_s: float) -> str:
    """The watchdog's line (under 300 characters, all of it kept in ``status.json``)."""
    meta = [m.metadata for m in waiting]
    kinds = "/".join(sorted({m.message_type for m in meta}))
    rounds = "/".join(sorted({m.group_id for m in meta}))
    nodes = sorted(int(m.dst_node_id) for m in meta)
    more = f" and {len(nodes) - 1} more" if len(nodes) > 1 else ""
    return (
        f"simulation stalled: no reply in {stall_limit_s:g} s (stall-limit-s) to "
        f"{len(meta)} {kinds} message(s) of round {rounds} (node {nodes[0] if nodes else '?'}"
        f"{more}); a slow simulated device is never dropped: raise stall-limit-s if the host "
        "is this slow, else find the stuck ClientApp"
    )


class PatientGrid:
    """Flower's simulation grid waiting for every reply (``timeout`` ignored), stalled after
    ``stall_limit_s`` s without one or when the link answers a message (:data:`LINK_ERRORS`)."""  # noqa: D205, D209

    simulated = True

    def __init__(self, grid: Grid, stall_limit_s: float, poll_s: float = 0.1) -> None:
        self.grid, self.stall_limit_s, self.poll_s = grid, float(stall_limit_s), float(poll_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.grid, name)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push ``messages`` and return every reply."""
        messages = list(messages)
        waiting = set(self.grid.push_messages(messages))
        replies: list[Message] = []

        def describe() -> str:
            left = [m for m in messages if m.metadata.message_id in waiting]
            return describe_unanswered(left, self.stall_limit_s)

        with stall_alarm(self.stall_limit_s, describe) as progress:
            while waiting:
                pulled = list(self.grid.pull_messages(waiting))
                for reply in pulled:
                    if reply.has_error() and reply.error.code in LINK_ERRORS:
                        raise SimulationStalledError(
                            f"simulation stalled: the link dropped the message to node "
                            f"{reply.metadata.src_node_id} (error {reply.error.code}, "
                            f"{str(reply.error.reason)[:100]}); in a simulation that is no "
                            "device dropout"
                        )
                replies += pulled
                waiting -= {r.metadata.reply_to_message_id for r in pulled}
                if pulled:
                    progress()
                elif waiting:
                    time.sleep(self.poll_s)
        return replies


def patient(grid: Grid, stall_limit_s: float) -> Grid:
    """The grid a run waits on: Flower's simulation grid as a :class:`PatientGrid`, others kept."""
    simulated = getattr(grid, "simulated", None) is None and is_simulation(grid)
    return cast(Grid, PatientGrid(grid, stall_limit_s)) if simulated else grid


class _Alarm(BaseException):
    """Raised in the stuck code by :func:`stall_alarm`; no ``except Exception`` catches it."""


class _Watch:
    """The armed alarm of this process, in the thread that armed it (main: rung by ``SIGALRM``)."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s, self.ident, self.done = limit_s, threading.get_ident(), threading.Event()
        self.main = threading.current_thread() is threading.main_thread()
        self.deadline = time.monotonic() + limit_s

    def progress(self) -> None:
        """Something happened: the next ``limit_s`` seconds are the stuck code's again."""
        self.deadline = time.monotonic() + self.limit_s
        if self.main:
            signal.setitimer(signal.ITIMER_REAL, self.limit_s)

    def ring_in_thread(self) -> None:
        """Raise :class:`_Alarm` in the armed thread once the deadline passes (a watcher's)."""
        while not self.done.wait(max(self.deadline - time.monotonic(), 0.0) + 0.05):
            if time.monotonic() >= self.deadline:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self.ident), ctypes.py_object(_Alarm)
                )
                return


_watch: _Watch | None = None


def stall_progress() -> None:
    """Tell the armed :func:`stall_alarm`, if any, that the run moved on (a reply, a phase)."""
    if _watch is not None:
        _watch.progress()


def _ring(signum: int, frame: FrameType | None) -> None:
    raise _Alarm


@contextlib.contextmanager
def stall_alarm(
    stall_limit_s: float | None, describe: Callable[[], str]
) -> Iterator[Callable[[], None]]:
    """Raise :class:`SimulationStalledError` (``describe()`` and where the code was stuck) when
    the block goes ``stall_limit_s`` s unmoved (None: no alarm); yields ``progress()``.

    One alarm per process (an inner block's is the outer one's): ``SIGALRM`` in the main thread,
    else a watcher thread raising in the block's thread when it next runs Python code.
    """  # noqa: D205
    global _watch
    if stall_limit_s is None:
        yield lambda: None
        return
    outer, previous = _watch is None, None
    watch = _watch = _Watch(float(stall_limit_s)) if _watch is None else _watch
    if outer and watch.main:
        previous = signal.signal(signal.SIGALRM, _ring)
    elif outer:
        threading.Thread(target=watch.ring_in_thread, daemon=True).start()
    try:
        watch.progress()
        yield watch.progress
    except _Alarm as alarm:
        raise SimulationStalledError(describe() + _stuck_at(alarm)) from None
    finally:
        if outer:
            _watch = None
            watch.done.set()
            if watch.main:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
            else:  # an alarm set just now, not yet raised, is withdrawn
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(watch.ident), None)


def _stuck_at(alarm: _Alarm) -> str:
    """`` (stuck at mypolicy.py:7 in schedule)``: the innermost frame the alarm interrupted."""
    code, line, tb = None, 0, alarm.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is not _ring.__code__:
            code, line = tb.tb_frame.f_code, tb.tb_lineno
        tb = tb.tb_next
    if code is None:
        return ""
    return f" (stuck at {Path(code.co_filename).name}:{line} in {code.co_name})"
