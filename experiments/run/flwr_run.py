"""Run the app once with ``flwr run --stream``; Flower's chatter shown only with ``verbose``."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.run.federation import LocalFederation, flower_home
from experiments.run.preflight import effective_result_dir
from experiments.run.processes import stop
from experiments.run.run_config import run_config_file, with_resolved_data_dir
from fedcgd_task.schema import PROJECT_DIR
from server_app.run_folder.run_status import mark_stopped
from server_app.run_folder.signals import Interrupted

#: Lines of ``flwr run --stream`` that say nothing about this run (shown with ``verbose``).
FLOWER_CHATTER = (
    "Using SuperLink", "Successfully started run", "Starting logstream",
    "Starting Flower Simulation", "default simulated SuperNodes changed", "Federation `",
    "To change federation size", "flwr federation simulation-config", "Successfully installed",
    "Manually terminating ClientAppActor", "warnings.warn(", "Start `flwr-serverapp` process",
    "Ray will no longer override accelerator visible devices",
)  # fmt: skip

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(line: str) -> str:
    """``line`` without terminal colour codes (Flower colours its log levels)."""
    return _ANSI.sub("", line)


def is_chatter(line: str) -> bool:
    """True for a line of :data:`FLOWER_CHATTER` or an empty log line (``INFO :`` alone)."""
    text = strip_ansi(line).strip()
    return text in ("", "INFO :") or any(marker in text for marker in FLOWER_CHATTER)


def stream_output(proc: subprocess.Popen[str], *, verbose: bool = True) -> str:
    """Print a process's output as it comes (chatter if ``verbose``); return all of it."""
    lines = []
    assert proc.stdout is not None
    colours = sys.stdout.isatty()
    for line in proc.stdout:
        lines.append(line)
        if verbose or not is_chatter(line):
            print(line if colours else strip_ansi(line), end="", flush=True)
    proc.wait()
    return "".join(lines)


def run_flwr(
    run_config: Mapping[str, Any],
    *,
    num_supernodes: int,
    deployment: bool = False,
    cpus_per_client: int = 1,
    gpus_per_client: float = 0.0,
    flwr_home: Path | None = None,
    project_dir: Path = PROJECT_DIR,
    superlink: str | None = None,
    **federation: Any,
) -> subprocess.CompletedProcess[str]:
    """Run the app once with ``flwr run --stream``; the finished process (output in ``stdout``).

    ``federation``: :class:`LocalFederation`'s ``tls``, ``ray_address``, ``supernode_gpus``, ...
    """
    if superlink is None:
        run_config = with_resolved_data_dir(run_config)
    options: list[str] = []
    if not deployment and superlink is None:
        options += [
            "--federation-config",
            f"num-supernodes={num_supernodes} client-resources-num-cpus={cpus_per_client:g} "
            f"client-resources-num-gpus={gpus_per_client:g}",
        ]
    with flower_home(flwr_home) as home, run_config_file(run_config) as config_file:
        options += ["--run-config", str(config_file)]
        own = LocalFederation(
            home,
            num_supernodes=num_supernodes,
            simulation=not deployment,
            superlink=superlink,
            **federation,
        )
        try:
            with own as fed:
                verbose = run_config.get("verbose") is True
                proc = fed.flwr_run(project_dir, options, echo=verbose)
                try:
                    output = stream_output(proc, verbose=verbose)
                finally:  # also on Ctrl-C / SIGTERM: the client goes before the SuperLink
                    stop([proc])
        except Interrupted as signalled:  # its ServerApp was stopped and cannot say so
            with contextlib.suppress(ValueError):  # no folder named: nothing to record
                mark_stopped(effective_result_dir(run_config), str(signalled))
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, output, "")


def check_reachable(address: str, timeout_s: float = 5.0, what: str = "SuperLink") -> None:
    """Raise ConnectionError naming ``what`` unless ``address`` accepts a TCP connection in time."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{what} address {address!r} must be HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ConnectionError(
            f"{what} at {address} is not reachable ({err}); start it or fix the address"
        ) from err


def check_ray_address(address: str) -> None:
    """Raise ConnectionError unless the Ray cluster at ``address`` accepts connections."""
    if address in ("auto", "local"):
        return
    check_reachable(address.removeprefix("ray://"), what="--ray-address: the Ray cluster")
