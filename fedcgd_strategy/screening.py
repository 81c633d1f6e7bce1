"""Screening rules for the values a device sends, as pure functions (no flwr, no torch).

The rules are listed in docs/design.md, "Screening replies"; :mod:`~.flower.replies` applies them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Default k of :func:`update_norm_outliers` (run-config key ``max-update-norm-ratio``).
DEFAULT_MAX_UPDATE_NORM_RATIO: Final[float] = 10.0

#: Largest finite float32; a norm or σ̂_v above it is refused whatever the ratio rule says.
FLOAT32_MAX: Final[float] = float(np.finfo(np.float32).max)


def update_norm(
    local: Mapping[str, NDArray[np.generic]], reference: Mapping[str, NDArray[np.generic]]
) -> float:
    """||w_v − w||₂ over every floating array of ``reference``, summed in float64 (NaN if any is).

    Uploads are finite float32 by then, so the float64 sum cannot overflow for any model size.
    """
    total = 0.0
    for k, ref in reference.items():
        if np.issubdtype(np.asarray(ref).dtype, np.floating):
            d = np.subtract(local[k], ref, dtype=np.float64).ravel()
            total += float(d @ d)
    return float(np.sqrt(total))


#: Relative tolerance between a device's reported update norm and the one of its upload.
NORM_REL_TOL: Final[float] = 1e-5


def reported_norm_matches(reported: float, uploaded: float) -> bool:
    """True when a reported ``update-norm`` is the norm of the uploaded update (BN2 ranks by it).

    Both are float64 sums over the same float32 values; the tolerance (:data:`NORM_REL_TOL`
    relative, 1e-9 absolute) absorbs summation order only.
    """
    return bool(abs(reported - uploaded) <= NORM_REL_TOL * abs(uploaded) + 1e-9)


def median_norm(norms: ArrayLike) -> float | None:
    """Median of ``norms`` (None when empty): the reference a later single upload is held to."""
    n = np.asarray(norms, dtype=np.float64).ravel()
    return float(np.median(n)) if n.size else None


def update_norm_outliers(
    norms: ArrayLike, max_ratio: float, reference: float | None = None
) -> NDArray[np.bool_]:
    """Which uploads of a round to refuse for an absurd update norm, bool[K].

    Refused: a norm that is not finite or exceeds :data:`FLOAT32_MAX`, and, with ``max_ratio``
    k > 0, a norm above k times the median of the round's *other* uploads (``reference``, the last
    round's median, stands in when there is no other; None: a single upload passes). Raises
    ValueError unless ``max_ratio`` is finite and >= 0.
    """
    if not np.isfinite(max_ratio) or max_ratio < 0:
        raise ValueError(f"max_ratio = {max_ratio!r}; allowed: a finite number >= 0 (0 = off)")
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
    """Per-class bounds (low, high) of a round histogram of ``num_samples`` = τ b samples.

    Local samples are read cyclically (:func:`fedcgd_task.training.local_batches`), so class c with
    ``L_c`` of the ``n`` local samples appears ``q L_c`` to ``q L_c + min(r, L_c)`` times,
    ``q, r = divmod(num_samples, n)``.
    """
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
    """Why ``hist`` cannot be a round histogram of τ b = ``num_samples`` samples; None if it can.

    ``local_counts`` are the device's whole local class counts from discovery (None: only the sum
    is checked).
    """
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
