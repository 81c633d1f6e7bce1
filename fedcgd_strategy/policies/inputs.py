"""What a policy sees of one round: :class:`RoundInputs`, assembled in one place.

:func:`round_inputs` builds it from the channel draw and the reports, with read-only arrays; a
policy gets its own copy (:func:`policy_copy`, docs/design.md, "Checked decisions"). Pure numpy.
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
    """What a policy may use to schedule one round, validated on construction.

    The fields (arrays of length V indexed by partition id) are described in
    docs/bring-your-own.md, "Write your own policy"; non-candidates are never scheduled, rows of
    non-candidates are ignored, σ̂_v is NaN where not computed, B*_v ``inf`` where the deadline
    cannot be met. A bad field raises ValueError naming it, the value and what is allowed.
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
        """σ̂ over the candidates, paper eq. (global_est_sigma); 0 with none, NaN if not computed."""
        idx = np.flatnonzero(self.candidate)
        if idx.size == 0:
            return 0.0
        if np.any(np.isnan(self.sigma_v[idx])):
            return float("nan")
        return estimate_global_sigma(self.sigma_v[idx], self.num_examples[idx])


@dataclass(frozen=True)
class ReportedStats:
    """The statistics the devices reported this round, as length-V arrays.

    Rows of devices that did not report (``reported`` False) are zero and ignored. ``label_hist``
    int[V, C] counts the classes a device uses this round; ``sigma_v`` is NaN where not computed;
    ``train_loss`` and ``update_norm`` come with training replies only.
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
    """The WEMD target p: ``target_dist`` if given, else the union of the reported histograms.

    Uniform when nobody reported (docs/design.md, "WEMD target").
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
        The valid reports; their devices are the candidates. None (the rule schedules from the
        channel alone): every available device is a candidate, with its label distribution at
        the target, σ̂_v NaN and |D_v| its number of local samples (1 when unknown).
    local_counts : int[V, C], optional
        Class counts of each device's whole local dataset, reported at discovery (zero rows for
        unknown devices).
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
    """A copy of ``inputs`` for the policy: new read-only arrays in a new frozen object."""
    copied = {f.name: getattr(inputs, f.name) for f in fields(inputs)}
    for name, value in copied.items():
        if isinstance(value, np.ndarray):
            copied[name] = _frozen(value)
    view = object.__new__(RoundInputs)
    for name, value in copied.items():  # already validated: no second __post_init__
        object.__setattr__(view, name, value)
    return view
