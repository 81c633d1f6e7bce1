"""The run's uplink: the UMi cell, or a channel trace (docs/design.md, "Channel traces")."""

from __future__ import annotations

import numpy as np

from channel import Cell, ChannelTrace, TraceError, TraceReplay, load_trace
from channel.trace import trace_shape
from server_app.config import RunConfig

#: The run-config key of the trace, as the errors name it.
TRACE_KEY = "channel.trace"


def check_channel_trace(config: RunConfig) -> ChannelTrace | None:
    """Read the run's channel trace and check that it covers the run; None without a trace.

    Raises
    ------
    ValueError
        One line naming ``channel.trace``, the file and what is wrong (not a valid trace, V other
        than ``num-devices``, R below ``num-server-rounds``).
    """
    path = config.channel_trace
    if not path:
        return None
    key = f"run-config key '{TRACE_KEY}' = '{path}'"
    try:  # the arrays' headers first: a trace that cannot cover the run is not read at all
        rounds, devices = trace_shape(path)
        if devices != config.task.num_devices:
            raise ValueError(
                f"{key}: the trace has V = {devices} devices (columns of available and "
                f"gain_lin); must equal num-devices = {config.task.num_devices}"
            )
        if rounds < config.num_server_rounds:
            raise ValueError(
                f"{key}: the trace has R = {rounds} rounds (rows); must be >= "
                f"num-server-rounds = {config.num_server_rounds}"
            )
        return load_trace(path)
    except TraceError as err:
        raise ValueError(f"{key}: {err.reason}") from err


def build_uplink(
    config: RunConfig, cell_rng: np.random.Generator, first_round: int
) -> Cell | TraceReplay:
    """The run's uplink model: ``Cell(config.cell, cell_rng)``, or the replay of ``channel.trace``.

    ``first_round`` (rounds already run) is the row a replay continues at; a cell's generator state
    is restored from the checkpoint instead.

    Raises
    ------
    ValueError
        A trace that does not cover the run (:func:`check_channel_trace`).
    """
    trace = check_channel_trace(config)
    if trace is None:
        return Cell(config.cell, cell_rng)
    return TraceReplay(trace, config.cell, first_round=first_round)
