"""Checkpoints of a run: everything needed to continue it bit for bit after a crash.

A checkpoint holds the round number, the global model, the scheduling rule's state (Ĝ / Ĝ_c,
Fed-CBS counts), the states of the two random generators (the cell's and the policy's) and the
seconds elapsed. It is written after the round's line is in ``metrics.jsonl``, atomically
(a temporary file renamed over the old one), so a crash leaves either the previous checkpoint or
the new one, never half of one. Everything else (the devices' data, the drop of the devices,
the batches of a round) is a pure function of the run seed and the round, so the resumed run
equals the uninterrupted one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FILE = "checkpoint.pt"


@dataclass(frozen=True)
class Checkpoint:
    """The state of a run after ``round``.

    Attributes
    ----------
    round : int
        The last completed round (its metrics line is written).
    model : dict of str -> torch.Tensor
        The global model after that round.
    policy_state : dict
        :meth:`fedcgd_strategy.policies.Policy.state_dict`.
    cell_rng_state, policy_rng_state : dict
        ``numpy.random.Generator.bit_generator.state`` of the cell's and the policy's generator.
    elapsed_s : float
        Wall-clock seconds the run had taken.

    """

    round: int
    model: dict[str, torch.Tensor]
    policy_state: dict[str, Any]
    cell_rng_state: dict[str, Any]
    policy_rng_state: dict[str, Any]
    elapsed_s: float


def save_checkpoint(result_dir: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint.pt`` in ``result_dir`` atomically; return its path."""
    path = result_dir / CHECKPOINT_FILE
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "round": checkpoint.round,
            "model": checkpoint.model,
            "policy_state": checkpoint.policy_state,
            "cell_rng_state": checkpoint.cell_rng_state,
            "policy_rng_state": checkpoint.policy_rng_state,
            "elapsed_s": checkpoint.elapsed_s,
        },
        tmp,
    )
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


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
            "run started with checkpoint-every > 0?)"
        )
    data = torch.load(path, weights_only=True)
    return Checkpoint(
        round=int(data["round"]),
        model=dict(data["model"]),
        policy_state=dict(data["policy_state"]),
        cell_rng_state=dict(data["cell_rng_state"]),
        policy_rng_state=dict(data["policy_rng_state"]),
        elapsed_s=float(data["elapsed_s"]),
    )
