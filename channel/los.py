"""Line-of-sight probability of the UMi-Street Canyon scenario (TR 38.901 Table 7.4.2-1).

Decision (docs/design.md, "LOS probability"): the paper prints ``18/d + exp[(-d/36)(1 - 18/d)]``,
which exceeds 1 (e.g. 1.57 at d = 20 m); that bracket is a typo. The standard's form is used
instead: ``P_LOS = 1`` for ``d2D <= 18 m``, else ``18/d2D + exp(-d2D/36) (1 - 18/d2D)``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from channel.arrays import FloatArray, as_finite_array

LOS_CERTAIN_DISTANCE_M: float = 18.0
"""d1 of TR 38.901 Table 7.4.2-1 (UMi-Street Canyon): devices this close are always LOS."""

LOS_DECAY_DISTANCE_M: float = 36.0
"""d2 of TR 38.901 Table 7.4.2-1 (UMi-Street Canyon): decay length of the LOS probability."""


def los_probability(d2d_m: npt.ArrayLike) -> FloatArray:
    """LOS probability of UMi-Street Canyon, TR 38.901 Table 7.4.2-1, in [0, 1], shape of ``d2d_m``.

    ``P_LOS = 1`` if ``d2D <= 18 m``, else ``18/d2D + exp(-d2D/36) (1 - 18/d2D)``; ``d2d_m`` is
    the horizontal distance in m, ``>= 0``.
    """
    distance_m = as_finite_array(d2d_m, "d2d_m", lower=0.0)
    # Evaluate the far branch only where it applies (avoids 18/0 at d2D = 0).
    far_m = np.maximum(distance_m, LOS_CERTAIN_DISTANCE_M)
    ratio = LOS_CERTAIN_DISTANCE_M / far_m
    far_probability = ratio + np.exp(-far_m / LOS_DECAY_DISTANCE_M) * (1.0 - ratio)
    return np.asarray(np.where(distance_m <= LOS_CERTAIN_DISTANCE_M, 1.0, far_probability))
