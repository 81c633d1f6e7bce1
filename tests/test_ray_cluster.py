"""Scale-out: docs/deployment.md's Ray recipe run as written (ClientApps on both nodes, nothing
left); a preset's runs as Ray tasks on such a cluster give the table of a local run.

Run as a script (``python tests/test_ray_cluster.py ADDRESS``), this module is the probe the test
adds before ``ray stop``: it prints where the ClientApps ran (:func:`clientapp_placement`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from proc_tree import command_line, descendants, marked
from run_results import comparable, same_model
from subprocesses import run_ok, wait_for

from experiments.compare.reproduce import CONF_DIR, reproduce
from fedcgd_config.schema import PROJECT_DIR

PROBE_PREFIX = "CLIENTAPP-PLACEMENT "
#: Flower's ClientApp actor class in Ray.
CLIENT_ACTOR_CLASS = "ClientAppActor"


def clientapp_placement(address: str) -> dict[str, Any]:
    """Where the ClientApp actors lived and where their ``run`` calls finished (node id -> count),
    from the GCS's actor table and task events (kept without the dashboard for finished jobs)."""
    import ray
    from ray._private import state
    from ray.core.generated import common_pb2, gcs_pb2

    finished = common_pb2.TaskStatus.Value("FINISHED")
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        nodes = [node for node in ray.nodes() if node["Alive"]]
        actors = Counter(
            info["Address"]["NodeID"]
            for info in state.actors().values()
            if info.get("ActorClassName") == CLIENT_ACTOR_CLASS
        )
        runs: Counter[str] = Counter()
        for raw in state.state._connect_and_get_accessor().get_task_events():
            event = gcs_pb2.TaskEvents.FromString(raw)
            update = event.state_updates
            if (
                event.task_info.name == f"{CLIENT_ACTOR_CLASS}.run"
                and update.HasField("node_id")
                and finished in update.state_ts_ns
            ):
                runs[update.node_id.hex()] += 1
    finally:
        ray.shutdown()
    return {
        "nodes": sorted(n["NodeID"] for n in nodes),
        "head": next(n["NodeID"] for n in nodes if "node:__internal_head__" in n["Resources"]),
        "actors_per_node": dict(actors),
        "runs_per_node": dict(runs),
    }


def recipe() -> str:
    """The shell command of docs/deployment.md that runs the app on a loopback Ray cluster."""
    text = (PROJECT_DIR / "docs" / "deployment.md").read_text()
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "ray start --head" in b]
    assert len(blocks) == 1, blocks
    return blocks[0]


def skip_without_namespaces() -> None:
    """Skip the test when the recipe's namespaces cannot be made here."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare or ip (util-linux, iproute2) not installed")
    proc = subprocess.run(
        ["unshare", "--net", "--pid", "--fork", "--mount-proc", "ip", "link", "set", "lo", "up"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"unshare is not permitted here (needs root): {proc.stderr.strip()}")


def test_the_recipe_writes_its_results_into_the_git_ignored_results_folder():
    outs = re.findall(r"(?:--out |\bout=)(\S+)", recipe())
    assert len(outs) == 2 and all(o.split("/")[0] == "results" for o in outs), outs
    assert "results/" in (PROJECT_DIR / ".gitignore").read_text().splitlines()


@pytest.mark.slow  # 2-3 min: two Ray nodes, a simulation and a preset on them
def test_the_documented_recipe_runs_clientapps_on_both_nodes_and_leaves_nothing(tmp_path):
    skip_without_namespaces()
    # As written, from a folder holding the environment as .venv (results land in its results/),
    # with the probe before `ray stop`.
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    probe = f".venv/bin/python {Path(__file__).resolve()} 127.0.0.1:6379\n"
    command = recipe().replace("\n.venv/bin/ray stop\n", f"\n{probe}.venv/bin/ray stop\n")
    assert probe in command
    mark = f"FEDCGD_TEST_{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {mark: "1"}
    proc = run_ok(["bash", "-c", command], timeout=600, cwd=tmp_path, env=env)
    output = proc.stdout + proc.stderr
    deadline = time.monotonic() + 10.0  # the namespace's end took every process along
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == set()

    reports = [line for line in proc.stdout.splitlines() if line.startswith(PROBE_PREFIX)]
    assert len(reports) == 1, output[-4000:]
    report = json.loads(reports[0].removeprefix(PROBE_PREFIX))
    nodes = report["nodes"]
    assert len(nodes) == 2 and report["head"] in nodes
    # 1 CPU per node and per ClientApp: one ClientApp actor on each node, each handled messages.
    assert report["actors_per_node"] == {node: 1 for node in nodes}
    assert all(report["runs_per_node"].get(node, 0) >= 1 for node in nodes)
    assert "completed: 2 rounds" in proc.stdout, output[-4000:]
    # The preset's two runs as Ray tasks, one on each node, their files back in its out.
    assert "all 2 runs completed (0 retried on Ray)" in proc.stdout, output[-4000:]
    assert len(task_nodes(tmp_path / "results" / "preset")) == 2
    # Nothing written in the checkout but the git-ignored results/.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".venv", "results"]
    (run,) = (p for p in (tmp_path / "results").iterdir() if p.name != "preset")
    rounds = [json.loads(x)["round"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert rounds == [1, 2]


@dataclass(frozen=True)
class Cluster:
    """A head and a worker node (1 CPU each) at :data:`ADDRESS` in a namespace of their own;
    ``pid``: the namespace's first process, ``worker``: the worker node's environment mark."""

    pid: int
    worker: str

    def start(self, *words: str) -> subprocess.Popen[str]:
        """``fedcgd reproduce words`` started inside the namespace (on the head's side)."""
        enter = ["nsenter", f"--target={self.pid}", "--net", "--pid", "--mount", "--"]
        return subprocess.Popen(
            [*enter, sys.executable, "-m", "experiments.cli", "reproduce", *words],
            cwd=PROJECT_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        )  # fmt: skip

    def reproduce(self, *words: str) -> tuple[int, str, str]:
        """:meth:`start` to its end: exit code, stdout, stderr without Ray's own log lines."""
        proc = self.start(*words)
        out, err = proc.communicate(timeout=600)
        return proc.returncode, out, ours(err)


def ours(err: str) -> str:
    """``err`` without the lines of Ray's C++ logger (``[date time W pid tid] file.cc:N: ...``)."""
    cpp = r"\[[-\d]+ [\d:,]+ \w [\d ]+\] \w+\.cc"
    return "".join(line for line in err.splitlines(True) if not re.match(cpp, line))


ADDRESS = "127.0.0.1:6379"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    skip_without_namespaces()
    worker = f"FEDCGD_TEST_{uuid.uuid4().hex}"
    ray = Path(sys.executable).with_name("ray")
    script = (
        "ip link set lo up\n"
        "export RAY_TMPDIR=$(mktemp -d /tmp/ray-XXXXXX) && echo $RAY_TMPDIR\n"
        f"{ray} start --head --node-ip-address 127.0.0.1 --port 6379 --num-cpus 1 "
        "--disable-usage-stats >/dev/null\n"
        f"{worker}=1 {ray} start --address {ADDRESS} --node-ip-address 127.0.0.1 --num-cpus 1 "
        "--dashboard-agent-listen-port 52366 --disable-usage-stats >/dev/null\n"
        "echo ready\nexec sleep 3600\n"
    )
    proc = subprocess.Popen(
        ["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-ec", script],
        stdout=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
    )  # fmt: skip
    assert proc.stdout is not None
    temp, ready = proc.stdout.readline().strip(), proc.stdout.readline().strip()
    first = "0"
    try:
        assert ready == "ready", "ray start failed"
        (first,) = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        yield Cluster(int(first), worker)
    finally:
        if first != "0":  # the namespace's first process: its end is the end of all in it
            os.kill(int(first), signal.SIGKILL)
        proc.kill()
        proc.wait()
        shutil.rmtree(temp, ignore_errors=True)


TINY = ["experiment=digits_local_steps", "policies=[fedcgd-fscd,bc]", "sweep.local-steps=[1]",
        "++run.num-devices=8"]  # fmt: skip


def local_run(out: Path, words: list[str]) -> Path:
    """The preset run here, one run after another (the in-process engine): ``out``."""
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        assert reproduce(compose("config", overrides=[*words, f"out={out}"])) == 0
    return out


def assert_same_runs(local: Path, ray: Path) -> None:
    """The same runs and tables (paths aside), metrics but their timings, and final models."""
    for name in ("table.csv", "runs.csv"):
        assert (ray / name).read_text().replace(str(ray), str(local)) == (local / name).read_text()
    runs = sorted(p.relative_to(local) for p in local.glob("*/*/seed-*"))
    assert runs == sorted(p.relative_to(ray) for p in ray.glob("*/*/seed-*")) != []
    for run in runs:
        assert comparable(local / run) == comparable(ray / run), run
        assert same_model(local / run, ray / run), run


def task_nodes(out: Path) -> set[str]:
    """The Ray nodes the runs under ``out`` ran on (each run.log's first line)."""
    return {
        log.read_text().splitlines()[0].split()[4].rstrip(",") for log in out.glob("*/*/*/run.log")
    }


def running_tasks(cluster: Cluster) -> set[int]:
    """The cluster's processes running a run (Ray names them after the task)."""
    return {p for p in descendants(cluster.pid) if "ray::run_task" in command_line(p)}


@pytest.mark.slow  # 2 min
def test_ctrl_c_cancels_the_tasks_keeps_the_completed_runs_and_the_command_goes_on(
    cluster, tmp_path
):
    words = [*TINY, "seeds=[0,1]", "++run.num-server-rounds=40", "++run.checkpoint-every=2"]
    ray = [f"launcher.ray-address={ADDRESS}", f"out={tmp_path}/ray"]
    proc = cluster.start(*words, *ray)
    try:  # until a run completed
        wait_for(lambda: bool(list(tmp_path.glob("ray/*/*/seed-*/summary.json"))), proc, 300)
        (driver,) = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(driver), signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    err = ours(err)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    assert "stopped by SIGINT" in err
    assert err.rstrip().splitlines()[-1].startswith("to go on, run the same command again")
    assert f"launcher.ray-address={ADDRESS}" in err.rstrip().splitlines()[-1]
    deadline = time.monotonic() + 60  # cancelled: no run goes on
    while running_tasks(cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running_tasks(cluster) == set()
    kept = len(list(tmp_path.glob("ray/*/*/seed-*/summary.json")))
    assert 1 <= kept < 4
    # The runs cancelled in their folders resume from the checkpoints they wrote there.
    resumable = len(list(tmp_path.glob("ray/*/*/seed-*/checkpoint.pt"))) - kept

    code, out, err = cluster.reproduce(*words, *ray)
    assert code == 0, out[-3000:] + err[-3000:]
    assert out.count("completed earlier with the same settings; kept") == kept
    assert out.count("resumed from its checkpoint") == resumable
    assert_same_runs(local_run(tmp_path / "local", words), tmp_path / "ray")


@pytest.mark.slow  # 2-3 min: Ray notices a dead node after some seconds
def test_a_preset_on_two_nodes_whose_worker_dies_resumes_from_its_checkpoint_to_the_same_table(
    cluster, tmp_path
):
    """Too many GPUs asked: refused in one line. Then one run on each node, in its own folder;
    the worker node's run goes again on the head from its last checkpoint when the node dies."""
    code, out, err = cluster.reproduce(
        *TINY, "launcher.gpus-per-run=1", f"launcher.ray-address={ADDRESS}", f"out={tmp_path}/x"
    )
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: launcher.gpus-per-run / cpus-per-run: got 1 GPUs and 1 CPUs"), err
    assert "no node of the Ray cluster at 127.0.0.1:6379 has them" in err
    words = [*TINY, "seeds=[0]", "++run.num-server-rounds=150", "++run.checkpoint-every=5"]
    proc = cluster.start(*words, f"launcher.ray-address={ADDRESS}", f"out={tmp_path}/ray")
    folders = [tmp_path / "ray" / "local-steps=1" / p / "seed-0" for p in ("fedcgd-fscd", "bc")]
    try:
        deadline = time.monotonic() + 300
        while not (
            any("ray::run_task" in command_line(p) for p in marked(cluster.worker))
            and all((f / "checkpoint.pt").exists() for f in folders)
        ):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        for pid in marked(cluster.worker):  # the worker node dies: its raylet, its workers
            os.kill(pid, signal.SIGKILL)
        # A second start on the same folder is refused while this one runs, as locally.
        code, _, err = cluster.reproduce(
            *words, f"launcher.ray-address={ADDRESS}", f"out={tmp_path}/ray"
        )
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    assert "lost (" in out and "started again from its checkpoint" in out
    assert out.rstrip().endswith("all 2 runs completed (1 retried on Ray)"), out[-3000:]
    said = r"resuming .* after round (\d+)"
    resumed = [int(k) for f in folders for k in re.findall(said, (f / "run.log").read_text())]
    assert len(resumed) == 1 and resumed[0] % 5 == 0 and 5 <= resumed[0] < 150, resumed
    assert len(task_nodes(tmp_path / "ray")) == 2  # the head and the worker
    assert_same_runs(local_run(tmp_path / "local", words), tmp_path / "ray")


if __name__ == "__main__":
    print(PROBE_PREFIX + json.dumps(clientapp_placement(sys.argv[1])), flush=True)
