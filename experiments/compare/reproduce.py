"""Reproduce a table or figure of the paper from a Hydra preset in ``conf/experiment/``.

``python -m experiments.compare.reproduce experiment=<name> 'seeds=[0,1,2,3,4]'`` runs every
policy of the preset for every seed (default ``[0]``) and every combination of its sweep (e.g.
``local-steps: [1, 5]``) with ``flwr run``, then writes, under ``out`` (default
``results/<name>``):

- ``<key>=<value>/<policy>/seed-<s>/`` one result directory per run (resumable: finished runs
  are kept),
- ``<key>=<value>/table.csv``, ``runs.csv`` and ``curves.png`` per sweep point (see
  :mod:`experiments.compare.policies`: per policy the mean and 95 % confidence half-width over
  seeds of final / best accuracy, rounds to the target accuracy, mean scheduled devices, mean
  WEMD, and a paired t-test of the final accuracy against FedCGD-FSCD),
- ``table.csv`` and ``runs.csv`` over all sweep points (a ``sweep`` column first),
- ``estimates.png``: σ̂ and Ĝ per round, mean over seeds with its 95 % band, of every (sweep
  point, FedCGD policy) (the paper's CIFAR-100 panels),
- ``sweep.png`` for a preset that sweeps one key: its ``figure_metrics`` against the swept
  value, mean over seeds ± 95 % CI.

Every figure draws the mean over seeds with its 95 % confidence interval (Student t) from two
seeds on, and a single seed as its run, and is titled with the data set and settings
(:mod:`experiments.analysis.figures`, :mod:`experiments.analysis.figure_titles`).

Presets: ``digits_policies`` (offline), ``cifar10_local_steps`` (accuracy vs τ and Table II),
``cifar10_imbalance``, ``cifar10_dirichlet``, ``cifar100_local_steps``; offline on MNIST-1D
with 5 seeds: ``mnist1d_local_steps``, ``mnist1d_imbalance``, ``mnist1d_dirichlet``; quick
digits variants ``digits_*``. Any value can be
overridden, e.g. ``run.data-dir=/data/cifar 'policies=[fedcgd-fscd,bc]' run.num-server-rounds=50
'seeds=[0,1,2]'`` (``run.<key>=`` and ``sweep.<key>=`` take every run-config key, whether the
preset lists it or not: :func:`hydra_overrides`). The run config of every run is validated, and
every result folder planned (:mod:`experiments.compare.policies`: kept runs with other settings
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

import hydra
import matplotlib
import numpy as np
from omegaconf import DictConfig, OmegaConf

from experiments.analysis.figure_titles import runs_title
from experiments.analysis.figures import (
    MIN_RUNS_FOR_BAND,
    draw_group,
    estimate_styles,
    is_fedcgd,
    label_axis,
    legend_below,
    metric,
    policy_name,
    policy_order,
    series_styles,
)
from experiments.analysis.plot_runs import finish_figure, load_run, round_values, save_figure
from experiments.compare.policies import (
    ENGINES,
    RUN_COLUMNS,
    ComparisonRuns,
    FailedRun,
    PlannedRun,
    check_plans_before_start,
    check_policies,
    check_policy_params_used,
    check_seeds,
    collect_runs,
    execute_plans,
    format_row,
    plan_runs,
    refuse_stale_runs,
    run_header,
    table_rows,
    with_policy_params,
    write_table,
)
from experiments.run.launcher import default_run_config
from experiments.run.processes import exit_code_stopping_on_signals
from experiments.run.progress import RunProgress
from experiments.run.resume_command import LastWords, python_command, rerun_line
from experiments.run.run_pool import resolve_jobs
from fedcgd_task.datasets import load_train_set
from fedcgd_task.settings import TaskSettings, flatten, resolve_data_dir
from server_app.atomic_files import ResultWriteError
from server_app.config import parse_run_config
from server_app.folder_lock import FolderClaim, claim_folder
from server_app.policy_params import PARAMS_PREFIX, fold_policy_params

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


def sweep_points(sweep: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the sweep values (one empty dict for no sweep)."""
    keys = list(sweep)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*sweep.values())]


def point_label(point: Mapping[str, Any]) -> str:
    """Folder name of a sweep point, e.g. ``local-steps=5`` (``default`` for no sweep)."""
    return ",".join(f"{k}={v}" for k, v in point.items()) or "default"


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


def group_name(label: str, policy: str) -> str:
    """Legend name of a (sweep point, policy) group: ``FedCGD-FSCD, local-steps=5``.

    The sweep point is left out when the preset has no sweep (its label is ``default``).
    """
    name = policy_name(policy)
    return name if label == "default" else f"{name}, {label}"


def plot_estimates(groups: Mapping[tuple[str, str], Sequence[Path]], out: Path) -> Path:
    """σ̂ and Ĝ used per round (the paper's CIFAR-100 estimate panels).

    Parameters
    ----------
    groups : mapping of (sweep label, policy) to sequence of Path
        E.g. ``("local-steps=5", "fedcgd-fscd")`` → result directories (one per seed); each
        group is drawn as in :func:`experiments.analysis.figures.draw_group` (the mean over
        seeds and, from two seeds on, its clipped 95 % band; one seed: the run). Only FedCGD
        policies are drawn (the other rules neither compute σ̂ nor keep Ĝ); styles from
        :func:`experiments.analysis.figures.estimate_styles`; titled with the runs' settings
        (:func:`experiments.analysis.figure_titles.runs_title`).
    out : Path
        PNG to write.

    Returns
    -------
    Path
        ``out``.
    """
    keys = ("sigma", "class_gradient_used")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.9), constrained_layout=True)
    labels = list(dict.fromkeys(label for label, _ in groups))
    fedcgd = [(lb, p) for lb, p in groups if is_fedcgd(p)]
    order = policy_order(p for _, p in fedcgd)
    drawn = sorted(fedcgd, key=lambda g: (order.index(g[1]), labels.index(g[0])))
    for (label, policy), style in zip(drawn, estimate_styles(drawn, labels), strict=True):
        runs = [load_run(d)[1] for d in groups[(label, policy)]]
        for ax, key in zip(axes, keys, strict=True):
            curves = [round_values(lines, key) for lines in runs]
            draw_group(ax, curves, key, group_name(label, policy), style=style)
    axes[0].set_title("σ̂: spread of the sampled gradients (paper's global σ estimate)")
    axes[1].set_title("Ĝ: class-gradient bound FedCGD uses in the WEMD term")
    title = runs_title(d for group in drawn for d in groups[group])
    return finish_figure(fig, axes, keys, out, title)


def plot_sweep(
    rows: list[dict[str, Any]],
    sweep: Mapping[str, list[Any]],
    metrics: list[str],
    out: Path,
    title: str = "",
) -> Path | None:
    """The preset's figure: each metric's mean over seeds ± 95 % CI against the swept value.

    One panel per metric, one line per policy (``rows`` from :func:`table_rows` with a
    ``sweep`` label), titled ``title`` (the runs' settings). Only for a sweep over one
    run-config key; None otherwise. The error bars are the 95 % confidence intervals of
    ``table.csv`` (Student t, from two seeds on, as every band of the project's figures:
    :data:`experiments.analysis.figures.MIN_RUNS_FOR_BAND`; none for one seed), clipped to what the
    metric can be (accuracy in [0, 1], counts >= 0).
    """
    if len(sweep) != 1 or not metrics:
        return None
    ((key, values),) = sweep.items()
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(5.6 * len(metrics), 4.7), squeeze=False, constrained_layout=True
    )
    labels = [point_label({key: v}) for v in values]
    policies = policy_order(r["policy"] for r in rows)
    styles = series_styles(policies)
    for ax, name in zip(axes[0], metrics, strict=True):
        bounds = metric(name)
        for policy, style in zip(policies, styles, strict=True):
            by_label = {r["sweep"]: r for r in rows if r["policy"] == policy}
            mean = np.array([_number(by_label.get(lb, {}).get(f"{name}_mean")) for lb in labels])
            ci = np.array([_number(by_label.get(lb, {}).get(f"{name}_ci95")) for lb in labels])
            seeds = np.array([_number(by_label.get(lb, {}).get("n_seeds")) for lb in labels])
            ci = np.where(seeds >= MIN_RUNS_FOR_BAND, np.nan_to_num(ci), 0.0)
            lower = mean - bounds.clip(mean - ci)
            upper = bounds.clip(mean + ci) - mean
            ax.errorbar(
                range(len(values)),
                mean,
                yerr=np.nan_to_num(np.vstack([lower, upper])),
                marker="o",
                capsize=3,
                label=policy_name(policy),
                **style,
            )
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        label_axis(ax, name, xlabel=key, x_count=False)
        reached = " (runs that reached it)" if name == "rounds_to_target" else ""
        ax.set_title(f"mean over seeds{reached}; bars: 95 % CI (Student t)", fontsize=10)
    legend_below(fig, axes[0][0])
    if title:
        fig.suptitle(title)
    return save_figure(fig, out)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def launcher_engine(cfg: DictConfig) -> str:
    """The engine of ``cfg.launcher``: ``engine``, or ``deployment`` when ``deployment`` is true.

    Raises
    ------
    ValueError
        For an engine not in :data:`experiments.compare.policies.ENGINES`.
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
        that cannot start (:func:`experiments.compare.policies.check_plans_before_start`).
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


#: The words of the command line as the user wrote them (before :func:`hydra_overrides`), set
#: when the module runs as a command: the command a stopped preset's last line gives.
COMMAND_WORDS: list[str] | None = None


def command_line() -> str | None:
    """The command that started this preset, to run again; None when not known.

    :data:`COMMAND_WORDS` when the module runs as a command, else Hydra's record of the
    command-line overrides (with ``++`` where :func:`hydra_overrides` added it).
    """
    words = COMMAND_WORDS
    if words is None:
        try:
            from hydra.core.hydra_config import HydraConfig

            words = list(HydraConfig.get().overrides.task)
        except ValueError:  # not started by Hydra's command line (a test calling it)
            return None
    return python_command("experiments.compare.reproduce", words)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    """Run a preset (see the module docstring); exit code 0, 1 (a run failed), 2 or 130 / 143."""
    command = command_line()
    last_words = LastWords()
    code = exit_code_stopping_on_signals(lambda: reproduce(cfg, command, last_words), last_words)
    if code:
        raise SystemExit(code)


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
        engine=engine,
        jobs=jobs,
        num_supernodes=cfg.launcher.num_supernodes,
        cpus_per_client=int(cfg.launcher.cpus_per_client),
        gpus_per_client=float(cfg.launcher.gpus_per_client),
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


if __name__ == "__main__":
    from experiments.run.processes import run_as_command

    COMMAND_WORDS = sys.argv[1:]
    sys.argv[1:] = hydra_overrides(sys.argv[1:])
    run_as_command(main)
