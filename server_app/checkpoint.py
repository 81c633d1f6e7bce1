"""A run's checkpoint (tied to its run, loaded safely), the claim on its folder, resume checks."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcgd_config.schema import MAX_SERVER_ROUNDS
from fedcgd_config.settings import RECORDED, unread_settings
from fedcgd_strategy.constructor_params import kebab
from fedcgd_strategy.errors import OneLineMessage
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
from server_app.run_folder.run_status import COMPLETED, first_line, flat_settings, read_status

#: The one checkpoint format this app reads (another is refused on resume).
CHECKPOINT_FORMAT = 3
#: Tag of a numpy array stored as a tensor in a checkpoint (``weights_only`` loading reads it).
NUMPY_TAG = "__numpy__"
#: Largest ``checkpoint.pt`` read (bytes): about 4 bytes per parameter, two billion parameters.
MAX_CHECKPOINT_BYTES = 8 * 2**30


class CheckpointRefusedError(OneLineMessage, ValueError):
    """A checkpoint that is not the run's or does not fit it: one line, nothing written."""


#: A recorded setting's name (``config.json``) -> its run-config key.
_RUN_CONFIG_KEY = {recorded: key for key, recorded in RECORDED.items()}
_RUN_CONFIG_KEY["cell.num_devices"] = "num-devices"


def _run_config_key(name: str) -> str:
    """A recorded setting as the run config spells it (``cell.x_y``: ``channel.x-y``)."""
    head, _, rest = name.partition(".")
    if name in _RUN_CONFIG_KEY or head not in _RUN_CONFIG_KEY:
        return _RUN_CONFIG_KEY.get(name, name)
    return f"{_RUN_CONFIG_KEY[head]}.{kebab(rest)}"


def _same(found: object, wanted: object) -> bool:
    """``found == wanted`` and of the same type."""
    return type(found) is type(wanted) and found == wanted


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


def settings_change(before: Mapping[str, Any], now: Mapping[str, Any], keys: Sequence[str]) -> str:
    """The one wording of changed settings: ``key = a there, b now; ...`` (three, then a count),
    each run-config key once (``cell.num_devices`` and ``task.num_devices`` are one setting).
    """  # noqa: D205
    named = {_run_config_key(k): k for k in reversed(keys)}  # the first recorded key of each
    keys = [named[name] for name in dict.fromkeys(_run_config_key(k) for k in keys)]
    shown = "; ".join(
        f"{_run_config_key(k)} = {before.get(k, '(none)')!r} there, {now.get(k, '(none)')!r} now"
        for k in keys[:3]
    )
    return shown + (f"; and {len(keys) - 3} more" if len(keys) > 3 else "")


def check_identity(folder: Path, identity: Mapping[str, Any], config: RunConfig) -> None:
    """Refuse another run's checkpoint or other settings (:class:`CheckpointRefusedError`)."""
    found, wanted = identity, run_identity(config)
    head = f"run-config key 'resume-from' = '{folder}': {CHECKPOINT_FILE}"
    if not _same(version := found.get("format", 1), CHECKPOINT_FORMAT):
        raise CheckpointRefusedError(
            f"{head} has format {version!r}; this version of the app reads format "
            f"{CHECKPOINT_FORMAT} (the file was written by another version); it cannot be "
            "resumed: run again in a new folder"
        )
    if all(
        _same(found.get(k), wanted[k]) for k in ("seed", "policy", "settings", "settings_sha256")
    ):
        return
    text, digest = found.get("settings"), found.get("settings_sha256")
    if not isinstance(text, str) or hashlib.sha256(text.encode()).hexdigest() != digest:
        raise CheckpointRefusedError(f"{head}: its settings do not match their digest (damaged)")
    try:
        saved = json.loads(text)
    except (ValueError, RecursionError):  # a hand-made file: named as other settings below
        saved = {}
    pair = {"task.seed": found.get("seed"), "policy": found.get("policy")}
    before = {**(saved if isinstance(saved, dict) else {}), **pair}
    now = {**json.loads(wanted["settings"]), "task.seed": config.seed, "policy": config.policy}
    keys = sorted(k for k in set(before) | set(now) if not _same(before.get(k), now.get(k)))
    why = settings_change(before, now, keys) or "another digest"
    raise CheckpointRefusedError(
        f"{head} was written with other settings ({why}); resume with the run's own settings "
        "(only num-server-rounds may change) from its own checkpoint"
    )


@dataclass(frozen=True)
class Checkpoint:
    """The state of a run after ``round``; see docs/running.md, "What a run writes"."""

    round: int
    model: dict[str, torch.Tensor]
    policy_state: dict[str, Any]
    cell_rng_state: dict[str, Any]
    policy_rng_state: dict[str, Any]
    elapsed_s: float
    aggregator_state: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)


def _walk(value: Any, tag: bool) -> Any:
    """``value`` with its numpy arrays tagged as tensors (``tag``: ``weights_only``) or untagged."""
    if tag and isinstance(value, np.ndarray):
        return {NUMPY_TAG: torch.from_numpy(np.array(value))}
    if not tag and isinstance(value, dict) and set(value) == {NUMPY_TAG}:
        if isinstance(array := value[NUMPY_TAG], torch.Tensor):
            return array.numpy().copy()
    if isinstance(value, dict):
        return {key: _walk(item, tag) for key, item in value.items()}
    if isinstance(value, list | tuple):
        items = [_walk(item, tag) for item in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def _checked(name: str, value: Any) -> Any:
    """``value`` when it is what field ``name`` holds; ValueError naming it and what is allowed."""
    if name == "round":
        ok = type(value) is int and 1 <= value <= MAX_SERVER_ROUNDS
        allowed = f"a whole number in [1, {MAX_SERVER_ROUNDS}]"
    elif name == "elapsed_s":
        ok = type(value) in (int, float) and math.isfinite(value) and value >= 0
        allowed = "seconds >= 0"
    else:
        ok, allowed = isinstance(value, dict), "a dict"
    if not ok:
        shown = repr(value)[:40] if isinstance(value, int | float | str) else type(value).__name__
        raise ValueError(f"{name} = {shown}, not {allowed}")
    return value


def save_checkpoint(result_dir: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint.pt`` in ``result_dir`` atomically; return its path."""
    data = {f.name: getattr(checkpoint, f.name) for f in fields(Checkpoint)}
    for name in ("policy_state", "aggregator_state"):
        data[name] = _walk(data[name], tag=True)
    return atomic_write(result_dir / CHECKPOINT_FILE, lambda handle: torch.save(data, handle))


def load_checkpoint(result_dir: Path) -> Checkpoint:
    """Read ``checkpoint.pt`` (``weights_only``); FileNotFoundError, ValueError (one line)."""
    path = result_dir / CHECKPOINT_FILE
    head = f"run-config key 'resume-from' = '{result_dir}': {CHECKPOINT_FILE}"
    if not path.exists():
        raise FileNotFoundError(
            f"run-config key 'resume-from' = '{result_dir}': no {CHECKPOINT_FILE} there (was the "
            "run started with checkpoint-every = 0?)"
        )
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"{head} is not a regular file (a link or a folder); it cannot be resumed")
    if (size := path.stat().st_size) > MAX_CHECKPOINT_BYTES:
        raise ValueError(f"{head} holds {size} bytes, more than {MAX_CHECKPOINT_BYTES}")
    try:
        data = _checked("checkpoint", torch.load(path, weights_only=True, map_location="cpu"))
        parts = {
            f.name: _checked(
                f.name, data[f.name] if f.default_factory is MISSING else data.get(f.name, {})
            )
            for f in fields(Checkpoint)
        }
        for name in ("policy_state", "aggregator_state"):
            parts[name] = _walk(parts[name], tag=False)
        parts["elapsed_s"] = float(parts["elapsed_s"])
        return Checkpoint(**parts)
    except Exception as err:  # whatever a torn, foreign or tampered file makes torch raise
        raise CheckpointRefusedError(
            f"{head} cannot be read (truncated or not a checkpoint of this app: {first_line(err)})"
        ) from err


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


def check_resume(config: RunConfig) -> ResumePlan:
    """Check (reading only) that ``config.resume_from`` can go on; one-line errors."""
    folder = Path(config.resume_from)
    key = f"run-config key 'resume-from' = '{folder}'"
    if not folder.exists():
        raise FileNotFoundError(f"{key}: no such folder")
    if not folder.is_dir():
        raise ValueError(f"{key} is a file, not a result folder")
    checkpoint = load_checkpoint(folder)
    check_identity(folder, checkpoint.identity, config)
    try:  # the resume adds to its code entries
        read_json_object(folder / CONFIG_FILE)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{key}: {CONFIG_FILE} cannot be read ({err}); it cannot be resumed"
        ) from err
    lines = read_metrics_lines(folder, checkpoint.round)
    done, wanted = checkpoint.round, config.num_server_rounds
    status = read_status(folder)
    finished = (folder / SUMMARY_FILE).is_file() if status is None else status.state == COMPLETED
    if done > wanted or (done == wanted and finished):
        raise ValueError(
            f"{key}: the checkpoint is after round {done} (run "
            f"{'finished' if done == wanted else 'past that'}); num-server-rounds = {wanted} "
            f"leaves nothing to run (set num-server-rounds > {done} to continue it)"
        )
    return ResumePlan(checkpoint=checkpoint, lines=lines, finish_only=done == wanted)


def claim_run_folder(
    config: RunConfig, *, writer: bool, fresh_name: bool = False
) -> tuple[FolderClaim, RunConfig, ResumePlan | None]:
    """Lock the run's folder (created for a new run), check it under the lock: the claim, the
    config (``result_dir``: the folder), the resume plan; ``writer``: the ServerApp's."""  # noqa: D205, D209
    key = "run-config key " + ("'resume-from'" if config.resume_from else "'result-dir'")
    new = not config.resume_from
    claim = claim_folder(
        Path(config.result_dir), key, create=new, writer=writer, fresh_name=fresh_name
    )
    try:
        config = replace(config, result_dir=str(claim.folder)) if fresh_name else config
        plan = check_resume(config) if config.resume_from else None
        if plan is None:
            check_new_result_dir(config.result_dir)
    except BaseException:
        claim.abandon()
        raise
    for name in RUN_FILES if writer else ():  # the claim refused links
        for left in claim.folder.glob(f".{name}.*.tmp"):
            if left.is_file():  # a folder of that name is not ours to remove
                left.unlink(missing_ok=True)
    return claim, config, plan
