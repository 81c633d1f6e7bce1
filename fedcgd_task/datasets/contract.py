"""The data-set contract (docs/bring-your-own.md) and its checks (:func:`check_data`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from fedcgd_task.datasets.splits import DataSplit, Inputs, NormalizedPixels
from fedcgd_task.imports import first_line

#: The run-config key that names the data-set function.
DATASET_KEY = "dataset"
#: What a data-set function must return (named in the error messages).
RETURN_CONTRACT = (
    "((x_train, y_train), (x_test, y_test)) or ((x_train, y_train), (x_test, y_test), num_classes)"
)

#: What a data-set function returns (checked by :func:`check_data`).
LoadedData: TypeAlias = tuple[Any, ...]
#: A data-set function: no argument or keywords among
#: :data:`~fedcgd_task.datasets.loading.DATA_KEYWORDS`, returning :data:`LoadedData`.
DataFunction: TypeAlias = Callable[..., Any]


def dataset_setting(name: str) -> str:
    """The setting a data-set message names: ``run-config key 'dataset' = <name>``."""
    return f"run-config key '{DATASET_KEY}' = {name!r}"


def _structure(value: object, depth: int = 2) -> str:
    """A short picture of a returned value: ``(ndarray, ndarray)``, ``int``."""
    if isinstance(value, tuple | list) and depth > 0:
        inner = ", ".join(_structure(v, depth - 1) for v in value[:4])
        inner += ", ..." if len(value) > 4 else ""
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return type(value).__name__


def _check_inputs(x: object, label: str, where: str) -> Inputs:
    """``x`` as float32 [N, *input_shape] (or the given NormalizedPixels), finite."""
    if isinstance(x, NormalizedPixels):
        if not x.all_finite():
            raise ValueError(f"{where}: {label} normalises pixels to values that are not finite")
        if len(x.shape) < 2:
            raise ValueError(f"{where}: {label} has shape {x.shape}; inputs need [N, *input_shape]")
        return x
    try:
        array = np.asarray(x)
    except Exception as err:  # ragged lists, tensors that need grad, ...
        raise ValueError(
            f"{where}: {label} cannot be read as a numeric array ({first_line(err)}); inputs "
            "must be real-valued arrays of shape [N, *input_shape]"
        ) from err
    if array.dtype.kind not in "biuf":
        raise ValueError(
            f"{where}: {label} has dtype {array.dtype}; inputs must be real numbers (float, or "
            "int / bool, converted to float32)"
        )
    if array.ndim < 2:
        raise ValueError(
            f"{where}: {label} has shape {array.shape}; inputs must have shape "
            "[N, *input_shape] with at least one input dimension (e.g. [N, 1] for one feature)"
        )
    with np.errstate(over="ignore"):
        values = array.astype(np.float32, copy=False)
    if not np.isfinite(values).all():
        raise ValueError(
            f"{where}: {label} holds values that are not finite in float32 (nan, inf, or "
            "beyond ±3.4e38); inputs must be finite"
        )
    return values


def _check_labels(y: object, label: str, where: str) -> npt.NDArray[Any]:
    """``y`` as an integer array of shape [N] (not yet range-checked)."""
    try:
        array = np.asarray(y)
    except Exception as err:
        raise ValueError(
            f"{where}: {label} cannot be read as an array ({first_line(err)}); labels must be "
            "integer arrays of shape [N]"
        ) from err
    if array.dtype.kind not in "iu":
        raise ValueError(
            f"{where}: {label} has dtype {array.dtype}; labels must have an integer dtype "
            "(e.g. int64) with values in [0, num_classes)"
        )
    if array.ndim != 1:
        raise ValueError(f"{where}: {label} has shape {array.shape}; labels must have shape [N]")
    return array


def _check_num_classes(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or int(value) < 2:
        raise ValueError(
            f"{where}: the function returned num_classes = {value!r}; it must be an int >= 2"
        )
    return int(value)


def check_data(result: object, name: str) -> tuple[DataSplit, DataSplit]:
    """Check what a data-set function returned and turn it into the training and test split.

    Returns two :class:`DataSplit` (inputs float32 or the given :class:`NormalizedPixels`, labels
    int64, C given or the largest label + 1). Raises a one-line ValueError naming ``dataset``
    (``name`` is its value), what is wrong and what is allowed.
    """
    where = dataset_setting(name)
    well_formed = (
        isinstance(result, tuple | list)
        and len(result) in (2, 3)
        and all(isinstance(part, tuple | list) and len(part) == 2 for part in result[:2])
    )
    if not well_formed:
        raise ValueError(
            f"{where}: the function returned {_structure(result)}; it must return {RETURN_CONTRACT}"
        )
    assert isinstance(result, tuple | list)
    given = _check_num_classes(result[2], where) if len(result) == 3 else None
    inputs: dict[str, Inputs] = {}
    labels: dict[str, npt.NDArray[Any]] = {}
    for part, split in zip(result[:2], ("train", "test"), strict=True):
        x = _check_inputs(part[0], f"x_{split}", where)
        y = _check_labels(part[1], f"y_{split}", where)
        if len(x) != len(y):
            raise ValueError(
                f"{where}: x_{split} holds {len(x)} samples but y_{split} {len(y)}; x and y "
                "must hold the same number N"
            )
        if len(y) == 0:
            raise ValueError(
                f"{where}: the {split} set holds no sample; each set needs at least one"
            )
        inputs[split], labels[split] = x, y
    shape_train, shape_test = inputs["train"].shape[1:], inputs["test"].shape[1:]
    if tuple(shape_train) != tuple(shape_test):
        raise ValueError(
            f"{where}: x_train holds inputs of shape {tuple(shape_train)} but x_test of "
            f"{tuple(shape_test)}; both sets must have the same input shape"
        )
    lowest = min(int(labels[s].min()) for s in labels)
    highest = max(int(labels[s].max()) for s in labels)
    num_classes = given if given is not None else highest + 1
    for split, y in labels.items():
        low, high = int(y.min()), int(y.max())
        bad = low if low < 0 else high
        if low < 0 or high >= num_classes:
            source = "num_classes" if given is not None else "the largest label + 1"
            raise ValueError(
                f"{where}: y_{split} holds label {bad}, outside [0, {num_classes}) "
                f"({source} = {num_classes}); labels must be in [0, num_classes)"
            )
    if num_classes < 2:
        raise ValueError(
            f"{where}: the labels hold one class only (labels {lowest} to {highest}); a "
            "classification task needs num_classes >= 2"
        )
    train, test = (
        DataSplit(inputs[s], labels[s].astype(np.int64), num_classes) for s in ("train", "test")
    )
    return train, test
