"""Flower's simulation runtime (``run_simulation``: InMemoryGrid, LinkState, worker threads) in
the test's process, its Ray backend replaced by :class:`ThreadBackend`: each ClientApp call on
the engine's worker thread after the message's host ``delay``. Seconds, where ``flwr run`` takes
minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.server.superlink.fleet.vce.backend import raybackend
from flwr.server.superlink.fleet.vce.backend.backend import Backend, BackendConfig
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from server_app.app import run_federation
from server_app.config import parse_run_config

#: ``delay(partition_id, message_type, server_round)`` -> seconds the host takes first.
Delay = Callable[[int, str, int], float]


class ThreadBackend(Backend):
    """Runs the ClientApp on the engine's worker thread; :func:`run_simulated` sets the nodes'
    run config (``run_simulation`` leaves it empty) and the delay. One worker: the ClientApp's
    per-process caches are never shared between two threads, as in a Ray actor."""

    run_config: Mapping[str, Any] = {}
    delay: Delay = staticmethod(lambda *_: 0.0)

    def __init__(self, backend_config: BackendConfig) -> None:
        super().__init__(backend_config)
        self.app_fn: Callable[[], ClientApp] | None = None

    @property
    def num_workers(self) -> int:
        return 1

    def build(self, app_fn: Callable[[], ClientApp]) -> None:
        self.app_fn = app_fn

    def is_worker_idle(self) -> bool:
        return True

    def terminate(self) -> None:
        pass

    def process_message(self, message: Message, context: Context) -> tuple[Message, Context]:
        assert self.app_fn is not None
        pid = int(context.node_config["partition-id"])
        config = message.content.config_records.get("config")
        server_round = int(config["server-round"]) if config and "server-round" in config else 0
        time.sleep(type(self).delay(pid, message.metadata.message_type, server_round))
        # the node's Context (its state kept by the engine) with the run config
        call = Context(
            run_id=context.run_id, node_id=context.node_id, node_config=context.node_config,
            state=context.state, run_config=dict(self.run_config),
        )  # fmt: skip
        return self.app_fn()(message=message, context=call), context


def run_simulated(
    monkeypatch: Any,
    run_config: Mapping[str, Any],
    delay: Delay = lambda *_: 0.0,
    *,
    server_main: Callable[[Grid], object] | None = None,
) -> BaseException | None:
    """Run the federation of ``run_config`` under Flower's simulation runtime (threads).

    Returns what ``run_federation`` raised (None when it returned). ``num-devices`` simulated
    SuperNodes; ``delay`` holds each message back as a busy host would. ``server_main``: what
    the ServerApp does with Flower's grid instead of ``run_federation``.
    """
    from client_app.app import app as client_app

    config = parse_run_config(run_config)
    raised: list[BaseException] = []
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            run_federation(grid, config) if server_main is None else server_main(grid)
        except Exception as err:
            raised.append(err)

    backend = type("Backend", (ThreadBackend,), {"run_config": dict(run_config)})
    backend.delay = staticmethod(delay)  # type: ignore[assignment]
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setattr(raybackend, "RayBackend", backend)
    run_simulation(server_app=server, client_app=client_app, num_supernodes=config.task.num_devices)
    return raised[0] if raised else None
