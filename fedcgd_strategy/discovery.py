"""Which Flower node serves which device: partition id ↔ node id, joins and leaves.

The server cannot read a node's ``node_config``, so each node reports its partition id in a
``query.info`` reply; :class:`NodeRegistry` (pure Python) keeps the answers and
:func:`discover_nodes` asks the nodes it does not know yet.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from logging import INFO, WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log
from numpy.typing import NDArray

from fedcgd_strategy.pending import PendingMessages
from fedcgd_strategy.replies import MalformedReplyError, read_info
from fedcgd_task import keys


class NodeRegistry:
    """The partition id of every known node, and the node of every known partition.

    Rules: a node that disconnects is forgotten (its partition becomes free and is learned again
    when a node claims it); when two connected nodes claim the same partition the first one
    keeps it and the second stays unknown (it is asked again next round, so it takes over once
    the first leaves).

    Claims are only as good as the evidence: with ``partition_counts`` (the class counts of
    every partition, which the server can compute because the partition is a pure function of
    the run config), a claim whose local class counts are not those of the claimed partition is
    refused (:meth:`claim_problem`), so a node cannot take over another device's partition by
    answering first with its own data. It can by reporting the other partition's counts
    exactly (they follow from the public run config): only node authentication (TLS with
    SuperNode authentication, see the README) tells such a node apart. Without
    ``partition_counts``, the first claimant keeps the partition.

    Parameters
    ----------
    num_devices : int
        V; partition ids lie in ``[0, V)``.
    num_classes : int
        C, the length of the local class counts.
    partition_counts : int[V, C], optional
        The true class counts of each partition's local dataset.

    """

    def __init__(
        self,
        num_devices: int,
        num_classes: int,
        partition_counts: NDArray[np.int64] | None = None,
    ) -> None:
        self.num_devices, self.num_classes = int(num_devices), int(num_classes)
        self._node_of: dict[int, int] = {}
        self._partition_of: dict[int, int] = {}
        self._local_hist: dict[int, NDArray[np.int64]] = {}
        self._truth = None
        if partition_counts is not None:
            truth = np.asarray(partition_counts, dtype=np.int64)
            if truth.shape != (self.num_devices, self.num_classes):
                raise ValueError(
                    f"partition_counts has shape {truth.shape}; expected "
                    f"({self.num_devices}, {self.num_classes})"
                )
            self._truth = truth

    def __len__(self) -> int:
        return len(self._node_of)

    def node(self, partition_id: int) -> int:
        """Node id serving ``partition_id`` (KeyError if none)."""
        return self._node_of[partition_id]

    def partition(self, node_id: int) -> int | None:
        """Partition id of ``node_id``, or None if the node is unknown."""
        return self._partition_of.get(node_id)

    def forget_disconnected(self, connected: Iterable[int]) -> list[tuple[int, int]]:
        """Forget every known node not in ``connected``; return the (node, partition) pairs lost."""
        alive = set(connected)
        lost = [(n, p) for n, p in sorted(self._partition_of.items()) if n not in alive]
        for node, pid in lost:
            del self._partition_of[node]
            del self._node_of[pid]
        return lost

    def unknown(self, connected: Iterable[int]) -> list[int]:
        """Connected node ids whose partition is not known yet, sorted."""
        return sorted(set(connected) - set(self._partition_of))

    def register(
        self, node_id: int, partition_id: int, local_hist: NDArray[np.int64] | None = None
    ) -> int:
        """Record that ``node_id`` serves ``partition_id``; return the node that keeps it.

        The return value differs from ``node_id`` when another node already holds the
        partition (a duplicate claim, which is refused). ``local_hist`` (int[C]) is the class
        count of the device's whole local dataset, kept per partition.
        """
        if not 0 <= partition_id < self.num_devices:
            raise ValueError(
                f"partition id {partition_id!r} out of range; allowed: 0 .. {self.num_devices - 1}"
            )
        holder = self._node_of.setdefault(partition_id, node_id)
        if holder == node_id:
            self._partition_of[node_id] = partition_id
            if local_hist is not None:
                self._local_hist[partition_id] = np.asarray(local_hist, dtype=np.int64)
        return holder

    def local_hist(self, partition_id: int) -> NDArray[np.int64] | None:
        """Class counts of ``partition_id``'s whole local dataset as registered (None: unknown)."""
        return self._local_hist.get(partition_id)

    def claim_problem(self, partition_id: int, local_hist: NDArray[np.int64]) -> str | None:
        """Why a claim of ``partition_id`` with ``local_hist`` is refused (None: not refused)."""
        if self._truth is None or np.array_equal(self._truth[partition_id], local_hist):
            return None
        return (
            f"claims partition {partition_id} with local class counts "
            f"{np.asarray(local_hist).tolist()}, which are not that partition's "
            f"{self._truth[partition_id].tolist()}"
        )

    def local_counts(self) -> NDArray[np.int64]:
        """int[V, C]: class counts of each known device's whole local dataset (0 rows: unknown)."""
        out = np.zeros((self.num_devices, self.num_classes), dtype=np.int64)
        for pid, hist in self._local_hist.items():
            out[pid] = hist
        return out

    def with_node(self, mask: NDArray[np.bool_]) -> list[int]:
        """Partition ids set in ``mask`` (bool[V]) that have a node, ascending."""
        return [int(v) for v in np.flatnonzero(mask) if int(v) in self._node_of]


def discover_nodes(
    grid: Grid,
    registry: NodeRegistry,
    server_round: int,
    timeout_s: float,
    pending: PendingMessages | None = None,
    late: Iterable[Message] = (),
) -> dict[int, str]:
    """Forget nodes that left; ask connected nodes not seen before for their partition id.

    Returns the nodes whose discovery failed this round, node id -> one-line reason (recorded
    in the round's metrics line as ``discovery_failed``).

    Nodes that do not answer, answer with an error or a malformed id, or claim a partition
    another node holds stay unknown (never scheduled) and are asked again next round. With
    ``pending``, a node still working on an unanswered message is not asked (it is asked once
    it has answered that one) and a ``query.info`` left unanswered is recorded there. ``late``:
    replies that came after their timeout (:func:`settle_pending`); a late ``query.info``
    answer is used as if it had come in time (what a device reports there does not change).
    """
    connected = list(grid.get_node_ids())
    for node, pid in registry.forget_disconnected(connected):
        log(WARNING, "node %d (partition %d) disconnected", node, pid)
    busy = set() if pending is None else set(pending.busy_nodes())
    unknown = registry.unknown(connected)
    late_info = [r for r in late if r.metadata.message_type == keys.QUERY_INFO]
    late_info = [r for r in late_info if not r.has_error() and r.metadata.src_node_id in unknown]
    answered = {r.metadata.src_node_id for r in late_info}
    unknown = [n for n in unknown if n not in busy and n not in answered]
    if not unknown and not late_info:
        return {}
    content = RecordDict({keys.CONFIG: ConfigRecord({keys.SERVER_ROUND: server_round})})
    msgs = [
        Message(content, dst_node_id=n, message_type=keys.QUERY_INFO, group_id=str(server_round))
        for n in unknown
    ]
    replies = send_tracked(grid, msgs, timeout_s, pending, server_round) if msgs else []
    failed: dict[int, str] = {}
    for reply in [*late_info, *replies]:
        try:
            node, pid, hist = read_info(
                reply, num_devices=registry.num_devices, num_classes=registry.num_classes
            )
        except MalformedReplyError as err:
            failed[int(reply.metadata.src_node_id)] = str(err)
            log(WARNING, "discovery failed (%s); asked again next round", err)
            continue
        problem = registry.claim_problem(pid, hist)
        if problem is not None:
            failed[node] = f"claim refused: {problem}"
            log(WARNING, "discovery: node %d %s; refused, asked again next round", node, problem)
            continue
        holder = registry.register(node, pid, hist)
        if holder != node:
            failed[node] = f"claims partition {pid}, which node {holder} holds"
            log(WARNING, "nodes %d and %d both claim partition %d; kept %d", holder, node, pid,
                holder)  # fmt: skip
    replied = {int(r.metadata.src_node_id) for r in replies}
    for node in unknown:
        if node not in replied:
            failed[node] = "no query.info reply before the timeout"
    log(INFO, "discovery: %d of %d devices have a node", len(registry), registry.num_devices)
    return dict(sorted(failed.items()))


def send_tracked(
    grid: Grid,
    messages: list[Message],
    timeout_s: float,
    pending: PendingMessages | None,
    server_round: int,
) -> list[Message]:
    """``grid.send_and_receive``; the messages left unanswered are recorded in ``pending``."""
    replies = list(grid.send_and_receive(messages, timeout=timeout_s))
    if pending is not None:
        record_unanswered(pending, messages, replies, server_round)
    return replies


def record_unanswered(
    pending: PendingMessages, sent: list[Message], replies: list[Message], server_round: int
) -> None:
    """Record in ``pending`` the messages of ``sent`` that no reply in ``replies`` answers.

    Message ids are those the grid assigned when it pushed ``sent`` (a grid that assigns none
    answers before it returns, and nothing is recorded).
    """
    meta = [m.metadata for m in sent]
    new = pending.record_unanswered(
        ((m.message_id, m.dst_node_id, m.message_type) for m in meta),
        (r.metadata.reply_to_message_id for r in replies),
        server_round,
    )
    for p in new:
        log(INFO, "node %d has not answered its %s of round %d: busy until it does", p.node_id,
            p.kind, p.server_round)  # fmt: skip


def settle_pending(
    grid: Grid, pending: PendingMessages, wait_s: float = 0.0, poll_s: float = 0.5
) -> list[Message]:
    """Pull the late replies of the pending messages: their nodes are free again.

    Returns them. A late reply belongs to a round that is over: the strategy never reads it
    as a reply of the current round (only discovery uses a late ``query.info``). An error
    reply (e.g. the message expired, the node went offline) also settles its message; so does
    the node's disconnection. While every connected node is busy (e.g. all were still starting
    when the first round timed out) it polls every ``poll_s`` for up to ``wait_s`` seconds, so
    that a round is not wasted on nobody; as soon as one node is free it returns, without
    waiting for the stragglers.
    """
    deadline = time.monotonic() + wait_s
    pulled: list[Message] = []
    while len(pending):
        connected = set(grid.get_node_ids())
        for p in pending.forget_nodes(set(pending.busy_nodes()) - connected):
            log(INFO, "node %d disconnected with its %s of round %d unanswered", p.node_id,
                p.kind, p.server_round)  # fmt: skip
        late = list(grid.pull_messages(pending.message_ids())) if len(pending) else []
        pulled += late
        errors = {r.metadata.reply_to_message_id: r.error.reason for r in late if r.has_error()}
        for p in pending.resolve(r.metadata.reply_to_message_id for r in late):
            how = f"with an error ({errors[p.message_id]})" if p.message_id in errors else "late"
            log(INFO, "node %d answered its %s of round %d %s", p.node_id, p.kind,
                p.server_round, how)  # fmt: skip
        if not connected <= set(pending.busy_nodes()) or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    return pulled
