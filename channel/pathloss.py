"""LOS probability, path loss and shadow-fading spread of UMi-Street Canyon (TR 38.901).

docs/design.md, "LOS probability" (the standard's form, not the paper's misprint) and "Path
loss". Frequencies in Hz at the API, in GHz (``fc``) inside the formulas; distances and heights
in m; below the standard's 10 m bound the same formulas. Arguments are trusted (CellConfig).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from channel.arrays import FloatArray
from fedcgd_config.schema import PATHLOSS_MODELS as PATHLOSS_MODELS  # the first is the default

#: c of TR 38.901 Table 7.4.1-1 note 1.
SPEED_OF_LIGHT_M_PER_S: Final[float] = 3.0e8
#: h_E of TR 38.901 Table 7.4.1-1 note 1 (UMi).
EFFECTIVE_ENVIRONMENT_HEIGHT_M: Final[float] = 1.0
#: σ_SF in dB, (LOS, NLOS): paper Table I and TR 38.901 Table 7.4.1-1.
SHADOW_FADING_STD_DB: Final[dict[str, tuple[float, float]]] = {
    "paper": (4.0, 8.2),
    "tr38901": (4.0, 7.82),
}
#: d1 and d2 of TR 38.901 Table 7.4.2-1: always LOS within d1, decay length d2.
LOS_CERTAIN_DISTANCE_M: Final[float] = 18.0
LOS_DECAY_DISTANCE_M: Final[float] = 36.0


def db_to_linear(value_db: npt.ArrayLike) -> FloatArray:
    """Power ratio in dB (any shape) to linear scale, ``10^(x/10)``."""
    return np.asarray(10.0 ** (np.asarray(value_db, dtype=np.float64) / 10.0))


def dbm_to_w(power_dbm: npt.ArrayLike) -> FloatArray:
    """Power in dBm (or PSD in dBm/Hz) to W (or W/Hz), ``10^((P - 30)/10)``."""
    return np.asarray(db_to_linear(power_dbm) / 1e3)


def los_probability(d2d_m: npt.ArrayLike) -> FloatArray:
    """LOS probability, TR 38.901 Table 7.4.2-1: 1 for d2D <= 18 m, else
    ``18/d2D + exp(-d2D/36) (1 - 18/d2D)``; ``d2d_m`` horizontal distance in m."""  # noqa: D205, D209
    distance_m = np.asarray(d2d_m, dtype=np.float64)
    far_m = np.maximum(distance_m, LOS_CERTAIN_DISTANCE_M)  # the far branch never divides by 0
    ratio = LOS_CERTAIN_DISTANCE_M / far_m
    far_probability = ratio + np.exp(-far_m / LOS_DECAY_DISTANCE_M) * (1.0 - ratio)
    return np.asarray(np.where(distance_m <= LOS_CERTAIN_DISTANCE_M, 1.0, far_probability))


def _log10s(d3d_m: npt.ArrayLike, carrier_frequency_hz: float) -> tuple[FloatArray, FloatArray]:
    """``log10(d3D)`` (d3D in m, > 0) and ``log10(fc)`` (fc in GHz, passed in Hz)."""
    fc_ghz = np.asarray(carrier_frequency_hz, dtype=np.float64) / 1e9
    return np.log10(np.asarray(d3d_m, dtype=np.float64)), np.log10(fc_ghz)


def breakpoint_distance_m(h_bs_m: float, h_ut_m: float, carrier_frequency_hz: float) -> float:
    """Breakpoint distance d'_BP = 4 h'_BS h'_UT fc / c in m, h' = h - 1 m, TR 38.901 Table
    7.4.1-1 note 1 (210 m for the paper's 10 m, 1.5 m, 3.5 GHz)."""  # noqa: D205, D209
    h_bs_eff_m = float(h_bs_m) - EFFECTIVE_ENVIRONMENT_HEIGHT_M
    h_ut_eff_m = float(h_ut_m) - EFFECTIVE_ENVIRONMENT_HEIGHT_M
    return 4.0 * h_bs_eff_m * h_ut_eff_m * float(carrier_frequency_hz) / SPEED_OF_LIGHT_M_PER_S


def pathloss_umi_los_pl1_db(d3d_m: npt.ArrayLike, carrier_frequency_hz: float) -> FloatArray:
    """PL1 = 32.4 + 21 log10(d3D) + 20 log10(fc) dB, UMi LOS, TR 38.901 Table 7.4.1-1 (= the
    paper's PL_LOS, Section V-A)."""  # noqa: D205, D209
    log_d, log_fc = _log10s(d3d_m, carrier_frequency_hz)
    return np.asarray(32.4 + 21.0 * log_d + 20.0 * log_fc)


def pathloss_umi_los_pl2_db(
    d3d_m: npt.ArrayLike, carrier_frequency_hz: float, h_bs_m: float, h_ut_m: float
) -> FloatArray:
    """PL2 = 32.4 + 40 log10(d3D) + 20 log10(fc) - 9.5 log10(d'_BP^2 + (h_BS - h_UT)^2) dB,
    UMi LOS beyond the breakpoint, TR 38.901 Table 7.4.1-1."""  # noqa: D205, D209
    d_bp_m = breakpoint_distance_m(h_bs_m, h_ut_m, carrier_frequency_hz)
    log_d, log_fc = _log10s(d3d_m, carrier_frequency_hz)
    return np.asarray(
        32.4 + 40.0 * log_d + 20.0 * log_fc - 9.5 * np.log10(d_bp_m**2 + (h_bs_m - h_ut_m) ** 2)
    )


def pathloss_umi_nlos_prime_db(
    d3d_m: npt.ArrayLike, carrier_frequency_hz: float, h_ut_m: float
) -> FloatArray:
    """PL' = 35.3 log10(d3D) + 22.4 + 21.3 log10(fc) - 0.3 (h_UT - 1.5) dB, UMi NLOS, TR 38.901
    Table 7.4.1-1."""  # noqa: D205, D209
    log_d, log_fc = _log10s(d3d_m, carrier_frequency_hz)
    return np.asarray(22.4 + 35.3 * log_d + 21.3 * log_fc - 0.3 * (h_ut_m - 1.5))


def pathloss_umi_nlos_optional_db(d3d_m: npt.ArrayLike, carrier_frequency_hz: float) -> FloatArray:
    """PL = 32.4 + 20 log10(fc) + 31.9 log10(d3D) dB, UMi's optional NLOS model, TR 38.901
    Table 7.4.1-1 (= the paper's PL_NLOS)."""  # noqa: D205, D209
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
    """Path loss in dB of links at ``d2d_m`` (m) in LOS state ``los``, TR 38.901 7.4.1-1.

    ``"paper"``: PL1 and the optional NLOS model; ``"tr38901"``: PL1 up to d'_BP, PL2 beyond,
    NLOS max(PL_LOS, PL') (docs/design.md, "Path loss"); d3D = sqrt(d2D^2 + (h_BS - h_UT)^2).
    """
    if model not in PATHLOSS_MODELS:
        raise ValueError(f"model must be one of {PATHLOSS_MODELS}, got {model!r}")
    distance_2d_m = np.asarray(d2d_m, dtype=np.float64)
    d3d_m = np.asarray(np.hypot(distance_2d_m, h_bs_m - h_ut_m))
    los_db = pathloss_umi_los_pl1_db(d3d_m, carrier_frequency_hz)
    if model == "paper":
        nlos_db = pathloss_umi_nlos_optional_db(d3d_m, carrier_frequency_hz)
    else:
        d_bp_m = breakpoint_distance_m(h_bs_m, h_ut_m, carrier_frequency_hz)
        pl2_db = pathloss_umi_los_pl2_db(d3d_m, carrier_frequency_hz, h_bs_m, h_ut_m)
        los_db = np.asarray(np.where(distance_2d_m <= d_bp_m, los_db, pl2_db))
        nlos_db = np.maximum(
            los_db, pathloss_umi_nlos_prime_db(d3d_m, carrier_frequency_hz, h_ut_m)
        )
    return np.asarray(np.where(np.asarray(los), los_db, nlos_db))


def shadow_fading_std_db(los: npt.ArrayLike, model: str = "paper") -> FloatArray:
    """σ_SF of log-normal shadow fading in dB (:data:`SHADOW_FADING_STD_DB`), shape of ``los``."""
    los_std_db, nlos_std_db = SHADOW_FADING_STD_DB[model]
    return np.asarray(np.where(np.asarray(los), los_std_db, nlos_std_db))
