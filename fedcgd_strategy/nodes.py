"""The server's view of the nodes: which serves which device, and which still owes a reply
(docs/design.md, "One message per node"). No flwr, no torch."""  # noqa: D205, D209

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


class NodeRegistry:
    """The partition id of every known node, and the node of every known partition.

    A node that disconnects is forgotten; of two connected nodes claiming one partition the first
    keeps it. With ``partition_counts`` (int[V, C], the true class counts of each partition) a
    claim with other local class counts is refused (docs/deployment.md, "A device that dies").
    """

    def __init__(
        self, num_devices: int, num_classes: int, partition_counts: NDArray[np.int64] | None = None
    ) -> None:
        self.num_devices, self.num_classes = int(num_devices), int(num_classes)
        self._node_of: dict[int, int] = {}
        self._partition_of: dict[int, int] = {}
        self._local_hist: dict[int, NDArray[np.int64]] = {}
        self._truth = partition_counts

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
            del self._partition_of[node], self._node_of[pid]
        return lost

    def unknown(self, connected: Iterable[int]) -> list[int]:
        """Connected node ids whose partition is not known yet, sorted."""
        return sorted(set(connected) - set(self._partition_of))

    def register(self, node_id: int, partition_id: int, local_hist: NDArray[np.int64]) -> int:
        """Record that ``node_id`` serves ``partition_id`` (checked by the reply's reader) with
        class counts ``local_hist``; return the node that keeps it (the first claimant)."""  # noqa: D205, D209
        holder = self._node_of.setdefault(partition_id, node_id)
        if holder == node_id:
            self._partition_of[node_id] = partition_id
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
            f"{np.asarray(self._truth[partition_id]).tolist()}"
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


@dataclass(frozen=True)
class Pending:
    """One unanswered message: grid ``message_id``, ``node_id``, ``server_round`` and ``kind``."""

    message_id: str
    node_id: int
    server_round: int
    kind: str


class PendingMessages(dict[str, Pending]):
    """The unanswered messages of the run, by message id."""

    def record_unanswered(
        self, sent: Iterable[tuple[str, int, str]], answered: Iterable[str], server_round: int
    ) -> list[Pending]:
        """Keep (and return) the ``sent`` (message_id, node_id, kind) not ``answered`` (ids)."""
        replied = set(answered)
        new = [Pending(mid, int(node), int(server_round), kind) for mid, node, kind in sent
               if mid and mid not in replied]  # fmt: skip
        self.update((p.message_id, p) for p in new)
        return new

    def resolve(self, answered: Iterable[str]) -> list[Pending]:
        """Forget the messages with these ids (their late reply arrived); return them."""
        return [p for mid in answered if (p := self.pop(mid, None)) is not None]

    def forget_nodes(self, nodes: Iterable[int]) -> list[Pending]:
        """Forget every message to ``nodes`` (they disconnected); return them."""
        gone = set(nodes)
        return self.resolve([mid for mid, p in self.items() if p.node_id in gone])

    def message_ids(self) -> list[str]:
        """Ids of every pending message, in the order they were recorded."""
        return list(self)

    def busy_nodes(self) -> dict[int, int]:
        """Node id → the round of its oldest pending message, for every node with one."""
        busy: dict[int, int] = {}
        for p in self.values():
            busy[p.node_id] = min(busy.get(p.node_id, p.server_round), p.server_round)
        return busy
