"""Discovery: ask the nodes the server does not know yet which partition they serve (and their
local class counts, a ``query.info`` reply); the messages still unanswered."""  # noqa: D205, D209

from __future__ import annotations

import time
from collections.abc import Iterable
from logging import INFO, WARNING

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcgd_config import keys
from fedcgd_strategy.flower.replies import MalformedReplyError, read_info
from fedcgd_strategy.nodes import NodeRegistry, PendingMessages


def discover_nodes(
    grid: Grid, registry: NodeRegistry, server_round: int, timeout_s: float,
    pending: PendingMessages | None = None, late: Iterable[Message] = (),
) -> dict[int, str]:  # fmt: skip
    """Forget nodes that left; ask connected nodes not seen before (and not busy in ``pending``)
    for their partition id, ``late`` replies counting as in time; node id -> why it failed."""  # noqa: D205, D209
    connected = list(grid.get_node_ids())
    for node, pid in registry.forget_disconnected(connected):
        log(WARNING, "node %d (partition %d) disconnected", node, pid)
    unknown = registry.unknown(connected)
    late_info = [r for r in late if r.metadata.message_type == keys.QUERY_INFO
                 and not r.has_error() and r.metadata.src_node_id in unknown]  # fmt: skip
    busy = {} if pending is None else pending.busy_nodes()
    skip = {r.metadata.src_node_id for r in late_info} | set(busy)
    unknown = [n for n in unknown if n not in skip]
    if not unknown and not late_info:
        return {}
    content = RecordDict({keys.CONFIG: ConfigRecord({keys.SERVER_ROUND: server_round})})
    msgs = messages(content, unknown, keys.QUERY_INFO, server_round)
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
    failed |= {n: "no query.info reply before the timeout" for n in unknown if n not in replied}
    log(INFO, "discovery: %d of %d devices have a node", len(registry), registry.num_devices)
    return dict(sorted(failed.items()))


def messages(content: RecordDict, nodes: Iterable[int], kind: str, rnd: int) -> list[Message]:
    """One message of ``kind`` with ``content`` to each of ``nodes``, grouped by round."""
    return [Message(content, dst_node_id=n, message_type=kind, group_id=str(rnd)) for n in nodes]


def send_tracked(
    grid: Grid, messages: list[Message], timeout_s: float, pending: PendingMessages | None,
    server_round: int,
) -> list[Message]:  # fmt: skip
    """``grid.send_and_receive``; the messages left unanswered are recorded in ``pending``."""
    replies = list(grid.send_and_receive(messages, timeout=timeout_s))
    if pending is not None:
        record_unanswered(pending, messages, replies, server_round)
    return replies


def record_unanswered(
    pending: PendingMessages, sent: list[Message], replies: list[Message], server_round: int
) -> None:
    """Record in ``pending`` the messages of ``sent`` that no reply answers (by the ids the grid
    assigned; a grid that assigns none answers before it returns)."""  # noqa: D205, D209
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
    """Pull and return the late replies of the pending messages (an error reply or a
    disconnection settles one too); while every connected node is busy, poll every ``poll_s``
    for up to ``wait_s`` seconds."""  # noqa: D205, D209
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
