"""Splitting a labelled training set over V devices (pure numpy; no torch, no flwr).

Paper Section V describes two splits, made concrete in docs/design.md, "Dirichlet split" and
"Sort-and-partition":

* Dirichlet (:func:`dirichlet_partition`): device v's class mix is p_v ~ Dir(alpha p), with p the
  class distribution of the (possibly imbalanced) training set; every device holds floor(N / V)
  samples.
* Sort-and-partition (:func:`shard_partition`): sort by label, cut into V l equal shards, deal l
  shards to each device.

Either split can be preceded by :func:`apply_imbalance`, which makes the training set's imbalance
ratio r = n2 / n1 by subsampling the first half of the classes. :func:`partition_indices` chains
the two steps, deterministically from the run seed.

Every function returns indices into the ``labels`` array it was given; no sample is used twice.
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

    Paper Section V: with n1 samples in the first half of the classes and n2 in the second,
    r = n2 / n1. Starting from a balanced set, every class c < C / 2 keeps round(n_c / r) of its
    n_c samples (round half up), chosen uniformly without replacement; the other classes are
    kept whole. For an odd C the middle class counts as first half (c < C / 2).

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

    Paper Section V, "Dirichlet distribution" (docs/design.md, "Dirichlet split": per-device
    mixes, equal sizes).
    Let p be the class distribution of ``labels`` over the classes present, n = floor(N / V).
    Devices are filled in order v = 0, ..., V-1: draw p_v ~ Dir(alpha p); then draw n class
    labels i.i.d. from p_v, where a draw of a class with no samples left is replaced by a draw
    from p_v renormalised over the classes that still have samples (rejection). Each drawn class
    contributes a sample chosen uniformly among its remaining ones. If p_v has no mass on any
    class with samples left (possible in floating point for tiny alpha), the device draws from
    the remaining samples uniformly, i.e. proportionally to the remaining class counts.

    The draws are done per device with multinomial counts, capped at the remaining class sizes,
    and the deficit redrawn on the renormalised mix; this has the same distribution as the
    sample-by-sample rejection scheme above.

    Parameters
    ----------
    labels : array_like of int, shape [N]
        Class id of every sample.
    num_devices : int
        V >= 1 (and <= N).
    alpha : float
        Concentration alpha > 0: large alpha gives p_v near p, small alpha one class per device.
    rng : numpy.random.Generator
        Source of all draws.

    Returns
    -------
    list of numpy.ndarray of int64
        ``V`` sorted index arrays of length floor(N / V) each, pairwise disjoint. The last
        N mod V samples stay unassigned.

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

    Paper Section V, "Sort and partition". With S = V l shards of size s = floor(N / S), the
    N mod S surplus samples are dropped first, chosen uniformly at random (so the drop does not
    favour one class); the rest is sorted by label (stable sort, ties keep dataset order) and cut
    into S contiguous shards; a random permutation of the shards deals shards
    perm[v l : (v+1) l] to device v.

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
        ``V`` sorted index arrays of l s samples each, pairwise disjoint; when N is divisible
        by V l they cover every sample exactly once.

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
    """Split a training set over ``settings.num_devices`` devices as the run config says.

    First :func:`apply_imbalance` with ``imbalance-ratio`` (a no-op for r = 1), then
    :func:`dirichlet_partition` or :func:`shard_partition` on the kept samples. All draws come
    from ``numpy.random.default_rng([seed, PARTITION_STREAM])``, so the result depends only on
    the labels, ``seed``, ``num-devices`` and the partition settings, never on which device
    asks or on the round.

    Parameters
    ----------
    settings : TaskSettings
        Validated run config.
    labels : array_like of int, shape [N]
        Class ids of the full training set.

    Returns
    -------
    list of numpy.ndarray of int64
        ``V`` sorted, pairwise disjoint arrays of indices into ``labels``.

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
