"""What a policy sees of one round: :class:`RoundInputs`, assembled in one place.

Every array has one entry per device of the cell (length V), indexed by partition id;
``candidate`` marks the devices that are available this round *and* reported valid statistics
(or, when the rule schedules from the channel alone, every available device). Non-candidates
are never scheduled. :func:`round_inputs` is the only place that builds a :class:`RoundInputs`
from a round: the channel draw, the reported statistics (as arrays, see :class:`ReportedStats`),
the local class counts reported at discovery and the WEMD target. Its arrays are read-only
copies, and a policy is handed a copy of its own (:func:`policy_copy`): the decision is checked
against the server's instance, which no policy ever sees, so nothing a policy does to what it
was given (``setflags(write=True)`` and zeroing B*, ``object.__setattr__`` on the budget) can
change the verdict. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.estimators import estimate_global_sigma
from fedcgd_strategy.validation import (
    as_bool_mask,
    as_float_array,
    as_label_distributions,
    as_min_bandwidths,
    as_nonnegative_array,
    as_target_distribution,
    check_integer,
    check_total_bandwidth,
)


@dataclass(frozen=True)
class RoundInputs:
    """What a policy may use to schedule one round (all arrays have length V), validated.

    Construction checks every field (shapes, candidates' label distributions on the simplex,
    |D_v| > 0 and σ̂_v >= 0 or NaN = not computed for candidates, B* >= 0 or inf, B > 0,
    b >= 1) and raises ValueError naming the field, the bad value and what is allowed.

    Attributes
    ----------
    candidate : bool[V]
        Available this round and reported valid statistics.
    label_dist : float[V, C]
        Label distribution p_v of the samples each device uses this round (rows of
        non-candidates are ignored and may be zero).
    num_examples : float[V]
        Local dataset size |D_v| (FedAvg weight); 0 for non-candidates.
    sigma_v : float[V]
        Per-device sampling-variance estimate σ̂_v, paper eq. (local_est_sigma).
    min_bandwidth_hz : float[V]
        Minimum bandwidth B*_v in Hz, paper eq. (lambert); ``inf`` = cannot meet the deadline.
    gain_lin : float[V]
        Average channel gain H̄_v (linear).
    total_bandwidth_hz : float
        Bandwidth budget B in Hz.
    batch_size : int
        Mini-batch size b.
    target_dist : float[C]
        WEMD target distribution p.
    train_loss : float[V] or None
        Loss accumulated over this round's local steps (only after local training).
    update_norm : float[V] or None
        L2 norm of the local update (only after local training).
    local_dist : float[V, C] or None
        Each device's whole local class distribution, reported once at discovery (Fed-CBS's
        p_v); rows of candidates are distributions.

    """

    candidate: NDArray[np.bool_]
    label_dist: NDArray[np.float64]
    num_examples: NDArray[np.float64]
    sigma_v: NDArray[np.float64]
    min_bandwidth_hz: NDArray[np.float64]
    gain_lin: NDArray[np.float64]
    total_bandwidth_hz: float
    batch_size: int
    target_dist: NDArray[np.float64]
    train_loss: NDArray[np.float64] | None = None
    update_norm: NDArray[np.float64] | None = None
    local_dist: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        """Validate every array where the round's data enters the scheduling math."""
        num_devices = int(np.shape(self.candidate)[0]) if np.ndim(self.candidate) == 1 else -1
        cand = as_bool_mask(self.candidate, max(num_devices, 0), "candidate")
        target = as_target_distribution(self.target_dist)
        as_label_distributions(self.label_dist, num_rows=num_devices, rows=cand)
        if np.shape(self.label_dist)[-1] != target.shape[0]:
            raise ValueError(
                f"label_dist has {np.shape(self.label_dist)[-1]} classes, target_dist "
                f"{target.shape[0]}; they must match"
            )
        vector = (num_devices,)
        as_nonnegative_array(
            self.num_examples, "num_examples", shape=vector, strict=True, where=cand
        )
        sigma_v = as_float_array(self.sigma_v, "sigma_v", shape=vector)
        as_nonnegative_array(sigma_v, "sigma_v", where=cand & ~np.isnan(sigma_v))
        as_min_bandwidths(self.min_bandwidth_hz, num_devices)
        as_nonnegative_array(self.gain_lin, "gain_lin", shape=vector)
        check_total_bandwidth(self.total_bandwidth_hz)
        check_integer(self.batch_size, "batch_size", minimum=1)
        if self.local_dist is not None:
            as_label_distributions(self.local_dist, "local_dist", num_rows=num_devices, rows=cand)
        for name in ("train_loss", "update_norm"):
            if getattr(self, name) is not None:
                as_float_array(getattr(self, name), name, shape=vector)

    @property
    def num_devices(self) -> int:
        """Number of devices V in the cell."""
        return int(self.candidate.shape[0])

    def global_sigma(self) -> float:
        """σ̂ over the candidates, paper eq. (global_est_sigma).

        0 when nobody reported; NaN when σ̂_v was not computed (the rule does not need it).
        """
        idx = np.flatnonzero(self.candidate)
        if idx.size == 0:
            return 0.0
        if np.any(np.isnan(self.sigma_v[idx])):
            return float("nan")
        return estimate_global_sigma(self.sigma_v[idx], self.num_examples[idx])


@dataclass(frozen=True)
class ReportedStats:
    """The statistics the devices reported this round, as length-V arrays.

    Rows of devices that did not report are zero and ignored; ``train_loss`` and
    ``update_norm`` come with training replies only (None otherwise; NaN rows for devices
    without them).

    Attributes
    ----------
    reported : bool[V]
        Devices with a valid report this round (they become the candidates).
    label_hist : int[V, C]
        Class counts of the samples each device uses this round.
    num_examples : float[V]
        |D_v|.
    sigma_v : float[V]
        σ̂_v (NaN: not computed).
    train_loss, update_norm : float[V] or None
        Post-training values.

    """

    reported: NDArray[np.bool_]
    label_hist: NDArray[np.int64]
    num_examples: NDArray[np.float64]
    sigma_v: NDArray[np.float64]
    train_loss: NDArray[np.float64] | None = None
    update_norm: NDArray[np.float64] | None = None


def _row_distributions(counts: NDArray[np.int64]) -> NDArray[np.float64]:
    """Rows of ``counts`` normalised to sum 1 (zero rows stay zero)."""
    totals = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros(counts.shape), where=totals > 0)


def round_target(
    target_dist: NDArray[np.float64] | None, reported: ReportedStats | None, num_classes: int
) -> NDArray[np.float64]:
    """The WEMD target p of the round.

    ``target_dist`` when given (run-config ``target-dist = "global"``); otherwise the class
    distribution of the union of this round's reported histograms (``"devices"``), uniform when
    nobody reported.
    """
    if target_dist is not None:
        return np.asarray(target_dist, dtype=float)
    if reported is not None and reported.reported.any():
        total = reported.label_hist[reported.reported].sum(axis=0).astype(float)
        return total / total.sum()
    return np.full(num_classes, 1.0 / num_classes)


def round_inputs(
    *,
    available: NDArray[np.bool_],
    min_bandwidth_hz: NDArray[np.float64],
    gain_lin: NDArray[np.float64],
    total_bandwidth_hz: float,
    batch_size: int,
    num_classes: int,
    target_dist: NDArray[np.float64] | None,
    reported: ReportedStats | None = None,
    local_counts: NDArray[np.int64] | None = None,
) -> RoundInputs:
    """Assemble the policy's view of one round (the one place a :class:`RoundInputs` is built).

    Parameters
    ----------
    available : bool[V]
        Devices drawn available by the channel that can be reached this round.
    min_bandwidth_hz : float[V]
        B*_v of the round's draw (Hz).
    gain_lin : float[V]
        H̄_v of the round's draw (linear).
    total_bandwidth_hz : float
        Bandwidth budget B (Hz).
    batch_size : int
        b.
    num_classes : int
        C.
    target_dist : float[C] or None
        WEMD target p; None: from the reports (:func:`round_target`).
    reported : ReportedStats, optional
        The valid reports of the round; their devices are the candidates. None: nobody was
        asked (the rule schedules from the channel alone): every ``available`` device is a
        candidate, its round label distribution stands at the target, σ̂_v at NaN (not
        computed) and |D_v| at its number of local samples (1 when unknown).
    local_counts : int[V, C], optional
        Class counts of each device's whole local dataset, reported at discovery (Fed-CBS's
        p_v; row sums are |D_v|); zero rows for unknown devices.

    """
    num_devices = int(np.shape(available)[0])
    target = round_target(target_dist, reported, num_classes)
    local_dist = None if local_counts is None else _row_distributions(local_counts)
    if reported is None:
        candidate = np.asarray(available, dtype=bool)
        sizes = np.ones(num_devices)
        if local_counts is not None:
            sizes = local_counts.sum(axis=1).astype(float)
        label_dist = np.broadcast_to(target, (num_devices, num_classes)).copy()
        num_examples, sigma_v = sizes, np.full(num_devices, np.nan)
        train_loss = update_norm = None
    else:
        candidate = np.asarray(reported.reported, dtype=bool)
        label_dist = _row_distributions(reported.label_hist)
        num_examples, sigma_v = reported.num_examples, reported.sigma_v
        train_loss, update_norm = reported.train_loss, reported.update_norm
    return RoundInputs(
        candidate=_frozen(candidate),
        label_dist=_frozen(label_dist),
        num_examples=_frozen(num_examples),
        sigma_v=_frozen(sigma_v),
        min_bandwidth_hz=_frozen(np.asarray(min_bandwidth_hz, dtype=float)),
        gain_lin=_frozen(np.asarray(gain_lin, dtype=float)),
        total_bandwidth_hz=total_bandwidth_hz,
        batch_size=batch_size,
        target_dist=_frozen(target),
        train_loss=None if train_loss is None else _frozen(train_loss),
        update_norm=None if update_norm is None else _frozen(update_norm),
        local_dist=None if local_dist is None else _frozen(local_dist),
    )


def _frozen(array: NDArray[Any]) -> NDArray[Any]:
    """A read-only copy: a policy cannot change the round it is checked against."""
    copy = np.array(array)
    copy.setflags(write=False)
    return copy


def policy_copy(inputs: RoundInputs) -> RoundInputs:
    """A copy of ``inputs`` for the policy: new read-only arrays, a new (frozen) object.

    What the policy does to it never reaches ``inputs``, the server's instance, against which
    its decision is checked and from which the round's record is computed (docs/design.md,
    "Checked decisions").
    """
    copied = {f.name: getattr(inputs, f.name) for f in fields(inputs)}
    for name, value in copied.items():
        if isinstance(value, np.ndarray):
            copied[name] = _frozen(value)
    view = object.__new__(RoundInputs)
    for name, value in copied.items():  # already validated: no second __post_init__
        object.__setattr__(view, name, value)
    return view
