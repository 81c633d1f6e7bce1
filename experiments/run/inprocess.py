"""The app in one process: the real ServerApp and ClientApp, no Ray, no network (cohorts or not)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid

from experiments.run.launcher import DEFAULT_RESULTS
from experiments.run.processes import usable_cores
from experiments.run.resume_command import StartedAs
from fedcgd_strategy.errors import OneLineMessage
from fedcgd_strategy.flower.simulation import describe_unanswered, outside_flower, stall_alarm
from server_app.app import run_federation
from server_app.config import parse_run_config

if TYPE_CHECKING:
    from client_app.cohort import Cohorts
    from experiments.run.resume_command import LastWords

Handler = Callable[[Message, Context], Message]


@dataclass(frozen=True)
class InProcessOptions:
    """The options of ``fedcgd inprocess``."""

    run_config: str = ""
    per_device: bool = False
    cohort_threads: int = 0
    out: Path = DEFAULT_RESULTS


#: Error code of the reply a raising handler produces (Flower's ClientApp exception code).
CLIENT_APP_RAISED = 1


class InProcessGrid(Grid):
    """Deliver messages synchronously to ``handlers[node_id](message, contexts[node_id])``.

    ``cohorts`` None: one device at a time; ``keep_sent``: keep what was sent in :attr:`sent`.
    """

    #: A simulation: every message is answered before :meth:`send_and_receive` returns.
    simulated = True

    def __init__(
        self,
        handlers: dict[int, Handler],
        contexts: dict[int, Context],
        *,
        cohorts: Cohorts | None = None,
        keep_sent: bool = False,
        stall_limit_s: float | None = None,
    ) -> None:
        outside_flower()
        self.handlers, self.contexts, self.cohorts = handlers, contexts, cohorts
        self.keep_sent, self.stall_limit_s = keep_sent, stall_limit_s
        self.sent: list[Message] = []

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        return list(self.handlers)

    def set_run(self, run: Any) -> None:  # noqa: D102
        pass

    @property
    def run(self) -> Any:  # noqa: D102
        raise RuntimeError("an in-process grid has no Run")

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

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Refused: messages go through :meth:`send_and_receive`."""
        raise RuntimeError("an in-process grid delivers messages with send_and_receive")

    pull_messages = push_messages  # type: ignore[assignment]

    def deliver(self, msg: Message) -> Message | None:
        """Hand one message to its node; None means no reply (a timeout)."""
        node = msg.metadata.dst_node_id
        if node not in self.handlers:
            return None
        try:
            reply = self.handlers[node](msg, self.contexts[node])
        except Exception as err:  # a failing device must not take the run down
            return Message(Error(code=CLIENT_APP_RAISED, reason=repr(err)), reply_to=msg)
        if not isinstance(reply, Message):  # as Flower: a ClientApp must return a Message
            reason = f"the ClientApp returned {type(reply).__name__}, not a Message"
            return Message(Error(code=CLIENT_APP_RAISED, reason=reason), reply_to=msg)
        return reply

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Deliver every message and return the replies (``timeout`` unused: a simulation waits)."""
        messages = list(messages)
        self.sent.extend(messages if self.keep_sent else ())
        replies: list[Message] = []
        delivered = 0

        def describe() -> str:
            return describe_unanswered(messages[delivered:], self.stall_limit_s or 0.0)

        together = nullcontext() if self.cohorts is None else self.cohorts.opened(
            [(m, self.contexts[m.metadata.dst_node_id]) for m in messages
             if m.metadata.dst_node_id in self.handlers]
        )  # fmt: skip
        with stall_alarm(self.stall_limit_s, describe) as progress, together:
            for msg in messages:
                reply = self.deliver(msg)
                delivered += 1
                progress()
                if reply is not None:
                    replies.append(reply)
        return replies


def node_contexts(
    node_ids: list[int], run_config: Mapping[str, Any], num_partitions: int
) -> dict[int, Context]:
    """One Context per node (sharing one copy of ``run_config``), partition id = position."""
    from client_app.app import node_context

    shared = dict(run_config)
    return {n: node_context(shared, i, num_partitions, node_id=n) for i, n in enumerate(node_ids)}


def run_inprocess(
    run_config: Mapping[str, Any], *, cohorts: bool = True, cohort_threads: int = 1
) -> dict[str, Any]:
    """Run one federation (complete flat ``run_config``) in this process; its summary."""
    from client_app.app import make_app
    from client_app.cohort import Cohorts

    config = parse_run_config(run_config)
    nodes = [1_000_003 * (v + 1) for v in range(config.task.num_devices)]
    together = Cohorts(threads=cohort_threads) if cohorts else None
    contexts = node_contexts(nodes, run_config, len(nodes))
    grid = InProcessGrid(dict.fromkeys(nodes, make_app(together)), contexts, cohorts=together,
                         stall_limit_s=config.stall_limit_s)  # fmt: skip
    return run_federation(grid, config)


def main(options: InProcessOptions, started: StartedAs | None = None) -> int:
    """``fedcgd inprocess``: one run in this process; exit code 0, 1, 2 or 130 / 143."""
    from experiments.run.launcher import with_last_words

    return with_last_words(partial(run_command, options, started or StartedAs(("inprocess",))))


def run_command(args: InProcessOptions, started: StartedAs, last_words: LastWords) -> int:
    """:func:`main` without the signal handling."""
    import json
    import time
    import traceback

    from experiments.run.launcher import ended, start_run
    from server_app.run_folder.run_status import run_outcome

    outside_flower(colored=sys.stderr.isatty())  # no colour codes in a log file
    run = start_run(args.run_config, args.out, started, last_words)
    if run is None:
        return 2
    launched_unix_s = time.time()
    failure: Exception | None = None
    threads = args.cohort_threads or usable_cores()
    try:
        summary = run_inprocess(run.config, cohorts=not args.per_device, cohort_threads=threads)
        print(json.dumps(summary, indent=2))
    except Exception as err:  # the status says what happened; the traceback says where
        failure = err
        if not isinstance(err, OneLineMessage):  # a one-line error needs no trace
            traceback.print_exc()
    finally:
        assert run.claim is not None
        run.claim.release()
    return ended(run_outcome(run.result_dir, launched_unix_s, failure), last_words)
