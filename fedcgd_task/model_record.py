"""A model as a message carries it: one flat array per dtype in Flower's ``ArrayRecord``.

Flower writes each :class:`~flwr.app.Array` with ``np.save`` and reads it with ``np.load``, about
25-30 µs each here whatever its size; a model of L tensors sent as L Arrays costs L of each per
message.
Here a model travels as one Array per dtype (keyed by the dtype's name, in the order of its first
tensor), its tensors' values concatenated in the model's order. Names and shapes never travel:
the receiver knows the model and cuts the flat arrays by its own :func:`layout`, refusing any
that do not fit it (docs/design.md, "Screening replies"). No torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord
from numpy.typing import NDArray

from fedcgd_config.imports import first_line

#: A model's tensors in order: name -> (shape, dtype).
Layout = Mapping[str, tuple[tuple[int, ...], np.dtype[Any]]]


def layout(arrays: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
    """Name -> (shape, numpy dtype) of numpy arrays or torch tensors, in their order."""
    return {
        k: (tuple(v.shape), v.dtype if isinstance(v, np.ndarray) else _as_numpy(v.dtype))
        for k, v in arrays.items()
    }


def _as_numpy(dtype: Any) -> np.dtype[Any]:
    """The numpy dtype of a torch dtype (``torch.float32`` -> ``float32``)."""
    return np.dtype(str(dtype).removeprefix("torch."))


def model_record(arrays: Mapping[str, NDArray[Any]]) -> ArrayRecord:
    """``arrays`` (C-contiguous or not) as one flat Array per dtype, in their order."""
    groups: dict[np.dtype[Any], list[NDArray[Any]]] = {}
    for value in arrays.values():
        groups.setdefault(value.dtype, []).append(value.reshape(-1))
    return ArrayRecord({d.name: Array(np.concatenate(parts)) for d, parts in groups.items()})


def model_arrays(record: ArrayRecord, model: Layout) -> dict[str, NDArray[Any]]:
    """The arrays of ``model``'s layout cut from ``record`` (views of its flat arrays).

    Raises
    ------
    ValueError
        In one line: the record's dtypes, a flat array's dtype, shape or length do not fit
        ``model``, or numpy cannot read an Array's bytes.
    """
    sizes: dict[np.dtype[Any], int] = {}
    for shape, dtype in model.values():
        sizes[dtype] = sizes.get(dtype, 0) + math.prod(shape)
    names = {d.name: d for d in sizes}
    if list(record) != list(names):
        raise ValueError(f"model arrays by dtype {list(record)[:4]}; allowed: {list(names)}")
    flat: dict[np.dtype[Any], NDArray[Any]] = {}
    for key, array in record.items():
        try:
            value = array.numpy()
        except Exception as err:  # whatever numpy makes of bytes a device sent
            why = f"{type(err).__name__}: {first_line(err)}"
            raise ValueError(f"array {key!r} is unreadable: {why}") from None
        dtype = names[key]
        if not isinstance(value, np.ndarray):  # np.load reads .npz bytes as an NpzFile
            raise ValueError(f"array {key!r} is unreadable: {type(value).__name__}, not an array")
        if value.dtype != dtype or value.shape != (sizes[dtype],):
            raise ValueError(
                f"array {key!r} is {value.dtype} of shape {value.shape}; allowed: "
                f"{key} of shape ({sizes[dtype]},)"
            )
        flat[dtype] = value
    start = dict.fromkeys(sizes, 0)
    out: dict[str, NDArray[Any]] = {}
    for name, (shape, dtype) in model.items():
        at = start[dtype]
        start[dtype] = end = at + math.prod(shape)
        out[name] = flat[dtype][at:end].reshape(shape)
    return out
