"""Checks of the scheduling math's arguments (ValueError naming argument, value, allowed) and
the rules on what a device sends (docs/design.md, "Screening replies"). Pure numpy.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from channel.arrays import BoolArray, FloatArray, as_float_array
from fedcgd_task.schema import DEFAULTS

#: Absolute tolerance on ``|Σ_c p_c − 1|`` for every label and target distribution.
DISTRIBUTION_SUM_TOL: Final[float] = 1e-6
_MAX_SHOWN: Final[int] = 4  #: offending entries quoted in a message; more are counted


def _offending(name: str, array: NDArray[Any], bad: NDArray[np.bool_]) -> str:
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
    """``value`` as float64, its entries (those ``where`` marks) finite and ``>= 0`` (``> 0``
    if ``strict``); ``shape``, ``broadcast_scalar``: :func:`channel.arrays.as_float_array`."""  # noqa: D205, D209
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
    """``value`` as an int, if integral (``2.0`` passes) and ``>= minimum``."""
    try:
        integral = int(value) == value
    except (TypeError, ValueError, OverflowError):
        integral = False
    if not integral or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


DEFAULT_MAX_UPDATE_NORM_RATIO: Final[float] = float(DEFAULTS["max-update-norm-ratio"])

FLOAT32_MAX: Final[float] = float(np.finfo(np.float32).max)


def update_norm(
    local: Mapping[str, NDArray[np.generic]], reference: Mapping[str, NDArray[np.generic]]
) -> float:
    """||w_v − w||₂ over every floating array of ``reference``, summed in float64."""
    total = 0.0
    for k, ref in reference.items():
        if np.issubdtype(np.asarray(ref).dtype, np.floating):
            d = np.subtract(local[k], ref, dtype=np.float64).ravel()
            total += float(d @ d)
    return float(np.sqrt(total))


NORM_REL_TOL: Final[float] = 1e-5


def reported_norm_matches(reported: float, uploaded: float) -> bool:
    """Whether a reported ``update-norm`` is the uploaded update's (within summation order)."""
    return bool(abs(reported - uploaded) <= NORM_REL_TOL * abs(uploaded) + 1e-9)


def update_norm_outliers(
    norms: ArrayLike, max_ratio: float, reference: float | None = None
) -> NDArray[np.bool_]:
    """Which uploads of a round to refuse, bool[K]: a norm that is not finite or above
    :data:`FLOAT32_MAX`, and, with ``max_ratio`` k > 0 (``max-update-norm-ratio``), one above k
    times the median of the round's other uploads (else ``reference``, the last round's).
    """  # noqa: D205
    n = np.asarray(norms, dtype=np.float64).ravel()
    out = ~(np.abs(n) <= FLOAT32_MAX)  # NaN, inf or beyond float32
    if max_ratio == 0:
        return out
    for i in range(n.size):
        if out[i]:
            continue
        others = np.delete(n, i)
        others = others[np.isfinite(others)]
        median = float(np.median(others)) if others.size else reference
        if median is not None and n[i] > max_ratio * median:
            out[i] = True
    return out


def round_histogram_bounds(
    local_counts: ArrayLike, num_samples: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Per-class bounds (low, high) of a round histogram of τ b = ``num_samples`` samples read
    cyclically: class c with ``L_c`` of ``n`` appears ``q L_c`` to ``q L_c + min(r, L_c)`` times,
    ``q, r = divmod(num_samples, n)``."""  # noqa: D205, D209
    counts = np.asarray(local_counts, dtype=np.int64)
    n = int(counts.sum())
    if n <= 0:
        raise ValueError(f"local_counts = {counts.tolist()}; allowed: counts with a positive sum")
    q, r = divmod(int(num_samples), n)
    low = q * counts
    return low, low + np.minimum(r, counts)


def round_histogram_problem(
    hist: ArrayLike, local_counts: ArrayLike | None, num_samples: int
) -> str | None:
    """Why ``hist`` cannot be a round histogram of τ b = ``num_samples`` samples (None if it can),
    given the local class counts from discovery (None: the sum only)."""  # noqa: D205, D209
    h = np.asarray(hist, dtype=np.int64)
    if int(h.sum()) != int(num_samples):
        return (
            f"sums to {int(h.sum())}; allowed: the counts of the round's local-steps x "
            f"batch-size = {int(num_samples)} samples"
        )
    if local_counts is None:
        return None
    low, high = round_histogram_bounds(local_counts, num_samples)
    bad = np.flatnonzero((h < low) | (h > high))
    if bad.size:
        c = int(bad[0])
        return (
            f"class {c} has {int(h[c])} samples; allowed with the local class counts reported "
            f"at discovery: {int(low[c])} .. {int(high[c])}"
        )
    return None
