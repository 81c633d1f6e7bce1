r"""A multi-node Ray cluster on loopback (a head and worker nodes), stopped by PID.

Flower's Ray backend calls ``ray.init()`` without an address, so ``RAY_ADDRESS`` in the
SuperLink's environment makes the simulation join an existing cluster and spread its ClientApp
actors over every node of it. :class:`LocalRayCluster` starts such a cluster on one machine --
``ray start --head`` and ``ray start --address`` as child processes, each in its own process
group -- waits until every node has joined, and stops them by PID on exit, also on errors.

Ray replaces ``127.0.0.1`` by the machine's "remotely reachable" interface address for node
addresses, so on a machine with a network interface its nodes would talk over that interface.
The cluster therefore refuses to start unless Ray's own detection finds no route off the
machine, i.e. inside a network namespace that has only loopback::

    unshare --net sh -c 'ip link set lo up && exec .venv/bin/fedcgd ray-cluster run \
        --workers 1 -- .venv/bin/fedcgd run --run-config "num-devices=4"'

The command after ``--`` runs with ``RAY_ADDRESS`` set to the cluster (the launcher's SuperLink
inherits it); the cluster is stopped when the command ends. On real machines use ``ray start``
directly (see docs/deployment.md, "Scale-out on a Ray cluster").
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from experiments.run.processes import guarded_popen

HOST = "127.0.0.1"
DEFAULT_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0

# Run by a short-lived interpreter: connect to the cluster, wait for ``expected`` live nodes,
# print how many joined as the last line. A subprocess keeps this process free of Ray state.
_NODES_PROBE = """
import json, sys, time
import ray
address, expected, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
ray.init(address=address, logging_level="ERROR", log_to_driver=False)
alive = 0
while True:
    alive = sum(1 for node in ray.nodes() if node["Alive"])
    if alive >= expected or time.monotonic() > deadline:
        break
    time.sleep(0.5)
ray.shutdown()
print(json.dumps({"alive": alive}))
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _ray_bin() -> str:
    """The ``ray`` executable next to the running interpreter (the project's venv), else PATH."""
    candidate = Path(sys.executable).parent / "ray"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("ray")
    if found is None:
        raise FileNotFoundError(f"ray not found next to {sys.executable} nor on PATH")
    return found


def detected_node_ip() -> str:
    """The address Ray would give a node started here (``node_ip_address_from_perspective``).

    Ray finds it by "connecting" a UDP socket towards public DNS servers, which sends nothing;
    with no route off the machine it falls back to ``127.0.0.1``.
    """
    from ray._common.network_utils import node_ip_address_from_perspective

    return str(node_ip_address_from_perspective(None))


def require_loopback_only() -> None:
    """Raise ValueError unless Ray would keep every node of this machine on loopback.

    Raises
    ------
    ValueError
        Naming the detected address, when this process sees a route off the machine (Ray
        would then put its nodes, and their traffic, on that interface).
    """
    detected = detected_node_ip()
    try:
        loopback = ipaddress.ip_address(detected).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"Ray detects {detected} as this machine's node address, so a multi-node cluster "
            "would not stay on loopback. Run inside a loopback-only network namespace: "
            "unshare --net sh -c 'ip link set lo up && exec <command>'"
        )


class LocalRayCluster:
    """A Ray head and ``num_workers`` worker nodes on ``127.0.0.1``, stopped by PID.

    Used as a context manager. Every node is a ``ray start --block`` child process in its own
    process group (with Ray's GCS, raylet and workers below it); on exit each group gets
    SIGTERM, then SIGKILL for whatever is left. Refuses to start outside a loopback-only
    network namespace (:func:`require_loopback_only`).

    Parameters
    ----------
    num_workers : int
        Worker nodes besides the head.
    cpus_per_node : int
        Ray CPUs of every node (head included).
    temp_dir : Path, optional
        Ray's temporary folder (sessions, logs, sockets) and the nodes' ``ray start`` logs.
        Keep it short: Ray's socket paths must fit in 107 characters. By default a fresh folder
        under the system's temporary folder, removed on exit unless an error occurred.
    object_store_mb : int
        Object store memory of every node, in MiB (Ray's minimum is 75).
    timeout_s : float
        Seconds to wait for all nodes to join.
    """

    def __init__(
        self,
        num_workers: int = 1,
        cpus_per_node: int = 1,
        temp_dir: Path | None = None,
        *,
        object_store_mb: int = 200,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if num_workers < 0 or cpus_per_node < 1:
            raise ValueError(
                f"num_workers must be >= 0 and cpus_per_node >= 1 "
                f"(got {num_workers}, {cpus_per_node})"
            )
        self.num_workers = num_workers
        self.cpus_per_node = cpus_per_node
        self._own_temp_dir = temp_dir is None
        self.temp_dir = temp_dir
        self.object_store_mb = object_store_mb
        self.timeout_s = timeout_s
        self.port = 0
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def address(self) -> str:
        """``127.0.0.1:<GCS port>``: for ``ray.init(address=...)`` and ``RAY_ADDRESS``."""
        if not self.port:
            raise RuntimeError("the cluster is not started")
        return f"{HOST}:{self.port}"

    @property
    def num_nodes(self) -> int:
        """Head plus workers."""
        return 1 + self.num_workers

    @property
    def pids(self) -> list[int]:
        """PIDs (= process group ids) of the ``ray start`` processes, head first."""
        return [proc.pid for proc in self.processes]

    @property
    def env(self) -> dict[str, str]:
        """Environment of the nodes: this one, without RAY_ADDRESS, usage stats off."""
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        return env

    def _start(self, args: list[str], name: str) -> subprocess.Popen[bytes]:
        assert self.temp_dir is not None
        common = [
            "--block",
            "--node-ip-address",
            HOST,
            "--num-cpus",
            str(self.cpus_per_node),
            "--num-gpus",
            "0",
            "--min-worker-port",
            "0",
            "--max-worker-port",
            "0",
            "--dashboard-agent-listen-port",
            str(_free_port()),
            "--object-store-memory",
            str(self.object_store_mb * 1024 * 1024),
            "--disable-usage-stats",
            "--temp-dir",
            str(self.temp_dir),
        ]
        with open(self.temp_dir / f"{name}.log", "wb") as log_fh:
            proc = guarded_popen(
                [_ray_bin(), "start", *args, *common],
                env=self.env,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.processes.append(proc)
        return proc

    def _check_running(self, what: str) -> None:
        assert self.temp_dir is not None
        for proc, name in zip(self.processes, self._names(), strict=False):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{what}: 'ray start' of the {name} exited with code {proc.returncode}; "
                    f"see {self.temp_dir / (name + '.log')}"
                )

    def _names(self) -> list[str]:
        return ["head"] + [f"worker-{i}" for i in range(self.num_workers)]

    def _wait_for_gcs(self, deadline: float) -> None:
        while True:
            self._check_running("the head did not come up")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the head's GCS at {self.address} did not open within {self.timeout_s:g} s"
                )
            time.sleep(0.2)

    def _wait_for_nodes(self, deadline: float) -> None:
        remaining = max(deadline - time.monotonic(), 1.0)
        probe = guarded_popen(
            [sys.executable, "-c", _NODES_PROBE, self.address, str(self.num_nodes), str(remaining)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        try:
            while probe.poll() is None:
                self._check_running("a node died while joining")
                if time.monotonic() > deadline + 30.0:
                    raise TimeoutError(f"the node probe did not finish ({self.address})")
                time.sleep(0.3)
        finally:
            if probe.poll() is None:
                probe.kill()
            output = probe.communicate()[0]
        alive = -1
        for line in reversed(output.splitlines()):
            try:
                alive = int(json.loads(line)["alive"])
                break
            except (ValueError, KeyError, TypeError):
                continue
        if alive < self.num_nodes:
            joined = "no answer from the cluster" if alive < 0 else f"{alive} alive"
            raise TimeoutError(
                f"only {max(alive, 0)} of {self.num_nodes} Ray nodes joined {self.address} "
                f"within {self.timeout_s:g} s ({joined}); logs in {self.temp_dir}\n"
                + output[-2000:]
            )

    def __enter__(self) -> LocalRayCluster:
        require_loopback_only()
        if self.temp_dir is None:
            self.temp_dir = Path(tempfile.mkdtemp(prefix="ray-"))
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self.temp_dir = self.temp_dir.resolve()
        deadline = time.monotonic() + self.timeout_s
        self.port = _free_port()
        try:
            self._start(
                [
                    "--head",
                    "--port",
                    str(self.port),
                    "--ray-client-server-port",
                    str(_free_port()),
                    "--include-dashboard",
                    "false",
                ],
                "head",
            )
            self._wait_for_gcs(deadline)
            for i in range(self.num_workers):
                self._start(
                    ["--address", self.address, "--include-log-monitor", "false"],
                    f"worker-{i}",
                )
            self._wait_for_nodes(deadline)
        except BaseException:
            self.stop(remove_temp_dir=False)
            raise
        return self

    def stop(self, *, remove_temp_dir: bool = True) -> None:
        """Stop every node (workers first): SIGTERM to its process group, then SIGKILL.

        Parameters
        ----------
        remove_temp_dir : bool
            Remove the temporary folder when this object created it.
        """
        for proc in reversed(self.processes):
            _stop_group(proc)
        if remove_temp_dir and self._own_temp_dir and self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        # Keep Ray's logs after an error, not after a clean end or an interrupt.
        self.stop(remove_temp_dir=exc_type is None or not issubclass(exc_type, Exception))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group led by ``proc``, wait, then SIGKILL what is left of it."""
    pgid = proc.pid
    if proc.poll() is None or _group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 10.0
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10.0
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)


def main(
    command: Sequence[str],
    workers: int = 1,
    cpus_per_node: int = 1,
    object_store_mb: int = 200,
    temp_dir: Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> int:
    """``fedcgd ray-cluster run``: start the cluster, run ``command`` with RAY_ADDRESS, stop.

    The exit code is the command's; 2 when refused before the start (no command, a network
    namespace that is not loopback-only), 1 when the cluster did not start, 130 / 143 on
    SIGINT / SIGTERM.
    """
    if not command:
        print("error: give the command to run after --", file=sys.stderr)
        return 2
    received: list[int] = []
    stopping = False

    def _interrupt(signum: int, frame: FrameType | None) -> None:
        # The first SIGINT/SIGTERM unwinds to the cluster's stop; later ones, and any once the
        # stop has begun, are only recorded so that the stop itself is never cut short.
        received.append(signum)
        if len(received) == 1 and not stopping:
            raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster = LocalRayCluster(
        workers, cpus_per_node, temp_dir, object_store_mb=object_store_mb, timeout_s=timeout_s
    )
    try:
        with cluster:
            print(
                f"Ray cluster at {cluster.address}: head + {cluster.num_workers} worker(s), "
                f"{cluster.cpus_per_node} CPU(s) each; running: {shlex.join(command)}",
                file=sys.stderr,
                flush=True,
            )
            proc = guarded_popen(command, env={**os.environ, "RAY_ADDRESS": cluster.address})
            try:
                returncode = proc.wait()
            finally:
                _stop_command(proc)
                stopping = True
            return returncode
    except KeyboardInterrupt:
        return 128 + (received[0] if received else signal.SIGINT)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (RuntimeError, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_command(proc: subprocess.Popen[bytes]) -> None:
    """Terminate the command if it still runs (after an interrupt): SIGTERM, then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
