"""Tests of fedcgd_task.settings: the task's run-config keys and the round's ConfigRecord."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fedcgd_task import keys
from fedcgd_task.settings import TaskSettings, TrainingSettings, read_part, read_round_config

BASE: dict[str, Any] = {
    "seed": 3,
    "num-devices": 20,
    "dataset": "digits",
    "data-dir": "/tmp/some-data",
    "model": "auto",
    "device": "cpu",
    "partition": "dirichlet",
    "dirichlet-alpha": 0.3,
    "shards-per-device": 2,
    "imbalance-ratio": 1.0,
    "mnist1d-samples": 20000,
    "batch-size": 32,
    "local-steps": 1,
    "learning-rate": 0.1,
    "policy": "fedcgd-fscd",  # a server key: ignored
}


def config(**changes: Any) -> dict[str, Any]:
    out = dict(BASE)
    out.update({k.replace("_", "-"): v for k, v in changes.items()})
    return out


def parse_both(run_config: dict[str, Any]) -> tuple[TaskSettings, TrainingSettings]:
    training = TrainingSettings(**read_part(run_config, "training"))
    return TaskSettings.from_run_config(run_config), training


def test_parses_valid_config() -> None:
    s, t = parse_both(BASE)
    assert s.seed == 3 and s.num_devices == 20 and s.dataset == "digits"
    assert s.model == "mlp"
    assert s.data_dir == str(Path("/tmp/some-data").resolve())
    assert s.partition == "dirichlet" and s.dirichlet_alpha == 0.3
    assert s.shards_per_device == 2 and s.imbalance_ratio == 1.0
    assert s.device == "cpu"
    assert t == TrainingSettings(local_steps=1, learning_rate=0.1, batch_size=32)
    hash(s)  # usable as a cache key


@pytest.mark.parametrize(
    ("dataset", "model"), [("digits", "mlp"), ("cifar10", "cnn"), ("cifar100", "resnet18gn")]
)
def test_auto_model(dataset: str, model: str) -> None:
    assert TaskSettings.from_run_config(config(dataset=dataset)).model == model


def test_explicit_model_kept() -> None:
    assert TaskSettings.from_run_config(config(dataset="cifar10", model="mlp")).model == "mlp"


def test_empty_data_dir_is_cwd_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = TaskSettings.from_run_config(config(data_dir=""))
    assert Path(s.data_dir) == (tmp_path / "data").resolve()


def test_integral_floats_and_int_for_float_keys_accepted() -> None:
    s = TaskSettings.from_run_config(config(num_devices=64.0, imbalance_ratio=3))
    assert s.num_devices == 64 and isinstance(s.num_devices, int)
    assert s.imbalance_ratio == 3.0 and isinstance(s.imbalance_ratio, float)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # one refusal per part (every key's bounds and type: test_schema.py)
        ("model", "vgg"),
        ("learning-rate", -0.1),
    ],
)
def test_bad_value_names_key_and_value(key: str, value: Any) -> None:
    bad = dict(BASE)
    bad[key] = value
    with pytest.raises(ValueError, match=f"'{key}'") as info:
        parse_both(bad)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("key", [k for k in BASE if k != "policy"])
def test_missing_key(key: str) -> None:
    incomplete = {k: v for k, v in BASE.items() if k != key}
    with pytest.raises(ValueError, match=f"'{key}' is missing"):
        parse_both(incomplete)


def test_round_config_round_trip() -> None:
    training = TrainingSettings(local_steps=5, learning_rate=0.05, batch_size=16)
    record = {**training.to_config(), keys.SERVER_ROUND: 7}
    assert record == {"local-steps": 5, "learning-rate": 0.05, "batch-size": 16, "server-round": 7}
    assert read_round_config(record) == (7, training, True)
    assert read_round_config({**record, keys.WANT_SIGMA: False}) == (7, training, False)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (keys.SERVER_ROUND, -1),
        ("local-steps", 0),
        ("local-steps", 1.5),
        ("batch-size", True),
        ("learning-rate", 0.0),
        ("learning-rate", float("nan")),
        ("learning-rate", "0.1"),
        (keys.WANT_SIGMA, 1),
    ],
)
def test_round_config_bad_value_names_the_config_record_key(key: str, value: Any) -> None:
    record: dict[str, Any] = {
        "local-steps": 1,
        "learning-rate": 0.1,
        "batch-size": 8,
        "server-round": 1,
    }
    record[key] = value
    with pytest.raises(ValueError, match=f"ConfigRecord key '{key}' must be") as info:
        read_round_config(record)
    assert repr(value) in str(info.value)


def test_round_config_missing_key() -> None:
    with pytest.raises(ValueError, match="ConfigRecord key 'learning-rate' is missing"):
        read_round_config({"local-steps": 1, "batch-size": 8, "server-round": 1})
