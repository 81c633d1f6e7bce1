"""A run's checkpoint (tied to its run, loaded safely), the claim on its folder, resume checks.

See docs/design.md, "Safe loading" and "One writer per folder".
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcgd_strategy.constructor_params import kebab
from fedcgd_strategy.errors import OneLineMessage
from fedcgd_task.schema import MAX_SERVER_ROUNDS
from fedcgd_task.settings import RECORDED, unread_settings
from server_app.config import RunConfig
from server_app.run_folder.files import atomic_write, read_json_object
from server_app.run_folder.folder_lock import FolderClaim, claim_folder
from server_app.run_folder.results import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    MODEL_FILE,
    RUN_FILES,
    SUMMARY_FILE,
    check_new_result_dir,
    json_ready,
    read_metrics_lines,
)
from server_app.run_folder.run_status import (
    COMPLETED,
    SETTINGS_ADDED_LATER,
    first_line,
    flat_settings,
    read_status,
    settings_differences,
)

#: The one checkpoint format this app reads (another is refused on resume).
CHECKPOINT_FORMAT = 3


class CheckpointRefusedError(OneLineMessage, ValueError):
    """A checkpoint that is not the run's or does not fit it: one line, nothing written."""


def run_identity(config: RunConfig) -> dict[str, Any]:
    """What ties a checkpoint to its run: format, seed, policy, settings JSON and its SHA-256."""
    settings = json_ready(config.to_dict())
    skip = {"num_server_rounds", *unread_settings(settings)}
    kept = {k: v for k, v in flat_settings(settings).items() if k not in skip}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return {
        "format": CHECKPOINT_FORMAT,
        "seed": config.seed,
        "policy": config.policy,
        "settings": text,
        "settings_sha256": hashlib.sha256(text.encode("ascii")).hexdigest(),
    }


def check_identity(folder: Path, identity: Mapping[str, Any], config: RunConfig) -> None:
    """Refuse (:class:`CheckpointRefusedError`, naming what differs) another run's checkpoint."""
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
    if not all(_same_value(found.get(k), wanted[k]) for k in ("settings", "settings_sha256")):
        raise CheckpointRefusedError(
            f"{head} is another run's: {_settings_change(found, wanted)} ({tail})"
        )


#: A recorded setting's name (``config.json``) -> its run-config key.
_RUN_CONFIG_KEY = {recorded: key for key, recorded in RECORDED.items()}
_RUN_CONFIG_KEY["cell.num_devices"] = "num-devices"


def _run_config_key(name: str) -> str:
    """A recorded setting as the run config spells it (``cell.x_y``: ``channel.x-y``)."""
    head, _, rest = name.partition(".")
    if name in _RUN_CONFIG_KEY or head not in _RUN_CONFIG_KEY:
        return _RUN_CONFIG_KEY.get(name, name)
    return f"{_RUN_CONFIG_KEY[head]}.{kebab(rest)}"


def _same_value(found: object, wanted: object) -> bool:
    """``found == wanted`` and of the same type."""
    return type(found) is type(wanted) and found == wanted


def _settings_change(found: Mapping[str, Any], wanted: Mapping[str, Any]) -> str:
    """The first setting that differs, with both values."""
    text = found.get("settings")
    digest = found.get("settings_sha256")
    if not isinstance(text, str) or hashlib.sha256(text.encode()).hexdigest() != digest:
        return (
            f"its settings digest {str(digest)[:12]!r} is not this run's "
            f"{wanted['settings_sha256'][:12]!r} (its settings do not match their digest: "
            "damaged or edited)"
        )
    try:
        saved = dict(json.loads(text))
    except (ValueError, TypeError):  # not a JSON object
        saved = {}
    now = json.loads(wanted["settings"])
    none = "(none)"
    keys = sorted(k for k in set(saved) | set(now) if saved.get(k, none) != now.get(k, none))
    if not keys:
        return "its settings digest is not this run's"
    more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
    key = keys[0]
    return (
        f"setting {_run_config_key(key)} = {saved.get(key, '(none)')!r} in the checkpoint, "
        f"{now.get(key, '(none)')!r} in this run{more}"
    )


#: Tag of a numpy array stored as a tensor in a checkpoint (``weights_only`` loading reads it).
NUMPY_TAG = "__numpy__"
#: Largest ``checkpoint.pt`` read (bytes): about 4 bytes per parameter, two billion parameters.
MAX_CHECKPOINT_BYTES = 8 * 2**30


@dataclass(frozen=True)
class Checkpoint:
    """The state of a run after ``round`` (the last round whose metrics line is written).

    What each field holds: docs/running.md, "What a run writes" (``checkpoint.pt``).
    """

    round: int
    model: dict[str, torch.Tensor]
    policy_state: dict[str, Any]
    cell_rng_state: dict[str, Any]
    policy_rng_state: dict[str, Any]
    elapsed_s: float
    aggregator_state: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)


def _tagged(value: Any) -> Any:
    """``value`` with its numpy arrays as tagged tensors (dicts, lists and tuples rebuilt)."""
    if isinstance(value, np.ndarray):
        return {NUMPY_TAG: torch.from_numpy(np.array(value, copy=True))}
    if isinstance(value, dict):
        return {key: _tagged(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        items = [_tagged(item) for item in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def _untagged(value: Any) -> Any:
    """The inverse of :func:`_tagged`."""
    if isinstance(value, dict):
        if set(value) == {NUMPY_TAG} and isinstance(value[NUMPY_TAG], torch.Tensor):
            return value[NUMPY_TAG].numpy().copy()
        return {key: _untagged(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        items = [_untagged(item) for item in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def save_checkpoint(result_dir: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint.pt`` in ``result_dir`` atomically; return its path."""
    data = {f.name: getattr(checkpoint, f.name) for f in fields(Checkpoint)}
    for name in ("policy_state", "aggregator_state"):
        data[name] = _tagged(data[name])
    return atomic_write(result_dir / CHECKPOINT_FILE, lambda handle: torch.save(data, handle))


def load_checkpoint(result_dir: Path) -> Checkpoint:
    """Read ``checkpoint.pt`` from ``result_dir`` (``weights_only``: no pickled code runs).

    Raises FileNotFoundError when there is none; ValueError (one line) when it is not a
    regular file, too large, or not a checkpoint of this app.
    """
    path = result_dir / CHECKPOINT_FILE
    head = f"run-config key 'resume-from' = '{result_dir}': {CHECKPOINT_FILE}"
    if not path.exists():
        raise FileNotFoundError(
            f"run-config key 'resume-from' = '{result_dir}': no {CHECKPOINT_FILE} there (was the "
            "run started with checkpoint-every = 0?)"
        )
    if path.is_symlink() or not path.is_file():
        raise ValueError(
            f"{head} is not a regular file (a link or a folder); the folder cannot be resumed"
        )
    if (size := path.stat().st_size) > MAX_CHECKPOINT_BYTES:
        raise ValueError(
            f"{head} holds {size} bytes, more than {MAX_CHECKPOINT_BYTES} (not a checkpoint of "
            "this app)"
        )
    try:
        data = _dict(torch.load(path, weights_only=True, map_location="cpu"), "it")
        if type(done := data["round"]) is not int or not 1 <= done <= MAX_SERVER_ROUNDS:
            raise ValueError(f"round = {done!r}, not a whole number in [1, {MAX_SERVER_ROUNDS}]")
        parts = {f.name: _dict(data.get(f.name, {}), f.name) for f in fields(Checkpoint)[6:]}
        for name in ("model", "policy_state", "cell_rng_state", "policy_rng_state"):
            parts[name] = _dict(data[name], name)
        elapsed = data["elapsed_s"]
        plain = isinstance(elapsed, float | int) and not isinstance(elapsed, bool)
        if not (plain and math.isfinite(elapsed) and elapsed >= 0):
            raise ValueError(f"elapsed_s = {elapsed!r}, not seconds >= 0")
        for name in ("policy_state", "aggregator_state"):
            parts[name] = _untagged(parts[name])
        return Checkpoint(round=done, elapsed_s=float(elapsed), **parts)
    except Exception as err:  # whatever a torn, foreign or tampered file makes torch raise
        raise CheckpointRefusedError(
            f"{head} cannot be read (truncated or not a checkpoint of this app: {first_line(err)})"
        ) from err


def _dict(value: object, name: str) -> dict[str, Any]:
    """``value`` when it is a dict (``name`` holds a tensor, say: refused)."""
    if not isinstance(value, dict):
        raise TypeError(f"{name} holds a {type(value).__name__}, not a dict")
    return value


def checkpoint_round(result_dir: Path) -> int | None:
    """The round of ``result_dir``'s checkpoint; None when :func:`load_checkpoint` refuses it."""
    try:
        return load_checkpoint(result_dir).round
    except (OSError, ValueError):
        return None


def save_model(result_dir: Path, state: dict[str, torch.Tensor]) -> Path:
    """Write the final model ``model.pt`` in ``result_dir`` atomically."""
    return atomic_write(result_dir / MODEL_FILE, lambda handle: torch.save(state, handle))


@dataclass(frozen=True)
class ResumePlan:
    """How to continue a run (``finish_only``: no round left, only the run's end to write)."""

    checkpoint: Checkpoint
    lines: list[dict[str, Any]]
    finish_only: bool


def check_same_settings(result_dir: Path, config: RunConfig) -> None:
    """Refuse (one line) to resume ``result_dir`` with other settings than its ``config.json``."""
    path = result_dir / CONFIG_FILE
    try:
        recorded = read_json_object(path)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"run-config key 'resume-from': {path} cannot be read ({err}); the folder cannot "
            "be resumed"
        ) from err
    requested = json_ready(config.to_dict())
    skip = {"num_server_rounds", *unread_settings(requested)}
    differ = settings_differences(recorded, requested, ignore=skip, requested_keys_only=True)
    if differ:
        before = {**SETTINGS_ADDED_LATER, **flat_settings(recorded)}
        now = flat_settings(requested)
        shown = "; ".join(
            f"{_run_config_key(k)} = {before.get(k, '(none)')!r} there, {now[k]!r} now"
            for k in differ[:3]
        )
        more = f"; and {len(differ) - 3} more" if len(differ) > 3 else ""
        raise ValueError(
            f"run-config key 'resume-from': {result_dir} was started with other settings "
            f"({shown}{more}); resume with the same run config (only num-server-rounds may "
            "change)"
        )


def run_finished(result_dir: Path) -> bool:
    """True when the run wrote its end (status ``completed``; no status: ``summary.json``)."""
    status = read_status(result_dir)
    if status is not None:
        return status.state == COMPLETED
    return (result_dir / SUMMARY_FILE).is_file()


def check_resume(config: RunConfig) -> ResumePlan:
    """Check (reading only) that ``config.resume_from`` can go on; one-line errors."""
    folder = Path(config.resume_from)
    key = f"run-config key 'resume-from' = '{folder}'"
    if not folder.exists():
        raise FileNotFoundError(f"{key}: no such folder")
    if not folder.is_dir():
        raise ValueError(f"{key} is a file, not a result folder")
    checkpoint = load_checkpoint(folder)
    check_same_settings(folder, config)
    check_identity(folder, checkpoint.identity, config)
    lines = read_metrics_lines(folder, checkpoint.round)
    wanted = config.num_server_rounds
    if checkpoint.round > wanted or (checkpoint.round == wanted and run_finished(folder)):
        state = "finished" if checkpoint.round == wanted else "past that"
        raise ValueError(
            f"{key}: the checkpoint is after round {checkpoint.round} (run {state}); "
            f"num-server-rounds = {wanted} leaves nothing to run (set num-server-rounds > "
            f"{checkpoint.round} to continue it)"
        )
    return ResumePlan(checkpoint=checkpoint, lines=lines, finish_only=checkpoint.round == wanted)


@dataclass
class ClaimedRun:
    """A run's folder locked by this process (``config.result_dir``), and the resume plan."""

    config: RunConfig
    claim: FolderClaim
    plan: ResumePlan | None


def claim_run_folder(config: RunConfig, *, writer: bool, fresh_name: bool = False) -> ClaimedRun:
    """Lock the run's folder (created for a new run) and check it under the lock.

    ``writer``: take the writer lock too (the ServerApp), and remove the temporary files a
    killed writer left; ``fresh_name``: a default name, suffixed when taken.
    """
    folder = Path(config.result_dir)
    key = "run-config key " + ("'resume-from'" if config.resume_from else "'result-dir'")
    claim = claim_folder(
        folder, key, create=not config.resume_from, writer=writer, fresh_name=fresh_name
    )
    try:
        if fresh_name:
            config = replace(config, result_dir=str(claim.folder))
        plan = check_resume(config) if config.resume_from else None
        if plan is None:
            check_new_result_dir(config.result_dir)
    except BaseException:
        claim.abandon()
        raise
    for left in claim.folder.glob(".*.tmp") if writer else ():
        ours = any(left.name.startswith(f".{name}.") for name in RUN_FILES)
        if ours and left.is_file() and not left.is_symlink():
            left.unlink(missing_ok=True)
    return ClaimedRun(config, claim, plan)
