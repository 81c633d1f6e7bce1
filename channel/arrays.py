"""Array type aliases and the conversion of array arguments, shared by the whole project.

Pure numpy; :mod:`fedcgd_strategy` imports this module, never the other way round.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
"""A numpy array of 64-bit floats (any shape)."""

BoolArray = npt.NDArray[np.bool_]
"""A numpy array of booleans (any shape)."""


def as_float_array(
    value: npt.ArrayLike,
    name: str,
    *,
    shape: tuple[int, ...] | None = None,
    broadcast_scalar: bool = False,
) -> FloatArray:
    """Convert ``value`` to a float64 array, optionally of a required shape (values not checked).

    ``shape`` None accepts any shape; with ``broadcast_scalar`` a scalar is broadcast to
    ``shape``. Raises ValueError naming ``name`` if ``value`` is not numeric or has another shape.
    """
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric, got {value!r}") from exc
    if shape is None:
        return array
    if broadcast_scalar and array.ndim == 0:
        return np.full(shape, float(array))
    if array.shape != shape:
        expected = "be a scalar" if shape == () else f"have shape {shape}"
        alternative = " or be a scalar" if broadcast_scalar else ""
        raise ValueError(f"{name} must {expected}{alternative}, got shape {array.shape}")
    return array
