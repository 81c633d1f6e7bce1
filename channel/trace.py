"""Recorded channels: replay per-round availability and gains instead of simulating a cell.

A channel trace is an ``.npz`` file (``numpy.savez``) holding exactly two arrays of shape
``[R, V]`` (R rounds, V devices):

``available`` (bool)
    Whether device v is available in round j (row ``j - 1`` for round j, 1-based).
``gain_lin`` (float)
    Its average channel gain H̄ (linear power ratio, ``10^(-(PL + X)/10)``), finite and
    ``>= 0``; 0 makes the device infeasible. An unavailable device's gain is never used by a
    scheduler (write 0 if unknown).

:class:`TraceReplay` replays a trace with the interface of :class:`channel.Cell`
(``draw_round(model_bits) -> RoundDraw``): availability and gain come from the file; the minimum
bandwidth B* is recomputed every round by :func:`channel.bandwidth.min_bandwidth_hz` (paper eq.
(lambert)) from the run's D_w, deadline, transmit power and noise, so one trace serves any model
size and radio settings (docs/design.md, "Channel traces"). A trace holds no geometry: the
draws' ``los`` and ``distance_2d_m`` are ``None``.

:func:`write_trace` writes a trace from arrays, :func:`record_cell_trace` records R rounds of a
simulated :class:`channel.Cell` (to edit a simulated drop, or to check that a replay equals the
simulation), :func:`load_trace` reads and validates one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from channel.arrays import BoolArray, FloatArray
from channel.cell import Cell, CellConfig, RoundDraw, checked_model_bits
from channel.npz import ZIP_MAGIC, npz_headers

#: Names of the arrays of a trace file, in the order they are written.
TRACE_ARRAYS: tuple[str, str] = ("available", "gain_lin")

#: What a trace file must be, for error messages.
TRACE_FORMAT = (
    "an .npz file with exactly the arrays available[R, V] (bool) and gain_lin[R, V] (float, "
    "finite, >= 0)"
)

#: First bytes of a zip archive (an .npz is one) and of a single .npy array.
_ZIP_MAGIC = ZIP_MAGIC
_NPY_MAGIC = b"\x93NUMPY"

#: Largest trace read (bytes of both arrays as declared by their headers): 512 MiB, e.g.
#: 10^6 rounds x 59 devices or 10^4 rounds x 5,900 devices as bool and float64. Loading keeps
#: a float64 / bool copy, so a trace costs at most about twice this in memory.
MAX_TRACE_BYTES = 512 * 2**20

#: D_w passed to :meth:`channel.Cell.draw_round` while recording: availability and gains do not
#: depend on it, and B* is not recorded (it is recomputed from the gains when replayed).
_RECORDING_MODEL_BITS = 1.0


class TraceError(ValueError):
    """A channel trace that cannot be replayed.

    Parameters
    ----------
    reason : str
        Why, in one line, without the file name (kept as :attr:`reason` so that a caller can
        name the file its own way, e.g. by the run-config key).
    path : str or os.PathLike, optional
        The trace file, prefixed to the message when given.

    """

    def __init__(self, reason: str, path: str | os.PathLike[str] | None = None) -> None:
        self.reason = reason
        where = "channel trace" if path is None else f"channel trace file '{path}'"
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class ChannelTrace:
    """A validated channel trace: availability and average gain of V devices over R rounds.

    Attributes
    ----------
    available : numpy.ndarray of bool, shape ``(R, V)``
        ``available[j - 1, v]``: device v is available in round j.
    gain_lin : numpy.ndarray of float64, shape ``(R, V)``
        ``gain_lin[j - 1, v]``: average channel gain H̄_v of round j (linear), finite, ``>= 0``.

    Raises
    ------
    TraceError
        On a wrong dtype (``available`` must be bool, ``gain_lin`` a float type), shape (both
        2-D, equal, at least one round and one device) or value (gain not finite or ``< 0``).

    """

    available: BoolArray
    gain_lin: FloatArray

    def __post_init__(self) -> None:
        """Check dtypes, shapes and gains; keep read-only float64 / bool copies."""
        available = np.asarray(self.available)
        gain = np.asarray(self.gain_lin)
        if available.dtype != np.bool_:
            raise TraceError(f"array available has dtype {available.dtype}; must be bool")
        if gain.dtype.kind != "f":
            raise TraceError(f"array gain_lin has dtype {gain.dtype}; must be a float type")
        for name, array in (("available", available), ("gain_lin", gain)):
            if array.ndim != 2 or 0 in array.shape:
                raise TraceError(
                    f"array {name} has shape {array.shape}; must be 2-D [R, V] with R >= 1 "
                    "rounds and V >= 1 devices"
                )
        if gain.shape != available.shape:
            raise TraceError(
                f"array gain_lin has shape {gain.shape}, available {available.shape}; both "
                "must be [R, V]"
            )
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

    The headers must declare exactly ``available`` (bool) and ``gain_lin`` (a float type),
    both 2-D of the same non-empty shape, of at most :data:`MAX_TRACE_BYTES` together.

    Raises
    ------
    TraceError
        One line naming the file.

    """
    file, must = Path(path), f"must be {TRACE_FORMAT}"
    if not file.exists():
        raise TraceError(f"no such file; {must}", path)
    if not file.is_file():
        raise TraceError(f"is not a file; {must}", path)
    try:
        with open(file, "rb") as handle:
            magic = handle.read(len(_NPY_MAGIC))
    except OSError as err:
        raise TraceError(f"cannot be read ({_first_line(err)}); {must}", path) from err
    if magic == _NPY_MAGIC:
        raise TraceError(f"is a single .npy array, not an .npz archive; {must}", path)
    if not magic.startswith(_ZIP_MAGIC):  # never let np.load fall back to other formats
        raise TraceError(f"is not an .npz archive (no zip header); {must}", path)
    try:
        headers = npz_headers(file)
    except (OSError, ValueError) as err:
        raise TraceError(f"{_first_line(err)}; {must}", path) from err
    names = sorted(headers)
    if names != sorted(TRACE_ARRAYS):
        raise TraceError(f"holds the arrays {names}; {must}", path)
    available, gain = headers["available"], headers["gain_lin"]
    if available.dtype != np.bool_:
        raise TraceError(f"array available has dtype {available.dtype}; must be bool", path)
    if gain.dtype.kind != "f":
        raise TraceError(f"array gain_lin has dtype {gain.dtype}; must be a float type", path)
    for name, header in (("available", available), ("gain_lin", gain)):
        if len(header.shape) != 2 or 0 in header.shape:
            raise TraceError(
                f"array {name} has shape {header.shape}; must be 2-D [R, V] with R >= 1 "
                "rounds and V >= 1 devices",
                path,
            )
    if gain.shape != available.shape:
        raise TraceError(
            f"array gain_lin has shape {gain.shape}, available {available.shape}; both must "
            "be [R, V]",
            path,
        )
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
    """Read and validate a trace file (see the module docstring for the format).

    The arrays' headers are checked first (:func:`trace_shape`: names, dtypes, shapes, at most
    :data:`MAX_TRACE_BYTES`), so no data is read from a file that declares anything else.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file.

    Returns
    -------
    ChannelTrace

    Raises
    ------
    TraceError
        One line naming the file: missing, a folder, not an ``.npz`` archive, other arrays
        than ``available`` and ``gain_lin``, arrays too large, or arrays that
        :class:`ChannelTrace` refuses.

    """
    file, must = Path(path), f"must be {TRACE_FORMAT}"
    trace_shape(file)
    unreadable = (OSError, ValueError, EOFError, zipfile.BadZipFile)
    try:
        loaded = np.load(file, allow_pickle=False)
    except unreadable as err:
        raise TraceError(f"cannot be read ({_first_line(err)}); {must}", path) from err
    with loaded as archive:
        names = sorted(archive.files)
        if names != sorted(TRACE_ARRAYS):
            raise TraceError(f"holds the arrays {names}; {must}", path)
        try:
            arrays = {name: archive[name] for name in TRACE_ARRAYS}
        except unreadable as err:
            raise TraceError(f"cannot be read ({_first_line(err)}); {must}", path) from err
    try:
        return ChannelTrace(available=arrays["available"], gain_lin=arrays["gain_lin"])
    except TraceError as err:
        raise TraceError(err.reason, path) from err


def _first_line(err: BaseException) -> str:
    """The first line of an exception's message, or its type when it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def write_trace(
    path: str | os.PathLike[str], available: npt.ArrayLike, gain_lin: npt.ArrayLike
) -> ChannelTrace:
    """Validate ``available`` and ``gain_lin`` and write them as a trace file at ``path``.

    The file is written under exactly ``path`` (``numpy.savez`` would append ``.npz`` to a
    name without it) through a temporary file created exclusively in its folder and renamed
    over it.

    Parameters
    ----------
    path : str or os.PathLike
        Where to write (conventionally ending in ``.npz``).
    available : array_like of bool, shape ``(R, V)``
        Availability per round and device.
    gain_lin : array_like of float, shape ``(R, V)``
        Average channel gain H̄ per round and device (linear), finite, ``>= 0``.

    Returns
    -------
    ChannelTrace
        What was written.

    Raises
    ------
    TraceError
        When :class:`ChannelTrace` refuses the arrays (nothing is written).

    """
    trace = ChannelTrace(available=np.asarray(available), gain_lin=np.asarray(gain_lin))
    file = Path(path)
    fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".tmp")
    try:  # created exclusively under a new name: never through a link planted in the folder
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, available=trace.available, gain_lin=trace.gain_lin)
        os.chmod(tmp, 0o644)
        os.replace(tmp, file)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return trace


def record_cell_trace(path: str | os.PathLike[str], cell: Cell, num_rounds: int) -> ChannelTrace:
    """Draw ``num_rounds`` rounds of ``cell`` and write their availability and gains to ``path``.

    Advances ``cell``'s generator exactly as ``num_rounds`` rounds of a run do, so a cell built
    as a run builds it (the run's seed stream) gives the trace that run would draw.

    Parameters
    ----------
    path : str or os.PathLike
        Trace file to write.
    cell : Cell
        The simulated cell (its next ``num_rounds`` draws are recorded).
    num_rounds : int
        R, ``>= 1``.

    Returns
    -------
    ChannelTrace
        What was written.

    """
    if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 1:
        raise ValueError(f"num_rounds must be an integer >= 1, got {num_rounds!r}")
    draws = [cell.draw_round(_RECORDING_MODEL_BITS) for _ in range(num_rounds)]
    return write_trace(
        path,
        np.stack([draw.available for draw in draws]),
        np.stack([draw.gain_lin for draw in draws]),
    )


class TraceReplay:
    """Replay a :class:`ChannelTrace` round by round, with the interface of :class:`Cell`.

    The k-th call of :meth:`draw_round` returns row ``first_round + k - 1`` (0-based), i.e.
    round ``first_round + k`` of the run; B* is recomputed from the row's gains (docs/design.md,
    "Channel traces").

    Parameters
    ----------
    trace : ChannelTrace
        The recorded rounds; its V must equal ``config.num_devices``.
    config : CellConfig
        The run's channel settings; only ``deadline_s``, ``tx_power_w`` and
        ``noise_psd_w_per_hz`` are used (for B*).
    first_round : int
        Rounds already run (0 for a new run, the checkpoint's round when resuming), in
        ``[0, trace.num_rounds]``.

    """

    def __init__(self, trace: ChannelTrace, config: CellConfig, first_round: int = 0) -> None:
        if not isinstance(trace, ChannelTrace):
            raise ValueError(f"trace must be a ChannelTrace, got {type(trace).__name__}")
        if not isinstance(config, CellConfig):
            raise ValueError(f"config must be a CellConfig, got {type(config).__name__}")
        if trace.num_devices != config.num_devices:
            raise ValueError(
                f"the trace has {trace.num_devices} devices (columns); the cell has "
                f"{config.num_devices}"
            )
        if (
            isinstance(first_round, bool)
            or not isinstance(first_round, int | np.integer)
            or not 0 <= first_round <= trace.num_rounds
        ):
            raise ValueError(
                f"first_round must be an integer in [0, {trace.num_rounds}] (the trace's "
                f"rounds), got {first_round!r}"
            )
        self.trace = trace
        self.config = config
        self._next_row = int(first_round)

    @property
    def num_devices(self) -> int:
        """Number of devices V."""
        return self.trace.num_devices

    @property
    def rounds_replayed(self) -> int:
        """Rounds of the run drawn so far (including the ``first_round`` skipped ones)."""
        return self._next_row

    def draw_round(self, model_bits: float) -> RoundDraw:
        """Return the next recorded round, with B* for an upload of ``model_bits`` bits.

        Parameters
        ----------
        model_bits : float
            Model size D_w in bits, ``> 0``.

        Returns
        -------
        RoundDraw
            Recorded availability and gain, B* from paper eq. (lambert) (``+inf`` =
            infeasible); ``los`` and ``distance_2d_m`` are ``None`` (not recorded).

        Raises
        ------
        ValueError
            When every recorded round has been replayed, or ``model_bits`` is not ``> 0``.

        """
        bits = checked_model_bits(model_bits)
        row = self._next_row
        if row >= self.trace.num_rounds:
            raise ValueError(
                f"the channel trace has {self.trace.num_rounds} rounds; round {row + 1} was "
                "asked for (record at least num-server-rounds rounds)"
            )
        gain = self.trace.gain_lin[row]
        bandwidth = self.config.min_bandwidth_hz(bits, gain)  # the cell's own B* rule
        self._next_row = row + 1
        return RoundDraw(
            available=self.trace.available[row].copy(),
            gain_lin=gain.copy(),
            min_bandwidth_hz=bandwidth,
        )
