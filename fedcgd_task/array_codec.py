"""Flower's records read and written directly: :class:`~flwr.app.Array` bytes, a record by name.

An Array of stype ``numpy.ndarray`` holds ``np.save``'s bytes: a header naming the dtype, the
order and the shape, then the data. Flower writes them through ``np.save`` and reads them
through ``np.load``, whose header parsing (``ast.literal_eval``) costs more than the copy for a
small model. Here the header numpy would write for a C-ordered array is built once per dtype and
shape: :func:`array_from_numpy` writes the very bytes ``np.save`` writes, and
:func:`numpy_from_array` reads an Array whose bytes are that header followed by exactly its data,
which ``np.load`` would read into the same array. Anything else (another order or layout, a
header numpy words differently, a dtype outside bool/int/float/complex, a length that does not
match) goes through Flower's own ``Array.numpy()``, so every Array a device sends reads as Flower
reads it. :func:`record_of` reads one record of a Message's content without Flower's per-type
views (``content.config_records`` builds a filtered copy at each access). docs/performance.md,
"Messages", gives the cost of each.
"""

from __future__ import annotations

import functools
import io
import math
from collections import OrderedDict
from collections.abc import Mapping
from typing import TypeVar

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from numpy.typing import NDArray

#: The stype of Arrays written by ``np.save`` (Flower's ``SType.NUMPY``).
NUMPY_STYPE = "numpy.ndarray"

#: Kinds of dtype read and written here (bool, signed and unsigned int, float, complex).
PLAIN_KINDS = frozenset("biufc")


@functools.lru_cache(maxsize=256)
def npy_header(dtype: np.dtype[np.generic], shape: tuple[int, ...]) -> bytes | None:
    """The ``.npy`` header ``np.save`` writes for a C-ordered array; None where it writes another.

    Version 1.0 of the format, the one ``np.save`` chooses unless the header exceeds 65,535
    bytes (then None).
    """
    header = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": shape,
    }
    buffer = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buffer, header)
    except ValueError:
        return None
    return buffer.getvalue()


def _plain(dtype: np.dtype[np.generic]) -> bool:
    """Whether ``dtype`` is a native-order bool, int, float or complex dtype."""
    return dtype.kind in PLAIN_KINDS and dtype.isnative and dtype.fields is None


def array_from_numpy(array: NDArray[np.generic]) -> Array:
    """``Array(array)`` (the same fields and bytes), without ``np.save`` for a C-ordered array."""
    header = npy_header(array.dtype, array.shape) if _plain(array.dtype) else None
    if header is None or not array.flags.c_contiguous:
        return Array(array)
    return Array(
        dtype=_dtype_name(array.dtype),
        shape=tuple(int(n) for n in array.shape),
        stype=NUMPY_STYPE,
        data=header + array.tobytes(),
    )


def numpy_from_array(array: Array) -> NDArray[np.generic]:
    """``array.numpy()``: a new, writable ndarray equal to what ``np.load`` reads from its bytes."""
    data, shape = array.data, array.shape
    if array.stype == NUMPY_STYPE and isinstance(data, bytes) and isinstance(shape, tuple):
        dtype = _named_dtype(array.dtype)
        header = None if dtype is None else _header_for(dtype, shape)
        if dtype is not None and header is not None:
            size = math.prod(shape) * dtype.itemsize
            if size and len(data) == len(header) + size and data.startswith(header):
                flat = np.frombuffer(data, dtype=dtype, offset=len(header))
                return flat.reshape(shape).copy()
    return array.numpy()


def _named_dtype(name: object) -> np.dtype[np.generic] | None:
    """The plain dtype ``name`` spells as ``str(dtype)`` does; None for anything else."""
    return _dtype_named(name) if isinstance(name, str) and len(name) <= 16 else None


@functools.lru_cache(maxsize=64)
def _dtype_named(name: str) -> np.dtype[np.generic] | None:
    try:
        dtype = np.dtype(name)
    except (TypeError, ValueError):
        return None
    return dtype if _plain(dtype) and _dtype_name(dtype) == name else None


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype: np.dtype[np.generic]) -> str:
    """``str(dtype)`` (numpy builds it anew at each call)."""
    return str(dtype)


def _header_for(dtype: np.dtype[np.generic], shape: tuple[object, ...]) -> bytes | None:
    """:func:`npy_header` for a shape of non-negative Python ints; None for any other shape."""
    if len(shape) > 32 or not all(type(n) is int and n >= 0 for n in shape):
        return None
    return npy_header(dtype, shape)


def array_record(state: Mapping[str, torch.Tensor | NDArray[np.generic]]) -> ArrayRecord:
    """``ArrayRecord(state)`` for a state dict of tensors or a dict of ndarrays (same bytes)."""
    arrays: dict[str, Array] = {}
    for name, value in state.items():
        values = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
        arrays[name] = array_from_numpy(np.asarray(values))
    return ArrayRecord(arrays)


def numpy_arrays(record: ArrayRecord) -> dict[str, NDArray[np.generic]]:
    """``{name: array.numpy()}`` of every Array in ``record``, in its order."""
    return {name: numpy_from_array(array) for name, array in record.items()}


def torch_state(record: ArrayRecord) -> OrderedDict[str, torch.Tensor]:
    """``record.to_torch_state_dict()``: a state dict of CPU tensors, in the record's order."""
    return OrderedDict(
        (name, torch.from_numpy(numpy_from_array(array))) for name, array in record.items()
    )


R = TypeVar("R", ArrayRecord, ConfigRecord, MetricRecord)


def record_of(content: RecordDict, name: str, kind: type[R]) -> R | None:
    """``content.<kind>_records.get(name)``: the record ``name`` if it is a ``kind``, else None."""
    record = content.get(name)
    return record if isinstance(record, kind) else None
