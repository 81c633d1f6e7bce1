"""A TaskSettings factory shared by the tests (digits, small, valid)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fedcgd_task.settings import TaskSettings, TrainingSettings

BASE = TaskSettings(
    seed=0,
    num_devices=4,
    dataset="digits",
    data_dir="/tmp",
    model="mlp",
    partition="dirichlet",
    dirichlet_alpha=1.0,
    shards_per_device=2,
    imbalance_ratio=1.0,
)


def make_settings(**overrides: Any) -> TaskSettings:
    """:data:`BASE` with ``overrides`` applied."""
    return dataclasses.replace(BASE, **overrides)


def training(
    local_steps: int = 1, learning_rate: float = 0.1, batch_size: int = 32
) -> TrainingSettings:
    """τ, η, b."""
    return TrainingSettings(
        local_steps=local_steps, learning_rate=learning_rate, batch_size=batch_size
    )
