"""Hydra presets in conf/: they compose, their run configs validate, and a sweep runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fake_runs import finishing_flwr, last_two_lines, read_csv, rerun_command
from hydra import compose, initialize_config_dir

from experiments.analysis.plot_runs import point_label
from experiments.compare import execution, reproduce
from experiments.compare.reproduce import (
    CONF_DIR,
    hydra_overrides,
    planned_runs,
    planned_seeds,
    sweep_points,
)
from experiments.paper.settings import PAPER_CIFAR10
from fedcgd_config.settings import default_run_config
from server_app.config import parse_run_config

PRESETS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))


def load(preset: str, overrides: list[str] | None = None):
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose("config", overrides=[f"experiment={preset}", *(overrides or [])])


def fake_flwr(calls: list, fails=lambda run_config: False):
    """2-round runs, accuracy 0.5 + 0.1 seed (FedCGD-FSCD: + 0.05), or the ServerApp failed."""
    acc = lambda c: [0.5 + 0.1 * c["seed"] + (0.05 if c["policy"] == "fedcgd-fscd" else 0)] * 2  # noqa: E731
    return finishing_flwr(calls, acc, lambda c: "status" if fails(c) else None)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_validates_takes_seeds_and_every_run_config_key(preset):
    """Each preset plans; ``run.<key>=<value>`` for each key of pyproject's run config (not the
    seed, the policy or the result folders, which the preset's other settings own)."""
    cfg = load(preset)
    plans = planned_runs(cfg)
    assert len(plans) == len(sweep_points(dict(cfg.sweep)))
    for _, overrides in plans:
        assert Path(overrides["data-dir"]).is_absolute()
    reproduce.check_figure_metrics(cfg.get("figure_metrics"))  # the table has them
    seeded = load(preset, ["seeds=[0,1]"])
    assert planned_seeds(seeded) == [0, 1] and planned_runs(seeded)
    owned = {"seed", "policy", "result-dir", "resume-from"}
    values = {"data-dir": "/abs/data", "num-server-rounds": 7, "channel.deadline-s": 3.5}
    swept = set(load(preset, hydra_overrides([])).sweep)
    settings = {k: values.get(k, v) for k, v in default_run_config().items() if k not in owned}

    def override(key: str) -> str:
        value = settings[key]
        return f"run.{key}=" + (f"'{value}'" if isinstance(value, str) else str(value).lower())

    # Every key the sweep does not own, set in one command line: each run holds each value.
    free = [key for key in settings if key not in swept]
    runs = planned_runs(load(preset, hydra_overrides([override(key) for key in free])))
    for _, overrides in runs:
        for key in free:
            assert overrides[key] == settings[key], key
    for key in swept & settings.keys():  # the sweep owns it: one line saying so
        cfg = load(preset, hydra_overrides([override(key)]))
        with pytest.raises(ValueError, match=f"sweep.{key}="):
            planned_runs(cfg)


SEVEN = ["fedcgd-fscd-gc", "fedcgd-fscd", "fedcgd-gs", "bc", "bn2", "poc", "fedcbs"]
CIFAR = {k: PAPER_CIFAR10[k] for k in ("num-devices", "channel.availability-prob", "batch-size")}
CIFAR |= {"learning-rate": PAPER_CIFAR10["learning-rate"], "channel.deadline-s": 2.0}
CIFAR10 = {**CIFAR, "dataset": "cifar10", "poc-candidates": 17}
#: The paper's cell with a deadline that needs its CIFAR-10 uplink rate: 2 s × (5,210 × 32 bit)
#: / (258,898 × 32 bit) = 0.040248 s, written 0.0402 s; the app's bandwidth (20 MHz).
MNIST1D = {
    "dataset": "mnist1d", "model": "auto", "num-devices": 64, "batch-size": 32,
    "channel.availability-prob": 0.3, "poc-candidates": 17, "channel.deadline-s": 0.0402,
    "channel.total-bandwidth-hz": None, "partition": "shards", "shards-per-device": 1,
}  # fmt: skip


@pytest.mark.parametrize(
    ("preset", "sweep", "policies", "seeds", "target", "run"),
    [
        ("cifar10_imbalance", {"imbalance-ratio": [1.0, 3.0, 9.0]}, SEVEN[1:], [0], 0.65, CIFAR10),
        ("cifar10_dirichlet", {"dirichlet-alpha": [0.1, 1.0, 10.0]}, SEVEN[1:], [0], 0.65, CIFAR10),
        (
            "cifar10_local_steps", {"local-steps": [1, 5]}, SEVEN, [0], 0.65,
            {**CIFAR10, "shards-per-device": 1},
        ),
        (
            "cifar100_local_steps", {"local-steps": [1, 5, 10]}, ["fedcgd-fscd", "bc"], [0], 0.3,
            {**CIFAR, "channel.deadline-s": 120.0, "shards-per-device": 5, "poc-candidates": None},
        ),
        ("mnist1d_local_steps", {"local-steps": [1, 5]}, SEVEN, [0, 1, 2, 3, 4], 0.8, MNIST1D),
        (
            "mnist1d_imbalance", {"imbalance-ratio": [1.0, 3.0, 9.0]}, SEVEN, [0, 1, 2, 3, 4], 0.7,
            {**MNIST1D, "local-steps": 1},
        ),
        (
            "mnist1d_dirichlet", {"dirichlet-alpha": [0.1, 1.0, 10.0]}, SEVEN[1:], [0, 1, 2, 3, 4],
            0.8, {**MNIST1D, "partition": "dirichlet", "shards-per-device": None, "local-steps": 1},
        ),
    ],
)  # fmt: skip
def test_the_paper_presets_carry_the_paper_settings(preset, sweep, policies, seeds, target, run):
    """CIFAR: the paper's cell and training; MNIST-1D: its cell and devices, 5 seeds, in-process."""
    cfg = load(preset)
    assert {k: list(v) for k, v in cfg.sweep.items()} == sweep
    assert list(cfg.policies) == policies and planned_seeds(cfg) == seeds
    assert cfg.target_accuracy == target and {k: cfg.run.get(k) for k in run} == run
    mnist1d = preset.startswith("mnist1d")
    engine = ("inprocess", 0) if mnist1d else ("simulation", 1)
    assert (cfg.launcher.engine, cfg.launcher.jobs) == engine
    assert abs(MNIST1D["channel.deadline-s"] - 2.0 * 5_210 / 258_898) < 1e-4
    assert default_run_config()["channel.total-bandwidth-hz"] == 20e6


def test_conf_setting_and_the_paper_settings_module_state_the_same_setting():
    """Laying PAPER_CIFAR10 over the tau = 1 point (Table II's setting) changes nothing."""
    assert planned_seeds(load("digits_policies", ["seeds=7"])) == [7]  # one seed as an integer
    (point, overrides), _ = planned_runs(load("cifar10_local_steps"))
    assert point == {"local-steps": 1}
    base = {**default_run_config(), **overrides, "policy": "bc", "result-dir": "/abs/run"}
    assert parse_run_config(base) == parse_run_config({**base, **PAPER_CIFAR10})
    assert parse_run_config(base) != parse_run_config({**base, "channel.deadline-s": 3.0})


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("+run.num-devices=0", "num-devices"),
        ("+run.num-rounds=3", "unknown run-config key 'num-rounds'"),
        ("run.num-rounds=3", "'num-rounds'; did you mean num-server-rounds? every key"),
        ("policies=[fedsgd]", "'policy' = 'fedsgd'; did you mean fedcgd-gs or fedcgd-cd or"),
        ("seeds=[a]", "not a non-negative integer"),  # repeats, none, -1: test_compare_policies
        ("seeds=x", "not a list"),
        ("+run.seed=3", "seeds="),
        ("+sweep.seed=[0,1]", "seeds="),
        ("run.policy='bc'", "policies="),  # keys the preset owns
        ("run.result-dir='/x'", "out="),
        ("sweep.resume-from=['/x']", "running the same command again"),
        ("out=${oc.env:FEDCGD_TEST_UNSET}", "full_key: out"),  # a traceback, exit 1
        ("~launcher", "launcher: removed by the overrides"),  # a traceback, exit 1
        ("~launcher.jobs", "launcher.jobs: removed by the overrides"),
        ("policies=[]", "policies: give at least one policy"),  # exit 0, "all 0 runs completed"
        ("policies=null", "policies = None"),  # a traceback, exit 1
        ("policies=bc", "policies = 'bc'"),  # read letter by letter: "policy = 'b'"
        ("run=5", "run = 5"),  # "Input cfg is not an OmegaConf config object (int)"
        ("sweep=3", "sweep = 3"),
        ("experiment=no_such_preset", "Could not find 'experiment/no_such_preset'"),
        (
            "+figure_metrics=[max_accuracy,wemd]",
            "figure_metrics = ['max_accuracy', 'wemd'] names 'wemd'; allowed: final_accuracy, "
            "max_accuracy, rounds_to_target, mean_scheduled, mean_wemd",
        ),
    ],
)
def test_bad_hydra_overrides_are_one_line_and_exit_2(
    tmp_path, monkeypatch, capsys, override, named
):
    monkeypatch.delenv("FEDCGD_TEST_UNSET", raising=False)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    code = reproduce.main(["experiment=digits_policies", f"out={out}", override])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and named in err[0], err
    assert list(tmp_path.iterdir()) == []  # no folder: out, nor results/ for an unset out


def test_a_seeded_sweep_writes_tables_over_seeds(tmp_path, monkeypatch, capsys):
    """The whole reproduce path with the federation replaced by fake result folders."""
    calls: list[dict] = []
    monkeypatch.setattr(execution, "run_flwr", fake_flwr(calls))
    out = tmp_path / "sweep"
    cfg = load(
        "digits_policies",
        ["policies=[bc,fedcgd-fscd]", "seeds=[0,1,2]", "+sweep.local-steps=[1,2]", f"out={out}"],
    )
    assert reproduce.reproduce(cfg, "fedcgd reproduce experiment=digits_policies ...") == 0
    assert len(calls) == 2 * 2 * 3
    preset = (out / "preset.yaml").read_text()  # which settings the preset and command set
    assert preset.startswith("# fedcgd reproduce experiment=digits_policies ...\n")
    composed = yaml.safe_load(preset)
    assert composed["policies"] == ["bc", "fedcgd-fscd"] and composed["seeds"] == [0, 1, 2]
    assert composed["sweep"]["local-steps"] == [1, 2] and composed["out"] == str(out)
    assert {(c["local-steps"], c["policy"], c["seed"]) for c in calls} == {
        (t, p, s) for t in (1, 2) for p in ("bc", "fedcgd-fscd") for s in (0, 1, 2)
    }
    assert (
        "[local-steps=2 2/2] [policy 2/2, seed 3/3] fedcgd-fscd seed=2" in capsys.readouterr().out
    )
    assert (out / "local-steps=1" / "bc" / "seed-2" / "summary.json").exists()
    rows = read_csv(out / "table.csv")
    assert [(r["sweep"], r["policy"]) for r in rows] == [
        (f"local-steps={t}", p) for t in (1, 2) for p in ("bc", "fedcgd-fscd")
    ]
    bc = rows[0]
    assert bc["n_seeds"] == "3" and float(bc["final_accuracy_mean"]) == pytest.approx(0.6)
    assert float(bc["diff_vs_fedcgd_fscd"]) == pytest.approx(-0.05)
    assert bc["p_value_vs_fedcgd_fscd"] == ""  # constant difference: the t-test is undefined
    assert bc["reached_target"] == "2"  # target 0.6: seeds 1 and 2
    assert len(read_csv(out / "runs.csv")) == 12
    assert (out / "local-steps=1" / "table.csv").exists()
    assert (out / "local-steps=2" / "curves.png").stat().st_size > 0
    assert (out / "estimates.png").stat().st_size > 0
    assert sweep_points({"a": [1, 2], "b": ["x", "y", "z"]})[5] == {"a": 2, "b": "z"}
    assert sweep_points({}) == [{}] and point_label({}) == "default"
    calls.clear()
    assert reproduce.reproduce(cfg) == 0  # resumed: nothing runs again
    assert calls == []
    assert capsys.readouterr().out.strip().splitlines()[-1] == "all 12 runs completed"

    # other settings into the same folder: refused before anything runs, naming the folders
    words = ["policies=[bc,fedcgd-fscd]", "seeds=[0,1,2,3]", "sweep.local-steps=[1,2]"]
    fewer = load(
        "digits_policies", hydra_overrides([*words, "run.num-server-rounds=3", f"out={out}"])
    )
    assert reproduce.reproduce(fewer) == 2 and calls == []
    err = capsys.readouterr().err
    kept = out / "local-steps=1" / "bc" / "seed-0"
    assert err.startswith(f"error: {kept}: num-server-rounds = 50 there, 3 now; ")
    assert err.count("\n") == 1
    assert not (out / "local-steps=1" / "bc" / "seed-3").exists()


def test_a_failed_run_makes_the_exit_code_1_and_is_named_last(tmp_path, monkeypatch, capsys):
    fails = lambda c: c["policy"] == "bc" and c["local-steps"] == 2  # noqa: E731
    monkeypatch.setattr(execution, "run_flwr", fake_flwr([], fails))
    out = tmp_path / "failing"
    words = ["experiment=digits_policies", "policies=[bc,all]", "sweep.local-steps=[1,2]",
             f"out={out}"]  # fmt: skip
    assert reproduce.main(words) == 1  # the command, as the user wrote it
    failed, last = last_two_lines(capsys, out)
    assert failed == (
        "1 of 4 runs failed: local-steps=2/bc/seed-0 (RuntimeError: ActorPool is empty); the "
        "tables hold the 3 completed runs"
    )
    assert rerun_command(last, "reproduce") == words
    assert len(read_csv(out / "runs.csv")) == 3
