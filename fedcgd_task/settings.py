"""Typed, validated views of the run config shared by the ServerApp and the ClientApp.

Flower hands every app a flat ``context.run_config`` mapping (kebab-case keys, scalar values);
each key, its default, allowed values and meaning are defined once in :mod:`fedcgd_task.schema`.
:meth:`TaskSettings.from_run_config` reads the learning task's keys once and returns a frozen,
hashable :class:`TaskSettings`; the server calls it too, before any training, so a bad value
stops the run at start-up with a message that names the key, the value and what is allowed. The
local-training hyper-parameters τ, η, b are read by the server only
(:meth:`TrainingSettings.from_run_config`) and reach the devices every round through the round's
ConfigRecord (:meth:`TrainingSettings.to_config` / :func:`read_round_config`).

A data-set or model reference is checked here for its form only; it is imported, called and its
result checked before the run starts (``experiments.run.preflight``), so this module imports
neither flwr nor torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedcgd_task import keys
from fedcgd_task.schema import SCHEMA, defaults, read
from fedcgd_task.setting import Setting, check_value

#: A scalar value of a Flower ConfigRecord / run config as this project uses them.
ConfigValue = Any

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
#: Default of ``mnist1d-samples`` (16,000 training samples, 250 per device for V = 64).
DEFAULT_MNIST1D_SAMPLES = int(SCHEMA["mnist1d-samples"].default)


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
        One of :data:`fedcgd_task.schema.DATASETS`, or a reference to a data-set function.
    data_dir : str
        Absolute path of the data folder (``""`` in the run config resolved to ``<cwd>/data``).
    model : str
        Concrete model name (``"mlp"``, ``"cnn"`` or ``"resnet18gn"``; ``auto`` already
        resolved), or a reference to a model function.
    partition : str
        One of :data:`fedcgd_task.schema.PARTITIONS`.
    dirichlet_alpha : float
        Dirichlet concentration alpha (> 0).
    shards_per_device : int
        Shards per device l (>= 1).
    imbalance_ratio : float
        Imbalance ratio r = n2 / n1 (>= 1).
    mnist1d_samples : int
        Samples the ``mnist1d`` data set generates (the range of ``mnist1d-samples``, a multiple
        of 10, :mod:`fedcgd_task.schema`); read by that data set only.
    device : str
        Where the process trains and evaluates: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``
        (:func:`fedcgd_task.training.compute_device` resolves it).

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
    device: str = "auto"

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
        dataset = read(run_config, "dataset")
        model = read(run_config, "model")
        if model == "auto":
            model = AUTO_MODEL.get(dataset, AUTO_MODEL_OWN_DATASET)
        return cls(
            seed=read(run_config, "seed"),
            num_devices=read(run_config, "num-devices"),
            dataset=dataset,
            data_dir=str(resolve_data_dir(read(run_config, "data-dir"))),
            model=model,
            partition=read(run_config, "partition"),
            dirichlet_alpha=read(run_config, "dirichlet-alpha"),
            shards_per_device=read(run_config, "shards-per-device"),
            imbalance_ratio=read(run_config, "imbalance-ratio"),
            mnist1d_samples=read(run_config, "mnist1d-samples"),
            device=read(run_config, "device"),
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
            local_steps=read(run_config, "local-steps"),
            learning_rate=read(run_config, "learning-rate"),
            batch_size=read(run_config, "batch-size"),
        )

    def to_config(self) -> dict[str, ConfigValue]:
        """The ConfigRecord entries (record keys of :mod:`fedcgd_task.keys`)."""
        return {
            keys.LOCAL_STEPS: self.local_steps,
            keys.LEARNING_RATE: self.learning_rate,
            keys.BATCH_SIZE: self.batch_size,
        }


#: The settings of a round's ConfigRecord, by record key.
_ROUND_CONFIG: dict[str, Setting] = {
    keys.SERVER_ROUND: Setting(keys.SERVER_ROUND, 0, "the server round j", minimum=0),
    keys.LOCAL_STEPS: SCHEMA["local-steps"],
    keys.LEARNING_RATE: SCHEMA["learning-rate"],
    keys.BATCH_SIZE: SCHEMA["batch-size"],
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
    values: dict[str, Any] = {}
    for key, setting in _ROUND_CONFIG.items():
        if key not in config:
            raise ValueError(f"ConfigRecord key '{key}' is missing")
        values[key] = check_value(setting, config[key], f"ConfigRecord key '{key}'")
    server_round = values[keys.SERVER_ROUND]
    training = TrainingSettings(
        local_steps=values[keys.LOCAL_STEPS],
        learning_rate=values[keys.LEARNING_RATE],
        batch_size=values[keys.BATCH_SIZE],
    )
    return server_round, training


#: The project folder (in a source checkout: pyproject.toml, conf/, data/).
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


def default_run_config() -> dict[str, Any]:
    """The run config with every key at its default (:func:`fedcgd_task.schema.defaults`).

    Equal to ``[tool.flwr.app.config]`` of pyproject.toml, flattened as Flower flattens nested
    tables (``tests/test_schema.py`` checks it); read from the schema, so an installed wheel,
    which has no pyproject.toml, has it too.
    """
    return dict(defaults())


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
