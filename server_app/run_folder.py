"""Taking a run's result folder: lock it, then check under the lock what the run may do there.

The checks of a folder (a new run: not a file, no run's files yet; a resume: a checkpoint, the
same settings, rounds left) are only true while nobody else writes there, so they run under the
folder's locks (:mod:`run_files.folder_lock`, docs/design.md, "One writer per folder"). A
folder that already exists is locked first, so that a run still alive in it is named (its PID)
rather than described by its files; a missing folder is checked before it is created, so that a
refused run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from run_files.folder_lock import FolderClaim, claim_folder
from run_files.results import check_new_result_dir
from run_files.run_status import RUN_FILES
from server_app.checkpoint import ResumePlan, check_resume
from server_app.config import RunConfig


def folder_key(config: RunConfig) -> str:
    """The run-config key that names the run's folder: ``resume-from`` or ``result-dir``."""
    return "run-config key " + ("'resume-from'" if config.resume_from else "'result-dir'")


def check_result_dir(config: RunConfig) -> ResumePlan | None:
    """The checks before a run writes anything in its result folder.

    A new run refuses a folder that is a file or already holds a run's results; a resumed run
    checks that its folder can be continued (:func:`server_app.checkpoint.check_resume`).

    Returns
    -------
    ResumePlan or None
        How to continue the run (None for a new run).

    Raises
    ------
    ValueError, FileNotFoundError
        One line naming the run-config key.
    """
    if config.resume_from:
        return check_resume(config)
    check_new_result_dir(config.result_dir)
    return None


@dataclasses.dataclass
class ClaimedRun:
    """A run's folder, locked by this process, and what the run does there.

    Attributes
    ----------
    config : RunConfig
        The run config (``result_dir`` the folder actually taken: a default name may have got
        a suffix).
    claim : FolderClaim
        The locks held.
    plan : ResumePlan or None
        How to continue a resumed run (None for a new run).

    """

    config: RunConfig
    claim: FolderClaim
    plan: ResumePlan | None


def claim_run_folder(config: RunConfig, *, writer: bool, fresh_name: bool = False) -> ClaimedRun:
    """Lock the run's folder (creating it for a new run) and check it under the lock.

    Parameters
    ----------
    config : RunConfig
        The validated run config.
    writer : bool
        Take the writer lock too (the ServerApp).
    fresh_name : bool
        ``config.result_dir`` is a default name (``<policy>-<UTC time>``): create it under a
        name nobody else has (``-2``, ``-3``, ... when taken).

    Raises
    ------
    FolderInUseError
        Another process holds the folder (its PID named).
    ValueError, FileNotFoundError
        The checks of :func:`check_result_dir`, or a folder that cannot be created or holds
        a symbolic link.
    """
    folder = Path(config.result_dir)
    key = folder_key(config)
    existed = os.path.lexists(folder)
    if not existed and not fresh_name:
        check_result_dir(config)  # refused before anything is created
    claim = claim_folder(
        folder, key, create=not config.resume_from, writer=writer, fresh_name=fresh_name
    )
    try:
        if fresh_name:
            config = dataclasses.replace(config, result_dir=str(claim.folder))
        plan = check_result_dir(config)
    except BaseException:
        claim.abandon()
        raise
    if writer:
        remove_stale_temporaries(claim.folder)
    return ClaimedRun(config, claim, plan)


def remove_stale_temporaries(folder: Path) -> list[str]:
    """Remove the temporary files a killed writer left (``.<run file>.<random>.tmp``).

    Called by the writer once it holds the folder's writer lock: no other process writes
    there, so a temporary file of a run file's name is a leftover (a process killed between
    creating it and renaming it). Only regular files of that pattern go; returns their names.
    """
    removed = []
    for entry in os.scandir(folder):
        name = entry.name
        ours = any(name.startswith(f".{run_file}.") for run_file in RUN_FILES)
        if ours and name.endswith(".tmp") and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed.append(name)
    return removed
