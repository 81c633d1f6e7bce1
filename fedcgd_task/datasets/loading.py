"""From a run-config ``dataset`` value to checked, cached splits: built-ins, lookup and calls.

:data:`BUILTIN_DATASETS` maps the built-in names to their data-set functions; any other value is
the researcher's reference (:func:`dataset_function`). :func:`call_dataset_function` passes the
keywords of :data:`DATA_KEYWORDS` the function's signature takes, and :func:`load_data` checks the
result (:func:`fedcgd_task.datasets.contract.check_data`) and caches it once per process. Nothing
here branches on a data-set name: the built-ins are entries of :data:`BUILTIN_DATASETS` like any
other function.
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

    A parameter named ``data_dir`` or ``settings`` (positional-or-keyword or keyword-only)
    takes that keyword; ``**kwargs`` takes ``data_dir``. A function without a readable
    signature (a C function) is called bare.

    Raises
    ------
    ValueError
        One line naming the key ``dataset``: the function needs other arguments.

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
    """The project's default settings (pyproject.toml) with data set ``name`` in ``data_dir``.

    What a data-set function that takes ``settings`` gets when it is loaded outside a run
    (:func:`load_data` without settings).
    """
    from fedcgd_task.settings import TaskSettings, default_run_config

    config = {**default_run_config(), DATASET_KEY: name, "data-dir": data_dir}
    return TaskSettings.from_run_config(config)


def call_dataset_function(
    function: DataFunction, name: str, data_dir: str, settings: TaskSettings | None = None
) -> object:
    """Call a data-set function with the keywords of :data:`DATA_KEYWORDS` its signature takes.

    Parameters
    ----------
    function : callable
        The data-set function.
    name : str
        The run-config value ``dataset`` (named in the messages).
    data_dir : str
        The absolute data folder, for ``data_dir``.
    settings : TaskSettings, optional
        For ``settings``; default: :func:`default_task_settings`.

    Raises
    ------
    FileNotFoundError
        When the function raised one (missing data files), its first line after the key.
    ValueError
        One line naming the key ``dataset``: the function needs other arguments, or it raised.

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

    The cache is safe because the result is a pure function of the arguments the function
    takes (the files do not change during a run); per-node mutable state belongs in
    ``context.state`` instead. It is keyed by (name, data_dir), and by the settings only for a
    function that takes them.

    Parameters
    ----------
    name : str
        The run-config value ``dataset``: a key of :data:`BUILTIN_DATASETS` or a reference to
        a data-set function.
    data_dir : str
        The absolute data folder (passed to functions that take ``data_dir``).
    settings : TaskSettings, optional
        The run's settings (passed to functions that take ``settings``); default:
        :func:`default_task_settings`.

    Returns
    -------
    train, test : DataSplit

    Raises
    ------
    ValueError, FileNotFoundError
        One line naming the key ``dataset`` (:func:`dataset_function`,
        :func:`call_dataset_function`, :func:`check_data`).

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
