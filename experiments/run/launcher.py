"""Run the app in Flower's simulation engine with ``flwr run`` and a SuperLink we own.

``flwr run`` on the default ``local`` connection starts a detached SuperLink that keeps running
after the run and whose PID nobody records. Here we start that SuperLink ourselves (same flags
``flwr`` uses, on loopback, with runtime dependency installation disabled), run ``flwr run .
local --stream`` against it, and stop it by its PID when the run ends, also on errors and
Ctrl-C. Nothing is left running.

``python -m experiments.run.launcher --run-config "policy='bc' num-server-rounds=5"`` runs one
simulation; with ``--deployment`` the same app runs on ``flower-supernode`` processes (one per
device, each message in a fresh ClientApp process) instead of the simulation engine.
:func:`run_flwr` does the same from Python (tests, sweeps). The first line names the run's
folder; a run stopped by a signal or a failure ends with the command that continues it
(:mod:`experiments.run.resume_command`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
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
import tomllib
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.run.certificates import CertificateSet
from experiments.run.processes import (
    exit_code_stopping_on_signals,
    guarded,
    guarded_popen,
    stop_tree,
)
from fedcgd_task import keys
from fedcgd_task.settings import PROJECT_DIR, default_run_config, flatten, resolve_data_dir

if TYPE_CHECKING:
    from experiments.run.resume_command import LastWords

#: Default ``--out`` of the commands: the parent of a run's ``<policy>-<UTC time>`` folder
#: (:func:`server_app.config.timestamped_result_dir`) when its ``result-dir`` is empty.
DEFAULT_RESULTS = PROJECT_DIR / "results"
HEALTH_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bin(name: str) -> str:
    """An executable next to the running interpreter (the project's venv), else on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found next to {sys.executable} nor on PATH")
    return found


def format_run_config(values: Mapping[str, Any]) -> str:
    """Render a dict as ``flwr run --run-config`` text (strings quoted, TOML style).

    ``policy-params.<name>`` keys are folded into the declared ``policy-params`` string first
    (Flower refuses keys that pyproject.toml does not declare).
    """
    from server_app.policy_params import fold_policy_params

    parts = []
    for key, value in fold_policy_params(values).items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = json.dumps(value)
        else:
            text = repr(value)
        parts.append(f"{key}={text}")
    return " ".join(parts)


class LocalFederation:
    """A SuperLink (and, for a deployment, SuperNodes) on loopback, stopped by PID.

    Used as a context manager. Simulation mode starts one SuperLink with ``--simulation`` (Ray
    runs the ClientApps); deployment mode starts a plain SuperLink and ``num_supernodes``
    ``flower-supernode`` processes with ``--node-config "partition-id=i num-partitions=N"``,
    each of which runs every message in a fresh ClientApp process, as on real devices.

    With ``tls`` (a :class:`experiments.run.certificates.CertificateSet`) every connection is
    encrypted: the SuperLink serves its certificate and requires SuperNode authentication
    (``--enable-supernode-auth``); each SuperNode's public key is registered with
    ``flwr supernode register`` before it starts with its private key; ``flwr`` trusts the CA.
    With ``ray_address`` the simulation joins that Ray cluster (``RAY_ADDRESS`` in the
    SuperLink's environment) instead of starting a local one.

    Parameters
    ----------
    flwr_home : Path
        ``FLWR_HOME`` for every process (config, logs, installed apps).
    num_supernodes : int
        SuperNodes to start (deployment mode only).
    simulation : bool
        Simulation (True) or deployment (False).
    tls : CertificateSet, optional
        Certificates and SuperNode keys (:func:`experiments.run.certificates.make_certificates`).
    ray_address : str, optional
        Address of an existing Ray cluster (``127.0.0.1:6379``) for the simulation.
    """

    def __init__(
        self,
        flwr_home: Path,
        *,
        num_supernodes: int = 0,
        simulation: bool = True,
        tls: CertificateSet | None = None,
        ray_address: str | None = None,
    ) -> None:
        self.flwr_home = flwr_home
        self.simulation = simulation
        self.num_supernodes = 0 if simulation else num_supernodes
        self.tls = tls
        self.ray_address = ray_address
        self.http_port = _free_port()
        self.processes: list[subprocess.Popen[bytes]] = []
        self.log_dir = flwr_home / "logs"
        if tls is not None and len(tls.supernode_keys) < self.num_supernodes:
            raise ValueError(
                f"TLS: {len(tls.supernode_keys)} SuperNode key pairs for "
                f"{self.num_supernodes} SuperNodes"
            )

    @property
    def env(self) -> dict[str, str]:
        """Environment for the SuperLink, the SuperNodes and ``flwr``."""
        env = os.environ.copy()
        env.update(
            FLWR_HOME=str(self.flwr_home),
            FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
            FLWR_DISABLE_UPDATE_CHECK="1",
            FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(self.http_port),
            PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        )
        if self.ray_address:
            env["RAY_ADDRESS"] = self.ray_address
        return env

    @property
    def connection_toml(self) -> str:
        """The ``local`` connection of ``$FLWR_HOME/config.toml`` for ``flwr run``."""
        if self.tls is not None:
            address, security = (
                f"127.0.0.1:{self.http_port}",
                (f'root-certificates = "{self.tls.ca_cert.resolve()}"\n'),
            )
        elif self.simulation:
            address, security = ":local:", ""
        else:
            address, security = f"127.0.0.1:{self.http_port}", "insecure = true\n"
        return (
            '[superlink]\ndefault = "local"\n\n[superlink.local]\n'
            f'address = "{address}"\n{security}'
        )

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

    def log_tail(self, name: str, lines: int = 5) -> str:
        """The last ``lines`` lines of a process's log, joined with `` | ``."""
        try:
            text = (self.log_dir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:])

    def _start(self, command: list[str], name: str) -> subprocess.Popen[bytes]:
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "wb") as log_fh:
            proc = guarded_popen(
                command,
                env=self.env,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
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
        """Start ``flwr run PROJECT_DIR local --stream OPTIONS`` on this federation.

        Its output (stderr merged into stdout) is piped as text. ``echo`` prints the command
        first (``$ ...``); ``start_new_session`` puts the process in a group of its own (to stop
        it with :func:`os.killpg`).
        """
        command = [_bin("flwr"), "run", str(project_dir), "local", "--stream", *options]
        if echo:
            print("$ " + " ".join(shlex.quote(c) for c in command), flush=True)
        return guarded_popen(
            command,
            env=self.env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=project_dir,
            start_new_session=start_new_session,
        )

    def __enter__(self) -> LocalFederation:
        try:
            self._start_all()
        except BaseException:  # an error or a signal while starting: stop what started
            self.stop()
            raise
        return self

    def _start_all(self) -> None:
        """Start the SuperLink, wait until it answers, then the SuperNodes."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.flwr_home / "config.toml").write_text(self.connection_toml)
        security = ["--insecure"]
        if self.tls is not None:
            security = [
                "--ssl-ca-certfile",
                str(self.tls.ca_cert),
                "--ssl-certfile",
                str(self.tls.server_cert),
                "--ssl-keyfile",
                str(self.tls.server_key),
                "--enable-supernode-auth",
            ]
        command = [
            _bin("flower-superlink"),
            *security,
            "--isolation",
            "subprocess",
            "--disable-runtime-dependency-installation",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.http_port),
            "--database",
            ":flwr-in-memory:",
        ]
        if self.simulation:
            command.insert(1, "--simulation")
        link = self._start(command, "superlink")
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while not self._healthy():
            if link.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"flower-superlink did not come up (exit code {link.returncode}); "
                    f"the end of {self.log_dir / 'superlink.log'}: {self.log_tail('superlink')}"
                )
            time.sleep(0.3)
        for pid in range(self.num_supernodes):
            self.start_supernode(pid)

    def register(self, public_key: Path) -> None:
        """Register a SuperNode public key with the SuperLink (``flwr supernode register``)."""
        argv, fds = guarded([_bin("flwr"), "supernode", "register", str(public_key), "local"])
        proc = subprocess.run(
            argv,
            pass_fds=fds,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"registering {public_key} failed: {proc.stdout}{proc.stderr}")

    def start_supernode(
        self, partition_id: int, *, private_key: Path | None = None, register: bool = True
    ) -> subprocess.Popen[bytes]:
        """Start the SuperNode of ``partition_id`` (again, e.g. after it was stopped).

        With TLS it uses the ``partition_id``-th key pair unless ``private_key`` is given, and
        registers the public key first when ``register``.
        """
        security = ["--insecure"]
        if self.tls is not None:
            if private_key is None:
                private_key = self.tls.supernode_keys[partition_id]
                if register:
                    self.register(self.tls.supernode_public_keys[partition_id])
            security = [
                "--root-certificates",
                str(self.tls.ca_cert),
                "--auth-supernode-private-key",
                str(private_key),
            ]
        return self._start(
            [
                _bin("flower-supernode"),
                *security,
                "--superlink",
                f"127.0.0.1:{self.http_port}",
                "--host",
                "127.0.0.1",
                "--port",
                str(_free_port()),
                "--node-config",
                f"{keys.NODE_PARTITION_ID}={partition_id} "
                f"{keys.NODE_NUM_PARTITIONS}={self.num_supernodes}",
            ],
            f"supernode-{partition_id}-{len(self.processes)}",
        )

    def stop(self) -> None:
        """Stop every started process and everything below it, by PID.

        The SuperLink starts ``flower-superexec`` and ``flwr-simulation`` (and that Ray) in
        sessions of their own, out of reach of its process group: the whole process tree is
        read before anything is signalled (:func:`experiments.run.processes.stop_tree`): SIGTERM,
        then SIGKILL after a few seconds.
        """
        running = [proc for proc in self.processes if proc.poll() is None]
        stop_tree(proc.pid for proc in running)
        for proc in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_flwr(
    run_config: Mapping[str, Any],
    *,
    num_supernodes: int,
    deployment: bool = False,
    cpus_per_client: int = 1,
    gpus_per_client: float = 0.0,
    flwr_home: Path | None = None,
    project_dir: Path = PROJECT_DIR,
    tls: CertificateSet | None = None,
    ray_address: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the app once with ``flwr run --stream`` and return the finished process.

    Parameters
    ----------
    run_config : mapping
        ``--run-config`` overrides (keys of ``[tool.flwr.app.config]``).
    num_supernodes : int
        Nodes (= devices V): virtual nodes in simulation, SuperNode processes in deployment.
    deployment : bool
        Start SuperNode processes instead of using the simulation engine.
    cpus_per_client : int
        Ray CPUs per ClientApp in simulation (1 → two clients at once on 2 cores).
    gpus_per_client : float
        Ray GPUs per ClientApp in simulation (e.g. 0.25: four clients share one GPU); the
        ClientApp trains on CUDA whenever it sees a GPU.
    flwr_home : Path, optional
        ``FLWR_HOME``; a fresh temporary folder by default.
    project_dir : Path
        The Flower app to run.
    tls : CertificateSet, optional
        Run over TLS with SuperNode authentication (see :class:`LocalFederation`).
    ray_address : str, optional
        Join this Ray cluster for the simulation.

    Returns
    -------
    subprocess.CompletedProcess
        With the streamed output in ``stdout``.
    """
    run_config = with_resolved_data_dir(run_config)
    options: list[str] = []
    if not deployment:
        options += [
            "--federation-config",
            f"num-supernodes={num_supernodes} client-resources-num-cpus={cpus_per_client:g} "
            f"client-resources-num-gpus={gpus_per_client:g}",
        ]
    if run_config:
        options += ["--run-config", format_run_config(run_config)]
    with flower_home(flwr_home) as home:
        federation = LocalFederation(
            home,
            num_supernodes=num_supernodes,
            simulation=not deployment,
            tls=tls,
            ray_address=ray_address,
        )
        with federation as fed:
            verbose = run_config.get("verbose") is True
            proc = fed.flwr_run(project_dir, options, echo=verbose)
            try:
                output = stream_output(proc, verbose=verbose)
            finally:  # also on Ctrl-C / SIGTERM: the client goes before the SuperLink
                if proc.poll() is None:
                    stop_tree([proc.pid])
                proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, output, "")


#: Lines of ``flwr run --stream`` that say nothing about this run (Flower's and Ray's start-up
#: and shutdown notices); shown only with the run-config key ``verbose = true``.
FLOWER_CHATTER = (
    "Using SuperLink",
    "Successfully started run",
    "Starting logstream",
    "Starting Flower Simulation",
    "default simulated SuperNodes changed",
    "Federation `",
    "To change federation size",
    "flwr federation simulation-config",
    "Successfully installed",
    "Manually terminating ClientAppActor",
    "Ray will no longer override accelerator visible devices",
    "warnings.warn(",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(line: str) -> str:
    """``line`` without terminal colour codes (Flower colours its log levels)."""
    return _ANSI.sub("", line)


def is_chatter(line: str) -> bool:
    """True for a line of Flower's own start-up/shutdown notices (:data:`FLOWER_CHATTER`).

    Empty log lines (``INFO :`` and nothing else) count too. Warnings and errors about the
    run, tracebacks and the run's own lines are never chatter.
    """
    text = strip_ansi(line).strip()
    if text in ("", "INFO :"):
        return True
    return any(marker in text for marker in FLOWER_CHATTER)


def stream_output(proc: subprocess.Popen[str], *, verbose: bool = True) -> str:
    """Print a process's piped output line by line as it comes; return all of it.

    Without ``verbose`` Flower's start-up and shutdown notices (:func:`is_chatter`) are not
    printed; the returned text still holds every line.
    """
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if verbose or not is_chatter(line):
            print(line, end="", flush=True)
    proc.wait()
    return "".join(lines)


@contextlib.contextmanager
def flower_home(flwr_home: Path | None) -> Iterator[Path]:
    """``FLWR_HOME`` of one run: ``flwr_home`` (created, kept), else a temporary folder.

    The temporary folder (``$TMPDIR/flwr-home-*``: config, SuperLink logs, installed app) is
    removed when the run ends, also on errors and signals. One per run on purpose: the
    launcher writes its own SuperLink's address into ``config.toml``, so two runs sharing a
    home (e.g. the Makefile's ``FLWR_HOME``) would send ``flwr run`` to each other's SuperLink.
    """
    if flwr_home is not None:
        flwr_home.mkdir(parents=True, exist_ok=True)
        yield flwr_home
        return
    home = Path(tempfile.mkdtemp(prefix="flwr-home-"))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def with_resolved_data_dir(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """``run_config`` with ``data-dir`` made absolute, relative to this process ("" = ./data).

    The ServerApp and ClientApps run in unrelated working directories, so the data folder is
    pinned here, where the command was started (:func:`fedcgd_task.settings.resolve_data_dir`).
    """
    data_dir = resolve_data_dir(str(run_config.get("data-dir", "")))
    return {**run_config, "data-dir": str(data_dir)}


def check_reachable(address: str, timeout_s: float = 5.0, what: str = "SuperLink") -> None:
    """Raise ConnectionError naming ``address`` unless a TCP connection to it opens in time.

    ``what`` names the server in the message (e.g. ``"--ray-address: Ray cluster"``).
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{what} address {address!r} must be HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        raise ConnectionError(
            f"{what} at {address} is not reachable ({err}); start it or fix the address"
        ) from err


def run_on_superlink(
    run_config: Mapping[str, Any], address: str, root_certificates: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the app with ``flwr run --stream`` on an existing SuperLink (e.g. docker compose).

    ``root_certificates``: the CA certificate of a TLS SuperLink; None connects insecurely.
    """
    security = (
        f'root-certificates = "{root_certificates.resolve()}"\n'
        if root_certificates is not None
        else "insecure = true\n"
    )
    command = [_bin("flwr"), "run", str(PROJECT_DIR), "remote", "--stream"]
    command += ["--run-config", format_run_config(run_config)]
    with flower_home(None) as home:
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "remote"\n\n[superlink.remote]\naddress = "{address}"\n'
            + security
        )
        env = {**os.environ, "FLWR_HOME": str(home), "FLWR_DISABLE_UPDATE_CHECK": "1"}
        print("$ " + " ".join(shlex.quote(c) for c in command), flush=True)
        proc = guarded_popen(command, env=env)
        try:
            proc.wait()
        finally:
            if proc.poll() is None:
                stop_tree([proc.pid])
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode)


def parse_run_config_text(text: str) -> dict[str, Any]:
    """Parse ``--run-config`` text (``key=value`` pairs, TOML values) into a flat dict.

    Dotted keys (``channel.deadline-s=2.0``) stay dotted, as in ``flwr run --run-config``.
    """
    values: dict[str, Any] = {}
    try:
        items = shlex.split(text, posix=False)
    except ValueError as err:  # an unclosed quote
        raise ValueError(f"--run-config cannot be split into key=value items ({err})") from err
    for item in items:
        try:
            pairs = flatten(tomllib.loads(item))
        except (tomllib.TOMLDecodeError, RecursionError) as err:
            shown = item if len(item) <= 80 else item[:77] + "..."
            raise ValueError(
                f"--run-config item {shown!r} is not key=value with a TOML value "
                "(quote strings: policy='bc')"
            ) from err
        for key, value in pairs.items():
            if key in values:
                raise ValueError(
                    f"run-config key {key!r} is given twice ({values[key]!r} and {value!r}); "
                    "give it once"
                )
            values[key] = value
    return values


def validated_run_config(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults with ``overrides`` applied, every key and value checked before any start.

    ``policy-params.<name>`` keys are folded into the declared ``policy-params`` string
    (:func:`server_app.policy_params.fold_policy_params`).

    Raises
    ------
    ValueError
        One line naming the key, the bad value and what is allowed (an unknown key lists the
        allowed keys).
    """
    from server_app.config import parse_run_config
    from server_app.policy_params import fold_policy_params

    defaults = default_run_config()
    overrides = fold_policy_params(overrides)  # Flower accepts declared keys only
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(
            f"unknown run-config key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(defaults))}"
        )
    merged = {**defaults, **overrides}
    parse_run_config(merged)
    return merged


def check_ray_address(address: str) -> None:
    """Raise ConnectionError unless the Ray cluster's port at ``address`` accepts connections.

    ``HOST:PORT`` or ``ray://HOST:PORT``; Ray's own ``auto`` / ``local`` are left to Ray.
    """
    if address in ("auto", "local"):
        return
    check_reachable(address.removeprefix("ray://"), what="--ray-address: the Ray cluster")


@contextlib.contextmanager
def tls_certificates(
    enabled: bool, folder: Path | None, supernodes: int
) -> Iterator[CertificateSet | None]:
    """Certificates and SuperNode keys for a ``--tls`` run (None without TLS).

    Written to ``folder`` (kept) when given, else to a temporary ``fedcgd-certificates-*``
    folder that is removed, private keys included, when the run ends (also on errors and
    signals).
    """
    if not enabled:
        yield None
        return
    from experiments.run.certificates import make_certificates

    target = folder if folder is not None else Path(tempfile.mkdtemp(prefix="fedcgd-certificates-"))
    try:
        target.mkdir(parents=True, exist_ok=True)
        tls = make_certificates(target, supernodes=supernodes)
        kept = "kept" if folder is not None else "removed at the end"
        print(f"TLS certificates and SuperNode keys in {target} ({kept})", flush=True)
        yield tls
    finally:
        if folder is None:
            shutil.rmtree(target, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Command line (see :func:`run_command`); SIGINT / SIGTERM stop every process it started.

    On a signal the run's processes are stopped and one line says so; the exit code is 130
    (SIGINT, Ctrl-C) or 143 (SIGTERM). The last line then gives the command that continues the
    run from its checkpoint, or says why it cannot (:mod:`experiments.run.resume_command`).
    """
    from experiments.run.resume_command import LastWords

    last_words = LastWords()
    return exit_code_stopping_on_signals(lambda: run_command(argv, last_words), last_words)


def add_out_argument(parser: argparse.ArgumentParser) -> None:
    """``--out DIR`` (alias ``--results``): where a single run's timestamped folder goes."""
    parser.add_argument(
        "--out",
        "--results",
        dest="out",
        type=Path,
        default=DEFAULT_RESULTS,
        help="folder for the run's result folder <policy>-<UTC time> (default: results/; "
        "ignored when the run config sets result-dir or resume-from)",
    )


def result_files(result_dir: Path) -> list[str]:
    """The files a finished run left in ``result_dir``, in the README's order (those present)."""
    names = (
        "metrics.jsonl",
        "config.json",
        "summary.json",
        "status.json",
        "model.pt",
        "checkpoint.pt",
        "curves.png",
    )
    return [name for name in names if (result_dir / name).is_file()]


def launcher_parser() -> argparse.ArgumentParser:
    """The launcher's command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--run-config",
        default="",
        help="overrides, e.g. \"policy='bc' num-server-rounds=5\" (keys of [tool.flwr.app.config])",
    )
    parser.add_argument("--num-supernodes", type=int, default=None, help="default: num-devices")
    parser.add_argument(
        "--deployment",
        action="store_true",
        help="run SuperNode processes on loopback instead of the simulation engine",
    )
    parser.add_argument("--cpus-per-client", type=int, default=1)
    parser.add_argument("--gpus-per-client", type=float, default=0.0)
    add_out_argument(parser)
    parser.add_argument(
        "--tls",
        action="store_true",
        help="TLS on every connection and SuperNode authentication (certificates are generated)",
    )
    parser.add_argument(
        "--certificates-dir",
        type=Path,
        default=None,
        help="with --tls: write the certificates and keys here and keep them (default: a "
        "temporary folder, removed at the end)",
    )
    parser.add_argument(
        "--ray-address",
        default=os.environ.get("RAY_ADDRESS") or None,
        help="join this Ray cluster for the simulation (e.g. HEAD:6379; default: $RAY_ADDRESS)",
    )
    parser.add_argument(
        "--flwr-home",
        type=Path,
        default=None,
        help="FLWR_HOME for the run (default: a fresh temporary folder); on a Ray cluster of "
        "several machines it must be a shared folder at the same path everywhere",
    )
    parser.add_argument(
        "--superlink",
        default=None,
        help="run on an existing SuperLink at HOST:PORT instead of starting one",
    )
    parser.add_argument(
        "--root-certificates",
        type=Path,
        default=None,
        help="with --superlink: CA certificate of a TLS SuperLink (default: insecure)",
    )
    return parser


def run_command(argv: list[str] | None = None, last_words: LastWords | None = None) -> int:
    """Command line: one simulation run, results under ``results/<policy>-<time>``.

    The first line names the run's folder once it is taken; ``last_words`` learns how the run
    continues (the command a stopped run's last line gives).
    """
    parser = launcher_parser()
    args = parser.parse_args(argv)

    try:
        overrides = parse_run_config_text(args.run_config)
        merged = validated_run_config(overrides)
        if args.ray_address and (args.deployment or args.superlink):
            raise ValueError("--ray-address is for the simulation engine only")
        if args.certificates_dir is not None and not args.tls:
            raise ValueError("--certificates-dir is for --tls runs only")
        if args.ray_address:
            check_ray_address(args.ray_address)
        if args.superlink:
            check_reachable(args.superlink)
        else:  # the data must be there before anything starts (CIFAR cannot be downloaded)
            from fedcgd_task.datasets import load_train_set
            from fedcgd_task.settings import TaskSettings

            load_train_set(TaskSettings.from_run_config(with_resolved_data_dir(merged)))
    except (ValueError, ConnectionError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from experiments.run.preflight import claim_run, effective_result_dir, refused, with_result_dir

    claim = None
    if args.superlink:  # the folders and data of a remote SuperLink are not here
        merged = with_result_dir(merged, args.out)
    else:  # the run's folder is locked from here until this process ends
        try:
            merged, claim = claim_run(with_resolved_data_dir(merged), args.out)
        except (ValueError, FileNotFoundError) as err:
            print(refused(err).message, file=sys.stderr)
            return 2
    user_overrides = dict(overrides)
    if merged.get("result-dir"):
        overrides["result-dir"] = merged["result-dir"]
    result_dir = effective_result_dir(merged)
    print(f"result folder: {result_dir}", flush=True)
    continuing = continue_line(parser, args, user_overrides, merged)
    if last_words is not None:
        last_words.set(continuing)
    try:
        return launch_run(args, overrides, merged, continuing)
    finally:
        if claim is not None:
            claim.release()


def continue_line(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    overrides: Mapping[str, Any],
    merged: Mapping[str, Any],
) -> Callable[[], str]:
    """What the last line of a stopped run says (read when it is printed): how it continues.

    The same launcher options (``--out`` aside) and run config, with ``resume-from`` = the
    run's folder; without a checkpoint, the command that starts it again in a new folder
    (:func:`experiments.run.resume_command.single_run_line`).
    """
    from experiments.run.preflight import effective_result_dir
    from experiments.run.resume_command import single_run_commands, single_run_line

    result_dir = effective_result_dir(merged)
    resume, again = single_run_commands(
        "experiments.run.launcher", parser, args, overrides, result_dir
    )
    every = int(merged.get("checkpoint-every", 1))
    if args.superlink:  # the folder lies on the SuperLink's machine: nothing to read here
        return lambda: (
            f"to continue, when {result_dir} on the SuperLink's machine holds a "
            f"checkpoint.pt: {resume}"
        )
    return lambda: single_run_line(result_dir, resume, again, every)


def launch_run(
    args: argparse.Namespace,
    overrides: dict[str, Any],
    merged: dict[str, Any],
    continuing: Callable[[], str] | None = None,
) -> int:
    """Run the checked run (:func:`run_command`) and say how it ended; the exit code.

    A failed run's last line is ``continuing()``: how it continues, or why it cannot.
    """
    from experiments.run.preflight import effective_result_dir, run_outcome
    from server_app.atomic_files import ResultWriteError

    launched_unix_s = time.time()
    num_nodes = args.num_supernodes or int(merged["num-devices"])
    if args.superlink:
        proc = run_on_superlink(overrides, args.superlink, args.root_certificates)
    else:
        supernode_keys = num_nodes if args.deployment else 0
        with tls_certificates(args.tls, args.certificates_dir, supernode_keys) as tls:
            proc = run_flwr(
                overrides,
                num_supernodes=num_nodes,
                deployment=args.deployment,
                cpus_per_client=args.cpus_per_client,
                gpus_per_client=args.gpus_per_client,
                tls=tls,
                ray_address=args.ray_address,
                flwr_home=args.flwr_home,
            )
    result_dir = effective_result_dir(merged)
    # `flwr run` exits 0 on a crash too: the status and the ServerApp's own line say how it went
    outcome = run_outcome(result_dir, launched_unix_s, output=proc.stdout or "")
    if outcome.code != 0:
        print(f"\n(flwr run exit code {proc.returncode})\n{outcome.message}", file=sys.stderr)
        if continuing is not None:
            print(continuing(), file=sys.stderr)
        return outcome.code
    from experiments.analysis.plot_runs import plot_runs

    try:
        plot_runs([result_dir], result_dir / "curves.png")
    except ResultWriteError as err:
        print(f"failed: {err} (the run itself completed, in {result_dir})", file=sys.stderr)
        return 1
    print((result_dir / "summary.json").read_text())
    print(f"\nResults: {result_dir} ({', '.join(result_files(result_dir))})")
    print(outcome.message)
    return 0


if __name__ == "__main__":
    from experiments.run.processes import run_as_command

    raise SystemExit(run_as_command(main))
