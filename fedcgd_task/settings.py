"""Typed, validated views of the run config shared by the ServerApp and the ClientApp.

Each key is defined once in :mod:`fedcgd_task.schema`; τ, η, b reach the devices every round
through the round's ConfigRecord. Imports neither flwr nor torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from fedcgd_task import keys
from fedcgd_task.schema import BUILTIN_DATASETS, DEFAULTS, SCHEMA, SETTINGS, read
from fedcgd_task.setting import Setting, check_value

#: Default of ``mnist1d-samples``.
DEFAULT_MNIST1D_SAMPLES = int(SCHEMA["mnist1d-samples"].default)


@dataclass(frozen=True)
class TaskSettings:
    """The client's part of the run config, validated; hashable (a cache key).

    The schema's keys in snake case; ``data_dir`` absolute, ``model`` with ``"auto"`` resolved.
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
        """The client keys of ``context.run_config``, checked (ValueError: one line)."""
        values = read_part(run_config, "task")
        if values["model"] == "auto":  # the MLP fits your own data set's any input shape
            builtin = BUILTIN_DATASETS.get(values["dataset"])
            values["model"] = builtin.auto_model if builtin else "mlp"
        values["data_dir"] = str(resolve_data_dir(values["data_dir"]))
        return cls(**values)


@dataclass(frozen=True)
class TrainingSettings:
    """Local-training hyper-parameters τ (``local_steps``), η and b, sent with every round."""

    local_steps: int
    learning_rate: float
    batch_size: int

    def to_config(self) -> dict[str, Any]:
        """The ConfigRecord entries: each field under its run-config key (``local-steps``)."""
        return {field.name.replace("_", "-"): getattr(self, field.name) for field in fields(self)}


#: ``channel.*`` keys recorded as themselves, not as a field of the cell (``cell.*``).
_CHANNEL_OWN = {"channel.model": "channel_model", "channel.model-bits": "model_bits",
                "channel.trace": "channel_trace"}  # fmt: skip
_PARTS = {"task": TaskSettings, "training": TrainingSettings}


def _recorded_name(setting: Setting) -> str:
    name = setting.attribute
    part = next((p for p, view in _PARTS.items() if name in {f.name for f in fields(view)}), "")
    if setting.key in _CHANNEL_OWN:
        return _CHANNEL_OWN[setting.key]
    return f"{part}.{name}" if part else f"cell.{name}" if "." in setting.key else name


#: Run-config key -> its dotted name in a run's ``config.json`` (``server_app.config.RunConfig``):
#: ``local-steps`` -> ``training.local_steps``, ``channel.deadline-s`` -> ``cell.deadline_s``.
RECORDED: dict[str, str] = {setting.key: _recorded_name(setting) for setting in SETTINGS}
#: The recorded names of the settings that only say where or how a run runs or reports
#: (``Setting.computes`` false): a resume may change them.
WHERE_AND_HOW: tuple[str, ...] = tuple(RECORDED[s.key] for s in SETTINGS if not s.computes)


def read_part(run_config: Mapping[str, Any], part: str) -> dict[str, Any]:
    """The settings recorded under ``part`` (``task``, ``training``, ``cell``, ``""``: the
    top-level ones), checked, by field name (``{"deadline_s": 0.012}`` of ``cell``).
    """  # noqa: D205
    return {
        name.rpartition(".")[2]: read(run_config, key)
        for key, name in RECORDED.items()
        if name.rpartition(".")[0] == part
    }


def unread_settings(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """Recorded settings (dotted names) that do not change what the run ``settings``
    (``config.json``) computes: :data:`WHERE_AND_HOW`, but ``data-dir`` where the data set reads
    its files there, plus ``mnist1d-samples`` where a built-in data set does not read it.
    """  # noqa: D205
    task = settings.get("task")
    dataset = task.get("dataset") if isinstance(task, Mapping) else None
    builtin = BUILTIN_DATASETS.get(dataset) if isinstance(dataset, str) else None
    # a researcher's own data set may read both
    reads = builtin.reads if builtin is not None else ("data-dir", "mnist1d-samples")
    computing = ("task.data_dir",) if "data-dir" in reads else ()
    unread = () if "mnist1d-samples" in reads else ("task.mnist1d_samples",)
    return (*(name for name in WHERE_AND_HOW if name not in computing), *unread)


#: τ, η and b: their run-config keys are their ConfigRecord keys too.
TRAINING_KEYS = ("local-steps", "learning-rate", "batch-size")
#: The settings of a round's ConfigRecord, by record key (``want-sigma`` may be left out).
_ROUND_CONFIG: dict[str, Setting] = {
    keys.SERVER_ROUND: Setting(keys.SERVER_ROUND, 0, "the server round j", limits=">= 0"),
    **{key: SCHEMA[key] for key in TRAINING_KEYS},
    keys.WANT_SIGMA: Setting(keys.WANT_SIGMA, True, "whether the device computes σ̂"),
}


def read_round_config(config: Mapping[str, Any]) -> tuple[int, TrainingSettings, bool]:
    """The server round j >= 0, τ, η, b and whether to compute σ̂, from a round's ConfigRecord.

    The one reading of what a device receives, by the server (before it sends) and the ClientApp.
    Raises ValueError naming the missing or bad ConfigRecord key, the value and what is allowed.
    """
    values: dict[str, Any] = {}
    for key, setting in _ROUND_CONFIG.items():
        if key not in config and key != keys.WANT_SIGMA:
            raise ValueError(f"ConfigRecord key '{key}' is missing")
        value = config.get(key, setting.default)
        values[key] = check_value(setting, value, f"ConfigRecord key '{key}'")
    training = TrainingSettings(**{k.replace("-", "_"): values[k] for k in TRAINING_KEYS})
    return values[keys.SERVER_ROUND], training, values[keys.WANT_SIGMA]


def set_nested(table: dict[str, Any], dotted: str, value: Any, *, key: str, clash: str) -> None:
    """``a.b.c = value`` as ``c`` in the table ``b`` of the table ``a`` (as TOML).

    Raises ``ValueError("run-config key '<key>' <clash>; give it once")`` where ``c`` is set
    already, and where a table on the way is set to a value.
    """
    *tables, name = dotted.split(".")
    for part in tables:
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise ValueError(f"run-config key {key!r}: {part!r} is set to a value, not a table")
    if name in table:
        raise ValueError(f"run-config key {key!r} {clash}; give it once")
    table[name] = value


def default_run_config() -> dict[str, Any]:
    """The run config with every key at its default (:data:`fedcgd_task.schema.DEFAULTS`)."""
    return dict(DEFAULTS)


def resolve_data_dir(data_dir: str) -> Path:
    """Return the absolute data folder for ``data-dir`` (``""``: ``<cwd>/data``; may not exist)."""
    return (Path(data_dir).expanduser() if data_dir else Path.cwd() / "data").resolve()
