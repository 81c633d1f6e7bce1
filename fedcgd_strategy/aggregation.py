"""FedAvg aggregation and update flattening on plain numpy arrays (no flwr, no torch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray


def fedavg(
    states: Sequence[Mapping[str, NDArray[np.generic]]],
    weights: Sequence[float],
    reference: Mapping[str, NDArray[np.generic]] | None = None,
) -> dict[str, NDArray[np.generic]]:
    """Weighted average of model states, paper eq. (edgeagg): w = Σ_v α_v w_v, α_v = |D_v| / Σ
    |D_v'| over the uploads, in float64, cast to ``reference``'s dtypes (default: the first)."""  # noqa: D205, D209
    w = np.asarray(weights, dtype=np.float64)
    alpha = w / w.sum()
    template = states[0] if reference is None else reference
    out: dict[str, NDArray[np.generic]] = {}
    for key in template:
        out[key] = acc = np.zeros(np.shape(template[key]), dtype=np.float64)
        for state, a in zip(states, alpha, strict=True):
            acc += a * np.asarray(state[key], dtype=np.float64)
    return cast_like(out, template)


def cast_like(
    arrays: Mapping[str, NDArray[np.generic]], reference: Mapping[str, NDArray[np.generic]]
) -> dict[str, NDArray[np.generic]]:
    """``arrays`` in ``reference``'s order and dtypes, integers rounded; beyond a dtype's range:
    inf, which :func:`non_finite_arrays` finds (the round then keeps the model)."""  # noqa: D205, D209
    out: dict[str, NDArray[np.generic]] = {}
    with np.errstate(over="ignore", invalid="ignore"):
        for key, ref in reference.items():
            value, dtype = np.asarray(arrays[key]), np.asarray(ref).dtype
            out[key] = (np.rint(value) if np.issubdtype(dtype, np.integer) else value).astype(dtype)
    return out


def array_problem(array: object, ref: object, *, same_dtype: bool = True) -> str | None:
    """Why ``array`` cannot stand for the model's array ``ref`` (None: it can): not numeric, of
    another shape, of another dtype (``same_dtype`` False: only a float ``ref``'s), not finite."""  # noqa: D205, D209
    want = np.asarray(ref)
    if not isinstance(array, np.ndarray):
        return f"is {type(array).__name__}, not a numeric array"
    if array.dtype.kind not in "biuf":
        return f"has dtype {array.dtype}; the model's is {want.dtype}"
    if array.shape != want.shape:
        return f"has shape {list(array.shape)}; the model's is {list(want.shape)}"
    if array.dtype != want.dtype and (same_dtype or want.dtype.kind == "f"):
        return f"has dtype {array.dtype}; the model's is {want.dtype}"
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        return "is not finite"
    return None


def flatten_update(
    local: Mapping[str, NDArray[np.generic]], reference: Mapping[str, NDArray[np.generic]]
) -> NDArray[np.float32]:
    """Concatenate w_v − w over the floating-point arrays of a model, as float32[P]."""
    parts = [
        (np.asarray(local[k], dtype=np.float32) - np.asarray(v, dtype=np.float32)).ravel()
        for k, v in reference.items()
        if np.issubdtype(np.asarray(v).dtype, np.floating)
    ]
    if not parts:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate(parts)


def non_finite_arrays(state: Mapping[str, NDArray[np.generic]]) -> list[str]:
    """Names of the floating arrays of ``state`` holding a NaN or inf (empty: all finite)."""
    return [
        key
        for key, value in state.items()
        if np.issubdtype(np.asarray(value).dtype, np.floating)
        and not bool(np.all(np.isfinite(value)))
    ]
