"""Reading and validating one client reply (the Flower side of the record protocol).

Every value a device sends is checked where it enters, against the round and the model, by the
rules of docs/design.md, "Screening replies"; a reply that fails raises
:class:`~.reply_fields.MalformedReplyError` naming the node, the key, the value and what is
allowed, which costs that device its round. Nothing a device sends can raise otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from flwr.app import Message
from numpy.typing import NDArray

from fedcgd_strategy.aggregation import flatten_update
from fedcgd_strategy.flower.reply_fields import (
    MalformedReplyError,
    finite_float,
    read_histogram,
    read_metric,
    read_metrics,
    read_model_arrays,
    read_num_examples,
    read_partition_id,
    read_sigma,
)
from fedcgd_strategy.policies import ReportedStats, UploadedUpdates
from fedcgd_strategy.screening import reported_norm_matches, round_histogram_problem, update_norm
from fedcgd_task import keys
from fedcgd_task.settings import TrainingSettings


@dataclass(frozen=True)
class DeviceReport:
    """One device's validated reply.

    Attributes
    ----------
    node_id, partition_id : int
        Flower node id of the sender and its device index v in [0, V).
    num_examples : int
        Local dataset size |D_v|.
    label_hist : int[C]
        Class counts of the samples used this round.
    sigma : float
        σ̂_v, paper eq. (local_est_sigma); NaN when the device was not asked for it.
    train_loss, update_norm, train_time_s : float or None
        Training replies only.
    arrays : dict of str -> ndarray, or None
        The trained local model (training replies only).
    upload_norm : float or None
        ||w_v − w|| the server computed from ``arrays`` (float64).
    """

    node_id: int
    partition_id: int
    num_examples: int
    label_hist: NDArray[np.int64]
    sigma: float
    train_loss: float | None = None
    update_norm: float | None = None
    train_time_s: float | None = None
    arrays: dict[str, NDArray[np.generic]] | None = None
    upload_norm: float | None = None

    @property
    def label_dist(self) -> NDArray[np.float64]:
        """p_v: the histogram normalised to sum 1."""
        return self.label_hist / float(self.label_hist.sum())


def read_info(
    msg: Message, *, num_devices: int, num_classes: int
) -> tuple[int, int, NDArray[np.int64]]:
    """Validate a ``query.info`` reply; return (node id, partition id, local class counts)."""
    node_id, metrics = read_metrics(msg)
    pid = read_partition_id(metrics, node_id, num_devices)
    hist = read_histogram(metrics, keys.LOCAL_LABEL_HIST, node_id, num_classes)
    if int(hist.sum()) != read_num_examples(metrics, node_id):
        raise MalformedReplyError(
            f"node {node_id}: {keys.LOCAL_LABEL_HIST!r} sums to {int(hist.sum())}, not to "
            f"{keys.NUM_EXAMPLES!r}; allowed: the class counts of the whole local dataset"
        )
    return node_id, pid, hist


@dataclass(frozen=True)
class ExpectedReply:
    """What discovery says of a device before its reply arrives.

    ``local_counts`` (int[C], sum |D_v|) and ``num_samples`` (τ b of the round) are None when
    unknown, and then not checked.
    """

    partition_id: int
    local_counts: NDArray[np.int64] | None = None
    num_samples: int | None = None


def read_report(
    msg: Message,
    *,
    num_devices: int,
    num_classes: int,
    reference: Mapping[str, NDArray[np.generic]] | None = None,
    expected: ExpectedReply | None = None,
) -> DeviceReport:
    """Validate a stats or training reply and return its :class:`DeviceReport`.

    Parameters
    ----------
    msg : Message
        The reply.
    num_devices, num_classes : int
        V (bound of the partition id) and C (length of the histogram).
    reference : mapping str -> ndarray, optional
        The global model sent this round; when given, the reply must be a training reply whose
        arrays match it (keys, shapes, dtypes, finite).
    expected : ExpectedReply, optional
        What discovery says of the sender.

    Raises
    ------
    MalformedReplyError
        For an error reply, a missing key or a value that breaks a rule.
    """
    node_id, metrics = read_metrics(msg)
    known = expected or ExpectedReply(-1)
    registered = None if expected is None else expected.partition_id
    pid = read_partition_id(metrics, node_id, num_devices, registered)
    local = known.local_counts
    n = read_num_examples(metrics, node_id, None if local is None else int(np.sum(local)))
    hist = read_histogram(metrics, keys.LABEL_HIST, node_id, num_classes)
    if known.num_samples is not None:
        problem = round_histogram_problem(hist, local, known.num_samples)
        if problem is not None:
            raise MalformedReplyError(f"node {node_id}: {keys.LABEL_HIST!r} {problem}")
    sigma = read_sigma(metrics, node_id)
    if reference is None:
        return DeviceReport(node_id, pid, n, hist, sigma)

    train_loss = finite_float(
        read_metric(metrics, keys.TRAIN_LOSS, node_id), keys.TRAIN_LOSS, node_id
    )
    norm = finite_float(read_metric(metrics, keys.UPDATE_NORM, node_id), keys.UPDATE_NORM, node_id)
    train_time = (
        finite_float(metrics[keys.TRAIN_TIME_S], keys.TRAIN_TIME_S, node_id)
        if keys.TRAIN_TIME_S in metrics
        else None
    )
    arrays = read_model_arrays(msg, node_id, reference)
    upload_norm = update_norm(arrays, reference)
    if not reported_norm_matches(norm, upload_norm):
        raise MalformedReplyError(
            f"node {node_id}: {keys.UPDATE_NORM!r} = {norm!r} but its uploaded model is "
            f"{upload_norm:.6g} away from the global model; allowed: the norm of its own update"
        )
    return DeviceReport(
        node_id,
        pid,
        n,
        hist,
        sigma,
        train_loss=train_loss,
        update_norm=norm,
        train_time_s=train_time,
        arrays=arrays,
        upload_norm=upload_norm,
    )


def reported_stats(
    reports: list[DeviceReport], num_devices: int, num_classes: int, *, post_training: bool
) -> ReportedStats:
    """The valid reports of a phase as length-V arrays (NaN post-training rows where missing)."""
    reported = np.zeros(num_devices, dtype=bool)
    label_hist = np.zeros((num_devices, num_classes), dtype=np.int64)
    num_examples, sigma_v = np.zeros(num_devices), np.zeros(num_devices)
    train_loss = np.full(num_devices, np.nan) if post_training else None
    update_norm = np.full(num_devices, np.nan) if post_training else None
    for r in reports:
        v = r.partition_id
        reported[v] = True
        label_hist[v], num_examples[v], sigma_v[v] = r.label_hist, r.num_examples, r.sigma
        if train_loss is not None and update_norm is not None:
            train_loss[v] = np.nan if r.train_loss is None else r.train_loss
            update_norm[v] = np.nan if r.update_norm is None else r.update_norm
    return ReportedStats(reported, label_hist, num_examples, sigma_v, train_loss, update_norm)


def uploaded_updates(
    uploads: list[DeviceReport],
    reference: Mapping[str, NDArray[np.generic]],
    target_dist: NDArray[np.float64],
    training: TrainingSettings,
) -> UploadedUpdates:
    """The scheduled devices' uploads as the policy's Ĝ update needs them (eqs. G_est, Gc_est).

    ``uploads`` (K >= 1 training replies) minus ``reference`` (the round's global model) give the
    updates; ``training`` supplies τ and η.
    """
    return UploadedUpdates(
        updates=np.stack([flatten_update(r.arrays or {}, reference) for r in uploads]),
        weights=np.array([r.num_examples for r in uploads], dtype=float),
        label_dist=np.stack([r.label_dist for r in uploads]),
        target_dist=target_dist,
        learning_rate=training.learning_rate,
        local_steps=training.local_steps,
    )
