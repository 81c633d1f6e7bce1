"""Array type aliases and the conversion of array arguments, shared by the whole project.

:func:`as_float_array` converts without checking values; :func:`as_finite_array` adds the
channel's rule (never NaN, finite unless ``+inf`` is allowed, optionally bounded below).
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


def as_finite_array(
    value: npt.ArrayLike,
    name: str,
    *,
    lower: float | None = None,
    lower_inclusive: bool = True,
    allow_inf: bool = False,
) -> FloatArray:
    """Convert ``value`` to a float64 array and check its range; ValueError names ``name``.

    NaN is never allowed, infinities only with ``allow_inf`` (only ``+inf`` with ``lower``);
    ``lower`` (inclusive unless ``lower_inclusive=False``) bounds the values from below.
    """
    array = as_float_array(value, name)
    if np.any(np.isnan(array)) or (not allow_inf and np.any(np.isinf(array))):
        allowed = "finite numbers or +inf" if allow_inf else "finite numbers"
        raise ValueError(f"{name} must contain {allowed}, got {_describe(array)}")
    if lower is not None:
        bad = array < lower if lower_inclusive else array <= lower
        if np.any(bad):
            relation = ">=" if lower_inclusive else ">"
            raise ValueError(f"{name} must be {relation} {lower}, got {_describe(array[bad])}")
    return array


def as_bool_array(value: npt.ArrayLike, name: str) -> BoolArray:
    """Convert ``value`` to a bool array, accepting only booleans or 0/1 values."""
    array = np.asarray(value)
    if array.dtype == np.bool_:
        return array
    if np.issubdtype(array.dtype, np.number) and np.all((array == 0) | (array == 1)):
        return array.astype(np.bool_)
    raise ValueError(f"{name} must be boolean (True = line of sight), got {_describe(array)}")


def _describe(array: npt.NDArray[np.generic]) -> str:
    """Short text for an offending value: the scalar itself or the first few elements."""
    flat = np.ravel(array)
    if flat.size == 1:
        return repr(flat[0].item())
    head = ", ".join(repr(x.item()) for x in flat[:3])
    return f"[{head}{', ...' if flat.size > 3 else ''}] ({flat.size} values)"
