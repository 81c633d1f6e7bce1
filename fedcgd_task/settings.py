"""Typed, validated views of the run config shared by the ServerApp and the ClientApp.

Each key, its default, allowed values and meaning are defined once in :mod:`fedcgd_task.schema`;
τ, η, b reach the devices every round through the round's ConfigRecord. Imports neither flwr
nor torch (a data-set or model reference is checked for its form only).
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

    Fields are the schema's keys in snake case (:mod:`fedcgd_task.schema`), except that
    ``data_dir`` is absolute and ``model`` has ``"auto"`` resolved.
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
        """Read and validate the client keys of ``context.run_config``; other keys are ignored.

        Raises ValueError naming the key, the bad value and what is allowed.
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
    """Local-training hyper-parameters τ (``local_steps``), η and b, sent with every round."""

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
    """Read the server round j >= 0 and τ, η, b from a round's ConfigRecord.

    Raises ValueError naming the missing or bad ConfigRecord key, the value and what is allowed.
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

    Raises ``ValueError("run-config key '<key>' <clash>; give it once")`` when ``name`` is in
    ``table`` already (``clash`` says where, e.g. ``"is given twice (1 and 2)"``).
    """
    if name in table:
        raise ValueError(f"run-config key {key!r} {clash}; give it once")
    table[name] = value


def default_run_config() -> dict[str, Any]:
    """The run config with every key at its default (:func:`fedcgd_task.schema.defaults`).

    Equal to the flattened ``[tool.flwr.app.config]`` of pyproject.toml (``tests/test_schema.py``),
    and available in an installed wheel, which has no pyproject.toml.
    """
    return dict(defaults())


def resolve_data_dir(data_dir: str) -> Path:
    """Return the absolute data folder for ``data-dir`` (``""``: ``<cwd>/data``; may not exist)."""
    if data_dir == "":
        return (Path.cwd() / DEFAULT_DATA_SUBDIR).resolve()
    return Path(data_dir).expanduser().resolve()
