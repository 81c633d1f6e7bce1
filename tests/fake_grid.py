"""An in-process Grid that hands each message to a Python callable per node (no Ray, no network)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

Handler = Callable[[Message, Context], Message]


def set_task_identity() -> None:
    """Messages read the run/node/task id of the process; set them as a ServerApp would."""
    TaskIdentity.run_id = 1
    TaskIdentity.node_id = 0
    TaskIdentity.task_id = 0


class FakeGrid(Grid):
    """Deliver messages synchronously to ``handlers[node_id](message, context)``.

    A handler that raises produces an error reply (as Flower does); node ids in ``silent``
    never reply (a timeout). Every delivered message is recorded in :attr:`sent`.
    """

    def __init__(
        self,
        handlers: dict[int, Handler],
        contexts: dict[int, Context],
        silent: Iterable[int] = (),
    ) -> None:
        set_task_identity()
        self.handlers = handlers
        self.contexts = contexts
        self.silent = set(silent)
        self.sent: list[Message] = []

    def set_run(self, run):  # type: ignore[no-untyped-def]
        self._run = run

    @property
    def run(self):  # type: ignore[no-untyped-def]
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # type: ignore[no-untyped-def]
        return Message(
            content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id
        )

    def get_node_ids(self) -> Iterable[int]:
        return list(self.handlers)

    def push_messages(self, messages):  # type: ignore[no-untyped-def]
        raise NotImplementedError("FakeGrid only supports send_and_receive")

    def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
        raise NotImplementedError("FakeGrid only supports send_and_receive")

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None):  # type: ignore[no-untyped-def]
        replies = []
        for msg in messages:
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            if node in self.silent:
                continue
            try:
                reply = self.handlers[node](msg, self.contexts[node])
            except Exception as err:
                reply = Message(Error(code=1, reason=repr(err)), reply_to=msg)
            replies.append(reply)
        return replies


def make_contexts(node_ids: list[int], run_config: dict, num_partitions: int) -> dict[int, Context]:
    """One Context per node with partition id = position in ``node_ids``."""
    return {
        node: Context(
            run_id=1,
            node_id=node,
            node_config={"partition-id": pid, "num-partitions": num_partitions},
            state=RecordDict(),
            run_config=run_config,
        )
        for pid, node in enumerate(node_ids)
    }
