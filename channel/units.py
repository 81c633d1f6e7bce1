"""Unit conversions of the channel package: decibels, dBm and watts, hertz and gigahertz."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from channel.arrays import FloatArray, as_finite_array

SPEED_OF_LIGHT_M_PER_S: float = 3.0e8
"""Propagation velocity in free space, the value TR 38.901 Table 7.4.1-1 (note 1) prescribes."""


def db_to_linear(value_db: npt.ArrayLike) -> FloatArray:
    """Power ratio in dB (finite, any shape) to linear scale, ``10^(x/10)``."""
    return np.asarray(10.0 ** (as_finite_array(value_db, "value_db") / 10.0))


def linear_to_db(value_lin: npt.ArrayLike) -> FloatArray:
    """Non-negative linear power ratio to dB, ``10 log10(x)`` (0 maps to ``-inf``)."""
    array = as_finite_array(value_lin, "value_lin", lower=0.0, allow_inf=True)
    with np.errstate(divide="ignore"):
        return np.asarray(10.0 * np.log10(array))


def dbm_to_w(power_dbm: npt.ArrayLike) -> FloatArray:
    """Power in dBm (or PSD in dBm/Hz) to W (or W/Hz), ``10^((P - 30)/10)``."""
    return np.asarray(db_to_linear(power_dbm) / 1e3)


def w_to_dbm(power_w: npt.ArrayLike) -> FloatArray:
    """Non-negative power in W to dBm, ``10 log10(P) + 30`` (0 W maps to ``-inf``)."""
    return np.asarray(linear_to_db(as_finite_array(power_w, "power_w", lower=0.0)) + 30.0)


def hz_to_ghz(frequency_hz: npt.ArrayLike) -> FloatArray:
    """Frequency in Hz to GHz (TR 38.901 writes ``fc`` in GHz)."""
    return np.asarray(as_finite_array(frequency_hz, "frequency_hz") / 1e9)
