"""Runs as Ray tasks: bad settings refused in one line before any run starts (no cluster needed).

The runs themselves on a loopback cluster of two nodes: tests/test_ray_cluster.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from proc_tree import command_line, descendants
from run_results import assert_same_run, whole_run
from subprocesses import FEDCGD, wait_for

from experiments.cli import invoke
from experiments.compare import execution
from experiments.compare.reproduce import CONF_DIR, reproduce
from experiments.run.flwr_run import _free_port
from experiments.run.ray_runs import TOKEN_FILE, RaySettings, moved, ray_settings
from fedcgd_config.schema import PROJECT_DIR

TINY = ["policies=[bc]", "seeds=[0]", "sweep.local-steps=[1]", "++run.num-server-rounds=1",
        "++run.num-devices=4"]  # fmt: skip


def load(overrides: list[str]):
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose("config", overrides=["experiment=digits_local_steps", *overrides])


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("launcher.ray-address=auto launcher.deployment=true",
         "launcher.engine: got deployment with runs as Ray tasks"),
        ("launcher.gpus-per-run=-1", "launcher.gpus-per-run: got -1; allowed: a number >= 0"),
        ("launcher.gpus-per-run=1.5", "launcher.gpus-per-run: got 1.5; allowed: a number >= 0"),
        ("launcher.cpus-per-run=0", "launcher.cpus-per-run: got 0; allowed: a number > 0"),
        ("launcher.cpus-per-run=two", "launcher.cpus-per-run: got 'two'; allowed"),
        ("launcher.gpus-per-run=0.5 launcher.jobs=2",
         "launcher.jobs: got 2 with runs as Ray tasks (launcher.ray-address or "
         "launcher.gpus-per-run); allowed: 1"),
        ("launcher.ray-address=127.0.0.1:{port}", "launcher.ray-address: no Ray cluster at "),
        ("RAY_ADDRESS=127.0.0.1:{port}", "launcher.ray-address: no Ray cluster at 127.0.0.1:"),
    ],
)  # fmt: skip
def test_bad_ray_settings_are_refused_in_one_line_before_any_run(
    given, expected, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    words = given.format(port=_free_port()).split()
    if words[0].startswith("RAY_ADDRESS="):
        monkeypatch.setenv("RAY_ADDRESS", words.pop().partition("=")[2])
    assert reproduce(load([*TINY, *words, f"out={tmp_path / 'out'}"])) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {expected}") and err.count("\n") == 1, err
    assert not list(tmp_path.glob("out/*/*/seed-0"))


def test_without_an_address_or_a_gpu_runs_stay_local(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_settings(None, 1, 0, engine="inprocess", jobs=1) is None
    assert ray_settings(None, 2, 0.25, engine="simulation", jobs=1) == RaySettings(None, 2, 0.25)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert ray_settings("", 1, 0, engine="inprocess", jobs=1) == RaySettings("10.0.0.1:6379")
    assert ray_settings("auto", 0.5, 2, engine="inprocess", jobs=1) == RaySettings("auto", 0.5, 2)


def test_a_moved_run_names_its_real_folder_in_its_json_and_log_only():
    old, new = "/tmp/fedcgd-run-x", '/home/me/ré"s'
    assert moved("config.json", b'{"result_dir": "/tmp/fedcgd-run-x"}', old, new) == (
        b'{"result_dir": "/home/me/r\\u00e9\\"s"}'
    )
    assert moved("run.log", b"in /tmp/fedcgd-run-x\n", old, new) == 'in /home/me/ré"s\n'.encode()
    assert moved("checkpoint.pt", b"/tmp/fedcgd-run-x", old, new) == b"/tmp/fedcgd-run-x"


def test_a_run_whose_ray_worker_dies_goes_again_from_its_checkpoint_in_its_folder(tmp_path):
    """A Ray of this machine sees the run's folder: the run writes there as it goes, and a run
    whose worker is killed after a checkpoint resumes from it, to the uninterrupted run."""
    # 200 rounds: about 12 s here, so the run is still going when the test looks for its task
    # on a faster machine (60 rounds once ended between the first checkpoint and the look).
    values = {"num-devices": 8, "num-server-rounds": 200, "checkpoint-every": 5, "policy": "bc"}
    out, folder = tmp_path / "out", tmp_path / "out" / "bc" / "seed-0"
    proc = bc_on_local_ray(out)
    try:
        tasks: list[int] = []

        def checkpointed_task() -> bool:
            if (folder / "checkpoint.pt").exists():
                tasks[:] = [p for p in descendants(proc.pid) if "ray::run_task" in command_line(p)]
            return len(tasks) == 1

        wait_for(checkpointed_task, proc, limit_s=300)
        os.kill(tasks[0], signal.SIGKILL)
        out_text, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, out_text[-3000:] + err[-3000:]
    assert "started again from its checkpoint" in out_text
    assert out_text.rstrip().endswith("all 1 runs completed (1 retried on Ray)"), out_text[-3000:]
    resumed = re.findall(
        rf"resuming {re.escape(str(folder))} after round (\d+)", (folder / "run.log").read_text()
    )
    assert len(resumed) == 1 and int(resumed[0]) % 5 == 0 and 5 <= int(resumed[0]) < 200
    whole_run(tmp_path / "whole", values)
    assert_same_run(folder, tmp_path / "whole", rounds=200)
    assert not (folder / TOKEN_FILE).exists()


def test_compare_names_its_own_options_and_a_signal_during_rays_start_gives_the_command(
    tmp_path, capsys, monkeypatch
):
    """A bad option of its own: one line naming it; Ctrl-C while the command joins Ray (before
    any run): the same command. Neither leaves a run's folder."""

    def interrupted_start(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    words = ["--policies", "bc", "--seeds", "0", "--engine", "inprocess", "--gpus-per-run", "-0.5"]
    assert invoke(["compare", *words, "--out", str(tmp_path / "refused")]) == 2
    refused = capsys.readouterr().err
    assert refused == ("error: --gpus-per-run: got -0.5; allowed: a number >= 0 (a fraction "
                       "shares one CPU or GPU; above 1 GPU, whole GPUs)\n")  # fmt: skip
    assert not (tmp_path / "refused" / "bc").exists()
    monkeypatch.setattr(execution, "connect", interrupted_start)
    out = tmp_path / "out"
    code = invoke(
        ["compare", "--policies", "bc", "--seeds", "0", "--engine", "inprocess",
         "--ray-address", "local", "--run-config", "num-devices=4", "--out", str(out)]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 130 and err[0].startswith("stopped by SIGINT"), err
    assert err[-1].startswith("to go on, run the same command again"), err
    assert err[-1].endswith(
        f"compare --policies bc --seeds 0 --run-config num-devices=4 --out {out} --engine "
        "inprocess --ray-address local"
    ), err
    assert not out.exists()


def bc_on_local_ray(out: Path) -> subprocess.Popen[str]:
    """``fedcgd compare`` of one 200-round BC run as a task of a local Ray, writing to ``out``."""
    settings = "num-devices=8 num-server-rounds=200 checkpoint-every=5"
    return subprocess.Popen(
        [FEDCGD, "compare", "--policies", "bc", "--seeds", "0", "--engine", "inprocess",
         "--ray-address", "local", "--run-config", settings, "--out", str(out)],
        cwd=PROJECT_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_ctrl_c_on_runs_as_ray_tasks_leaves_each_stopped_run_stopped(tmp_path):
    """docs/running.md: a run the command stopped says ``stopped`` in its status.json."""
    out, folder = tmp_path / "out", tmp_path / "out" / "bc" / "seed-0"
    proc = bc_on_local_ray(out)
    try:
        wait_for(lambda: (folder / "checkpoint.pt").exists(), proc, limit_s=300)
        proc.send_signal(signal.SIGINT)
        out_text, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 130, out_text[-3000:] + err[-3000:]
    assert err.rstrip().splitlines()[-1].endswith("--ray-address local"), err[-3000:]
    # Ray ends the stopped command's tasks with SIGTERM as the command's job ends; the command
    # waits for them to say so, and says it itself for a task Ray had to kill.
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "stopped", status
    ended = "stopped with the command (Ray ended its task before it said so)"
    assert status["reason"] in ("stopped by SIGTERM", ended), status
    assert 5 <= status["last_round"] < 200, status
