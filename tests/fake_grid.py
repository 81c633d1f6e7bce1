"""The in-process Grid of :mod:`experiments.run.inprocess`, plus silent nodes (timeouts)."""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Context, Message

from experiments.run.inprocess import Handler, InProcessGrid, node_contexts


class FakeGrid(InProcessGrid):
    """:class:`InProcessGrid` whose nodes in ``silent`` never reply (a timeout).

    It stands for a deployment, where a node can time out (a simulation would wait for it):
    ``simulated = False``.
    """

    simulated = False

    def __init__(
        self,
        handlers: dict[int, Handler],
        contexts: dict[int, Context],
        silent: Iterable[int] = (),
        *,
        cohorts: bool = True,
    ) -> None:
        super().__init__(handlers, contexts, cohorts=cohorts, keep_sent=True)
        self.silent = set(silent)

    def deliver(self, msg: Message) -> Message | None:
        if msg.metadata.dst_node_id in self.silent:
            return None
        return super().deliver(msg)


def make_contexts(node_ids: list[int], run_config: dict, num_partitions: int) -> dict[int, Context]:
    """One Context per node with partition id = position in ``node_ids``."""
    return node_contexts(node_ids, run_config, num_partitions)
