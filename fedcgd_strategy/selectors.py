"""Baseline device selectors BC, BN2 and POC with best-effort bandwidth packing.

Paper Section V-A: BC and BN2 (Amiri et al., IEEE TWC 2021), POC (Cho et al., AISTATS 2022).
The packing and tie rules are in docs/design.md, "Best effort" and "POC". Every selector
returns a bool[V] mask. The arguments are trusted (:class:`~fedcgd_strategy.RoundInputs`
checked them). Pure numpy.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedcgd_task.schema import PACK_RULES as PACK_RULES  # "stop" (the paper's wording), "skip"


def best_effort_pack(
    order: ArrayLike,
    min_bandwidth_hz: ArrayLike,
    total_bandwidth_hz: float,
    rule: str = "stop",
) -> NDArray[np.bool_]:
    """Best-effort schedule of devices in a given order, paper Section V-A baselines.

    Walk ``order`` (int[K], distinct device indices in [0, V), best first; others are not taken)
    and take each device while Σ B*_v stays <= B (``total_bandwidth_hz``, Hz); ``rule`` (one of
    :data:`PACK_RULES`) ``"stop"`` ends the walk at the first device that does not fit, ``"skip"``
    passes it over. ``min_bandwidth_hz`` float[V] is B*_v in Hz, paper eq. (lambert); infeasible
    devices (B*_v = inf) are never taken and never stop the walk. Returns the schedule, bool[V].
    """
    if rule not in PACK_RULES:
        raise ValueError(f"rule must be one of {', '.join(PACK_RULES)}, got {rule!r}")
    need_hz = np.asarray(min_bandwidth_hz, dtype=np.float64)
    selected = np.zeros(need_hz.shape[0], dtype=bool)
    used_hz = 0.0
    for dev in np.asarray(order, dtype=np.intp).tolist():  # the walk is inherently sequential
        need = need_hz[dev]
        if not np.isfinite(need):
            continue
        if used_hz + need <= total_bandwidth_hz:
            selected[dev] = True
            used_hz += need
        elif rule == "stop":
            break
    return selected


def best_score_first(
    available: ArrayLike,
    scores: ArrayLike,
    min_bandwidth_hz: ArrayLike,
    total_bandwidth_hz: float,
    rule: str = "stop",
    *,
    num_candidates: int = 0,
    rng: np.random.Generator | None = None,
) -> NDArray[np.bool_]:
    """BC and BN2: highest score first, best effort (paper Section V-A (1), (2); Amiri et al.).

    ``available`` bool[V], the devices available this round; ``scores`` float[V] (BC: average
    channel gain H̄_v, linear; BN2: ||w_v^{(j+1)} − w^{(j)}||₂), NaN = never taken;
    ``min_bandwidth_hz``, ``total_bandwidth_hz`` and ``rule`` as in :func:`best_effort_pack`.
    With ``rng`` and ``0 < num_candidates <`` the number of eligible devices, only
    ``num_candidates`` of them, drawn uniformly without replacement, are ranked (POC). Ties go
    to the lowest index.
    """
    s = np.asarray(scores, dtype=np.float64)
    pool = np.flatnonzero(np.asarray(available, dtype=bool) & ~np.isnan(s))
    if rng is not None and 0 < num_candidates < pool.size:
        pool = np.sort(rng.choice(pool, size=num_candidates, replace=False))
    order = pool[np.argsort(-s[pool], kind="stable")]  # stable: equal scores by index
    return best_effort_pack(order, min_bandwidth_hz, total_bandwidth_hz, rule)


#: BC by the average channel gain ``gain_lin``, BN2 by the local-update L2 norm ``update_norm``.
best_channel = best_norm = best_score_first


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

    Draw V' = ``num_candidates`` (>= 0) devices with ``rng``, uniformly without replacement, from
    the ``available`` ones (bool[V]) with a non-NaN ``loss`` (float[V], accumulated over this
    round's local steps; V' = 0 or >= their number: all, ``rng`` unused), rank them by loss
    descending and pack them best effort (other arguments as in :func:`best_effort_pack`).
    """
    return best_score_first(
        available, loss, min_bandwidth_hz, total_bandwidth_hz, rule,
        num_candidates=num_candidates, rng=rng,
    )  # fmt: skip
