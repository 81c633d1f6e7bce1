"""A device's local dataset D_v, built once per process.

The split is a pure function of the run settings (dataset, seed, number of devices, partition
parameters) and the partition id, so it is cached in module-level caches: the full training set
is loaded once per process (:func:`fedcgd_task.datasets.load_dataset`), the partition of all
devices is computed once per settings (it must be computed jointly so that no sample goes to
two devices), and each device keeps only its own index array. Caching at module level is safe
for that reason: nothing here is per-node mutable state, which would belong in
``context.state``. In simulation a Ray worker serves several virtual nodes and the caches hold
one small index array per node; in deployment every message starts a new process and the cache
simply starts empty. Built-in images are converted to float32 on demand, only for the rows
needed.
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
    """The local dataset D_v of one device.

    Attributes
    ----------
    partition_id : int
        Device index v.
    indices : numpy.ndarray of int64, shape [|D_v|]
        Sorted rows of the full training set that belong to device v.
    source : DataSplit
        The full training set.

    """

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
        """Return normalised (x, y) of all local samples, or of the given local positions.

        Parameters
        ----------
        positions : array_like of int, optional
            Positions in ``0 .. |D_v| - 1`` (e.g. a mini-batch from
            :func:`fedcgd_task.training.local_batches`).

        Returns
        -------
        x : torch.Tensor of float32, shape [n, *input_shape]
        y : torch.Tensor of int64, shape [n]

        """
        rows = self.indices if positions is None else self.indices[np.asarray(positions)]
        return self.source.tensors(rows)


@functools.lru_cache(maxsize=4)
def all_partitions(settings: TaskSettings) -> tuple[npt.NDArray[np.int64], ...]:
    """Return every device's training-set rows for ``settings`` (cached per process)."""
    parts = partition_indices(settings, load_train_set(settings).labels)
    for part in parts:
        part.setflags(write=False)
    return tuple(parts)


@functools.lru_cache(maxsize=1024)
def local_split(settings: TaskSettings, partition_id: int) -> LocalSplit:
    """Return device ``partition_id``'s local dataset (cached per process).

    Parameters
    ----------
    settings : TaskSettings
        Validated run config (the partition depends on its seed, num-devices, dataset, and
        partition parameters).
    partition_id : int
        Device index v in ``0 .. num_devices - 1``.

    Returns
    -------
    LocalSplit
        D_v.

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
