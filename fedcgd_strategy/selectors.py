"""The baselines' device selectors: BC, BN2 and POC with best-effort bandwidth packing, and
Fed-CBS's QCID-driven sampling, adapted to a bandwidth budget.

Paper Section V-A: BC and BN2 (Amiri et al., IEEE TWC 2021), POC (Cho et al., AISTATS 2022).
Fed-CBS: J. Zhang et al., "Fed-CBS: A Heterogeneity-Aware Client Sampling Mechanism for
Federated Learning via Class-Imbalance Reduction", ICML 2023 (arXiv:2209.15245), cited below
as "Fed-CBS". The packing, tie and adaptation rules are in docs/design.md, "Best effort", "POC"
and "Fed-CBS". Every selector returns a bool[V] mask. Pure numpy.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedcgd_config.schema import PACK_RULES as PACK_RULES  # "stop" (the paper's wording), "skip"
from fedcgd_strategy.problem import as_nonnegative_array, check_integer


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


#: Floor on QCID before 1/QCID^β (QCID = 0 for a balanced group): above round-off (~1e-16),
#: below any QCID of integer label counts (~1/N² for N <= 10^6 samples).
QCID_FLOOR = 1e-12


def qcid_with_each_candidate(
    group_counts: ArrayLike,
    group_size: float,
    cand_label_dist: ArrayLike,
    cand_num_examples: ArrayLike,
) -> NDArray[np.float64]:
    """QCID(B ∪ {k}) for every candidate k at once, float[K] (Fed-CBS, definition of QCID).

    QCID(B) = Σ_c (Σ_{j∈B} n_j p_{j,c} / Σ_{j∈B} n_j − 1/C)², the quadratic class-imbalance
    degree, dimensionless, 0 iff the group's label distribution is uniform. ``group_counts``
    float[C] = Σ_{j∈B} n_j p_j (zeros for B = ∅), ``group_size`` = Σ_{j∈B} n_j;
    ``cand_label_dist`` float[K, C] (rows sum to 1) and ``cand_num_examples`` float[K] (n_k > 0).
    """
    s = np.asarray(group_counts, dtype=np.float64)
    p = np.asarray(cand_label_dist, dtype=np.float64)
    n = np.asarray(cand_num_examples, dtype=np.float64)
    merged = (s[None, :] + n[:, None] * p) / (float(group_size) + n)[:, None]
    return np.sum((merged - 1.0 / p.shape[1]) ** 2, axis=1)


def cucb_first_pick_probabilities(
    qcid_single: ArrayLike,
    counts: ArrayLike,
    round_t: int,
    lam: float,
    beta: float = 1.0,
) -> NDArray[np.float64]:
    """First-pick probabilities of Fed-CBS sampling (combinatorial UCB term), float[K] summing to 1.

    P(c_1 = k) ∝ 1/max(QCID({k}), :data:`QCID_FLOOR`)^β + λ sqrt(3 ln t / (2 max(T_k, 1))).
    The paper's bonus is infinite for a never-selected client; T_k is floored at 1 instead.
    ``qcid_single`` float[K]: QCID({k}); ``counts`` int[K]: T_k >= 0; ``round_t``: t >= 1 (ln 1 = 0:
    no bonus in the first round); ``lam``: λ >= 0 (Fed-CBS: 10); ``beta``: β_1 (β_m = m, so 1).
    """
    q = np.maximum(np.asarray(qcid_single, dtype=np.float64), QCID_FLOOR)
    t_k = np.maximum(np.asarray(counts, dtype=np.float64), 1.0)
    weights = q ** (-float(beta)) + lam * np.sqrt(3.0 * np.log(float(round_t)) / (2.0 * t_k))
    return weights / weights.sum()


def sequential_pick_probabilities(qcid_with_candidate: ArrayLike, beta: float) -> NDArray:
    """Later-pick probabilities of Fed-CBS sampling (m >= 2), float[K] summing to 1.

    P(c_m = k | B_{m−1}) ∝ 1/max(QCID(B_{m−1} ∪ {k}), floor)^{β_m}, in log space so that β_m = m
    neither overflows nor underflows. The paper's extra factors depending only on B_{m−1} cancel in
    the normalisation and are omitted.
    """
    q = np.maximum(np.asarray(qcid_with_candidate, dtype=np.float64), QCID_FLOOR)
    log_w = -float(beta) * np.log(q)
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


class FedCBSState:
    """Fed-CBS state that persists across rounds: selection counts T_k and the round counter.

    ``num_devices`` V; ``counts`` int[V], the initial T_k (default zeros); ``round_index`` the
    rounds already sampled (the next :func:`fedcbs_select` uses t = round_index + 1).
    """

    def __init__(
        self, num_devices: int, counts: ArrayLike | None = None, round_index: int = 0
    ) -> None:
        v = check_integer(num_devices, "num_devices", minimum=1)
        if counts is None:
            c = np.zeros(v, dtype=np.int64)
        else:
            raw = as_nonnegative_array(counts, "counts", shape=(v,))
            if np.any(raw != np.round(raw)):
                raise ValueError(f"counts must hold {v} integers >= 0, got {raw.tolist()}")
            c = raw.astype(np.int64)
        self.counts: NDArray[np.int64] = c
        self.round_index: int = check_integer(round_index, "round_index", minimum=0)

    @property
    def num_devices(self) -> int:
        """V."""
        return int(self.counts.shape[0])

    def to_dict(self) -> dict[str, int | list[int]]:
        """Plain-Python snapshot for logs and checkpoints (JSON-serialisable)."""
        return {
            "num-devices": self.num_devices,
            "round": self.round_index,
            "counts": [int(c) for c in self.counts],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> FedCBSState:
        """Rebuild a state from :meth:`to_dict` output (ValueError naming what is wrong)."""
        for key in ("num-devices", "round", "counts"):
            if key not in data:
                raise ValueError(f"FedCBSState.from_dict: missing key {key!r}")
        num, rnd = data["num-devices"], data["round"]
        return cls(num, counts=np.asarray(data["counts"]), round_index=rnd)  # type: ignore[arg-type]


def fedcbs_select(
    state: FedCBSState,
    available: ArrayLike,
    label_dist: ArrayLike,
    num_examples: ArrayLike,
    min_bandwidth_hz: ArrayLike,
    total_bandwidth_hz: float,
    rng: np.random.Generator,
    *,
    lam: float = 10.0,
) -> NDArray[np.bool_]:
    """Fed-CBS sequential sampling under a bandwidth budget (docs/design.md, "Fed-CBS").

    Candidates are the available devices with a finite B*_v. The first device is drawn with
    :func:`cucb_first_pick_probabilities` (t = ``state.round_index + 1``, T_k = ``state.counts``),
    the m-th with :func:`sequential_pick_probabilities` (β_m = m); sampling stops at the first
    drawn device that does not fit the remaining bandwidth (not taken). ``state`` is then updated
    (counts of the selected devices, round + 1). One ``rng.choice`` per sampled device.
    ``available`` bool[V]; ``label_dist`` float[V, C] the p_v and ``num_examples`` float[V] |D_v|
    (> 0), both read for candidates only; ``min_bandwidth_hz`` float[V] B*_v in Hz (+inf =
    infeasible); ``total_bandwidth_hz`` B in Hz; ``lam`` λ (Fed-CBS: 10). Returns bool[V].
    """
    v = state.num_devices
    b = np.asarray(min_bandwidth_hz, dtype=np.float64)
    p, n = np.asarray(label_dist, dtype=np.float64), np.asarray(num_examples, dtype=np.float64)
    remaining = np.flatnonzero(np.asarray(available, dtype=bool) & np.isfinite(b))

    round_t = state.round_index + 1
    selected = np.zeros(v, dtype=bool)
    group_counts = np.zeros(p.shape[1], dtype=np.float64)
    group_size = 0.0
    used_hz = 0.0
    step = 1
    while remaining.size:
        cand_p, cand_n = p[remaining], n[remaining]
        q = qcid_with_each_candidate(group_counts, group_size, cand_p, cand_n)
        if step == 1:
            probs = cucb_first_pick_probabilities(q, state.counts[remaining], round_t, lam, 1.0)
        else:
            probs = sequential_pick_probabilities(q, float(step))
        pos = int(rng.choice(remaining.size, p=probs))
        dev = int(remaining[pos])
        if used_hz + b[dev] > total_bandwidth_hz:
            break
        selected[dev] = True
        used_hz += b[dev]
        group_counts += n[dev] * p[dev]
        group_size += n[dev]
        remaining = np.delete(remaining, pos)
        step += 1

    state.counts[selected] += 1
    state.round_index += 1
    return selected
