"""The one way SIGINT and SIGTERM stop a run: noted, held back while files are written, then raised.

See docs/design.md, "Stopped runs".
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Collection, Iterator
from types import FrameType

from fedcgd_config.imports import said
from fedcgd_strategy.errors import OneLineMessage

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_held: list[int] | None = None  # the signals held back while a held() block runs


class Interrupted(OneLineMessage, BaseException):
    """The first SIGINT or SIGTERM of a command: ``stopped by SIGINT`` (``signum``)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


@contextlib.contextmanager
def watching(interrupt: bool = False) -> Iterator[list[int]]:
    """In the block, note SIGINT and SIGTERM (yielded), hold them in :func:`held`, then raise
    :class:`Interrupted` for the first (``interrupt``; repeats: ignored) or call the previous
    handler. Main thread only: elsewhere Python runs no handler.
    """  # noqa: D205
    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    previous = {int(s): signal.getsignal(s) for s in STOP_SIGNALS}

    def dispatch(signum: int, frame: FrameType | None) -> None:
        noted.append(signum)
        if _held is not None:
            _held.append(signum)
        elif interrupt:
            if len(noted) == 1:  # a repeat while stopping: let the clean-up finish
                raise Interrupted(signum)
        elif callable(target := previous[signum]):
            target(signum, frame)
        elif target != signal.SIG_IGN:  # the default: end the process as the signal does
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    for s in STOP_SIGNALS:
        signal.signal(s, dispatch)
    try:
        yield noted
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs; deliver each once after it."""
    global _held
    if _held is not None or threading.current_thread() is not threading.main_thread():
        yield  # nested: the outer block delivers; in a thread: Python runs no handler there
        return
    try:
        with watching():
            _held = []
            yield
    finally:
        came, _held = _held or [], None
        for signum in dict.fromkeys(came):
            signal.raise_signal(signum)


class UserCodeExitError(OneLineMessage, RuntimeError):
    """A ``SystemExit``, ``KeyboardInterrupt``, ... that no signal caused: a failure."""


def as_failure(err: BaseException, noted: Collection[int]) -> BaseException:
    """``err``; a :class:`UserCodeExitError` instead when it would stop a run no signal stopped."""
    if noted or isinstance(err, Exception):
        return err
    return UserCodeExitError(
        f"{said(err)} raised while no stop signal came (a policy, data set, model or aggregator "
        "that raises anything fails the run)"
    )


def exit_code_stopping_on_signals(
    command: Callable[[], int], last_words: Callable[[], str | None] | None = None
) -> int:
    """Run a command's body: its exit code; 128 + signal after a stop; 1 after a stray exit."""
    with watching(interrupt=True) as noted:
        try:
            return command()
        except Interrupted as stop:
            code = 128 + stop.signum
            told = f"{stop}: every process of the run was stopped (exit code {code})"
            print(told, file=sys.stderr, flush=True)
            if line := last_words() if last_words is not None else None:
                print(line, file=sys.stderr, flush=True)
            return code
        except BaseException as err:  # a SystemExit, ... of the researcher's code: a failure
            if (failure := as_failure(err, noted)) is err:
                raise
            print(f"failed: {failure}", file=sys.stderr, flush=True)
            return 1
