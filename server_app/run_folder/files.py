"""A run folder's files (written whole or appended, never through a link, read with bounds) and
the one handling of SIGINT / SIGTERM (held while files are written). See docs/design.md.
"""  # noqa: D205

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from fedcgd_config.imports import said
from fedcgd_strategy.errors import OneLineMessage

#: Largest JSON file read (bytes), and deepest nesting of arrays and objects read.
MAX_JSON_BYTES, MAX_JSON_DEPTH = 64 * 2**20, 64
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_held: list[int] | None = None  # the signals held back while a held() block runs


class Interrupted(OneLineMessage, BaseException):
    """The first SIGINT or SIGTERM of a command: ``stopped by SIGINT`` (``signum``)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


@contextlib.contextmanager
def watching(interrupt: bool = False) -> Iterator[list[int]]:
    """Note SIGINT / SIGTERM (yielded); raise :class:`Interrupted` for the first (``interrupt``),
    else call the previous handler; held in :func:`held`. Main thread only (Python's rule)."""  # noqa: D205, D209
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
            print(
                f"{stop}: every process of the run was stopped (exit code {code})", file=sys.stderr
            )
            if last_words is not None and (line := last_words()):
                print(line, file=sys.stderr, flush=True)
            return code
        except BaseException as err:  # a SystemExit, ... of the researcher's code: a failure
            if (failure := as_failure(err, noted)) is err:
                raise
            print(f"failed: {failure}", file=sys.stderr, flush=True)
            return 1


class ResultWriteError(OneLineMessage, Exception):
    """A file of a run folder could not be written (``errno``, ``path``); one line."""

    def __init__(self, message: str, *, errno_code: int | None, path: str) -> None:
        super().__init__(message)
        self.errno, self.path = errno_code, path
        self.disk_full = errno_code in (errno.ENOSPC, errno.EDQUOT)


@contextlib.contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold stop signals; turn an OSError into :class:`ResultWriteError` naming ``path``."""
    try:
        with held():
            yield
    except OSError as err:
        text = os.strerror(err.errno) if err.errno else str(err) or type(err).__name__
        where = os.fspath(path)
        raise ResultWriteError(
            f"{text[:1].lower()}{text[1:]} while writing {where}", errno_code=err.errno, path=where
        ) from err


def atomic_write(
    path: str | os.PathLike[str],
    content: str | bytes | Callable[[BinaryIO], object],
    *,
    durable: bool = True,
) -> Path:
    """Replace ``path`` by ``content`` (text, bytes, or a writer of a binary handle) through a
    new temporary file beside it (fsynced when ``durable``) renamed over it."""  # noqa: D205, D209
    target = Path(path)
    with writing(target):
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                if callable(content):
                    content(handle)
                else:
                    handle.write(content.encode() if isinstance(content, str) else content)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return target


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` and a newline to ``path`` (not fsynced: :func:`sync_files`)."""
    data = (line + "\n").encode()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    with writing(path):
        fd = os.open(path, flags, 0o644)
        try:
            while data:  # a short write (signal, nearly full disk): the rest
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)


def sync_files(folder: str | os.PathLike[str], names: Iterable[str]) -> None:
    """Fsync the files ``names`` of ``folder`` that exist, then the folder itself."""
    files = [(Path(folder, name), os.O_NOFOLLOW) for name in names]
    for path, flags in [*files, (folder, os.O_DIRECTORY)]:
        with writing(path), contextlib.suppress(FileNotFoundError):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | flags)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        value = list(value.values())
    return 1 + max(map(_depth, value), default=0) if isinstance(value, list) else 0


def parse_json(text: str | bytes, where: str) -> Any:
    """``json.loads(text)``; ValueError naming ``where`` for bad JSON or too deep a nesting."""
    try:
        value = json.loads(text)
        deep = _depth(value) > MAX_JSON_DEPTH
    except RecursionError:  # deeper than json's own limit
        deep = True
    except ValueError as err:
        raise ValueError(f"{where} is not valid JSON ({str(err).splitlines()[0]})") from err
    if deep:
        raise ValueError(f"{where} nests deeper than {MAX_JSON_DEPTH} levels; not a file of a run")
    return value


def read_json_object(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> dict:
    """The JSON object in ``path``; OSError, or ValueError (one line) when it is not one."""
    with open(path, "rb") as handle:
        size = max(os.fstat(handle.fileno()).st_size, len(data := handle.read(max_bytes + 1)))
    where = os.fspath(path)
    if size > max_bytes:
        raise ValueError(f"{where} holds {size} bytes, more than the {max_bytes} a run writes")
    value = parse_json(data.decode("utf-8", errors="replace"), where)
    if not isinstance(value, dict):
        raise ValueError(f"{where} holds a JSON {type(value).__name__}, not an object")
    return value
