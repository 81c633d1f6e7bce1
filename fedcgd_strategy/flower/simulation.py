"""Waiting for replies in a simulation: as long as the host needs, and a stuck run stops.

Host wall-clock time is no part of a simulated round; how a simulation is told from a
deployment, why it waits and the watchdog (``stall-limit-s``) are in docs/design.md, "Host load
and simulated time".
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any

from flwr.app import Message
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run

from fedcgd_task.errors import OneLineMessage

#: Error codes of a reply that the link made, not the device: the message expired, its reply
#: expired, the node is gone. In a simulation none of them is part of the physics.
LINK_ERRORS = (
    ErrorCode.MESSAGE_UNAVAILABLE,
    ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
    ErrorCode.NODE_UNAVAILABLE,
)


class SimulationStalledError(OneLineMessage, RuntimeError):
    """A simulated run got no reply for ``stall-limit-s`` (or its link dropped a message).

    The message is one complete line (no ``Type:`` prefix in ``status.json``).
    """


def is_simulation(grid: Grid) -> bool:
    """True when ``grid`` is a simulation's: Flower's ``InMemoryGrid`` or one that says so.

    Flower's simulation runtime runs the ServerApp on ``InMemoryGrid``, a deployment on
    ``HttpGrid``; another grid is a simulation's when its class says ``simulated = True``.
    """
    declared = getattr(grid, "simulated", None)
    if declared is not None:
        return bool(declared)
    from flwr.superlink.grid import InMemoryGrid  # loaded by both of Flower's ServerApp runners

    return isinstance(grid, InMemoryGrid)


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


class PatientGrid(Grid):
    """Flower's simulation grid, whose ``send_and_receive`` waits for every reply.

    The given ``timeout`` is ignored; :class:`SimulationStalledError` is raised after
    ``stall_limit_s`` seconds without a new reply, or when the link answers a message itself
    (:data:`LINK_ERRORS`). ``poll_s`` is the time between two pulls.
    """

    simulated = True

    def __init__(self, grid: Grid, stall_limit_s: float, poll_s: float = 0.1) -> None:
        self.grid = grid
        self.stall_limit_s = float(stall_limit_s)
        self.poll_s = float(poll_s)

    def set_run(self, run: Run) -> None:
        """The wrapped grid's."""
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        """The wrapped grid's."""
        return self.grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        """The wrapped grid's."""
        return self.grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        """The wrapped grid's."""
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """The wrapped grid's."""
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The wrapped grid's."""
        return self.grid.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push ``messages`` and return every reply (``timeout`` is not used: see the class)."""
        messages = list(messages)
        waiting = set(self.grid.push_messages(messages))
        replies: list[Message] = []
        last_reply = time.monotonic()
        while waiting:
            pulled = list(self.grid.pull_messages(waiting))
            for reply in pulled:
                if reply.has_error() and reply.error.code in LINK_ERRORS:
                    raise SimulationStalledError(
                        f"simulation stalled: the link dropped the message to node "
                        f"{reply.metadata.src_node_id} (error {reply.error.code}, "
                        f"{str(reply.error.reason)[:100]}); in a simulation that is no device "
                        "dropout"
                    )
            replies += pulled
            waiting -= {r.metadata.reply_to_message_id for r in pulled}
            if pulled:
                last_reply = time.monotonic()
            elif time.monotonic() - last_reply > self.stall_limit_s:
                left = [m for m in messages if m.metadata.message_id in waiting]
                raise SimulationStalledError(describe_unanswered(left, self.stall_limit_s))
            elif waiting:
                time.sleep(self.poll_s)
        return replies


def patient(grid: Grid, stall_limit_s: float) -> Grid:
    """The grid a run waits on: Flower's simulation grid as a :class:`PatientGrid`, others kept."""
    if getattr(grid, "simulated", None) is None and is_simulation(grid):
        return PatientGrid(grid, stall_limit_s)
    return grid


class _Alarm(BaseException):
    """Raised by :func:`stall_alarm`'s handler; no ``except Exception`` catches it."""


@contextlib.contextmanager
def stall_alarm(
    stall_limit_s: float | None, describe: Callable[[], str]
) -> Iterator[Callable[[], None]]:
    """Raise :class:`SimulationStalledError` when the block goes ``stall_limit_s`` s idle.

    Yields ``progress()``, to call after each reply. The alarm is ``SIGALRM``, so it interrupts a
    ClientApp stuck in Python code or a sleep; main thread only (elsewhere, or with
    ``stall_limit_s = None``, nothing is armed). The message is ``describe()``.
    """
    if stall_limit_s is None or threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    limit = float(stall_limit_s)

    def ring(signum: int, frame: FrameType | None) -> None:
        raise _Alarm

    def progress() -> None:
        signal.setitimer(signal.ITIMER_REAL, limit)

    previous = signal.signal(signal.SIGALRM, ring)
    try:
        progress()
        yield progress
    except _Alarm:
        raise SimulationStalledError(describe()) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
