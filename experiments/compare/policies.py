"""Run several scheduling policies on the same settings and seeds and compare them (Table II).

``python -m experiments.compare.policies --policies fedcgd-fscd,bc,all --seeds 0,1,2,3,4
--out results/compare`` runs each (policy, seed) with ``flwr run`` into
``<out>/<policy>/seed-<s>`` (run config ``seed=<s>``: with the same seed every policy sees the
same devices, channel draws and partitions, so policies are compared paired by seed), then
writes from the result files:

- ``runs.csv``: one row per run (policy, seed, final and best accuracy, rounds to the target
  accuracy, mean scheduled devices, mean WEMD of the schedule: the paper's Table II columns);
- ``table.csv``: one row per policy, each metric's mean over seeds and its 95 % confidence
  half-width (``<metric>_mean``, ``<metric>_ci95``; Student t, empty for one seed),
  ``n_seeds``, how many runs ``reached_target``, and a paired t-test of the final accuracy
  against FedCGD-FSCD over the common seeds (``diff_vs_fedcgd_fscd``: mean of policy minus
  FedCGD-FSCD; ``p_value_vs_fedcgd_fscd``; ``n_paired``), and the same for the best accuracy
  (``best_diff_vs_fedcgd_fscd``, ``best_p_value_vs_fedcgd_fscd``);
- ``curves.png``: accuracy, scheduled devices and WEMD per round; with several seeds the mean
  per policy with a shaded 95 % band (from two seeds on), scheduled devices and WEMD as a
  moving average over the faint per-round line, titled with the data set and settings
  (:func:`experiments.analysis.plot_runs.plot_mean_runs`).

``--aggregators default,FedMedian,FedTrimmedAvg`` sweeps the run-config key ``aggregator`` as
well: one comparison of the policies per aggregator, each in ``<out>/aggregator=<name>/`` with
its own tables (``default`` is the scheduler's FedAvg, ``aggregator = ""``; ``aggregator-params``
of ``--run-config`` go to every one of them). Every aggregator's run config is validated before
the first run starts.

``rounds_to_target`` of a run that never reaches the target is missing (empty in
``runs.csv``): its mean and CI are over the runs that reached it, and ``reached_target`` says
how many did (out of ``n_seeds``).

Kept runs: before anything runs, every result folder is compared with the requested run. A run
that completed with the same settings (``config.json``; only ``result-dir``, ``resume-from`` and
``checkpoint-every`` may differ) is kept; an incomplete one with the same settings is resumed
from its checkpoint (run again from the start without one); a run with other settings stops
the command (exit code 2) naming the folder and the settings that differ: give another
``--out`` or remove the folder. The outcome of each run is its ``status.json``: the exit code is
0 when every run completed, 1 when any failed (a line names each and why), 2 when refused
before the start; SIGINT / SIGTERM stop every process of the current run (130 / 143). The
first line names the output folder; after a failure or a signal the last line gives the same
command to run again (:func:`experiments.run.resume_command.rerun_line`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.analysis.plot_runs import load_run, plot_mean_runs, plot_runs
from experiments.analysis.statistics import first_round_reaching, mean_ci95, paired_test
from experiments.analysis.tables import write_csv
from experiments.run.launcher import (
    default_run_config,
    parse_run_config_text,
    run_flwr,
    strip_ansi,
    validated_run_config,
    with_resolved_data_dir,
)
from experiments.run.preflight import run_outcome
from experiments.run.processes import exit_code_stopping_on_signals
from experiments.run.progress import RunProgress, format_duration
from experiments.run.resume_command import LastWords, python_command, rerun_line
from experiments.run.run_pool import (
    RUN_LOG,
    Job,
    cores_per_job,
    inprocess_command,
    resolve_jobs,
    run_jobs,
)
from server_app.atomic_files import ResultWriteError
from server_app.checkpoint import run_finished, unread_settings
from server_app.folder_lock import FolderClaim, claim_folder
from server_app.json_files import read_json_object
from server_app.results import CONFIG_FILE, METRICS_FILE, read_metrics_lines
from server_app.run_status import (
    FAILED,
    RUN_FILES,
    SETTINGS_ADDED_LATER,
    RunStatus,
    failure_from_output,
    first_line,
    flat_settings,
    holds_run,
    read_status,
    settings_differences,
)

REFERENCE_POLICY = "fedcgd-fscd"
#: Metrics tested against the reference policy, paired by seed, and their column prefixes:
#: the final accuracy (``diff_vs_fedcgd_fscd``, ``p_value_vs_fedcgd_fscd``) and the best one
#: (``best_...``; the paper's imbalance figure compares maximum accuracies, and on strongly
#: non-IID splits the last evaluation of a run swings from round to round).
PAIRED_METRICS = {"final_accuracy": "", "max_accuracy": "best_"}
METRICS = ("final_accuracy", "max_accuracy", "rounds_to_target", "mean_scheduled", "mean_wemd")
RUN_COLUMNS = ("policy", "seed", *METRICS, "result_dir")
TABLE_COLUMNS = (
    "policy",
    "n_seeds",
    "final_accuracy_mean",
    "final_accuracy_ci95",
    "max_accuracy_mean",
    "max_accuracy_ci95",
    "rounds_to_target_mean",
    "rounds_to_target_ci95",
    "reached_target",
    "mean_scheduled_mean",
    "mean_scheduled_ci95",
    "mean_wemd_mean",
    "mean_wemd_ci95",
    "diff_vs_fedcgd_fscd",
    "p_value_vs_fedcgd_fscd",
    "best_diff_vs_fedcgd_fscd",
    "best_p_value_vs_fedcgd_fscd",
    "n_paired",
    "seeds",
)


def run_dir(out: Path, policy: str, seed: int) -> Path:
    """Result directory of one (policy, seed) run: ``<out>/<label>/seed-<seed>``.

    The label is the policy's name, or the class name of a reference
    (:func:`fedcgd_task.imports.reference_label`).
    """
    from fedcgd_task.imports import reference_label

    return out / reference_label(policy) / f"seed-{seed}"


def summarise(
    result_dir: Path, target_accuracy: float | None = None, seed: int | None = None
) -> dict[str, Any]:
    """One row of ``runs.csv`` from a run's ``metrics.jsonl`` (and its ``config.json``).

    Parameters
    ----------
    result_dir : Path
        The run's result directory.
    target_accuracy : float, optional
        ``rounds_to_target`` is the first round whose test accuracy reaches it (the paper's
        "epochs to reach the target test accuracy"); None if never reached or not given.
    seed : int, optional
        The run's seed; read from ``config.json`` when not given.

    Returns
    -------
    dict
        The keys of ``RUN_COLUMNS``.

    Raises
    ------
    ValueError
        One line naming a damaged file of the run (:func:`experiments.analysis.plot_runs.load_run`).
    """
    policy, lines = load_run(result_dir)
    if seed is None and (result_dir / CONFIG_FILE).exists():
        task = read_json_object(result_dir / CONFIG_FILE).get("task")
        seed = task.get("seed") if isinstance(task, dict) else None
    evaluated = [x for x in lines if x.get("accuracy") is not None]
    accs = [x["accuracy"] for x in evaluated]
    wemds = [x["wemd"] for x in lines if x.get("wemd") is not None]
    return {
        "policy": policy,
        "seed": seed,
        "final_accuracy": accs[-1] if accs else None,
        "max_accuracy": max(accs) if accs else None,
        "rounds_to_target": first_round_reaching(
            [x["round"] for x in evaluated], accs, target_accuracy
        ),
        "mean_scheduled": sum(x.get("num_scheduled", 0) for x in lines) / max(len(lines), 1),
        "mean_wemd": sum(wemds) / len(wemds) if wemds else None,
        "result_dir": str(result_dir),
    }


def table_rows(
    runs: Sequence[Mapping[str, Any]],
    target_accuracy: float | None = None,
    reference: str = REFERENCE_POLICY,
) -> list[dict[str, Any]]:
    """One ``table.csv`` row per policy (in order of appearance) from the per-run rows.

    Parameters
    ----------
    runs : sequence of mapping
        Rows of :func:`summarise` (``policy``, ``seed`` and the ``METRICS``).
    target_accuracy : float, optional
        Whether a target was given (else ``reached_target`` is empty).
    reference : str
        Policy the others are tested against (paired by seed, on the final and the best
        accuracy: :data:`PAIRED_METRICS`).

    Returns
    -------
    list of dict
        The keys of ``TABLE_COLUMNS``; NaN where a statistic is undefined (one seed, no
        reference, fewer than two common seeds).
    """
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        by_policy.setdefault(str(run["policy"]), []).append(run)
    ref = {
        metric: {r["seed"]: r[metric] for r in by_policy.get(reference, [])}
        for metric in PAIRED_METRICS
    }
    rows = []
    for policy, group in by_policy.items():
        row: dict[str, Any] = {"policy": policy, "n_seeds": len(group)}
        for metric in METRICS:
            row[f"{metric}_mean"], row[f"{metric}_ci95"] = mean_ci95(r[metric] for r in group)
        row["reached_target"] = (
            None
            if target_accuracy is None
            else sum(r["rounds_to_target"] is not None for r in group)
        )
        for metric, prefix in PAIRED_METRICS.items():
            test = paired_test({r["seed"]: r[metric] for r in group}, ref[metric])
            skip = policy == reference or reference not in by_policy or test.n < 2
            row[f"{prefix}diff_vs_fedcgd_fscd"] = None if skip else test.mean_diff
            row[f"{prefix}p_value_vs_fedcgd_fscd"] = None if skip else test.p_value
        row["n_paired"] = None if policy == reference or reference not in by_policy else test.n
        row["seeds"] = " ".join(str(r["seed"]) for r in group)
        rows.append(row)
    return rows


def _cell(value: Any) -> Any:
    """CSV cell: None and NaN as empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value


def write_table(
    rows: Sequence[Mapping[str, Any]],
    path: Path,
    extra_columns: tuple[str, ...] = (),
    columns: Sequence[str] = TABLE_COLUMNS,
) -> None:
    """Write rows as CSV (``extra_columns`` first, e.g. the sweep point; None / NaN empty)."""
    cells = [{k: _cell(v) for k, v in row.items()} for row in rows]
    write_csv(path, cells, (*extra_columns, *columns))


def plot_comparison(runs: Sequence[Mapping[str, Any]], out: Path) -> Path:
    """``curves.png``: one curve per policy, mean and 95 % band when a policy has two seeds or more.

    With one seed per policy each run is drawn as itself
    (:func:`experiments.analysis.plot_runs.plot_runs`).
    """
    groups: dict[str, list[Path]] = {}
    for run in runs:
        groups.setdefault(str(run["policy"]), []).append(Path(run["result_dir"]))
    if max(len(dirs) for dirs in groups.values()) > 1:
        return plot_mean_runs(groups, out)
    return plot_runs([d for dirs in groups.values() for d in dirs], out)


def write_comparison(
    runs: Sequence[Mapping[str, Any]], out: Path, target_accuracy: float | None = None
) -> list[dict[str, Any]]:
    """Write ``runs.csv``, ``table.csv`` and ``curves.png`` under ``out``; return the table rows."""
    rows = table_rows(runs, target_accuracy)
    write_table(runs, out / "runs.csv", columns=RUN_COLUMNS)
    write_table(rows, out / "table.csv")
    plot_comparison(runs, out / "curves.png")
    return rows


def format_row(row: Mapping[str, Any]) -> str:
    """One line per policy for the console: final accuracy mean ± CI and the paired test."""

    def num(value: Any, fmt: str) -> str:
        return "-" if _cell(value) == "" else format(value, fmt)

    text = (
        f"{row['policy']:>15}: final accuracy {num(row['final_accuracy_mean'], '.3f')}"
        f" ± {num(row['final_accuracy_ci95'], '.3f')} (n={row['n_seeds']})"
    )
    if _cell(row.get("diff_vs_fedcgd_fscd")) != "":
        text += (
            f", vs {REFERENCE_POLICY} {row['diff_vs_fedcgd_fscd']:+.3f}"
            f" (p={num(row['p_value_vs_fedcgd_fscd'], '.3g')}, {row['n_paired']} pairs)"
        )
    return text


def check_policies(policies: list[str]) -> None:
    """Raise ValueError (one line) for a policy that cannot be built or a repeated folder name.

    A policy is a built-in name or a reference to a Policy subclass (imported here, so a bad
    path fails before anything runs); each gets the folder ``<out>/<label>/``, whose label
    (:func:`fedcgd_task.imports.reference_label`) must be unique.
    """
    from fedcgd_strategy.policies.registry import policy_class
    from fedcgd_task.imports import reference_label

    for policy in policies:
        try:
            policy_class(policy)
        except ValueError as err:
            raise ValueError(f"policies: {err}") from None
    repeated = sorted({p for p in policies if policies.count(p) > 1})
    if repeated:
        raise ValueError(f"policies: {policies} repeats {', '.join(repeated)}; name each once")
    labels = [reference_label(p) for p in policies]
    clashing = sorted(
        {p for p, label in zip(policies, labels, strict=True) if labels.count(label) > 1}
    )
    if clashing:
        raise ValueError(
            f"policies: {', '.join(clashing)} would share a result folder (same class name); "
            "give the classes different names"
        )


def takes_policy_params(policy: str, shared: Mapping[str, Any]) -> bool:
    """Whether ``policy`` takes every ``policy-params`` name of ``shared`` (False without any)."""
    from fedcgd_strategy.policies.registry import policy_param_arguments
    from server_app.policy_params import read_policy_params

    params = read_policy_params(shared)
    if not params:
        return False
    try:
        policy_param_arguments(policy, params)
    except ValueError:
        return False
    return True


def with_policy_params(policy: str, shared: Mapping[str, Any]) -> dict[str, Any]:
    """``shared`` for ``policy``: its ``policy-params`` kept only if the policy takes them all.

    A comparison shares one run config; a researcher's policy parameters are meant for the
    policies that take them, and the others run without them (:func:`check_policies` refuses
    parameters that no policy of the comparison takes).
    """
    from server_app.policy_params import PARAMS_KEY, PARAMS_PREFIX

    if takes_policy_params(policy, shared):
        return dict(shared)
    return {k: v for k, v in shared.items() if k != PARAMS_KEY and not k.startswith(PARAMS_PREFIX)}


def check_policy_params_used(policies: Sequence[str], shared: Mapping[str, Any]) -> None:
    """Raise ValueError (one line) when ``policy-params`` are given but no policy takes them."""
    from server_app.policy_params import PARAMS_KEY, read_policy_params

    params = read_policy_params(shared)
    if params and not any(takes_policy_params(p, shared) for p in policies):
        raise ValueError(
            f"run-config {PARAMS_KEY} {params}: none of the policies {', '.join(policies)} "
            "takes all of them"
        )


def check_seeds(seeds: Sequence[Any]) -> list[int]:
    """The seeds as ints; ValueError for none, a non-integer, a negative one or a repeat."""
    if not seeds:
        raise ValueError("seeds: give at least one seed, e.g. 0,1,2,3,4")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ValueError(f"seeds: {s!r} is not a non-negative integer")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: {list(seeds)} repeats a seed")
    return [int(s) for s in seeds]


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` → ``[0, 1, 2]`` (checked as in :func:`check_seeds`)."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    try:
        return check_seeds([int(x) for x in items])
    except ValueError as err:
        if str(err).startswith("seeds:"):
            raise
        raise ValueError(f"--seeds {text!r}: give comma-separated integers, e.g. 0,1,2") from None


#: Engines :func:`run_policies` can run on.
ENGINES = ("simulation", "deployment", "inprocess")

#: What :func:`plan_run` decides for one (policy, seed): run it in a new folder, keep the
#: completed run there, resume it from its checkpoint, or clear the incomplete run and run it
#: again; ``refuse`` when the folder holds a run with other settings.
RUN, KEEP, RESUME, RERUN, REFUSE = "run", "keep", "resume", "rerun", "refuse"


@dataclass(frozen=True)
class PlannedRun:
    """One (policy, seed) of a comparison and what to do with its result folder.

    Attributes
    ----------
    policy : str
        The scheduling policy.
    seed : int
        The run seed.
    result_dir : Path
        ``<out>/<policy>/seed-<seed>``.
    overrides : dict
        The run-config overrides of this run (``result-dir``, and ``resume-from`` to resume).
    action : str
        :data:`RUN`, :data:`KEEP`, :data:`RESUME`, :data:`RERUN` or :data:`REFUSE`.
    note : str
        Why (the settings that differ for :data:`REFUSE`), one line.

    """

    policy: str
    seed: int
    result_dir: Path
    overrides: dict[str, Any]
    action: str
    note: str = ""

    @property
    def label(self) -> str:
        """``<policy>/seed-<seed>``."""
        return f"{self.policy}/seed-{self.seed}"


@dataclass(frozen=True)
class FailedRun:
    """A run that did not complete: its label (``bc/seed-1``) and why, one line."""

    label: str
    reason: str


@dataclass
class ComparisonRuns:
    """What :func:`run_policies` ran: the completed runs' rows, the failures, the plan size."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    failed: list[FailedRun] = field(default_factory=list)
    planned: int = 0

    @property
    def code(self) -> int:
        """Exit code: 0 when every planned run completed, 1 otherwise."""
        return 0 if not self.failed and len(self.runs) == self.planned else 1

    def last_line(self) -> str:
        """One line saying what happened (the command's last line)."""
        if self.code == 0:
            return f"all {self.planned} runs completed"
        reasons = ", ".join(f"{f.label} ({f.reason})" for f in self.failed)
        return (
            f"{len(self.failed)} of {self.planned} runs failed: {reasons}; the tables hold the "
            f"{len(self.runs)} completed runs"
        )


def requested_settings(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved settings (as the ServerApp records them in ``config.json``) of a run.

    Raises
    ------
    ValueError
        For an unknown key or a bad value (one line naming it).
    """
    from server_app.config import parse_run_config

    config = with_resolved_data_dir(validated_run_config(overrides))
    return dict(json.loads(json.dumps(parse_run_config(config).to_dict())))


def describe_differences(recorded: Mapping[str, Any], requested: Mapping[str, Any]) -> str:
    """``key (kept K, asked A), ...`` for the settings that differ (empty when none).

    The :func:`server_app.checkpoint.unread_settings` may differ.
    """
    ignore = unread_settings(requested)
    keys = settings_differences(recorded, requested, ignore=ignore, requested_keys_only=True)
    before = {**SETTINGS_ADDED_LATER, **flat_settings(recorded)}
    now = flat_settings(requested)
    return ", ".join(f"{k} (kept {before.get(k)!r}, asked {now.get(k)!r})" for k in keys)


def plan_run(policy: str, seed: int, result_dir: Path, shared: Mapping[str, Any]) -> PlannedRun:
    """Decide what to do with one (policy, seed) from what its result folder holds.

    A folder without a run: run it. A run started with other settings (``config.json``
    against the requested ones, ignoring :func:`~server_app.checkpoint.unread_settings`):
    refuse. The same settings and completed: keep it; not completed but with a checkpoint:
    resume it; otherwise (no checkpoint, or no ``config.json``): clear it and run again.
    """
    own = with_policy_params(policy, shared)
    overrides = {**own, "policy": policy, "seed": seed, "result-dir": str(result_dir)}

    def planned(action: str, note: str = "") -> PlannedRun:
        extra = {"resume-from": str(result_dir)} if action == RESUME else {}
        return PlannedRun(policy, seed, result_dir, {**overrides, **extra}, action, note)

    if not holds_run(result_dir):
        return planned(RUN)
    try:
        recorded = read_json_object(result_dir / CONFIG_FILE)
        completed = run_finished(result_dir)
    except (OSError, ValueError):
        return planned(RERUN, "no readable config.json or status.json")
    differences = describe_differences(recorded, requested_settings(overrides))
    if differences:
        return planned(REFUSE, differences)
    if completed:
        damage = kept_run_damage(result_dir)
        if damage:  # a kept run must read whole: never half a table
            return planned(REFUSE, f"completed, but {damage}")
        return planned(KEEP)
    from server_app.checkpoint import CHECKPOINT_FILE

    if (result_dir / CHECKPOINT_FILE).exists():
        return planned(RESUME)
    return planned(RERUN, "incomplete, without a checkpoint")


def kept_run_damage(result_dir: Path) -> str | None:
    """Why a completed run's ``metrics.jsonl`` cannot be kept; None when it reads whole.

    Whole: every line a metrics line, the last one ended (a torn last line in a completed run
    is damage, not a write in progress), rounds 1, 2, ... once each.
    """
    path = result_dir / METRICS_FILE
    try:
        lines = read_metrics_lines(result_dir)
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - 1, 0))
            ended = size == 0 or handle.read(1) == b"\n"
    except (OSError, ValueError) as err:
        return first_line(err)
    rounds = [line["round"] for line in lines]
    if not ended or rounds != list(range(1, len(rounds) + 1)):
        return f"its {path} has a torn last line or rounds missing or repeated"
    return None


def plan_runs(
    policies: Sequence[str], shared: Mapping[str, Any], out: Path, seeds: Sequence[int]
) -> list[PlannedRun]:
    """:func:`plan_run` for every (policy, seed), in the order they run."""
    return [plan_run(p, s, run_dir(out, p, s), shared) for p in policies for s in seeds]


def refuse_stale_runs(plans: Sequence[PlannedRun]) -> None:
    """Raise ValueError (one line) naming every kept run whose settings differ.

    Raises
    ------
    ValueError
        ``N kept run(s) ... were started with other settings or cannot be read: FOLDER (key
        (kept K, asked A), ...); ...`` and what to do.
    """
    stale = [p for p in plans if p.action == REFUSE]
    if stale:
        folders = "; ".join(f"{p.result_dir}: {p.note}" for p in stale)
        raise ValueError(
            f"{len(stale)} kept run(s) in the output folder were started with other settings "
            f"or cannot be read ({folders}); give another output folder, or remove those "
            "folders to run them again with these settings"
        )


def clear_run(result_dir: Path) -> None:
    """Remove an incomplete run's files (:data:`RUN_FILES`) so that it can run again there."""
    for name in RUN_FILES:
        (result_dir / name).unlink(missing_ok=True)


def _run_inprocess(overrides: Mapping[str, Any]) -> BaseException | None:
    """One in-process run; None on success, else what it raised (printed unless one line)."""
    from experiments.run.inprocess import run_inprocess

    try:
        run_inprocess(with_resolved_data_dir(validated_run_config(overrides)))
    except Exception as err:  # one failed run must not stop a sweep
        if not getattr(err, "complete_message", False):
            print(f"in-process run failed: {err!r}", flush=True)
        return err
    return None


def claim_run_folder(plan: PlannedRun) -> FolderClaim:
    """Lock a planned run's folder for this command while the run goes (its owner lock).

    Its processes (the in-process run, ``flwr run``'s ServerApp, a job's process) work under
    this lock; another process that holds it is named (:mod:`server_app.folder_lock`).
    """
    return claim_folder(plan.result_dir, f"{plan.label}: result folder")


def launch(
    plan: PlannedRun,
    engine: str,
    num_supernodes: int,
    cpus_per_client: int,
    gpus_per_client: float,
) -> str | None:
    """Run one planned run in the foreground; None when it completed, else why not (one line).

    The folder is locked for the run (:func:`claim_run_folder`; taken by another process: that
    is the reason). The outcome is the ``status.json`` the run wrote (``flwr run`` exits 0
    even when the ServerApp raised) or what the run said itself: :func:`run_reason`.
    """
    try:
        claim = claim_run_folder(plan)
    except ValueError as err:
        return first_line(err)
    with claim:
        prepare(plan)
        launched_unix_s = time.time()
        output = ""
        failure = None
        if engine == "inprocess":
            failure = _run_inprocess(plan.overrides)
            code = 0 if failure is None else 1
        else:
            proc = run_flwr(
                plan.overrides,
                num_supernodes=num_supernodes,
                deployment=engine == "deployment",
                cpus_per_client=cpus_per_client,
                gpus_per_client=gpus_per_client,
            )
            code, output = proc.returncode, proc.stdout or ""
        return run_reason(plan, code, launched_unix_s, output, failure)


def prepare(plan: PlannedRun) -> None:
    """Clear the folder of a run to be run again from the start (:data:`RERUN`)."""
    if plan.action == RERUN:
        clear_run(plan.result_dir)


def run_reason(
    plan: PlannedRun,
    code: int,
    launched_unix_s: float,
    output: str = "",
    failure: BaseException | None = None,
) -> str | None:
    """None when the run launched at ``launched_unix_s`` completed, else why not (one line).

    ``code`` is the exit code of what ran it; ``output`` what it printed (the ServerApp's
    ``run failed: ...`` line, or Flower's first ``ERROR`` line, which explains a simulation
    that crashed before the ServerApp could say why); ``failure`` what an in-process run
    raised.
    """
    outcome = run_outcome(plan.result_dir, launched_unix_s, failure, output)
    if outcome.code == 0 and code == 0:
        return None
    reason = outcome.message.removeprefix("failed: ") if outcome.code else "completed"
    status = read_status_or_none(plan.result_dir) if outcome.code else None
    flower_error = first_error_line(output)
    said = failure is not None or failure_from_output(output) is not None
    if flower_error and not said and (status is None or status.state != FAILED):
        reason = flower_error  # the simulation crashed before the ServerApp could say why
    reason = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."
    return reason if code == 0 else f"exit code {code}: {reason}"


def read_status_or_none(result_dir: Path) -> RunStatus | None:
    """The run's status; None when there is none or it cannot be read."""
    try:
        return read_status(result_dir)
    except ValueError:
        return None


#: Characters of a failure reason kept for the last line.
MAX_REASON = 200


def first_error_line(output: str) -> str | None:
    """The message of the first ``ERROR :`` line Flower logged (colour codes removed)."""
    for line in output.splitlines():
        match = re.match(r"\s*ERROR\s*:\s*(\S.*)", strip_ansi(line))
        if match:
            return match.group(1).strip()
    return None


def run_policies(
    policies: list[str],
    shared: Mapping[str, Any],
    out: Path,
    *,
    seeds: Sequence[int] = (0,),
    target_accuracy: float | None = None,
    num_supernodes: int | None = None,
    deployment: bool = False,
    cpus_per_client: int = 1,
    gpus_per_client: float = 0.0,
    engine: str = "simulation",
    plans: Sequence[PlannedRun] | None = None,
    tracker: RunProgress | None = None,
    jobs: int = 1,
) -> ComparisonRuns:
    """Run each policy for each seed into ``out/<policy>/seed-<s>`` and summarise them.

    Every result folder is planned first (:func:`plan_runs`, unless ``plans`` are given): a
    completed run with the same settings is kept, an incomplete one resumed from its
    checkpoint (or run again), and a kept run with other settings stops everything before
    any run starts. Writes ``out/runs.csv``, ``out/table.csv`` and ``out/curves.png`` from
    the completed runs. ``engine``: ``"simulation"`` (``flwr run``, Ray), ``"deployment"``
    (SuperNode processes; also ``deployment=True``) or ``"inprocess"``
    (:mod:`experiments.run.inprocess`: the same ServerApp and ClientApp in this process, no Ray;
    same results, for quick sweeps). Each run's header line says how far the whole command is
    (``tracker``; by default one for these runs). ``jobs``: runs at once (0: one per usable
    core; more than one needs the ``inprocess`` engine, see :func:`execute_plans`).

    Returns
    -------
    ComparisonRuns
        The ``runs.csv`` rows of the completed runs (see :func:`summarise`), the runs that
        failed (and why), and how many were planned.

    Raises
    ------
    ValueError
        For an unknown policy, a bad seed list, ``seed`` in ``shared`` (give ``seeds``), or
        kept runs with other settings (:func:`refuse_stale_runs`), before any run.
    """
    check_policies(policies)
    check_policy_params_used(policies, shared)
    if engine not in ENGINES:
        raise ValueError(f"engine: got {engine!r}; allowed: {', '.join(ENGINES)}")
    engine = "deployment" if deployment else engine
    jobs = resolve_jobs(jobs, engine)
    seeds = check_seeds(list(seeds))
    if "seed" in shared:
        raise ValueError("give the seeds as seeds (--seeds 0,1,2), not as run-config 'seed'")
    for key in ("result-dir", "resume-from"):
        if shared.get(key):
            raise ValueError(
                f"run-config key {key!r}: a comparison puts each run in "
                "<out>/<policy>/seed-<s> (give --out) and resumes kept runs itself"
            )
    with claim_folder(out, "--out"):  # held by compare(): it works under that claim
        if plans is None:
            plans = plan_runs(policies, shared, out, seeds)
        refuse_stale_runs(plans)
        tracker = tracker or RunProgress(total=len(plans))
        return _execute_and_collect(
            plans,
            policies,
            seeds,
            out,
            engine=engine,
            jobs=jobs,
            num_supernodes=num_supernodes,
            cpus_per_client=cpus_per_client,
            gpus_per_client=gpus_per_client,
            tracker=tracker,
            target_accuracy=target_accuracy,
        )


def _execute_and_collect(
    plans: Sequence[PlannedRun],
    policies: list[str],
    seeds: Sequence[int],
    out: Path,
    *,
    engine: str,
    jobs: int,
    num_supernodes: int | None,
    cpus_per_client: int,
    gpus_per_client: float,
    tracker: RunProgress,
    target_accuracy: float | None,
) -> ComparisonRuns:
    """:func:`run_policies` once the output folder is claimed and the runs planned."""
    outcomes = execute_plans(
        plans,
        engine=engine,
        jobs=jobs,
        num_supernodes=num_supernodes,
        cpus_per_client=cpus_per_client,
        gpus_per_client=gpus_per_client,
        tracker=tracker,
        header=lambda plan: run_header(plan, policies, seeds),
    )
    return collect_runs(plans, outcomes, out, target_accuracy)


def run_header(
    plan: PlannedRun, policies: Sequence[str], seeds: Sequence[int], prefix: str = ""
) -> str:
    """``<prefix>[policy i/N, seed j/M] <policy> seed=<s> -> <folder>``: a run's header line."""
    i, j = policies.index(plan.policy) + 1, seeds.index(plan.seed) + 1
    return (
        f"{prefix}[policy {i}/{len(policies)}, seed {j}/{len(seeds)}] {plan.policy} "
        f"seed={plan.seed} -> {plan.result_dir}"
    )


def execute_plans(
    plans: Sequence[PlannedRun],
    *,
    engine: str,
    jobs: int = 1,
    num_supernodes: int | None = None,
    cpus_per_client: int = 1,
    gpus_per_client: float = 0.0,
    tracker: RunProgress,
    header: Callable[[PlannedRun], str],
) -> dict[Path, str | None]:
    """Run every plan that is not kept; result folder -> None (completed or kept) or why not.

    With ``jobs`` = 1 each run goes in the foreground, its output on this terminal. With more
    (``inprocess`` engine only, :func:`experiments.run.run_pool.resolve_jobs`) up to ``jobs`` runs
    go at once, each in its own process with its output in ``<result folder>/run.log``; a
    line says when each starts and how it ended. Each start line begins with ``tracker``'s
    overall progress and then ``header(plan)``. ``num_supernodes`` (simulation and deployment):
    default the run's ``num-devices``.
    """
    outcomes: dict[Path, str | None] = {}
    to_run = []
    for plan in plans:
        if plan.action == KEEP:
            print(f"=== {tracker.header()} {header(plan)}", flush=True)
            print("completed earlier with the same settings; kept", flush=True)
            tracker.end_run(kept=True)
            outcomes[plan.result_dir] = None
        else:
            to_run.append(plan)

    def announce(plan: PlannedRun, where: str = "") -> None:
        print(f"=== {tracker.header()} {header(plan)}{where}", flush=True)
        if plan.action == RESUME:
            print("incomplete, same settings: resumed from its checkpoint", flush=True)
        elif plan.action == RERUN:
            print(f"{plan.note}: run again from the start", flush=True)

    def record(plan: PlannedRun, reason: str | None) -> None:
        tracker.end_run(plan.result_dir, failed=reason is not None)
        outcomes[plan.result_dir] = reason
        if reason is not None:
            print(f"{plan.label} failed: {reason}", flush=True)

    if jobs == 1:
        for plan in to_run:
            announce(plan)
            tracker.start_run(plan.result_dir)
            nodes = num_supernodes or int(
                plan.overrides.get("num-devices", default_run_config()["num-devices"])
            )
            record(plan, launch(plan, engine, nodes, cpus_per_client, gpus_per_client))
        return outcomes
    launched: dict[int, float] = {}
    claims: dict[int, FolderClaim] = {}

    def on_start(i: int) -> bool:
        plan = to_run[i]
        announce(plan, f" (started; output in {plan.result_dir / RUN_LOG})")
        try:  # the job's process works under this lock (its parent's)
            claims[i] = claim_run_folder(plan)
        except ValueError as err:
            record(plan, first_line(err))
            return False
        prepare(plan)
        tracker.start_run(plan.result_dir)
        launched[i] = time.time()
        return True

    def on_end(i: int, code: int) -> None:
        plan = to_run[i]
        claims.pop(i).release()
        reason = run_reason(plan, code, launched[i])
        said = last_outcome_line(plan.result_dir / RUN_LOG)
        if reason is not None and said is not None:
            reason = f"exit code {code}: {said}"  # the run's own last line says it best
        spent = format_duration(time.time() - launched[i])
        if reason is None:
            print(f"{plan.label} -> {plan.result_dir}: completed in {spent}", flush=True)
        record(plan, reason)

    try:
        run_jobs(
            [
                Job(
                    inprocess_command(p.overrides, cohort_threads=cores_per_job(jobs)),
                    p.result_dir / RUN_LOG,
                )
                for p in to_run
            ],
            jobs,
            on_start,
            on_end,
        )
    finally:
        for claim in claims.values():
            claim.release()
    return outcomes


def last_outcome_line(log: Path) -> str | None:
    """The ``failed: ...`` / ``error: ...`` last line of a run's log (without the prefix)."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - 4096))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = [line for line in tail.splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    for prefix in ("failed: ", "error: "):
        if last.startswith(prefix):
            text = last.removeprefix(prefix)
            return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."
    return None


def collect_runs(
    plans: Sequence[PlannedRun],
    outcomes: Mapping[Path, str | None],
    out: Path,
    target_accuracy: float | None,
) -> ComparisonRuns:
    """Summarise the completed runs of ``plans`` and write ``out``'s tables and curves.

    ``outcomes``: result folder -> None (completed or kept) or why it failed
    (:func:`execute_plans`); a plan without an entry did not run.
    """
    result = ComparisonRuns(planned=len(plans))
    for plan in plans:
        if plan.result_dir not in outcomes:
            continue
        reason = outcomes[plan.result_dir]
        if reason is None:
            try:
                result.runs.append(summarise(plan.result_dir, target_accuracy, plan.seed))
            except ValueError as err:  # a file damaged after the run: not half a table
                reason = first_line(err)
        if reason is not None:
            result.failed.append(FailedRun(plan.label, reason))
            continue
        print(json.dumps(result.runs[-1]), flush=True)
    if result.runs:
        rows = write_comparison(result.runs, out, target_accuracy)
        print("\n".join(format_row(row) for row in rows), flush=True)
        print(f"wrote {out / 'table.csv'}, {out / 'runs.csv'} and {out / 'curves.png'}")
    return result


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default="fedcgd-fscd,fedcgd-gs,bc,bn2,poc,fedcbs,all")
    parser.add_argument(
        "--seeds",
        default=None,
        help="comma-separated run seeds, e.g. 0,1,2,3,4 (default: the run config's seed, 0)",
    )
    parser.add_argument("--run-config", default="", help="overrides shared by every run")
    parser.add_argument(
        "--aggregators",
        default=None,
        help="comma-separated aggregators, one comparison each into <out>/aggregator=<name> "
        "(default = the scheduler's FedAvg; e.g. default,FedMedian,FedTrimmedAvg)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/compare"))
    parser.add_argument("--num-supernodes", type=int, default=None)
    parser.add_argument("--target-accuracy", type=float, default=None)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="simulation",
        help="simulation (flwr run, Ray), deployment (SuperNode processes) or inprocess "
        "(one process, no Ray: same results, fastest for small models)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="inprocess runs going at once, each in its own process with its output in "
        "<run folder>/run.log (0: one per usable CPU core)",
    )
    args = parser.parse_args(argv)
    words = sys.argv[1:] if argv is None else list(argv)
    command = python_command("experiments.compare.policies", words)
    last_words = LastWords()
    if args.aggregators is not None:
        return exit_code_stopping_on_signals(
            lambda: compare_aggregators(args, command, last_words), last_words
        )
    return exit_code_stopping_on_signals(lambda: compare(args, command, last_words), last_words)


#: The ``--aggregators`` name of the scheduler's FedAvg (run-config ``aggregator = ""``).
DEFAULT_AGGREGATOR_NAME = "default"


def aggregator_comparisons(args: argparse.Namespace) -> list[argparse.Namespace]:
    """One comparison's arguments per aggregator of ``--aggregators``, all validated.

    Raises
    ------
    ValueError
        One line: an empty list, ``aggregator`` also in ``--run-config``, or an aggregator
        (with the shared ``aggregator-params``) that the run config refuses.
    """
    import argparse as _argparse

    names = [a.strip() for a in str(args.aggregators).split(",") if a.strip()]
    if not names:
        raise ValueError("--aggregators is empty; allowed: comma-separated aggregator names")
    shared = parse_run_config_text(args.run_config)
    if "aggregator" in shared:
        raise ValueError("give the aggregators with --aggregators, not run-config 'aggregator'")
    out = args.out.resolve()
    comparisons = []
    for name in names:
        value = "" if name == DEFAULT_AGGREGATOR_NAME else name
        validated_run_config({**shared, "aggregator": value})
        text = f'{args.run_config} aggregator="{value}"'.strip()
        folder = out / f"aggregator={re.sub(r'[^A-Za-z0-9._-]', '_', name)}"
        comparisons.append(_argparse.Namespace(**{**vars(args), "run_config": text, "out": folder}))
    return comparisons


def compare_aggregators(
    args: argparse.Namespace, command: str | None = None, last_words: LastWords | None = None
) -> int:
    """:func:`compare` once per aggregator of ``--aggregators``; the worst exit code.

    Every aggregator is validated before the first comparison starts (exit code 2 otherwise).
    The first line names the output folder; when a comparison failed, the last line says that
    the same ``command`` runs again what did not complete (:func:`compare`).
    """
    try:
        comparisons = aggregator_comparisons(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"output folder: {args.out.resolve()}", flush=True)
    if command is not None and last_words is not None:
        last_words.set(lambda: rerun_line(command))
    codes = []
    for i, each in enumerate(comparisons, 1):
        print(f"== aggregator {i}/{len(comparisons)}: {each.out.name} ==", flush=True)
        codes.append(compare(each))
    if max(codes) == 1 and command is not None:
        print(rerun_line(command), file=sys.stderr, flush=True)
    return max(codes)


def compare(
    args: argparse.Namespace, command: str | None = None, last_words: LastWords | None = None
) -> int:
    """Validate and plan every run, run them, write the tables; the exit code.

    0 when every planned run completed, 1 when one failed (a line names each and why), 2 when
    something is refused before any run starts (bad settings, or kept runs with other
    settings). Once everything is planned the first line names the output folder. With the
    ``command`` that started the comparison, a failure's last line, and ``last_words`` (what
    a signal's stop line is followed by), say that running it again keeps the completed runs
    and continues the others (:func:`experiments.run.resume_command.rerun_line`).
    """
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    out = args.out.resolve()
    claim = None
    try:
        check_policies(policies)
        shared = parse_run_config_text(args.run_config)
        if args.seeds is not None and "seed" in shared:
            raise ValueError("give either --seeds or run-config 'seed', not both")
        seeds = parse_seeds(args.seeds) if args.seeds is not None else [shared.pop("seed", 0)]
        seeds = check_seeds(seeds)
        jobs = resolve_jobs(args.jobs, args.engine)
        check_policy_params_used(policies, shared)
        for policy in policies:
            for seed in seeds:
                own = with_policy_params(policy, shared)
                validated_run_config({**own, "policy": policy, "seed": seed})
        claim = claim_folder(out, "--out")  # one comparison in a folder at a time
        plans = plan_runs(policies, shared, out, seeds)
        refuse_stale_runs(plans)
        check_plans_before_start(plans)
    except (ValueError, FileNotFoundError) as err:
        if claim is not None:
            claim.abandon()
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"output folder: {out}", flush=True)
    if command is not None and last_words is not None:
        last_words.set(lambda: rerun_line(command))
    try:
        result = run_policies(
            policies,
            shared,
            out,
            seeds=seeds,
            target_accuracy=args.target_accuracy,
            num_supernodes=args.num_supernodes,
            engine=args.engine,
            plans=plans,
            jobs=jobs,
        )
    except ResultWriteError as err:  # the tables or the figure: disk full, ...
        print(f"failed: {err}", file=sys.stderr, flush=True)
        if command is not None:
            print(rerun_line(command), file=sys.stderr, flush=True)
        return 1
    finally:
        claim.release()
    print(result.last_line(), file=sys.stderr if result.code else sys.stdout, flush=True)
    if result.code and command is not None:
        print(rerun_line(command), file=sys.stderr, flush=True)
    return result.code


def check_plans_before_start(plans: Sequence[PlannedRun]) -> None:
    """:func:`experiments.run.preflight.check_before_start` for every run that will start.

    A run to be cleared and run again is checked as a new run in an empty folder.

    Raises
    ------
    ValueError, FileNotFoundError
        One line naming the run's folder and what is wrong.
    """
    from experiments.run.preflight import check_before_start
    from server_app.folder_lock import probe_free

    for plan in plans:
        if plan.action in (KEEP, REFUSE):
            continue
        probe_free(plan.result_dir, f"{plan.label}: result folder")  # in use: named
        config = with_resolved_data_dir(validated_run_config(plan.overrides))
        if plan.action == RERUN:
            config["result-dir"] = ""
        try:
            check_before_start(config)
        except (ValueError, FileNotFoundError) as err:
            raise type(err)(f"{plan.result_dir}: {err}") from err


if __name__ == "__main__":
    from experiments.run.processes import run_as_command

    raise SystemExit(run_as_command(main))
