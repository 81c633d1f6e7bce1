"""Array type aliases shared by the whole project (pure numpy; :mod:`fedcgd_strategy` imports
this module, never the other way round)."""  # noqa: D205, D209

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
"""A numpy array of 64-bit floats (any shape)."""

BoolArray = npt.NDArray[np.bool_]
"""A numpy array of booleans (any shape)."""
