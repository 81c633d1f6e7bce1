"""Typed, validated views of the run config shared by the ServerApp and the ClientApp.

Flower hands every app a flat ``context.run_config`` mapping (kebab-case keys, scalar values).
:meth:`TaskSettings.from_run_config` reads the learning task's keys below once, checks each value
and returns a frozen, hashable :class:`TaskSettings`; the server calls it too, before any
training, so a bad value stops the run at start-up with a message that names the key, the value
and what is allowed. The local-training hyper-parameters τ, η, b are read by the server only
(:meth:`TrainingSettings.from_run_config`) and reach the devices every round through the round's
ConfigRecord (:meth:`TrainingSettings.to_config` / :func:`read_round_config`).

=====================  ====================================================================
run-config key         meaning
=====================  ====================================================================
``seed``               run seed (int >= 0); every random draw of the client derives from it
``num-devices``        V, the number of devices (partitions), int >= 1
``dataset``            ``"digits"`` | ``"cifar10"`` | ``"cifar100"`` | ``"mnist1d"``, or the
                       researcher's data-set function ``"package.module:function"`` /
                       ``"/absolute/path/file.py:function"``: no argument, or ``data_dir``
                       and / or ``settings`` keywords, returns ``((x_train, y_train),
                       (x_test, y_test)[, num_classes])``, x float [N, *input_shape], y int
                       [N] in [0, C) (contract and checks: :mod:`fedcgd_task.datasets`)
``data-dir``           folder holding the CIFAR files and the generated mnist1d arrays (and
                       the ``data_dir`` argument of a data-set function); ``""`` means
                       ``<cwd>/data``, resolved against the working directory of the process
                       that parses the config
``mnist1d-samples``    N, the samples ``dataset = "mnist1d"`` generates (80 % training, 20 %
                       test): an int >= 100, a multiple of 10 (N / 10 per digit); read by the
                       mnist1d data set only
``model``              ``"auto"`` | ``"mlp"`` | ``"cnn"`` | ``"resnet18gn"`` | ``"cnn1d"``, or
                       the researcher's model function ``"package.module:function"`` /
                       ``"/absolute/path/file.py:function"``: ``(num_classes, input_shape) ->
                       torch.nn.Module`` giving logits [N, C] (:mod:`fedcgd_task.models`);
                       ``auto`` picks mlp for digits, cnn for cifar10, resnet18gn for
                       cifar100, cnn1d for mnist1d and mlp (sized from the input shape) for
                       any other data set
``partition``          ``"dirichlet"`` | ``"shards"``
``dirichlet-alpha``    concentration alpha of Dir(alpha p), float > 0
``shards-per-device``  l, shards per device for the sort-and-partition split, int >= 1
``imbalance-ratio``    r = n2 / n1 of the training set, float >= 1
``batch-size``         b, int >= 1 (:class:`TrainingSettings`)
``local-steps``        tau, SGD steps per round, int >= 1 (:class:`TrainingSettings`)
``learning-rate``      eta, float > 0 (:class:`TrainingSettings`)
=====================  ====================================================================

Other keys in the run config (the server's settings) are ignored here. A reference is checked
here for its form only; it is imported, called and its result checked before the run starts
(``experiments.run.preflight``), so this module imports neither flwr nor torch.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedcgd_task import keys
from fedcgd_task.imports import REFERENCE_FORMS, check_reference, is_reference

#: A scalar value of a Flower ConfigRecord / run config as this project uses them.
ConfigValue = Any

#: Built-in data-set names (the keys of :data:`fedcgd_task.datasets.BUILTIN_DATASETS`).
DATASETS: tuple[str, ...] = ("digits", "cifar10", "cifar100", "mnist1d")
#: Built-in model names (:data:`fedcgd_task.models.BUILTIN_MODELS` and ``auto``, resolved
#: through :data:`AUTO_MODEL`).
MODELS: tuple[str, ...] = ("auto", "mlp", "cnn", "resnet18gn", "cnn1d")
#: The model ``model = "auto"`` selects for each built-in dataset.
AUTO_MODEL: dict[str, str] = {
    "digits": "mlp",
    "cifar10": "cnn",
    "cifar100": "resnet18gn",
    "mnist1d": "cnn1d",
}
#: The model ``model = "auto"`` selects for the researcher's own data set: the MLP
#: Flatten -> Linear(prod(input_shape), 64) -> ReLU -> Linear(64, C), which fits any input shape.
AUTO_MODEL_OWN_DATASET = "mlp"
#: Sub-folder of the working directory used when ``data-dir`` is empty.
DEFAULT_DATA_SUBDIR = "data"
#: Partition schemes (see :mod:`fedcgd_task.partition`).
PARTITIONS: tuple[str, ...] = ("dirichlet", "shards")
#: Default of ``mnist1d-samples``: 16,000 training samples, 250 per device for V = 64 (and
#: 125 per shard with the paper's two shards per device), and 4,000 test samples.
DEFAULT_MNIST1D_SAMPLES = 20_000
#: Smallest ``mnist1d-samples``: 10 samples of each digit, 80 training and 20 test samples.
MIN_MNIST1D_SAMPLES = 100
#: Largest ``mnist1d-samples``: generating takes about 0.8 kB of memory and 0.18 ms per sample
#: (measured: 20,000 samples 4 s, 200,000 samples 36 s and 140 MB more), and every process
#: that trains (each Ray worker) keeps the 168 bytes per sample of the arrays: 10^6 samples
#: are about 0.8 GB and 3 minutes to generate, 168 MB per process.
MAX_MNIST1D_SAMPLES = 1_000_000
#: Longest string value of any run-config key (PATH_MAX, the longest path Linux opens).
MAX_SETTING_CHARS = 4096
#: Longest folder or file name in a path value (NAME_MAX, in UTF-8 bytes).
MAX_NAME_BYTES = 255
#: The mnist1d generator makes ``mnist1d-samples`` / MNIST1D_CLASSES samples of each digit.
MNIST1D_CLASSES = 10


@dataclass(frozen=True)
class TaskSettings:
    """The client's part of the run config, validated; hashable (used as a cache key).

    Attributes
    ----------
    seed : int
        Seed of the run.
    num_devices : int
        Number of devices V (>= 1).
    dataset : str
        One of :data:`DATASETS`, or a reference to a data-set function.
    data_dir : str
        Absolute path of the data folder (``""`` in the run config resolved to ``<cwd>/data``).
    model : str
        Concrete model name (``"mlp"``, ``"cnn"`` or ``"resnet18gn"``; ``auto`` already
        resolved), or a reference to a model function.
    partition : str
        One of :data:`PARTITIONS`.
    dirichlet_alpha : float
        Dirichlet concentration alpha (> 0).
    shards_per_device : int
        Shards per device l (>= 1).
    imbalance_ratio : float
        Imbalance ratio r = n2 / n1 (>= 1).
    mnist1d_samples : int
        Samples the ``mnist1d`` data set generates (>= :data:`MIN_MNIST1D_SAMPLES`, a multiple
        of :data:`MNIST1D_CLASSES`); read by that data set only.

    """

    seed: int
    num_devices: int
    dataset: str
    data_dir: str
    model: str
    partition: str
    dirichlet_alpha: float
    shards_per_device: int
    imbalance_ratio: float
    mnist1d_samples: int = DEFAULT_MNIST1D_SAMPLES

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> TaskSettings:
        """Read and validate the client keys of a Flower run config.

        Parameters
        ----------
        run_config : Mapping[str, Any]
            ``context.run_config`` (flat, kebab-case keys). Keys not listed in the module
            docstring are ignored.

        Returns
        -------
        TaskSettings
            The validated settings, with ``data-dir`` made absolute and ``model = "auto"``
            resolved for the dataset.

        Raises
        ------
        ValueError
            If a key is missing or a value has the wrong type or is out of range; the message
            names the key, the bad value and what is allowed.

        """
        dataset = read_name_or_reference(run_config, "dataset", DATASETS)
        model = read_name_or_reference(run_config, "model", MODELS)
        if model == "auto":
            model = AUTO_MODEL.get(dataset, AUTO_MODEL_OWN_DATASET)
        data_dir_raw = require_key(run_config, "data-dir")
        if not isinstance(data_dir_raw, str):
            raise ValueError(
                f"run-config key 'data-dir' must be a string (a folder path, or \"\" for "
                f"<cwd>/{DEFAULT_DATA_SUBDIR}); got {data_dir_raw!r}"
            )
        check_path_names(data_dir_raw, "data-dir")
        data_dir = resolve_data_dir(data_dir_raw)
        return cls(
            seed=read_seed(run_config),
            num_devices=read_int(run_config, "num-devices", minimum=1),
            dataset=dataset,
            data_dir=str(data_dir),
            model=model,
            partition=read_choice(run_config, "partition", PARTITIONS),
            dirichlet_alpha=read_real(run_config, "dirichlet-alpha", minimum=0.0, strict=True),
            shards_per_device=read_int(run_config, "shards-per-device", minimum=1),
            imbalance_ratio=read_real(run_config, "imbalance-ratio", minimum=1.0, strict=False),
            mnist1d_samples=read_mnist1d_samples(run_config),
        )


@dataclass(frozen=True)
class TrainingSettings:
    """Local-training hyper-parameters, sent by the server with every stats and train message.

    Attributes
    ----------
    local_steps : int
        τ, SGD steps per round (>= 1).
    learning_rate : float
        η, SGD learning rate (> 0).
    batch_size : int
        b, mini-batch size (>= 1).

    """

    local_steps: int
    learning_rate: float
    batch_size: int

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> TrainingSettings:
        """Read ``local-steps``, ``learning-rate`` and ``batch-size`` from the run config."""
        return cls(
            local_steps=read_int(run_config, "local-steps", minimum=1),
            learning_rate=read_real(run_config, "learning-rate", minimum=0.0, strict=True),
            batch_size=read_int(run_config, "batch-size", minimum=1),
        )

    def to_config(self) -> dict[str, ConfigValue]:
        """The ConfigRecord entries (record keys of :mod:`fedcgd_task.keys`)."""
        return {
            keys.LOCAL_STEPS: self.local_steps,
            keys.LEARNING_RATE: self.learning_rate,
            keys.BATCH_SIZE: self.batch_size,
        }


def read_round_config(config: Mapping[str, Any]) -> tuple[int, TrainingSettings]:
    """Read the server round and τ, η, b from a round's ConfigRecord.

    Parameters
    ----------
    config : mapping
        The ConfigRecord the server sends (keys :data:`fedcgd_task.keys.SERVER_ROUND`,
        :data:`fedcgd_task.keys.LOCAL_STEPS`, :data:`fedcgd_task.keys.LEARNING_RATE`,
        :data:`fedcgd_task.keys.BATCH_SIZE`).

    Returns
    -------
    (int, TrainingSettings)
        The server round j >= 0 and the validated hyper-parameters.

    Raises
    ------
    ValueError
        Naming the missing or bad ConfigRecord key, the value and what is allowed.

    """

    def where(key: str) -> str:
        return f"ConfigRecord key '{key}'"

    server_round = _read_int(config, keys.SERVER_ROUND, 0, where)
    training = TrainingSettings(
        local_steps=_read_int(config, keys.LOCAL_STEPS, 1, where),
        learning_rate=_read_real(config, keys.LEARNING_RATE, 0.0, True, where),
        batch_size=_read_int(config, keys.BATCH_SIZE, 1, where),
    )
    return server_round, training


#: The project folder (its pyproject.toml holds the defaults of every run-config key).
PROJECT_DIR = Path(__file__).resolve().parents[1]


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested tables to dotted keys, as Flower flattens ``[tool.flwr.app.config]``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def set_once(table: dict[str, Any], name: str, value: Any, *, key: str, clash: str) -> None:
    """``table[name] = value``, refusing a run-config key that is given twice.

    Parameters
    ----------
    table : dict
        Where ``name`` goes (a flat run config, or a parameter table).
    name, value
        The entry.
    key : str
        The run-config key as the user wrote it (named in the error).
    clash : str
        What the error says about the two places, e.g. ``"is given twice (1 and 2)"``.

    Raises
    ------
    ValueError
        ``run-config key '<key>' <clash>; give it once`` when ``name`` is in ``table`` already.
    """
    if name in table:
        raise ValueError(f"run-config key {key!r} {clash}; give it once")
    table[name] = value


def default_run_config(project_dir: Path = PROJECT_DIR) -> dict[str, Any]:
    """``[tool.flwr.app.config]`` of the app, flattened as Flower flattens nested tables."""
    data = tomllib.loads((project_dir / "pyproject.toml").read_text())
    return flatten(data["tool"]["flwr"]["app"]["config"])


def resolve_data_dir(data_dir: str) -> Path:
    """Return the absolute data folder for a ``data-dir`` run-config value.

    Parameters
    ----------
    data_dir : str
        The run-config value; ``""`` means ``<current working directory>/data``.

    Returns
    -------
    pathlib.Path
        Absolute path (``~`` expanded). The folder need not exist.

    """
    if data_dir == "":
        return (Path.cwd() / DEFAULT_DATA_SUBDIR).resolve()
    return Path(data_dir).expanduser().resolve()


def _run_config_key(key: str) -> str:
    return f"run-config key '{key}'"


def require_key(run_config: Mapping[str, Any], key: str) -> Any:
    """Return ``run_config[key]``; a ValueError names a missing key or too long a string.

    Every string value is at most :data:`MAX_SETTING_CHARS` characters (nothing the app reads
    is longer: the longest are paths).
    """
    if key not in run_config:
        raise ValueError(
            f"run-config key '{key}' is missing; it must be set in [tool.flwr.app.config] of "
            "pyproject.toml or with --run-config"
        )
    value = run_config[key]
    if isinstance(value, str) and len(value) > MAX_SETTING_CHARS:
        raise ValueError(
            f"run-config key '{key}' holds {len(value)} characters ({value[:40]!r}...); "
            f"allowed: at most {MAX_SETTING_CHARS}"
        )
    return value


def check_path_names(value: str, key: str, *, label: str | None = None) -> str:
    """Return the path ``value`` if it is printable and its names fit :data:`MAX_NAME_BYTES`.

    ``label`` names the setting in the errors (default: ``run-config key '<key>'``; e.g.
    ``"--out"`` for a command-line option).

    Raises
    ------
    ValueError
        Naming ``key``: a control character (a newline would break every one-line message
        that names the path; NUL no system call takes), a name that is not valid UTF-8 (a
        lone surrogate, as Python decodes such a name: no TOML file or Flower message holds
        it), or the first name that is too long (no file system takes it).
    """
    where = label or f"run-config key '{key}'"
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise ValueError(
            f"{where} = {value[:80]!r} holds a control character (a newline, a "
            "tab, NUL, ...); allowed: a path of printable characters"
        )
    if any(0xD800 <= ord(char) <= 0xDFFF for char in value):
        raise ValueError(
            f"{where} = {value[:80]!r} holds a name that is not valid UTF-8; "
            "allowed: a path of Unicode characters (rename the folder)"
        )
    for name in Path(value).parts:
        size = len(name.encode("utf-8", errors="surrogateescape"))
        if size > MAX_NAME_BYTES:
            raise ValueError(
                f"{where} holds a folder or file name of {size} bytes "
                f"({name[:40]!r}...); allowed: at most {MAX_NAME_BYTES} bytes per name"
            )
    return value


def _read_int(
    mapping: Mapping[str, Any], key: str, minimum: int | None, where: Callable[[str], str]
) -> int:
    if key not in mapping:
        raise ValueError(f"{where(key)} is missing")
    value = mapping[key]
    allowed = "an integer" if minimum is None else f"an integer >= {minimum}"
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    if not bad and isinstance(value, float):
        bad = not (math.isfinite(value) and value.is_integer())
    if bad or (minimum is not None and value < minimum):
        raise ValueError(f"{where(key)} must be {allowed}; got {value!r}")
    return int(value)


def _read_real(
    mapping: Mapping[str, Any],
    key: str,
    minimum: float,
    strict: bool,
    where: Callable[[str], str],
) -> float:
    if key not in mapping:
        raise ValueError(f"{where(key)} is missing")
    value = mapping[key]
    relation = ">" if strict else ">="
    allowed = f"a finite number {relation} {minimum:g}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where(key)} must be {allowed}; got {value!r}")
    number = float(value)
    too_small = number <= minimum if strict else number < minimum
    if not math.isfinite(number) or too_small:
        raise ValueError(f"{where(key)} must be {allowed}; got {value!r}")
    return number


#: Largest run seed: torch's generators take a signed 64-bit seed.
MAX_SEED = 2**63 - 1


def read_seed(run_config: Mapping[str, Any]) -> int:
    """The run seed: an int in [0, 2**63 - 1]."""
    seed = read_int(run_config, "seed", minimum=0)
    if seed > MAX_SEED:
        raise ValueError(f"run-config key 'seed' must be an int in [0, {MAX_SEED}]; got {seed}")
    return seed


def read_mnist1d_samples(run_config: Mapping[str, Any]) -> int:
    """``mnist1d-samples``: an int >= :data:`MIN_MNIST1D_SAMPLES` and a multiple of 10.

    The generator makes N // 10 samples of each digit, so a multiple of 10 is the number of
    samples it returns (anything else would silently lose the remainder).
    """
    key = "mnist1d-samples"
    allowed = (
        f"an integer in [{MIN_MNIST1D_SAMPLES}, {MAX_MNIST1D_SAMPLES}] and a multiple of "
        f"{MNIST1D_CLASSES} (N / {MNIST1D_CLASSES} samples of each digit; generating takes "
        "about 0.8 kB of memory per sample)"
    )
    value = require_key(run_config, key)
    try:
        samples = _read_int(run_config, key, MIN_MNIST1D_SAMPLES, _run_config_key)
    except ValueError:
        raise ValueError(f"run-config key '{key}' must be {allowed}; got {value!r}") from None
    if samples % MNIST1D_CLASSES or samples > MAX_MNIST1D_SAMPLES:
        raise ValueError(f"run-config key '{key}' must be {allowed}; got {value!r}")
    return samples


def read_int(run_config: Mapping[str, Any], key: str, *, minimum: int | None) -> int:
    """Read an integer (an integral float such as ``64.0`` is accepted) with a lower bound."""
    require_key(run_config, key)
    return _read_int(run_config, key, minimum, _run_config_key)


def read_real(run_config: Mapping[str, Any], key: str, *, minimum: float, strict: bool) -> float:
    """Read a finite real number ``> minimum`` (strict) or ``>= minimum``."""
    require_key(run_config, key)
    return _read_real(run_config, key, minimum, strict, _run_config_key)


def read_name_or_reference(
    run_config: Mapping[str, Any], key: str, allowed: tuple[str, ...]
) -> str:
    """Read a string that is one of ``allowed`` or a reference to the researcher's function.

    A reference (a value with a colon) is checked for its form only
    (:func:`fedcgd_task.imports.check_reference`); nothing is imported here.
    """
    value = require_key(run_config, key)
    if isinstance(value, str) and value in allowed:
        return value
    if isinstance(value, str) and is_reference(value):
        check_reference(value, key)
        return value
    options = ", ".join(f'"{a}"' for a in allowed)
    raise ValueError(
        f"run-config key '{key}' must be one of {options} or a function "
        f"{REFERENCE_FORMS}; got {value!r}"
    )


def read_choice(run_config: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    """Read a string that must be one of ``allowed``."""
    value = require_key(run_config, key)
    if not isinstance(value, str) or value not in allowed:
        options = ", ".join(f'"{a}"' for a in allowed)
        raise ValueError(f"run-config key '{key}' must be one of {options}; got {value!r}")
    return value
