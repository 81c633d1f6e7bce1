"""One field of a device's reply, read and checked where it enters the server.

Each reader raises :class:`MalformedReplyError` naming the node, the key, the value and what is
allowed (:mod:`~.replies` lists the rules a whole reply must pass).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeGuard

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord
from numpy.typing import NDArray

from fedcgd_strategy.screening import FLOAT32_MAX, exceeds_float32
from fedcgd_task import keys
from fedcgd_task.array_codec import numpy_arrays
from fedcgd_task.message_records import record_of

#: Largest class count accepted (exact in float64; far above any dataset).
MAX_COUNT = 2**53


class MalformedReplyError(ValueError):
    """A client reply that cannot be used this round."""


def read_metric(metrics: MetricRecord, key: str, node_id: int) -> object:
    """The metric ``key`` of a reply; missing: refused."""
    if key not in metrics:
        raise MalformedReplyError(
            f"reply from node {node_id} lacks metric {key!r}; the ClientApp must send it"
        )
    return metrics[key]


def finite_float(value: object, key: str, node_id: int, *, minimum: float | None = 0.0) -> float:
    """``value`` of metric ``key`` as a finite float >= ``minimum`` (None: no bound)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedReplyError(f"node {node_id}: metric {key!r} must be a number, got {value!r}")
    out = float(value) if not isinstance(value, int) or abs(value) < 2**1000 else math.inf
    if not math.isfinite(out) or (minimum is not None and out < minimum):
        allowed = "a finite number" + (f" >= {minimum}" if minimum is not None else "")
        raise MalformedReplyError(f"node {node_id}: metric {key!r} = {value!r}; allowed: {allowed}")
    return out


def is_int(value: object) -> TypeGuard[int | np.integer]:
    """A Python or numpy int, not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _registered_int(
    metrics: MetricRecord,
    key: str,
    node_id: int,
    *,
    low: int,
    high: int | None,
    registered: int | None,
    what: str,
) -> int:
    """An int metric in ``[low, high)`` that must equal ``registered`` (``what`` it is) if given."""
    raw = read_metric(metrics, key, node_id)
    if not is_int(raw) or int(raw) < low or (high is not None and int(raw) >= high):
        allowed = f"an int in [{low}, {high})" if high is not None else f"an int >= {low}"
        raise MalformedReplyError(f"node {node_id}: {key!r} = {raw!r}; allowed: {allowed}")
    if registered is not None and int(raw) != registered:
        raise MalformedReplyError(
            f"node {node_id}: {key!r} = {raw!r}; allowed: {registered}, {what}"
        )
    return int(raw)


def read_partition_id(
    metrics: MetricRecord, node_id: int, num_devices: int, registered: int | None = None
) -> int:
    """The reply's partition id in [0, V), equal to ``registered`` when given."""
    what = "the partition it was registered with at discovery"
    return _registered_int(
        metrics, keys.PARTITION_ID, node_id, low=0, high=num_devices, registered=registered,
        what=what,
    )  # fmt: skip


def read_metrics(msg: Message) -> tuple[int, MetricRecord]:
    """The sender's node id and the reply's MetricRecord; an error reply is refused."""
    node_id = int(msg.metadata.src_node_id)
    if msg.has_error():
        raise MalformedReplyError(f"node {node_id} replied with an error: {msg.error.reason}")
    metrics = record_of(msg.content, keys.METRICS, MetricRecord)
    if metrics is None:
        raise MalformedReplyError(
            f"reply from node {node_id} lacks the MetricRecord {keys.METRICS!r}"
        )
    return node_id, metrics


def read_histogram(
    metrics: MetricRecord, key: str, node_id: int, num_classes: int
) -> NDArray[np.int64]:
    """The class counts under ``key``: C non-negative ints with a positive sum."""
    raw = read_metric(metrics, key, node_id)
    values = raw if isinstance(raw, list) else [raw]
    if len(values) != num_classes:
        raise MalformedReplyError(
            f"node {node_id}: {key!r} has length {len(values)}; allowed: {num_classes}"
        )
    shown = values if len(values) <= 12 else [*values[:12], "..."]
    counts: list[int] = []
    for value in values:
        if not is_int(value):
            raise MalformedReplyError(
                f"node {node_id}: {key!r} = {shown}; allowed: integer class counts (a list of ints)"
            )
        counts.append(int(value))
    if min(counts) < 0 or sum(counts) <= 0 or max(counts) > MAX_COUNT:
        raise MalformedReplyError(
            f"node {node_id}: {key!r} = {shown}; allowed: counts 0 .. 2**53 with a positive sum"
        )
    return np.array(counts, dtype=np.int64)


def read_num_examples(metrics: MetricRecord, node_id: int, registered: int | None = None) -> int:
    """|D_v| (``num-examples``) >= 1, equal to ``registered`` when given."""
    what = "the local dataset size it reported at discovery"
    return _registered_int(
        metrics, keys.NUM_EXAMPLES, node_id, low=1, high=None, registered=registered, what=what
    )


def read_sigma(metrics: MetricRecord, node_id: int) -> float:
    """σ̂_v, or NaN when the reply carries none (the device was not asked: keys.WANT_SIGMA)."""
    if keys.SIGMA not in metrics:
        return float("nan")
    sigma = finite_float(metrics[keys.SIGMA], keys.SIGMA, node_id)
    if exceeds_float32(sigma):
        raise MalformedReplyError(
            f"node {node_id}: metric {keys.SIGMA!r} = {sigma!r}; allowed: 0 .. {FLOAT32_MAX:.4g} "
            "(the largest float32)"
        )
    return sigma


def read_model_arrays(
    msg: Message, node_id: int, reference: Mapping[str, NDArray[np.generic]]
) -> dict[str, NDArray[np.generic]]:
    """The uploaded arrays, checked against the global model: keys, shapes, dtypes, finite."""
    record = record_of(msg.content, keys.ARRAYS, ArrayRecord)
    if record is None:
        raise MalformedReplyError(f"training reply from node {node_id} lacks {keys.ARRAYS!r}")
    arrays = numpy_arrays(record)
    if list(arrays) != list(reference):
        raise MalformedReplyError(
            f"node {node_id}: model arrays {list(arrays)[:3]}… do not match the global model's "
            f"{list(reference)[:3]}…"
        )
    for k, ref in reference.items():
        arr, want = arrays[k], np.asarray(ref)
        if arr.shape != want.shape:
            raise MalformedReplyError(
                f"node {node_id}: array {k!r} has shape {arr.shape}; expected {want.shape}"
            )
        if arr.dtype != want.dtype:
            raise MalformedReplyError(
                f"node {node_id}: array {k!r} has dtype {arr.dtype}; allowed: {want.dtype}, the "
                "global model's"
            )
        if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
            raise MalformedReplyError(f"node {node_id}: array {k!r} has NaN or inf values")
    return arrays
