"""One cell: device drop and per-round draws of availability, LOS and shadowing, giving H̄_v
and B*_v (paper Section V-A, eq. (lambert); docs/design.md, "Device drop", "One round").
"""  # noqa: D205

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol

import numpy as np
import numpy.typing as npt

from channel.arrays import BoolArray, FloatArray
from channel.bandwidth import min_bandwidth_hz
from channel.pathloss import (
    EFFECTIVE_ENVIRONMENT_HEIGHT_M,
    db_to_linear,
    dbm_to_w,
    los_probability,
    pathloss_db,
    shadow_fading_std_db,
)
from fedcgd_config.schema import PATHLOSS_MODELS, SCHEMA
from fedcgd_config.setting import check_value


@dataclass(frozen=True)
class CellConfig:
    """Checked settings of a cell, defaults of the paper's Table I: a field per ``channel.<key>``
    (docs/running.md) and ``num_devices`` (V); units in the names."""  # noqa: D205, D209

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
        """Check each field against its setting, then pairs of fields (ValueError, one line)."""
        for field in fields(self):
            setting = SCHEMA.get(f"channel.{field.name.replace('_', '-')}")
            if setting is not None:
                value = check_value(setting, getattr(self, field.name), f"CellConfig.{field.name}")
                object.__setattr__(self, field.name, value)
        num = self.num_devices
        if isinstance(num, bool) or not isinstance(num, int | np.integer) or num < 1:
            self._fail("num_devices", num, "an integer >= 1")
        object.__setattr__(self, "num_devices", int(num))
        if self.pathloss_model not in PATHLOSS_MODELS:
            self._fail("pathloss_model", self.pathloss_model, f"one of {PATHLOSS_MODELS}")
        if not self.min_distance_m < self.radius_m:
            self._fail("radius_m", self.radius_m, f"> min_distance_m = {self.min_distance_m} m")
        for name in ("h_bs_m", "h_ut_m") if self.pathloss_model == "tr38901" else ():
            if not getattr(self, name) > EFFECTIVE_ENVIRONMENT_HEIGHT_M:
                why = f"> {EFFECTIVE_ENVIRONMENT_HEIGHT_M} m (pathloss_model 'tr38901')"
                self._fail(name, getattr(self, name), why)
        if self.min_distance_m == 0.0 and self.h_bs_m == self.h_ut_m:
            self._fail("h_ut_m", self.h_ut_m, "!= h_bs_m when min_distance_m = 0 (zero distance)")

    @staticmethod
    def _fail(name: str, value: object, allowed: str) -> None:
        raise ValueError(f"CellConfig.{name} = {value!r} is invalid: must be {allowed}")

    @property
    def tx_power_w(self) -> float:
        """Transmit power S in W."""
        return float(dbm_to_w(self.tx_power_dbm))

    @property
    def noise_psd_w_per_hz(self) -> float:
        """Noise PSD N0 in W/Hz, noise figure included."""
        return float(dbm_to_w(self.noise_psd_dbm_per_hz + self.noise_figure_db))

    def pathloss_db(
        self, distance_2d_m: npt.ArrayLike, los: npt.ArrayLike, model: str | None = None
    ) -> FloatArray:
        """Path loss in dB (:func:`channel.pathloss.pathloss_db`) with this cell's geometry."""
        return pathloss_db(
            distance_2d_m,
            los,
            model=self.pathloss_model if model is None else model,
            carrier_frequency_hz=self.carrier_frequency_hz,
            h_bs_m=self.h_bs_m,
            h_ut_m=self.h_ut_m,
        )

    def min_bandwidth_hz(self, model_bits: float, gain_lin: npt.ArrayLike) -> FloatArray:
        """``B*_v`` in Hz (paper eq. (lambert)) for ``model_bits`` and linear gains ``H̄_v``."""
        return min_bandwidth_hz(
            model_bits, self.deadline_s, self.tx_power_w, gain_lin, self.noise_psd_w_per_hz
        )


@dataclass(frozen=True)
class RoundDraw:
    """One round's channel, ``(V,)`` per field: ``available``, the gain H̄_v (linear), B*_v in Hz
    (+inf: infeasible); ``los`` and ``distance_2d_m`` None where unknown (a trace)."""  # noqa: D205, D209

    available: BoolArray
    gain_lin: FloatArray
    min_bandwidth_hz: FloatArray
    los: BoolArray | None = None
    distance_2d_m: FloatArray | None = None

    def __post_init__(self) -> None:
        """The fields as 1-D numpy arrays of one length (ValueError)."""
        for name in ("available", "gain_lin", "min_bandwidth_hz", "los", "distance_2d_m"):
            if getattr(self, name) is None and name in ("los", "distance_2d_m"):
                continue  # only the geometry may be unknown
            dtype = np.bool_ if name in ("available", "los") else np.float64
            array: np.ndarray = np.asarray(getattr(self, name), dtype=dtype)
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


class ChannelModel(Protocol):
    """A run's uplink, named by ``channel.model`` (docs/bring-your-own.md, "Your own channel"):
    one :class:`RoundDraw` per round for uploads of ``model_bits`` bits."""  # noqa: D205, D209

    def draw_round(self, model_bits: float) -> RoundDraw:
        """Draw availability, gains and minimum bandwidths for this round."""
        ...


class Cell:
    """V devices dropped from ``rng`` (the only randomness), their channel redrawn each round;
    shadowing is a standard normal per device scaled by its LOS state's σ_SF."""  # noqa: D205, D209

    def __init__(self, config: CellConfig, rng: np.random.Generator) -> None:
        self.config = config
        self._rng = rng
        # Uniform over the annulus' area (docs/design.md, "Device drop"): inverse CDF
        # r = sqrt(U (R^2 - r0^2) + r0^2), U ~ Uniform[0, 1), then angles uniform in [0, 2 pi).
        r0, radius, num = config.min_distance_m, config.radius_m, config.num_devices
        self.distance_2d_m = np.sqrt(rng.random(num) * (radius**2 - r0**2) + r0**2)
        self.angle_rad = rng.uniform(0.0, 2.0 * np.pi, num)
        self.los_probability = los_probability(self.distance_2d_m)
        fixed_los = not config.redraw_los_each_round  # drawn once, before the fixed shadowing
        self._fixed_los = self._draw_los() if fixed_los else None
        fixed_z = not config.redraw_shadowing_each_round
        self._fixed_shadowing_z = rng.standard_normal(config.num_devices) if fixed_z else None

    @property
    def num_devices(self) -> int:
        """Number of devices V."""
        return self.config.num_devices

    def _draw_los(self) -> BoolArray:
        """LOS states, Bernoulli with ``P_LOS(d2D)`` (TR 38.901 Table 7.4.2-1), shape ``(V,)``."""
        return np.asarray(self._rng.random(self.num_devices) < self.los_probability)

    def gain_lin(self, los: npt.ArrayLike, shadowing_db: npt.ArrayLike) -> FloatArray:
        """Average channel gain ``H̄_v = 10^(-(PL_v + X_v)/10)``, shape ``(V,)``; ``X_v`` in dB."""
        loss_db = self.config.pathloss_db(self.distance_2d_m, los)
        return db_to_linear(-(loss_db + np.asarray(shadowing_db, dtype=np.float64)))

    def draw_round(self, model_bits: float) -> RoundDraw:
        """One round (docs/design.md, "One round"): V uniforms for availability, then, if redrawn,
        V for LOS and V standard normals for shadowing; ``model_bits`` D_w."""  # noqa: D205, D209
        config = self.config
        available = self._rng.random(self.num_devices) < config.availability_prob
        los = self._fixed_los if self._fixed_los is not None else self._draw_los()
        shadowing_z = self._fixed_shadowing_z
        if shadowing_z is None:
            shadowing_z = self._rng.standard_normal(self.num_devices)
        shadowing_db = shadowing_z * shadow_fading_std_db(los, config.pathloss_model)
        gain = self.gain_lin(los, shadowing_db)
        bandwidth = config.min_bandwidth_hz(model_bits, gain)
        return RoundDraw(
            available=available,
            gain_lin=gain,
            min_bandwidth_hz=bandwidth,
            los=los.copy(),
            distance_2d_m=self.distance_2d_m.copy(),
        )
