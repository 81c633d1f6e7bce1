"""One writer per result folder: exclusive locks, link refusal, collision-free new folders.

Pure Python (no flwr, no torch); Linux and other POSIX systems (``fcntl.flock``). See
docs/design.md, "One writer per folder".

Two lock files sit in a folder a run or a comparison writes to, each locked with
``flock(LOCK_EX | LOCK_NB)`` by the process that owns the role, for as long as it lives; the
kernel drops the lock when that process ends, however it ends (``kill -9`` included), so a
lock is never stale:

* :data:`LOCK_FILE` (``.fedcgd.lock``): the *owner*, the command that started the run
  (launcher, in-process engine, ``compare_policies`` / ``reproduce`` for their ``--out`` and
  for each run they execute). The owner's children (the SuperLink, ``flwr-simulation`` and the
  ServerApp in it, a comparison's run processes) find the lock held by an ancestor and work
  under it.
* :data:`WRITER_LOCK_FILE` (``.fedcgd-writer.lock``): the ServerApp that writes the run's
  files, for the whole run. It is never shared: a second writer (a ``flwr run`` started by
  hand, or one left running by a killed owner before it is stopped) is refused.

A process that finds a lock taken is refused with :class:`FolderInUseError`, one line naming the
holder's PID (as the kernel lists it in ``/proc/locks``; the lock files stay empty). Lock files
are opened with ``O_NOFOLLOW`` and never removed (removing a lock file lets two processes lock
two different files of one name). A folder that is a symbolic link or holds one is refused
(:func:`refuse_links`): a link could send a write out of the folder. :func:`new_folder`
creates a folder whose name no other command can take at the same time (``os.mkdir`` fails on
an existing name; the next free ``-2``, ``-3``, ... suffix is taken instead).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from dataclasses import dataclass, field
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


class FolderInUseError(OneLineMessage, ValueError):
    """A folder's lock is held by another process; the message is one complete line.

    Attributes
    ----------
    pid : int or None
        The holder's PID, when it could be read.

    """

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from ``/proc/<pid>/stat`` (None when it cannot be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def self_and_ancestors() -> set[int]:
    """The PIDs of this process and of every process above it (parent, ... up to PID 1)."""
    found = {os.getpid()}
    pid: int | None = os.getppid()
    while pid and pid not in found:
        found.add(pid)
        pid = parent_pid(pid)
    return found


def _holder_from_proc_locks(path: Path) -> int | None:
    """The PID ``/proc/locks`` names for the flock on ``path``'s inode (None if not found)."""
    try:
        st = os.stat(path, follow_symlinks=False)
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    for row in text.splitlines():
        parts = row.split()
        if len(parts) < 6 or parts[1] == "->" or parts[1] != "FLOCK":
            continue
        try:
            major, minor, inode = parts[5].split(":")
            pid = int(parts[4])
            same = (int(major, 16), int(minor, 16), int(inode)) == (
                os.major(st.st_dev),
                os.minor(st.st_dev),
                st.st_ino,
            )
        except ValueError:
            continue
        if same and pid > 0:
            return pid
    return None


def lock_holder(path: Path) -> int | None:
    """The PID holding the flock on ``path``, as the kernel lists it in ``/proc/locks``.

    Nothing is written in a lock file: its holder is what the kernel says, never a stale
    number (None when ``/proc/locks`` cannot be read or names nobody).
    """
    return _holder_from_proc_locks(path)


def describe_process(pid: int | None) -> str:
    """``process 1234 (.venv/bin/fedcgd run ...)``, the command cut at 80 chars."""
    if pid is None:
        return "another process"
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"process {pid}"
    command = " ".join(raw.replace(b"\0", b" ").decode(errors="replace").split())  # one line
    command = command if len(command) <= 80 else command[:77] + "..."
    return f"process {pid} ({command})" if command else f"process {pid}"


def refuse_links(folder: Path, key: str) -> None:
    """Refuse a folder that is a symbolic link or holds one (among its own entries).

    Raises
    ------
    ValueError
        One line naming ``key``, the folder and the link.

    """
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

    Attributes
    ----------
    folder : Path
        The folder (must exist).
    name : str
        :data:`LOCK_FILE` or :data:`WRITER_LOCK_FILE`.
    fd : int or None
        The open, locked lock file; None when not held (or held by an ancestor).
    delegated : bool
        The lock is held by this process or one of its ancestors, on whose behalf this one
        works (see :meth:`acquire`).

    """

    folder: Path
    name: str = LOCK_FILE
    fd: int | None = None
    delegated: bool = False

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
            When the lock is held by this process or an ancestor, work under it
            (:attr:`delegated`) instead of refusing.
        create : bool
            Create the lock file when missing; otherwise a missing lock file is a lock nobody
            holds (nothing is taken, :attr:`fd` stays None).

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
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(self.path)
            os.close(fd)
            if shared_with_ancestors and holder is not None and holder in self_and_ancestors():
                self.delegated = True
                return self
            role = "written by" if self.name == WRITER_LOCK_FILE else "in use by"
            raise FolderInUseError(
                f"{key}: '{self.folder}' is {role} {describe_process(holder)}; one run writes "
                "in a folder at a time: wait for it to end, or stop it first",
                holder,
            ) from None
        self.fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (close the file; the file stays)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
        self.fd = None
        self.delegated = False


def holds_lock_files(folder: Path) -> bool:
    """True when ``folder`` holds a lock file (it was, or is, claimed by some process)."""
    return any(os.path.lexists(folder / name) for name in LOCK_FILES)


def probe_free(folder: Path, key: str) -> None:
    """Refuse a folder whose owner or writer lock is held by an unrelated process.

    Takes and drops both locks at once; creates nothing (a lock file that does not exist is
    a lock nobody holds: every owner and writer creates its lock file first).

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
    """The locks this process holds on a folder (see :func:`claim_folder`).

    Attributes
    ----------
    folder : Path
        The claimed folder.
    owner : FolderLock
        The owner lock (held, or delegated to an ancestor).
    writer : FolderLock or None
        The writer lock, when claimed as the writer.
    created : Path or None
        The outermost folder this claim created (None when the folder existed).

    """

    folder: Path
    owner: FolderLock
    writer: FolderLock | None = None
    created: Path | None = None
    _released: bool = field(default=False, repr=False)

    def release(self) -> None:
        """Drop every lock of the claim."""
        if self.writer is not None:
            self.writer.release()
        self.owner.release()
        self._released = True

    def abandon(self) -> None:
        """Drop the claim; remove the folders it created when they hold nothing but lock files.

        For a run refused before its start: it leaves no folder behind.
        """
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
    """Create ``folder``, or ``folder-2``, ``folder-3``, ... if taken; return the one created.

    ``os.mkdir`` creates a name only if nobody has it, so two commands started in the same
    second never share a timestamped folder.

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
        What names it in the messages (``run-config key 'result-dir'``, ``--out``).
    create : bool
        Create it (and its parents) when missing; otherwise a missing folder is an error.
    writer : bool
        Also take the writer lock (the ServerApp); otherwise only check that no unrelated
        writer holds it.
    fresh_name : bool
        ``folder`` is a default name: create it with :func:`new_folder` (a suffix when taken).

    Returns
    -------
    FolderClaim
        With :attr:`FolderClaim.folder` the folder locked (suffixed for ``fresh_name``).

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
