"""The two grids without a SuperLink: what they serve and what they refuse."""

from __future__ import annotations

import pytest
from flwr.app import Message, MessageType, RecordDict

from experiments.run.inprocess import InProcessGrid
from fedcgd_strategy.flower.aggregators import StandInGrid


def _in_process() -> InProcessGrid:
    def echo(msg: Message, _context: object) -> Message:
        return Message(RecordDict(), reply_to=msg)

    return InProcessGrid({7: echo, 9: echo}, {7: None, 9: None})  # type: ignore[dict-item]


@pytest.mark.parametrize("make", [_in_process, lambda: StandInGrid(3)])
def test_what_needs_a_superlink_is_refused_with_the_grids_reason(make) -> None:
    grid = make()
    message = Message(RecordDict(), dst_node_id=1, message_type=MessageType.TRAIN)
    calls = {
        "run": lambda: grid.run,
        "get_nodes": grid.get_nodes,
        "push_messages": lambda: grid.push_messages([message]),
        "pull_messages": lambda: grid.pull_messages(["id"]),
    }
    for call in calls.values():
        with pytest.raises(RuntimeError, match=type(grid).refusal[:20]):
            call()


def test_both_grids_build_messages_to_the_node_and_of_the_type_asked() -> None:
    for grid in (_in_process(), StandInGrid(3)):
        msg = grid.create_message(RecordDict(), MessageType.EVALUATE, 9, "round-2")
        assert (msg.metadata.dst_node_id, msg.metadata.message_type) == (9, MessageType.EVALUATE)
        assert msg.metadata.group_id == "round-2"


def test_the_in_process_grid_lists_its_nodes_and_delivers_the_stand_in_refuses() -> None:
    grid = _in_process()
    assert list(grid.get_node_ids()) == [7, 9]
    sent = [grid.create_message(RecordDict(), MessageType.TRAIN, node, "1") for node in (9, 8)]
    assert len(list(grid.send_and_receive(sent))) == 1  # node 8 is not connected: no reply
    stand_in = StandInGrid(3)
    assert list(stand_in.get_node_ids()) == [1, 2, 3]
    with pytest.raises(RuntimeError, match="may only list node ids"):
        stand_in.send_and_receive(sent)


def test_the_stand_in_stops_a_strategy_that_waits_for_more_nodes() -> None:
    stand_in = StandInGrid(2)
    for _ in range(StandInGrid.MAX_LISTINGS):
        assert list(stand_in.get_node_ids()) == [1, 2]
    with pytest.raises(RuntimeError, match="waits for more than 2 nodes"):
        stand_in.get_node_ids()
