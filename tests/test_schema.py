"""The run config's schema (fedcgd_config/schema.py) against pyproject.toml, the docs and the code.

Each key's default is written once, in pyproject.toml's ``[tool.flwr.app.config]`` (Flower and
the schema read it there); its range and help once, in the schema; users read docs/running.md's
settings table, which must be the schema's. The checker is tested on hand-written values, and
the task's views of the run config and the round's ConfigRecord (fedcgd_config/settings.py).
"""

from __future__ import annotations

import math
import operator
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from experiments.cli import invoke
from experiments.cli.tools import settings_table
from fedcgd_config import keys
from fedcgd_config.schema import PROJECT_DIR, SCHEMA, SETTINGS, flatten, read
from fedcgd_config.setting import Setting, check_value
from fedcgd_config.settings import TaskSettings, TrainingSettings, read_part, read_round_config
from fedcgd_strategy.policies import PROTOCOL_CHOICES
from server_app.config import UNNAMED_KEYS, parse_run_config

REGENERATE = "regenerate it: .venv/bin/fedcgd settings --markdown, between the markers"


def test_a_default_is_written_once_in_pyproject_also_for_an_installed_wheel(tmp_path):
    # a wheel carries pyproject.toml as fedcgd_config/pyproject.toml: change a default there only
    package = tmp_path / "fedcgd_config"
    package.mkdir()
    for name in ("__init__.py", "imports.py", "setting.py", "schema.py"):
        (package / name).write_text((PROJECT_DIR / "fedcgd_config" / name).read_text())
    text = (PROJECT_DIR / "pyproject.toml").read_text()
    assert "\nnum-devices = 40\n" in text and "\ndeadline-s = 0.012\n" in text
    text = text.replace("\nnum-devices = 40\n", "\nnum-devices = 7\n")
    (package / "pyproject.toml").write_text(text.replace("deadline-s = 0.012", "deadline-s = 0.5"))
    code = "from fedcgd_config.schema import SCHEMA as S; print(S['num-devices'].default, "
    code += "S['channel.deadline-s'].default)"
    shown = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert shown.split() == ["7", "0.5"]


def test_the_docs_table_is_the_schema_table_and_its_protocols_the_codes():
    text = (PROJECT_DIR / "docs" / "running.md").read_text()
    start = text.index("<!-- settings table:")
    start = text.index("\n", start) + 1
    end = text.index("<!-- end of settings table -->")
    assert text[start:end] == settings_table(), REGENERATE
    assert SCHEMA["protocol"].choices == PROTOCOL_CHOICES  # the protocols the code takes


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.key)
def test_every_default_passes_and_a_value_of_another_type_is_refused(setting: Setting):
    assert check_value(setting, setting.default, setting.key) == setting.default
    wrong: object = 7 if isinstance(setting.default, str | bool) else "7"
    with pytest.raises(ValueError, match=rf"run-config key '{setting.key}' must be .*; got "):
        read({setting.key: wrong}, setting.key)


NUMBERS = [s for s in SETTINGS if type(s.default) in (int, float)]
KEY = operator.attrgetter("key")


@pytest.mark.parametrize("setting", NUMBERS, ids=KEY)
def test_each_bound_is_enforced_at_its_edge(setting: Setting):
    from fedcgd_config.settings import default_run_config

    step = 1 if type(setting.default) is int else 1e-9 * max(1.0, abs(setting.minimum or 1.0))
    if setting.minimum is not None:
        edge = setting.minimum
        if not setting.above:
            assert check_value(setting, edge, setting.key) == edge
        # below: refused in one line by what the commands and the ServerApp read the config with
        low = edge if setting.above else edge - step
        for value in (low, math.nan) if type(setting.default) is float else (low,):
            with pytest.raises(ValueError) as info:
                parse_run_config({**default_run_config(), setting.key: value})
            assert f"'{setting.key}'" in str(info.value) and "\n" not in str(info.value), info.value
    if setting.maximum is not None or type(setting.default) is int:
        high = 2**63 - 1 if setting.maximum is None else setting.maximum  # Flower's int64
        if setting.multiple_of:
            high -= high % setting.multiple_of
        assert check_value(setting, high, setting.key) == high
        beyond = high + max(step, 1e-9 * abs(high)) if type(high) is float else high + 1
        with pytest.raises(ValueError, match=setting.key):
            check_value(setting, beyond, setting.key)


def test_hand_written_values():
    rounds, rate = SCHEMA["num-server-rounds"], SCHEMA["learning-rate"]
    assert type(check_value(rounds, 64.0, "r")) is int and type(check_value(rate, 1, "e")) is float
    for bad in (64.5, True, math.nan, math.inf, "64"):
        with pytest.raises(ValueError, match=r"^r must be an integer in \[1, 100000\]"):
            check_value(rounds, bad, "r")
    refused = [
        ("learning-rate", 0.0, r"^eta must be a finite number > 0; got 0.0$"),
        ("mnist1d-samples", 105, r"a multiple of 10 .*got 105$"),
        ("target-dist", "Global", r'one of "global", "devices"; got \'Global\''),
        ("dataset", "cifar11", "must be one of"),
        ("result-dir", "x", "must be an absolute path"),
        ("data-dir", "a\nb", "control character"),
        ("verbose", 0, "true or false; got 0"),
    ]
    for key, value, said in refused:
        with pytest.raises(ValueError, match=said):
            check_value(SCHEMA[key], value, "eta")
    assert check_value(SCHEMA["dataset"], "my.data:load", "d") == "my.data:load"
    assert check_value(SCHEMA["result-dir"], "~/x", "o").endswith("/x")
    with pytest.raises(ValueError, match="run-config key 'seed' is missing"):
        read({}, "seed")
    with pytest.raises(ValueError, match="holds 4097 characters"):
        read({"data-dir": "/" + "a" * 4096}, "data-dir")


def test_fedcgd_settings_lists_every_key_in_its_order_explains_one_and_refuses_others(capsys):
    assert invoke(["settings"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # each line is "key = default  (allowed)": the part before the two spaces is TOML
    listed = []
    for line in lines:
        key, _, rest = line.partition(" = ")
        listed.append((key.strip(), tomllib.loads(f"x = {rest.split('  (', 1)[0]}")["x"]))
    pyproject = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())
    assert listed == list(flatten(pyproject["tool"]["flwr"]["app"]["config"]).items())
    assert [key for key, _ in listed] == [setting.key for setting in SETTINGS]
    # one key explained; an unknown one refused, with the nearest key when there is one
    assert invoke(["settings", "channel.deadline-s"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("channel.deadline-s = 0.012\n  allowed: a finite number > 0\n")
    assert invoke(["settings", "channel.deadline"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: unknown run-config key 'channel.deadline'; did you mean channel.deadline-s? "
        "every key: `fedcgd settings`\n"
    )
    assert invoke(["settings", "zzz"]) == 2
    err = capsys.readouterr().err
    assert err == "error: unknown run-config key 'zzz'; every key: `fedcgd settings`\n"


def test_one_attribute_says_what_describes_a_run():
    """Checkpoint identity, folder names, figure labels and indicator pairing leave out the same
    settings: those whose ``computes`` is false (where or how a run runs or reports)."""
    from experiments.analysis.plot_runs import UNLABELLED  # matplotlib: here only
    from fedcgd_config.settings import RECORDED, unread_settings

    unread = unread_settings({"task": {"dataset": "mnist1d"}})
    for setting in SETTINGS:
        name = RECORDED[setting.key]
        left_out = (name in unread, name in UNLABELLED, setting.key in UNNAMED_KEYS)
        if setting.key in ("policy", "aggregator", "channel.model", "protocol"):  # named first
            continue
        assert left_out == (not setting.computes,) * 3, setting.key
    assert {RECORDED[s.key] for s in SETTINGS if not s.computes} >= {"task.device", "eval_every"}


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


def test_task_and_training_settings_from_the_run_config_and_the_rounds_config_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, t = parse_both({**BASE, "num-devices": 20.0, "imbalance-ratio": 1})
    assert (s.seed, s.num_devices, s.dataset, s.model, s.device) == (3, 20, "digits", "mlp", "cpu")
    assert type(s.num_devices) is int and type(s.imbalance_ratio) is float
    assert s.data_dir == str(Path("/tmp/some-data").resolve())
    assert (s.partition, s.dirichlet_alpha, s.shards_per_device) == ("dirichlet", 0.3, 2)
    assert t == TrainingSettings(local_steps=1, learning_rate=0.1, batch_size=32)
    hash(s)  # usable as a cache key
    monkeypatch.chdir(tmp_path)  # an empty data-dir: ./data
    s = TaskSettings.from_run_config({**BASE, "data-dir": ""})
    assert Path(s.data_dir) == (tmp_path / "data").resolve()
    # the training settings round-trip through the round's ConfigRecord
    training = TrainingSettings(local_steps=5, learning_rate=0.05, batch_size=16)
    record = {**training.to_config(), keys.SERVER_ROUND: 7}
    assert record == {"local-steps": 5, "learning-rate": 0.05, "batch-size": 16, "server-round": 7}
    assert read_round_config(record) == (7, training, True)
    assert read_round_config({**record, keys.WANT_SIGMA: False}) == (7, training, False)
    with pytest.raises(ValueError, match="ConfigRecord key 'learning-rate' is missing"):
        read_round_config({"local-steps": 1, "batch-size": 8, "server-round": 1})


@pytest.mark.parametrize(
    ("dataset", "model", "resolved"),
    [("digits", "auto", "mlp"), ("cifar10", "auto", "cnn"), ("cifar100", "auto", "resnet18gn"),
     ("cifar10", "mlp", "mlp")],
)  # fmt: skip
def test_auto_model(dataset: str, model: str, resolved: str) -> None:
    settings = TaskSettings.from_run_config({**BASE, "dataset": dataset, "model": model})
    assert settings.model == resolved


@pytest.mark.parametrize("key", [k for k in BASE if k != "policy"])
def test_a_missing_task_or_training_key_is_named(key: str) -> None:
    with pytest.raises(ValueError, match=f"'{key}' is missing"):
        parse_both({k: v for k, v in BASE.items() if k != key})


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
