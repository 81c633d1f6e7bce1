"""Unit conversions: decibels, dBm and watts, hertz and gigahertz.

Every conversion of the channel package lives here so that each formula module works in
one stated unit per quantity.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from channel.arrays import FloatArray, as_finite_array

SPEED_OF_LIGHT_M_PER_S: float = 3.0e8
"""Propagation velocity in free space, the value TR 38.901 Table 7.4.1-1 (note 1) prescribes."""

HZ_PER_GHZ: float = 1.0e9
"""Hertz in one gigahertz."""

MW_PER_W: float = 1.0e3
"""Milliwatts in one watt."""


def db_to_linear(value_db: npt.ArrayLike) -> FloatArray:
    """Convert a power ratio from decibels to linear scale, ``10^(x/10)``.

    Parameters
    ----------
    value_db : array_like
        Power ratio in dB, any shape, finite (NaN or ``±inf`` raise ValueError).

    Returns
    -------
    numpy.ndarray
        Linear ratio (dimensionless), same shape.

    """
    return np.asarray(10.0 ** (as_finite_array(value_db, "value_db") / 10.0))


def linear_to_db(value_lin: npt.ArrayLike) -> FloatArray:
    """Convert a non-negative power ratio from linear scale to decibels, ``10 log10(x)``.

    Parameters
    ----------
    value_lin : array_like
        Linear ratio, any shape, ``>= 0`` (0 maps to ``-inf`` dB).

    Returns
    -------
    numpy.ndarray
        Ratio in dB, same shape.

    """
    array = as_finite_array(value_lin, "value_lin", lower=0.0, allow_inf=True)
    with np.errstate(divide="ignore"):
        return np.asarray(10.0 * np.log10(array))


def dbm_to_w(power_dbm: npt.ArrayLike) -> FloatArray:
    """Convert a power from dBm to watts, ``10^((P - 30)/10)``.

    Also converts a power spectral density from dBm/Hz to W/Hz.

    Parameters
    ----------
    power_dbm : array_like
        Power in dBm (or dBm/Hz), any shape, finite.

    Returns
    -------
    numpy.ndarray
        Power in W (or W/Hz), same shape.

    """
    return np.asarray(db_to_linear(power_dbm) / MW_PER_W)


def w_to_dbm(power_w: npt.ArrayLike) -> FloatArray:
    """Convert a non-negative power from watts to dBm, ``10 log10(P) + 30``.

    Parameters
    ----------
    power_w : array_like
        Power in W, any shape, ``>= 0``.

    Returns
    -------
    numpy.ndarray
        Power in dBm, same shape (0 W maps to ``-inf``).

    """
    return np.asarray(linear_to_db(as_finite_array(power_w, "power_w", lower=0.0)) + 30.0)


def hz_to_ghz(frequency_hz: npt.ArrayLike) -> FloatArray:
    """Convert a frequency from Hz to GHz, ``f / 10^9``.

    The channel API takes frequencies in Hz; TR 38.901 writes its path-loss formulas with the
    carrier frequency ``fc`` in GHz.

    Parameters
    ----------
    frequency_hz : array_like
        Frequency in Hz, any shape, finite.

    Returns
    -------
    numpy.ndarray
        Frequency in GHz, same shape.

    """
    return np.asarray(as_finite_array(frequency_hz, "frequency_hz") / HZ_PER_GHZ)
