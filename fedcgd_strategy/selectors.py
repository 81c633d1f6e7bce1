"""Baseline device selectors BC, BN2 and POC with best-effort bandwidth packing.

Paper Section V-A lists the baselines; each ranks the devices by one score and then does a
"best-effort schedule, i.e., schedule devices one by one until the channel bandwidth is not
enough for the next device":

* BC, best channel (Amiri et al., "Convergence of update aware device scheduling for federated
  learning at the wireless edge", IEEE TWC 2021): by average channel gain H̄_v, descending;
* BN2, best norm (same reference): by the L2 norm of the local update, descending;
* POC, power-of-choice (Cho et al., "Towards understanding biased client selection in federated
  learning", AISTATS 2022): V' devices drawn uniformly without replacement from the available
  ones, ranked by the loss accumulated over this round's local steps, descending.

Common rules (DESIGN.md "Best effort"): every selector returns a mask bool[V] over the V devices
of the cell; devices that are unavailable, infeasible (minimum bandwidth B*_v = inf: the deadline
cannot be met) or have a NaN score are never taken; ties in the ranking go to the lowest device
index (stable sort). Pure numpy: this module imports neither flwr nor torch.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "PACK_RULES",
    "best_channel",
    "best_effort_pack",
    "best_norm",
    "descending_order",
    "power_of_choice",
]

#: Best-effort rules: "stop" at the first device that does not fit (the paper's wording, default),
#: or "skip" it and keep walking the order.
PACK_RULES: tuple[str, ...] = ("stop", "skip")


def _as_min_bandwidth(min_bandwidth_hz: ArrayLike) -> NDArray[np.float64]:
    """Validate B*_v in Hz (float[V]; each >= 0 or +inf, no NaN)."""
    b = np.asarray(min_bandwidth_hz, dtype=np.float64)
    if b.ndim != 1:
        raise ValueError(f"min_bandwidth_hz: expected a 1-D array [V], got shape {b.shape}")
    if np.any(np.isnan(b)) or np.any(b < 0):
        raise ValueError(
            f"min_bandwidth_hz: every value must be >= 0 Hz or +inf (infeasible), got {b.tolist()}"
        )
    return b


def _check_total_bandwidth(total_bandwidth_hz: float) -> float:
    """Validate the bandwidth budget B in Hz (finite, >= 0)."""
    total = float(total_bandwidth_hz)
    if not np.isfinite(total) or total < 0:
        raise ValueError(f"total_bandwidth_hz: must be finite and >= 0, got {total_bandwidth_hz}")
    return total


def _check_rule(rule: str) -> str:
    """Validate a best-effort rule name."""
    if rule not in PACK_RULES:
        raise ValueError(f"rule: got {rule!r}; allowed: {', '.join(PACK_RULES)}")
    return rule


def _as_mask(available: ArrayLike, num_devices: int) -> NDArray[np.bool_]:
    """Validate an availability mask bool[V]."""
    a = np.asarray(available)
    if a.ndim != 1 or a.shape[0] != num_devices:
        raise ValueError(f"available: expected shape ({num_devices},), got {a.shape}")
    if a.dtype != np.bool_:
        raise ValueError(f"available: expected a boolean mask, got dtype {a.dtype}")
    return a


def _as_scores(scores: ArrayLike, num_devices: int, name: str) -> NDArray[np.float64]:
    """Validate a ranking score float[V] (NaN allowed: such devices are never taken)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.shape[0] != num_devices:
        raise ValueError(f"{name}: expected shape ({num_devices},), got {s.shape}")
    return s


def best_effort_pack(
    order: ArrayLike,
    min_bandwidth_hz: ArrayLike,
    total_bandwidth_hz: float,
    rule: str = "stop",
) -> NDArray[np.bool_]:
    """Best-effort schedule of devices in a given order, paper Section V-A baselines.

    Walk ``order`` (best first) and take each device while Σ B*_v of the taken devices stays
    <= B. Rule ``"stop"`` (paper: "schedule devices one by one until the channel bandwidth is
    not enough for the next device") ends the walk at the first device that does not fit;
    ``"skip"`` passes it over and continues. Infeasible devices (B*_v = inf) in ``order`` are
    passed over under both rules: never taken and never a reason to stop (DESIGN.md: infeasible
    devices are never taken; they cannot upload whatever the budget).

    Parameters
    ----------
    order : int[K]
        Distinct device indices in [0, V), best first. Devices not listed are not taken.
    min_bandwidth_hz : float[V]
        Minimum bandwidth B*_v in Hz, paper eq. (lambert); +inf = infeasible.
    total_bandwidth_hz : float
        Budget B in Hz.
    rule : str
        ``"stop"`` (default) or ``"skip"``, see :data:`PACK_RULES`.

    Returns
    -------
    bool[V]
        The scheduled devices.

    Raises
    ------
    ValueError
        Unknown rule, indices out of range or repeated, NaN or negative B*_v, bad budget.

    """
    _check_rule(rule)
    b = _as_min_bandwidth(min_bandwidth_hz)
    total = _check_total_bandwidth(total_bandwidth_hz)
    idx = np.asarray(order)
    if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise ValueError(f"order: expected a 1-D array of device indices, got {idx!r}")
    v = b.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= v):
        raise ValueError(f"order: device indices must lie in [0, {v}), got {idx.tolist()}")
    if np.unique(idx).size != idx.size:
        raise ValueError(f"order: device indices must be distinct, got {idx.tolist()}")
    selected = np.zeros(v, dtype=bool)
    used_hz = 0.0
    for dev in idx.tolist():  # K <= V devices; the walk is inherently sequential
        need = b[dev]
        if not np.isfinite(need):
            continue
        if used_hz + need <= total:
            selected[dev] = True
            used_hz += need
        elif rule == "stop":
            break
    return selected


def descending_order(scores: ArrayLike, eligible: ArrayLike) -> NDArray[np.intp]:
    """Return the eligible devices sorted by score, descending; ties go to the lowest index.

    Parameters
    ----------
    scores : float[V]
        Ranking score (NaN entries must not be eligible).
    eligible : bool[V]
        Devices to rank.

    Returns
    -------
    int[K]
        Device indices, best first.

    """
    s = np.asarray(scores, dtype=np.float64)
    idx = np.flatnonzero(np.asarray(eligible, dtype=bool))
    # Stable sort of the negated scores keeps ascending index order among equal scores.
    return idx[np.argsort(-s[idx], kind="stable")]


def _rank_and_pack(
    available: ArrayLike,
    scores: ArrayLike,
    score_name: str,
    min_bandwidth_hz: ArrayLike,
    total_bandwidth_hz: float,
    rule: str,
) -> NDArray[np.bool_]:
    """Rank available devices with a non-NaN score, descending, and pack them best effort."""
    _check_rule(rule)
    b = _as_min_bandwidth(min_bandwidth_hz)
    mask = _as_mask(available, b.shape[0])
    s = _as_scores(scores, b.shape[0], score_name)
    order = descending_order(s, mask & ~np.isnan(s))
    return best_effort_pack(order, b, total_bandwidth_hz, rule)


def best_channel(
    available: ArrayLike,
    gain_lin: ArrayLike,
    min_bandwidth_hz: ArrayLike,
    total_bandwidth_hz: float,
    rule: str = "stop",
) -> NDArray[np.bool_]:
    """BC: best channel first, best effort (paper Section V-A (1); Amiri et al. 2021).

    Parameters
    ----------
    available : bool[V]
        Devices available this round.
    gain_lin : float[V]
        Average channel gain H̄_v (linear, dimensionless); NaN = never taken.
    min_bandwidth_hz : float[V]
        B*_v in Hz (+inf = infeasible, never taken).
    total_bandwidth_hz : float
        Budget B in Hz.
    rule : str
        Best-effort rule, ``"stop"`` or ``"skip"`` (:func:`best_effort_pack`).

    Returns
    -------
    bool[V]
        The scheduled devices.

    """
    return _rank_and_pack(
        available, gain_lin, "gain_lin", min_bandwidth_hz, total_bandwidth_hz, rule
    )


def best_norm(
    available: ArrayLike,
    update_norm: ArrayLike,
    min_bandwidth_hz: ArrayLike,
    total_bandwidth_hz: float,
    rule: str = "stop",
) -> NDArray[np.bool_]:
    """BN2: largest local-update L2 norm first, best effort (paper Section V-A (2); Amiri et al.).

    Parameters
    ----------
    available : bool[V]
        Devices available this round.
    update_norm : float[V]
        ||w_v^{(j+1)} − w^{(j)}||₂ of each device's local update; NaN = never taken.
    min_bandwidth_hz : float[V]
        B*_v in Hz (+inf = infeasible, never taken).
    total_bandwidth_hz : float
        Budget B in Hz.
    rule : str
        Best-effort rule, ``"stop"`` or ``"skip"`` (:func:`best_effort_pack`).

    Returns
    -------
    bool[V]
        The scheduled devices.

    """
    return _rank_and_pack(
        available, update_norm, "update_norm", min_bandwidth_hz, total_bandwidth_hz, rule
    )


def power_of_choice(
    available: ArrayLike,
    loss: ArrayLike,
    min_bandwidth_hz: ArrayLike,
    total_bandwidth_hz: float,
    num_candidates: int,
    rng: np.random.Generator,
    rule: str = "stop",
) -> NDArray[np.bool_]:
    """POC: power-of-choice, paper Section V-A (3); Cho et al., AISTATS 2022.

    Draw V' = ``num_candidates`` devices uniformly without replacement from the available
    devices with a non-NaN loss (``rng.choice``; ``0`` or V' >= their number means all of them,
    and then ``rng`` is not used), rank them by the loss accumulated over this round's local
    steps, descending (ties: lowest index), and pack them best effort. Infeasible devices can be
    drawn as candidates (they are available) but are never taken (DESIGN.md).

    Parameters
    ----------
    available : bool[V]
        Devices available this round.
    loss : float[V]
        Training loss accumulated over this round's local steps; NaN = treated as unavailable.
    min_bandwidth_hz : float[V]
        B*_v in Hz (+inf = infeasible, never taken).
    total_bandwidth_hz : float
        Budget B in Hz.
    num_candidates : int
        V' >= 0 (0 = all available).
    rng : numpy.random.Generator
        Source of the candidate draw.
    rule : str
        Best-effort rule, ``"stop"`` or ``"skip"`` (:func:`best_effort_pack`).

    Returns
    -------
    bool[V]
        The scheduled devices.

    Raises
    ------
    ValueError
        Negative or non-integer ``num_candidates`` and the errors of :func:`best_effort_pack`.

    """
    _check_rule(rule)
    if int(num_candidates) != num_candidates or num_candidates < 0:
        raise ValueError(
            f"num_candidates: must be an integer >= 0 (0 = all available), got {num_candidates}"
        )
    b = _as_min_bandwidth(min_bandwidth_hz)
    mask = _as_mask(available, b.shape[0])
    s = _as_scores(loss, b.shape[0], "loss")
    pool = np.flatnonzero(mask & ~np.isnan(s))
    d = int(num_candidates)
    if 0 < d < pool.size:
        drawn = np.sort(rng.choice(pool, size=d, replace=False))
    else:
        drawn = pool
    eligible = np.zeros(b.shape[0], dtype=bool)
    eligible[drawn] = True
    order = descending_order(s, eligible)
    return best_effort_pack(order, b, total_bandwidth_hz, rule)
