"""Deployments on loopback: TLS with SuperNode authentication, a SuperNode that dies and comes
back, too few SuperNodes. Every process is stopped by its PID, also when a test fails."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from task_settings import all_available_run

from experiments.cli import invoke
from experiments.run.certificates import make_certificates
from experiments.run.flwr_run import LocalFederation
from experiments.run.processes import stop
from experiments.run.run_config import format_run_config, validated_run_config
from fedcgd_config.schema import PROJECT_DIR
from fedcgd_config.settings import resolve_data_dir
from server_app.run_folder.results import CONFIG_FILE, METRICS_FILE, MODEL_FILE, SUMMARY_FILE


def metrics(out: Path) -> list[dict]:
    text = (out / METRICS_FILE).read_text() if (out / METRICS_FILE).exists() else ""
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def test_tls_with_supernode_authentication_on_a_given_superlink(tmp_path, capsys):
    """Two SuperNodes, one round (each message starts a ClientApp process: 15 s a round trip
    on two cores), run with ``fedcgd run --superlink --root-certificates``; the run's query,
    schedule and training go over TLS. Meanwhile a SuperNode whose key was never registered
    tries to join the same SuperLink and is refused."""
    certs = make_certificates(tmp_path / "certs", supernodes=2)
    stranger = make_certificates(tmp_path / "stranger", supernodes=1)
    out = tmp_path / "tls"
    data = {"policy": "fedcgd-fscd", "data-dir": str(resolve_data_dir(""))}
    config = format_run_config(all_available_run(out, 2, 1, data))
    with LocalFederation(tmp_path / "home", num_supernodes=2, simulation=False, tls=certs) as fed:
        key = stranger.supernode_keys[0]
        intruder = fed.start_supernode(0, private_key=key, register=False)
        link = ["--superlink", f"127.0.0.1:{fed.http_port}", "--root-certificates", certs.ca_cert]
        code = invoke(["run", *map(str, link), "--run-config", config])
        assert intruder.wait(timeout=120) != 0  # it exits with an error
        assert "Failed to activate SuperNode" in (fed.log_dir / "supernode-0-3.log").read_text()
        assert all(p.poll() is None for p in fed.processes[1:3])  # the registered ones run on
    assert code == 0, capsys.readouterr().err[-3000:]
    for name in (CONFIG_FILE, METRICS_FILE, MODEL_FILE, SUMMARY_FILE):
        assert (out / name).exists(), name
    lines = metrics(out)
    assert [x["round"] for x in lines] == [1]
    assert all(x["num_available"] == 2 and x["num_uploaded"] >= 1 for x in lines)


def flwr_run(fed: LocalFederation, run_config: dict) -> subprocess.Popen[str]:
    options = ["--run-config", format_run_config(run_config)]
    return fed.flwr_run(PROJECT_DIR, options, start_new_session=True)


def test_every_started_process_is_stopped_by_pid(tmp_path):
    with LocalFederation(tmp_path / "home", num_supernodes=2, simulation=False) as fed:
        pids = [p.pid for p in fed.processes]
        assert len(pids) == 3  # the SuperLink and two SuperNodes
        for pid in pids:
            os.kill(pid, 0)  # running
    for pid in pids:  # each stopped by its PID
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_too_few_supernodes_fail_after_the_timeout(tmp_path):
    with LocalFederation(tmp_path / "home", num_supernodes=2, simulation=False) as fed:
        stop([fed.processes[-1]])  # only one of two SuperNodes remains
        values = {"num-devices": 2, "num-server-rounds": 1, "query-timeout-s": 4.0}
        config = {**validated_run_config(values), "result-dir": str(tmp_path / "few")}
        run = flwr_run(fed, config)
        try:
            output, _ = run.communicate(timeout=300)
        finally:
            stop([run])
    assert "only 1 of 2 SuperNodes connected after 4 s" in output
    assert not (tmp_path / "few" / SUMMARY_FILE).exists()


ROUNDS = 5


@pytest.mark.slow  # a minute: a deployment whose SuperNode is killed and restarted
def test_a_supernode_that_dies_is_recorded_and_used_again_after_restart(tmp_path):
    out = tmp_path / "failure"
    config = validated_run_config(
        {"num-devices": 3, "num-server-rounds": ROUNDS, "policy": "all",
         "channel.availability-prob": 1.0, "channel.deadline-s": 1.0, "query-timeout-s": 60.0,
         "train-timeout-s": 60.0}
    )  # fmt: skip
    config["result-dir"] = str(out)
    with LocalFederation(tmp_path / "home", num_supernodes=3, simulation=False) as fed:
        run = flwr_run(fed, config)
        victim = fed.processes[2]  # the SuperNode of partition 1
        try:
            while len(metrics(out)) < 1 and run.poll() is None:
                time.sleep(0.5)
            stop([victim])
            while not any(1 in x["disconnected"] for x in metrics(out)) and run.poll() is None:
                time.sleep(0.5)
            fed.start_supernode(1)
            output, _ = run.communicate(timeout=900)
        finally:
            stop([run])
    assert run.returncode == 0, output[-3000:]
    lines = metrics(out)
    assert [x["round"] for x in lines] == list(range(1, ROUNDS + 1))
    gone = [x["round"] for x in lines if x["disconnected"] == [1]]
    assert gone, [x["disconnected"] for x in lines]
    back = [x["round"] for x in lines if 1 in x["uploaded"] and x["round"] > gone[-1]]
    assert back, [(x["round"], x["uploaded"]) for x in lines]
    assert all(x["disconnected"] in ([], [1]) for x in lines)
