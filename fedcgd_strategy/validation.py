"""Argument validation shared by the scheduling math (problem P1, estimators, selectors, Fed-CBS).

Each validator raises ``ValueError`` naming the argument, the offending value and what is
allowed, and returns the value as the type the math uses (float64 arrays, ``float``, ``int``).
Pure numpy.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from channel.arrays import BoolArray, FloatArray, as_float_array

DISTRIBUTION_SUM_TOL: Final[float] = 1e-6
"""Absolute tolerance on ``|Σ_c p_c − 1|`` for every label and target distribution."""

_MAX_SHOWN: Final[int] = 4
"""Offending entries quoted in an error message; further ones are only counted."""


def _offending(name: str, array: NDArray[Any], bad: NDArray[np.bool_]) -> str:
    """Quote the first offending entries of ``array`` (``bad`` marks them)."""
    if array.ndim == 0:
        return repr(array.item())
    positions = np.argwhere(bad)
    quoted = [
        f"{name}[{', '.join(str(int(i)) for i in pos)}] = {array[tuple(pos)].item()!r}"
        for pos in positions[:_MAX_SHOWN]
    ]
    more = len(positions) - _MAX_SHOWN
    return ", ".join(quoted) + (f" (and {more} more)" if more > 0 else "")


def as_nonnegative_array(
    value: ArrayLike,
    name: str,
    *,
    shape: tuple[int, ...] | None = None,
    broadcast_scalar: bool = False,
    strict: bool = False,
    where: ArrayLike | None = None,
) -> FloatArray:
    """Convert ``value`` to a float64 array whose entries are finite and ``>= 0`` (``> 0``).

    Parameters
    ----------
    value : array_like
        Numbers, shape ``shape`` (any shape when ``shape`` is None).
    name, shape, broadcast_scalar
        As in :func:`channel.arrays.as_float_array`.
    strict : bool
        Require ``> 0`` instead of ``>= 0``.
    where : array_like of bool, optional
        Entries to check, same shape as ``value``; ``None`` checks every entry.

    Raises
    ------
    ValueError
        If ``value`` is not numeric, has another shape, or a checked entry is NaN, infinite or
        below the bound.
    """
    array = as_float_array(value, name, shape=shape, broadcast_scalar=broadcast_scalar)
    below = array <= 0 if strict else array < 0
    bad = ~np.isfinite(array) | below
    if where is not None:
        bad &= np.asarray(where, dtype=bool)
    if np.any(bad):
        relation = "> 0" if strict else ">= 0"
        raise ValueError(
            f"{name} must be finite and {relation}, got {_offending(name, array, bad)}"
        )
    return array


def as_nonnegative_float(value: float, name: str, *, strict: bool = False) -> float:
    """Return ``value`` as a float after checking it is finite and ``>= 0`` (``> 0`` if strict)."""
    return float(as_nonnegative_array(value, name, shape=(), strict=strict))


def check_total_bandwidth(
    total_bandwidth_hz: float, *, allow_zero: bool = False, name: str = "total_bandwidth_hz"
) -> float:
    """Validate the bandwidth budget ``B`` of problem P1 in Hz: finite, ``> 0`` (or ``>= 0``)."""
    return as_nonnegative_float(total_bandwidth_hz, name, strict=not allow_zero)


def as_min_bandwidths(
    min_bandwidth_hz: ArrayLike, num_devices: int | None = None, name: str = "min_bandwidth_hz"
) -> FloatArray:
    """Validate the minimum bandwidths ``B*_v`` of paper eq. (lambert), in Hz, shape ``[V]``.

    Each entry is ``>= 0``, or ``+inf`` for a device that cannot meet the deadline (docs/design.md,
    "Infeasible devices"); NaN is rejected. ``num_devices=None`` accepts any length.
    """
    bandwidth = as_float_array(min_bandwidth_hz, name)
    if bandwidth.ndim != 1 or (num_devices is not None and bandwidth.shape[0] != num_devices):
        expected = "V" if num_devices is None else str(num_devices)
        raise ValueError(f"{name} must have shape [{expected}], got shape {bandwidth.shape}")
    bad = np.isnan(bandwidth) | (bandwidth < 0)
    if np.any(bad):
        raise ValueError(
            f"{name} must be >= 0 Hz or +inf (infeasible device), got "
            f"{_offending(name, bandwidth, bad)}"
        )
    return bandwidth


def _check_on_simplex(name: str, dist: FloatArray, rows: BoolArray | None = None) -> None:
    """Raise unless each checked row (``rows``) of ``dist`` [C] or [K, C] is on the simplex."""
    checked = np.ones(dist.shape[:-1], dtype=bool) if rows is None else rows
    bad = (~np.isfinite(dist) | (dist < 0)) & checked[..., None]
    if np.any(bad):
        raise ValueError(f"{name} must hold finite values >= 0, got {_offending(name, dist, bad)}")
    sums = dist.sum(axis=-1)
    off = np.flatnonzero(checked & (np.abs(sums - 1.0) > DISTRIBUTION_SUM_TOL))
    if off.size == 0:
        return
    if dist.ndim == 1:
        raise ValueError(
            f"{name} must sum to 1 (within {DISTRIBUTION_SUM_TOL}), got sum {float(sums)!r}"
        )
    quoted = ", ".join(f"row {i} sums to {float(sums[i])!r}" for i in off[:_MAX_SHOWN])
    more = off.size - _MAX_SHOWN
    raise ValueError(
        f"{name} rows must sum to 1 (within {DISTRIBUTION_SUM_TOL}; normalise label histograms "
        f"first), got {quoted}" + (f" (and {more} more rows)" if more > 0 else "")
    )


def as_label_distributions(
    label_dist: ArrayLike,
    name: str = "label_dist",
    *,
    num_rows: int | None = None,
    rows: ArrayLike | None = None,
) -> FloatArray:
    """Validate a stack of label distributions ``p_v`` (paper Section II), float ``[K, C]``.

    Parameters
    ----------
    label_dist : array_like
        One distribution over the ``C`` classes per row, shape ``[K, C]`` with ``K, C >= 1``.
    name : str
        Argument name quoted in error messages.
    num_rows : int, optional
        Required ``K``; ``None`` accepts any ``K >= 1``.
    rows : array_like of bool, optional
        Rows to check, shape ``[K]``; ``None`` checks every row.

    Raises
    ------
    ValueError
        If the shape is wrong, a checked entry is NaN, infinite or negative, or a checked row
        does not sum to 1 within :data:`DISTRIBUTION_SUM_TOL`.
    """
    dist = as_float_array(label_dist, name)
    if (
        dist.ndim != 2
        or min(dist.shape) < 1
        or (num_rows is not None and dist.shape[0] != num_rows)
    ):
        expected = "K" if num_rows is None else str(num_rows)
        raise ValueError(
            f"{name} must have shape [{expected}, C] (one row per device) with K, C >= 1, got "
            f"shape {dist.shape}"
        )
    mask = None if rows is None else as_bool_mask(rows, dist.shape[0], "rows")
    _check_on_simplex(name, dist, mask)
    return dist


def as_target_distribution(
    target_dist: ArrayLike, num_classes: int | None = None, name: str = "target_dist"
) -> FloatArray:
    """Validate the target label distribution ``p`` of the WEMD (paper eq. (G1)), float ``[C]``."""
    target = as_float_array(target_dist, name)
    if target.ndim != 1 or target.shape[0] < 1 or num_classes not in (None, target.shape[0]):
        expected = "C" if num_classes is None else str(num_classes)
        raise ValueError(f"{name} must have shape [{expected}], got shape {target.shape}")
    _check_on_simplex(name, target)
    return target


def as_weights(weights: ArrayLike, num: int, name: str = "weights") -> FloatArray:
    """Validate aggregation weights ``|D_v|``, shape ``[num]``: finite, ``>= 0``, positive sum."""
    w = as_nonnegative_array(weights, name, shape=(num,))
    if num > 0 and not w.sum() > 0:
        raise ValueError(f"{name} must have a positive sum, got {w.tolist()}")
    return w


def as_bool_mask(mask: ArrayLike, num_devices: int, name: str = "mask") -> BoolArray:
    """Validate a bool mask of shape ``[V]`` (integer 0/1 arrays are rejected: index arrays)."""
    array = np.asarray(mask)
    if array.shape != (num_devices,) or array.dtype != np.bool_:
        raise ValueError(
            f"{name} must be a bool array of shape ({num_devices},), got dtype {array.dtype} "
            f"and shape {array.shape}"
        )
    return array


def check_integer(value: float, name: str, *, minimum: int) -> int:
    """Return ``value`` as an int after checking it is integral (``2.0`` passes), ``>= minimum``."""
    try:
        integral = int(value) == value
    except (TypeError, ValueError, OverflowError):
        integral = False
    if not integral or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
