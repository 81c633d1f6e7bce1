"""Reading and validating client replies (the Flower side of the record protocol).

A reply that is an error, lacks a key, or carries malformed values (wrong histogram length,
negative or NaN values, arrays that do not match the global model) raises
:class:`MalformedReplyError` naming the node, the key and what the client must send; the
strategy logs it and excludes that device for the round.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from logging import INFO, WARNING
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Message, MetricRecord
from flwr.supercore import log
from numpy.typing import NDArray

from channel import RoundDraw
from fedcgd_strategy.aggregation import flatten_update
from fedcgd_strategy.policies import ReportedStats, RoundInputs, UploadedUpdates
from task import keys
from task.settings import TrainingSettings

if TYPE_CHECKING:
    from fedcgd_strategy.discovery import NodeRegistry


class MalformedReplyError(ValueError):
    """A client reply that cannot be used this round."""


@dataclass(frozen=True)
class DeviceReport:
    """One device's validated reply.

    Attributes
    ----------
    node_id : int
        Flower node id of the sender.
    partition_id : int
        Device index v in [0, V).
    num_examples : int
        Local dataset size |D_v|.
    label_hist : int[C]
        Class counts of the samples used this round.
    sigma : float
        σ̂_v, paper eq. (local_est_sigma); NaN when the device was not asked for it.
    train_loss, update_norm, train_time_s : float or None
        Present in training replies only.
    arrays : dict of str -> ndarray, or None
        The trained local model (training replies only).

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

    @property
    def label_dist(self) -> NDArray[np.float64]:
        """p_v: the histogram normalised to sum 1."""
        return self.label_hist / float(self.label_hist.sum())


def _metric(metrics: MetricRecord, key: str, node_id: int) -> object:
    if key not in metrics:
        raise MalformedReplyError(
            f"reply from node {node_id} lacks metric {key!r}; the ClientApp must send it"
        )
    return metrics[key]


def _finite_float(value: object, key: str, node_id: int, *, minimum: float | None = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedReplyError(f"node {node_id}: metric {key!r} must be a number, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or (minimum is not None and out < minimum):
        allowed = "a finite number" + (f" >= {minimum}" if minimum is not None else "")
        raise MalformedReplyError(f"node {node_id}: metric {key!r} = {value!r}; allowed: {allowed}")
    return out


def _partition_id(metrics: MetricRecord, node_id: int, num_devices: int) -> int:
    pid = _metric(metrics, keys.PARTITION_ID, node_id)
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid < num_devices:
        raise MalformedReplyError(
            f"node {node_id}: {keys.PARTITION_ID!r} = {pid!r}; allowed: an int in "
            f"[0, {num_devices})"
        )
    return pid


def _metrics_of(msg: Message) -> tuple[int, MetricRecord]:
    node_id = int(msg.metadata.src_node_id)
    if msg.has_error():
        raise MalformedReplyError(f"node {node_id} replied with an error: {msg.error.reason}")
    if keys.METRICS not in msg.content.metric_records:
        raise MalformedReplyError(
            f"reply from node {node_id} lacks the MetricRecord {keys.METRICS!r}"
        )
    return node_id, msg.content.metric_records[keys.METRICS]


def _histogram(
    metrics: MetricRecord, key: str, node_id: int, num_classes: int
) -> NDArray[np.int64]:
    raw = _metric(metrics, key, node_id)
    hist = np.asarray(raw if isinstance(raw, list) else [raw], dtype=np.float64)
    if hist.shape != (num_classes,):
        raise MalformedReplyError(
            f"node {node_id}: {key!r} has length {hist.size}; allowed: {num_classes}"
        )
    if not np.all(np.isfinite(hist)) or np.any(hist < 0) or hist.sum() <= 0:
        raise MalformedReplyError(
            f"node {node_id}: {key!r} = {hist.tolist()}; allowed: finite counts >= 0 "
            "with a positive sum"
        )
    return hist.astype(np.int64)


def _num_examples(metrics: MetricRecord, node_id: int) -> int:
    n_raw = _metric(metrics, keys.NUM_EXAMPLES, node_id)
    if not isinstance(n_raw, int) or isinstance(n_raw, bool) or n_raw <= 0:
        raise MalformedReplyError(
            f"node {node_id}: {keys.NUM_EXAMPLES!r} = {n_raw!r}; allowed: an int > 0"
        )
    return n_raw


def read_info(
    msg: Message, *, num_devices: int, num_classes: int
) -> tuple[int, int, NDArray[np.int64]]:
    """Validate a ``query.info`` reply; return (node id, partition id, local class counts).

    The local class counts sum to |D_v| (``num-examples``), which is checked.
    """
    node_id, metrics = _metrics_of(msg)
    pid = _partition_id(metrics, node_id, num_devices)
    hist = _histogram(metrics, keys.LOCAL_LABEL_HIST, node_id, num_classes)
    if int(hist.sum()) != _num_examples(metrics, node_id):
        raise MalformedReplyError(
            f"node {node_id}: {keys.LOCAL_LABEL_HIST!r} sums to {int(hist.sum())}, not to "
            f"{keys.NUM_EXAMPLES!r}; allowed: the class counts of the whole local dataset"
        )
    return node_id, pid, hist


def read_report(
    msg: Message,
    *,
    num_devices: int,
    num_classes: int,
    reference: Mapping[str, NDArray[np.generic]] | None = None,
) -> DeviceReport:
    """Validate a stats or training reply and return its :class:`DeviceReport`.

    Parameters
    ----------
    msg : Message
        The reply.
    num_devices : int
        V; the reported partition id must lie in [0, V).
    num_classes : int
        C; the label histogram must have this length.
    reference : mapping str -> ndarray, optional
        The global model sent this round. When given, the reply must carry an ArrayRecord
        under ``"arrays"`` with the same keys and shapes and finite values, and the training
        metrics (train-loss, update-norm).

    Returns
    -------
    DeviceReport

    Raises
    ------
    MalformedReplyError
        For an error reply, a missing key or a malformed value.

    """
    node_id, metrics = _metrics_of(msg)
    content = msg.content
    pid_raw = _partition_id(metrics, node_id, num_devices)
    n_raw = _num_examples(metrics, node_id)
    hist = _histogram(metrics, keys.LABEL_HIST, node_id, num_classes)
    sigma = (
        _finite_float(metrics[keys.SIGMA], keys.SIGMA, node_id)
        if keys.SIGMA in metrics
        else float("nan")  # not asked for (see keys.WANT_SIGMA)
    )
    if reference is None:
        return DeviceReport(node_id, pid_raw, n_raw, hist, sigma)

    train_loss = _finite_float(_metric(metrics, keys.TRAIN_LOSS, node_id), keys.TRAIN_LOSS, node_id)
    update_norm = _finite_float(
        _metric(metrics, keys.UPDATE_NORM, node_id), keys.UPDATE_NORM, node_id
    )
    train_time = (
        _finite_float(metrics[keys.TRAIN_TIME_S], keys.TRAIN_TIME_S, node_id)
        if keys.TRAIN_TIME_S in metrics
        else None
    )
    if keys.ARRAYS not in content.array_records:
        raise MalformedReplyError(f"training reply from node {node_id} lacks {keys.ARRAYS!r}")
    record = content.array_records[keys.ARRAYS]
    arrays = {k: v.numpy() for k, v in record.items()}
    if list(arrays) != list(reference):
        raise MalformedReplyError(
            f"node {node_id}: model arrays {list(arrays)[:3]}… do not match the global model's "
            f"{list(reference)[:3]}…"
        )
    for k, ref in reference.items():
        arr = arrays[k]
        if arr.shape != np.shape(ref):
            raise MalformedReplyError(
                f"node {node_id}: array {k!r} has shape {arr.shape}; expected {np.shape(ref)}"
            )
        if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
            raise MalformedReplyError(f"node {node_id}: array {k!r} has NaN or inf values")
    return DeviceReport(
        node_id,
        pid_raw,
        n_raw,
        hist,
        sigma,
        train_loss,
        update_norm,
        train_time,
        arrays,
    )


def collect_reports(
    replies: Iterable[Message],
    expected: Iterable[int],
    registry: NodeRegistry,
    reference: Mapping[str, NDArray[np.generic]] | None,
    phase: str,
) -> tuple[list[DeviceReport], list[int]]:
    """Validate a phase's replies; return the valid reports (by partition id) and the failures.

    A reply is excluded (with a warning) when it is malformed or when its partition id is not
    the one registered for its node. ``failed`` lists the expected partitions without a valid
    reply (errors, timeouts, malformed or misattributed replies).
    """
    reports: dict[int, DeviceReport] = {}
    for msg in replies:
        try:
            report = read_report(
                msg,
                num_devices=registry.num_devices,
                num_classes=registry.num_classes,
                reference=reference,
            )
        except MalformedReplyError as err:
            log(WARNING, "%s: device excluded this round: %s", phase, err)
            continue
        registered = registry.partition(report.node_id)
        if registered != report.partition_id:
            log(
                WARNING,
                "%s: node %d reported partition %d but is registered as %s; excluded",
                phase,
                report.node_id,
                report.partition_id,
                registered,
            )
            continue
        reports[report.partition_id] = report
    failed = sorted(set(expected) - set(reports))
    log(INFO, "%s: received %d results and %d failures", phase, len(reports), len(failed))
    if failed:
        log(WARNING, "%s: no valid reply from devices %s (excluded this round)", phase, failed)
    return [reports[p] for p in sorted(reports)], failed


def _reported_stats(
    reports: list[DeviceReport], num_devices: int, num_classes: int, post_training: bool
) -> tuple[NDArray[np.bool_], ReportedStats]:
    """The reporting devices (the candidates) and their statistics as length-V arrays."""
    candidate = np.zeros(num_devices, dtype=bool)
    label_dist = np.zeros((num_devices, num_classes))
    num_examples, sigma_v = np.zeros(num_devices), np.zeros(num_devices)
    train_loss = np.full(num_devices, np.nan) if post_training else None
    update_norm = np.full(num_devices, np.nan) if post_training else None
    for r in reports:
        v = r.partition_id
        candidate[v] = True
        label_dist[v], num_examples[v], sigma_v[v] = r.label_dist, r.num_examples, r.sigma
        if train_loss is not None and update_norm is not None:
            train_loss[v] = np.nan if r.train_loss is None else r.train_loss
            update_norm[v] = np.nan if r.update_norm is None else r.update_norm
    return candidate, ReportedStats(label_dist, num_examples, sigma_v, train_loss, update_norm)


def inputs_from_reports(
    reports: list[DeviceReport] | None,
    draw: RoundDraw,
    available: list[int],
    *,
    num_classes: int,
    total_bandwidth_hz: float,
    batch_size: int,
    target_dist: NDArray[np.float64] | None,
    post_training: bool,
    local_counts: NDArray[np.int64] | None = None,
) -> RoundInputs:
    """Assemble the policy's view of the round from the channel draw and the valid reports.

    Parameters
    ----------
    reports : list of DeviceReport, or None
        Valid replies of this round; their devices become the candidates. None: nobody was
        asked (protocol ``"channel"``); the ``available`` devices are the candidates
        (:meth:`RoundInputs.from_channel`).
    draw : RoundDraw
        This round's channel (length-V arrays).
    available : list of int
        Partition ids drawn available that have a node.
    num_classes : int
        C.
    total_bandwidth_hz : float
        Bandwidth budget B.
    batch_size : int
        b.
    target_dist : float[C] or None
        WEMD target p; None = the class distribution of the union of the reported histograms
        (uniform when nobody reported).
    post_training : bool
        The reports carry post-training values (train-loss, update-norm) to pass on.
    local_counts : int[V, C], optional
        Class counts of each device's whole local dataset, reported at discovery (Fed-CBS's
        p_v; their row sums are |D_v|); zero rows for unknown devices.

    """
    V = int(np.asarray(draw.available).shape[0])
    reported = None
    if reports is None:
        candidate = np.zeros(V, dtype=bool)
        candidate[available] = True
    else:
        candidate, reported = _reported_stats(reports, V, num_classes, post_training)
    if target_dist is not None:
        target = np.asarray(target_dist, dtype=float)
    elif reports:
        total = np.sum([r.label_hist for r in reports], axis=0).astype(float)
        target = total / total.sum()
    else:
        target = np.full(num_classes, 1.0 / num_classes)
    return RoundInputs.from_channel(
        candidate,
        np.asarray(draw.min_bandwidth_hz, dtype=float),
        np.asarray(draw.gain_lin, dtype=float),
        total_bandwidth_hz=total_bandwidth_hz,
        batch_size=batch_size,
        target_dist=target,
        local_counts=local_counts,
        reported=reported,
    )


def uploaded_updates(
    uploads: list[DeviceReport],
    reference: Mapping[str, NDArray[np.generic]],
    target_dist: NDArray[np.float64],
    training: TrainingSettings,
) -> UploadedUpdates:
    """The scheduled devices' uploads as the policy's Ĝ update needs them (eqs. G_est, Gc_est).

    Parameters
    ----------
    uploads : list of DeviceReport
        Valid training replies of the scheduled devices (with ``arrays``), K >= 1.
    reference : mapping str -> ndarray
        The global model sent this round (the updates are ``arrays - reference``).
    target_dist : float[C]
        WEMD target p.
    training : TrainingSettings
        τ and η of the round.

    """
    return UploadedUpdates(
        updates=np.stack([flatten_update(r.arrays or {}, reference) for r in uploads]),
        weights=np.array([r.num_examples for r in uploads], dtype=float),
        label_dist=np.stack([r.label_dist for r in uploads]),
        target_dist=target_dist,
        learning_rate=training.learning_rate,
        local_steps=training.local_steps,
    )
