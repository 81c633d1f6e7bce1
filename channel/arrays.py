"""Array type aliases and the conversion of array arguments, shared by the whole project.

:func:`as_float_array` is the one conversion of an argument to a float64 array (optionally of a
required shape); it checks no value, since callers differ in what they allow (the scheduling
math in :mod:`fedcgd_strategy.validation` quotes offending entries by index, a score may be NaN
for "no score"). The channel functions use :func:`as_finite_array`, which adds the channel's
value rule: never NaN, finite unless ``+inf`` is allowed, optionally bounded below. Pure numpy;
:mod:`fedcgd_strategy` imports this module, never the other way round.
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
    """Convert ``value`` to a float64 array, optionally of a required shape.

    Parameters
    ----------
    value : array_like
        Numbers, any shape (NaN and inf are not checked here).
    name : str
        Argument name quoted in the error message.
    shape : tuple of int, optional
        Required shape; ``None`` accepts any shape.
    broadcast_scalar : bool
        With ``shape``: a scalar is broadcast to ``shape`` (e.g. one ``G`` for all classes).

    Returns
    -------
    numpy.ndarray
        float64 array of shape ``shape`` (or the shape of ``value``).

    Raises
    ------
    ValueError
        If ``value`` is not numeric or has another shape.

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
    """Convert ``value`` to a float64 array (:func:`as_float_array`) and check its range.

    Parameters
    ----------
    value : array_like
        Scalar or array of numbers.
    name : str
        Argument name used in the error message.
    lower : float, optional
        Lower bound of the allowed range; ``None`` for no bound.
    lower_inclusive : bool
        Whether ``lower`` itself is allowed.
    allow_inf : bool
        Whether infinite values are allowed (NaN never is); with ``lower``, only ``+inf``.

    Returns
    -------
    numpy.ndarray
        float64 array with the shape of ``value`` (0-d for a scalar).

    Raises
    ------
    ValueError
        If an element is NaN, infinite (unless allowed) or below ``lower``.

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
    """Convert ``value`` to a boolean array, accepting only booleans or 0/1 values.

    Parameters
    ----------
    value : array_like
        Scalar or array of booleans (or the integers 0 and 1).
    name : str
        Argument name used in the error message.

    Returns
    -------
    numpy.ndarray
        bool array with the shape of ``value``.

    Raises
    ------
    ValueError
        If an element is neither a boolean nor 0 or 1.

    """
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
