"""The in-process grid: what it serves and what it refuses."""

from __future__ import annotations

import pytest
from flwr.app import Message, MessageType, RecordDict

from experiments.run.inprocess import InProcessGrid


def test_the_in_process_grid_builds_lists_delivers_and_refuses_what_needs_a_superlink() -> None:
    def echo(msg: Message, _context: object) -> Message:
        return Message(RecordDict(), reply_to=msg)

    grid = InProcessGrid({7: echo, 9: echo}, {7: None, 9: None})  # type: ignore[dict-item]
    message = Message(RecordDict(), dst_node_id=1, message_type=MessageType.TRAIN)
    refused = (
        lambda: grid.run,
        lambda: grid.push_messages([message]),
        lambda: grid.pull_messages([""]),
    )
    for call in refused:
        with pytest.raises(RuntimeError, match="in-process grid"):
            call()
    msg = grid.create_message(RecordDict(), MessageType.EVALUATE, 9, "round-2")
    assert (msg.metadata.dst_node_id, msg.metadata.message_type) == (9, MessageType.EVALUATE)
    assert msg.metadata.group_id == "round-2"
    assert list(grid.get_node_ids()) == [7, 9]
    sent = [grid.create_message(RecordDict(), MessageType.TRAIN, node, "1") for node in (9, 8)]
    assert len(list(grid.send_and_receive(sent))) == 1  # node 8 is not connected: no reply
