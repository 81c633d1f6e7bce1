"""Scale-out: docs/deployment.md's recipe (``ray start`` of a head and a worker on loopback, in
namespaces of their own) run as written, with both nodes running ClientApps and nothing left.

Run as a script (``python tests/test_ray_cluster.py ADDRESS``), this module is the probe the test
adds before ``ray stop``: it prints where the ClientApps ran (:func:`clientapp_placement`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from proc_tree import marked

from fedcgd_task.settings import PROJECT_DIR

PROBE_PREFIX = "CLIENTAPP-PLACEMENT "
#: Flower's ClientApp actor class in Ray.
CLIENT_ACTOR_CLASS = "ClientAppActor"


def clientapp_placement(address: str) -> dict[str, Any]:
    """Where the ClientApp actors lived and where their ``run`` calls finished.

    Reads two tables the cluster's GCS keeps without the dashboard, for finished jobs too: the
    actor table (every actor's node) and the task events (every actor method call with the node
    that executed it). ``nodes``: the live nodes; ``head``: the head's node id;
    ``actors_per_node`` and ``runs_per_node``: node id -> actors placed / ``run`` calls finished
    (one per message a ClientApp handled).
    """
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


def namespace_problem() -> str | None:
    """Why the recipe's namespaces cannot be made here, or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) not installed"
    proc = subprocess.run(
        ["unshare", "--net", "--pid", "--fork", "--mount-proc", "ip", "link", "set", "lo", "up"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode != 0:
        return f"unshare is not permitted here (needs root): {proc.stderr.strip()}"
    return None


@pytest.mark.slow  # a minute: two Ray nodes and a simulation on them
def test_the_documented_recipe_runs_clientapps_on_both_nodes_and_leaves_nothing(tmp_path):
    problem = namespace_problem()
    if problem is not None:
        pytest.skip(problem)
    # As written, from a folder holding the environment as .venv (results land in its results/),
    # with the probe before `ray stop`.
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    probe = f".venv/bin/python {Path(__file__).resolve()} 127.0.0.1:6379\n"
    command = recipe().replace("\n.venv/bin/ray stop\n", f"\n{probe}.venv/bin/ray stop\n")
    assert probe in command
    mark = f"FEDCGD_TEST_{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {mark: "1"}
    proc = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
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
    (run,) = (tmp_path / "results").iterdir()
    assert [json.loads(x)["round"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [
        1,
        2,
    ]


if __name__ == "__main__":
    print(PROBE_PREFIX + json.dumps(clientapp_placement(sys.argv[1])), flush=True)
