"""Recorded channels: replay per-round availability and gains instead of simulating a cell.

A trace is an ``.npz`` file holding exactly ``available`` (bool) and ``gain_lin`` (float,
linear H̄, finite, ``>= 0``), both ``[R, V]``; row ``j - 1`` is round j. B* is recomputed from the
gains every round (docs/design.md, "Channel traces"; docs/bring-your-own.md, "Your own channel").
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from channel.arrays import BoolArray, FloatArray
from channel.cell import Cell, CellConfig, RoundDraw
from fedcgd_task.imports import first_line
from fedcgd_task.npz import ArrayHeader, npz_headers

#: Names of the arrays of a trace file, in the order they are written.
TRACE_ARRAYS: tuple[str, str] = ("available", "gain_lin")

#: What a trace file must be, for error messages.
TRACE_FORMAT = (
    "an .npz file with exactly the arrays available[R, V] (bool) and gain_lin[R, V] (float, "
    "finite, >= 0)"
)

#: Largest trace read (both arrays, as their headers declare), e.g. 10^6 rounds x 59 devices.
MAX_TRACE_BYTES = 512 * 2**20


class TraceError(ValueError):
    """A channel trace that cannot be replayed.

    ``reason`` (one line, without the file name) is kept as :attr:`reason` so that a caller can
    name the file its own way; ``path``, when given, prefixes the message.
    """

    def __init__(self, reason: str, path: str | os.PathLike[str] | None = None) -> None:
        self.reason = reason
        where = "channel trace" if path is None else f"channel trace file '{path}'"
        super().__init__(f"{where}: {reason}")


def _layout_problem(
    available: ArrayHeader | np.ndarray, gain: ArrayHeader | np.ndarray
) -> str | None:
    """Why two arrays (or their headers) are not a trace; None when they are one."""
    if available.dtype != np.bool_:
        return f"array available has dtype {available.dtype}; must be bool"
    if gain.dtype.kind != "f":
        return f"array gain_lin has dtype {gain.dtype}; must be a float type"
    for name, shape in (("available", available.shape), ("gain_lin", gain.shape)):
        if len(shape) != 2 or 0 in shape:
            return (
                f"array {name} has shape {shape}; must be 2-D [R, V] with R >= 1 rounds and "
                "V >= 1 devices"
            )
    if gain.shape != available.shape:
        shapes = f"gain_lin has shape {gain.shape}, available {available.shape}"
        return f"array {shapes}; both must be [R, V]"
    return None


@dataclass(frozen=True)
class ChannelTrace:
    """A validated channel trace: availability and average gain of V devices over R rounds.

    ``available[j - 1, v]`` (bool ``(R, V)``): device v is available in round j;
    ``gain_lin[j - 1, v]`` (float64 ``(R, V)``): its average channel gain H̄_v (linear), finite,
    ``>= 0``. Raises TraceError on a wrong dtype, shape (2-D, equal, non-empty) or gain.
    """

    available: BoolArray
    gain_lin: FloatArray

    def __post_init__(self) -> None:
        """Check dtypes, shapes and gains; keep read-only float64 / bool copies."""
        available = np.asarray(self.available)
        gain = np.asarray(self.gain_lin)
        problem = _layout_problem(available, gain)
        if problem is not None:
            raise TraceError(problem)
        bad = ~(np.isfinite(gain) & (gain >= 0.0))
        if np.any(bad):
            row, column = (int(i) for i in np.argwhere(bad)[0])
            value = float(gain[row, column])
            raise TraceError(
                f"gain_lin[{row}, {column}] = {value!r} ({np.count_nonzero(bad)} such values); "
                "every gain must be finite and >= 0"
            )
        for name, array, dtype in (
            ("available", available, np.bool_),
            ("gain_lin", gain, np.float64),
        ):
            copy = np.array(array, dtype=dtype)  # float16/32 widen exactly to float64
            copy.setflags(write=False)
            object.__setattr__(self, name, copy)

    @property
    def num_rounds(self) -> int:
        """Number of recorded rounds R (rows)."""
        return int(self.available.shape[0])

    @property
    def num_devices(self) -> int:
        """Number of devices V (columns)."""
        return int(self.available.shape[1])


def trace_shape(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(R, V) of a trace file, from its arrays' headers only (no data is read).

    Raises :class:`TraceError` (one line naming the file) unless the headers declare exactly
    ``available`` (bool) and ``gain_lin`` (float), 2-D of one non-empty shape, of at most
    :data:`MAX_TRACE_BYTES` together.
    """
    file, must = Path(path), f"must be {TRACE_FORMAT}"
    if not file.exists():
        raise TraceError(f"no such file; {must}", path)
    if not file.is_file():
        raise TraceError(f"is not a file; {must}", path)
    try:
        headers = npz_headers(file)
    except OSError as err:
        raise TraceError(f"cannot be read ({first_line(err)}); {must}", path) from err
    except ValueError as err:
        raise TraceError(f"{first_line(err)}; {must}", path) from err
    names = sorted(headers)
    if names != sorted(TRACE_ARRAYS):
        raise TraceError(f"holds the arrays {names}; {must}", path)
    available, gain = headers["available"], headers["gain_lin"]
    problem = _layout_problem(available, gain)
    if problem is not None:
        raise TraceError(problem, path)
    total = available.nbytes + gain.nbytes
    if total > MAX_TRACE_BYTES:
        raise TraceError(
            f"declares arrays of shape {available.shape} ({total} bytes once read), more than "
            f"{MAX_TRACE_BYTES} bytes (R x V <= {MAX_TRACE_BYTES // 9} for bool and float64); "
            "record the rounds and devices the run uses",
            path,
        )
    rounds, devices = available.shape
    return int(rounds), int(devices)


def load_trace(path: str | os.PathLike[str]) -> ChannelTrace:
    """Read and validate a trace file; headers are checked first (:func:`trace_shape`).

    Raises :class:`TraceError`, one line naming the file: missing, a folder, not an ``.npz``
    archive, other arrays, arrays too large, or arrays that :class:`ChannelTrace` refuses.
    """
    trace_shape(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in TRACE_ARRAYS}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        why = f"cannot be read ({first_line(err)}); must be {TRACE_FORMAT}"
        raise TraceError(why, path) from err
    try:
        return ChannelTrace(available=arrays["available"], gain_lin=arrays["gain_lin"])
    except TraceError as err:
        raise TraceError(err.reason, path) from err


def write_trace(
    path: str | os.PathLike[str], available: npt.ArrayLike, gain_lin: npt.ArrayLike
) -> ChannelTrace:
    """Validate ``available`` and ``gain_lin`` (``(R, V)``) and write them as a trace at ``path``.

    Written under exactly ``path`` (``numpy.savez`` would append ``.npz`` to a name), through a
    temporary file of its own and ``os.replace``: a write cut short leaves any earlier trace
    there intact and no temporary file. Raises :class:`TraceError` (nothing written) when
    :class:`ChannelTrace` refuses the arrays.
    """
    trace = ChannelTrace(available=np.asarray(available), gain_lin=np.asarray(gain_lin))
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            np.savez(out, available=trace.available, gain_lin=trace.gain_lin)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return trace


def record_cell_trace(path: str | os.PathLike[str], cell: Cell, num_rounds: int) -> ChannelTrace:
    """Draw ``num_rounds`` rounds of ``cell`` and write their availability and gains to ``path``.

    Advances ``cell``'s generator exactly as ``num_rounds`` rounds of a run do, so a cell seeded
    as a run seeds it gives the trace that run would draw.
    """
    draws = [cell.draw_round(1.0) for _ in range(num_rounds)]  # B* (of any D_w) is not recorded
    return write_trace(
        path,
        np.stack([draw.available for draw in draws]),
        np.stack([draw.gain_lin for draw in draws]),
    )


class TraceReplay:
    """Replay a :class:`ChannelTrace` round by round, with the interface of :class:`Cell`.

    The trace's V must equal ``config.num_devices``; of the run's channel settings only those of
    B* are used. ``first_round``: rounds already run (0 for a new run, the checkpoint's round
    when resuming).
    """

    def __init__(self, trace: ChannelTrace, config: CellConfig, first_round: int = 0) -> None:
        if trace.num_devices != config.num_devices:
            raise ValueError(
                f"the trace has {trace.num_devices} devices (columns); the cell has "
                f"{config.num_devices}"
            )
        if not 0 <= first_round <= trace.num_rounds:
            raise ValueError(
                f"first_round must be an integer in [0, {trace.num_rounds}] (the trace's "
                f"rounds), got {first_round!r}"
            )
        self.trace = trace
        self.config = config
        self._next_row = int(first_round)

    def draw_round(self, model_bits: float) -> RoundDraw:
        """Return the next recorded round, with B* (paper eq. (lambert)) for ``model_bits`` bits.

        ``los`` and ``distance_2d_m`` are ``None``. Raises ValueError when every recorded round has
        been replayed.
        """
        row = self._next_row
        if row >= self.trace.num_rounds:
            raise ValueError(
                f"the channel trace has {self.trace.num_rounds} rounds; round {row + 1} was "
                "asked for (record at least num-server-rounds rounds)"
            )
        gain = self.trace.gain_lin[row]
        bandwidth = self.config.min_bandwidth_hz(model_bits, gain)  # the cell's own B* rule
        self._next_row = row + 1
        return RoundDraw(
            available=self.trace.available[row].copy(),
            gain_lin=gain.copy(),
            min_bandwidth_hz=bandwidth,
        )
