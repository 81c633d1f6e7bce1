"""Messages a node has not answered yet: a node that is still working is not sent more.

At most one message per node is in flight (docs/design.md, "One message per node"): a message
not answered before its timeout stays pending until its reply is pulled, and its node sits the
rounds out as failed meanwhile. Pure Python.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Pending:
    """One unanswered message: grid ``message_id``, ``node_id``, ``server_round`` and ``kind``."""

    message_id: str
    node_id: int
    server_round: int
    kind: str


class PendingMessages:
    """The unanswered messages of the run, by message id."""

    def __init__(self) -> None:
        self._by_id: dict[str, Pending] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def record_unanswered(
        self,
        sent: Iterable[tuple[str, int, str]],
        answered: Iterable[str],
        server_round: int,
    ) -> list[Pending]:
        """Keep the messages of ``sent`` whose id is not in ``answered``; return them.

        ``sent`` holds (message_id, node_id, kind) of a phase (an empty id, from a grid that answers
        before it returns, is not tracked); ``answered`` the ``reply_to_message_id`` of every reply.
        """
        replied = set(answered)
        new = [
            Pending(mid, int(node), int(server_round), kind)
            for mid, node, kind in sent
            if mid and mid not in replied
        ]
        self._by_id.update((p.message_id, p) for p in new)
        return new

    def resolve(self, answered: Iterable[str]) -> list[Pending]:
        """Forget the messages with these ids (their late reply arrived); return them."""
        return [p for mid in answered if (p := self._by_id.pop(mid, None)) is not None]

    def forget_nodes(self, nodes: Iterable[int]) -> list[Pending]:
        """Forget every message to ``nodes`` (they disconnected); return them."""
        gone = set(nodes)
        dropped = [p for p in self._by_id.values() if p.node_id in gone]
        for p in dropped:
            del self._by_id[p.message_id]
        return dropped

    def message_ids(self) -> list[str]:
        """Ids of every pending message, in the order they were recorded."""
        return list(self._by_id)

    def busy_nodes(self) -> dict[int, int]:
        """Node id → the round of its oldest pending message, for every node with one."""
        busy: dict[int, int] = {}
        for p in self._by_id.values():
            busy[p.node_id] = min(busy.get(p.node_id, p.server_round), p.server_round)
        return busy
