"""The Array codec equals Flower's: the same bytes written, the same array read, or the same error.

The oracle is Flower's own ``Array(ndarray)`` / ``Array.numpy()`` (``np.save`` / ``np.load``).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord

from fedcgd_task.array_codec import (
    NUMPY_STYPE,
    array_from_numpy,
    array_record,
    numpy_arrays,
    numpy_from_array,
    torch_state,
)

DTYPES = ["float32", "float64", "float16", "int64", "int32", "int8", "uint8", "bool", "complex64"]
SHAPES = [(), (1,), (7,), (2, 3), (25, 1, 5), (1, 1, 1, 1), (3, 0), (0,), (2, 1, 4, 3)]


def _sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = np.asarray(rng.normal(size=shape) * 100)
    if dtype == "bool":
        return np.asarray(values > 0)
    return values.astype(dtype)


def _fields(array: Array) -> tuple[str, tuple[int, ...], str, bytes]:
    return array.dtype, tuple(array.shape), array.stype, array.data


def _same_reading(array: Array) -> None:
    """numpy_from_array(array) is what Flower reads: an equal array, or the same error type."""
    try:
        expected = array.numpy()
    except Exception as err:
        with pytest.raises(type(err)):
            numpy_from_array(array)
        return
    got = numpy_from_array(array)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()
    assert got.flags.writeable


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_written_bytes_equal_flowers(dtype: str, shape: tuple[int, ...]) -> None:
    values = _sample(dtype, shape)
    assert _fields(array_from_numpy(values)) == _fields(Array(values))
    _same_reading(array_from_numpy(values))


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_other_layouts_are_written_by_flower(dtype: str) -> None:
    base = _sample(dtype, (4, 6))
    for values in (np.asfortranarray(base), base[:, ::2], base.T, base.astype(">f4")):
        assert _fields(array_from_numpy(values)) == _fields(Array(values))
        _same_reading(array_from_numpy(values))


def _npy(values: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, values, allow_pickle=False)
    return buffer.getvalue()


def test_a_lying_array_reads_as_flower_reads_it() -> None:
    """Fields that disagree with the bytes, cut or padded bytes: Flower's reading, or its error."""
    values = _sample("float32", (2, 3))
    data = _npy(values)
    lies = [
        Array("float32", (3, 2), NUMPY_STYPE, data),  # the header says (2, 3)
        Array("float64", (2, 3), NUMPY_STYPE, data),  # the header says <f4
        Array("float32", (2, 3), NUMPY_STYPE, data[:-4]),  # cut
        Array("float32", (2, 3), NUMPY_STYPE, data + b"\0" * 4),  # padded
        Array("float32", (2, 3), NUMPY_STYPE, data.replace(b"False", b"True ")),  # Fortran
        Array("float32", (2, 3), NUMPY_STYPE, b"not npy"),
        Array("float32", (2, 3), NUMPY_STYPE, b""),
        Array("<f4", (2, 3), NUMPY_STYPE, data),  # not how str(dtype) spells it
        Array("object", (2, 3), NUMPY_STYPE, data),
        Array("float32", (2, 3), "torch.Tensor", data),
        Array("float32", (-1, 6), NUMPY_STYPE, data),
        Array("float32", (2**40, 2**40), NUMPY_STYPE, data),
        Array("V4", (2, 3), NUMPY_STYPE, data),
        Array("float32", (6,), NUMPY_STYPE, _npy(values.reshape(6).astype(">f4"))),
        Array("float32", (6,), NUMPY_STYPE, _npy(np.asfortranarray(values))),
    ]
    for array in lies:
        _same_reading(array)


def test_random_damage_reads_as_flower_reads_it() -> None:
    rng = np.random.default_rng(1)
    data = bytearray(_npy(_sample("float32", (5, 4))))
    for _ in range(300):
        damaged = bytearray(data)
        for position in rng.integers(0, 80, size=int(rng.integers(1, 4))):
            damaged[position] = int(rng.integers(0, 256))
        _same_reading(Array("float32", (5, 4), NUMPY_STYPE, bytes(damaged)))


def test_a_read_array_owns_its_memory() -> None:
    values = _sample("float32", (3, 4))
    array = array_from_numpy(values)
    got = numpy_from_array(array)
    got[0, 0] += 1.0  # writable, and the message's bytes are untouched
    assert numpy_from_array(array)[0, 0] == values[0, 0]


def test_records_equal_flowers() -> None:
    model = torch.nn.Sequential(torch.nn.Conv1d(1, 4, 3), torch.nn.GroupNorm(2, 4))
    state = model.state_dict()
    ours, theirs = array_record(state), ArrayRecord(state)
    assert list(ours) == list(theirs)
    assert all(_fields(ours[k]) == _fields(theirs[k]) for k in theirs)
    read = torch_state(theirs)
    expected = theirs.to_torch_state_dict()
    assert list(read) == list(expected)
    assert all(torch.equal(read[k], expected[k]) for k in expected)
    arrays = numpy_arrays(theirs)
    assert all(np.array_equal(arrays[k], v.numpy()) for k, v in theirs.items())
    numbered = {"a": np.arange(6, dtype=np.int64).reshape(2, 3), "b": np.ones(3)}
    mixed = array_record(numbered)
    assert all(_fields(mixed[k]) == _fields(Array(v)) for k, v in numbered.items())
