"""Taking a run's result folder: lock it, then check under the lock what the run may do there.

An existing folder is locked first (a live run there is named by its PID); a missing one is
checked before it is created (docs/design.md, "One writer per folder").
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from run_files.folder_lock import FolderClaim, claim_folder
from run_files.results import RUN_FILES, check_new_result_dir
from server_app.checkpoint import ResumePlan, check_resume
from server_app.config import RunConfig


def check_result_dir(config: RunConfig) -> ResumePlan | None:
    """The checks before a run writes in its folder; the resume plan, or None for a new run.

    Raises ValueError or FileNotFoundError, one line naming the run-config key.
    """
    if config.resume_from:
        return check_resume(config)
    check_new_result_dir(config.result_dir)
    return None


@dataclasses.dataclass
class ClaimedRun:
    """A run's folder locked by this process (``config.result_dir``), and the resume plan."""

    config: RunConfig
    claim: FolderClaim
    plan: ResumePlan | None


def claim_run_folder(config: RunConfig, *, writer: bool, fresh_name: bool = False) -> ClaimedRun:
    """Lock the run's folder (creating it for a new run) and check it under the lock.

    ``writer``: take the writer lock too (the ServerApp); ``fresh_name``: ``config.result_dir``
    is a default name, suffixed when taken. Raises what :func:`check_result_dir` and
    :func:`run_files.folder_lock.claim_folder` raise (a live holder named by its PID).
    """
    folder = Path(config.result_dir)
    key = "run-config key " + ("'resume-from'" if config.resume_from else "'result-dir'")
    if not os.path.lexists(folder) and not fresh_name:
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
    if writer:  # no other process writes there: remove the temporary files a killed writer left
        for entry in os.scandir(claim.folder):
            name = entry.name
            ours = any(name.startswith(f".{run_file}.") for run_file in RUN_FILES)
            if ours and name.endswith(".tmp") and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
    return ClaimedRun(config, claim, plan)
