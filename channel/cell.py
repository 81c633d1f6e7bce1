"""A single cell of the wireless FL system: device drop and per-round channel draws.

Paper Section V-A with the decisions of docs/design.md, "Device drop": V devices are dropped once,
uniformly over the area of the annulus ``min_distance_m <= d2D <= radius_m`` around the base
station; every round each device is available with probability ``p_a``, draws its LOS state
(Bernoulli with ``P_LOS(d2D)``, TR 38.901 Table 7.4.2-1) and log-normal shadow fading (σ_SF of its
state), which give its average channel gain ``H̄_v`` and its minimum bandwidth ``B*_v`` (paper eq.
(lambert)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from channel.arrays import BoolArray, FloatArray
from channel.bandwidth import min_bandwidth_hz
from channel.los import los_probability
from channel.pathloss import (
    EFFECTIVE_ENVIRONMENT_HEIGHT_M,
    PATHLOSS_MODELS,
    pathloss_db,
    shadow_fading_std_db,
)
from channel.units import db_to_linear, dbm_to_w

MIN_CARRIER_FREQUENCY_HZ: float = 0.5e9
"""Lower end of the frequency range of TR 38.901's UMi path-loss models (0.5-100 GHz)."""

MAX_CARRIER_FREQUENCY_HZ: float = 100e9
"""Upper end of the frequency range of TR 38.901's UMi path-loss models (0.5-100 GHz)."""


#: Largest cell radius: TR 38.901 gives the UMi path loss for d2D up to 5 km.
MAX_RADIUS_M = 5_000.0

#: Largest antenna height accepted (a mast, not a satellite).
MAX_HEIGHT_M = 1_000.0

#: Ranges of the logarithmic settings: wide enough for any radio, narrow enough that the powers
#: in W stay finite and non-zero (the rate formula divides by the noise power).
DB_RANGES: dict[str, tuple[float, float]] = {
    "tx_power_dbm": (-100.0, 100.0),
    "noise_psd_dbm_per_hz": (-300.0, 0.0),
    "noise_figure_db": (0.0, 100.0),
}


@dataclass(frozen=True)
class CellConfig:
    """Validated settings of a cell; defaults are the paper's Table I (CIFAR-10 deadline).

    Attributes
    ----------
    num_devices : int
        Number of devices V (paper: 64), ``>= 1``.
    radius_m : float
        Cell radius in m (paper: 250), ``> min_distance_m``.
    min_distance_m : float
        Smallest horizontal device distance in m (10, TR 38.901's lower validity bound), ``>= 0``.
    h_bs_m, h_ut_m : float
        Base-station and device antenna heights in m (10 and 1.5), ``> 0`` (``> 1`` for the
        ``"tr38901"`` model, whose breakpoint uses ``h - 1 m``).
    carrier_frequency_hz : float
        Carrier frequency in Hz (3.5 GHz, Table I), within TR 38.901's 0.5-100 GHz.
    pathloss_model : str
        ``"paper"`` or ``"tr38901"`` (see :mod:`channel.pathloss`).
    availability_prob : float
        Probability p_a that a device is available in a round (0.3), in [0, 1].
    tx_power_dbm : float
        Device transmit power S in dBm (23).
    noise_psd_dbm_per_hz : float
        Thermal noise power spectral density in dBm/Hz (-174).
    noise_figure_db : float
        Receiver noise figure in dB (6), ``>= 0``; added to the noise PSD.
    total_bandwidth_hz : float
        Total uplink bandwidth B in Hz (20 MHz), ``> 0``.
    deadline_s : float
        Upload deadline d_cm in s (2 s for CIFAR-10, 120 s for CIFAR-100), ``> 0``.
    redraw_los_each_round : bool
        Redraw the LOS states every round (True) or draw them once at construction.
    redraw_shadowing_each_round : bool
        Redraw the shadow fading every round (True) or draw it once at construction.

    """

    num_devices: int = 64
    radius_m: float = 250.0
    min_distance_m: float = 10.0
    h_bs_m: float = 10.0
    h_ut_m: float = 1.5
    carrier_frequency_hz: float = 3.5e9
    pathloss_model: str = "paper"
    availability_prob: float = 0.3
    tx_power_dbm: float = 23.0
    noise_psd_dbm_per_hz: float = -174.0
    noise_figure_db: float = 6.0
    total_bandwidth_hz: float = 20e6
    deadline_s: float = 2.0
    redraw_los_each_round: bool = True
    redraw_shadowing_each_round: bool = True

    def __post_init__(self) -> None:
        """Check every field; raise ValueError naming the field, its value and the allowed range."""
        for field in fields(self):
            value = getattr(self, field.name)
            # The type of each field's default tells what the field holds.
            if isinstance(field.default, bool) and not isinstance(value, bool):
                self._fail(field.name, value, "a bool (True or False)")
            if isinstance(field.default, str) and not isinstance(value, str):
                self._fail(field.name, value, f"one of {PATHLOSS_MODELS}")
            if isinstance(field.default, float):
                object.__setattr__(self, field.name, self._finite_float(field.name, value))
        if isinstance(self.num_devices, bool) or not isinstance(self.num_devices, int | np.integer):
            self._fail("num_devices", self.num_devices, "an integer >= 1")
        object.__setattr__(self, "num_devices", int(self.num_devices))
        if self.num_devices < 1:
            self._fail("num_devices", self.num_devices, "an integer >= 1")
        if self.pathloss_model not in PATHLOSS_MODELS:
            self._fail("pathloss_model", self.pathloss_model, f"one of {PATHLOSS_MODELS}")
        if self.min_distance_m < 0.0:
            self._fail("min_distance_m", self.min_distance_m, ">= 0 m")
        if not self.min_distance_m < self.radius_m <= MAX_RADIUS_M:
            self._fail(
                "radius_m",
                self.radius_m,
                f"in (min_distance_m = {self.min_distance_m}, {MAX_RADIUS_M:g}] m (TR 38.901 "
                "UMi validity range of d2D)",
            )
        min_height_m = EFFECTIVE_ENVIRONMENT_HEIGHT_M if self.pathloss_model == "tr38901" else 0.0
        for name in ("h_bs_m", "h_ut_m"):
            if not getattr(self, name) > min_height_m:
                why = f" (pathloss_model {self.pathloss_model!r})" if min_height_m else ""
                self._fail(name, getattr(self, name), f"> {min_height_m} m{why}")
        if self.min_distance_m == 0.0 and self.h_bs_m == self.h_ut_m:
            self._fail("h_ut_m", self.h_ut_m, "!= h_bs_m when min_distance_m = 0 (zero distance)")
        if not MIN_CARRIER_FREQUENCY_HZ <= self.carrier_frequency_hz <= MAX_CARRIER_FREQUENCY_HZ:
            self._fail(
                "carrier_frequency_hz",
                self.carrier_frequency_hz,
                f"in [{MIN_CARRIER_FREQUENCY_HZ:g}, {MAX_CARRIER_FREQUENCY_HZ:g}] Hz "
                "(TR 38.901 validity range)",
            )
        if not 0.0 <= self.availability_prob <= 1.0:
            self._fail("availability_prob", self.availability_prob, "in [0, 1]")
        for name, (low, high) in DB_RANGES.items():  # finite, non-zero powers in W
            if not low <= getattr(self, name) <= high:
                self._fail(name, getattr(self, name), f"in [{low:g}, {high:g}]")
        for name in ("h_bs_m", "h_ut_m"):
            if getattr(self, name) > MAX_HEIGHT_M:
                self._fail(name, getattr(self, name), f"<= {MAX_HEIGHT_M:g} m")
        if not self.total_bandwidth_hz > 0.0:
            self._fail("total_bandwidth_hz", self.total_bandwidth_hz, "> 0 Hz")
        if not self.deadline_s > 0.0:
            self._fail("deadline_s", self.deadline_s, "> 0 s")

    @staticmethod
    def _fail(name: str, value: object, allowed: str) -> None:
        raise ValueError(f"CellConfig.{name} = {value!r} is invalid: must be {allowed}")

    @classmethod
    def _finite_float(cls, name: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
            cls._fail(name, value, "a finite number")
        number = float(value)  # type: ignore[arg-type]
        if not math.isfinite(number):
            cls._fail(name, value, "a finite number")
        return number

    @property
    def tx_power_w(self) -> float:
        """Transmit power S in W (``10^((tx_power_dbm - 30)/10)``; 23 dBm = 0.1995 W)."""
        return float(dbm_to_w(self.tx_power_dbm))

    @property
    def noise_psd_w_per_hz(self) -> float:
        """Noise PSD N0 in W/Hz with the noise figure: ``10^((-174 + 6 - 30)/10)`` by default."""
        return float(dbm_to_w(self.noise_psd_dbm_per_hz + self.noise_figure_db))

    def pathloss_db(
        self, distance_2d_m: npt.ArrayLike, los: npt.ArrayLike, model: str | None = None
    ) -> FloatArray:
        """Path loss in dB at ``distance_2d_m`` with this cell's heights and carrier frequency.

        Parameters
        ----------
        distance_2d_m : array_like of float
            Horizontal device distances in m.
        los : array_like of bool
            LOS state per device (same shape).
        model : str, optional
            Path-loss model (:data:`channel.pathloss.PATHLOSS_MODELS`); default
            ``pathloss_model``.

        Returns
        -------
        numpy.ndarray
            :func:`channel.pathloss.pathloss_db` of every device.

        """
        return pathloss_db(
            distance_2d_m,
            los,
            model=self.pathloss_model if model is None else model,
            carrier_frequency_hz=self.carrier_frequency_hz,
            h_bs_m=self.h_bs_m,
            h_ut_m=self.h_ut_m,
        )

    def min_bandwidth_hz(self, model_bits: float, gain_lin: npt.ArrayLike) -> FloatArray:
        """``B*_v`` (paper eq. (lambert)) with this cell's deadline, transmit power and noise.

        Parameters
        ----------
        model_bits : float
            Upload size D_w in bits, ``> 0``.
        gain_lin : array_like of float
            Average channel gain H̄_v of every device (linear).

        Returns
        -------
        numpy.ndarray
            :func:`channel.bandwidth.min_bandwidth_hz` in Hz (``+inf`` = cannot meet the
            deadline).

        """
        return min_bandwidth_hz(
            model_bits, self.deadline_s, self.tx_power_w, gain_lin, self.noise_psd_w_per_hz
        )


@dataclass(frozen=True)
class RoundDraw:
    """The channel of one round, one entry per device (shape ``(V,)`` for every field).

    Fields are computed for every device, available or not; a scheduler must only consider
    ``available`` devices with finite ``min_bandwidth_hz``. Other code may build one directly
    (e.g. an ideal channel: all available, ``min_bandwidth_hz`` 0).

    Attributes
    ----------
    available : numpy.ndarray of bool
        Whether the device is available (finished its local update) this round.
    gain_lin : numpy.ndarray of float
        Average channel gain ``H̄_v = 10^(-(PL + shadowing)/10)`` (linear, dimensionless).
    min_bandwidth_hz : numpy.ndarray of float
        Minimum bandwidth ``B*_v`` in Hz to meet the deadline, ``+inf`` = infeasible.
    los : numpy.ndarray of bool or None
        LOS state of the link this round; ``None`` where the geometry is unknown (a replayed
        channel trace, docs/design.md, "Channel traces"). No scheduler reads it.
    distance_2d_m : numpy.ndarray of float or None
        Horizontal device distance in m; ``None`` where unknown, as ``los``.

    """

    available: BoolArray
    gain_lin: FloatArray
    min_bandwidth_hz: FloatArray
    los: BoolArray | None = None
    distance_2d_m: FloatArray | None = None

    def __post_init__(self) -> None:
        """Convert the fields to numpy arrays and check that they are 1-D of one length."""
        for name, dtype in (
            ("available", np.bool_),
            ("gain_lin", np.float64),
            ("min_bandwidth_hz", np.float64),
            ("los", np.bool_),
            ("distance_2d_m", np.float64),
        ):
            if getattr(self, name) is None:  # only the geometry may be unknown
                if name in ("los", "distance_2d_m"):
                    continue
                raise ValueError(f"RoundDraw.{name} must be an array, got None")
            array = np.asarray(getattr(self, name), dtype=dtype)
            if array.ndim != 1 or array.shape != np.shape(self.available):
                raise ValueError(
                    f"RoundDraw.{name} must be 1-D with the shape of available "
                    f"{np.shape(self.available)}, got shape {array.shape}"
                )
            object.__setattr__(self, name, array)
        if np.any(np.isnan(self.min_bandwidth_hz)) or np.any(self.min_bandwidth_hz < 0.0):
            raise ValueError("RoundDraw.min_bandwidth_hz must be >= 0 or +inf, got NaN or < 0")

    @property
    def num_devices(self) -> int:
        """Number of devices V."""
        return int(self.available.shape[0])

    @property
    def feasible(self) -> BoolArray:
        """Whether the device can meet the deadline at all (finite ``min_bandwidth_hz``)."""
        return np.asarray(np.isfinite(self.min_bandwidth_hz))


def checked_model_bits(model_bits: object) -> float:
    """Return the upload size ``D_w`` as a float, or raise ValueError unless finite and ``> 0``.

    Parameters
    ----------
    model_bits : object
        Model size D_w in bits (int or float, not bool).

    Returns
    -------
    float
        ``D_w`` in bits.

    """
    if isinstance(model_bits, bool) or not (
        isinstance(model_bits, int | float | np.integer | np.floating)
        and math.isfinite(model_bits)
        and model_bits > 0
    ):
        raise ValueError(f"model_bits must be a finite number > 0, got {model_bits!r}")
    return float(model_bits)


def drop_distances_2d_m(
    num_devices: int, min_distance_m: float, radius_m: float, rng: np.random.Generator
) -> tuple[FloatArray, FloatArray]:
    """Drop devices uniformly over the area of an annulus (docs/design.md, "Device drop").

    Inverse CDF of the radius: ``r = sqrt(U (R^2 - r0^2) + r0^2)``, ``U ~ Uniform[0, 1)``, so
    ``P(r <= x) = (x^2 - r0^2) / (R^2 - r0^2)``; the angle is uniform in ``[0, 2 pi)``.

    Parameters
    ----------
    num_devices : int
        Number of devices V.
    min_distance_m, radius_m : float
        Inner radius r0 and outer radius R in m.
    rng : numpy.random.Generator
        Source of randomness (draws V radii, then V angles).

    Returns
    -------
    tuple of numpy.ndarray
        Horizontal distances in m and angles in rad, each of shape ``(V,)``.

    """
    u = rng.random(num_devices)
    distance_m = np.sqrt(u * (radius_m**2 - min_distance_m**2) + min_distance_m**2)
    angle_rad = rng.uniform(0.0, 2.0 * np.pi, num_devices)
    return distance_m, angle_rad


class Cell:
    """A cell with V dropped devices whose uplink channel is redrawn every round.

    Device positions are dropped once, at construction, from ``rng``; each call of
    :meth:`draw_round` draws availability, LOS states (if ``redraw_los_each_round``) and
    shadow fading (if ``redraw_shadowing_each_round``) from the same ``rng``. States that are
    not redrawn are drawn once at construction and kept. Shadowing is stored as a standard
    normal variate per device and scaled by the σ_SF of the device's current LOS state.

    Parameters
    ----------
    config : CellConfig
        Validated cell settings.
    rng : numpy.random.Generator
        The only source of randomness; the same seed gives the same drop and rounds.

    """

    def __init__(self, config: CellConfig, rng: np.random.Generator) -> None:
        if not isinstance(config, CellConfig):
            raise ValueError(f"config must be a CellConfig, got {type(config).__name__}")
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        self.config = config
        self._rng = rng
        self.distance_2d_m, self.angle_rad = drop_distances_2d_m(
            config.num_devices, config.min_distance_m, config.radius_m, rng
        )
        self.los_probability = los_probability(self.distance_2d_m)
        self._fixed_los: BoolArray | None = None
        self._fixed_shadowing_z: FloatArray | None = None
        if not config.redraw_los_each_round:
            self._fixed_los = self._draw_los()
        if not config.redraw_shadowing_each_round:
            self._fixed_shadowing_z = rng.standard_normal(config.num_devices)

    @property
    def num_devices(self) -> int:
        """Number of devices V."""
        return self.config.num_devices

    def _draw_los(self) -> BoolArray:
        """LOS states, Bernoulli with ``P_LOS(d2D)`` (TR 38.901 Table 7.4.2-1), shape ``(V,)``."""
        return np.asarray(self._rng.random(self.num_devices) < self.los_probability)

    def gain_lin(self, los: npt.ArrayLike, shadowing_db: npt.ArrayLike) -> FloatArray:
        """Average channel gain ``H̄_v = 10^(-(PL_v + X_v)/10)`` of every device.

        Parameters
        ----------
        los : array_like of bool
            LOS state per device, shape ``(V,)``.
        shadowing_db : array_like of float
            Shadow fading ``X_v`` in dB per device, shape ``(V,)``.

        Returns
        -------
        numpy.ndarray
            Linear gain, shape ``(V,)``.

        """
        loss_db = self.config.pathloss_db(self.distance_2d_m, los)
        return db_to_linear(-(loss_db + np.asarray(shadowing_db, dtype=np.float64)))

    def draw_round(self, model_bits: float) -> RoundDraw:
        """Draw one round's channel for every device (docs/design.md, "One round", step 1).

        Order of draws from ``rng``: availability (V uniforms), LOS states (V uniforms, if
        redrawn), shadowing (V standard normals, if redrawn).

        Parameters
        ----------
        model_bits : float
            Size of the uploaded model D_w in bits, ``> 0``.

        Returns
        -------
        RoundDraw
            Availability, gain, minimum bandwidth (``+inf`` = infeasible), LOS and distance.

        """
        bits = checked_model_bits(model_bits)
        config = self.config
        available = self._rng.random(self.num_devices) < config.availability_prob
        los = self._fixed_los if self._fixed_los is not None else self._draw_los()
        if self._fixed_shadowing_z is not None:
            shadowing_z = self._fixed_shadowing_z
        else:
            shadowing_z = self._rng.standard_normal(self.num_devices)
        shadowing_db = shadowing_z * shadow_fading_std_db(los, config.pathloss_model)
        gain = self.gain_lin(los, shadowing_db)
        bandwidth = config.min_bandwidth_hz(bits, gain)
        return RoundDraw(
            available=available,
            gain_lin=gain,
            min_bandwidth_hz=bandwidth,
            los=los.copy(),
            distance_2d_m=self.distance_2d_m.copy(),
        )
