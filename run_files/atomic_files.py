"""Writing the files of a result folder: whole or not at all, never through a link, one-line errors.

Pure Python (no flwr, no torch). Every file a run or an experiment command writes goes through
here (docs/design.md, "Result folders"):

* :func:`atomic_write` and its text / bytes forms write a whole file: the content goes to a
  temporary file created *exclusively* in the same folder (:func:`tempfile.mkstemp`:
  ``O_CREAT | O_EXCL | O_NOFOLLOW``, a unique random name, mode 0600 then 0644), is flushed and
  fsynced, and is renamed over the target (``os.replace``, atomic on POSIX; a link at the
  target's name is replaced, never followed). A crash leaves the old file or the new one; a
  failure removes the temporary file. A planted ``checkpoint.tmp`` or ``model.tmp`` (or any
  other name) cannot redirect a write: the temporary name is never one that exists.
* :func:`append_line` appends one line to ``metrics.jsonl`` through ``O_NOFOLLOW``, flushed and
  fsynced.
* A SIGINT or SIGTERM that arrives while a file is written waits until the write is done
  (:func:`stop_signals_held`), so a stop never tears a file or turns into a failure of the
  write itself (``torch.save`` interrupted mid-file raised ``RuntimeError: unexpected pos``).
* An :class:`OSError` while writing (disk full, quota, read-only file system, I/O error)
  becomes :class:`ResultWriteError`, whose message is the one line to show:
  ``no space left on device while writing /abs/path/metrics.jsonl``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import BinaryIO

from fedcgd_task.errors import OneLineMessage

#: Mode of the files written (the temporary files start at mkstemp's 0600).
FILE_MODE = 0o644


class ResultWriteError(OneLineMessage, Exception):
    """A file of a result folder could not be written; the message is one complete line.

    Attributes
    ----------
    errno : int or None
        The ``errno`` of the underlying :class:`OSError` (``errno.ENOSPC`` for a full disk).
    path : str
        The file that was being written.

    """

    #: The message is the whole line to show (no ``Type:`` prefix, see
    #: :func:`run_files.run_status.one_line`).

    def __init__(self, message: str, *, errno_code: int | None, path: str) -> None:
        super().__init__(message)
        self.errno = errno_code
        self.path = path

    @property
    def disk_full(self) -> bool:
        """True for a full disk or an exhausted quota."""
        return self.errno in (errno.ENOSPC, errno.EDQUOT)


def io_reason(err: OSError) -> str:
    """What went wrong, in lower case: ``no space left on device``, ``read-only file system``."""
    if err.errno is not None:
        text = os.strerror(err.errno)
    else:
        text = str(err) or type(err).__name__
    return text[:1].lower() + text[1:]


#: The signals that stop a run (the commands turn them into a clean stop).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: True while :func:`stop_signals_held` holds the signals back (the outermost block delivers).
_holding = False


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs; deliver them once it has ended.

    Around every write of a result file: a stop takes effect between writes, never inside one.
    A signal received meanwhile is raised again (:func:`signal.raise_signal`, once per signal)
    after the handlers in place before the block are back, so it does exactly what it would
    have done, only later (the commands' handler raises
    :class:`experiments.run.processes.Interrupted` there). Python runs signal handlers in the
    main thread only: elsewhere (the ServerApp's thread in Flower's simulation process) and in
    a nested block this does nothing. A signal whose handler was not set from Python is not
    held (it could not be put back).
    """
    global _holding
    if _holding or threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        held.append(signum)

    previous = {s: h for s in STOP_SIGNALS if (h := signal.getsignal(s)) is not None}
    for s in previous:
        signal.signal(s, hold)
    _holding = True
    try:
        yield
    finally:
        _holding = False
        for s, handler in previous.items():
            signal.signal(s, handler)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


@contextlib.contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an OSError raised in the block into :class:`ResultWriteError` naming ``path``."""
    try:
        yield
    except ResultWriteError:
        raise
    except OSError as err:
        where = os.fspath(path)
        raise ResultWriteError(
            f"{io_reason(err)} while writing {where}", errno_code=err.errno, path=where
        ) from err


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> Path:
    """Write a whole file: ``write(handle)`` fills a temporary file that replaces ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        The file to (re)place; its folder must exist.
    write : callable
        Writes the content to the binary handle it gets (``torch.save``, ``np.savez``,
        ``figure.savefig`` and ``handle.write`` all take one).

    Returns
    -------
    pathlib.Path
        ``path``.

    A SIGINT / SIGTERM received meanwhile takes effect once the file is in place
    (:func:`stop_signals_held`).

    Raises
    ------
    ResultWriteError
        Naming ``path`` (disk full, I/O error, ...); no temporary file is left.

    """
    target = Path(path)
    tmp: str | None = None
    with stop_signals_held(), writing(target):
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, target)
            tmp = None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` as the whole of ``path`` (:func:`atomic_write`)."""
    return atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) as the whole of ``path`` (:func:`atomic_write`)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` plus a newline to ``path``, flushed to disk; never through a link.

    Raises
    ------
    ResultWriteError
        Naming ``path``; a link at ``path`` fails with "too many levels of symbolic links".

    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    data = (line + "\n").encode("utf-8")
    with stop_signals_held(), writing(path):
        fd = os.open(path, flags, FILE_MODE)
        try:
            written = os.write(fd, data)
            while written < len(data):  # a short write (signal, nearly full disk): the rest
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)


def open_log(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a log file for appending (binary), never through a link (``O_NOFOLLOW``).

    Raises
    ------
    ResultWriteError
        Naming ``path``.

    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    with writing(path):
        fd = os.open(path, flags, FILE_MODE)
        return os.fdopen(fd, "ab")
