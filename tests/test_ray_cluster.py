"""Scale-out: the simulation on a two-node Ray cluster (head + worker) inside a loopback-only
network namespace, with both nodes running ClientApps and nothing left running afterwards."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from subprocesses import FEDCGD, start_in_own_session

from experiments.cli import invoke
from experiments.run import ray_cluster
from experiments.run.ray_cluster import LocalRayCluster, require_loopback_only
from experiments.run.ray_cluster_check import REPORT_PREFIX
from run_files.results import METRICS_FILE, SUMMARY_FILE

# A fresh network namespace with only loopback, then the command given after it.
NAMESPACE = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
MARKER = "FEDCGD_RAY_CLUSTER_TEST"


def _namespace_problem() -> str | None:
    """Why a loopback-only network namespace cannot be made here, or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) not installed"
    try:
        proc = subprocess.run(
            [*NAMESPACE, "true"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unshare --net failed: {err}"
    if proc.returncode != 0:
        return f"unshare --net is not permitted here (needs root): {proc.stderr.strip()}"
    return None


def _marked_pids(marker: str) -> list[int]:
    """PIDs of live processes whose environment carries ``MARKER=marker``."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def test_refuses_outside_a_loopback_only_namespace(monkeypatch):
    monkeypatch.setattr(ray_cluster, "detected_node_ip", lambda: "192.0.2.2")
    with pytest.raises(ValueError, match=r"192\.0\.2\.2.*unshare --net"):
        require_loopback_only()
    cluster = LocalRayCluster()
    with pytest.raises(ValueError, match=r"192\.0\.2\.2"), cluster:
        pass
    assert cluster.processes == []  # nothing was started
    assert invoke(["ray-cluster", "run", "--", "true"]) == 2


def test_command_line_needs_a_command(capsys):
    assert invoke(["ray-cluster", "run", "--workers", "1"]) == 2
    assert capsys.readouterr().err == "error: give the command to run after --\n"


@pytest.mark.slow  # a minute: two Ray nodes and a simulation on them
def test_simulation_runs_on_both_nodes_of_a_two_node_cluster(tmp_path):
    problem = _namespace_problem()
    if problem is not None:
        pytest.skip(problem)
    marker = uuid.uuid4().hex
    out = tmp_path / "run"
    # Ray's socket paths must stay under 107 characters: a short folder, not tmp_path.
    ray_temp = Path(tempfile.mkdtemp(prefix="ray-"))
    command = [
        *NAMESPACE,
        FEDCGD,
        "ray-cluster",
        "run",
        "--workers",
        "1",
        "--cpus-per-node",
        "1",
        "--temp-dir",
        str(ray_temp),
        "--",
        FEDCGD,
        "ray-cluster",
        "check",
        "--num-devices",
        "4",
        "--rounds",
        "2",
        "--result-dir",
        str(out),
        "--flwr-home",
        str(tmp_path / "flwr-home"),
    ]
    env = {**os.environ, MARKER: marker, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    env.pop("RAY_ADDRESS", None)
    proc = start_in_own_session(command, env, merge_stderr=True)
    leftovers: list[int] = []
    try:
        try:
            output = proc.communicate(timeout=540)[0]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # the CLI stops the cluster on SIGTERM
            output = proc.communicate(timeout=60)[0]
            pytest.fail("the run on the Ray cluster timed out:\n" + output[-4000:])
        deadline = time.monotonic() + 10.0
        while (leftovers := _marked_pids(marker)) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in _marked_pids(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(ray_temp, ignore_errors=True)

    assert proc.returncode == 0, output[-4000:]
    reports = [line for line in output.splitlines() if line.startswith(REPORT_PREFIX)]
    assert len(reports) == 1, output[-4000:]
    report = json.loads(reports[0][len(REPORT_PREFIX) :])
    assert report["returncode"] == 0
    nodes = report["nodes"]
    assert len(nodes) == 2 and report["head"] in nodes
    # 1 CPU per node and per ClientApp: one ClientApp actor on each node, each handled messages.
    assert report["actors_per_node"] == {node: 1 for node in nodes}
    assert all(report["runs_per_node"].get(node, 0) >= 1 for node in nodes)
    assert report["spread"] is True

    lines = [json.loads(x) for x in (out / METRICS_FILE).read_text().splitlines()]
    assert [x["round"] for x in lines] == [1, 2]
    assert all(x["num_available"] == 4 for x in lines)
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert summary["rounds"] == 2

    assert leftovers == [], f"processes left running: {leftovers}"
