"""Frozen, checked views of the run config (keys: :mod:`fedcgd_config.schema`) for both apps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from fedcgd_config import keys
from fedcgd_config.schema import BUILTIN_DATASETS, DEFAULTS, SCHEMA, SETTINGS, read
from fedcgd_config.setting import Setting, check_value


@dataclass(frozen=True)
class TaskSettings:
    """The client's settings (snake case), ``data_dir`` absolute, ``model`` not ``auto``."""

    seed: int
    num_devices: int
    dataset: str
    data_dir: str
    model: str
    partition: str
    dirichlet_alpha: float
    shards_per_device: int
    imbalance_ratio: float
    mnist1d_samples: int = int(DEFAULTS["mnist1d-samples"])
    device: str = str(DEFAULTS["device"])

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> TaskSettings:
        """The client keys of ``context.run_config``, checked (ValueError)."""
        values = read_part(run_config, "task")
        if values["model"] == "auto":  # the MLP fits your own data set's any input shape
            builtin = BUILTIN_DATASETS.get(values["dataset"])
            values["model"] = builtin.auto_model if builtin else "mlp"
        values["data_dir"] = str(resolve_data_dir(values["data_dir"]))
        return cls(**values)


@dataclass(frozen=True)
class TrainingSettings:
    """τ (``local_steps``), η and b, sent with every round."""

    local_steps: int
    learning_rate: float
    batch_size: int

    def to_config(self) -> dict[str, Any]:
        """The ConfigRecord entries, under the run-config keys (``local-steps``)."""
        return {field.name.replace("_", "-"): getattr(self, field.name) for field in fields(self)}


#: ``channel.*`` keys recorded as themselves, not as a field of the cell (``cell.*``).
_CHANNEL_OWN = {"channel.model": "channel_model", "channel.model-bits": "model_bits",
                "channel.trace": "channel_trace"}  # fmt: skip
_PARTS = {"task": TaskSettings, "training": TrainingSettings}


def _recorded_name(setting: Setting) -> str:
    name = setting.key.rsplit(".", 1)[-1].replace("-", "_")
    part = next((p for p, view in _PARTS.items() if name in {f.name for f in fields(view)}), "")
    if setting.key in _CHANNEL_OWN:
        return _CHANNEL_OWN[setting.key]
    return f"{part}.{name}" if part else f"cell.{name}" if "." in setting.key else name


#: Run-config key -> its name in ``config.json``: ``channel.deadline-s`` -> ``cell.deadline_s``.
RECORDED: dict[str, str] = {setting.key: _recorded_name(setting) for setting in SETTINGS}
#: The recorded names of the settings whose ``computes`` is false (a resume may change them).
WHERE_AND_HOW: tuple[str, ...] = tuple(RECORDED[s.key] for s in SETTINGS if not s.computes)


def read_part(run_config: Mapping[str, Any], part: str) -> dict[str, Any]:
    """The settings recorded under ``part`` (``task``, ``training``, ``cell``, ``""``), checked."""
    return {
        name.rpartition(".")[2]: read(run_config, key)
        for key, name in RECORDED.items()
        if name.rpartition(".")[0] == part
    }


def unread_settings(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """Recorded names that do not change what the run ``settings`` (``config.json``) computes:
    :data:`WHERE_AND_HOW` and the keys its data set does not read (``BuiltinDataset.reads``)."""  # noqa: D205, D209
    task = settings.get("task")
    dataset = task.get("dataset") if isinstance(task, Mapping) else None
    builtin = BUILTIN_DATASETS.get(dataset) if isinstance(dataset, str) else None
    reads = builtin.reads if builtin is not None else ("data-dir", "mnist1d-samples")
    computing = ("task.data_dir",) if "data-dir" in reads else ()
    unread = () if "mnist1d-samples" in reads else ("task.mnist1d_samples",)
    return (*(name for name in WHERE_AND_HOW if name not in computing), *unread)


TRAINING_KEYS = ("local-steps", "learning-rate", "batch-size")
_ROUND_CONFIG: dict[str, Setting] = {
    keys.SERVER_ROUND: Setting(keys.SERVER_ROUND, 0, "the server round j", limits=">= 0"),
    **{key: SCHEMA[key] for key in TRAINING_KEYS},
    keys.WANT_SIGMA: Setting(keys.WANT_SIGMA, True, "whether the device computes σ̂"),
}


def read_round_config(config: Mapping[str, Any]) -> tuple[int, TrainingSettings, bool]:
    """The round j, τ, η, b and whether to compute σ̂ from a round's ConfigRecord (ValueError
    naming the key, value, allowed), as both the server and the ClientApp read it."""  # noqa: D205, D209
    values: dict[str, Any] = {}
    for key, setting in _ROUND_CONFIG.items():
        if key not in config and key != keys.WANT_SIGMA:
            raise ValueError(f"ConfigRecord key '{key}' is missing")
        value = config.get(key, setting.default)
        values[key] = check_value(setting, value, f"ConfigRecord key '{key}'")
    training = TrainingSettings(**{k.replace("-", "_"): values[k] for k in TRAINING_KEYS})
    return values[keys.SERVER_ROUND], training, values[keys.WANT_SIGMA]


def set_nested(table: dict[str, Any], dotted: str, value: Any, *, key: str, clash: str) -> None:
    """``a.b.c = value`` as TOML nests it; ValueError: ``c`` set already (``clash``), or ``b``."""
    *tables, name = dotted.split(".")
    for part in tables:
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise ValueError(f"run-config key {key!r}: {part!r} is set to a value, not a table")
    if name in table:
        raise ValueError(f"run-config key {key!r} {clash}; give it once")
    table[name] = value


def default_run_config() -> dict[str, Any]:
    """Every key at its default."""
    return dict(DEFAULTS)


def resolve_data_dir(data_dir: str) -> Path:
    """The absolute data folder of ``data-dir`` (``""``: ``<cwd>/data``)."""
    return (Path(data_dir).expanduser() if data_dir else Path.cwd() / "data").resolve()
