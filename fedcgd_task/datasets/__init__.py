"""Data sets behind one contract (docs/bring-your-own.md): its checks and the per-process cache.

``dataset`` names a built-in (:data:`~fedcgd_config.schema.BUILTIN_DATASETS`) or the researcher's
function. Imports neither torch nor flwr.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt

from fedcgd_config.imports import builtin_or_function, first_line
from fedcgd_config.schema import BUILTIN_DATASETS as BUILTIN_DATASETS

if TYPE_CHECKING:
    import torch

    from fedcgd_config.settings import TaskSettings


#: Keyword arguments a data-set function may take (its signature says which).
DATA_KEYWORDS: tuple[str, ...] = ("data_dir", "settings")
RETURN_CONTRACT = (
    "((x_train, y_train), (x_test, y_test)) or ((x_train, y_train), (x_test, y_test), num_classes)"
)
#: A data-set function: no argument or keywords among :data:`DATA_KEYWORDS`.
DataFunction: TypeAlias = Callable[..., Any]


@dataclass(frozen=True, eq=False)
class NormalizedPixels:
    """``uint8`` images [N, C, H, W] read as float32 (pixel * scale - mean_c) / std_c when used
    (CIFAR: 150 MB instead of 614 MB)."""  # noqa: D205, D209

    pixels: npt.NDArray[np.uint8]
    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def shape(self) -> tuple[int, ...]:  # noqa: D102 - [N, C, H, W]
        return tuple(int(s) for s in self.pixels.shape)

    def __len__(self) -> int:
        return int(self.pixels.shape[0])

    def tensor(self, rows: npt.NDArray[np.int64] | None = None) -> torch.Tensor:
        """The normalised images, all or ``rows`` (repeats allowed), as float32 [n, C, H, W]."""
        import torch

        pixels = self.pixels if rows is None else self.pixels[rows]
        x = torch.from_numpy(np.ascontiguousarray(pixels)).to(torch.float32) * self.scale
        mean = torch.tensor(self.mean, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(1, -1, 1, 1)
        return (x - mean) / std


#: The inputs of a :class:`DataSplit`: float32 values, stored as such or as normalised pixels.
Inputs: TypeAlias = npt.NDArray[np.float32] | NormalizedPixels


@dataclass(frozen=True, eq=False)
class DataSplit:
    """One checked split: finite ``inputs`` [N, *input_shape], int64 ``labels`` [N] in [0, C)."""

    inputs: Inputs
    labels: npt.NDArray[np.int64]
    num_classes: int

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def input_shape(self) -> tuple[int, ...]:
        """``x.shape[1:]``."""
        return tuple(int(s) for s in self.inputs.shape[1:])

    def tensors(self, indices: npt.ArrayLike | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (float32) and labels (int64) as tensors, of ``indices`` (may repeat) or all."""
        import torch

        rows = None if indices is None else np.asarray(indices, dtype=np.int64)
        if isinstance(self.inputs, NormalizedPixels):
            x = self.inputs.tensor(rows)
        else:
            chosen = self.inputs if rows is None else self.inputs[rows]
            x = torch.from_numpy(np.array(chosen, dtype=np.float32))
        labels = self.labels if rows is None else self.labels[rows]
        return x, torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64))


def dataset_setting(name: str) -> str:
    """``run-config key 'dataset' = <name>``, the start of a data-set error."""
    return f"run-config key 'dataset' = {name!r}"


def _as_array(value: object, label: str, where: str, kinds: str, must: str) -> npt.NDArray[Any]:
    """``value`` as an array of dtype kind in ``kinds``, else a one-line ValueError."""
    try:
        array = np.asarray(value)
    except Exception as err:  # a tensor needing grad or on a GPU, a ragged list
        raise ValueError(
            f"{where}: {label} cannot be read as an array ({first_line(err)}); {must}"
        ) from None
    if array.dtype.kind not in kinds:
        raise ValueError(f"{where}: {label} has dtype {array.dtype}; {must}")
    return array


def check_data(result: object, name: str) -> tuple[DataSplit, DataSplit]:
    """The (train, test) splits of what a data-set function returned: float32 inputs (or
    :class:`NormalizedPixels`), int64 labels, C given or largest label + 1; ValueError, one line."""  # noqa: D205, D209
    where = dataset_setting(name)
    if not (
        isinstance(result, tuple | list)
        and len(result) in (2, 3)
        and all(isinstance(part, tuple | list) and len(part) == 2 for part in result[:2])
    ):
        parts = f" of ({', '.join(type(p).__name__ for p in result)})" if isinstance(
            result, tuple) and len(result) <= 3 else ""  # fmt: skip
        raise ValueError(
            f"{where}: the function returned a {type(result).__name__}{parts}; it must return "
            + RETURN_CONTRACT
        )
    given = result[2] if len(result) == 3 else None
    if given is not None and (isinstance(given, bool) or not isinstance(given, int | np.integer)):
        raise ValueError(f"{where}: the function returned num_classes = {given!r}; not an int")
    inputs: dict[str, Inputs] = {}
    labels: dict[str, npt.NDArray[Any]] = {}
    must_x = "inputs must be real-valued arrays of shape [N, *input_shape]"
    must_y = "labels must be integer arrays of shape [N] with values in [0, num_classes)"
    for (x, y), split in zip(result[:2], ("train", "test"), strict=True):
        if not isinstance(x, NormalizedPixels):
            with np.errstate(over="ignore"):  # beyond float32: inf, refused just below
                x = _as_array(x, f"x_{split}", where, "biuf", must_x).astype(np.float32, copy=False)
            if not np.isfinite(x).all():
                raise ValueError(f"{where}: x_{split} holds values that are not finite in float32")
        y = _as_array(y, f"y_{split}", where, "iu", must_y)
        if len(x.shape) < 2 or 0 in x.shape[1:] or y.ndim != 1 or len(x) != len(y) or not len(y):
            raise ValueError(
                f"{where}: x_{split} has shape {tuple(x.shape)} and y_{split} {y.shape}; {must_x}, "
                f"{must_y}, the same N >= 1"
            )
        inputs[split], labels[split] = x, y
    shapes = [tuple(inputs[s].shape[1:]) for s in ("train", "test")]
    if shapes[0] != shapes[1]:
        raise ValueError(
            f"{where}: x_train holds inputs of shape {shapes[0]} but x_test of {shapes[1]}; both "
            "sets must have the same input shape"
        )
    top = max(int(y.max()) for y in labels.values()) + 1
    num_classes = int(given) if given is not None else top
    if num_classes < 2:
        origin = "returned" if given is not None else "largest label + 1"
        raise ValueError(
            f"{where}: num_classes = {num_classes} ({origin}); a classification task needs >= 2"
        )
    for split, y in labels.items():
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= num_classes:
            raise ValueError(
                f"{where}: y_{split} holds label {low if low < 0 else high}, outside [0, "
                f"{num_classes}); labels must be in [0, num_classes)"
            )
    train, test = (DataSplit(inputs[s], labels[s].astype(np.int64), num_classes) for s in labels)
    return train, test


def dataset_function(name: str) -> DataFunction:
    """The data-set function ``name`` names: a built-in, or the researcher's reference."""
    builtins = {key: entry.function for key, entry in BUILTIN_DATASETS.items()}
    contract = (
        "a function of no argument or of data_dir and / or settings keywords that returns "
        f"{RETURN_CONTRACT}"
    )
    return builtin_or_function(name, "dataset", builtins, "data set", contract)


def data_keywords(function: DataFunction, name: str) -> frozenset[str]:
    """The :data:`DATA_KEYWORDS` ``function`` takes (``**kwargs``: ``data_dir``), or ValueError."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read (a C function): call it bare
        return frozenset()
    params = list(signature.parameters.values())
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    takes = {p.name for p in params if p.name in DATA_KEYWORDS and p.kind in named}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        takes.add("data_dir")
    try:
        signature.bind(**dict.fromkeys(takes))
    except TypeError as err:  # it needs another argument
        raise ValueError(
            f"{dataset_setting(name)}: the function needs another argument ({err}); a "
            "data-set function takes no argument, or data_dir and / or settings keywords"
        ) from None
    return frozenset(takes)


def load_data(
    name: str, data_dir: str, settings: TaskSettings | None = None
) -> tuple[DataSplit, DataSplit]:
    """The checked (train, test) splits, cached per process (``settings`` count only for a
    function that takes them); the function's error becomes one line naming ``dataset``."""  # noqa: D205, D209
    takes = "settings" in data_keywords(dataset_function(name), name)
    return _load_checked(name, data_dir, settings if takes else None)


@functools.lru_cache(maxsize=2)
def _load_checked(
    name: str, data_dir: str, settings: TaskSettings | None
) -> tuple[DataSplit, DataSplit]:
    """:func:`load_data` cached, the generators seeded with the run's seed (else 0)."""
    from fedcgd_task.training import seeded_generators  # torch: only where data is loaded

    function = dataset_function(name)
    kwargs = {"data_dir": data_dir, "settings": settings}
    takes = data_keywords(function, name)
    try:
        with seeded_generators(0 if settings is None else settings.seed):
            result = function(**{k: v for k, v in kwargs.items() if k in takes})
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{dataset_setting(name)}: {first_line(err)}") from err
    except Exception as err:  # the researcher's code: any failure becomes one line
        raise ValueError(
            f"{dataset_setting(name)}: the function raised {type(err).__name__}: {first_line(err)}"
        ) from err
    return check_data(result, name)


def load_train_set(settings: TaskSettings) -> DataSplit:
    """The training split (cached per process)."""
    return load_data(settings.dataset, settings.data_dir, settings)[0]


def load_test_set(settings: TaskSettings) -> DataSplit:
    """The test split (cached per process)."""
    return load_data(settings.dataset, settings.data_dir, settings)[1]
