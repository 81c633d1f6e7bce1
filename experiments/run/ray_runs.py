"""A comparison's or preset's runs as Ray tasks, each the in-process engine (docs/comparing.md)."""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.run.processes import usable_cores
from server_app.run_folder.files import append_line, atomic_write, watching
from server_app.run_folder.folder_lock import claim_folder
from server_app.run_folder.results import RUN_FILES, STATUS_FILE
from server_app.run_folder.run_status import first_line

#: A run's output when it goes as a Ray task, in its result folder.
RUN_LOG = "run.log"
#: Times a run lost with its node or worker starts again before it counts as failed.
MAX_RETRIES = 3
#: In a run's folder while its task goes: the command's token, read by a task that sees the folder.
TOKEN_FILE = ".fedcgd-ray-task"


@dataclass(frozen=True)
class RaySettings:
    """Where runs go as Ray tasks (``address`` None: this machine); ``jobs``: a local Ray's CPUs."""

    address: str | None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    jobs: int = 0


def resolve_jobs(jobs: Any, engine: str) -> int:
    """The runs to keep going at once: ``jobs``, or every usable core for 0 (ValueError if bad)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(
            f"jobs: got {jobs!r}; allowed: a whole number >= 1 (runs at once), or 0 for one "
            f"per usable CPU core ({usable_cores()} here)"
        )
    count = jobs or usable_cores()
    if count > 1 and engine != "inprocess":
        raise ValueError(
            f"jobs: got {jobs!r} with engine {engine!r}; runs side by side need the inprocess "
            "engine (the simulation engine and deployments already run clients in parallel): "
            "use jobs=1 or the inprocess engine"
        )
    return count


def ray_settings(
    address: Any, cpus: Any, gpus: Any, *, engine: str, jobs: Any, prefix: str = "launcher."
) -> RaySettings | None:
    """The checked Ray settings (``address`` empty: ``$RAY_ADDRESS``), or None: runs go locally."""
    address = str(address or os.environ.get("RAY_ADDRESS") or "") or None
    for key, value, least in (("cpus-per-run", cpus, "> 0"), ("gpus-per-run", gpus, ">= 0")):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and value >= 0) or (
            (value == 0) if key == "cpus-per-run" else (value > 1 and value % 1)
        ):
            raise ValueError(
                f"{prefix}{key}: got {value!r}; allowed: a number {least} (a fraction shares "
                "one CPU or GPU; above 1 GPU, whole GPUs)"
            )
    if address is None and not gpus:
        return None
    ray = f"with runs as Ray tasks ({prefix}ray-address or {prefix}gpus-per-run)"
    if engine == "deployment":
        raise ValueError(
            f"{prefix}engine: got deployment {ray}; allowed: inprocess or simulation (each "
            "task runs the in-process engine)"
        )
    if jobs != 1:
        raise ValueError(f"{prefix}jobs: got {jobs!r} {ray}; allowed: 1 (Ray runs as many as fit)")
    return RaySettings(address, float(cpus), float(gpus))


def connect(settings: RaySettings, prefix: str = "launcher.") -> int:
    """Join (or start) the Ray cluster; the runs it holds at once (ValueError: none, no answer)."""
    import ray

    from experiments.run.flwr_run import check_reachable

    where = settings.address or "this machine"
    local = settings.address in (None, "local")
    ray.shutdown()  # an earlier command's connection in this process
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # run_task sets the device
    if local:  # after a kill -9 of this process, its Ray's agents give up on its GCS in 2 s
        os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", "2")
    try:
        if settings.address not in (None, "auto", "local"):
            check_reachable(settings.address.removeprefix("ray://"), what=f"{prefix}ray-address")
        sigterm = signal.getsignal(signal.SIGTERM)
        ray.init(
            settings.address,
            logging_level=logging.ERROR,
            log_to_driver=False,
            include_dashboard=False if local else None,
            num_cpus=settings.jobs or None,
        )
        if sigterm is not None:  # ray.init's own handler exits without the command's last words
            with suppress(ValueError):  # not the main thread: ray.init set none
                signal.signal(signal.SIGTERM, sigterm)
    except Exception as err:  # Ray raises several kinds; each is one line here
        message = f"{prefix}ray-address: no Ray cluster at {where}: {first_line(err)}"
        raise ValueError(message) from err
    runs = capacity(settings)
    if runs == 0:
        have = [n["Resources"] for n in ray.nodes() if n["Alive"]]
        nodes = [(r.get("CPU", 0), r.get("GPU", 0)) for r in have]
        ray.shutdown()
        raise ValueError(
            f"{prefix}gpus-per-run / cpus-per-run: got {settings.gpus_per_run:g} GPUs and "
            f"{settings.cpus_per_run:g} CPUs a run; no node of the Ray cluster at {where} has "
            f"them (CPUs, GPUs per node: {nodes}); ask for less or add nodes"
        )
    return runs


def capacity(settings: RaySettings) -> int:
    """How many runs the cluster's live nodes hold at once with these resources per run."""
    import ray

    total = 0
    for have in (n["Resources"] for n in ray.nodes() if n["Alive"]):
        fits = int(have.get("CPU", 0) // settings.cpus_per_run)
        if settings.gpus_per_run:
            fits = min(fits, int(have.get("GPU", 0) // settings.gpus_per_run))
        total += fits
    return total


@contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors 1 and 2) to ``path``."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as log:
        for fd in (1, 2):
            os.dup2(log.fileno(), fd)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, old in zip((1, 2), saved, strict=True):
            os.dup2(old, fd)
            os.close(old)


def moved(name: str, data: bytes, old: str, new: str) -> bytes:
    """A run file's bytes with its folder's path ``old`` written as ``new`` (JSON and logs)."""
    if name.endswith(".pt") or name.startswith("events."):
        return data
    import json

    if name.endswith((".json", ".jsonl")):
        old, new = json.dumps(old)[1:-1], json.dumps(new)[1:-1]
    return data.replace(old.encode(), new.encode())


def folder_files(folder: Path) -> dict[str, bytes]:
    """The files of a run's folder (not the lock files), name -> bytes."""
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name[0] != "."}


def run_task(
    overrides: dict[str, Any], files: dict[str, bytes], threads: int, token: str
) -> tuple[dict[str, bytes], int]:
    """One run in a Ray worker (in place, or in a temporary folder); its files, its exit code."""
    import ray

    from experiments.run.inprocess import run_inprocess
    from experiments.run.run_config import validated_run_config, with_resolved_data_dir
    from server_app.run_folder.run_status import run_outcome

    real = str(overrides["result-dir"])
    in_place = False
    with suppress(OSError):
        in_place = (Path(real) / TOKEN_FILE).read_text() == token
    where = nullcontext(real) if in_place else tempfile.TemporaryDirectory(prefix="fedcgd-run-")
    with where as tmp:
        folder = Path(tmp)
        for name, data in {} if in_place else files.items():
            (folder / name).write_bytes(moved(name, data, real, tmp))
        config = {**overrides, "result-dir": tmp}
        if "resume-from" in config:
            config["resume-from"] = tmp
        if config.get("device", "auto") == "auto":
            config["device"] = "cuda" if ray.get_gpu_ids() else "cpu"
        failure: Exception | None = None
        with output_to(folder / RUN_LOG):
            node = ray.get_runtime_context().get_node_id()
            print(f"Ray task on node {node}, GPUs {ray.get_gpu_ids()}", flush=True)
            launched = time.time()
            # A stopped command's tasks get SIGTERM from Ray, whose handler raises SystemExit(1)
            # (to the run, a failure): here the run ends ``stopped by SIGTERM``.
            try:
                with watching(interrupt=True):
                    config = with_resolved_data_dir(validated_run_config(config))
                    run_inprocess(config, cohort_threads=threads)
            except Exception as err:  # the run failed: its outcome line says why
                failure = err
            outcome = run_outcome(folder, launched, failure)
            print(outcome.message, flush=True)
        if in_place:
            return {}, outcome.code
        files = {name: moved(name, data, tmp, real) for name, data in folder_files(folder).items()}
    return files, outcome.code


def again(run: Mapping[str, Any]) -> dict[str, Any]:
    """A lost run's config: from its folder's checkpoint, else from the start (files removed)."""
    from server_app.checkpoint import CHECKPOINT_FILE

    folder = Path(run["result-dir"])
    if (folder / CHECKPOINT_FILE).exists():
        return {**run, "resume-from": str(folder)}
    for name in RUN_FILES:
        (folder / name).unlink(missing_ok=True)
    return {k: v for k, v in run.items() if k != "resume-from"}


def run_tasks(
    runs: Sequence[Mapping[str, Any]],
    settings: RaySettings,
    on_start: Callable[[int], bool | None],
    on_end: Callable[[int, int], None],
) -> int:
    """Run every run config as a Ray task, as many at once as fit; how many went again.

    ``on_start(i)`` before run ``i`` (False keeps it back); ``on_end(i, code)`` after its files.
    """
    import ray

    task = ray.remote(run_task).options(
        num_cpus=settings.cpus_per_run, num_gpus=settings.gpus_per_run, max_retries=0
    )
    token, jobs = uuid.uuid4().hex, settings.jobs  # threads: of a run's σ̂ passes
    threads = max(1, usable_cores() // jobs if jobs else int(settings.cpus_per_run))
    waiting, tries = deque(range(len(runs))), [0] * len(runs)
    configs = [dict(run) for run in runs]
    going: dict[ray.ObjectRef[Any], int] = {}

    def end(i: int, files: Mapping[str, bytes], code: int, reason: str = "") -> None:
        folder = Path(runs[i]["result-dir"])
        (folder / TOKEN_FILE).unlink(missing_ok=True)
        if reason:
            append_line(folder / RUN_LOG, reason)
        try:
            with claim_folder(folder, "result folder", writer=True):
                for name in sorted(files, key=lambda name: name == STATUS_FILE):
                    atomic_write(folder / name, files[name])
        except ValueError as err:
            code = 1
            append_line(folder / RUN_LOG, f"failed: {first_line(err)}")
        on_end(i, code)

    try:
        while waiting or going:
            while waiting and len(going) < max(1, capacity(settings)):
                i = waiting.popleft()
                if tries[i] == 0 and on_start(i) is False:
                    continue
                tries[i] += 1
                folder = Path(configs[i]["result-dir"])
                folder.mkdir(parents=True, exist_ok=True)
                atomic_write(folder / TOKEN_FILE, token)
                files = folder_files(folder) if "resume-from" in configs[i] else {}
                going[task.remote(configs[i], files, threads, token)] = i
            try:
                done, _ = ray.wait(list(going), num_returns=1, timeout=1.0)
            except SystemError as err:  # a signal's exception raised inside Ray's C code
                if isinstance(err.__cause__, Exception) or err.__cause__ is None:
                    raise
                raise err.__cause__ from None  # Ctrl-C, SIGTERM: the command stops
            for ref in done:
                i = going.pop(ref)
                try:
                    end(i, *ray.get(ref))
                except ray.exceptions.RayTaskError as err:  # the task itself broke
                    end(i, {}, 1, f"failed: {first_line(err)}")
                except ray.exceptions.RayError as err:  # lost with its node or worker
                    if tries[i] <= MAX_RETRIES:
                        configs[i] = again(runs[i])
                        start = "its checkpoint" if "resume-from" in configs[i] else "its start"
                        print(
                            f"{runs[i]['result-dir']}: lost ({first_line(err)}); started again "
                            f"from {start}",
                            flush=True,
                        )
                        waiting.appendleft(i)
                        continue
                    end(i, {}, 1, f"failed: lost {tries[i]} times: {first_line(err)}")
    finally:
        # No ray.cancel: Ray 2.55's force-cancel races with the task's reply and can abort this
        # process (TaskManager::CompletePendingTask). A driver's end ends its job, and Ray then
        # kills the job's workers on every node: the runs still going stop with this command.
        stopped = [Path(runs[i]["result-dir"]) for i in going.values()]
        for folder in stopped:
            (folder / TOKEN_FILE).unlink(missing_ok=True)
        ray.shutdown()
        settle_stopped(stopped)
    return sum(1 for n in tries if n > 1)


#: Seconds a stopped command waits for its runs' tasks to record their end.
STOP_GRACE_S = 15.0


def settle_stopped(folders: Sequence[Path]) -> None:
    """Wait for each folder's run to leave ``running``; mark stopped those Ray killed first."""
    from server_app.run_folder.run_status import RUNNING, mark_stopped, read_status

    def going(folder: Path) -> bool:
        status = read_status(folder, quiet=True)
        return status is not None and status.state == RUNNING

    deadline = time.monotonic() + STOP_GRACE_S
    while any(going(f) for f in folders) and time.monotonic() < deadline:
        time.sleep(0.2)
    for folder in folders:
        mark_stopped(folder, "stopped with the command (Ray ended its task before it said so)")
