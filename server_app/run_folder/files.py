"""A result folder's files: written whole or not at all, never through a link; read with bounds.

Whole files go through an exclusive temporary file, an fsync (unless rewritten every round) and a
rename; lines are appended without an fsync until :func:`sync_files`. A stop signal waits for the
write to end; an :class:`OSError` becomes a one-line :class:`ResultWriteError`. See docs/design.md,
"Failed writes", "Stopped runs" and "Safe loading".
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from fedcgd_strategy.errors import OneLineMessage
from server_app.run_folder.signals import held

FILE_MODE = 0o644
#: Largest JSON file read (bytes), and deepest nesting of arrays and objects read.
MAX_JSON_BYTES, MAX_JSON_DEPTH = 64 * 2**20, 64
#: Flags of a file appended to (never through a link).
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class ResultWriteError(OneLineMessage, Exception):
    """A file of a result folder could not be written (``errno``, ``path``); one line."""

    def __init__(self, message: str, *, errno_code: int | None, path: str) -> None:
        super().__init__(message)
        self.errno = errno_code
        self.path = path

    @property
    def disk_full(self) -> bool:
        """True for a full disk or an exhausted quota."""
        return self.errno in (errno.ENOSPC, errno.EDQUOT)


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
    """Replace ``path`` by ``content`` (text as UTF-8, or a function writing a binary handle).

    Readers see the old file or the new one, also after a kill. ``durable``: fsynced before the
    rename (False for a file rewritten every round: :func:`sync_files` later). Raises
    :class:`ResultWriteError` naming ``path``, and leaves no temporary file.
    """
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
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return target


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` and a newline to ``path`` (a killed process keeps it; not fsynced)."""
    data = (line + "\n").encode()
    with writing(path):
        fd = os.open(path, _APPEND, FILE_MODE)
        try:
            written = 0
            while written < len(data):  # a short write (signal, nearly full disk): the rest
                written += os.write(fd, data[written:])
        finally:
            os.close(fd)


def _fsync(path: str | os.PathLike[str], flags: int) -> None:
    fd = os.open(path, flags | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_files(folder: str | os.PathLike[str], names: Iterable[str]) -> None:
    """Fsync the files ``names`` of ``folder`` that exist, then the folder (its new names)."""
    for name in names:
        with writing(Path(folder) / name), contextlib.suppress(FileNotFoundError):
            _fsync(Path(folder) / name, os.O_RDONLY | os.O_NOFOLLOW)
    with writing(folder):
        _fsync(folder, os.O_RDONLY | os.O_DIRECTORY)


def _too_deep(value: Any, levels: int = MAX_JSON_DEPTH) -> bool:
    """True when ``value`` nests lists and dicts more than ``levels`` deep."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return levels == 0 or any(_too_deep(item, levels - 1) for item in value)
    return False


def parse_json(text: str | bytes, where: str) -> Any:
    """``json.loads(text)``; ValueError naming ``where`` for bad JSON or too deep a nesting."""
    try:
        value = json.loads(text)
        deep = _too_deep(value)
    except RecursionError:  # deeper than json's own limit
        deep = True
    except ValueError as err:
        raise ValueError(f"{where} is not valid JSON ({str(err).splitlines()[0]})") from err
    if deep:
        raise ValueError(f"{where} nests deeper than {MAX_JSON_DEPTH} levels; not a file of a run")
    return value


def read_json_object(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> dict:
    """The JSON object in ``path``.

    Raises OSError when unreadable; ValueError (one line naming the file) when larger than
    ``max_bytes``, not JSON, too deep or not an object.
    """
    with open(path, "rb") as handle:
        size = max(os.fstat(handle.fileno()).st_size, len(data := handle.read(max_bytes + 1)))
    if size > max_bytes:
        raise ValueError(
            f"{os.fspath(path)} holds {size} bytes, more than the {max_bytes} a run writes; "
            "not a file of a run"
        )
    value = parse_json(data.decode("utf-8", errors="replace"), os.fspath(path))
    if not isinstance(value, dict):
        raise ValueError(f"{os.fspath(path)} holds a JSON {type(value).__name__}, not an object")
    return value
