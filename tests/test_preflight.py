"""Checks before the start (one line, exit 2, nothing created) and the run's outcome."""

from __future__ import annotations

import json
import re

import pytest
from task_settings import make_settings, refused_before_start

from fedcgd_config.settings import default_run_config
from fedcgd_task.datasets import load_data
from fedcgd_task.partition import partition_indices
from server_app.run_folder.run_status import (
    COMPLETED,
    FAILED,
    RUNNING,
    STOPPED,
    RunStatus,
    write_status,
)

DIGITS_TRAIN = 1437  # load_digits_split: 1437 training images


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"num-devices": 100_000_000}, "'num-devices' = 100000000"),
        ({"num-devices": 5000}, "'num-devices' = 5000"),
        ({"partition": "shards", "shards-per-device": 1000}, "'shards-per-device'"),
        ({"local-steps": 1_000_000_000}, "'local-steps'"),
        ({"model": "cnn"}, "'model' = 'cnn' does not fit dataset 'digits'"),
        ({"imbalance-ratio": 10.0, "num-devices": 900}, "'num-devices' = 900"),
        ({"resume-from": "{tmp}/nowhere"}, "'resume-from'.*no such folder"),
        ({"resume-from": "{tmp}/empty"}, r"no checkpoint\.pt"),
        ({"resume-from": "{tmp}/empty", "result-dir": "{tmp}/elsewhere"}, "'result-dir'.*resume"),
    ],
)
def test_impossible_sizes_models_and_resumes_are_refused_before_the_start(
    capsys, tmp_path, overrides, named
):
    (tmp_path / "empty").mkdir()
    values = {k: v.format(tmp=tmp_path) if k.endswith(("-from", "-dir")) else v
              for k, v in overrides.items()}  # fmt: skip
    if "resume-from" not in values:  # a resumed run continues in its own folder
        values.setdefault("result-dir", str(tmp_path / "out"))
    line = refused_before_start(capsys, {"num-server-rounds": 2, **values}, tmp_path / "out")
    assert line.startswith("error: ") and re.search(named, line), line
    assert list((tmp_path / "empty").iterdir()) == [] and not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize(
    ("partition", "devices", "shards", "expected"),
    [
        ("dirichlet", 40, 2, 35),  # floor(1437 / 40)
        ("dirichlet", 1437, 2, 1),
        ("shards", 40, 2, 34),  # 2 * floor(1437 / 80) = 2 * 17
        ("shards", 7, 3, 204),  # 3 * floor(1437 / 21) = 3 * 68
    ],
)
def test_device_samples_is_the_size_of_every_partition(partition, devices, shards, expected):
    from experiments.run.preflight import device_samples

    labels = load_data("digits", "")[0].labels
    assert device_samples(partition, DIGITS_TRAIN, devices, shards) == expected
    settings = make_settings(partition=partition, num_devices=devices, shards_per_device=shards)
    sizes = {len(part) for part in partition_indices(settings, labels)}
    assert sizes == {expected}


def test_local_work_bound_is_max_local_passes_over_a_device_and_models_fit_their_images():
    """The CNN on digits is refused: test_impossible_sizes_models_and_resumes_are_refused_..."""
    from experiments.run.preflight import MAX_LOCAL_PASSES, check_model_fits, check_sizes
    from server_app.config import parse_run_config

    labels = load_data("digits", "")[0].labels
    config = default_run_config()  # 40 devices on digits: 35 samples each, b = 32
    assert MAX_LOCAL_PASSES == 1000
    check_sizes(parse_run_config({**config, "local-steps": 1093}), labels)  # 34,976 <= 35,000
    with pytest.raises(ValueError, match=r"'local-steps' × 'batch-size' = 1094 × 32"):
        check_sizes(parse_run_config({**config, "local-steps": 1094}), labels)  # 35,008 > 35,000
    check_model_fits("cnn", "cifar10", 10, (3, 32, 32))
    check_model_fits("mlp", "digits", 10, (1, 8, 8))


def test_run_outcome_reads_the_status_written_since_the_launch_and_refuses_a_huge_one(tmp_path):
    from server_app.run_folder.run_status import run_outcome

    assert run_outcome(tmp_path, 0.0).code == 1  # no status: the ServerApp never started
    (tmp_path / "status.json").write_bytes(b" " * (64 * 2**20 + 1))  # huge: one line too
    huge = run_outcome(tmp_path, 0.0)
    assert huge.code == 1 and "more than the 67108864 a run writes" in huge.message
    write_status(tmp_path, RunStatus(COMPLETED, 5, 5))
    written = json.loads((tmp_path / "status.json").read_text())["updated_unix_s"]
    done = run_outcome(tmp_path, written)
    assert done.code == 0 and done.message == f"completed: 5 rounds, results in {tmp_path}"
    assert run_outcome(tmp_path, written + 1.0).code == 1  # an older run's status
    write_status(tmp_path, RunStatus(FAILED, 3, 5, reason="RuntimeError: boom"))
    assert run_outcome(tmp_path, 0.0).message == "failed: RuntimeError: boom"
    write_status(tmp_path, RunStatus(RUNNING, 3, 5))  # how it continues: the command's last line
    assert run_outcome(tmp_path, 0.0).message == (
        "failed: the run stopped after round 3 of 5 without finishing (killed?)"
    )
    write_status(tmp_path, RunStatus(STOPPED, 4, 5, reason="stopped by SIGTERM"))
    assert run_outcome(tmp_path, 0.0).message == "failed: stopped by SIGTERM after round 4 of 5"
