"""Splitting a labelled training set over V devices, and a device's local data set D_v.

docs/design.md, "Dirichlet split" and "Sort-and-partition". Every split returns indices into the
``labels`` it was given; no sample is used twice. The split is a pure function of the run
settings, so the per-process caches are safe: the training set is loaded once per process, the
partition of all devices computed once per settings (jointly), and each device keeps a view of
its own index array.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from fedcgd_task.datasets import DataSplit, load_train_set

if TYPE_CHECKING:
    import torch

    from fedcgd_task.settings import TaskSettings

IntArray = npt.NDArray[np.int64]

#: Tag mixed into the seed of the partition stream, keeping it apart from other streams derived
#: from the same run seed (batches, dropout). The ASCII codes of "PART".
PARTITION_STREAM = 0x50415254


def _check_labels(labels: npt.ArrayLike) -> IntArray:
    """Return ``labels`` as a 1-D int64 array of non-negative class ids, or raise ValueError."""
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"labels must be a 1-D integer array; got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"labels must be integers; got dtype {array.dtype}")
    array = array.astype(np.int64, copy=False)
    if array.size and array.min() < 0:
        raise ValueError(f"labels must be >= 0; got minimum {array.min()}")
    return array


def _check_num_devices(num_devices: int, num_samples: int) -> None:
    """Raise ValueError unless 1 <= num_devices <= num_samples."""
    if not 1 <= num_devices <= num_samples:
        raise ValueError(
            f"num_devices must be between 1 and the number of samples ({num_samples}); "
            f"got {num_devices}"
        )


def apply_imbalance(
    labels: npt.ArrayLike,
    ratio: float,
    rng: np.random.Generator,
    num_classes: int | None = None,
) -> IntArray:
    """Subsample the first half of the classes so that the set has imbalance ratio ``ratio``.

    Paper Section V, r = n2 / n1: every class c < C / 2 keeps round(n_c / r) of its n_c samples
    (round half up), chosen uniformly without replacement; the others are kept whole.

    ``labels`` int [N], ``ratio`` r >= 1 (1 keeps every sample), ``num_classes`` C (default
    ``max(labels) + 1``). Returns the sorted indices of the kept samples, int64 [N_kept].
    """
    y = _check_labels(labels)
    if not (np.isfinite(ratio) and ratio >= 1.0):
        raise ValueError(f"imbalance ratio must be a finite number >= 1; got {ratio!r}")
    if num_classes is not None:
        n_classes = num_classes
    else:
        n_classes = int(y.max()) + 1 if y.size else 0
    if y.size and n_classes <= int(y.max()):
        raise ValueError(f"num_classes must exceed the largest label {y.max()}; got {n_classes}")
    kept: list[IntArray] = []
    for c in range(n_classes):
        members = np.flatnonzero(y == c)
        if c < n_classes / 2 and ratio > 1.0:
            keep = int(np.floor(members.size / ratio + 0.5))
            members = rng.choice(members, size=keep, replace=False)
        kept.append(members.astype(np.int64))
    if not kept:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.concatenate(kept))


def dirichlet_partition(
    labels: npt.ArrayLike,
    num_devices: int,
    alpha: float,
    rng: np.random.Generator,
) -> list[IntArray]:
    """Split samples over devices whose class mixes are drawn from Dir(alpha p).

    Paper Section V, "Dirichlet distribution": p is the class distribution of ``labels``, each
    device in turn draws p_v ~ Dir(alpha p) and floor(N / V) samples from it (multinomial counts
    capped at what each class has left, the deficit redrawn from p_v renormalised over the classes
    with samples left; uniform over the remaining samples where p_v has no mass left).

    ``labels`` int [N], 1 <= V <= N, alpha > 0. Returns V sorted, pairwise disjoint int64 index
    arrays of length floor(N / V).
    """
    y = _check_labels(labels)
    _check_num_devices(num_devices, y.size)
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"dirichlet alpha must be a finite number > 0; got {alpha!r}")
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
    labels: npt.ArrayLike,
    num_devices: int,
    shards_per_device: int,
    rng: np.random.Generator,
) -> list[IntArray]:
    """Sort-and-partition: sort by label, cut into V l shards, deal l random shards per device.

    Paper Section V. The N mod (V l) surplus samples are dropped first, uniformly; the rest is
    sorted by label (stable) and cut into V l contiguous shards, dealt by a random permutation.

    ``labels`` int [N], V >= 1, l >= 1 with V l <= N. Returns V sorted, pairwise disjoint int64
    index arrays of equal length.
    """
    y = _check_labels(labels)
    _check_num_devices(num_devices, y.size)
    if shards_per_device < 1:
        raise ValueError(f"shards_per_device must be an integer >= 1; got {shards_per_device}")
    num_shards = num_devices * shards_per_device
    if num_shards > y.size:
        raise ValueError(
            f"num_devices * shards_per_device ({num_devices} * {shards_per_device} = "
            f"{num_shards}) must not exceed the number of samples ({y.size})"
        )
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
    """Split a training set (class ids ``labels``) over the devices as the run config says.

    :func:`apply_imbalance`, then :func:`dirichlet_partition` or :func:`shard_partition`, all
    drawn from ``default_rng([seed, PARTITION_STREAM])``: the result never depends on which device
    asks or on the round. Returns V sorted, pairwise disjoint index arrays into ``labels``.
    """
    y = _check_labels(labels)
    rng = np.random.default_rng([settings.seed, PARTITION_STREAM])
    kept = apply_imbalance(y, settings.imbalance_ratio, rng)
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
        """Number of classes C of the dataset."""
        return self.source.num_classes

    @property
    def labels(self) -> npt.NDArray[np.int64]:
        """Labels of the local samples, shape [|D_v|]."""
        return self.source.labels[self.indices]

    def tensors(self, positions: npt.ArrayLike | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised x (float32) and y (int64) of all local samples, or of local ``positions``."""
        rows = self.indices if positions is None else self.indices[np.asarray(positions)]
        return self.source.tensors(rows)


@functools.lru_cache(maxsize=4)
def all_partitions(settings: TaskSettings) -> tuple[npt.NDArray[np.int64], ...]:
    """Return every device's training-set rows for ``settings`` (cached per process)."""
    parts = partition_indices(settings, load_train_set(settings).labels)
    for part in parts:
        part.setflags(write=False)
    return tuple(parts)


@functools.lru_cache(maxsize=16_384)
def local_split(settings: TaskSettings, partition_id: int) -> LocalSplit:
    """Return device ``partition_id``'s local dataset D_v (cached per process).

    ``partition_id`` in 0 .. V - 1, as the node's config was checked
    (:func:`client_app.device_round.node_partition`). The cache holds every device of a run up
    to V = 16,384 (each entry a view of the run's partition and a reference to its data set).
    """
    return LocalSplit(
        partition_id=partition_id,
        indices=all_partitions(settings)[partition_id],
        source=load_train_set(settings),
    )
