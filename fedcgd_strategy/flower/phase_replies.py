"""A phase's replies validated together: each against the round, the uploads against each other.

:func:`collect_reports` reads every reply of a query or training phase
(:func:`~.replies.read_report`) and refuses the uploads whose update norm is an outlier
(:class:`Screening`); :func:`lost_devices` tells the devices the link or the host lost from
those whose reply was refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from logging import INFO, WARNING

import numpy as np
from flwr.app import Message
from flwr.supercore import log
from numpy.typing import NDArray

from fedcgd_strategy.flower.replies import DeviceReport, ExpectedReply, read_report
from fedcgd_strategy.flower.reply_fields import MalformedReplyError
from fedcgd_strategy.nodes import NodeRegistry
from fedcgd_strategy.screening import update_norm_outliers


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

    ``failures`` maps each expected partition without a valid reply (error, timeout, malformed or
    misattributed reply, refused upload) to a one-line reason. A node's first reply counts.
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

    Lost is what the link or the host did to a device; a refused reply is a failure, not a loss.
    """
    first: dict[int, bool] = {}  # partition -> its first reply is an error
    for msg in replies:
        pid = registry.partition(int(msg.metadata.src_node_id))
        if pid is not None:
            first.setdefault(pid, msg.has_error())
    return {pid for pid in expected if first.get(pid, True)}
