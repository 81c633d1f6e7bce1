"""Reproduce a table or figure of the paper from a Hydra preset in ``conf/experiment/``.

``fedcgd reproduce experiment=<name> 'seeds=[0,1,2,3,4]'`` (:mod:`experiments.cli`) runs every
policy of the preset for every seed (default ``[0]``) and every combination of its sweep (e.g.
``local-steps: [1, 5]``) with ``flwr run``, then writes, under ``out`` (default
``results/<name>``):

- ``<key>=<value>/<policy>/seed-<s>/`` one result directory per run (resumable: finished runs
  are kept),
- ``<key>=<value>/table.csv``, ``runs.csv`` and ``curves.png`` per sweep point (see
  :mod:`experiments.compare.results`: per policy the mean and 95 % confidence half-width over
  seeds of final / best accuracy, rounds to the target accuracy, mean scheduled devices, mean
  WEMD, and a paired t-test of the final accuracy against FedCGD-FSCD),
- ``table.csv`` and ``runs.csv`` over all sweep points (a ``sweep`` column first),
- ``estimates.png``: σ̂ and Ĝ per round, mean over seeds with its 95 % band, of every (sweep
  point, FedCGD policy) (the paper's CIFAR-100 panels),
- ``sweep.png`` for a preset that sweeps one key: its ``figure_metrics`` against the swept
  value, mean over seeds ± 95 % CI.

Every figure draws the mean over seeds with its 95 % confidence interval (Student t) from two
seeds on, and a single seed as its run, and is titled with the data set and settings
(:mod:`experiments.analysis.preset_figures`, :mod:`experiments.analysis.figures`,
:mod:`experiments.analysis.figure_titles`).

Presets: ``digits_policies`` (offline), ``cifar10_local_steps`` (accuracy vs τ and Table II),
``cifar10_imbalance``, ``cifar10_dirichlet``, ``cifar100_local_steps``; offline on MNIST-1D
with 5 seeds: ``mnist1d_local_steps``, ``mnist1d_imbalance``, ``mnist1d_dirichlet``; quick
digits variants ``digits_*``. Any value can be
overridden, e.g. ``run.data-dir=/data/cifar 'policies=[fedcgd-fscd,bc]' run.num-server-rounds=50
'seeds=[0,1,2]'`` (``run.<key>=`` and ``sweep.<key>=`` take every run-config key, whether the
preset lists it or not: :func:`hydra_overrides`). The run config of every run is validated, and
every result folder planned (:mod:`experiments.compare.plans`: kept runs with other settings
are refused, naming them), before the first one starts. The seed is set by ``seeds`` only
(``run.seed`` or ``sweep.seed`` are refused), so that runs of every policy with the same seed are
paired. ``launcher.jobs=N`` keeps N in-process runs going at once (0: one per usable core),
each in its own process with its output in its folder's ``run.log``
(:mod:`experiments.run.run_pool`); the tables and figures are written once every run has ended.
Exit code: 0 when every run completed, 1 when one failed (a line names each and why), 2
when refused before the start, 130 / 143 on SIGINT / SIGTERM. The first line names the output
folder; after a failure or a signal the last line gives the same command to run again
(completed runs are kept, stopped ones resume: :func:`experiments.run.resume_command.rerun_line`).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.analysis.figure_titles import runs_title
from experiments.analysis.preset_figures import plot_estimates, plot_sweep, point_label
from experiments.compare.execution import (
    ENGINES,
    ComparisonRuns,
    FailedRun,
    LaunchSettings,
    collect_runs,
    execute_plans,
    run_header,
)
from experiments.compare.plans import (
    PlannedRun,
    check_plans_before_start,
    check_policies,
    check_policy_params_used,
    check_seeds,
    plan_runs,
    refuse_stale_runs,
    with_policy_params,
)
from experiments.compare.results import RUN_COLUMNS, format_row, table_rows, write_table
from experiments.run.processes import exit_code_stopping_on_signals
from experiments.run.progress import RunProgress
from experiments.run.resume_command import LastWords, fedcgd_command, rerun_line
from experiments.run.run_pool import resolve_jobs
from fedcgd_task.datasets import load_train_set
from fedcgd_task.settings import TaskSettings, default_run_config, flatten, resolve_data_dir
from run_files.atomic_files import ResultWriteError
from run_files.folder_lock import FolderClaim, claim_folder
from server_app.config import parse_run_config
from server_app.policy_params import PARAMS_PREFIX, fold_policy_params

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


def sweep_points(sweep: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the sweep values (one empty dict for no sweep)."""
    keys = list(sweep)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*sweep.values())]


def planned_seeds(cfg: DictConfig) -> list[int]:
    """The config's ``seeds`` (default ``[0]``; a single integer is one seed).

    Raises
    ------
    ValueError
        For no seed, a non-integer or negative one, or a repeat.
    """
    seeds = cfg.get("seeds", [0])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        return check_seeds([seeds])
    if not OmegaConf.is_list(seeds):
        raise ValueError(f"seeds: {seeds!r} is not a list of integers, e.g. seeds=[0,1,2]")
    return check_seeds(list(seeds))


#: Run-config keys a preset's ``run`` / ``sweep`` may not set, and what to use instead.
NOT_IN_RUN = {
    "policy": "list the policies with policies=[fedcgd-fscd,bc]",
    "result-dir": "every run writes to <out>/<sweep point>/<policy>/seed-<s>; set out=/abs/folder",
    "resume-from": "runs stopped early are resumed by running the same command again",
}


def run_keys(node: Any) -> dict[str, Any]:
    """A ``run`` or ``sweep`` node as flat run-config keys.

    Presets write dotted keys flat (``channel.deadline-s: 2.0``); on the command line
    ``run.channel.deadline-s=3.0`` becomes a nested node, flattened here, and wins.
    """
    table = OmegaConf.to_container(node, resolve=True)
    assert isinstance(table, dict)
    flat = {str(k): v for k, v in table.items() if not isinstance(v, dict)}
    flat.update(flatten({str(k): v for k, v in table.items() if isinstance(v, dict)}))
    return flat


def planned_runs(cfg: DictConfig) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(sweep point, run-config overrides) of every sweep point, validated before any run.

    The seeds (:func:`planned_seeds`) are validated too; every sweep point runs every seed.

    Raises
    ------
    ValueError
        For an unknown policy, a bad seed list, ``seed`` in ``run`` or ``sweep`` (use
        ``seeds``), an unknown run-config key or a bad value (naming the key).
    """
    policies = list(cfg.policies)
    check_policies(policies)
    seeds = planned_seeds(cfg)
    defaults = default_run_config()
    shared, sweep = run_keys(cfg.run), run_keys(cfg.sweep)
    given = {k for k in set(shared) | set(sweep) if not k.startswith(PARAMS_PREFIX)}
    unknown = sorted(given - set(defaults))
    if unknown:
        raise ValueError(f"run-config keys {unknown} do not exist; allowed: {sorted(defaults)}")
    if "seed" in shared or "seed" in sweep:
        raise ValueError("set the seeds with seeds=[0,1,2] (not run.seed or sweep.seed)")
    swept = sorted(set(shared) & set(sweep))
    if swept:
        raise ValueError(
            f"run.{swept[0]}: this preset sweeps it; set its values with "
            f"sweep.{swept[0]}=[...] instead"
        )
    for key, instead in NOT_IN_RUN.items():
        if key in shared or key in sweep:
            raise ValueError(f"run.{key} / sweep.{key}: not settable here; {instead}")
    data_dir = str(resolve_data_dir(str(shared.get("data-dir", ""))))
    plans = []
    for point in sweep_points({str(k): list(v) for k, v in sweep.items()}):
        overrides = fold_policy_params({**shared, **point, "data-dir": data_dir})
        check_policy_params_used(policies, overrides)
        for policy in policies:
            own = with_policy_params(policy, overrides)
            parse_run_config({**defaults, **own, "policy": policy})
        plans.append((point, overrides))
    first = {**with_policy_params(policies[0], plans[0][1]), "policy": policies[0]}
    for seed in seeds:
        parse_run_config({**defaults, **first, "seed": seed})
    return plans


def check_data(plans: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Load each dataset the plan needs once, so missing files stop the sweep before any run.

    Raises
    ------
    FileNotFoundError
        Naming the folder and how to provide the files (CIFAR offline).
    """
    defaults = default_run_config()
    for task in {TaskSettings.from_run_config({**defaults, **o}) for _, o in plans}:
        load_train_set(task)  # cached per (dataset, data-dir), and settings where read


def launcher_engine(cfg: DictConfig) -> str:
    """The engine of ``cfg.launcher``: ``engine``, or ``deployment`` when ``deployment`` is true.

    Raises
    ------
    ValueError
        For an engine not in :data:`experiments.compare.execution.ENGINES`.
    """
    engine = str(cfg.launcher.get("engine", "simulation"))
    if engine not in ENGINES:
        raise ValueError(f"launcher.engine: got {engine!r}; allowed: {', '.join(ENGINES)}")
    return "deployment" if cfg.launcher.get("deployment") else engine


def plan_sweep(
    cfg: DictConfig, plans: list[tuple[dict[str, Any], dict[str, Any]]], out: Path
) -> list[list[PlannedRun]]:
    """The planned runs of every sweep point, checked before any starts.

    Raises
    ------
    ValueError, FileNotFoundError
        One line: kept runs with other settings (naming every folder and setting), or a run
        that cannot start (:func:`experiments.compare.plans.check_plans_before_start`).
    """
    seeds = planned_seeds(cfg)
    policies = list(cfg.policies)
    per_point = [
        plan_runs(policies, overrides, out / point_label(point), seeds)
        for point, overrides in plans
    ]
    every = [plan for point_plans in per_point for plan in point_plans]
    refuse_stale_runs(every)
    check_plans_before_start(every)
    return per_point


def load_preset(words: Sequence[str]) -> DictConfig:
    """The config that the command-line overrides ``words`` compose (Hydra's compose API).

    ``words`` as the user writes them (``experiment=digits_policies run.num-server-rounds=3``;
    :func:`hydra_overrides` adds the ``++`` the open nodes need).

    Raises
    ------
    ValueError
        One line: an override Hydra refuses (an unknown preset, a key not in the config, a
        value it cannot parse).
    """
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            return compose("config", overrides=hydra_overrides(words))
    except (HydraException, OmegaConfBaseException) as err:
        message = " ".join(str(err).split())
        raise ValueError(f"{message} (overrides: {' '.join(words)})") from err


def main(words: Sequence[str]) -> int:
    """``fedcgd reproduce [KEY=VALUE ...]``: run a preset (see the module docstring).

    Exit code 0, 1 (a run failed), 2 (refused before the start: a bad override too) or
    130 / 143; a stopped preset's last line gives this same command to run again.
    """
    try:
        cfg = load_preset(words)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    command = fedcgd_command(["reproduce", *words])
    last_words = LastWords()
    return exit_code_stopping_on_signals(lambda: reproduce(cfg, command, last_words), last_words)


def reproduce(
    cfg: DictConfig, command: str | None = None, last_words: LastWords | None = None
) -> int:
    """Plan and check every run, run them, write the tables and figures; the exit code.

    Once every run is planned the first line names the output folder; after a failure, and
    after a signal's stop line (``last_words``), the last line says that the same
    ``command`` keeps the completed runs and continues the others
    (:func:`experiments.run.resume_command.rerun_line`).
    """
    out = Path(str(cfg.out)).resolve()
    claims: list[FolderClaim] = []
    try:
        engine = launcher_engine(cfg)
        jobs = resolve_jobs(cfg.launcher.get("jobs", 1), engine)
        plans = planned_runs(cfg)
        check_data(plans)
        # One command in these folders at a time: the whole output and each sweep point's.
        claims.append(claim_folder(out, "out"))
        for point, _ in plans:
            claims.append(claim_folder(out / point_label(point), "out"))
        per_point = plan_sweep(cfg, plans, out)
    except (ValueError, FileNotFoundError) as err:  # one line, before anything starts
        for claim in reversed(claims):
            claim.abandon()
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"output folder: {out}", flush=True)
    if last_words is not None:
        last_words.set(lambda: rerun_line(command))
    try:
        code = _reproduce_planned(cfg, plans, per_point, out, engine, jobs)
    except ResultWriteError as err:  # a table or a figure: disk full, ...
        print(f"failed: {err}", file=sys.stderr, flush=True)
        code = 1
    finally:
        for claim in claims:
            claim.release()
    if code == 1:
        print(rerun_line(command), file=sys.stderr, flush=True)
    return code


def _reproduce_planned(
    cfg: DictConfig,
    plans: list[tuple[dict[str, Any], dict[str, Any]]],
    per_point: list[list[PlannedRun]],
    out: Path,
    engine: str,
    jobs: int,
) -> int:
    """:func:`reproduce` once every run is planned and checked: run them, write the outputs."""
    seeds = planned_seeds(cfg)
    target = cfg.get("target_accuracy")
    print(f"{cfg.name}: {cfg.description}")
    print(
        f"{len(plans)} sweep point(s) × {len(cfg.policies)} policies × {len(seeds)} seed(s) "
        f"-> {out} ({engine} engine, {jobs} run(s) at once)",
        flush=True,
    )
    all_runs: list[dict[str, Any]] = []
    all_rows: list[dict[str, Any]] = []
    groups: dict[tuple[str, str], list[Path]] = {}
    total = ComparisonRuns()
    tracker = RunProgress(total=sum(len(p) for p in per_point), workers=jobs)
    points = {
        plan.result_dir: (k, point_label(point))
        for k, ((point, _), point_plans) in enumerate(zip(plans, per_point, strict=True), 1)
        for plan in point_plans
    }
    policies, num_points = list(cfg.policies), len(plans)

    def header(plan: PlannedRun) -> str:
        k, label = points[plan.result_dir]
        return run_header(plan, policies, seeds, prefix=f"[{label} {k}/{num_points}] ")

    outcomes = execute_plans(
        [plan for point_plans in per_point for plan in point_plans],
        LaunchSettings(
            engine,
            jobs,
            cfg.launcher.num_supernodes,
            int(cfg.launcher.cpus_per_client),
            float(cfg.launcher.gpus_per_client),
        ),
        tracker=tracker,
        header=header,
    )
    for (point, _), point_plans in zip(plans, per_point, strict=True):
        label = point_label(point)
        result = collect_runs(point_plans, outcomes, out / label, target)
        total.planned += result.planned
        total.runs += result.runs
        total.failed += [FailedRun(f"{label}/{f.label}", f.reason) for f in result.failed]
        all_runs += [{"sweep": label, **run} for run in result.runs]
        all_rows += [{"sweep": label, **row} for row in table_rows(result.runs, target)]
        for run in result.runs:
            groups.setdefault((label, str(run["policy"])), []).append(Path(run["result_dir"]))
    if all_rows:
        write_outputs(cfg, all_rows, all_runs, groups, out)
    print(total.last_line(), file=sys.stderr if total.code else sys.stdout, flush=True)
    return total.code


def write_outputs(
    cfg: DictConfig,
    rows: list[dict[str, Any]],
    runs: list[dict[str, Any]],
    groups: dict[tuple[str, str], list[Path]],
    out: Path,
) -> None:
    """``table.csv``, ``runs.csv``, ``estimates.png`` and the sweep figure over all points."""
    write_table(rows, out / "table.csv", extra_columns=("sweep",))
    write_table(runs, out / "runs.csv", extra_columns=("sweep",), columns=RUN_COLUMNS)
    plot_estimates(groups, out / "estimates.png")
    sweep = run_keys(cfg.sweep)
    metrics = list(cfg.get("figure_metrics") or [])
    title = runs_title(Path(run["result_dir"]) for run in runs)
    figure = plot_sweep(
        rows, {k: list(v) for k, v in sweep.items()}, metrics, out / "sweep.png", title
    )
    if figure is not None:
        print(f"wrote {figure}")
    print("\n".join(f"[{row['sweep']}] {format_row(row)}" for row in rows))
    print(
        f"wrote {out / 'table.csv'} ({len(rows)} rows, {len(runs)} runs), "
        f"{out / 'runs.csv'} and {out / 'estimates.png'}"
    )


#: Config nodes whose keys are run-config keys: ``run.<key>=value`` and ``sweep.<key>=[...]``
#: may name any of them, present in the preset or not.
OPEN_NODES = ("run.", "sweep.")


def hydra_overrides(args: Sequence[str]) -> list[str]:
    """Command-line overrides with ``run.KEY=V`` / ``sweep.KEY=V`` made ``++run.KEY=V``.

    Hydra's struct mode refuses ``run.num-server-rounds=3`` when the preset does not list
    that key ("Key ... is not in struct"); ``++`` sets it whether listed or not. Unknown keys
    are then refused by :func:`planned_runs` with one line listing the allowed ones.
    """
    return [f"++{a}" if a.startswith(OPEN_NODES) and "=" in a else a for a in args]
