"""Screening rules for the values a device sends, as pure functions (no flwr, no torch).

Every rule a reply must pass before any of its values reaches the estimators, the solvers or
the global model is written here once; :mod:`fedcgd_strategy.flower.replies` applies them to
messages.

* **Round histogram.** A device's label histogram of a round counts the labels of the
  ``tau * b`` samples of its ``tau`` mini-batches, which
  :func:`fedcgd_task.training.local_batches` reads cyclically from a permutation of its
  ``n = |D_v|`` local samples. Every local sample is therefore used ``q = (tau b) // n`` or
  ``q + 1`` times, and exactly ``r = (tau b) mod n`` samples are used ``q + 1`` times. So with
  the whole local
  class counts ``L_c`` reported at discovery, ``q L_c <= h_c <= q L_c + min(r, L_c)`` and
  ``sum_c h_c = tau b`` (:func:`round_histogram_bounds`, :func:`round_histogram_problem`).
  Counts are integers: the ClientApp sends a list of Python ints, and nothing else is accepted
  (a float list, even of integral values, is refused, so fractions never become zeros).
* **Absurd updates.** :func:`update_norm_outliers`: an upload whose update norm
  ``||w_v - w||`` is more than ``k`` times the median update norm of the *other* uploads of the
  round is refused. The median is robust to one (indeed to almost half of the) outliers; using
  the others' median, not a median that includes the device itself, lets the rule work with two
  uploads (the liar's own norm would otherwise be half of the median). With a single upload
  there are no others: the median of the last round's accepted uploads stands in for them
  (``reference``, kept in memory by the strategy; the first round, and the first round after a
  resume, have none) and without one only the absolute bound applies. ``k = 0`` turns the
  ratio rule off (then a finite but absurd upload, e.g. 1e30 in one layer, is averaged in).
* **Absolute bound** (always, whatever ``k``): a norm or σ̂_v that is not finite or exceeds the
  largest float32 (:data:`FLOAT32_MAX`) is refused: the model is float32, so such a value cannot
  come from honest float32 training, and any arithmetic on it in float32 overflows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "DEFAULT_MAX_UPDATE_NORM_RATIO",
    "FLOAT32_MAX",
    "exceeds_float32",
    "median_norm",
    "reported_norm_matches",
    "round_histogram_bounds",
    "round_histogram_problem",
    "update_norm",
    "update_norm_outliers",
]

#: Default k of :func:`update_norm_outliers` (run-config key ``max-update-norm-ratio``).
DEFAULT_MAX_UPDATE_NORM_RATIO: Final[float] = 10.0

#: Largest finite float32; a norm or σ̂_v above it is refused whatever the ratio rule says.
FLOAT32_MAX: Final[float] = float(np.finfo(np.float32).max)


def exceeds_float32(value: float) -> bool:
    """True when ``value`` is NaN, infinite or larger in magnitude than :data:`FLOAT32_MAX`."""
    return not np.isfinite(value) or abs(value) > FLOAT32_MAX


def update_norm(
    local: Mapping[str, NDArray[np.generic]], reference: Mapping[str, NDArray[np.generic]]
) -> float:
    """||w_v − w||₂ over every floating array of ``reference``, summed in float64.

    The uploads reaching it are finite float32 (checked before): a squared difference is at
    most (2 × 3.4e38)² ≈ 4.6e77, so the float64 sum cannot overflow for any model size.

    Parameters
    ----------
    local, reference : mapping str -> ndarray
        The uploaded model and the global model of the round (same keys and shapes).

    Returns
    -------
    float
        The norm (NaN when an entry is NaN).

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
    """True when a reported ``update-norm`` is the norm of the uploaded update.

    BN2 ranks devices by the norm they report, so a device could rank itself first by lying;
    the server has the upload and recomputes the norm (:func:`update_norm`). Both are float64
    sums over the same float32 values, so they agree to rounding: the tolerance
    (:data:`NORM_REL_TOL` relative, 1e-9 absolute) only absorbs summation order.
    """
    return bool(abs(reported - uploaded) <= NORM_REL_TOL * abs(uploaded) + 1e-9)


def median_norm(norms: ArrayLike) -> float | None:
    """Median of ``norms`` (None when empty): the reference a later single upload is held to."""
    n = np.asarray(norms, dtype=np.float64).ravel()
    return float(np.median(n)) if n.size else None


def update_norm_outliers(
    norms: ArrayLike, max_ratio: float, reference: float | None = None
) -> NDArray[np.bool_]:
    """Which uploads of a round to refuse for an absurd update norm (see the module docstring).

    Parameters
    ----------
    norms : float[K]
        ||w_v − w|| of the round's otherwise valid uploads.
    max_ratio : float
        k >= 0: refuse a norm above k times the median norm of the other uploads; 0 = no ratio
        rule (the absolute bound still applies).
    reference : float, optional
        Stands in for the others' median when an upload has no other (K = 1): the median of the
        last round's accepted uploads. None: a single upload passes the ratio rule.

    Returns
    -------
    bool[K]
        True where the upload is refused.

    Raises
    ------
    ValueError
        If ``max_ratio`` is not finite and >= 0.

    """
    if not np.isfinite(max_ratio) or max_ratio < 0:
        raise ValueError(f"max_ratio = {max_ratio!r}; allowed: a finite number >= 0 (0 = off)")
    n = np.asarray(norms, dtype=np.float64).ravel()
    out = np.array([exceeds_float32(float(v)) for v in n], dtype=bool)
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

    A device reads its ``n`` local samples cyclically in a random order (module docstring), so
    class c with ``L_c`` local samples appears between ``q L_c`` and ``q L_c + min(r, L_c)``
    times, with ``q, r = divmod(num_samples, n)``.
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

    Parameters
    ----------
    hist : int[C]
        The reported class counts of the round's samples.
    local_counts : int[C] or None
        The device's whole local class counts (reported at discovery); None: only the sum is
        checked.
    num_samples : int
        τ b of the round.

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
