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
from fedcgd_config.imports import first_line
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
    """A channel trace that cannot be replayed; :attr:`reason` is the line without the file."""

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
    """A checked trace (TraceError): ``available`` (bool) and ``gain_lin`` (H̄_v, float64, finite,
    >= 0) of shape (R, V), row j - 1 for round j; kept as read-only copies."""  # noqa: D205, D209

    available: BoolArray
    gain_lin: FloatArray

    def __post_init__(self) -> None:
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
        """R, the recorded rounds."""
        return int(self.available.shape[0])

    @property
    def num_devices(self) -> int:
        """V, the devices."""
        return int(self.available.shape[1])


def trace_shape(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(R, V) of a trace file from its arrays' headers alone: exactly the two arrays, their dtypes,
    one 2-D shape, at most :data:`MAX_TRACE_BYTES` (else TraceError naming the file)."""  # noqa: D205, D209
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
    """Read a trace file, its headers checked first (:func:`trace_shape`); TraceError, one line."""
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
    """Write a checked trace at exactly ``path`` by a temporary file and ``os.replace`` (a write
    cut short leaves the earlier file and no temporary one); TraceError: nothing written."""  # noqa: D205, D209
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
    """Write ``num_rounds`` rounds of ``cell`` as a trace; its generator advances as in a run."""
    draws = [cell.draw_round(1.0) for _ in range(num_rounds)]  # B* (of any D_w) is not recorded
    return write_trace(
        path,
        np.stack([draw.available for draw in draws]),
        np.stack([draw.gain_lin for draw in draws]),
    )


class TraceReplay:
    """A :class:`ChannelTrace` replayed from ``first_round`` (rounds already run), B* from the
    cell's settings (V and R checked by the run: server_app/setup.py)."""  # noqa: D205, D209

    def __init__(self, trace: ChannelTrace, config: CellConfig, first_round: int = 0) -> None:
        self.trace = trace
        self.config = config
        self._next_row = int(first_round)

    def draw_round(self, model_bits: float) -> RoundDraw:
        """The next recorded round with B* (paper eq. (lambert)); ValueError past the last."""
        row = self._next_row
        if not 0 <= row < self.trace.num_rounds:
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
