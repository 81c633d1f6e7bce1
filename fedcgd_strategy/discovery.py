"""Which Flower node serves which device: partition id ↔ node id, joins and leaves.

The server cannot read a node's ``node_config``, so each node reports its partition id in a
``query.info`` reply; :class:`NodeRegistry` (pure Python) keeps the answers and
:func:`discover_nodes` asks the nodes it does not know yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log
from numpy.typing import NDArray

from fedcgd_strategy.replies import MalformedReplyError, read_info
from task import keys


class NodeRegistry:
    """The partition id of every known node, and the node of every known partition.

    Rules: a node that disconnects is forgotten (its partition becomes free and is learned again
    when a node claims it); when two connected nodes claim the same partition the first one
    keeps it and the second stays unknown (it is asked again next round, so it takes over once
    the first leaves).

    Parameters
    ----------
    num_devices : int
        V; partition ids lie in ``[0, V)``.
    num_classes : int
        C, the length of the local class counts.

    """

    def __init__(self, num_devices: int, num_classes: int) -> None:
        self.num_devices, self.num_classes = int(num_devices), int(num_classes)
        self._node_of: dict[int, int] = {}
        self._partition_of: dict[int, int] = {}
        self._local_hist: dict[int, NDArray[np.int64]] = {}

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

    def local_counts(self) -> NDArray[np.int64]:
        """int[V, C]: class counts of each known device's whole local dataset (0 rows: unknown)."""
        out = np.zeros((self.num_devices, self.num_classes), dtype=np.int64)
        for pid, hist in self._local_hist.items():
            out[pid] = hist
        return out

    def with_node(self, mask: NDArray[np.bool_]) -> list[int]:
        """Partition ids set in ``mask`` (bool[V]) that have a node, ascending."""
        return [int(v) for v in np.flatnonzero(mask) if int(v) in self._node_of]


def discover_nodes(grid: Grid, registry: NodeRegistry, server_round: int, timeout_s: float) -> None:
    """Forget nodes that left; ask connected nodes not seen before for their partition id.

    Nodes that do not answer, answer with an error or a malformed id, or claim a partition
    another node holds stay unknown (never scheduled) and are asked again next round.
    """
    connected = list(grid.get_node_ids())
    for node, pid in registry.forget_disconnected(connected):
        log(WARNING, "node %d (partition %d) disconnected", node, pid)
    unknown = registry.unknown(connected)
    if not unknown:
        return
    content = RecordDict({keys.CONFIG: ConfigRecord({keys.SERVER_ROUND: server_round})})
    msgs = [
        Message(content, dst_node_id=n, message_type=keys.QUERY_INFO, group_id=str(server_round))
        for n in unknown
    ]
    for reply in grid.send_and_receive(msgs, timeout=timeout_s):
        try:
            node, pid, hist = read_info(
                reply, num_devices=registry.num_devices, num_classes=registry.num_classes
            )
        except MalformedReplyError as err:
            log(WARNING, "discovery failed (%s); asked again next round", err)
            continue
        holder = registry.register(node, pid, hist)
        if holder != node:
            log(WARNING, "nodes %d and %d both claim partition %d; kept %d", holder, node, pid,
                holder)  # fmt: skip
    log(INFO, "discovery: %d of %d devices have a node", len(registry), registry.num_devices)
