"""Uplink channel of a UMi-Street Canyon cell for wireless federated learning.

Pure numpy + scipy (no Flower, no torch): LOS probability and path loss of TR 38.901
(Tables 7.4.2-1 and 7.4.1-1), log-normal shadowing, the FDMA rate and the minimum bandwidth
of the paper's eq. (lambert), and a :class:`Cell` that drops devices and draws each round's
channel (or a :class:`TraceReplay` that replays a recorded one, :mod:`channel.trace`).
Frequencies are in Hz, distances in m, powers in W (or dBm where named).
"""

from channel.bandwidth import count_fit_cheapest_first, min_bandwidth_hz, rate_bps
from channel.cell import Cell, CellConfig, ChannelModel, RoundDraw
from channel.pathloss import (
    db_to_linear,
    dbm_to_w,
    los_probability,
    pathloss_db,
    shadow_fading_std_db,
)
from channel.trace import ChannelTrace, TraceError, TraceReplay, load_trace, record_cell_trace

__all__ = [
    "Cell",
    "CellConfig",
    "ChannelModel",
    "ChannelTrace",
    "RoundDraw",
    "TraceError",
    "TraceReplay",
    "count_fit_cheapest_first",
    "db_to_linear",
    "dbm_to_w",
    "load_trace",
    "los_probability",
    "min_bandwidth_hz",
    "pathloss_db",
    "rate_bps",
    "record_cell_trace",
    "shadow_fading_std_db",
]
