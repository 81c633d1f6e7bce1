"""Array type aliases and argument validation shared by the channel modules."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
"""A numpy array of 64-bit floats (any shape)."""

BoolArray = npt.NDArray[np.bool_]
"""A numpy array of booleans (any shape)."""


def as_float_array(
    name: str,
    value: npt.ArrayLike,
    *,
    lower: float | None = None,
    lower_inclusive: bool = True,
    allow_inf: bool = False,
) -> FloatArray:
    """Convert ``value`` to a float64 array and check its range.

    Parameters
    ----------
    name : str
        Argument name used in the error message.
    value : array_like
        Scalar or array of numbers.
    lower : float, optional
        Lower bound of the allowed range; ``None`` for no bound.
    lower_inclusive : bool
        Whether ``lower`` itself is allowed.
    allow_inf : bool
        Whether ``+inf`` is allowed (NaN never is).

    Returns
    -------
    numpy.ndarray
        float64 array with the shape of ``value`` (0-d for a scalar).

    Raises
    ------
    ValueError
        If an element is NaN, infinite (unless allowed) or below ``lower``.

    """
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numeric, got {value!r}") from error
    if np.any(np.isnan(array)) or (not allow_inf and np.any(np.isinf(array))):
        allowed = "finite numbers or +inf" if allow_inf else "finite numbers"
        raise ValueError(f"{name} must contain {allowed}, got {_describe(array)}")
    if lower is not None:
        bad = array < lower if lower_inclusive else array <= lower
        if np.any(bad):
            relation = ">=" if lower_inclusive else ">"
            raise ValueError(f"{name} must be {relation} {lower}, got {_describe(array[bad])}")
    return array


def as_bool_array(name: str, value: npt.ArrayLike) -> BoolArray:
    """Convert ``value`` to a boolean array, accepting only booleans or 0/1 values.

    Parameters
    ----------
    name : str
        Argument name used in the error message.
    value : array_like
        Scalar or array of booleans (or the integers 0 and 1).

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
