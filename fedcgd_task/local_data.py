"""A device's local dataset D_v, built once per process.

The split is a pure function of the run settings and the partition id, so module-level caches
are safe: the training set is loaded once per process, the partition of all devices computed
once per settings (jointly, so that no sample goes to two devices), and each device keeps only
its own index array.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from fedcgd_task.datasets import DataSplit, load_train_set
from fedcgd_task.partition import partition_indices
from fedcgd_task.settings import TaskSettings


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

    The cache holds every device of a run up to V = 16,384 (each entry a view of the run's
    partition and a reference to its data set); a larger V misses and rebuilds the entry.
    """
    if not 0 <= partition_id < settings.num_devices:
        raise ValueError(
            f"partition_id must be in 0 .. num-devices - 1 = {settings.num_devices - 1}; "
            f"got {partition_id}"
        )
    return LocalSplit(
        partition_id=partition_id,
        indices=all_partitions(settings)[partition_id],
        source=load_train_set(settings),
    )
