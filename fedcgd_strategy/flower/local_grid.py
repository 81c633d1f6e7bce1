"""A Flower ``Grid`` with no SuperLink behind it: the part the project's two grids share.

The in-process engine's grid and the aggregators' stand-in grid have no Run, node records or
queue; this base class says so once and builds messages as ``Grid.create_message`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.run import Run


class LocalGrid(Grid):
    """Lists node ids and builds messages; what needs a SuperLink raises ``RuntimeError``.

    Subclasses give :meth:`get_node_ids` and :meth:`send_and_receive`, and :attr:`refusal`,
    the reason given when anything else is asked of them.
    """

    #: The error message of every call this grid cannot serve.
    refusal = "this grid has no SuperLink behind it"

    def set_run(self, run: Run) -> None:
        """Flower's hook for the run; nothing to keep in one process."""

    @property
    def run(self) -> Run:
        """Refused: there is no Run object behind this grid."""
        raise RuntimeError(self.refusal)

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """A message to ``dst_node_id`` (the default time to live)."""
        return Message(
            content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id
        )

    def get_nodes(self) -> Any:
        """Refused: only node ids are listed."""
        raise RuntimeError(self.refusal)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Refused: messages go through :meth:`send_and_receive`."""
        raise RuntimeError(self.refusal)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Refused: messages go through :meth:`send_and_receive`."""
        raise RuntimeError(self.refusal)
