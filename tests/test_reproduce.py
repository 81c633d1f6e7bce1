"""Hydra presets in conf/: they compose, their run configs validate, and a sweep runs."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from experiments.reproduce import CONF_DIR, planned_runs, point_label, sweep_points

PRESETS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))


def load(preset: str, overrides: list[str] | None = None):
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose("config", overrides=[f"experiment={preset}", *(overrides or [])])


def test_there_is_a_preset_per_paper_experiment():
    assert set(PRESETS) >= {
        "digits_policies",
        "cifar10_local_steps",
        "cifar10_imbalance",
        "cifar10_dirichlet",
        "cifar100_local_steps",
    }


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_and_validates(preset):
    cfg = load(preset)
    plans = planned_runs(cfg)
    assert len(plans) == len(sweep_points(dict(cfg.sweep)))
    for _, overrides in plans:
        assert Path(overrides["data-dir"]).is_absolute()


def test_presets_carry_the_paper_settings():
    imbalance = load("cifar10_imbalance")
    assert list(imbalance.sweep["imbalance-ratio"]) == [1.0, 3.0, 9.0]
    dirichlet = load("cifar10_dirichlet")
    assert list(dirichlet.sweep["dirichlet-alpha"]) == [0.1, 1.0, 10.0]
    assert dirichlet.target_accuracy == 0.65
    tau = load("cifar10_local_steps")
    assert list(tau.sweep["local-steps"]) == [1, 5]
    assert "fedcgd-fscd-gc" in tau.policies and tau.run["shards-per-device"] == 1
    for cfg in (imbalance, dirichlet, tau):
        assert cfg.run["num-devices"] == 64
        assert cfg.run["channel.availability-prob"] == 0.3
        assert cfg.run["channel.deadline-s"] == 2.0
        assert cfg.run["learning-rate"] == 0.1 and cfg.run["batch-size"] == 32
    c100 = load("cifar100_local_steps")
    assert list(c100.sweep["local-steps"]) == [1, 5, 10]
    assert c100.run["channel.deadline-s"] == 120.0 and c100.run["shards-per-device"] == 5
    assert set(c100.policies) == {"fedcgd-fscd", "bc"}


def test_bad_overrides_are_rejected_before_any_run():
    with pytest.raises(ValueError, match="num-devices"):
        planned_runs(load("digits_policies", ["+run.num-devices=0"]))
    with pytest.raises(ValueError, match="do not exist"):
        planned_runs(load("digits_policies", ["+run.num-rounds=3"]))
    with pytest.raises(ValueError, match="unknown"):
        planned_runs(load("digits_policies", ["policies=[fedsgd]"]))


def test_sweep_points_are_the_cartesian_product():
    points = sweep_points({"a": [1, 2], "b": ["x", "y", "z"]})
    assert len(points) == 6 and {"a": 2, "b": "z"} in points
    assert sweep_points({}) == [{}]
    assert point_label({"local-steps": 5}) == "local-steps=5"
    assert point_label({}) == "default"


@pytest.mark.slow
def test_reproduce_runs_a_small_sweep(tmp_path):
    out = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.reproduce",
            "experiment=digits_policies",
            "policies=[all,fedcgd-fscd]",
            "+sweep.local-steps=[1,2]",
            "+run.num-devices=4",
            "+run.num-server-rounds=2",
            f"out={out}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = list(csv.DictReader((out / "table.csv").open()))
    assert {(r["sweep"], r["policy"]) for r in rows} == {
        (f"local-steps={t}", p) for t in (1, 2) for p in ("all", "fedcgd-fscd")
    }
    assert (out / "estimates.png").stat().st_size > 0
    assert (out / "local-steps=2" / "curves.png").exists()
