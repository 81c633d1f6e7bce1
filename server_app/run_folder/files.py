"""A run folder's files: written whole (temp file, ``os.replace``) or appended; read with bounds.

Never through a link. See docs/design.md, "Result folders" and "Failed writes".
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

#: Largest JSON file read (bytes), and deepest nesting of arrays and objects read.
MAX_JSON_BYTES, MAX_JSON_DEPTH = 64 * 2**20, 64


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
    """Replace ``path`` by ``content`` (text, bytes, or a function writing a binary handle)
    through an exclusive temporary file beside it (fsynced when ``durable``), renamed over it.
    """  # noqa: D205
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
