"""One writer per result folder: ``flock`` locks, link refusal, collision-free new folders.

Pure Python, POSIX. The owner lock (:data:`LOCK_FILE`) is shared with the processes an owner
starts through the tokens in :data:`OWNERS_ENV`; the writer lock (:data:`WRITER_LOCK_FILE`) is
never shared. See docs/design.md, "One writer per folder".
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fedcgd_task.errors import OneLineMessage

#: The owner's lock file (the command that started the run or the comparison).
LOCK_FILE = ".fedcgd.lock"
#: The writer's lock file (the ServerApp writing the run's files).
WRITER_LOCK_FILE = ".fedcgd-writer.lock"
#: Both lock files (never counted as a run's files).
LOCK_FILES = (LOCK_FILE, WRITER_LOCK_FILE)
#: Suffixes tried by :func:`new_folder` after the bare name (``name-2`` ... ``name-999``).
MAX_NAME_SUFFIX = 999
#: Environment variable: the tokens (space-separated) of the owner locks held by the processes
#: above this one and by this one; a lock held under one of them is this process's too.
OWNERS_ENV = "FEDCGD_LOCK_OWNERS"
#: How long a process that finds a lock taken waits for the holder's line (or the lock's end).
HOLDER_WAIT_S = 2.0


class FolderInUseError(OneLineMessage, ValueError):
    """A folder's lock is held by another process (``pid``, when read); the message is one line."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


def _tokens() -> list[str]:
    """The tokens in :data:`OWNERS_ENV`: locks this process works under."""
    return os.environ.get(OWNERS_ENV, "").split()


def _holder(fd: int) -> tuple[int | None, str, str]:
    """The PID, token and command line the holder wrote in the lock file ``fd``.

    ``(None, "", "")`` when the file holds no such line or names a process that is not alive.
    """
    pid, _, rest = os.pread(fd, 4096, 0).decode(errors="replace").partition(" ")
    token, _, command = rest.partition(" ")
    if not pid.isdigit():
        return None, "", ""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return None, "", ""
    except PermissionError:
        pass  # alive, another user's
    return int(pid), token, command.strip()


def refuse_links(folder: Path, key: str) -> None:
    """Refuse (ValueError, one line naming ``key``) a folder that is a link or holds one."""
    if folder.is_symlink():
        raise ValueError(
            f"{key}: '{folder}' is a symbolic link; give the folder itself (a result folder "
            "is never reached through a link)"
        )
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):  # nothing to hold links: others refuse it
        return
    except OSError as err:
        raise ValueError(f"{key}: '{folder}' cannot be listed ({err.strerror})") from err
    links = sorted(entry.name for entry in entries if entry.is_symlink())
    if links:
        shown = ", ".join(repr(name) for name in links[:3]) + (", ..." if len(links) > 3 else "")
        raise ValueError(
            f"{key}: '{folder}' holds a symbolic link ({shown}); a result folder must hold none "
            "(a write could follow it out of the folder): remove it or give another folder"
        )


@dataclass
class FolderLock:
    """An exclusive ``flock`` on the lock file ``name`` of ``folder``.

    ``fd`` is the locked file (None when not held, or held by an ancestor: ``delegated``);
    ``token`` the random token written in the lock file while held.
    """

    folder: Path
    name: str = LOCK_FILE
    fd: int | None = None
    delegated: bool = False
    token: str = ""

    @property
    def path(self) -> Path:
        """The lock file."""
        return self.folder / self.name

    def acquire(self, key: str, *, shared_with_ancestors: bool, create: bool = True) -> FolderLock:
        """Take the lock, or refuse; return self.

        Parameters
        ----------
        key : str
            What names the folder in the messages (``run-config key 'result-dir'``).
        shared_with_ancestors : bool
            Work under a lock an ancestor holds (listed in :data:`OWNERS_ENV`) instead of refusing.
        create : bool
            Create the lock file when missing; otherwise a missing file is a lock nobody holds.

        Raises
        ------
        FolderInUseError
            Naming the holder's PID.
        ValueError
            When the lock file is a link or cannot be opened.
        """
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as err:
            if err.errno == errno.ENOENT and not create:
                return self
            if err.errno == errno.ELOOP:
                raise ValueError(
                    f"{key}: '{self.path}' is a symbolic link; a result folder must hold none"
                ) from err
            raise ValueError(
                f"{key}: cannot create the lock file '{self.path}' ({err.strerror})"
            ) from err
        holder, token, command = None, "", ""
        deadline = time.monotonic() + HOLDER_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder, token, command = _holder(fd)
                if holder is not None or time.monotonic() > deadline:
                    os.close(fd)
                    if shared_with_ancestors and holder is not None and token in _tokens():
                        self.delegated = True
                        return self
                    who = f"process {holder}" if holder is not None else "another process"
                    role = "written by" if self.name == WRITER_LOCK_FILE else "in use by"
                    shown = f" ({command})" if command else ""
                    raise FolderInUseError(
                        f"{key}: '{self.folder}' is {role} {who}{shown}; one run writes in a "
                        "folder at a time: wait for it to end, or stop it first",
                        holder,
                    ) from None
                time.sleep(0.01)
        self.token = secrets.token_hex(8)
        command = " ".join(" ".join(sys.orig_argv).split())  # one line, cut at 80 characters
        command = command if len(command) <= 80 else command[:77] + "..."
        with contextlib.suppress(OSError):  # a full disk: the lock holds, unnamed
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {self.token} {command}".encode())
        if self.name == LOCK_FILE:  # for the processes this one starts from now on
            os.environ[OWNERS_ENV] = " ".join([*_tokens(), self.token])
        self.fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (close the file; the file stays)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)  # a file read in a later holder's first moment is empty
            with contextlib.suppress(OSError):
                os.close(self.fd)
            others = [token for token in _tokens() if token != self.token]
            if others:
                os.environ[OWNERS_ENV] = " ".join(others)
            else:
                os.environ.pop(OWNERS_ENV, None)
        self.fd = None
        self.delegated = False


def holds_lock_files(folder: Path) -> bool:
    """True when ``folder`` holds a lock file (it was, or is, claimed by some process)."""
    return any(os.path.lexists(folder / name) for name in LOCK_FILES)


def probe_free(folder: Path, key: str) -> None:
    """Refuse a folder whose owner or writer lock an unrelated process holds; creates nothing.

    Raises
    ------
    FolderInUseError, ValueError
        As :meth:`FolderLock.acquire`.
    """
    if not folder.is_dir():
        return
    for name in LOCK_FILES:
        lock = FolderLock(folder, name)
        lock.acquire(key, shared_with_ancestors=name == LOCK_FILE, create=False)
        lock.release()


@dataclass
class FolderClaim:
    """The locks this process holds on ``folder``.

    ``owner``; the ``writer`` lock if claimed as the writer; ``created``, the outermost folder the
    claim created (None when it existed).
    """

    folder: Path
    owner: FolderLock
    writer: FolderLock | None = None
    created: Path | None = None

    def release(self) -> None:
        """Drop every lock of the claim."""
        if self.writer is not None:
            self.writer.release()
        self.owner.release()

    def abandon(self) -> None:
        """Drop the claim; remove the folders it created if they hold nothing but lock files."""
        self.release()
        if self.created is None:
            return
        folder = self.folder
        try:
            if {entry.name for entry in os.scandir(folder)} - set(LOCK_FILES):
                return
            for name in LOCK_FILES:
                with contextlib.suppress(FileNotFoundError):
                    (folder / name).unlink()
            while True:
                folder.rmdir()
                if folder == self.created:
                    break
                folder = folder.parent
        except OSError:
            return

    def __enter__(self) -> FolderClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist (None when ``path`` exists)."""
    missing = None
    for folder in (path, *path.parents):
        if os.path.lexists(folder):
            break
        missing = folder
    return missing


def _mkdir(folder: Path, key: str, *, exclusive: bool) -> None:
    """``mkdir -p``; ValueError naming ``key`` when it cannot be created."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(exist_ok=not exclusive)
    except FileExistsError:
        raise
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ValueError(f"{key} = '{folder}' cannot be created ({reason})") from err
    if not folder.is_dir():
        raise ValueError(f"{key} = '{folder}' is a file; give a new or empty folder")


def new_folder(folder: Path, key: str) -> Path:
    """Create ``folder``, or ``folder-2``, ``folder-3``, ... if taken (``os.mkdir`` is exclusive).

    Raises
    ------
    ValueError
        When none of the names can be created.
    """
    for count in range(1, MAX_NAME_SUFFIX + 1):
        name = folder if count == 1 else folder.with_name(f"{folder.name}-{count}")
        try:
            _mkdir(name, key, exclusive=True)
        except FileExistsError:
            continue
        return name
    raise ValueError(f"{key}: '{folder}' and {MAX_NAME_SUFFIX - 1} suffixed names all exist")


def claim_folder(
    folder: Path,
    key: str,
    *,
    create: bool = True,
    writer: bool = False,
    fresh_name: bool = False,
) -> FolderClaim:
    """Create (if asked) and lock a result folder for this process.

    Parameters
    ----------
    folder : Path
        The folder.
    key : str
        What names it in the messages.
    create : bool
        Create it when missing; otherwise a missing folder is an error.
    writer : bool
        Also take the writer lock; otherwise only check that no unrelated writer holds it.
    fresh_name : bool
        ``folder`` is a default name: create it with :func:`new_folder`.

    Raises
    ------
    FolderInUseError
        The folder is in use by another process (its PID named).
    ValueError, FileNotFoundError
        It cannot be created, is missing (``create=False``), or is or holds a link.
    """
    created = None
    if fresh_name:
        created = first_missing(folder.parent)
        folder = new_folder(folder, key)
        created = created or folder
    elif not os.path.lexists(folder):
        if not create:
            raise FileNotFoundError(f"{key} = '{folder}': no such folder")
        created = first_missing(folder)
        try:
            _mkdir(folder, key, exclusive=False)
        except FileExistsError as err:
            raise ValueError(f"{key} = '{folder}' is a file; give a new or empty folder") from err
    refuse_links(folder, key)
    if not folder.is_dir():
        raise ValueError(f"{key} = '{folder}' is a file; give a new or empty folder")
    owner = FolderLock(folder).acquire(key, shared_with_ancestors=True)
    claim = FolderClaim(folder, owner, created=created)
    try:
        writer_lock = FolderLock(folder, WRITER_LOCK_FILE)
        writer_lock.acquire(key, shared_with_ancestors=False)
        if writer:
            claim.writer = writer_lock
        else:
            writer_lock.release()
    except BaseException:
        claim.abandon()
        raise
    return claim
