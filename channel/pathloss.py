"""LOS probability, path loss and shadow-fading spread of UMi-Street Canyon (TR 38.901).

LOS probability: Table 7.4.2-1 in the standard's form, not the paper's misprinted bracket
(docs/design.md, "LOS probability"). Path loss: Table 7.4.1-1, models ``"paper"`` and
``"tr38901"`` (docs/design.md, "Path loss").
Frequencies are in Hz at the API and in GHz (``fc``) inside the formulas. Distances below the
standard's 10 m validity bound use the same formulas.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from channel.arrays import FloatArray, as_bool_array, as_finite_array
from channel.units import SPEED_OF_LIGHT_M_PER_S, hz_to_ghz

PATHLOSS_MODELS: Final[tuple[str, ...]] = ("paper", "tr38901")
"""All path-loss models, the first is the default."""

EFFECTIVE_ENVIRONMENT_HEIGHT_M: Final[float] = 1.0
"""h_E of TR 38.901 Table 7.4.1-1 note 1: 1 m in UMi."""

SHADOW_FADING_STD_DB: Final[dict[str, tuple[float, float]]] = {
    # (LOS, NLOS); paper Section V-A / Table I and TR 38.901 Table 7.4.1-1.
    "paper": (4.0, 8.2),
    "tr38901": (4.0, 7.82),
}
"""σ_SF in dB per model, as ``(LOS, NLOS)``."""

LOS_CERTAIN_DISTANCE_M: Final[float] = 18.0
"""d1 of TR 38.901 Table 7.4.2-1 (UMi-Street Canyon): devices this close are always LOS."""

LOS_DECAY_DISTANCE_M: Final[float] = 36.0
"""d2 of TR 38.901 Table 7.4.2-1 (UMi-Street Canyon): decay length of the LOS probability."""


def los_probability(d2d_m: npt.ArrayLike) -> FloatArray:
    """LOS probability of UMi-Street Canyon, TR 38.901 Table 7.4.2-1, in [0, 1], shape of ``d2d_m``.

    ``P_LOS = 1`` if ``d2D <= 18 m``, else ``18/d2D + exp(-d2D/36) (1 - 18/d2D)``; ``d2d_m`` is
    the horizontal distance in m, ``>= 0``.
    """
    distance_m = as_finite_array(d2d_m, "d2d_m", lower=0.0)
    far_m = np.maximum(distance_m, LOS_CERTAIN_DISTANCE_M)  # the far branch never divides by 0
    ratio = LOS_CERTAIN_DISTANCE_M / far_m
    far_probability = ratio + np.exp(-far_m / LOS_DECAY_DISTANCE_M) * (1.0 - ratio)
    return np.asarray(np.where(distance_m <= LOS_CERTAIN_DISTANCE_M, 1.0, far_probability))


def _log10s(d3d_m: npt.ArrayLike, carrier_frequency_hz: float) -> tuple[FloatArray, FloatArray]:
    """``log10(d3D)`` (d3D in m, > 0) and ``log10(fc)`` (fc in GHz, passed in Hz)."""
    d3d = as_finite_array(d3d_m, "d3d_m", lower=0.0, lower_inclusive=False)
    return np.log10(d3d), np.log10(hz_to_ghz(carrier_frequency_hz))


def check_pathloss_model(model: str) -> str:
    """Return ``model`` if it names a path-loss model, else raise a ValueError."""
    if model not in PATHLOSS_MODELS:
        raise ValueError(f"model must be one of {PATHLOSS_MODELS}, got {model!r}")
    return model


def distance_3d_m(d2d_m: npt.ArrayLike, h_bs_m: float, h_ut_m: float) -> FloatArray:
    """3D antenna distance ``sqrt(d2D^2 + (h_BS - h_UT)^2)`` in m, TR 38.901 Figure 7.4.1-1.

    ``d2d_m`` horizontal distance in m (any shape, ``>= 0``), heights in m (``> 0``); returns the
    shape of ``d2d_m``.
    """
    distance_m = as_finite_array(d2d_m, "d2d_m", lower=0.0)
    as_finite_array(h_bs_m, "h_bs_m", lower=0.0, lower_inclusive=False)
    as_finite_array(h_ut_m, "h_ut_m", lower=0.0, lower_inclusive=False)
    return np.asarray(np.hypot(distance_m, h_bs_m - h_ut_m))


def breakpoint_distance_m(h_bs_m: float, h_ut_m: float, carrier_frequency_hz: float) -> float:
    """Breakpoint distance of UMi in m, TR 38.901 Table 7.4.1-1 note 1.

    ``d'_BP = 4 h'_BS h'_UT fc / c`` with ``h' = h - h_E``, ``h_E = 1 m``, ``fc`` in Hz: 210 m for
    the paper's 10 m / 1.5 m / 3.5 GHz. Both heights must exceed 1 m.
    """
    as_finite_array(carrier_frequency_hz, "carrier_frequency_hz", lower=0.0, lower_inclusive=False)
    h_bs_eff_m = float(h_bs_m) - EFFECTIVE_ENVIRONMENT_HEIGHT_M
    h_ut_eff_m = float(h_ut_m) - EFFECTIVE_ENVIRONMENT_HEIGHT_M
    if not (h_bs_eff_m > 0.0 and h_ut_eff_m > 0.0):
        raise ValueError(
            f"h_bs_m and h_ut_m must be > {EFFECTIVE_ENVIRONMENT_HEIGHT_M} m (h_E of UMi) for the "
            f"breakpoint distance, got h_bs_m={h_bs_m!r}, h_ut_m={h_ut_m!r}"
        )
    return 4.0 * h_bs_eff_m * h_ut_eff_m * float(carrier_frequency_hz) / SPEED_OF_LIGHT_M_PER_S


def pathloss_umi_los_pl1_db(d3d_m: npt.ArrayLike, carrier_frequency_hz: float) -> FloatArray:
    """PL1 of UMi-Street Canyon LOS, TR 38.901 Table 7.4.1-1 (= paper Section V-A PL_LOS).

    ``PL1 = 32.4 + 21 log10(d3D) + 20 log10(fc)`` in dB, ``d3D`` in m (any shape, ``> 0``),
    ``fc`` in GHz (passed in Hz). Returns the shape of ``d3d_m``.
    """
    log_d, log_fc = _log10s(d3d_m, carrier_frequency_hz)
    return np.asarray(32.4 + 21.0 * log_d + 20.0 * log_fc)


def pathloss_umi_los_pl2_db(
    d3d_m: npt.ArrayLike, carrier_frequency_hz: float, h_bs_m: float, h_ut_m: float
) -> FloatArray:
    """PL2 of UMi-Street Canyon LOS (beyond the breakpoint), TR 38.901 Table 7.4.1-1.

    ``PL2 = 32.4 + 40 log10(d3D) + 20 log10(fc) - 9.5 log10(d'_BP^2 + (h_BS - h_UT)^2)`` in dB,
    ``d3D``, ``d'_BP`` and heights in m, ``fc`` in GHz (passed in Hz). Returns the shape of
    ``d3d_m``.
    """
    d_bp_m = breakpoint_distance_m(h_bs_m, h_ut_m, carrier_frequency_hz)
    log_d, log_fc = _log10s(d3d_m, carrier_frequency_hz)
    return np.asarray(
        32.4 + 40.0 * log_d + 20.0 * log_fc - 9.5 * np.log10(d_bp_m**2 + (h_bs_m - h_ut_m) ** 2)
    )


def pathloss_umi_los_db(
    d2d_m: npt.ArrayLike, carrier_frequency_hz: float, h_bs_m: float, h_ut_m: float
) -> FloatArray:
    """UMi-Street Canyon LOS path loss in dB, TR 38.901 Table 7.4.1-1.

    ``PL_LOS = PL1`` for ``d2D <= d'_BP`` and ``PL2`` beyond; ``d2d_m`` in m (any shape),
    heights in m, frequency in Hz. Returns the shape of ``d2d_m``.
    """
    distance_2d_m = as_finite_array(d2d_m, "d2d_m", lower=0.0)
    d3d_m = distance_3d_m(distance_2d_m, h_bs_m, h_ut_m)
    d_bp_m = breakpoint_distance_m(h_bs_m, h_ut_m, carrier_frequency_hz)
    pl1_db = pathloss_umi_los_pl1_db(d3d_m, carrier_frequency_hz)
    pl2_db = pathloss_umi_los_pl2_db(d3d_m, carrier_frequency_hz, h_bs_m, h_ut_m)
    return np.asarray(np.where(distance_2d_m <= d_bp_m, pl1_db, pl2_db))


def pathloss_umi_nlos_prime_db(
    d3d_m: npt.ArrayLike, carrier_frequency_hz: float, h_ut_m: float
) -> FloatArray:
    """PL'_UMi-NLOS in dB, TR 38.901 Table 7.4.1-1.

    ``PL' = 35.3 log10(d3D) + 22.4 + 21.3 log10(fc) - 0.3 (h_UT - 1.5)``, ``d3D`` and ``h_UT`` in
    m, ``fc`` in GHz (passed in Hz). Returns the shape of ``d3d_m``.
    """
    log_d, log_fc = _log10s(d3d_m, carrier_frequency_hz)
    return np.asarray(22.4 + 35.3 * log_d + 21.3 * log_fc - 0.3 * (h_ut_m - 1.5))


def pathloss_umi_nlos_db(
    d2d_m: npt.ArrayLike, carrier_frequency_hz: float, h_bs_m: float, h_ut_m: float
) -> FloatArray:
    """UMi-Street Canyon NLOS path loss ``max(PL_UMi-LOS, PL'_UMi-NLOS)`` in dB, TR 38.901 7.4.1-1.

    Arguments as in :func:`pathloss_umi_los_db`; returns the shape of ``d2d_m``.
    """
    d3d_m = distance_3d_m(d2d_m, h_bs_m, h_ut_m)
    los_db = pathloss_umi_los_db(d2d_m, carrier_frequency_hz, h_bs_m, h_ut_m)
    nlos_prime_db = pathloss_umi_nlos_prime_db(d3d_m, carrier_frequency_hz, h_ut_m)
    return np.asarray(np.maximum(los_db, nlos_prime_db))


def pathloss_umi_nlos_optional_db(d3d_m: npt.ArrayLike, carrier_frequency_hz: float) -> FloatArray:
    """Optional UMi-SC NLOS path loss in dB, TR 38.901 Table 7.4.1-1 (= paper PL_NLOS).

    ``PL = 32.4 + 20 log10(fc) + 31.9 log10(d3D)``, ``d3D`` in m (any shape, ``> 0``), ``fc`` in
    GHz (passed in Hz). Returns the shape of ``d3d_m``.
    """
    log_d, log_fc = _log10s(d3d_m, carrier_frequency_hz)
    return np.asarray(32.4 + 20.0 * log_fc + 31.9 * log_d)


def pathloss_db(
    d2d_m: npt.ArrayLike,
    los: npt.ArrayLike,
    *,
    model: str = "paper",
    carrier_frequency_hz: float = 3.5e9,
    h_bs_m: float = 10.0,
    h_ut_m: float = 1.5,
) -> FloatArray:
    """UMi-Street Canyon path loss of a link in the given LOS state, in dB (TR 38.901 7.4.1-1).

    ``d2d_m`` horizontal distance in m (``>= 0``), broadcast with ``los`` (bool, True = line of
    sight); ``model`` ``"paper"`` or ``"tr38901"`` (docs/design.md, "Path loss"); carrier in Hz
    (3.5 GHz in the paper's Table I); base-station and device antenna heights in m (10 m and
    1.5 m). Returns dB with the broadcast shape of ``d2d_m`` and ``los``.
    """
    check_pathloss_model(model)
    distance_2d_m = as_finite_array(d2d_m, "d2d_m", lower=0.0)
    los_state = as_bool_array(los, "los")
    d3d_m = distance_3d_m(distance_2d_m, h_bs_m, h_ut_m)
    if np.any(d3d_m <= 0.0):
        raise ValueError("d2d_m must be > 0 when h_bs_m == h_ut_m (the 3D distance would be 0)")
    if model == "paper":
        los_db = pathloss_umi_los_pl1_db(d3d_m, carrier_frequency_hz)
        nlos_db = pathloss_umi_nlos_optional_db(d3d_m, carrier_frequency_hz)
    else:
        los_db = pathloss_umi_los_db(distance_2d_m, carrier_frequency_hz, h_bs_m, h_ut_m)
        nlos_db = pathloss_umi_nlos_db(distance_2d_m, carrier_frequency_hz, h_bs_m, h_ut_m)
    return np.asarray(np.where(los_state, los_db, nlos_db))


def shadow_fading_std_db(los: npt.ArrayLike, model: str = "paper") -> FloatArray:
    """Standard deviation σ_SF of log-normal shadow fading in dB, shape of ``los``.

    LOS 4 dB; NLOS 8.2 dB for ``"paper"`` (Table I) and 7.82 dB for ``"tr38901"``.
    """
    check_pathloss_model(model)
    los_std_db, nlos_std_db = SHADOW_FADING_STD_DB[model]
    return np.asarray(np.where(as_bool_array(los, "los"), los_std_db, nlos_std_db))
