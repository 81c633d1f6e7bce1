r"""Check the scale-out: a small simulation on the Ray cluster at ``RAY_ADDRESS``, spread check.

Runs the app once with :func:`experiments.run.flwr_run.run_flwr` joined to the cluster, then asks
the cluster's GCS where Flower's ClientApp actors lived and handled messages
(:func:`clientapp_placement`, the placement probe) and prints one line
``RAY-CLUSTER-CHECK {json}``. The exit code is 0 only when the run succeeded and every live node
of the cluster ran ClientApp work. Meant to run under :mod:`experiments.run.ray_cluster`, inside a
loopback-only network namespace::

    unshare --net sh -c 'ip link set lo up && exec .venv/bin/fedcgd ray-cluster run \
        --workers 1 -- .venv/bin/fedcgd ray-cluster check --result-dir /tmp/rc'
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from experiments.run.flwr_run import run_flwr

REPORT_PREFIX = "RAY-CLUSTER-CHECK "
#: Flower's ClientApp actor class in Ray.
CLIENT_ACTOR_CLASS = "ClientAppActor"


def clientapp_placement(address: str, class_name: str = CLIENT_ACTOR_CLASS) -> dict[str, Any]:
    """Where the actors of ``class_name`` lived and where their ``run`` calls finished.

    Connects a driver to the cluster (``ray.init(address=...)``) and reads two tables the GCS
    keeps without the dashboard, for finished jobs too: the actor table (every actor's node,
    also once it is dead) and the task events (every actor method call with the node that
    executed it and its state timestamps). Both are read through ``ray._private.state``, the
    accessor behind ``ray.util.state``'s listings, which need the dashboard.

    Parameters
    ----------
    address : str
        The cluster's GCS address.
    class_name : str
        Actor class (Flower's ``ClientAppActor`` by default).

    Returns
    -------
    dict
        ``nodes``: ids of the live nodes; ``head``: the head's node id; ``actors_per_node``:
        node id -> ``class_name`` actors placed there; ``runs_per_node``: node id -> finished
        ``class_name.run`` calls (one per message a ClientApp handled) executed there.
    """
    import ray
    from ray._private import state
    from ray.core.generated import common_pb2, gcs_pb2

    finished = common_pb2.TaskStatus.Value("FINISHED")  # type: ignore[attr-defined]
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        nodes = [node for node in ray.nodes() if node["Alive"]]
        actors = Counter(
            info["Address"]["NodeID"]
            for info in state.actors().values()
            if info.get("ActorClassName") == class_name
        )
        runs: Counter[str] = Counter()
        for raw in state.state._connect_and_get_accessor().get_task_events():
            event = gcs_pb2.TaskEvents.FromString(raw)  # type: ignore[attr-defined]
            update = event.state_updates
            if (
                event.task_info.name == f"{class_name}.run"
                and update.HasField("node_id")
                and finished in update.state_ts_ns
            ):
                runs[update.node_id.hex()] += 1
    finally:
        ray.shutdown()
    head = next(
        (n["NodeID"] for n in nodes if "node:__internal_head__" in n.get("Resources", {})), None
    )
    return {
        "nodes": sorted(n["NodeID"] for n in nodes),
        "head": head,
        "actors_per_node": dict(actors),
        "runs_per_node": dict(runs),
    }


def check(
    address: str,
    result_dir: Path,
    *,
    num_devices: int = 4,
    rounds: int = 2,
    cpus_per_client: int = 1,
    flwr_home: Path | None = None,
) -> dict[str, Any]:
    """Run the app on the cluster at ``address`` and report where its ClientApps ran.

    Parameters
    ----------
    address : str
        The Ray cluster (``127.0.0.1:<port>``).
    result_dir : Path
        The run's ``result-dir``.
    num_devices : int
        Devices (= virtual SuperNodes).
    rounds : int
        Server rounds.
    cpus_per_client : int
        Ray CPUs per ClientApp actor.
    flwr_home : Path, optional
        ``FLWR_HOME`` of the run; a fresh temporary folder by default.

    Returns
    -------
    dict
        ``returncode`` of ``flwr run``, the keys of
        :func:`clientapp_placement` (``nodes``, ``head``,
        ``actors_per_node``, ``runs_per_node``) and ``spread``: every live node hosted a
        ClientApp actor that finished at least one ``run`` (handled a message).
    """
    proc = run_flwr(
        {
            "num-devices": num_devices,
            "num-server-rounds": rounds,
            "channel.availability-prob": 1.0,
            "result-dir": str(result_dir),
        },
        num_supernodes=num_devices,
        cpus_per_client=cpus_per_client,
        ray_address=address,
        flwr_home=flwr_home,
    )
    placement = clientapp_placement(address)
    spread = len(placement["nodes"]) >= 2 and all(
        placement["actors_per_node"].get(node, 0) >= 1
        and placement["runs_per_node"].get(node, 0) >= 1
        for node in placement["nodes"]
    )
    return {"returncode": proc.returncode, **placement, "spread": spread}


def main(
    result_dir: Path,
    num_devices: int = 4,
    rounds: int = 2,
    cpus_per_client: int = 1,
    flwr_home: Path | None = None,
) -> int:
    """``fedcgd ray-cluster check``: the check against ``RAY_ADDRESS``; 0 when it passes."""
    address = os.environ.get("RAY_ADDRESS", "")
    if not address or address == "auto":
        print("error: set RAY_ADDRESS to the cluster's HOST:PORT", file=sys.stderr)
        return 2
    report = check(
        address,
        result_dir,
        num_devices=num_devices,
        rounds=rounds,
        cpus_per_client=cpus_per_client,
        flwr_home=flwr_home,
    )
    print(REPORT_PREFIX + json.dumps(report), flush=True)
    return 0 if report["returncode"] == 0 and report["spread"] else 1
