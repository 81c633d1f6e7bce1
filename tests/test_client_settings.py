"""Tests of fedcgd_task.settings: the task's run-config keys and the round's ConfigRecord."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fedcgd_task import keys
from fedcgd_task.settings import TaskSettings, TrainingSettings, read_part, read_round_config

BASE: dict[str, Any] = {
    "seed": 3, "num-devices": 20, "dataset": "digits", "data-dir": "/tmp/some-data",
    "model": "auto", "device": "cpu", "partition": "dirichlet", "dirichlet-alpha": 0.3,
    "shards-per-device": 2, "imbalance-ratio": 1.0, "mnist1d-samples": 20000, "batch-size": 32,
    "local-steps": 1, "learning-rate": 0.1,
    "policy": "fedcgd-fscd",  # a server key: ignored
}  # fmt: skip


def parse_both(run_config: dict[str, Any]) -> tuple[TaskSettings, TrainingSettings]:
    training = TrainingSettings(**read_part(run_config, "training"))
    return TaskSettings.from_run_config(run_config), training


def test_parses_valid_config_integral_floats_and_ints_for_floats() -> None:
    s, t = parse_both({**BASE, "num-devices": 20.0, "imbalance-ratio": 1})
    assert (s.seed, s.num_devices, s.dataset, s.model, s.device) == (3, 20, "digits", "mlp", "cpu")
    assert type(s.num_devices) is int and type(s.imbalance_ratio) is float
    assert s.data_dir == str(Path("/tmp/some-data").resolve())
    assert (s.partition, s.dirichlet_alpha, s.shards_per_device) == ("dirichlet", 0.3, 2)
    assert t == TrainingSettings(local_steps=1, learning_rate=0.1, batch_size=32)
    hash(s)  # usable as a cache key


@pytest.mark.parametrize(
    ("dataset", "model", "resolved"),
    [("digits", "auto", "mlp"), ("cifar10", "auto", "cnn"), ("cifar100", "auto", "resnet18gn"),
     ("cifar10", "mlp", "mlp")],
)  # fmt: skip
def test_auto_model(dataset: str, model: str, resolved: str) -> None:
    settings = TaskSettings.from_run_config({**BASE, "dataset": dataset, "model": model})
    assert settings.model == resolved


def test_empty_data_dir_is_cwd_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = TaskSettings.from_run_config({**BASE, "data-dir": ""})
    assert Path(s.data_dir) == (tmp_path / "data").resolve()


def test_round_config_round_trip() -> None:
    training = TrainingSettings(local_steps=5, learning_rate=0.05, batch_size=16)
    record = {**training.to_config(), keys.SERVER_ROUND: 7}
    assert record == {"local-steps": 5, "learning-rate": 0.05, "batch-size": 16, "server-round": 7}
    assert read_round_config(record) == (7, training, True)
    assert read_round_config({**record, keys.WANT_SIGMA: False}) == (7, training, False)
    with pytest.raises(ValueError, match="ConfigRecord key 'learning-rate' is missing"):
        read_round_config({"local-steps": 1, "batch-size": 8, "server-round": 1})


@pytest.mark.parametrize(
    ("key", "value"),
    [(keys.SERVER_ROUND, -1), ("local-steps", 1.5), ("batch-size", True),
     ("learning-rate", float("nan")), ("learning-rate", "0.1"), (keys.WANT_SIGMA, 1)],
)  # fmt: skip
def test_round_config_bad_value_names_the_config_record_key(key: str, value: Any) -> None:
    record = {"local-steps": 1, "learning-rate": 0.1, "batch-size": 8, "server-round": 1}
    with pytest.raises(ValueError, match=f"ConfigRecord key '{key}' must be") as info:
        read_round_config({**record, key: value})
    assert repr(value) in str(info.value)
