"""Tests of client_app.settings: parsing and validation of the client's run-config keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client_app.settings import ClientSettings

BASE: dict[str, Any] = {
    "seed": 3,
    "num-devices": 20,
    "dataset": "digits",
    "data-dir": "/tmp/some-data",
    "model": "auto",
    "partition": "dirichlet",
    "dirichlet-alpha": 0.3,
    "shards-per-device": 2,
    "imbalance-ratio": 1.0,
    "batch-size": 32,
    "local-steps": 1,
    "learning-rate": 0.1,
    "policy": "fedcgd-fscd",  # a server key: ignored
}


def config(**changes: Any) -> dict[str, Any]:
    out = dict(BASE)
    out.update({k.replace("_", "-"): v for k, v in changes.items()})
    return out


def test_parses_valid_config() -> None:
    s = ClientSettings.from_run_config(BASE)
    assert s.seed == 3 and s.num_devices == 20 and s.dataset == "digits"
    assert s.model == "mlp"
    assert s.data_dir == str(Path("/tmp/some-data").resolve())
    assert s.partition == "dirichlet" and s.dirichlet_alpha == 0.3
    assert s.shards_per_device == 2 and s.imbalance_ratio == 1.0
    assert s.batch_size == 32 and s.local_steps == 1 and s.learning_rate == 0.1
    hash(s)  # usable as a cache key


@pytest.mark.parametrize(
    ("dataset", "model"), [("digits", "mlp"), ("cifar10", "cnn"), ("cifar100", "resnet18gn")]
)
def test_auto_model(dataset: str, model: str) -> None:
    assert ClientSettings.from_run_config(config(dataset=dataset)).model == model


def test_explicit_model_kept() -> None:
    assert ClientSettings.from_run_config(config(dataset="cifar10", model="mlp")).model == "mlp"


def test_empty_data_dir_is_cwd_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = ClientSettings.from_run_config(config(data_dir=""))
    assert Path(s.data_dir) == (tmp_path / "data").resolve()


def test_integral_floats_and_int_for_float_keys_accepted() -> None:
    s = ClientSettings.from_run_config(config(num_devices=64.0, imbalance_ratio=3))
    assert s.num_devices == 64 and isinstance(s.num_devices, int)
    assert s.imbalance_ratio == 3.0 and isinstance(s.imbalance_ratio, float)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("seed", -1),
        ("seed", 1.5),
        ("num-devices", 0),
        ("num-devices", True),
        ("num-devices", "20"),
        ("dataset", "mnist"),
        ("data-dir", 3),
        ("model", "vgg"),
        ("partition", "iid"),
        ("dirichlet-alpha", 0.0),
        ("dirichlet-alpha", float("inf")),
        ("shards-per-device", 0),
        ("imbalance-ratio", 0.5),
        ("imbalance-ratio", float("nan")),
        ("batch-size", 0),
        ("local-steps", 2.5),
        ("learning-rate", 0.0),
        ("learning-rate", -0.1),
    ],
)
def test_bad_value_names_key_and_value(key: str, value: Any) -> None:
    bad = dict(BASE)
    bad[key] = value
    with pytest.raises(ValueError, match=f"'{key}'") as info:
        ClientSettings.from_run_config(bad)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("key", [k for k in BASE if k != "policy"])
def test_missing_key(key: str) -> None:
    incomplete = {k: v for k, v in BASE.items() if k != key}
    with pytest.raises(ValueError, match=f"'{key}' is missing"):
        ClientSettings.from_run_config(incomplete)
