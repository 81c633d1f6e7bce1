"""The split of a training set over V devices (docs/design.md, "Dirichlet split",
"Sort-and-partition"), a pure function of the settings, and a device's local data set D_v.
"""  # noqa: D205

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from fedcgd_task.datasets import DataSplit, load_train_set

if TYPE_CHECKING:
    import torch

    from fedcgd_config.settings import TaskSettings

IntArray = npt.NDArray[np.int64]

#: Tag mixed into the seed of the partition stream ("PART").
PARTITION_STREAM = 0x50415254


def apply_imbalance(labels: npt.ArrayLike, ratio: float, rng: np.random.Generator) -> IntArray:
    """Sorted indices of the samples kept for imbalance ratio r = n2 / n1 (paper Section V):
    each class c < C / 2 keeps round(n_c / r) of its n_c (half up, uniformly), C = max label + 1."""  # noqa: D205, D209
    y = np.asarray(labels, dtype=np.int64)
    n_classes = int(y.max()) + 1  # a data set has samples (check_data)
    kept: list[IntArray] = []
    for c in range(n_classes):
        members = np.flatnonzero(y == c)
        if c < n_classes / 2 and ratio > 1.0:
            keep = int(np.floor(members.size / ratio + 0.5))
            members = rng.choice(members, size=keep, replace=False)
        kept.append(members.astype(np.int64))
    return np.sort(np.concatenate(kept))


def dirichlet_partition(
    labels: npt.ArrayLike, num_devices: int, alpha: float, rng: np.random.Generator
) -> list[IntArray]:
    """V sorted index arrays of floor(N / V) samples (paper Section V): each device in turn draws
    p_v ~ Dir(alpha p), p the class distribution, and multinomial counts capped at what each
    class has left, the deficit redrawn from p_v over the classes left (uniform: no mass)."""  # noqa: D205, D209
    y = np.asarray(labels, dtype=np.int64)
    classes, counts = np.unique(y, return_counts=True)
    prior = counts / counts.sum()
    pools = [rng.permutation(np.flatnonzero(y == c)) for c in classes]
    taken = np.zeros(classes.size, dtype=np.int64)
    per_device = y.size // num_devices
    devices: list[IntArray] = []
    for _ in range(num_devices):
        mix = rng.dirichlet(alpha * prior)
        want = np.zeros(classes.size, dtype=np.int64)
        missing = per_device
        while missing > 0:
            left = counts - taken - want
            weights = np.where(left > 0, mix, 0.0)
            if weights.sum() <= 0.0 or not np.isfinite(weights.sum()):
                weights = left.astype(np.float64)
            draw = rng.multinomial(missing, weights / weights.sum())
            draw = np.minimum(draw, left)
            want += draw
            missing -= int(draw.sum())
        chosen = [pools[k][taken[k] : taken[k] + want[k]] for k in range(classes.size)]
        taken += want
        devices.append(np.sort(np.concatenate(chosen)).astype(np.int64))
    return devices


def shard_partition(
    labels: npt.ArrayLike, num_devices: int, shards_per_device: int, rng: np.random.Generator
) -> list[IntArray]:
    """Sort-and-partition (paper Section V): the N mod (V l) surplus dropped uniformly, the rest
    sorted by label (stable), cut into V l shards, dealt by a permutation, l per device."""  # noqa: D205, D209
    y = np.asarray(labels, dtype=np.int64)
    num_shards = num_devices * shards_per_device
    shard_size = y.size // num_shards
    surplus = y.size - shard_size * num_shards
    kept = np.arange(y.size, dtype=np.int64)
    if surplus:
        kept = np.sort(rng.choice(y.size, size=y.size - surplus, replace=False)).astype(np.int64)
    order = kept[np.argsort(y[kept], kind="stable")]
    shards = order.reshape(num_shards, shard_size)
    deal = rng.permutation(num_shards).reshape(num_devices, shards_per_device)
    return [np.sort(shards[row].reshape(-1)) for row in deal]


def partition_indices(settings: TaskSettings, labels: npt.ArrayLike) -> list[IntArray]:
    """V index arrays: :func:`apply_imbalance`, then the Dirichlet or shards split, drawn from
    ``default_rng([seed, PARTITION_STREAM])``; ValueError: too few samples kept."""  # noqa: D205, D209
    y = np.asarray(labels, dtype=np.int64)
    rng = np.random.default_rng([settings.seed, PARTITION_STREAM])
    kept = apply_imbalance(y, settings.imbalance_ratio, rng)
    per = settings.shards_per_device if settings.partition == "shards" else 1
    if settings.num_devices * per > kept.size:
        raise ValueError(
            f"run-config key 'num-devices' = {settings.num_devices} (x {per} shards) exceeds the "
            f"{kept.size} training samples kept; allowed: at most {kept.size // per}"
        )
    if settings.partition == "dirichlet":
        local = dirichlet_partition(y[kept], settings.num_devices, settings.dirichlet_alpha, rng)
    else:  # "shards" (the schema's choices)
        local = shard_partition(y[kept], settings.num_devices, settings.shards_per_device, rng)
    return [kept[part] for part in local]


@dataclass(frozen=True, eq=False)
class LocalSplit:
    """The local dataset D_v of one device: sorted ``indices`` [|D_v|] into the ``source`` set."""

    partition_id: int
    indices: npt.NDArray[np.int64]
    source: DataSplit

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    @property
    def num_classes(self) -> int:
        """C."""
        return self.source.num_classes

    @property
    def labels(self) -> npt.NDArray[np.int64]:
        """Labels of the local samples [|D_v|]."""
        return self.source.labels[self.indices]

    def tensors(self, positions: npt.ArrayLike | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised x (float32) and y (int64) of all local samples, or of local ``positions``."""
        rows = self.indices if positions is None else self.indices[np.asarray(positions)]
        return self.source.tensors(rows)


@functools.lru_cache(maxsize=4)
def all_partitions(settings: TaskSettings) -> tuple[npt.NDArray[np.int64], ...]:
    """Every device's training-set rows for ``settings`` (cached per process)."""
    parts = partition_indices(settings, load_train_set(settings).labels)
    for part in parts:
        part.setflags(write=False)
    return tuple(parts)


@functools.lru_cache(maxsize=16_384)
def local_split(settings: TaskSettings, partition_id: int) -> LocalSplit:
    """Device ``partition_id``'s local dataset D_v (cached per process, up to V = 16,384)."""
    return LocalSplit(
        partition_id=partition_id,
        indices=all_partitions(settings)[partition_id],
        source=load_train_set(settings),
    )
