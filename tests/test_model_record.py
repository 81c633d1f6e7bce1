"""A model as a message carries it (fedcgd_task/model_record.py): one flat Array per dtype."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord

from fedcgd_task.model_record import layout, model_arrays, model_record

MODEL = {
    "w": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32).T,  # not C-contiguous: read as w.T is
    "steps": np.array(7, np.int64),
    "b": np.array([5.0], np.float32),
}


def test_a_model_travels_as_one_flat_array_per_dtype_and_comes_back_equal() -> None:
    record = model_record(MODEL)
    assert list(record) == ["float32", "int64"]
    np.testing.assert_array_equal(record["float32"].numpy(), [1.0, 3.0, 2.0, 4.0, 5.0])
    np.testing.assert_array_equal(record["int64"].numpy(), [7])
    back = model_arrays(record, layout(MODEL))
    assert list(back) == list(MODEL)
    for name, value in MODEL.items():
        assert back[name].dtype == value.dtype and back[name].shape == value.shape
        np.testing.assert_array_equal(back[name], value)
    tensors = {k: torch.from_numpy(v.copy()) for k, v in MODEL.items()}
    assert layout(tensors) == layout(MODEL)  # a torch state dict has the same layout


def _npz() -> bytes:
    """An .npz archive's bytes (np.load reads them as an NpzFile, not an array)."""
    buffer = io.BytesIO()
    np.savez(buffer, x=np.zeros(1, np.int64))
    return buffer.getvalue()


def _with(key: str, array: Array) -> ArrayRecord:
    record = model_record(MODEL)
    record[key] = array
    return record


@pytest.mark.parametrize(
    ("record", "said"),
    [
        (model_record({"b": MODEL["b"]}), "model arrays by dtype ['float32']; allowed: "
         "['float32', 'int64']"),
        (model_record({"s": MODEL["steps"], "w": MODEL["w"], "b": MODEL["b"]}),
         "model arrays by dtype ['int64', 'float32']; allowed: ['float32', 'int64']"),
        (_with("float32", Array(np.zeros(5, np.float64))),
         "array 'float32' is float64 of shape (5,); allowed: float32 of shape (5,)"),
        (_with("float32", Array(np.zeros(4, np.float32))),
         "array 'float32' is float32 of shape (4,); allowed: float32 of shape (5,)"),
        (_with("int64", Array(np.zeros((1, 1), np.int64))),
         "array 'int64' is int64 of shape (1, 1); allowed: int64 of shape (1,)"),
        (_with("int64", Array(dtype="int64", shape=(1,), stype="numpy.ndarray",
                              data=b"\x93NUMPY junk")), "array 'int64' is unreadable: "),
        (_with("int64", Array(dtype="int64", shape=(1,), stype="numpy.ndarray", data=_npz())),
         "array 'int64' is unreadable: NpzFile, not an array"),
    ],
)  # fmt: skip
def test_a_record_that_does_not_fit_the_model_is_one_line(record, said) -> None:
    with pytest.raises(ValueError) as err:
        model_arrays(record, layout(MODEL))
    assert str(err.value).startswith(said) and "\n" not in str(err.value)
