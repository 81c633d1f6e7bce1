"""Typed, validated view of the run-config keys the ClientApp needs.

Flower hands every app a flat ``context.run_config`` mapping (kebab-case keys, scalar values).
:meth:`ClientSettings.from_run_config` reads the keys below once, checks each value and returns a
frozen, hashable :class:`ClientSettings`; the server calls it too, before any training, so a bad
value stops the run at start-up with a message that names the key, the value and what is allowed.

=====================  ====================================================================
run-config key         meaning
=====================  ====================================================================
``seed``               run seed (int >= 0); every random draw of the client derives from it
``num-devices``        V, the number of devices (partitions), int >= 1
``dataset``            ``"digits"`` | ``"cifar10"`` | ``"cifar100"``
``data-dir``           folder holding the CIFAR files; ``""`` means ``<cwd>/data``, resolved
                       against the working directory of the process that parses the config
``model``              ``"auto"`` | ``"mlp"`` | ``"cnn"`` | ``"resnet18gn"``; ``auto`` picks mlp
                       for digits, cnn for cifar10 and resnet18gn for cifar100
``partition``          ``"dirichlet"`` | ``"shards"``
``dirichlet-alpha``    concentration alpha of Dir(alpha p), float > 0
``shards-per-device``  l, shards per device for the sort-and-partition split, int >= 1
``imbalance-ratio``    r = n2 / n1 of the training set, float >= 1
``batch-size``         b, int >= 1
``local-steps``        tau, SGD steps per round, int >= 1
``learning-rate``      eta, float > 0
=====================  ====================================================================

Other keys in the run config (the server's settings) are ignored here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Datasets the client can load (see :mod:`client_app.datasets`).
DATASETS: tuple[str, ...] = ("digits", "cifar10", "cifar100")
#: Model names accepted by the run config; ``auto`` is resolved through :data:`AUTO_MODEL`.
MODELS: tuple[str, ...] = ("auto", "mlp", "cnn", "resnet18gn")
#: The model ``model = "auto"`` selects for each dataset.
AUTO_MODEL: dict[str, str] = {"digits": "mlp", "cifar10": "cnn", "cifar100": "resnet18gn"}
#: Partition schemes (see :mod:`client_app.partition`).
PARTITIONS: tuple[str, ...] = ("dirichlet", "shards")
#: Sub-folder of the working directory used when ``data-dir`` is empty.
DEFAULT_DATA_SUBDIR = "data"


@dataclass(frozen=True)
class ClientSettings:
    """The client's part of the run config, validated; hashable (used as a cache key).

    Attributes
    ----------
    seed : int
        Run seed.
    num_devices : int
        Number of devices V (>= 1).
    dataset : str
        One of :data:`DATASETS`.
    data_dir : str
        Absolute path of the data folder (``""`` in the run config resolved to ``<cwd>/data``).
    model : str
        Concrete model name (``"mlp"``, ``"cnn"`` or ``"resnet18gn"``; ``auto`` already resolved).
    partition : str
        One of :data:`PARTITIONS`.
    dirichlet_alpha : float
        Dirichlet concentration alpha (> 0).
    shards_per_device : int
        Shards per device l (>= 1).
    imbalance_ratio : float
        Imbalance ratio r = n2 / n1 (>= 1).
    batch_size : int
        Mini-batch size b (>= 1).
    local_steps : int
        Local SGD steps per round tau (>= 1).
    learning_rate : float
        SGD learning rate eta (> 0).

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
    batch_size: int
    local_steps: int
    learning_rate: float

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> ClientSettings:
        """Read and validate the client keys of a Flower run config.

        Parameters
        ----------
        run_config : Mapping[str, Any]
            ``context.run_config`` (flat, kebab-case keys). Keys not listed in the module
            docstring are ignored.

        Returns
        -------
        ClientSettings
            The validated settings, with ``data-dir`` made absolute and ``model = "auto"``
            resolved for the dataset.

        Raises
        ------
        ValueError
            If a key is missing or a value has the wrong type or is out of range; the message
            names the key, the bad value and what is allowed.

        """
        dataset = read_choice(run_config, "dataset", DATASETS)
        model = read_choice(run_config, "model", MODELS)
        if model == "auto":
            model = AUTO_MODEL[dataset]
        data_dir_raw = require_key(run_config, "data-dir")
        if not isinstance(data_dir_raw, str):
            raise ValueError(
                f"run-config key 'data-dir' must be a string (a folder path, or \"\" for "
                f"<cwd>/{DEFAULT_DATA_SUBDIR}); got {data_dir_raw!r}"
            )
        data_dir = resolve_data_dir(data_dir_raw)
        return cls(
            seed=read_int(run_config, "seed", minimum=0),
            num_devices=read_int(run_config, "num-devices", minimum=1),
            dataset=dataset,
            data_dir=str(data_dir),
            model=model,
            partition=read_choice(run_config, "partition", PARTITIONS),
            dirichlet_alpha=read_real(run_config, "dirichlet-alpha", minimum=0.0, strict=True),
            shards_per_device=read_int(run_config, "shards-per-device", minimum=1),
            imbalance_ratio=read_real(run_config, "imbalance-ratio", minimum=1.0, strict=False),
            batch_size=read_int(run_config, "batch-size", minimum=1),
            local_steps=read_int(run_config, "local-steps", minimum=1),
            learning_rate=read_real(run_config, "learning-rate", minimum=0.0, strict=True),
        )


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


def require_key(run_config: Mapping[str, Any], key: str) -> Any:
    """Return ``run_config[key]`` or raise a ValueError naming the missing key."""
    if key not in run_config:
        raise ValueError(
            f"run-config key '{key}' is missing; it must be set in [tool.flwr.app.config] of "
            "pyproject.toml or with --run-config"
        )
    return run_config[key]


def read_int(run_config: Mapping[str, Any], key: str, *, minimum: int | None) -> int:
    """Read an integer (an integral float such as ``64.0`` is accepted) with a lower bound."""
    value = require_key(run_config, key)
    allowed = "an integer" if minimum is None else f"an integer >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"run-config key '{key}' must be {allowed}; got {value!r}")
    if isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            raise ValueError(f"run-config key '{key}' must be {allowed}; got {value!r}")
        value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"run-config key '{key}' must be {allowed}; got {value!r}")
    return int(value)


def read_real(run_config: Mapping[str, Any], key: str, *, minimum: float, strict: bool) -> float:
    """Read a finite real number ``> minimum`` (strict) or ``>= minimum``."""
    value = require_key(run_config, key)
    relation = ">" if strict else ">="
    allowed = f"a finite number {relation} {minimum:g}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"run-config key '{key}' must be {allowed}; got {value!r}")
    number = float(value)
    too_small = number <= minimum if strict else number < minimum
    if not math.isfinite(number) or too_small:
        raise ValueError(f"run-config key '{key}' must be {allowed}; got {value!r}")
    return number


def read_choice(run_config: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    """Read a string that must be one of ``allowed``."""
    value = require_key(run_config, key)
    if not isinstance(value, str) or value not in allowed:
        options = ", ".join(f'"{a}"' for a in allowed)
        raise ValueError(f"run-config key '{key}' must be one of {options}; got {value!r}")
    return value
