"""Fed-CBS baseline: QCID and its sequential CUCB client sampling, adapted to a bandwidth budget.

Reference: J. Zhang, A. Li, M. Tang, J. Sun, X. Chen, F. Zhang, C. Chen, Y. Chen, H. Li,
"Fed-CBS: A Heterogeneity-Aware Client Sampling Mechanism for Federated Learning via
Class-Imbalance Reduction", ICML 2023 (arXiv:2209.15245); cited below as "Fed-CBS".

* QCID, the quadratic class-imbalance degree of a group B of clients (Fed-CBS, definition of
  QCID):
  QCID(B) = Σ_c (Σ_{k∈B} n_k p_{k,c} / Σ_{k∈B} n_k − 1/C)², the squared L2 distance of the
  group's label distribution from the uniform one.
* Its privacy-preserving form from pairwise inner products (Fed-CBS, QCID estimation):
  QCID(B) = Σ_{k,k'∈B} n_k n_k' ⟨p_k, p_k'⟩ / (Σ_{k∈B} n_k)² − 1/C.
* Sequential sampling (Fed-CBS, "client sampling with probability"): the first client is
  drawn (not taken as the argmax) by the combinatorial UCB
  P(c_1 = k) ∝ 1/QCID({k})^{β_1} + λ sqrt(3 ln t / (2 T_k)), every later client by
  P(c_m = k | B_{m−1}) ∝ 1/QCID(B_{m−1} ∪ {k})^{β_m}, with λ = 10 and β_m = m.
  (The paper writes the later conditionals with extra factors that depend only on B_{m−1},
  such as QCID(B_{m−1})^{β_{m−1}}, so that the product over the picks telescopes; they do not
  depend on the candidate k and cancel in the normalisation.)

Adaptation to the wireless cell (docs/design.md, "Fed-CBS"): only available devices with a finite
minimum bandwidth are candidates; sampling continues until the next *sampled* device does not fit
the remaining bandwidth, and then stops (that device is not taken); the selection counts T_k of the
selected devices are incremented and the round counter t advanced. Pure numpy: imports neither flwr
nor torch.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedcgd_strategy.validation import (
    as_bool_mask,
    as_label_distributions,
    as_min_bandwidths,
    as_nonnegative_array,
    as_nonnegative_float,
    check_integer,
    check_total_bandwidth,
)

__all__ = [
    "QCID_FLOOR",
    "FedCBSState",
    "cucb_first_pick_probabilities",
    "fedcbs_select",
    "qcid",
    "qcid_pairwise",
    "qcid_with_each_candidate",
    "sequential_pick_probabilities",
]

#: Floor applied to QCID before it is inverted in the sampling weights. QCID is 0 for a
#: perfectly balanced group, which would make the weight 1/QCID^β infinite; with the floor such
#: candidates get the (finite) largest weight and ties among them stay uniform. 1e-12 is far
#: above floating-point round-off of QCID (~1e-16) and below any QCID a real group of integer
#: label counts can take (~1/N² for N <= 10^6 samples).
QCID_FLOOR = 1e-12


def _check_group(label_dist: ArrayLike, num_examples: ArrayLike) -> tuple[NDArray, NDArray]:
    """Validate a non-empty group: label distributions float[K, C] and sizes float[K] > 0."""
    p = as_label_distributions(label_dist)
    n = as_nonnegative_array(num_examples, "num_examples", shape=(p.shape[0],), strict=True)
    return p, n


def qcid(label_dist: ArrayLike, num_examples: ArrayLike) -> float:
    """Quadratic class-imbalance degree of a group (Fed-CBS, definition of QCID).

    QCID(B) = Σ_c (Σ_k n_k p_{k,c} / Σ_k n_k − 1/C)².

    Parameters
    ----------
    label_dist : float[K, C]
        Label distributions p_k of the K clients of the group (rows sum to 1).
    num_examples : float[K]
        Local dataset sizes n_k > 0.

    Returns
    -------
    float
        QCID >= 0 (dimensionless); 0 iff the group's label distribution is uniform.

    """
    p, n = _check_group(label_dist, num_examples)
    group = (n @ p) / n.sum()
    return float(np.sum((group - 1.0 / p.shape[1]) ** 2))


def qcid_pairwise(label_dist: ArrayLike, num_examples: ArrayLike) -> float:
    """QCID from pairwise inner products (Fed-CBS, privacy-preserving QCID estimation).

    QCID(B) = Σ_{k,k'} n_k n_k' ⟨p_k, p_k'⟩ / (Σ_k n_k)² − 1/C. The server needs only the
    inner products ⟨p_k, p_k'⟩ (computable with secure aggregation), not the p_k themselves.
    Equal to :func:`qcid` because Σ_c p_{k,c} = 1 for every client.

    Parameters
    ----------
    label_dist : float[K, C]
        Label distributions p_k (rows sum to 1).
    num_examples : float[K]
        Local dataset sizes n_k > 0.

    Returns
    -------
    float
        QCID (may be a round-off negative of order 1e-16 for a balanced group).

    """
    p, n = _check_group(label_dist, num_examples)
    inner = p @ p.T  # ⟨p_k, p_k'⟩, float[K, K]
    return float(n @ inner @ n / n.sum() ** 2 - 1.0 / p.shape[1])


def qcid_with_each_candidate(
    group_counts: ArrayLike,
    group_size: float,
    cand_label_dist: ArrayLike,
    cand_num_examples: ArrayLike,
) -> NDArray[np.float64]:
    """QCID(B ∪ {k}) for every candidate k at once (Fed-CBS QCID, vectorised).

    Parameters
    ----------
    group_counts : float[C]
        Σ_{j∈B} n_j p_j, the group's (expected) per-class sample counts; zeros for B = ∅.
    group_size : float
        Σ_{j∈B} n_j (0 for B = ∅).
    cand_label_dist : float[K, C]
        Label distributions of the candidates.
    cand_num_examples : float[K]
        Their dataset sizes n_k > 0.

    Returns
    -------
    float[K]
        QCID of the group extended by each candidate (>= 0).

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
    """First-pick probabilities of Fed-CBS sampling (combinatorial UCB term).

    P(c_1 = k) ∝ 1/max(QCID({k}), floor)^β + λ sqrt(3 ln t / (2 max(T_k, 1))).

    T_k is how often client k was selected in earlier rounds; the paper's bonus is infinite for
    a never-selected client, here T_k is floored at 1 (as when every count starts at one), so a
    fresh client gets the largest finite bonus. The QCID floor is :data:`QCID_FLOOR`.

    Parameters
    ----------
    qcid_single : float[K]
        QCID({k}) of each candidate alone.
    counts : int[K]
        Selection counts T_k >= 0 of the candidates.
    round_t : int
        Current round t >= 1 (1-based; ln 1 = 0: no exploration bonus in the first round).
    lam : float
        Exploration weight λ >= 0 (Fed-CBS: 10).
    beta : float
        Exponent β_1 (Fed-CBS: β_m = m, so 1).

    Returns
    -------
    float[K]
        Probabilities summing to 1.

    """
    q = np.maximum(np.asarray(qcid_single, dtype=np.float64), QCID_FLOOR)
    t_k = np.maximum(np.asarray(counts, dtype=np.float64), 1.0)
    t = check_integer(round_t, "round_t", minimum=1)
    lam = as_nonnegative_float(lam, "lam")
    weights = q ** (-float(beta)) + lam * np.sqrt(3.0 * np.log(float(t)) / (2.0 * t_k))
    return weights / weights.sum()


def sequential_pick_probabilities(qcid_with_candidate: ArrayLike, beta: float) -> NDArray:
    """Later-pick probabilities of Fed-CBS sampling (m >= 2).

    P(c_m = k | B_{m−1}) ∝ 1/max(QCID(B_{m−1} ∪ {k}), floor)^{β_m}, computed in log space so
    that large β_m (= m) neither overflows nor underflows.

    Parameters
    ----------
    qcid_with_candidate : float[K]
        QCID(B_{m−1} ∪ {k}) for each remaining candidate k.
    beta : float
        Exponent β_m > 0.

    Returns
    -------
    float[K]
        Probabilities summing to 1.

    """
    q = np.maximum(np.asarray(qcid_with_candidate, dtype=np.float64), QCID_FLOOR)
    log_w = -float(beta) * np.log(q)
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


class FedCBSState:
    """Fed-CBS state that persists across rounds: selection counts T_k and the round counter.

    Parameters
    ----------
    num_devices : int
        V, the number of devices of the cell.
    counts : int[V], optional
        Initial selection counts T_k (default zeros).
    round_index : int
        Number of rounds already sampled (default 0); the next call of :func:`fedcbs_select`
        uses t = round_index + 1.

    Attributes
    ----------
    counts : int64[V]
        T_k, how often device k has been selected.
    round_index : int
        Rounds sampled so far.

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
        """Rebuild a state from :meth:`to_dict` output."""
        for key in ("num-devices", "round", "counts"):
            if key not in data:
                raise ValueError(f"FedCBSState.from_dict: missing key {key!r}")
        num = data["num-devices"]
        rnd = data["round"]
        if not isinstance(num, int) or not isinstance(rnd, int):
            raise ValueError(
                f"FedCBSState.from_dict: 'num-devices' and 'round' must be int: {data}"
            )
        counts = data["counts"]
        return cls(num, counts=np.asarray(counts), round_index=rnd)

    def __repr__(self) -> str:
        return f"FedCBSState(num_devices={self.num_devices}, round_index={self.round_index})"


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

    Candidates are the available devices with a finite B*_v. The m-th device (m = 1, 2, ...) is
    drawn from the remaining candidates with :func:`cucb_first_pick_probabilities` (m = 1,
    β_1 = 1, t = ``state.round_index + 1``, T_k = ``state.counts``) or
    :func:`sequential_pick_probabilities` (m >= 2, β_m = m). If the drawn device's B*_v exceeds
    the remaining bandwidth, sampling stops and that device is not taken; otherwise it is
    selected. Afterwards ``state.counts`` of the selected devices is incremented and
    ``state.round_index`` advanced by one (also when nothing was selected). One ``rng`` draw per
    sampled device (``rng.choice`` with probabilities), so the same seed gives the same schedule.

    Parameters
    ----------
    state : FedCBSState
        Persistent counts and round counter (mutated).
    available : bool[V]
        Devices available this round.
    label_dist : float[V, C]
        Label distributions p_v (rows of non-candidates are ignored).
    num_examples : float[V]
        |D_v| (> 0 for candidates; others ignored).
    min_bandwidth_hz : float[V]
        B*_v in Hz; +inf = infeasible (never a candidate).
    total_bandwidth_hz : float
        Budget B in Hz.
    rng : numpy.random.Generator
        Source of the draws.
    lam : float
        Exploration weight λ (Fed-CBS: 10).

    Returns
    -------
    bool[V]
        The selected devices.

    Raises
    ------
    ValueError
        Shape mismatches, NaN or negative B*_v, bad budget, candidate rows that are not
        distributions, non-positive |D_v| of a candidate.

    """
    v = state.num_devices
    b = as_min_bandwidths(min_bandwidth_hz, v)
    total = check_total_bandwidth(total_bandwidth_hz, allow_zero=True)
    avail = as_bool_mask(available, v, "available")
    lam = as_nonnegative_float(lam, "lam")
    candidate = avail & np.isfinite(b)
    p = as_label_distributions(label_dist, num_rows=v, rows=candidate)
    n = as_nonnegative_array(num_examples, "num_examples", shape=(v,), strict=True, where=candidate)
    remaining = np.flatnonzero(candidate)

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
        if used_hz + b[dev] > total:
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
