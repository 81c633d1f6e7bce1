"""One writer per run folder: an owner lock shared with the processes the owner starts (their
:data:`OWNERS_ENV`), a writer lock never shared; see docs/design.md, "One writer per folder".
"""  # noqa: D205

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from fedcgd_strategy.errors import OneLineMessage

LOCK_FILE, WRITER_LOCK_FILE = ".fedcgd.lock", ".fedcgd-writer.lock"
LOCK_FILES = (LOCK_FILE, WRITER_LOCK_FILE)
#: The PIDs of this process and those above it that hold owner locks, space-separated.
OWNERS_ENV = "FEDCGD_LOCK_OWNERS"


class FolderInUseError(OneLineMessage, ValueError):
    """A folder's lock is held by another process (``pid``, when known); one line."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


def _holder(path: Path) -> tuple[int | None, str]:
    """The live PID and command line written in the lock file (``None, ""``: none)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            pid, _, command = os.read(fd, 4096).decode(errors="replace").partition(" ")
        finally:
            os.close(fd)
        if pid.isdigit() and int(pid) > 0:
            with contextlib.suppress(PermissionError):  # alive, another user's (dead: OSError)
                os.kill(int(pid), 0)
            return int(pid), command.strip()
    return None, ""


def _sign(fd: int) -> None:
    """Write ``PID command line`` (80 characters at most) in a lock file just taken."""
    command = " ".join(" ".join(sys.orig_argv).split())[:80]
    with contextlib.suppress(OSError):  # a full disk: the lock holds, unnamed
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {command}".encode(), 0)


def _owners() -> list[str]:
    return os.environ.get(OWNERS_ENV, "").split()


def take_lock(folder: Path, name: str, key: str, *, shared: bool) -> FileLock | None:
    """Lock ``folder / name``; None when ``shared`` and an owner above this process holds it.

    Raises :class:`FolderInUseError`, or ValueError for a lock file that cannot be opened.
    """
    path = folder / name
    lock = FileLock(path, thread_local=False, preserve_lock_file=True, on_acquired=_sign)
    try:
        lock.acquire(timeout=2.0, poll_interval=0.01, cancel_check=lambda: bool(_holder(path)[0]))
    except Timeout:
        pid, command = _holder(path)
        if shared and pid is not None and str(pid) in _owners():
            return None
        who = f"process {pid}" + (f" ({command})" if command else "") if pid else "another process"
        role = "written by" if name == WRITER_LOCK_FILE else "in use by"
        raise FolderInUseError(
            f"{key}: '{folder}' is {role} {who}; one run writes in a folder at a time: wait for "
            "it to end, or stop it first",
            pid,
        ) from None
    except OSError as err:
        raise ValueError(f"{key}: cannot open the lock file '{path}' ({err.strerror})") from err
    if name == LOCK_FILE and str(os.getpid()) not in _owners():  # for the processes started now
        os.environ[OWNERS_ENV] = " ".join([*_owners(), str(os.getpid())])
    return lock


def let_go(lock: FileLock | None) -> None:
    """Empty the lock file (no stale line for the next holder) and unlock it."""
    if lock is not None and lock.is_locked:
        with contextlib.suppress(OSError):
            fd = os.open(lock.lock_file, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            os.ftruncate(fd, 0)
            os.close(fd)
        lock.release()


def refuse_links(folder: Path, key: str) -> None:
    """Refuse (ValueError, one line naming ``key``) a folder that is a link or holds one."""
    if folder.is_symlink():
        raise ValueError(f"{key}: '{folder}' is a symbolic link; give the folder itself")
    try:
        links = sorted(repr(entry.name) for entry in os.scandir(folder) if entry.is_symlink())
    except (FileNotFoundError, NotADirectoryError):  # nothing to hold links: others refuse it
        return
    except OSError as err:
        raise ValueError(f"{key}: '{folder}' cannot be listed ({err.strerror})") from err
    if links:
        raise ValueError(
            f"{key}: '{folder}' holds a symbolic link ({', '.join(links[:3])}); a result folder "
            "holds none (a write could follow it out): remove it or give another folder"
        )


def probe_free(folder: Path, key: str) -> None:
    """Refuse a folder that holds a link or whose lock another process holds; creates nothing."""
    refuse_links(folder, key)
    for name in LOCK_FILES:
        if os.path.lexists(folder / name):
            let_go(take_lock(folder, name, key, shared=name == LOCK_FILE))


@dataclass
class FolderClaim:
    """The locks held on ``folder`` (``owner`` None: held above), the first folder ``created``."""

    folder: Path
    owner: FileLock | None = None
    writer: FileLock | None = None
    created: Path | None = None

    def release(self) -> None:
        """Let go of every lock of the claim."""
        let_go(self.writer)
        let_go(self.owner)
        self.owner = self.writer = None

    def abandon(self) -> None:
        """Release; remove the folders the claim created if they hold nothing but lock files."""
        self.release()
        folder = self.folder
        with contextlib.suppress(OSError):
            if self.created is None or set(os.listdir(folder)) - set(LOCK_FILES):
                return
            for name in LOCK_FILES:
                (folder / name).unlink(missing_ok=True)
            while folder != self.created.parent:
                folder.rmdir()
                folder = folder.parent

    def __enter__(self) -> FolderClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim_folder(
    folder: Path, key: str, *, create: bool = True, writer: bool = False, fresh_name: bool = False
) -> FolderClaim:
    """Create (if ``create``) and lock a run folder; ``writer``: keep the writer lock (else only
    check that no other writer holds it); ``fresh_name``: suffixed ``-2``, ``-3``, ... when taken.
    """  # noqa: D205
    base = folder.parent if fresh_name else folder
    created = next((f for f in (*reversed(base.parents), base) if not os.path.lexists(f)), None)
    if created is not None and not create and not fresh_name:
        raise FileNotFoundError(f"{key} = '{folder}': no such folder")
    names = [folder.with_name(f"{folder.name}-{n}") for n in range(2, 1000)] if fresh_name else []
    for name in [folder, *names] if created is not None or fresh_name else []:
        try:
            name.mkdir(parents=True, exist_ok=not fresh_name)
            folder, created = name, created or name
            break
        except FileExistsError:
            continue
        except OSError as err:
            raise ValueError(f"{key} = '{name}' cannot be created ({err.strerror})") from err
    else:
        if fresh_name:
            raise ValueError(f"{key}: '{folder}' and 998 suffixed names all exist")
    refuse_links(folder, key)
    if not folder.is_dir():
        raise ValueError(f"{key} = '{folder}' is a file; give a new or empty folder")
    claim = FolderClaim(folder, created=created)
    try:
        claim.owner = take_lock(folder, LOCK_FILE, key, shared=True)
        claim.writer = take_lock(folder, WRITER_LOCK_FILE, key, shared=False)
        if not writer:
            let_go(claim.writer)
            claim.writer = None
    except BaseException:
        claim.abandon()
        raise
    return claim
