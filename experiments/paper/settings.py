"""The paper's CIFAR-10 setting (Section V, Tables I and II), stated once for the Python scripts.

:data:`PAPER_CIFAR10` is the setting of the paper's Table II as run-config keys: CIFAR-10 and
its CNN, V = 64 devices, sort-and-partition with one shard per device (l = 1), r = 1, τ = 1,
η = 0.1, b = 32, p_a = 0.3, B = 20 MHz, deadline 2 s. :mod:`experiments.paper.schedule_table` takes
its :class:`~experiments.paper.schedule_simulation.TableSettings` defaults from it, and
:mod:`experiments.bench.round` its runs.

The Hydra presets take the same values from ``conf/setting/paper.yaml`` (devices, training,
p_a; shared with the CIFAR-100 preset) and ``conf/setting/paper_cifar10.yaml`` (the CIFAR-10
data set and deadline); they leave the split and τ to each preset, which sweeps them, and B to
the app's default. ``tests/test_reproduce.py`` checks that the presets and this constant agree.
The size of the paper's CNN is :data:`channel.report.PAPER_CIFAR10_CNN_PARAMS`.
"""

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
