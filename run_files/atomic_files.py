"""Writing the files of a result folder: whole or not at all, never through a link, one-line errors.

Pure Python. Whole files go through an exclusive temporary file, an fsync (unless a file
rewritten every round) and a rename; metrics lines are appended through ``O_NOFOLLOW`` without
an fsync; :func:`sync_files` makes files and their folder durable. A stop signal waits for the
write to end; an :class:`OSError` becomes :class:`ResultWriteError`.
See docs/design.md, "Result folders" and "Stopped runs".
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import BinaryIO

from fedcgd_task.errors import OneLineMessage

#: Mode of the files written (the temporary files start at mkstemp's 0600).
FILE_MODE = 0o644


class ResultWriteError(OneLineMessage, Exception):
    """A file of a result folder could not be written; the message is one complete line.

    ``errno`` is the underlying :class:`OSError`'s (``errno.ENOSPC`` for a full disk); ``path``
    the file being written.
    """

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

    A signal received meanwhile is raised again after the previous handlers are back. Does nothing
    outside the main thread (Python runs handlers there only) and in a nested block.
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


def atomic_write(
    path: str | os.PathLike[str], write: Callable[[BinaryIO], object], *, durable: bool = True
) -> Path:
    """Write a whole file: ``write(handle)`` fills a temporary file that replaces ``path``.

    Readers see the old file or the new one, never a part, also after the process is killed.

    Parameters
    ----------
    path : str or os.PathLike
        The file to (re)place; its folder must exist.
    write : callable
        Writes the content to the binary handle it gets.
    durable : bool
        The file is fsynced before its rename (its new name is durable once its folder is:
        :func:`sync_files`). False: no fsync (a file rewritten every round).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    ResultWriteError
        Naming ``path``; no temporary file is left.
    """
    target = Path(path)
    tmp: str | None = None
    with stop_signals_held(), writing(target):
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                write(handle)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, target)
            tmp = None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> Path:
    """Write ``data`` as the whole of ``path`` (:func:`atomic_write`)."""
    return atomic_write(path, lambda handle: handle.write(data), durable=durable)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, durable: bool = True) -> Path:
    """Write ``text`` (UTF-8) as the whole of ``path`` (:func:`atomic_write`)."""
    return atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def _fsync_path(path: str | os.PathLike[str], flags: int) -> None:
    """Open ``path`` with ``flags`` (plus ``O_CLOEXEC``), fsync it and close it."""
    fd = os.open(path, flags | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_files(folder: str | os.PathLike[str], names: Iterable[str]) -> None:
    """Make the files ``names`` of ``folder`` (those that exist) and the folder itself durable.

    An fsync of each file (never through a link), then of the folder (its renames and new
    names). What :func:`append_line` and a non-durable :func:`atomic_write` left in the page
    cache survives a killed process already; after this it survives a crash of the system too.

    Raises
    ------
    ResultWriteError
        Naming the file or folder that could not be synced.
    """
    with stop_signals_held():
        for name in names:
            path = Path(folder) / name
            with writing(path):
                try:
                    _fsync_path(path, os.O_RDONLY | os.O_NOFOLLOW)
                except FileNotFoundError:
                    continue
        with writing(folder):
            _fsync_path(folder, os.O_RDONLY | os.O_DIRECTORY)


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` plus a newline to ``path``; never through a link.

    Once it returns the line is in the file (a killed process keeps it); not fsynced: a crash
    of the system may lose it until :func:`sync_files`.

    Raises
    ------
    ResultWriteError
        Naming ``path``.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    data = (line + "\n").encode("utf-8")
    with stop_signals_held(), writing(path):
        fd = os.open(path, flags, FILE_MODE)
        try:
            written = os.write(fd, data)
            while written < len(data):  # a short write (signal, nearly full disk): the rest
                written += os.write(fd, data[written:])
        finally:
            os.close(fd)


def open_log(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a log file for appending (binary), never through a link; ResultWriteError naming it."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    with writing(path):
        fd = os.open(path, flags, FILE_MODE)
        return os.fdopen(fd, "ab")
