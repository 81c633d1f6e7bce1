"""Uplink rate and minimum bandwidth to meet the upload deadline (paper Section II-B, IV).

docs/design.md, "Lambert-W branch" and "Infeasible devices" (``Γ >= 1``: ``B* = +inf``).
Arguments are trusted (the cell's checked settings, a trace's checked gains).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy.special import lambertw

from channel.arrays import FloatArray

_NEWTON_MAX_ITERATIONS = 100
_NEWTON_RELATIVE_TOLERANCE = 4.0 * np.finfo(np.float64).eps


def _floats(*values: npt.ArrayLike) -> list[FloatArray]:
    return [np.asarray(value, dtype=np.float64) for value in values]


def rate_bps(
    bandwidth_hz: npt.ArrayLike,
    tx_power_w: npt.ArrayLike,
    gain_lin: npt.ArrayLike,
    noise_psd_w_per_hz: npt.ArrayLike,
) -> FloatArray:
    """FDMA uplink rate ``r = B log2(1 + S H̄ / (B N0))`` in bit/s, paper Section II-B.

    B in Hz (0 gives 0, +inf the limit ``S H̄ / (N0 ln 2)``), S in W, H̄ linear, N0 in W/Hz
    (noise figure included); broadcast.
    """
    bandwidth, power, gain, noise = _floats(bandwidth_hz, tx_power_w, gain_lin, noise_psd_w_per_hz)
    snr_bandwidth_hz = power * gain / noise  # S H̄ / N0, in Hz
    bandwidth, snr_bandwidth_hz = np.broadcast_arrays(bandwidth, snr_bandwidth_hz)
    rate = np.zeros(bandwidth.shape)
    finite = np.isfinite(bandwidth) & (bandwidth > 0.0)
    rate[finite] = bandwidth[finite] * np.log1p(snr_bandwidth_hz[finite] / bandwidth[finite])
    infinite = np.isinf(bandwidth)
    rate[infinite] = snr_bandwidth_hz[infinite]
    return np.asarray(rate / math.log(2.0))


def min_bandwidth_hz(
    model_bits: npt.ArrayLike,
    deadline_s: npt.ArrayLike,
    tx_power_w: npt.ArrayLike,
    gain_lin: npt.ArrayLike,
    noise_psd_w_per_hz: npt.ArrayLike,
) -> FloatArray:
    """B* in Hz to upload D bits within d seconds, paper eq. (lambert):
    ``B* = -D ln2 / (d (W_{-1}(-Γ e^{-Γ}) + Γ))``, ``Γ = N0 D ln2 / (d S H̄)``.

    ``+inf`` when ``Γ >= 1``, 0 when D = 0 and H̄ > 0. Newton's method on ``log1p(s/Γ) = s``,
    ``s = -(W + Γ)``, from the Lambert-W value, avoids the cancellation near Γ -> 1 and the
    underflow near Γ -> 0. S, H̄, N0 as in :func:`rate_bps`; broadcast.
    """  # noqa: D205
    bits, deadline, power, gain, noise = _floats(
        model_bits, deadline_s, tx_power_w, gain_lin, noise_psd_w_per_hz
    )
    required_bps = bits / deadline  # D / d
    limit_bps = power * gain / (noise * math.log(2.0))  # lim_{B -> inf} r = S H̄ / (N0 ln 2)
    required_bps, limit_bps = np.broadcast_arrays(required_bps, limit_bps)
    bandwidth = np.full(required_bps.shape, np.inf)
    feasible = limit_bps > required_bps
    bandwidth[feasible & (required_bps == 0.0)] = 0.0
    solve = feasible & (required_bps > 0.0)
    gamma = required_bps[solve] / limit_bps[solve]  # Γ = (D/d) / (S H̄ / (N0 ln 2)) in (0, 1]
    # Γ rounds to 1.0 only when the ratio lies within half an ulp of 1; keep it just below.
    # It is 0 only if S H̄ / N0 overflows; the smallest subnormal keeps the solver finite.
    gamma = np.clip(gamma, np.nextafter(0.0, 1.0), np.nextafter(1.0, 0.0))
    # B* = (D ln2 / d) / s with s = -(W_{-1}(-Γ e^{-Γ}) + Γ), paper eq. (lambert).
    bandwidth[solve] = required_bps[solve] * math.log(2.0) / _lambert_gap(gamma)
    return np.asarray(bandwidth)


def _lambert_gap(gamma: FloatArray) -> FloatArray:
    """``s = -(W_{-1}(-Γ e^{-Γ}) + Γ) > 0`` for ``0 < Γ < 1``: the positive root of the concave
    ``ψ(s) = log1p(s/Γ) - s`` by Newton's steps, monotone from the Lambert-W value raised to at
    least ``2(1 - Γ)`` (a lower bound, as ``log1p(x) >= 2x/(2+x)``)."""  # noqa: D205, D209
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        w = lambertw(-gamma * np.exp(-gamma), k=-1).real
    start = -(w + gamma)
    lower_bound = 2.0 * (1.0 - gamma)
    gap = np.where(np.isfinite(start), np.maximum(start, lower_bound), lower_bound)
    for _ in range(_NEWTON_MAX_ITERATIONS):
        with np.errstate(over="ignore", divide="ignore"):
            ratio = gap / gamma
            # ln(1 + s/Γ): log1p where s/Γ is moderate, logs of the sum where it may overflow.
            log_term = np.where(
                ratio <= 1.0,
                np.log1p(np.minimum(ratio, 1.0)),
                np.log(gap) + np.log1p(gamma / gap) - np.log(gamma),
            )
        # 1/(Γ + s) - 1 = (1 - Γ - s) / (Γ + s), written to keep precision when Γ + s is near 1.
        step = (log_term - gap) / (((1.0 - gamma) - gap) / (gamma + gap))
        gap = gap - step
        if np.all(np.abs(step) <= _NEWTON_RELATIVE_TOLERANCE * gap):
            break
    return np.asarray(gap)


def count_fit_cheapest_first(min_bandwidth_hz: npt.ArrayLike, total_bandwidth_hz: float) -> int:
    """How many of the B* (Hz, +inf: infeasible) fit B taken cheapest first (the most any can)."""
    demands = np.asarray(min_bandwidth_hz, dtype=np.float64)
    finite = np.sort(demands[np.isfinite(demands)].ravel())
    return int(np.count_nonzero(np.cumsum(finite) <= float(total_bandwidth_hz)))
