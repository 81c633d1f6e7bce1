"""One real ``flwr run`` simulation (Ray backend) on digits: result files, learning, and the
same run bit for bit as the in-process engine one device at a time (``--per-device``)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from doc_pages import PROJECT
from run_results import comparable, same_model
from subprocesses import FEDCGD, run_fedcgd, run_ok
from test_paths import hostile_folder

from experiments.cli import invoke
from experiments.run.flwr_run import _free_port, executable, run_flwr
from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import validated_run_config
from server_app.run_folder.results import CONFIG_FILE, METRICS_FILE, MODEL_FILE, SUMMARY_FILE

ROUNDS = 4


def test_flwr_run_simulation_learns_writes_results_and_equals_inprocess(tmp_path):
    """Also: the result folder's path holds a space, both quotes, a backslash and a non-BMP
    character, which the run config's TOML file must carry to the ServerApp unchanged."""
    out = hostile_folder(tmp_path) / "run 𝔘"
    overrides = {"num-devices": 6, "num-server-rounds": ROUNDS, "dirichlet-alpha": 10.0,
                 "channel.availability-prob": 0.8, "channel.deadline-s": 0.006, "device": "cpu",
                 "result-dir": str(out)}  # fmt: skip
    proc = run_flwr(overrides, num_supernodes=6, flwr_home=tmp_path / "flwr-home")
    assert proc.returncode == 0, proc.stdout[-3000:]
    for name in (CONFIG_FILE, METRICS_FILE, MODEL_FILE, SUMMARY_FILE):
        assert (out / name).exists(), name
    lines = [json.loads(x) for x in (out / METRICS_FILE).read_text().splitlines()]
    assert [x["round"] for x in lines] == list(range(1, ROUNDS + 1))
    assert all(x["num_scheduled"] >= 1 for x in lines)
    summary = json.loads((out / SUMMARY_FILE).read_text())
    # Ten classes: chance is 0.10. Four rounds of FedCGD on digits reach well above it.
    assert summary["final_accuracy"] > 0.3
    assert f"round    {ROUNDS}/{ROUNDS}" in proc.stdout
    here = tmp_path / "inprocess"
    config = validated_run_config({**overrides, "result-dir": str(here)})
    config["data-dir"] = str((Path.cwd() / "data").resolve())
    assert config["device"] == "cpu"  # as under flwr run: Ray gives a ClientApp no GPU it asks none
    run_inprocess(config, cohorts=False)  # one device at a time, as flwr run computes each
    assert any(0 < x["num_scheduled"] < x["num_available"] for x in lines)  # bandwidth binds
    assert comparable(here) == comparable(out) and same_model(out, here)


@pytest.mark.slow
def test_default_run_of_make_run(tmp_path):
    """What `make run` runs: the default settings, 40 devices, 50 rounds (README's promises)."""
    proc = run_fedcgd("run", "--results", str(tmp_path))
    (result_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert f"Results: {result_dir}" in proc.stdout
    assert f"events.out.tfevents.*; tensorboard --logdir {result_dir})" in proc.stdout
    summary = json.loads((result_dir / SUMMARY_FILE).read_text())
    assert summary["rounds"] == 50
    assert summary["final_accuracy"] >= 0.85
    lines = [json.loads(x) for x in (result_dir / METRICS_FILE).read_text().splitlines()]
    acc = [x["accuracy"] for x in lines]
    third = len(acc) // 3
    assert max(acc[i - 1] - acc[i] for i in range(third + 1, len(acc))) <= 0.15
    scheduled = sum(x["num_scheduled"] for x in lines) / len(lines)
    available = sum(x["num_available"] for x in lines) / len(lines)
    assert scheduled < 0.6 * available  # bandwidth binds: clearly fewer than available
    assert (result_dir / "curves.png").exists()


def readme_flower_block() -> tuple[dict[str, str], list[str]]:
    """The README's ``flwr run .`` block: its exported variables and its ``flwr run`` words."""
    text = (PROJECT / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```\n(export FLWR_DISABLE[^`]*?)```", text)
    export, run = block.strip().splitlines()
    name, _, value = export.removeprefix("export ").partition("=")
    return {name: value}, shlex.split(run)


def test_a_bare_flwr_run_names_the_fix_at_once_and_the_fix_runs(tmp_path):
    """README's ``flwr run .`` without ``--federation-config``: one line naming the command, no
    folder; that command completes; the SuperLink it left is stopped by the PID ``ss`` shows."""
    exported, words = readme_flower_block()
    assert exported == {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    assert words[:4] == ["flwr", "run", ".", "--stream"]
    assert words[4:] == ["--federation-config", "num-supernodes=40 client-resources-num-cpus=1"]
    port = _free_port()
    env = {
        **os.environ, **exported, "FLWR_HOME": str(tmp_path / "home"),
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(port),
        "FLWR_LOCAL_CONTROL_API_PORT": str(_free_port()),
        "PATH": f"{Path(executable('flwr')).parent}{os.pathsep}{os.environ['PATH']}",
    }  # fmt: skip
    tiny = "num-devices=3 num-server-rounds=1 channel.availability-prob=1.0 device='cpu'"

    def flwr_run(*options: str, out: Path) -> subprocess.CompletedProcess[str]:
        config = f"{tiny} result-dir='{out}'"
        command = [*words[:4], *options, "--run-config", config]
        return subprocess.run(
            command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600
        )

    try:
        bare = flwr_run(out=tmp_path / "bare")
        assert bare.returncode == 0  # Flower's: the run was started (README, "How it ended")
        assert "Traceback" not in bare.stdout + bare.stderr, bare.stdout[-3000:]
        (line,) = [x for x in bare.stdout.splitlines() if x.startswith("run failed: ")]
        assert line.startswith(
            "run failed: Flower's simulation has 2 SuperNodes but num-devices = 3 needs one per "
            'device: run flwr run . --stream --federation-config "num-supernodes=3 '
            'client-resources-num-cpus=1"'
        )
        assert not (tmp_path / "bare").exists()
        fix = line.split("--federation-config ")[1].split('"')[1]
        fixed = flwr_run("--federation-config", fix, out=tmp_path / "fixed")
        assert f"results written to {tmp_path / 'fixed'} (completed)" in fixed.stdout, (
            fixed.stdout[-3000:] + fixed.stderr[-3000:]
        )
        status = json.loads((tmp_path / "fixed" / "status.json").read_text())
        assert status["state"] == "completed"
    finally:  # the PID listening on the port, as the README finds it (ss -ltnpH)
        ss = ["ss", "-ltnpH", f"sport = :{port}"]
        (pid,) = set(re.findall(r"pid=(\d+)", run_ok(ss, timeout=30).stdout))
        os.kill(int(pid), 15)
        for _ in range(100):
            listening = ["ss", "-ltnH", f"sport = :{port}"]
            if not subprocess.run(listening, capture_output=True, text=True).stdout.strip():
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the SuperLink {pid} still listens on {port}")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--num-supernodes", "2", "--run-config", "num-devices=4"],
         "--num-supernodes 2 < num-devices = 4: a simulation needs one SuperNode per device; "
         "leave --num-supernodes out"),
        (["--superlink", "127.0.0.1:1"], "SuperLink at 127.0.0.1:1 is not reachable"),
        (["--run-config", "dataset='cifar10' data-dir='{tmp}/none'"], "cifar10 files not found"),
    ],
)  # fmt: skip
def test_fedcgd_run_refuses_in_one_line_before_the_start(tmp_path, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert invoke(["run", *argv, "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and message in line, line
    assert not (tmp_path / "out").exists()  # refused before the start: no folder


def test_a_failed_fedcgd_run_ends_on_its_own_outcome_and_exit_code_1(tmp_path):
    """No device can meet a 1 µs deadline: the run fails; its outcome, not Flower's exit code."""
    out = tmp_path / "run"
    config = f"num-devices=2 num-server-rounds=1 channel.deadline-s=1e-6 result-dir='{out}'"
    proc = subprocess.run(
        [FEDCGD, "run", "--run-config", config], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    failed, last = proc.stderr.strip().splitlines()
    assert failed == (
        "failed: no device uploaded an update in any of the 1 rounds, so the model never "
        "changed: none was scheduled (deadline, bandwidth or availability too tight?)"
    )
    assert last == f"nothing to continue: all 1 rounds ran; results in {out}"
    assert json.loads((out / "status.json").read_text())["state"] == "failed"
