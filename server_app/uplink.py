"""The run's uplink: the simulated UMi cell, or a recorded channel trace (``channel.trace``).

:func:`build_uplink` is what the ServerApp draws each round's channel from; both kinds have
``draw_round(model_bits) -> RoundDraw``. :func:`check_channel_trace` reads and checks a trace
file against the run (also before the start, :func:`experiments.run.preflight.check_before_start`),
with one-line errors naming the run-config key (docs/design.md, "Channel traces").
"""

from __future__ import annotations

import numpy as np

from channel import Cell, ChannelTrace, TraceError, TraceReplay, load_trace
from channel.trace import trace_shape
from server_app.config import RunConfig

#: The run-config key of the trace, as the errors name it.
TRACE_KEY = "channel.trace"


def check_channel_trace(config: RunConfig) -> ChannelTrace | None:
    """Read the run's channel trace and check that it covers the run.

    Parameters
    ----------
    config : RunConfig
        The validated run config (``channel_trace`` is ``""`` or an absolute path).

    Returns
    -------
    ChannelTrace or None
        The trace, or None when the run simulates the cell (``channel.trace = ""``).

    Raises
    ------
    ValueError
        One line naming ``channel.trace``, the file and what is wrong: not a readable ``.npz``
        with exactly ``available`` (bool) and ``gain_lin`` (float, finite, ``>= 0``) of shape
        ``[R, V]``, V other than ``num-devices``, or R below ``num-server-rounds``.

    """
    path = config.channel_trace
    if not path:
        return None
    key = f"run-config key '{TRACE_KEY}' = '{path}'"
    try:  # the arrays' headers first: a trace that cannot cover the run is not read at all
        rounds, devices = trace_shape(path)
    except TraceError as err:
        raise ValueError(f"{key}: {err.reason}") from err
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
    try:
        return load_trace(path)
    except TraceError as err:
        raise ValueError(f"{key}: {err.reason}") from err


def build_uplink(
    config: RunConfig, cell_rng: np.random.Generator, first_round: int
) -> Cell | TraceReplay:
    """The run's uplink model: the UMi cell, or the replay of ``channel.trace``.

    Parameters
    ----------
    config : RunConfig
        The validated run config.
    cell_rng : numpy.random.Generator
        The cell's generator (the drop and every round's draws); a trace replay does not use it.
    first_round : int
        Rounds already run: 0 for a new run, the checkpoint's round when resuming. A replay
        continues at that row; a cell ignores it (its generator's state is restored from the
        checkpoint instead).

    Returns
    -------
    Cell or TraceReplay
        ``Cell(config.cell, cell_rng)`` (the drop: a pure function of the seed), or a
        :class:`channel.TraceReplay` of the checked trace starting at ``first_round``.

    Raises
    ------
    ValueError
        A trace that does not cover the run (:func:`check_channel_trace`).

    """
    trace = check_channel_trace(config)
    if trace is None:
        return Cell(config.cell, cell_rng)
    return TraceReplay(trace, config.cell, first_round=first_round)
