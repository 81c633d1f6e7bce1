"""``fedcgd run``: the app with ``flwr run`` on a SuperLink we own, or on a given one.

Simulation by default, ``--deployment`` on one ``flower-supernode`` per device, ``--superlink``
on an existing SuperLink; nothing is left running (docs/running.md, docs/deployment.md).
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.run.certificates import check_certificates_dir, tls_certificates
from experiments.run.flwr_run import check_ray_address, check_reachable, run_flwr
from experiments.run.resume_command import StartedAs, continue_line
from experiments.run.run_config import (
    parse_run_config_text,
    validated_run_config,
    with_resolved_data_dir,
)
from fedcgd_task.schema import PROJECT_DIR
from server_app.run_folder.signals import exit_code_stopping_on_signals

if TYPE_CHECKING:
    from experiments.run.resume_command import LastWords

#: Default ``--out`` of the commands: the parent of a run's ``<policy>-<UTC time>`` folder
#: (:func:`server_app.config.timestamped_result_dir`) when its ``result-dir`` is empty.
DEFAULT_RESULTS = PROJECT_DIR / "results"


@dataclass(frozen=True)
class LaunchOptions:
    """The options of ``fedcgd run`` (docs/running.md); the defaults are the command's."""

    run_config: str = ""
    num_supernodes: int | None = None
    deployment: bool = False
    cpus_per_client: int = 1
    gpus_per_client: float = 0.0
    out: Path = DEFAULT_RESULTS
    tls: bool = False
    certificates_dir: Path | None = None
    ray_address: str | None = None
    flwr_home: Path | None = None
    superlink: str | None = None
    root_certificates: Path | None = None
    supernode_gpus: str | None = None


def gpu_list(text: str | None) -> tuple[int, ...]:
    """The GPU numbers of ``--supernode-gpus`` (``"0,1"``); ValueError naming it if not."""
    if text is None:
        return ()
    words = [word.strip() for word in text.split(",")]
    if not all(word.isdigit() and len(word) <= 4 for word in words):
        raise ValueError(
            f"--supernode-gpus = {text!r}; allowed: comma-separated GPU numbers, e.g. 0,1"
        )
    return tuple(int(word) for word in words)


def check_gpus(args: LaunchOptions, device: str) -> None:
    """Refuse GPU options that cannot work with the engine they are given for (ValueError)."""
    if args.supernode_gpus is not None:
        if not args.deployment:
            raise ValueError("--supernode-gpus is for --deployment runs only")
        gpu_list(args.supernode_gpus)
    if args.deployment or args.superlink or not device.startswith("cuda"):
        return
    if args.gpus_per_client <= 0:
        raise ValueError(
            f"run-config key 'device' = {device!r} needs --gpus-per-client > 0 in the "
            "simulation engine (Ray hides every GPU from a ClientApp that asks for none)"
        )
    if device != "cuda":
        raise ValueError(
            f"run-config key 'device' = {device!r}: in the simulation engine Ray gives each "
            'ClientApp its own GPUs, numbered from 0; allowed: "cuda" or "auto"'
        )


#: The options of ``fedcgd run`` that are :func:`run_flwr` arguments of the same name.
RUN_FLWR_OPTIONS = (
    "deployment", "cpus_per_client", "gpus_per_client", "ray_address", "flwr_home", "superlink",
    "root_certificates",
)  # fmt: skip


def main(options: LaunchOptions, started: StartedAs | None = None) -> int:
    """``fedcgd run`` (:func:`run_command`); SIGINT / SIGTERM stop every process it started."""
    from experiments.run.resume_command import LastWords

    last_words = LastWords()
    return exit_code_stopping_on_signals(
        lambda: run_command(options, started or StartedAs(("run",)), last_words), last_words
    )


def results_line(result_dir: Path) -> str:
    """The ``Results:`` line: the files a finished run left and how to view its events.

    docs/running.md says what each file holds.
    """
    names = "metrics.jsonl config.json summary.json status.json model.pt checkpoint.pt curves.png"
    line = f"Results: {result_dir} ("
    line += ", ".join(name for name in names.split() if (result_dir / name).is_file())
    if any(result_dir.glob("events.out.tfevents.*")):
        line += f", events.out.tfevents.*; tensorboard --logdir {shlex.quote(str(result_dir))}"
    return line + ")"


def run_command(args: LaunchOptions, started: StartedAs, last_words: LastWords) -> int:
    """One run, results under ``--out`` by default; the exit code.

    The first line names the run's folder; ``last_words`` learns the command that continues it
    (from the options it was ``started`` with).
    """
    from experiments.run.preflight import claim_run, effective_result_dir, with_result_dir

    claim = None
    try:
        overrides = parse_run_config_text(args.run_config)
        merged = validated_run_config(overrides)
        devices = int(merged["num-devices"])
        if not (args.deployment or args.superlink) and (args.num_supernodes or devices) < devices:
            raise ValueError(
                f"--num-supernodes {args.num_supernodes} < num-devices = {devices}: a simulation "
                "needs one SuperNode per device; leave --num-supernodes out"
            )
        if args.ray_address and (args.deployment or args.superlink):
            raise ValueError("--ray-address is for the simulation engine only")
        if args.certificates_dir is not None and not args.tls:
            raise ValueError("--certificates-dir is for --tls runs only")
        if args.certificates_dir is not None:
            nodes = args.num_supernodes or int(merged["num-devices"])
            check_certificates_dir(args.certificates_dir, nodes if args.deployment else 0)
        if args.ray_address:
            check_ray_address(args.ray_address)
        check_gpus(args, str(merged["device"]))
        if args.superlink:  # the folders and data of a remote SuperLink are not here
            check_reachable(args.superlink)
            merged = with_result_dir(merged, args.out)
        else:  # every check, the data's too; the folder is locked until this process ends
            merged, claim = claim_run(with_resolved_data_dir(merged), args.out)
    except (ValueError, ConnectionError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    user_overrides = dict(overrides)
    if merged.get("result-dir"):
        overrides["result-dir"] = merged["result-dir"]
    result_dir = effective_result_dir(merged)
    print(f"result folder: {result_dir}", flush=True)
    every = int(merged["checkpoint-every"])
    continuing = continue_line(started, user_overrides, result_dir, every, args.superlink)
    last_words.set(continuing)
    try:
        return launch_run(args, overrides, merged, continuing)
    finally:
        if claim is not None:
            claim.release()


def launch_run(
    args: LaunchOptions,
    overrides: dict[str, Any],
    merged: dict[str, Any],
    continuing: Callable[[], str],
) -> int:
    """Run the checked run (:func:`run_command`) and say how it ended; the exit code.

    A failed run's last line is ``continuing()``: how it continues, or why it cannot.
    """
    from experiments.run.preflight import effective_result_dir
    from server_app.run_folder.files import ResultWriteError
    from server_app.run_folder.run_status import run_outcome

    launched_unix_s = time.time()
    num_nodes = args.num_supernodes or int(merged["num-devices"])
    supernode_keys = num_nodes if args.deployment else 0
    tls_on = args.tls and not args.superlink  # a given SuperLink: --root-certificates
    with tls_certificates(tls_on, args.certificates_dir, supernode_keys) as tls:
        options = {name: getattr(args, name) for name in RUN_FLWR_OPTIONS}
        options["supernode_gpus"] = gpu_list(args.supernode_gpus)
        proc = run_flwr(overrides, num_supernodes=num_nodes, tls=tls, **options)
    result_dir = effective_result_dir(merged)
    # `flwr run` exits 0 on a crash too: the status and the ServerApp's own line say how it went
    outcome = run_outcome(result_dir, launched_unix_s, output=proc.stdout or "")
    if outcome.code != 0:
        print(f"\n{outcome.message}", file=sys.stderr)
        print(continuing(), file=sys.stderr)
        return outcome.code
    from experiments.analysis.plot_runs import plot_runs

    try:
        plot_runs([result_dir], result_dir / "curves.png")
    except ResultWriteError as err:
        print(f"failed: {err} (the run itself completed, in {result_dir})", file=sys.stderr)
        return 1
    print((result_dir / "summary.json").read_text())
    print(f"\n{results_line(result_dir)}")
    print(outcome.message)
    return 0
