"""Running a comparison's planned runs (:func:`run_points`) and collecting what they left."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.compare.plans import (
    KEEP,
    RESUME,
    RUN,
    PlannedRun,
    check_comparison,
    plan_runs,
)
from experiments.compare.results import summarise, write_comparison
from experiments.run.flwr_run import run_flwr, strip_ansi
from experiments.run.progress import RunProgress, format_duration
from experiments.run.ray_runs import (
    RUN_LOG,
    RaySettings,
    connect,
    ray_settings,
    resolve_jobs,
    run_tasks,
)
from experiments.run.run_config import validated_run_config, with_resolved_data_dir
from fedcgd_config.imports import reference_label
from fedcgd_config.settings import default_run_config
from fedcgd_strategy.errors import OneLineMessage
from server_app.run_folder.folder_lock import FolderClaim, claim_folder
from server_app.run_folder.results import CHECKPOINT_FILE, RUN_FILES, SUMMARY_FILE, holds_run
from server_app.run_folder.run_status import (
    FAILED,
    failure_from_output,
    first_line,
    read_status,
    run_outcome,
)

MAX_REASON = 200  # characters of a failure reason kept for the last line


@dataclass(frozen=True)
class LaunchSettings:
    """How runs are launched: ``fedcgd compare``'s options (docs/comparing.md)."""

    engine: str
    jobs: int = 1
    num_supernodes: int | None = None
    cpus_per_client: int = 1
    gpus_per_client: float = 0.0
    ray: RaySettings | None = None


def launch_settings(
    engine: str, jobs: Any, ray: tuple[Any, Any, Any], prefix: str, **flwr: Any
) -> LaunchSettings:
    """Checked jobs, and Ray joined when ``ray`` (address, CPUs and GPUs per run) asks for it."""
    jobs = resolve_jobs(jobs, engine)
    on_ray = ray_settings(*ray, engine=engine, jobs=jobs, prefix=prefix)
    if on_ray is not None:
        jobs = connect(on_ray, prefix=prefix)
    return LaunchSettings(engine, jobs, ray=on_ray, **flwr)


@dataclass
class ComparisonRuns:
    """The completed runs' rows, the failures, the plan size; ``retried``: on Ray (None: no Ray)."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (bc/seed-1, why: one line)
    planned: int = 0
    retried: int | None = None

    @property
    def code(self) -> int:
        """0 when every planned run completed, else 1."""
        return 0 if not self.failed and len(self.runs) == self.planned else 1

    def last_line(self) -> str:
        """What happened, in one line (the command's last)."""
        retried = "" if self.retried is None else f" ({self.retried} retried on Ray)"
        if self.code == 0:
            return f"all {self.planned} runs completed{retried}"
        reasons = ", ".join(f"{label} ({reason})" for label, reason in self.failed)
        return (
            f"{len(self.failed)} of {self.planned} runs failed{retried}: {reasons}; the tables "
            f"hold the {len(self.runs)} completed runs"
        )

    def report(self) -> int:
        """Print :meth:`last_line` (on stderr after a failure); the exit code."""
        print(self.last_line(), file=sys.stderr if self.code else sys.stdout, flush=True)
        return self.code


def claim_run_folder(plan: PlannedRun) -> FolderClaim:
    """Lock the folder; a run to start loses a stopped run's files, not a summary or checkpoint."""
    claim = claim_folder(plan.result_dir, f"{plan.label}: result folder")
    if plan.action == RUN:
        for name in set(RUN_FILES) - {SUMMARY_FILE, CHECKPOINT_FILE}:
            (plan.result_dir / name).unlink(missing_ok=True)
    return claim


def launch(plan: PlannedRun, how: LaunchSettings) -> str | None:
    """Run one planned run in the foreground, its folder locked; None or why not (one line)."""
    try:
        claim = claim_run_folder(plan)
    except ValueError as err:
        return first_line(err)
    with claim:
        launched_unix_s, output, failure, code = time.time(), "", None, 0
        if how.engine == "inprocess":
            from experiments.run.inprocess import run_inprocess

            try:
                run_inprocess(with_resolved_data_dir(validated_run_config(plan.overrides)))
            except Exception as err:  # one failed run must not stop a sweep
                if not isinstance(err, OneLineMessage):
                    print(f"in-process run failed: {err!r}", flush=True)
                failure, code = err, 1
        else:
            devices = plan.overrides.get("num-devices", default_run_config()["num-devices"])
            proc = run_flwr(
                plan.overrides,
                num_supernodes=how.num_supernodes or int(devices),
                deployment=how.engine == "deployment",
                cpus_per_client=how.cpus_per_client,
                gpus_per_client=how.gpus_per_client,
            )
            code, output = proc.returncode, proc.stdout or ""
        return run_reason(plan, code, launched_unix_s, output, failure)


#: A line Flower logged as an error (its message in group 1).
ERROR = re.compile(r"\s*ERROR\s*:\s*(\S.*)")


def run_reason(
    plan: PlannedRun,
    code: int,
    launched_unix_s: float,
    output: str = "",
    failure: BaseException | None = None,
) -> str | None:
    """None when the run completed, else why not: its status, or Flower's first ``ERROR`` line."""
    outcome = run_outcome(plan.result_dir, launched_unix_s, failure, output)
    if outcome.code == 0 and code == 0:
        return None
    reason = outcome.message.removeprefix("failed: ") if outcome.code else "completed"
    errors = [m.group(1) for x in output.splitlines() if (m := ERROR.match(strip_ansi(x)))]
    if errors and failure is None and failure_from_output(output) is None:
        status = read_status(plan.result_dir, quiet=True) if outcome.code else None
        if status is None or status.state != FAILED:
            reason = errors[0].strip()  # the simulation crashed before the ServerApp said why
    return shortened(reason) if code == 0 else f"exit code {code}: {shortened(reason)}"


def kept_failure(folder: Path) -> str | None:
    """Why a kept run (its rounds all run) failed, as its status says; None: it completed."""
    status = read_status(folder, quiet=True)  # read at planning: a torn one changes no row
    if status is None or status.state != FAILED:
        return None
    return f"failed earlier: {shortened(status.reason or 'no reason recorded')}"


def shortened(reason: str) -> str:
    """``reason`` cut to :data:`MAX_REASON` characters (``...`` at the end when cut)."""
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."


def run_policies(
    policies: list[str],
    shared: Mapping[str, Any],
    out: Path,
    *,
    seeds: Sequence[int] = (0,),
    target_accuracy: float | None = None,
    num_supernodes: int | None = None,
) -> ComparisonRuns:
    """A comparison on the simulation engine into ``out/<policy>/seed-<s>``; the tables."""
    seeds = check_comparison(policies, shared, seeds)
    with claim_folder(out, "--out"):
        plans = plan_runs(policies, shared, out, seeds)
        how = LaunchSettings("simulation", num_supernodes=num_supernodes)
        return run_points([("", plans)], out, how, target_accuracy)


def run_points(
    points: Sequence[tuple[str, Sequence[PlannedRun]]],
    out: Path,
    how: LaunchSettings,
    target_accuracy: float | None,
) -> ComparisonRuns:
    """Run every point's plans not kept; write each point's tables in ``out/<point>`` (``""``:
    ``out``). One job and no ``how.ray``: each run in the foreground; else each a Ray task, its
    output in its ``run.log`` (docs/comparing.md)."""  # noqa: D205, D209
    every = [plan for _, plans in points for plan in plans]
    policies = list(dict.fromkeys(p.policy for p in every))
    seeds = list(dict.fromkeys(p.seed for p in every))
    where = {p.result_dir: (k, label) for k, (label, plans) in enumerate(points, 1) for p in plans}
    outcomes: dict[Path, str | None] = {}
    tracker = RunProgress(total=len(every), workers=how.jobs)

    def announce(plan: PlannedRun, started: str = "") -> None:
        k, label = where[plan.result_dir]
        i, j = policies.index(plan.policy) + 1, seeds.index(plan.seed) + 1
        print(
            f"=== {tracker.header()} " + (f"[{label} {k}/{len(points)}] " if label else "")
            + f"[policy {i}/{len(policies)}, seed {j}/{len(seeds)}] "
            + f"{reference_label(plan.policy)} seed={plan.seed} -> {plan.result_dir}{started}",
            flush=True,
        )  # fmt: skip
        if plan.action == KEEP:
            print("completed earlier with the same settings; kept", flush=True)
        elif plan.action == RESUME:
            print("incomplete: resumed from its checkpoint", flush=True)
        elif holds_run(plan.result_dir):
            print("stopped without a checkpoint: run again from the start", flush=True)

    def record(plan: PlannedRun, reason: str | None) -> None:
        tracker.end_run(plan.result_dir, failed=reason is not None)
        outcomes[plan.result_dir] = reason
        if reason is not None:
            print(f"{plan.label} failed: {reason}", flush=True)

    for plan in (p for p in every if p.action == KEEP):
        announce(plan)
        tracker.end_run(kept=True)
        outcomes[plan.result_dir] = kept_failure(plan.result_dir)
    to_run = [plan for plan in every if plan.action != KEEP]
    retried = None
    if how.jobs == 1 and how.ray is None:
        for plan in to_run:
            announce(plan)
            tracker.start_run(plan.result_dir)
            record(plan, launch(plan, how))
    else:
        launched: dict[int, float] = {}

        def on_start(i: int) -> bool:
            plan = to_run[i]
            announce(plan, f" (started; output in {plan.result_dir / RUN_LOG})")
            try:  # free, and cleared to run again; the task takes the folder's locks itself
                claim_run_folder(plan).release()
            except ValueError as err:
                record(plan, first_line(err))
                return False
            tracker.start_run(plan.result_dir)
            launched[i] = time.time()
            return True

        def on_end(i: int, code: int) -> None:
            plan = to_run[i]
            reason = run_reason(plan, code, launched[i])
            try:  # the run's own last line (failed: / error: ...) says it best
                log = (plan.result_dir / RUN_LOG).read_bytes().decode("utf-8", errors="replace")
            except OSError:
                log = ""
            said = re.match(r"(failed|error): (.*)", log.rstrip().rsplit("\n", 1)[-1])
            if reason is not None and said:
                reason = f"exit code {code}: {shortened(said.group(2))}"
            if reason is None:
                spent = format_duration(time.time() - launched[i])
                print(f"{plan.label} -> {plan.result_dir}: completed in {spent}", flush=True)
            record(plan, reason)

        ray = how.ray or RaySettings("local", jobs=how.jobs)  # jobs > 1: a Ray of this machine
        if how.ray is None:
            connect(ray)
        retried = run_tasks([p.overrides for p in to_run], ray, on_start, on_end)
        retried = retried if how.ray is not None or retried else None
    total = ComparisonRuns(planned=len(every), retried=retried)
    for label, plans in points:  # a plan without an outcome did not run
        runs = []
        for plan in (p for p in plans if p.result_dir in outcomes):
            reason = outcomes[plan.result_dir]
            if reason is None:
                try:
                    runs.append(summarise(plan.result_dir, target_accuracy, plan.seed))
                except ValueError as err:  # a file damaged after the run: not half a table
                    reason = first_line(err)
            if reason is not None:
                total.failed.append((f"{label}/{plan.label}".lstrip("/"), reason))
        if runs:
            write_comparison(runs, out / label, target_accuracy)
        total.runs += [{"sweep": label, **run} if label else run for run in runs]
    return total
