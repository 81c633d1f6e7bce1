"""Splitting a labelled training set over V devices (pure numpy).

docs/design.md, "Dirichlet split" and "Sort-and-partition". Every function returns indices into
the ``labels`` it was given; no sample is used twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
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

    Parameters
    ----------
    labels : array_like of int, shape [N]
        Class id of every sample.
    ratio : float
        Imbalance ratio r >= 1; r = 1 keeps every sample.
    rng : numpy.random.Generator
        Source of the subsampling draws.
    num_classes : int, optional
        C; defaults to ``max(labels) + 1``.

    Returns
    -------
    numpy.ndarray of int64, shape [N_kept]
        Sorted indices of the kept samples.
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

    Parameters
    ----------
    labels : array_like of int, shape [N]
        Class id of every sample.
    num_devices : int
        V, between 1 and N.
    alpha : float
        Concentration alpha > 0.
    rng : numpy.random.Generator
        Source of all draws.

    Returns
    -------
    list of numpy.ndarray of int64
        V sorted, pairwise disjoint index arrays of length floor(N / V).
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

    Parameters
    ----------
    labels : array_like of int, shape [N]
        Class id of every sample.
    num_devices : int
        V >= 1.
    shards_per_device : int
        l >= 1; V l must not exceed N.
    rng : numpy.random.Generator
        Source of the drop and the deal.

    Returns
    -------
    list of numpy.ndarray of int64
        V sorted, pairwise disjoint index arrays of equal length.
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
    elif settings.partition == "shards":
        local = shard_partition(y[kept], settings.num_devices, settings.shards_per_device, rng)
    else:
        raise ValueError(f'partition must be "dirichlet" or "shards"; got {settings.partition!r}')
    return [kept[part] for part in local]
