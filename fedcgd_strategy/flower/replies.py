"""Every check of what a device sends (untrusted), where its reply enters the server: a reply
breaking a rule raises :class:`MalformedReplyError` (node, key, value, what is allowed), which
costs that device its round (docs/design.md, "Screening replies")."""  # noqa: D205, D209

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from logging import INFO, WARNING
from typing import TypeGuard

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.supercore import log
from numpy.typing import ArrayLike, NDArray

from fedcgd_config import keys
from fedcgd_strategy.aggregation import array_problem
from fedcgd_strategy.nodes import NodeRegistry
from fedcgd_task.model_record import layout, model_arrays

#: Largest class count accepted (exact in float64; far above any dataset).
MAX_COUNT = 2**53
FLOAT32_MAX = float(np.finfo(np.float32).max)
NORM_REL_TOL = 1e-5  #: a reported update norm against the server's (summation order)


def update_norm(
    local: Mapping[str, NDArray[np.generic]], reference: Mapping[str, NDArray[np.generic]]
) -> float:
    """||w_v − w||₂ over every floating array of ``reference``, summed in float64."""
    total = 0.0
    for k, ref in reference.items():
        if np.issubdtype(np.asarray(ref).dtype, np.floating):
            d = np.subtract(local[k], ref, dtype=np.float64).ravel()
            total += float(d @ d)
    return float(np.sqrt(total))


def reported_norm_matches(reported: float, uploaded: float) -> bool:
    """Whether a reported ``update-norm`` is the uploaded update's (within summation order)."""
    return bool(abs(reported - uploaded) <= NORM_REL_TOL * abs(uploaded) + 1e-9)


def update_norm_outliers(
    norms: ArrayLike, max_ratio: float, reference: float | None = None
) -> NDArray[np.bool_]:
    """Which uploads of a round to refuse, bool[K]: a norm not finite or above :data:`FLOAT32_MAX`
    and, with ``max_ratio`` k > 0, one above k times the median of the round's other uploads
    (none: ``reference``, the last round's)."""  # noqa: D205, D209
    n = np.asarray(norms, dtype=np.float64).ravel()
    out = ~(np.abs(n) <= FLOAT32_MAX)  # NaN, inf or beyond float32
    for i in np.flatnonzero(~out) if max_ratio else ():
        others = np.delete(n, i)
        others = others[np.isfinite(others)]
        median = float(np.median(others)) if others.size else reference
        out[i] = median is not None and n[i] > max_ratio * median
    return out


def round_histogram_problem(
    hist: ArrayLike, local_counts: ArrayLike | None, num_samples: int
) -> str | None:
    """Why ``hist`` cannot be a round histogram of τ b = ``num_samples`` samples read cyclically
    (None if it can): with the local class counts ``L`` from discovery (None: the sum only) and
    ``q, r = divmod(num_samples, sum(L))``, class c appears ``q L_c`` to ``q L_c + min(r, L_c)``
    times."""  # noqa: D205, D209
    h = np.asarray(hist, dtype=np.int64)
    if int(h.sum()) != int(num_samples):
        return (
            f"sums to {int(h.sum())}; allowed: the counts of the round's local-steps x "
            f"batch-size = {int(num_samples)} samples"
        )
    if local_counts is None:
        return None
    counts = np.asarray(local_counts, dtype=np.int64)
    q, r = divmod(int(num_samples), int(counts.sum()))
    low, high = q * counts, q * counts + np.minimum(r, counts)
    for c in np.flatnonzero((h < low) | (h > high))[:1]:
        return (
            f"class {c} has {h[c]} samples; allowed with the local class counts reported "
            f"at discovery: {low[c]} .. {high[c]}"
        )
    return None


class MalformedReplyError(ValueError):
    """A client reply that cannot be used this round."""


def _metric(metrics: MetricRecord, key: str, node_id: int) -> object:
    """The metric ``key`` of a reply; missing: refused."""
    if key not in metrics:
        raise MalformedReplyError(f"reply from node {node_id} lacks metric {key!r}")
    return metrics[key]


def _number(metrics: MetricRecord, key: str, node_id: int, high: float = math.inf) -> float:
    """The metric ``key`` as a finite float 0 .. ``high`` (a huge Python int: refused)."""
    value = _metric(metrics, key, node_id)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedReplyError(f"node {node_id}: metric {key!r} must be a number, got {value!r}")
    out = float(value) if not isinstance(value, int) or abs(value) < 2**1000 else math.inf
    if not 0 <= out < math.inf or out > high:
        top = "" if high == math.inf else f" and at most {high:.4g} (the largest float32)"
        raise MalformedReplyError(
            f"node {node_id}: metric {key!r} = {value!r}; allowed: a finite number >= 0.0{top}"
        )
    return out


def _is_int(value: object) -> TypeGuard[int | np.integer]:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _int(
    metrics: MetricRecord, key: str, node_id: int, bounds: tuple[int, int | None],
    registered: tuple[int | None, str] = (None, ""),
) -> int:  # fmt: skip
    """An int metric in ``[low, high)``, equal to ``registered[0]`` (``[1]`` says what) if set."""
    raw, (low, high) = _metric(metrics, key, node_id), bounds
    if not _is_int(raw) or int(raw) < low or (high is not None and int(raw) >= high):
        allowed = f"an int in [{low}, {high})" if high is not None else f"an int >= {low}"
    elif registered[0] is not None and int(raw) != registered[0]:
        allowed = f"{registered[0]}, {registered[1]}"
    else:
        return int(raw)
    raise MalformedReplyError(f"node {node_id}: {key!r} = {raw!r}; allowed: {allowed}")


def _histogram(
    metrics: MetricRecord, key: str, node_id: int, num_classes: int
) -> NDArray[np.int64]:
    """The class counts under ``key``: C ints 0 .. :data:`MAX_COUNT` with a positive sum."""
    raw = _metric(metrics, key, node_id)
    values = raw if isinstance(raw, list) else [raw]
    shown = values if len(values) <= 12 else [*values[:12], "..."]
    counts = [int(v) for v in values if _is_int(v)]
    if len(values) != num_classes:
        problem = f"has length {len(values)}; allowed: {num_classes}"
    elif len(counts) != num_classes:
        problem = f"= {shown}; allowed: integer class counts (a list of ints)"
    elif min(counts) < 0 or sum(counts) <= 0 or max(counts) > MAX_COUNT:
        problem = f"= {shown}; allowed: counts 0 .. 2**53 with a positive sum"
    else:
        return np.array(counts, dtype=np.int64)
    raise MalformedReplyError(f"node {node_id}: {key!r} {problem}")


def _sender(msg: Message) -> tuple[int, MetricRecord]:
    """The sender's node id and the reply's MetricRecord; an error reply is refused."""
    node_id = int(msg.metadata.src_node_id)
    if msg.has_error():
        raise MalformedReplyError(f"node {node_id} replied with an error: {msg.error.reason}")
    if not isinstance(metrics := msg.content.get(keys.METRICS), MetricRecord):
        raise MalformedReplyError(f"reply from node {node_id} lacks MetricRecord {keys.METRICS!r}")
    return node_id, metrics


def _model_arrays(
    msg: Message, node_id: int, reference: Mapping[str, NDArray[np.generic]]
) -> dict[str, NDArray[np.generic]]:
    """The uploaded arrays, checked against the global model: keys, shapes, dtypes, finite."""
    record = msg.content.get(keys.ARRAYS)
    if not isinstance(record, ArrayRecord):
        raise MalformedReplyError(f"training reply from node {node_id} lacks {keys.ARRAYS!r}")
    try:
        arrays = model_arrays(record, layout(reference))
    except ValueError as err:
        raise MalformedReplyError(f"node {node_id}: {err}") from None
    for k, ref in reference.items():
        if problem := array_problem(arrays[k], ref):
            raise MalformedReplyError(f"node {node_id}: array {k!r} {problem}")
    return arrays


@dataclass(frozen=True)
class DeviceReport:
    """One device's validated reply: ``label_hist`` int[C] of the round's samples, ``sigma`` σ̂_v
    (NaN when not asked); a training reply's ``arrays`` and the server's ``upload_norm``."""  # noqa: D205, D209

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


def read_info(
    msg: Message, *, num_devices: int, num_classes: int
) -> tuple[int, int, NDArray[np.int64]]:
    """Validate a ``query.info`` reply; return (node id, partition id, local class counts)."""
    node_id, metrics = _sender(msg)
    pid = _int(metrics, keys.PARTITION_ID, node_id, (0, num_devices))
    hist = _histogram(metrics, keys.LOCAL_LABEL_HIST, node_id, num_classes)
    if int(hist.sum()) != _int(metrics, keys.NUM_EXAMPLES, node_id, (1, None)):
        raise MalformedReplyError(
            f"node {node_id}: {keys.LOCAL_LABEL_HIST!r} sums to {int(hist.sum())}, not to "
            f"{keys.NUM_EXAMPLES!r}; allowed: the class counts of the whole local dataset"
        )
    return node_id, pid, hist


def read_report(
    msg: Message, *, num_devices: int, num_classes: int,
    reference: Mapping[str, NDArray[np.generic]] | None = None, registered: int | None = None,
    local_counts: NDArray[np.int64] | None = None, num_samples: int | None = None,
) -> DeviceReport:  # fmt: skip
    """Validate a stats or (with ``reference``, the global model) training reply; each of
    ``registered``, ``local_counts`` int[C] and ``num_samples`` τ b is checked when given."""  # noqa: D205, D209
    node_id, metrics = _sender(msg)
    what = "the partition it was registered with at discovery"
    pid = _int(metrics, keys.PARTITION_ID, node_id, (0, num_devices), (registered, what))
    what = "the local dataset size it reported at discovery"
    size = None if local_counts is None else int(np.sum(local_counts))
    n = _int(metrics, keys.NUM_EXAMPLES, node_id, (1, None), (size, what))
    hist = _histogram(metrics, keys.LABEL_HIST, node_id, num_classes)
    if num_samples is not None:
        problem = round_histogram_problem(hist, local_counts, num_samples)
        if problem is not None:
            raise MalformedReplyError(f"node {node_id}: {keys.LABEL_HIST!r} {problem}")
    sigma = (
        _number(metrics, keys.SIGMA, node_id, FLOAT32_MAX) if keys.SIGMA in metrics else math.nan
    )
    if reference is None:
        return DeviceReport(node_id, pid, n, hist, sigma)
    train_loss = _number(metrics, keys.TRAIN_LOSS, node_id)
    norm = _number(metrics, keys.UPDATE_NORM, node_id)
    timed = keys.TRAIN_TIME_S in metrics
    train_time = _number(metrics, keys.TRAIN_TIME_S, node_id) if timed else None
    arrays = _model_arrays(msg, node_id, reference)
    upload_norm = update_norm(arrays, reference)
    if not reported_norm_matches(norm, upload_norm):
        raise MalformedReplyError(
            f"node {node_id}: {keys.UPDATE_NORM!r} = {norm!r} but its uploaded model is "
            f"{upload_norm:.6g} away from the global model; allowed: the norm of its own update"
        )
    return DeviceReport(
        node_id, pid, n, hist, sigma, train_loss, norm, train_time, arrays, upload_norm
    )


def collect_reports(
    replies: Iterable[Message], expected: Iterable[int], registry: NodeRegistry,
    reference: Mapping[str, NDArray[np.generic]] | None, phase: str, *,
    num_samples: int | None = None, max_update_norm_ratio: float = 0.0,
    norm_reference: float | None = None,
) -> tuple[list[DeviceReport], dict[int, str], set[int]]:  # fmt: skip
    """Validate a phase's replies (a node's first counts): the valid reports by partition id,
    each other expected partition's one-line reason, and those lost (no reply or an error reply
    first; a refused reply is a failure). ``num_samples`` τ b (None: unchecked);
    ``max_update_norm_ratio`` and ``norm_reference``: :func:`update_norm_outliers`'s."""  # noqa: D205, D209
    wanted = set(expected)
    reports: dict[int, DeviceReport] = {}
    failures: dict[int, str] = {}
    errored: set[int] = set()
    for msg in replies:
        node_id = int(msg.metadata.src_node_id)
        registered = registry.partition(node_id)
        if registered is None or registered not in wanted:
            log(WARNING, "%s: reply from node %d, which was not asked; ignored", phase, node_id)
            continue
        if registered in reports or registered in failures:  # a link delivers one reply each
            log(WARNING, "%s: another reply from node %d; the first one counts", phase, node_id)
            continue
        if msg.has_error():
            errored.add(registered)
        try:
            reports[registered] = read_report(
                msg, num_devices=registry.num_devices, num_classes=registry.num_classes,
                reference=reference, registered=registered,
                local_counts=registry.local_hist(registered), num_samples=num_samples,
            )  # fmt: skip
        except MalformedReplyError as err:
            failures[registered] = str(err)
    with_arrays = [p for p in sorted(reports) if reports[p].upload_norm is not None]
    norms = np.array([reports[p].upload_norm for p in with_arrays], dtype=np.float64)
    refused = update_norm_outliers(norms, max_update_norm_ratio, norm_reference)
    for pid, norm, bad in zip(with_arrays, norms, refused, strict=True):
        if bad:
            failures[pid] = (
                f"node {reports.pop(pid).node_id}: update norm ||w_v - w|| = {norm:.4g}; "
                f"allowed: at most max-update-norm-ratio = {max_update_norm_ratio:g} "
                "x the median of the round's other uploads, and a finite float32"
            )
    silent = wanted - set(reports) - set(failures)
    failures |= dict.fromkeys(silent, "no reply before the timeout")
    log(INFO, "%s: received %d results and %d failures", phase, len(reports), len(failures))
    for pid in sorted(failures):
        log(WARNING, "%s: device %d excluded this round: %s", phase, pid, failures[pid])
    return [reports[p] for p in sorted(reports)], dict(sorted(failures.items())), silent | errored
