"""Settings shared by the tests: a small valid TaskSettings, a small federation's run config."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedcgd_config.settings import TaskSettings

BASE = TaskSettings(
    seed=0, num_devices=4, dataset="digits", data_dir="/tmp", model="mlp", partition="dirichlet",
    dirichlet_alpha=1.0, shards_per_device=2, imbalance_ratio=1.0,
)  # fmt: skip


def make_settings(**overrides: Any) -> TaskSettings:
    """:data:`BASE` with ``overrides`` applied."""
    return dataclasses.replace(BASE, **overrides)


def all_available_run(
    result_dir: Path, num_devices: int, rounds: int, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Run-config overrides of a small federation whose devices are available every round."""
    return {
        "num-devices": num_devices,
        "num-server-rounds": rounds,
        "channel.availability-prob": 1.0,
        **(extra or {}),
        "result-dir": str(result_dir),
    }


def checkpointed_run_config(result_dir: Path, **overrides: Any) -> dict[str, Any]:
    """The validated run config (data folder resolved) of a run into ``result_dir`` that
    checkpoints after every round; ``overrides`` add or replace keys."""
    from experiments.run.run_config import validated_run_config, with_resolved_data_dir

    overrides = {"checkpoint-every": 1, "result-dir": str(result_dir), **overrides}
    return with_resolved_data_dir(validated_run_config(overrides))


def refused_before_start(capsys: Any, run_config: Mapping[str, Any], out: Path) -> str:
    """The one error line of ``fedcgd inprocess --out out`` with ``run_config``: it exits 2 and
    makes no ``out``."""
    from experiments.cli import invoke
    from experiments.run.run_config import format_run_config

    code = invoke(["inprocess", "--run-config", format_run_config(run_config), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert not out.exists()
    return err[0]
