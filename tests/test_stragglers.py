"""A device slower than the timeouts costs only its own participation (deployments): at most
one message per node in flight; a node whose message timed out is busy and failed until its
late reply is pulled (a late ``query.info`` still registers it). Simulations never time out."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_grid import FakeGrid, make_contexts
from flwr.app import Message, MessageType, RecordDict
from scripted_strategy import NODES, V, build, make_draw, run_round, scripted_client
from task_settings import all_available_run
from wrapped_project import run_wrapped

from experiments.run.inprocess import InProcessGrid
from fedcgd_config import keys
from fedcgd_strategy.flower.discovery import settle_pending
from fedcgd_strategy.nodes import Pending, PendingMessages
from server_app.run_folder.results import METRICS_FILE

TESTS = Path(__file__).resolve().parent


def test_unanswered_messages_make_their_nodes_busy_until_resolved_or_settled():
    pending = PendingMessages()
    sent = [("a", 1, "query.stats"), ("b", 2, "query.stats"), ("c", 3, "query.stats")]
    new = pending.record_unanswered(sent, answered=["b"], server_round=4)
    assert new == [Pending("a", 1, 4, "query.stats"), Pending("c", 3, 4, "query.stats")]
    pending.record_unanswered([("d", 1, "train")], answered=[], server_round=6)
    assert pending.busy_nodes() == {1: 4, 3: 4}  # node 1: its oldest message is of round 4
    assert pending.message_ids() == ["a", "c", "d"]
    assert pending.resolve(["a", "zzz"]) == [Pending("a", 1, 4, "query.stats")]
    assert pending.busy_nodes() == {1: 6, 3: 4}
    assert pending.forget_nodes([1]) == [Pending("d", 1, 6, "train")]
    assert pending.busy_nodes() == {3: 4} and len(pending) == 1
    # settle_pending: polling ends at the deadline; error replies and departed nodes settle
    pending = busy(("a", 1), ("b", 2))
    settle_pending(ScriptedGrid([1, 2], arrivals=[]), pending, wait_s=0.0, poll_s=0.0)
    assert pending.busy_nodes() == {1: 1, 2: 1}  # nothing arrived, no time to wait
    grid = SimpleNamespace(get_node_ids=lambda: [2], pull_messages=lambda ids: [reply("b", "x")])
    settle_pending(grid, pending, wait_s=0.0, poll_s=0.0)  # node 1 left; b: an error reply
    assert len(pending) == 0


class ScriptedGrid:
    """Nodes and, per pull, the ids whose late reply arrives (duck-typed replies)."""

    def __init__(self, nodes, arrivals):
        self.nodes, self.arrivals, self.pulls = list(nodes), list(arrivals), 0

    def get_node_ids(self):
        return self.nodes

    def pull_messages(self, message_ids):
        wanted = set(message_ids)
        done = self.arrivals[self.pulls] if self.pulls < len(self.arrivals) else []
        self.pulls += 1
        return [reply(mid) for mid in done if mid in wanted]


def reply(message_id, error=None):
    return SimpleNamespace(
        metadata=SimpleNamespace(reply_to_message_id=message_id),
        has_error=lambda: error is not None,
        error=SimpleNamespace(reason=error),
    )


def busy(*entries):
    pending = PendingMessages()
    for mid, node in entries:
        pending.record_unanswered([(mid, node, "query.stats")], [], server_round=1)
    return pending


@pytest.mark.parametrize(
    ("nodes", "arrivals", "pulls", "left"),
    [
        ([1, 2, 3], [["a"], ["b"]], 1, {2: 1}),  # node 3 is free: a late reply frees node 1
        ([1, 2], [[], [], ["b"], ["a"]], 3, {1: 1}),  # all busy: it polls until one is free
    ],
)
def test_late_replies_free_their_nodes_and_it_polls_only_while_every_node_is_busy(
    nodes, arrivals, pulls, left
):
    pending = busy(("a", 1), ("b", 2))
    grid = ScriptedGrid(nodes, arrivals=arrivals)
    settle_pending(grid, pending, wait_s=60.0, poll_s=0.0)
    assert grid.pulls == pulls and pending.busy_nodes() == left


class StragglerGrid(FakeGrid):
    """Nodes in ``slow`` answer messages of ``kinds`` ``delay`` grid calls (``send_and_receive``,
    counting down first) after they came; the reply then waits for :meth:`pull_messages`, as in
    Flower's LinkState. ``peak``: per node, the most messages it worked on at once."""

    def __init__(self, slow, delay, kinds=(keys.QUERY_STATS, "train")):
        handler = scripted_client()
        super().__init__({n: handler for n in NODES}, make_contexts(NODES, {}, V))
        self.slow, self.delay, self.kinds = set(slow), delay, set(kinds)
        self.working: dict[str, tuple[Message, int]] = {}  # id -> (message, ticks left)
        self.ids = (f"m{i}" for i in itertools.count())
        self.peak: Counter[int] = Counter()

    def send_and_receive(self, messages, *, timeout=None):
        self.working = {k: (m, left - 1) for k, (m, left) in self.working.items()}
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = next(self.ids)
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            if node in self.slow and msg.metadata.message_type in self.kinds:
                self.working[msg.metadata.message_id] = (msg, self.delay)
                load = sum(m.metadata.dst_node_id == node for m, _ in self.working.values())
                self.peak[node] = max(self.peak[node], load)
            elif (answer := self.deliver(msg)) is not None:
                replies.append(answer)
        return replies

    def pull_messages(self, message_ids):
        done = [k for k in message_ids if k in self.working and self.working[k][1] <= 0]
        return [self.deliver(self.working.pop(k)[0]) for k in done]


def straggler_strategy():
    """``all`` with a query phase, everyone available and fitting, timeouts 0 (and its grid)."""
    draw = make_draw([True] * V, [1.0] * V)
    return build("all", draw, protocol="query", total_bw=100.0, query_timeout_s=0.0)


def test_a_straggler_gets_one_message_at_a_time_and_costs_only_its_own_rounds():
    slow = 2
    grid = StragglerGrid(slow=[NODES[slow]], delay=5)
    strategy, _ = straggler_strategy()
    records, queried = [], []
    for rnd in range(1, 7):
        before = len(grid.sent)
        run_round(strategy, grid, rnd)
        records.append(strategy.last_record)
        sent = [m for m in grid.sent[before:] if m.metadata.message_type == keys.QUERY_STATS]
        queried.append(sorted(NODES.index(m.metadata.dst_node_id) for m in sent))
    others = [p for p in range(V) if p != slow]
    assert grid.peak[NODES[slow]] == 1  # never a second message while it works on one
    for rec in records:
        assert rec.uploaded == others  # every round: everybody else, never the straggler
        assert rec.failed == [slow]
    # Grid calls: round 1 = discovery, query, train; later rounds = query, train. The query of
    # call 2 counts down at calls 3-7 and is pulled at the start of round 4 (before call 8),
    # so the straggler is queried in round 1, busy in rounds 2-3, queried again in round 4.
    assert [slow in q for q in queried] == [True, False, False, True, False, False]
    assert records[1].failed_reasons[str(slow)].startswith("busy: its message of round 1")


def test_a_late_discovery_answer_registers_the_device_and_without_message_ids_none_is_busy():
    slow = 4
    grid = StragglerGrid(slow=[NODES[slow]], delay=2, kinds=[keys.QUERY_INFO])
    strategy, _ = straggler_strategy()
    for rnd in (1, 2):
        run_round(strategy, grid, rnd)
    # Its query.info (call 1) counts down at calls 2-3 and is pulled in round 2.
    asked = [m for m in grid.sent if m.metadata.dst_node_id == NODES[slow]]
    assert [m.metadata.message_type for m in asked] == [keys.QUERY_INFO, keys.QUERY_STATS, "train"]
    assert strategy.registry.partition(NODES[slow]) == slow
    assert strategy.last_record.uploaded == list(range(V))
    # The plain in-process grid assigns no ids and answers at once: no node is ever busy.
    strategy, grid = straggler_strategy()
    for rnd in (1, 2):
        run_round(strategy, grid, rnd)
        assert strategy.last_record.uploaded == list(range(V))
    assert len(strategy.pending) == 0


#: Rounds, the sleeping device, its sleep and the timeouts (a deployment's; not used here).
ROUNDS, SLOW, SLEEP_S, QUERY_TIMEOUT_S = 3, 0, 20.0, 6.0


@pytest.mark.slow
def test_flwr_run_a_sleeping_device_changes_nothing_in_a_simulation(tmp_path):
    """Three devices on two Ray actors; device 0 sleeps 20 s per query/train, timeouts 6 s. A
    simulation waits for every reply: the sleeper takes part in every round, nobody is lost."""
    out = tmp_path / "out"
    extra = dict.fromkeys(["query-timeout-s", "train-timeout-s"], QUERY_TIMEOUT_S)
    extra |= {"channel.deadline-s": 1.0, "local-steps": 2}
    proc = run_wrapped(
        all_available_run(out, 3, ROUNDS, extra),
        wrapper=TESTS / "misbehaving.py",
        env={
            "FEDCGD_FAULT": "sleep",
            "FEDCGD_FAULT_PARTITION": str(SLOW),
            "FEDCGD_FAULT_SLEEP_S": str(SLEEP_S),
        },
        num_supernodes=3,
        workdir=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = [json.loads(x) for x in (out / METRICS_FILE).read_text().splitlines()]
    assert [x["round"] for x in lines] == list(range(1, ROUNDS + 1))
    for line in lines:
        assert line["num_available"] == 3 and SLOW in line["uploaded"], line
        assert line["uploaded"] == line["scheduled"] and line["failed"] == [], line
        assert line["devices_lost"] == 0


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
