"""``flwr run --stream`` on a SuperLink (and SuperNodes) of our own on loopback, or a given one."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tomli_w

from experiments.run.certificates import CertificateSet
from experiments.run.preflight import effective_result_dir
from experiments.run.processes import popen, stop
from experiments.run.run_config import run_config_file, with_resolved_data_dir
from fedcgd_config import keys
from fedcgd_config.schema import PROJECT_DIR
from server_app.run_folder.files import Interrupted
from server_app.run_folder.run_status import mark_stopped


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: ``PATH`` with the running interpreter's folder (the project's venv) first.
SEARCH_PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def executable(name: str) -> str:
    """An executable next to the running interpreter (the project's venv), else on PATH."""
    found = shutil.which(name, path=SEARCH_PATH)
    if found is None:
        raise FileNotFoundError(f"{name} not found next to {sys.executable} nor on PATH")
    return found


class LocalFederation:
    """A SuperLink (and SuperNodes) on loopback, stopped on exit; a given ``superlink``: none."""

    def __init__(
        self,
        flwr_home: Path,
        *,
        num_supernodes: int = 0,
        simulation: bool = True,
        tls: CertificateSet | None = None,
        ray_address: str | None = None,
        supernode_gpus: tuple[int, ...] = (),
        superlink: str | None = None,
        root_certificates: Path | None = None,
    ) -> None:
        self.superlink, self.root_certificates = superlink, root_certificates
        self.flwr_home, self.supernode_gpus = flwr_home, supernode_gpus
        self.ray_address, self.simulation, self.tls = ray_address, simulation, tls
        self.num_supernodes = 0 if simulation else num_supernodes
        self.http_port = _free_port()
        self.processes: list[subprocess.Popen[bytes]] = []
        self.log_dir = flwr_home / "logs"

    @property
    def env(self) -> dict[str, str]:
        """Environment for the SuperLink, the SuperNodes and ``flwr``."""
        env = {**os.environ, "FLWR_HOME": str(self.flwr_home), "PATH": SEARCH_PATH}
        for name in ("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "FLWR_DISABLE_UPDATE_CHECK"):
            env[name] = "1"
        env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(self.http_port)
        return env | ({"RAY_ADDRESS": self.ray_address} if self.ray_address else {})

    @property
    def connection_toml(self) -> str:
        """``$FLWR_HOME/config.toml`` with one SuperLink connection ``local``, its default."""
        if self.superlink is not None:
            address, ca = self.superlink, self.root_certificates
        else:
            local = self.simulation and self.tls is None  # Flower's own name for it
            address = ":local:" if local else f"127.0.0.1:{self.http_port}"
            ca = self.tls.ca_cert if self.tls is not None else None
        connection: dict[str, str | bool] = {"address": address}
        if ca is not None:
            connection["root-certificates"] = str(ca.resolve())
        elif address != ":local:":
            connection["insecure"] = True
        return tomli_w.dumps({"superlink": {"default": "local", "local": connection}})

    def _healthy(self) -> bool:
        scheme, context = "http", None
        if self.tls is not None:
            scheme, context = "https", ssl.create_default_context(cafile=str(self.tls.ca_cert))
        try:
            with urllib.request.urlopen(
                f"{scheme}://127.0.0.1:{self.http_port}/health", timeout=0.5, context=context
            ) as response:
                return bool(200 <= response.status < 300)
        except OSError:
            return False

    def _start(
        self, command: list[str], name: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with open(self.log_dir / f"{name}.log", "wb") as log:
            proc = popen(command, env=env or self.env, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)  # fmt: skip
        self.processes.append(proc)
        return proc

    def flwr_run(
        self,
        project_dir: Path,
        options: Sequence[str] = (),
        *,
        echo: bool = False,
        start_new_session: bool = False,
    ) -> subprocess.Popen[str]:
        """Start ``flwr run PROJECT_DIR local --stream OPTIONS`` here (output piped as text)."""
        command = [executable("flwr"), "run", str(project_dir), "local", "--stream", *options]
        if echo:
            print("$ " + " ".join(shlex.quote(c) for c in command), flush=True)
        return popen(command, env=self.env, text=True, stdout=subprocess.PIPE, cwd=project_dir,
                     stderr=subprocess.STDOUT, start_new_session=start_new_session)  # fmt: skip

    def __enter__(self) -> LocalFederation:
        """Start the SuperLink, wait until it answers, then the SuperNodes."""
        try:
            self._start_all()
        except BaseException:  # an error or a signal while starting: stop what started
            stop(self.processes)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        stop(self.processes)

    def _start_all(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.flwr_home / "config.toml").write_text(self.connection_toml, encoding="utf-8")
        if self.superlink is not None:
            return
        security = ["--insecure"]
        if (tls := self.tls) is not None:
            security = [f"--ssl-ca-certfile={tls.ca_cert}", f"--ssl-certfile={tls.server_cert}"]
            security += [f"--ssl-keyfile={tls.server_key}", "--enable-supernode-auth"]
        command = [
            executable("flower-superlink"),
            *(["--simulation"] if self.simulation else []),
            *security,
            *"--isolation subprocess --disable-runtime-dependency-installation".split(),
            *f"--host 127.0.0.1 --port {self.http_port} --database :flwr-in-memory:".split(),
        ]
        link = self._start(command, "superlink")
        deadline = time.monotonic() + 60.0
        while not self._healthy():
            if link.poll() is not None or time.monotonic() > deadline:
                log = self.log_dir / "superlink.log"
                tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-5:])
                raise RuntimeError(
                    f"flower-superlink did not come up (exit code {link.returncode}); "
                    f"the end of {log}: {tail}"
                )
            time.sleep(0.3)
        for pid in range(self.num_supernodes):
            self.start_supernode(pid)

    def register(self, public_key: Path) -> None:
        """Register a SuperNode public key with the SuperLink (``flwr supernode register``)."""
        command = [executable("flwr"), "supernode", "register", str(public_key), "local"]
        proc = popen(command, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            output = proc.communicate(timeout=120)[0].decode(errors="replace")
        finally:  # also after a timeout or a signal: not left running
            stop([proc])
        if proc.returncode != 0:
            raise RuntimeError(f"registering {public_key} failed: {output}")

    def start_supernode(
        self, partition_id: int, *, private_key: Path | None = None, register: bool = True
    ) -> subprocess.Popen[bytes]:
        """Start the SuperNode of ``partition_id`` (again); with TLS its key pair, registered."""
        security = ["--insecure"]
        if self.tls is not None:
            if private_key is None:
                private_key = self.tls.supernode_keys[partition_id]
                if register:
                    self.register(self.tls.supernode_public_keys[partition_id])
            security = [
                f"--root-certificates={self.tls.ca_cert}",
                f"--auth-supernode-private-key={private_key}",
            ]
        node_config = f"{keys.NODE_PARTITION_ID}={partition_id} "
        node_config += f"{keys.NODE_NUM_PARTITIONS}={self.num_supernodes}"
        command = [
            executable("flower-supernode"), *security,
            *f"--superlink 127.0.0.1:{self.http_port} --host 127.0.0.1".split(),
            *("--port", str(_free_port()), "--node-config", node_config),
        ]  # fmt: skip
        name = f"supernode-{partition_id}-{len(self.processes)}"
        return self._start(command, name, self.supernode_env(partition_id))

    def supernode_env(self, partition_id: int) -> dict[str, str]:
        """SuperNode ``i``'s environment: it sees GPU ``supernode_gpus[i % len]`` alone."""
        env, gpus = self.env, self.supernode_gpus
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(gpus[partition_id % len(gpus)])
        return env


#: Lines of ``flwr run --stream`` that say nothing about this run (shown with ``verbose``).
FLOWER_CHATTER = (
    "Using SuperLink", "Successfully started run", "Starting logstream",
    "Starting Flower Simulation", "default simulated SuperNodes changed", "Federation `",
    "To change federation size", "flwr federation simulation-config", "Successfully installed",
    "Manually terminating ClientAppActor", "warnings.warn(", "Start `flwr-serverapp` process",
    "Ray will no longer override accelerator visible devices",
)  # fmt: skip


def strip_ansi(line: str) -> str:
    """``line`` without terminal colour codes (Flower colours its log levels)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", line)


def stream_output(proc: subprocess.Popen[str], *, verbose: bool = True) -> str:
    """Print a process's output as it comes (Flower's chatter if ``verbose``); return all of it."""
    lines = []
    assert proc.stdout is not None
    colours = sys.stdout.isatty()
    for line in proc.stdout:
        lines.append(line)
        text = strip_ansi(line).strip()
        chatter = text in ("", "INFO :") or any(marker in text for marker in FLOWER_CHATTER)
        if verbose or not chatter:
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
    """Run the app once with ``flwr run --stream``; the finished process (output in ``stdout``)."""
    if superlink is None:
        run_config = with_resolved_data_dir(run_config)
    options: list[str] = []
    if not deployment and superlink is None:
        options += ["--federation-config", f"num-supernodes={num_supernodes} "
                    f"client-resources-num-cpus={cpus_per_client:g} "
                    f"client-resources-num-gpus={gpus_per_client:g}"]  # fmt: skip
    home_dir = (  # a given one is kept (made with its logs folder), else a temporary one
        tempfile.TemporaryDirectory(prefix="flwr-home-", ignore_cleanup_errors=True)
        if flwr_home is None
        else contextlib.nullcontext(str(flwr_home))
    )
    with home_dir as home, run_config_file(run_config) as config_file:
        options += ["--run-config", str(config_file)]
        own = LocalFederation(Path(home), num_supernodes=num_supernodes, simulation=not deployment,
                              superlink=superlink, **federation)  # fmt: skip
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
