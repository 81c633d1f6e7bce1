"""``fedcgd run``: ``flwr run`` on a SuperLink of its own or a given one (docs/running.md)."""

from __future__ import annotations

import functools
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.run.certificates import check_certificates_dir, tls_certificates
from experiments.run.flwr_run import check_reachable, run_flwr
from experiments.run.resume_command import StartedAs, continue_line
from experiments.run.run_config import (
    parse_run_config_text,
    validated_run_config,
    with_resolved_data_dir,
)
from fedcgd_config.schema import PROJECT_DIR
from server_app.run_folder.files import ResultWriteError, exit_code_stopping_on_signals

if TYPE_CHECKING:
    from experiments.run.resume_command import LastWords
    from server_app.run_folder.folder_lock import FolderClaim
    from server_app.run_folder.run_status import Outcome

#: Default ``--out`` of the commands: the parent of a run's ``<policy>-<UTC time>`` folder.
DEFAULT_RESULTS = PROJECT_DIR / "results"


@dataclass(frozen=True)
class LaunchOptions:
    """The options of ``fedcgd run`` (docs/running.md)."""

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
    words = [] if text is None else [word.strip() for word in text.split(",")]
    if not all(word.isdigit() and len(word) <= 4 for word in words):
        raise ValueError(
            f"--supernode-gpus = {text!r}; allowed: comma-separated GPU numbers, e.g. 0,1"
        )
    return tuple(int(word) for word in words)


def check_options(args: LaunchOptions, merged: dict[str, Any]) -> None:
    """Refuse (ValueError) options that cannot work together or with the run config."""
    devices, device = int(merged["num-devices"]), str(merged["device"])
    simulation = not (args.deployment or args.superlink)
    if simulation and (args.num_supernodes or devices) < devices:
        raise ValueError(
            f"--num-supernodes {args.num_supernodes} < num-devices = {devices}: a simulation "
            "needs one SuperNode per device; leave --num-supernodes out"
        )
    if args.ray_address and not simulation:
        raise ValueError("--ray-address is for the simulation engine only")
    if args.certificates_dir is not None:
        if not args.tls:
            raise ValueError("--certificates-dir is for --tls runs only")
        nodes = args.num_supernodes or devices
        check_certificates_dir(args.certificates_dir, nodes if args.deployment else 0)
    if args.ray_address not in (None, "auto", "local"):
        check_reachable(
            args.ray_address.removeprefix("ray://"), what="--ray-address: the Ray cluster"
        )
    if args.supernode_gpus is not None and not args.deployment:
        raise ValueError("--supernode-gpus is for --deployment runs only")
    gpu_list(args.supernode_gpus)
    if not simulation or not device.startswith("cuda"):
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


def with_last_words(command: Callable[[LastWords], int]) -> int:
    """``command(last_words)``'s exit code; SIGINT / SIGTERM stop it and print its last words."""
    said: LastWords = []
    return exit_code_stopping_on_signals(
        lambda: command(said), lambda: said[-1]() if said else None
    )


def main(options: LaunchOptions, started: StartedAs | None = None) -> int:
    """``fedcgd run`` (:func:`run_command`); SIGINT / SIGTERM stop every process it started."""
    return with_last_words(functools.partial(run_command, options, started or StartedAs(("run",))))


def results_line(result_dir: Path) -> str:
    """The ``Results:`` line: the files a finished run left and how to view its events."""
    names = "metrics.jsonl config.json summary.json status.json model.pt checkpoint.pt curves.png"
    line = f"Results: {result_dir} ("
    line += ", ".join(name for name in names.split() if (result_dir / name).is_file())
    if any(result_dir.glob("events.out.tfevents.*")):
        line += f", events.out.tfevents.*; tensorboard --logdir {shlex.quote(str(result_dir))}"
    return line + ")"


@dataclass(frozen=True)
class Start:
    """A checked run about to start: the user's overrides, the run config, its folder's claim."""

    given: dict[str, Any]
    config: dict[str, Any]
    claim: FolderClaim | None
    result_dir: Path


def start_run(
    text: str,
    out: Path,
    started: StartedAs,
    last_words: LastWords,
    check: Callable[[dict[str, Any]], None] = lambda merged: None,
    superlink: str | None = None,
) -> Start | None:
    """Check a run and lock its folder under ``out`` (a given ``superlink``: the address only).

    None after one line ``error: ...`` (exit code 2).
    """
    from experiments.run.preflight import claim_run, effective_result_dir, with_result_dir

    try:
        given = parse_run_config_text(text)
        merged = validated_run_config(given)
        check(merged)
        if superlink:
            check_reachable(superlink)
            config, claim = with_result_dir(merged, out), None
        else:  # every check, the data's too; the folder is locked until this process ends
            config, claim = claim_run(with_resolved_data_dir(merged), out)
    except (ValueError, ConnectionError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return None
    result_dir = effective_result_dir(config)
    print(f"result folder: {result_dir}", flush=True)
    every = int(config["checkpoint-every"])
    last_words.append(continue_line(started, given, result_dir, every, superlink))
    return Start(given, config, claim, result_dir)


def ended(outcome: Outcome, last_words: LastWords) -> int:
    """Print how the run ended (failed: on stderr, with the command that continues it); its code."""
    print(outcome.message, file=sys.stderr if outcome.code else sys.stdout)
    if outcome.code and last_words:
        print(last_words[-1](), file=sys.stderr)
    return outcome.code


def run_command(args: LaunchOptions, started: StartedAs, last_words: LastWords) -> int:
    """One run with ``flwr run``, results under ``--out`` by default; the exit code."""
    from experiments.analysis.plot_runs import plot_runs
    from server_app.run_folder.run_status import run_outcome

    check = functools.partial(check_options, args)
    run = start_run(args.run_config, args.out, started, last_words, check, args.superlink)
    if run is None:
        return 2
    launched_unix_s, result_dir = time.time(), run.result_dir
    overrides = dict(run.given)
    if run.config.get("result-dir"):
        overrides["result-dir"] = run.config["result-dir"]
    num_nodes = args.num_supernodes or int(run.config["num-devices"])
    tls_on = args.tls and not args.superlink  # a given SuperLink: --root-certificates
    try:
        with tls_certificates(tls_on, args.certificates_dir, num_nodes * args.deployment) as tls:
            same = "deployment cpus_per_client gpus_per_client ray_address flwr_home superlink"
            options = {name: getattr(args, name) for name in [*same.split(), "root_certificates"]}
            options["supernode_gpus"] = gpu_list(args.supernode_gpus)
            proc = run_flwr(overrides, num_supernodes=num_nodes, tls=tls, **options)
        # `flwr run` exits 0 on a crash too: the status and the ServerApp's line say how it went
        outcome = run_outcome(result_dir, launched_unix_s, output=proc.stdout or "")
        if outcome.code == 0:
            plot_runs([result_dir], result_dir / "curves.png")
            print((result_dir / "summary.json").read_text())
            print(f"\n{results_line(result_dir)}")
    except ResultWriteError as err:
        print(f"failed: {err} (the run itself completed, in {result_dir})", file=sys.stderr)
        return 1
    finally:
        if run.claim is not None:
            run.claim.release()
    return ended(outcome, last_words)
