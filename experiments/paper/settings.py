"""The paper's CIFAR-10 setting as run-config keys (conf/setting/paper*.yaml agree)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

#: The paper's Table II setting as run-config keys (read-only; copy it to change a value).
PAPER_CIFAR10: Mapping[str, Any] = MappingProxyType(
    {
        "dataset": "cifar10",
        "model": "cnn",
        "num-devices": 64,
        "partition": "shards",
        "shards-per-device": 1,
        "imbalance-ratio": 1.0,
        "local-steps": 1,
        "learning-rate": 0.1,
        "batch-size": 32,
        "channel.availability-prob": 0.3,
        "channel.total-bandwidth-hz": 20e6,
        "channel.deadline-s": 2.0,
    }
)

#: CIFAR-10's training set: classes and training images per class (50,000 in all).
CIFAR10_CLASSES = 10
CIFAR10_TRAIN_PER_CLASS = 5000
