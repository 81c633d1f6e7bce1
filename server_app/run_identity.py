"""What ties a checkpoint to its run: the run's identity, and the check on resume.

A checkpoint carries :func:`run_identity` (the format, the seed, the policy and a digest of the
settings that change what the run computes); :func:`check_identity` refuses, in one line naming
what differs, a checkpoint another run wrote. Imports neither flwr nor torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedcgd_task.datasets import BUILTIN_DATASETS
from fedcgd_task.errors import OneLineMessage
from fedcgd_task.settings import WHERE_AND_HOW
from run_files.results import CHECKPOINT_FILE, json_ready
from run_files.run_status import flat_settings
from server_app.config import RunConfig

#: The checkpoint's format (2: with :func:`run_identity`); another format is refused on resume.
CHECKPOINT_FORMAT = 2


def unread_settings(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """Recorded settings (dotted names) that do not change what a run computes.

    Those that only say where or how it runs or reports (:data:`fedcgd_task.settings.WHERE_AND_HOW`:
    a run checkpointed on a GPU may go on on a CPU, the same arithmetic rounded otherwise), but
    ``data-dir`` where the data set reads its files there (CIFAR, your function), and
    ``mnist1d-samples`` where a built-in data set does not read it. ``settings``:
    :meth:`RunConfig.to_dict`.
    """
    task = settings.get("task")
    dataset = task.get("dataset") if isinstance(task, Mapping) else None
    builtin = BUILTIN_DATASETS.get(dataset) if isinstance(dataset, str) else None
    # a researcher's own data set may read both; a built-in reads what its registry entry says
    reads = builtin.reads if builtin is not None else ("data-dir", "mnist1d-samples")
    computing = ("task.data_dir",) if "data-dir" in reads else ()
    unread = () if "mnist1d-samples" in reads else ("task.mnist1d_samples",)
    return (*(name for name in WHERE_AND_HOW if name not in computing), *unread)


class CheckpointRefusedError(OneLineMessage, ValueError):
    """A checkpoint that is not the run's or does not fit it: one line, nothing written."""


def identity_settings(config: RunConfig) -> dict[str, Any]:
    """The settings that change what a run computes (flat, sorted, JSON values)."""
    settings = json_ready(config.to_dict())
    skip = {"num_server_rounds", *unread_settings(settings)}
    return {k: v for k, v in sorted(flat_settings(settings).items()) if k not in skip}


def run_identity(config: RunConfig) -> dict[str, Any]:
    """What ties a checkpoint to its run: format, seed, policy, settings JSON and its SHA-256."""
    text = json.dumps(
        identity_settings(config), sort_keys=True, separators=(",", ":"), allow_nan=False
    )
    return {
        "format": CHECKPOINT_FORMAT,
        "seed": config.seed,
        "policy": config.policy,
        "settings": text,
        "settings_sha256": hashlib.sha256(text.encode("ascii")).hexdigest(),
    }


def check_identity(folder: Path, identity: Mapping[str, Any], config: RunConfig) -> None:
    """Refuse a checkpoint that another run (or another format of the app) wrote.

    Raises
    ------
    CheckpointRefusedError
        One line naming the field (format, seed, policy, a setting), both values.
    """
    found, wanted = identity, run_identity(config)
    head = f"run-config key 'resume-from' = '{folder}': {CHECKPOINT_FILE}"
    version = found.get("format", 1)
    if not _same_value(version, CHECKPOINT_FORMAT):
        raise CheckpointRefusedError(
            f"{head} has format {version!r}; this version of the app reads format "
            f"{CHECKPOINT_FORMAT} (the file was written by another version); it cannot be "
            "resumed: run again in a new folder"
        )
    tail = "a checkpoint copied from another run's folder? resume a run from its own checkpoint"
    for name in ("seed", "policy"):
        if not _same_value(found.get(name), wanted[name]):
            raise CheckpointRefusedError(
                f"{head} is another run's: {name} = {found.get(name)!r} in the checkpoint, "
                f"{wanted[name]!r} in this run ({tail})"
            )
    if not _same_value(found.get("settings_sha256"), wanted["settings_sha256"]):
        raise CheckpointRefusedError(
            f"{head} is another run's: {_settings_change(found, wanted)} ({tail})"
        )


def _same_value(found: object, wanted: object) -> bool:
    """``found == wanted`` for plain values of the same type (a tensor or a list never is)."""
    return type(found) is type(wanted) and found == wanted


def _settings_change(found: Mapping[str, Any], wanted: Mapping[str, Any]) -> str:
    """The first setting that differs, with both values (from the checkpoint's settings)."""
    text = found.get("settings")
    digest = found.get("settings_sha256")
    if not isinstance(text, str) or hashlib.sha256(text.encode()).hexdigest() != digest:
        return (
            f"its settings digest {str(digest)[:12]!r} is not this run's "
            f"{wanted['settings_sha256'][:12]!r} (its settings do not match their digest: "
            "damaged or edited)"
        )
    try:
        saved = json.loads(text)
    except ValueError:
        saved = {}
    if not isinstance(saved, dict):
        saved = {}
    now = json.loads(wanted["settings"])
    none = "(none)"
    keys = sorted(k for k in set(saved) | set(now) if saved.get(k, none) != now.get(k, none))
    if not keys:
        return "its settings digest is not this run's"
    more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
    key = keys[0]
    return (
        f"setting {key} = {saved.get(key, '(none)')!r} in the checkpoint, "
        f"{now.get(key, '(none)')!r} in this run{more}"
    )
