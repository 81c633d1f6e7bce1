"""Reading and validating client replies (the Flower side of the record protocol).

Every value a device sends is checked where it enters, against the round and the model, and a
reply that fails raises :class:`MalformedReplyError` naming the node, the key, the value and
what is allowed; :func:`collect_reports` turns that into the device's failure for the round
(with the one-line reason kept for the round's record). The rules (:mod:`~.screening` holds the
pure ones):

* the partition id is the one the node was registered with at discovery;
* ``num-examples`` equals |D_v| as reported at discovery (the sum of the local class counts);
* label histograms are lists of non-negative Python ints (floats are refused, even integral
  ones) of length C; a round histogram sums to τ b and is consistent with the local class
  counts reported at discovery (:func:`~.screening.round_histogram_problem`);
* σ̂_v is finite, >= 0 and at most the largest float32;
* the uploaded arrays have the global model's keys, shapes and dtypes, finite values, and an
  update norm ||w_v − w|| that passes :func:`~.screening.update_norm_outliers` (k =
  ``max-update-norm-ratio``, plus the absolute float32 bound).

Nothing a device sends can raise in the server: a reply either passes every rule or is dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from logging import INFO, WARNING
from typing import TypeGuard

import numpy as np
from flwr.app import Message, MetricRecord
from flwr.supercore import log
from numpy.typing import NDArray

from fedcgd_strategy.aggregation import flatten_update
from fedcgd_strategy.nodes import NodeRegistry
from fedcgd_strategy.policies import ReportedStats, UploadedUpdates
from fedcgd_strategy.screening import (
    FLOAT32_MAX,
    exceeds_float32,
    reported_norm_matches,
    round_histogram_problem,
    update_norm,
    update_norm_outliers,
)
from fedcgd_task import keys
from fedcgd_task.settings import TrainingSettings

#: Largest class count accepted (exact in float64; far above any dataset).
MAX_COUNT = 2**53


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
    upload_norm : float or None
        ||w_v − w|| computed by the server from ``arrays`` (float64; training replies only).

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


def _metric(metrics: MetricRecord, key: str, node_id: int) -> object:
    if key not in metrics:
        raise MalformedReplyError(
            f"reply from node {node_id} lacks metric {key!r}; the ClientApp must send it"
        )
    return metrics[key]


def _finite_float(value: object, key: str, node_id: int, *, minimum: float | None = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedReplyError(f"node {node_id}: metric {key!r} must be a number, got {value!r}")
    out = float(value) if not isinstance(value, int) or abs(value) < 2**1000 else math.inf
    if not math.isfinite(out) or (minimum is not None and out < minimum):
        allowed = "a finite number" + (f" >= {minimum}" if minimum is not None else "")
        raise MalformedReplyError(f"node {node_id}: metric {key!r} = {value!r}; allowed: {allowed}")
    return out


def _is_int(value: object) -> TypeGuard[int | np.integer]:
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
    raw = _metric(metrics, key, node_id)
    if not _is_int(raw) or int(raw) < low or (high is not None and int(raw) >= high):
        allowed = f"an int in [{low}, {high})" if high is not None else f"an int >= {low}"
        raise MalformedReplyError(f"node {node_id}: {key!r} = {raw!r}; allowed: {allowed}")
    if registered is not None and int(raw) != registered:
        raise MalformedReplyError(
            f"node {node_id}: {key!r} = {raw!r}; allowed: {registered}, {what}"
        )
    return int(raw)


def _partition_id(
    metrics: MetricRecord, node_id: int, num_devices: int, registered: int | None = None
) -> int:
    what = "the partition it was registered with at discovery"
    return _registered_int(
        metrics, keys.PARTITION_ID, node_id, low=0, high=num_devices, registered=registered,
        what=what,
    )  # fmt: skip


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
    values = raw if isinstance(raw, list) else [raw]
    if len(values) != num_classes:
        raise MalformedReplyError(
            f"node {node_id}: {key!r} has length {len(values)}; allowed: {num_classes}"
        )
    shown = values if len(values) <= 12 else [*values[:12], "..."]
    counts: list[int] = []
    for value in values:
        if not _is_int(value):
            raise MalformedReplyError(
                f"node {node_id}: {key!r} = {shown}; allowed: integer class counts (a list of ints)"
            )
        counts.append(int(value))
    if min(counts) < 0 or sum(counts) <= 0 or max(counts) > MAX_COUNT:
        raise MalformedReplyError(
            f"node {node_id}: {key!r} = {shown}; allowed: counts 0 .. 2**53 with a positive sum"
        )
    return np.array(counts, dtype=np.int64)


def _num_examples(metrics: MetricRecord, node_id: int, registered: int | None = None) -> int:
    what = "the local dataset size it reported at discovery"
    return _registered_int(
        metrics, keys.NUM_EXAMPLES, node_id, low=1, high=None, registered=registered, what=what
    )


def _sigma(metrics: MetricRecord, node_id: int) -> float:
    """σ̂_v, or NaN when the reply carries none (the device was not asked: keys.WANT_SIGMA)."""
    if keys.SIGMA not in metrics:
        return float("nan")
    sigma = _finite_float(metrics[keys.SIGMA], keys.SIGMA, node_id)
    if exceeds_float32(sigma):
        raise MalformedReplyError(
            f"node {node_id}: metric {keys.SIGMA!r} = {sigma!r}; allowed: 0 .. {FLOAT32_MAX:.4g} "
            "(the largest float32)"
        )
    return sigma


def _model_arrays(
    msg: Message, node_id: int, reference: Mapping[str, NDArray[np.generic]]
) -> dict[str, NDArray[np.generic]]:
    """The uploaded arrays, checked against the global model: keys, shapes, dtypes, finite."""
    content = msg.content
    if keys.ARRAYS not in content.array_records:
        raise MalformedReplyError(f"training reply from node {node_id} lacks {keys.ARRAYS!r}")
    arrays = {k: v.numpy() for k, v in content.array_records[keys.ARRAYS].items()}
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


@dataclass(frozen=True)
class ExpectedReply:
    """What the server knows of a device before its reply arrives (all from discovery).

    Attributes
    ----------
    partition_id : int
        The partition its node was registered with.
    local_counts : int[C] or None
        Class counts of its whole local dataset (their sum is |D_v|); None: unknown (then
        ``num-examples`` and the round histogram's per-class bounds are not checked).
    num_samples : int or None
        τ b of the round (the round histogram's sum); None: not checked.

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
    num_devices : int
        V; the reported partition id must lie in [0, V).
    num_classes : int
        C; the label histogram must have this length.
    reference : mapping str -> ndarray, optional
        The global model sent this round. When given, the reply must carry an ArrayRecord
        under ``"arrays"`` with the same keys, shapes and dtypes and finite values, and the
        training metrics (train-loss, update-norm).
    expected : ExpectedReply, optional
        What discovery says of the sender: its partition id, |D_v| and local class counts, and
        τ b of the round (see :class:`ExpectedReply`).

    Returns
    -------
    DeviceReport

    Raises
    ------
    MalformedReplyError
        For an error reply, a missing key or a value that breaks a rule of the module docstring.

    """
    node_id, metrics = _metrics_of(msg)
    known = expected or ExpectedReply(-1)
    registered = None if expected is None else expected.partition_id
    pid = _partition_id(metrics, node_id, num_devices, registered)
    local = known.local_counts
    n = _num_examples(metrics, node_id, None if local is None else int(np.sum(local)))
    hist = _histogram(metrics, keys.LABEL_HIST, node_id, num_classes)
    if known.num_samples is not None:
        problem = round_histogram_problem(hist, local, known.num_samples)
        if problem is not None:
            raise MalformedReplyError(f"node {node_id}: {keys.LABEL_HIST!r} {problem}")
    sigma = _sigma(metrics, node_id)
    if reference is None:
        return DeviceReport(node_id, pid, n, hist, sigma)

    train_loss = _finite_float(_metric(metrics, keys.TRAIN_LOSS, node_id), keys.TRAIN_LOSS, node_id)
    norm = _finite_float(_metric(metrics, keys.UPDATE_NORM, node_id), keys.UPDATE_NORM, node_id)
    train_time = (
        _finite_float(metrics[keys.TRAIN_TIME_S], keys.TRAIN_TIME_S, node_id)
        if keys.TRAIN_TIME_S in metrics
        else None
    )
    arrays = _model_arrays(msg, node_id, reference)
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


@dataclass(frozen=True)
class Screening:
    """How a phase's replies are screened beyond their own validity.

    Attributes
    ----------
    num_samples : int or None
        τ b of the round: the sum of every round histogram (None: not checked).
    max_update_norm_ratio : float
        k of :func:`~.screening.update_norm_outliers` (0 = only the absolute bound).
    norm_reference : float or None
        Median update norm of the last round's accepted uploads (for a round with one upload).

    """

    num_samples: int | None = None
    max_update_norm_ratio: float = 0.0
    norm_reference: float | None = None


def _refuse_outlier_uploads(
    reports: dict[int, DeviceReport], screening: Screening, failures: dict[int, str]
) -> None:
    """Move the uploads with an absurd update norm from ``reports`` to ``failures``."""
    with_arrays = [p for p in sorted(reports) if reports[p].upload_norm is not None]
    norms = np.array([reports[p].upload_norm for p in with_arrays], dtype=np.float64)
    refused = update_norm_outliers(norms, screening.max_update_norm_ratio, screening.norm_reference)
    others = {p: float(v) for p, v in zip(with_arrays, norms, strict=True)}
    for pid, bad in zip(with_arrays, refused, strict=True):
        if bad:
            failures[pid] = (
                f"node {reports[pid].node_id}: update norm ||w_v - w|| = {others[pid]:.4g}; "
                f"allowed: at most max-update-norm-ratio = {screening.max_update_norm_ratio:g} "
                "x the median of the round's other uploads, and a finite float32"
            )
            del reports[pid]


def collect_reports(
    replies: Iterable[Message],
    expected: Iterable[int],
    registry: NodeRegistry,
    reference: Mapping[str, NDArray[np.generic]] | None,
    phase: str,
    screening: Screening | None = None,
) -> tuple[list[DeviceReport], dict[int, str]]:
    """Validate a phase's replies; return the valid reports (by partition id) and the failures.

    A reply is excluded (with a warning) when it is malformed, when its partition id is not
    the one registered for its node, when it disagrees with what the device reported at
    discovery, or when its upload is an outlier (``screening``). ``failures`` maps each
    expected partition without a valid reply to a one-line reason (errors, timeouts, malformed
    or misattributed replies, refused uploads). Only a node's first reply counts (Flower's
    link stores one reply per message; a test grid might deliver more).
    """
    rules = screening or Screening()
    wanted = set(expected)
    reports: dict[int, DeviceReport] = {}
    failures: dict[int, str] = {}
    for msg in replies:
        node_id = int(msg.metadata.src_node_id)
        registered = registry.partition(node_id)
        if registered is None or registered not in wanted:
            log(WARNING, "%s: reply from node %d, which was not asked; ignored", phase, node_id)
            continue
        if registered in reports or registered in failures:  # a link delivers one reply each
            log(WARNING, "%s: another reply from node %d; the first one counts", phase, node_id)
            continue
        known = ExpectedReply(registered, registry.local_hist(registered), rules.num_samples)
        try:
            reports[registered] = read_report(
                msg,
                num_devices=registry.num_devices,
                num_classes=registry.num_classes,
                reference=reference,
                expected=known,
            )
        except MalformedReplyError as err:
            failures[registered] = str(err)
    _refuse_outlier_uploads(reports, rules, failures)
    for pid in sorted(wanted - set(reports) - set(failures)):
        failures[pid] = "no reply before the timeout"
    log(INFO, "%s: received %d results and %d failures", phase, len(reports), len(failures))
    for pid in sorted(failures):
        log(WARNING, "%s: device %d excluded this round: %s", phase, pid, failures[pid])
    return [reports[p] for p in sorted(reports)], dict(sorted(failures.items()))


def lost_devices(
    replies: Iterable[Message], expected: Iterable[int], registry: NodeRegistry
) -> set[int]:
    """The partitions of ``expected`` whose node sent no reply or an error reply: lost.

    Lost is what the link or the host did to a device (a timeout, a disconnection, a crashed
    ClientApp), not what the device sent: a reply that is malformed or refused is a failure of
    its own (:func:`collect_reports`), not a loss. A node's first reply counts.
    """
    first: dict[int, bool] = {}  # partition -> its first reply is an error
    for msg in replies:
        pid = registry.partition(int(msg.metadata.src_node_id))
        if pid is not None:
            first.setdefault(pid, msg.has_error())
    return {pid for pid in expected if first.get(pid, True)}


def reported_stats(
    reports: list[DeviceReport], num_devices: int, num_classes: int, *, post_training: bool
) -> ReportedStats:
    """The valid reports of a phase as length-V arrays (the policy's inputs are built from them).

    ``post_training``: the reports carry post-training values (train-loss, update-norm) to pass
    on (NaN rows for devices without them).
    """
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
