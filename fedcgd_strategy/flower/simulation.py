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
    """Flower's simulation grid, whose ``send_and_receive`` ignores ``timeout`` and waits for
    every reply: :class:`SimulationStalledError` after ``stall_limit_s`` seconds without a new
    one (:func:`stall_alarm`), or when the link answers a message itself (:data:`LINK_ERRORS`).
    """  # noqa: D205

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
    """The armed alarm of this process: its limit and deadline (``main``: rung by ``SIGALRM``)."""

    def __init__(self, limit_s: float, main: bool) -> None:
        self.limit_s, self.main = limit_s, main
        self.deadline = time.monotonic() + limit_s

    def progress(self) -> None:
        """Something happened: the next ``limit_s`` seconds are the stuck code's again."""
        self.deadline = time.monotonic() + self.limit_s
        if self.main:
            signal.setitimer(signal.ITIMER_REAL, self.limit_s)


_watch: _Watch | None = None


def stall_progress() -> None:
    """Tell the armed :func:`stall_alarm`, if any, that the run moved on (a reply, a phase)."""
    if _watch is not None:
        _watch.progress()


def _ring_in(thread_id: int, watch: _Watch, done: threading.Event) -> None:
    """Raise :class:`_Alarm` in thread ``thread_id`` once ``watch`` passes its deadline."""
    while not done.wait(max(watch.deadline - time.monotonic(), 0.0) + 0.05):
        if time.monotonic() >= watch.deadline:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(thread_id), ctypes.py_object(_Alarm)
            )
            return


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
    if _watch is not None:
        try:
            _watch.progress()
            yield _watch.progress
        except _Alarm as alarm:
            raise SimulationStalledError(describe() + _stuck_at(alarm)) from None
        return
    main = threading.current_thread() is threading.main_thread()
    watch = _Watch(float(stall_limit_s), main)
    done = threading.Event()

    def ring(signum: int, frame: FrameType | None) -> None:
        raise _Alarm

    previous = signal.signal(signal.SIGALRM, ring) if main else None
    _watch = watch
    if not main:
        ident = threading.get_ident()
        threading.Thread(target=_ring_in, args=(ident, watch, done), daemon=True).start()
    try:
        watch.progress()
        yield watch.progress
    except _Alarm as alarm:
        raise SimulationStalledError(describe() + _stuck_at(alarm)) from None
    finally:
        _watch = None
        done.set()
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
        else:  # an alarm set just now, not yet raised, is withdrawn
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)


def _stuck_at(alarm: _Alarm) -> str:
    """`` (stuck at mypolicy.py:7 in schedule)``: the innermost frame the alarm interrupted."""
    code, line, tb = None, 0, alarm.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name != "ring" or tb.tb_frame.f_globals is not globals():
            code, line = tb.tb_frame.f_code, tb.tb_lineno
        tb = tb.tb_next
    if code is None:
        return ""
    return f" (stuck at {Path(code.co_filename).name}:{line} in {code.co_name})"
