"""From a run-config ``dataset`` value to checked, cached splits: built-ins, lookup and calls.

Built-ins are entries of :data:`BUILTIN_DATASETS` like any researcher's function; nothing here
branches on a data-set name.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any

from fedcgd_task.datasets.cifar import cifar10_data, cifar100_data
from fedcgd_task.datasets.contract import (
    DATASET_KEY,
    RETURN_CONTRACT,
    DataFunction,
    check_data,
    dataset_setting,
)
from fedcgd_task.datasets.digits import digits_data
from fedcgd_task.datasets.mnist1d import mnist1d_data
from fedcgd_task.datasets.splits import DataSplit
from fedcgd_task.imports import builtin_or_function, first_line

if TYPE_CHECKING:
    from fedcgd_task.settings import TaskSettings

#: The built-in data sets: run-config name -> data-set function (the package's contract).
BUILTIN_DATASETS: dict[str, DataFunction] = {
    "digits": digits_data,
    "cifar10": cifar10_data,
    "cifar100": cifar100_data,
    "mnist1d": mnist1d_data,
}
#: Keyword arguments a data-set function may take (its signature says which).
DATA_KEYWORDS: tuple[str, ...] = ("data_dir", "settings")


def dataset_function(name: str) -> DataFunction:
    """Return the data-set function ``name`` names: a built-in, or the researcher's reference.

    An unknown name, or a reference that cannot be imported or is not callable, raises a
    one-line ValueError (:func:`fedcgd_task.imports.builtin_or_function`).
    """
    contract = (
        "a function of no argument or of data_dir and / or settings keywords that returns "
        f"{RETURN_CONTRACT}"
    )
    return builtin_or_function(name, DATASET_KEY, BUILTIN_DATASETS, "data set", contract)


def data_keywords(function: DataFunction, name: str) -> frozenset[str]:
    """The :data:`DATA_KEYWORDS` ``function`` takes; refuse one that needs other arguments.

    A parameter named ``data_dir`` or ``settings`` takes that keyword, ``**kwargs`` takes
    ``data_dir``; a function without a readable signature is called bare. Raises ValueError (one
    line naming ``dataset``).
    """
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a C function): call it bare
        return frozenset()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    takes = {p.name for p in params if p.name in DATA_KEYWORDS and p.kind in named}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        takes.add("data_dir")
    required = [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_ONLY, *named)
        and not (p.name in DATA_KEYWORDS and p.kind in named)
    ]
    if required:
        raise ValueError(
            f"{dataset_setting(name)}: the function needs the argument(s) {', '.join(required)}; a "
            "data-set function takes no argument, or data_dir and / or settings keywords"
        )
    return frozenset(takes)


def default_task_settings(name: str, data_dir: str) -> TaskSettings:
    """The default settings with data set ``name`` in ``data_dir`` (for a load outside a run)."""
    from fedcgd_task.settings import TaskSettings, default_run_config

    config = {**default_run_config(), DATASET_KEY: name, "data-dir": data_dir}
    return TaskSettings.from_run_config(config)


def call_dataset_function(
    function: DataFunction, name: str, data_dir: str, settings: TaskSettings | None = None
) -> object:
    """Call a data-set function with the keywords of :data:`DATA_KEYWORDS` its signature takes.

    ``settings`` defaults to :func:`default_task_settings`. A FileNotFoundError the function
    raised (missing data files) is re-raised with its first line after the key; anything else is a
    one-line ValueError naming ``dataset``.
    """
    takes = data_keywords(function, name)
    kwargs: dict[str, Any] = {}
    if "data_dir" in takes:
        kwargs["data_dir"] = data_dir
    if "settings" in takes:
        kwargs["settings"] = default_task_settings(name, data_dir) if settings is None else settings
    try:
        return function(**kwargs)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{dataset_setting(name)}: {first_line(err)}") from err
    except Exception as err:  # the researcher's code: any failure becomes one line
        raise ValueError(
            f"{dataset_setting(name)}: the function raised {type(err).__name__}: {first_line(err)}"
        ) from err


def load_data(
    name: str, data_dir: str, settings: TaskSettings | None = None
) -> tuple[DataSplit, DataSplit]:
    """Load, check and cache the training and test split of a data set, once per process.

    The result is a pure function of the arguments the function takes, so it is cached by
    (name, data_dir), and by the settings for a function that takes them. Returns (train, test)
    :class:`DataSplit`; raises ValueError or FileNotFoundError (one line naming ``dataset``).
    """
    takes = data_keywords(dataset_function(name), name)
    if "settings" not in takes:
        return _load_checked(name, data_dir, None)
    if settings is None:
        settings = default_task_settings(name, data_dir)
    return _load_checked(name, data_dir, settings)


@functools.lru_cache(maxsize=2)
def _load_checked(
    name: str, data_dir: str, settings: TaskSettings | None
) -> tuple[DataSplit, DataSplit]:
    """:func:`load_data`'s cached part: call the function and check its result."""
    function = dataset_function(name)
    return check_data(call_dataset_function(function, name, data_dir, settings), name)


def load_dataset(
    name: str, data_dir: str, *, train: bool, settings: TaskSettings | None = None
) -> DataSplit:
    """The training (``train``) or test split of data set ``name`` (:func:`load_data`, cached)."""
    train_set, test_set = load_data(name, data_dir, settings)
    return train_set if train else test_set


def load_train_set(settings: TaskSettings) -> DataSplit:
    """Return the full training split of ``settings.dataset`` (cached per process)."""
    return load_dataset(settings.dataset, settings.data_dir, train=True, settings=settings)


def load_test_set(settings: TaskSettings) -> DataSplit:
    """Return the test split of ``settings.dataset`` (cached), for central evaluation."""
    return load_dataset(settings.dataset, settings.data_dir, train=False, settings=settings)
