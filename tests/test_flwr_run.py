"""One real ``flwr run`` simulation (Ray backend) on digits: result files and learning."""

from __future__ import annotations

import json
import os

import pytest

from experiments.launcher import LocalSuperLink, run_simulation
from server_app.results import CONFIG_FILE, METRICS_FILE, MODEL_FILE, SUMMARY_FILE

ROUNDS = 8


@pytest.fixture(autouse=True)
def _no_runtime_install(monkeypatch):
    monkeypatch.setenv("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")


def test_flwr_run_simulation_learns_and_writes_results(tmp_path):
    out = tmp_path / "run"
    proc = run_simulation(
        {
            "num-devices": 6,
            "num-server-rounds": ROUNDS,
            "dirichlet-alpha": 10.0,
            "channel.availability-prob": 0.8,
            "channel.deadline-s": 1.0,
            "result-dir": str(out),
        },
        num_supernodes=6,
        flwr_home=tmp_path / "flwr-home",
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    for name in (CONFIG_FILE, METRICS_FILE, MODEL_FILE, SUMMARY_FILE):
        assert (out / name).exists(), name
    lines = [json.loads(x) for x in (out / METRICS_FILE).read_text().splitlines()]
    assert [x["round"] for x in lines] == list(range(1, ROUNDS + 1))
    assert all(x["num_scheduled"] >= 1 for x in lines)
    summary = json.loads((out / SUMMARY_FILE).read_text())
    # Ten classes: chance is 0.10. Eight rounds of FedCGD on digits reach well above it.
    assert summary["final_accuracy"] > 0.3
    assert "round    8/8" in proc.stdout


def test_superlink_is_stopped_by_pid(tmp_path):
    link = LocalSuperLink(tmp_path / "home")
    with link:
        pid = link.process.pid
        os.kill(pid, 0)  # running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
