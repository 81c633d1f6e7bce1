"""Checkpoints of a run: everything needed to continue it bit for bit after a crash.

What a checkpoint holds: docs/running.md, "What a run writes"; how a resume is checked:
docs/deployment.md (checkpoint and resume) and docs/design.md, "Safe loading".
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcgd_task.nested import DESCEND, map_nested
from fedcgd_task.schema import MAX_SERVER_ROUNDS
from run_files.files import atomic_write, read_json_object
from run_files.results import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    MODEL_FILE,
    SUMMARY_FILE,
    json_ready,
    read_metrics_lines,
)
from run_files.run_status import (
    COMPLETED,
    first_line,
    read_status,
    settings_differences,
)
from server_app.config import RunConfig
from server_app.run_identity import CheckpointRefusedError, check_identity, unread_settings

#: Tag of a numpy array stored as a tensor in a checkpoint (see :func:`_to_torch`).
NUMPY_TAG = "__numpy__"


@dataclass(frozen=True)
class Checkpoint:
    """The state of a run after ``round`` (the last round whose metrics line is written).

    The global model, the policy's state, both generators' ``bit_generator.state``, the seconds
    elapsed, the aggregator's state (``{}`` for FedAvg) and the run's identity.
    """

    round: int
    model: dict[str, torch.Tensor]
    policy_state: dict[str, Any]
    cell_rng_state: dict[str, Any]
    policy_rng_state: dict[str, Any]
    elapsed_s: float
    aggregator_state: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)


def _to_torch(value: Any) -> Any:
    """``value`` with every numpy array as a tagged tensor (``weights_only`` loading reads it)."""
    return map_nested(value, _tagged_tensor)


def _tagged_tensor(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {NUMPY_TAG: torch.from_numpy(np.array(value, copy=True))}
    return DESCEND


def _from_torch(value: Any) -> Any:
    """The inverse of :func:`_to_torch`."""
    return map_nested(value, _untagged_array)


def _untagged_array(value: Any) -> Any:
    if (
        isinstance(value, dict)
        and set(value) == {NUMPY_TAG}
        and isinstance(value[NUMPY_TAG], torch.Tensor)
    ):
        return value[NUMPY_TAG].numpy().copy()
    return DESCEND


def save_checkpoint(result_dir: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint.pt`` in ``result_dir`` atomically; return its path."""
    data = {f.name: getattr(checkpoint, f.name) for f in fields(Checkpoint)}
    data["aggregator_state"] = _to_torch(checkpoint.aggregator_state)
    return atomic_write(result_dir / CHECKPOINT_FILE, lambda handle: torch.save(data, handle))


#: Largest ``checkpoint.pt`` read (bytes): about 4 bytes per parameter, two billion parameters.
MAX_CHECKPOINT_BYTES = 8 * 2**30
#: What reading a torn, foreign or tampered checkpoint raises.
_UNREADABLE = (
    OSError,
    RuntimeError,
    EOFError,
    pickle.UnpicklingError,
    KeyError,
    TypeError,
    ValueError,
)


def load_checkpoint(result_dir: Path) -> Checkpoint:
    """Read ``checkpoint.pt`` from ``result_dir``.

    Raises
    ------
    FileNotFoundError
        Naming the folder, when it holds no checkpoint.
    """
    path = result_dir / CHECKPOINT_FILE
    if not path.exists():
        raise FileNotFoundError(
            f"run-config key 'resume-from' = '{result_dir}': no {CHECKPOINT_FILE} there (was the "
            "run started with checkpoint-every = 0?)"
        )
    if path.is_symlink() or not path.is_file():
        raise ValueError(
            f"run-config key 'resume-from' = '{result_dir}': {CHECKPOINT_FILE} is not a regular "
            "file (a link or a folder); the folder cannot be resumed"
        )
    size = path.stat().st_size
    if size > MAX_CHECKPOINT_BYTES:
        raise ValueError(
            f"run-config key 'resume-from' = '{result_dir}': {CHECKPOINT_FILE} holds {size} "
            f"bytes, more than {MAX_CHECKPOINT_BYTES} (not a checkpoint of this app)"
        )
    try:
        data = torch.load(path, weights_only=True, map_location="cpu")
        checkpoint = Checkpoint(
            round=_whole(data["round"], "round", minimum=1, maximum=MAX_SERVER_ROUNDS),
            model=dict(data["model"]),
            policy_state=dict(data["policy_state"]),
            cell_rng_state=dict(data["cell_rng_state"]),
            policy_rng_state=dict(data["policy_rng_state"]),
            elapsed_s=float(data["elapsed_s"]),
            aggregator_state=dict(_from_torch(data.get("aggregator_state", {}))),
            identity=dict(data.get("identity", {})),
        )
        if not (math.isfinite(checkpoint.elapsed_s) and checkpoint.elapsed_s >= 0):
            raise ValueError(f"elapsed_s = {checkpoint.elapsed_s!r}, not seconds >= 0")
        return checkpoint
    except (*_UNREADABLE, AttributeError) as err:
        reason = first_line(err)
        raise CheckpointRefusedError(
            f"run-config key 'resume-from' = '{result_dir}': {CHECKPOINT_FILE} cannot be read "
            f"(truncated or not a checkpoint of this app: {reason})"
        ) from err


def _whole(value: object, name: str, *, minimum: int, maximum: int) -> int:
    """``value`` when it is an int in [``minimum``, ``maximum``] (not a bool, float or str)."""
    if type(value) is not int or not minimum <= value <= maximum:
        raise ValueError(f"{name} = {value!r}, not a whole number in [{minimum}, {maximum}]")
    return value


def checkpoint_round(result_dir: Path) -> int | None:
    """The round of ``result_dir``'s checkpoint (memory-mapped); None when missing or unreadable."""
    path = result_dir / CHECKPOINT_FILE
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_CHECKPOINT_BYTES:
        return None
    try:
        data = torch.load(path, weights_only=True, mmap=True, map_location="cpu")
        return int(data["round"])
    except _UNREADABLE:
        return None


def save_model(result_dir: Path, state: dict[str, torch.Tensor]) -> Path:
    """Write the final model ``model.pt`` in ``result_dir`` atomically; return its path."""
    return atomic_write(result_dir / MODEL_FILE, lambda handle: torch.save(state, handle))


@dataclass(frozen=True)
class ResumePlan:
    """How to continue a run: its checkpoint and its metrics lines up to it.

    ``finish_only``: no round is left, but the run's end (``model.pt``, ``summary.json``, status)
    is still to write.
    """

    checkpoint: Checkpoint
    lines: list[dict[str, Any]]
    finish_only: bool


def check_same_settings(result_dir: Path, config: RunConfig) -> None:
    """Refuse to resume ``result_dir`` with settings other than those it was started with.

    Only ``num_server_rounds`` and the :func:`unread_settings` may differ.

    Raises
    ------
    ValueError
        One line naming the settings that differ (or the unreadable ``config.json``).
    """
    path = result_dir / CONFIG_FILE
    try:
        recorded = read_json_object(path)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"run-config key 'resume-from': {path} cannot be read ({err}); the folder cannot "
            "be resumed"
        ) from err
    requested = json_ready(config.to_dict())
    differ = settings_differences(
        recorded,
        requested,
        ignore=("num_server_rounds", *unread_settings(requested)),
        requested_keys_only=True,
    )
    if differ:
        raise ValueError(
            f"run-config key 'resume-from': {result_dir} was started with other settings "
            f"({', '.join(differ)}); resume with the same run config (only num-server-rounds "
            "may change)"
        )


def run_finished(result_dir: Path) -> bool:
    """True when the run wrote its end: status ``completed``, or no status but ``summary.json``."""
    status = read_status(result_dir)
    if status is not None:
        return status.state == COMPLETED
    return (result_dir / SUMMARY_FILE).is_file()


def check_resume(config: RunConfig) -> ResumePlan:
    """Check (reading only) that ``config.resume_from`` can go on to ``num_server_rounds``.

    Raises
    ------
    FileNotFoundError
        The folder or its checkpoint is missing.
    ValueError
        Unreadable checkpoint or metrics, other settings, a checkpoint of another run, or nothing
        left to run (one line).
    """
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
