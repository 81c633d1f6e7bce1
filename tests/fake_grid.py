"""The in-process Grid of :mod:`experiments.run.inprocess`, plus silent nodes (timeouts)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flwr.app import Context, Message

from client_app.app import make_app
from client_app.cohort import Cohorts
from experiments.run.inprocess import Handler, InProcessGrid, node_contexts


class FakeGrid(InProcessGrid):
    """:class:`InProcessGrid` whose nodes in ``silent`` never reply (a timeout): a deployment's
    (``simulated = False``; a simulation would wait). ``cohorts``: as InProcessGrid's."""

    simulated = False

    def __init__(
        self, handlers: dict[int, Handler], contexts: dict[int, Context],
        silent: Iterable[int] = (), *, cohorts: Cohorts | None = None,
    ) -> None:  # fmt: skip
        super().__init__(handlers, contexts, cohorts=cohorts, keep_sent=True)
        self.silent = set(silent)

    def deliver(self, msg: Message) -> Message | None:
        if msg.metadata.dst_node_id in self.silent:
            return None
        return super().deliver(msg)


def app_grid(
    contexts: dict[int, Context], *, wrap: Callable[[Handler], Handler] | None = None,
    silent: Iterable[int] = (), cohorts: bool = True,
) -> FakeGrid:  # fmt: skip
    """A :class:`FakeGrid` whose every node runs the real ClientApp, cohorts as the in-process
    engine runs them (``cohorts=False``: every device alone); ``wrap``: what every node runs
    instead, given that ClientApp (a misbehaving device)."""
    together = Cohorts() if cohorts else None
    app = make_app(together)
    handler = app if wrap is None else wrap(app)
    return FakeGrid({n: handler for n in contexts}, contexts, silent, cohorts=together)


#: One Context per node, partition id = position in ``node_ids``.
make_contexts = node_contexts
