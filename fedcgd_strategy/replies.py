"""Reading and validating client replies (the Flower side of the record protocol).

A reply that is an error, lacks a key, or carries malformed values (wrong histogram length,
negative or NaN values, arrays that do not match the global model) raises
:class:`MalformedReplyError` naming the node, the key and what the client must send; the
strategy logs it and excludes that device for the round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from flwr.app import Message, MetricRecord
from numpy.typing import NDArray

from fedcgd_strategy import keys


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
        σ̂_v, paper eq. (local_est_sigma).
    pre_loss : float
        Loss on the first batch at the received model.
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
    pre_loss: float
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
    node_id = int(msg.metadata.src_node_id)
    if msg.has_error():
        raise MalformedReplyError(f"node {node_id} replied with an error: {msg.error.reason}")
    content = msg.content
    if keys.METRICS not in content.metric_records:
        raise MalformedReplyError(
            f"reply from node {node_id} lacks the MetricRecord {keys.METRICS!r}"
        )
    metrics = content.metric_records[keys.METRICS]
    pid_raw = _metric(metrics, keys.PARTITION_ID, node_id)
    if not isinstance(pid_raw, int) or isinstance(pid_raw, bool) or not 0 <= pid_raw < num_devices:
        raise MalformedReplyError(
            f"node {node_id}: {keys.PARTITION_ID!r} = {pid_raw!r}; allowed: an int in "
            f"[0, {num_devices})"
        )
    n_raw = _metric(metrics, keys.NUM_EXAMPLES, node_id)
    if not isinstance(n_raw, int) or isinstance(n_raw, bool) or n_raw <= 0:
        raise MalformedReplyError(
            f"node {node_id}: {keys.NUM_EXAMPLES!r} = {n_raw!r}; allowed: an int > 0"
        )
    hist_raw = _metric(metrics, keys.LABEL_HIST, node_id)
    hist = np.asarray(hist_raw if isinstance(hist_raw, list) else [hist_raw], dtype=np.float64)
    if hist.shape != (num_classes,):
        raise MalformedReplyError(
            f"node {node_id}: {keys.LABEL_HIST!r} has length {hist.size}; allowed: {num_classes}"
        )
    if not np.all(np.isfinite(hist)) or np.any(hist < 0) or hist.sum() <= 0:
        raise MalformedReplyError(
            f"node {node_id}: {keys.LABEL_HIST!r} = {hist.tolist()}; allowed: finite counts >= 0 "
            "with a positive sum"
        )
    sigma = _finite_float(_metric(metrics, keys.SIGMA, node_id), keys.SIGMA, node_id)
    pre_loss = _finite_float(_metric(metrics, keys.PRE_LOSS, node_id), keys.PRE_LOSS, node_id)
    if reference is None:
        return DeviceReport(node_id, pid_raw, n_raw, hist.astype(np.int64), sigma, pre_loss)

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
        hist.astype(np.int64),
        sigma,
        pre_loss,
        train_loss,
        update_norm,
        train_time,
        arrays,
    )
