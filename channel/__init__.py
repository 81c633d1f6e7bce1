"""The uplink of a UMi-Street Canyon cell (TR 38.901), pure numpy + scipy: path loss,
shadowing, the FDMA rate and B* (paper eq. (lambert)), a :class:`Cell` drawing each round's
channel, or a :class:`TraceReplay` of a recorded one. Units in the names (Hz, m, W, dBm).
"""  # noqa: D205

from channel.bandwidth import count_fit_cheapest_first as count_fit_cheapest_first
from channel.bandwidth import min_bandwidth_hz as min_bandwidth_hz
from channel.bandwidth import rate_bps as rate_bps
from channel.cell import Cell as Cell
from channel.cell import CellConfig as CellConfig
from channel.cell import ChannelModel as ChannelModel
from channel.cell import RoundDraw as RoundDraw
from channel.pathloss import db_to_linear as db_to_linear
from channel.pathloss import dbm_to_w as dbm_to_w
from channel.pathloss import los_probability as los_probability
from channel.pathloss import pathloss_db as pathloss_db
from channel.pathloss import shadow_fading_std_db as shadow_fading_std_db
from channel.trace import ChannelTrace as ChannelTrace
from channel.trace import TraceError as TraceError
from channel.trace import TraceReplay as TraceReplay
from channel.trace import load_trace as load_trace
from channel.trace import record_cell_trace as record_cell_trace
