"""Run several scheduling policies on the same settings and seeds and compare them (Table II).

``python -m experiments.compare_policies --policies fedcgd-fscd,bc,all --seeds 0,1,2,3,4
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
  FedCGD-FSCD; ``p_value_vs_fedcgd_fscd``; ``n_paired``);
- ``curves.png``: accuracy, scheduled devices and WEMD per round; with several seeds the mean
  per policy with a shaded 95 % band.

``rounds_to_target`` of a run that never reaches the target is missing (empty in
``runs.csv``): its mean and CI are over the runs that reached it, and ``reached_target`` says
how many did (out of ``n_seeds``). Finished runs (with a ``summary.json``) are not run again.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.launcher import (
    default_run_config,
    parse_run_config_text,
    resolve_data_dir,
    run_flwr,
    validated_run_config,
)
from experiments.plot_runs import load_run, plot_mean_runs, plot_runs
from experiments.statistics import first_round_reaching, mean_ci95, paired_test
from fedcgd_strategy.policies import POLICY_NAMES
from server_app.results import CONFIG_FILE, SUMMARY_FILE

REFERENCE_POLICY = "fedcgd-fscd"
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
    "n_paired",
    "seeds",
)


def run_dir(out: Path, policy: str, seed: int) -> Path:
    """Result directory of one (policy, seed) run: ``<out>/<policy>/seed-<seed>``."""
    return out / policy / f"seed-{seed}"


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
    """
    policy, lines = load_run(result_dir)
    if seed is None and (result_dir / CONFIG_FILE).exists():
        seed = json.loads((result_dir / CONFIG_FILE).read_text()).get("task", {}).get("seed")
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
        Policy the others are tested against (paired by seed, on the final accuracy).

    Returns
    -------
    list of dict
        The keys of ``TABLE_COLUMNS``; NaN where a statistic is undefined (one seed, no
        reference, fewer than two common seeds).
    """
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        by_policy.setdefault(str(run["policy"]), []).append(run)
    ref_final = {r["seed"]: r["final_accuracy"] for r in by_policy.get(reference, [])}
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
        test = paired_test({r["seed"]: r["final_accuracy"] for r in group}, ref_final)
        skip = policy == reference or reference not in by_policy or test.n < 2
        row["diff_vs_fedcgd_fscd"] = None if skip else test.mean_diff
        row["p_value_vs_fedcgd_fscd"] = None if skip else test.p_value
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
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=(*extra_columns, *columns))
        writer.writeheader()
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)


def plot_comparison(runs: Sequence[Mapping[str, Any]], out: Path) -> Path:
    """``curves.png``: one curve per policy, mean and 95 % band when a policy has several seeds."""
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
    """Raise ValueError naming unknown policy names."""
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown:
        raise ValueError(f"policies: unknown {unknown}; allowed: {', '.join(POLICY_NAMES)}")


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


def _run_inprocess(overrides: Mapping[str, Any]) -> int:
    """One in-process run; 0 on success, 1 (with the error printed) when it raised."""
    from experiments.inprocess import run_inprocess

    try:
        run_inprocess(resolve_data_dir(validated_run_config(overrides)))
    except Exception as err:  # one failed run must not stop a sweep
        print(f"in-process run failed: {err!r}", flush=True)
        return 1
    return 0


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
    progress: str = "",
    engine: str = "simulation",
) -> list[dict[str, Any]]:
    """Run each policy for each seed into ``out/<policy>/seed-<s>`` and summarise them.

    A run whose result directory already holds a ``summary.json`` is not run again (long
    sweeps can be resumed). Writes ``out/runs.csv``, ``out/table.csv`` and ``out/curves.png``.
    ``engine``: ``"simulation"`` (``flwr run``, Ray), ``"deployment"`` (SuperNode processes;
    also ``deployment=True``) or ``"inprocess"`` (:mod:`experiments.inprocess`: the same
    ServerApp and ClientApp in this process, no Ray; same results, for quick sweeps).

    Returns
    -------
    list of dict
        The ``runs.csv`` rows of the runs that finished (see :func:`summarise`); a failed run
        is reported and left out.

    Raises
    ------
    ValueError
        For an unknown policy, a bad seed list, or ``seed`` in ``shared`` (give ``seeds``).
    """
    check_policies(policies)
    if engine not in ENGINES:
        raise ValueError(f"engine: got {engine!r}; allowed: {', '.join(ENGINES)}")
    engine = "deployment" if deployment else engine
    seeds = check_seeds(list(seeds))
    if "seed" in shared:
        raise ValueError("give the seeds as seeds (--seeds 0,1,2), not as run-config 'seed'")
    out.mkdir(parents=True, exist_ok=True)
    num_nodes = num_supernodes or int(
        shared.get("num-devices", default_run_config()["num-devices"])
    )
    runs = []
    for i, policy in enumerate(policies, start=1):
        for j, seed in enumerate(seeds, start=1):
            result_dir = run_dir(out, policy, seed)
            print(
                f"=== {progress}[policy {i}/{len(policies)}, seed {j}/{len(seeds)}] "
                f"{policy} seed={seed} -> {result_dir}",
                flush=True,
            )
            if (result_dir / SUMMARY_FILE).exists():
                print("finished earlier; kept", flush=True)
            else:
                overrides = {**shared, "policy": policy, "seed": seed}
                overrides["result-dir"] = str(result_dir)
                if engine == "inprocess":
                    code = _run_inprocess(overrides)
                else:
                    code = run_flwr(
                        overrides,
                        num_supernodes=num_nodes,
                        deployment=engine == "deployment",
                        cpus_per_client=cpus_per_client,
                        gpus_per_client=gpus_per_client,
                    ).returncode
                if code != 0 or not (result_dir / SUMMARY_FILE).exists():
                    print(
                        f"policy {policy} seed {seed} failed (exit code {code}); skipped",
                        flush=True,
                    )
                    continue
            runs.append(summarise(result_dir, target_accuracy, seed))
            print(json.dumps(runs[-1]), flush=True)
    if runs:
        rows = write_comparison(runs, out, target_accuracy)
        print("\n".join(format_row(row) for row in rows), flush=True)
        print(f"wrote {out / 'table.csv'}, {out / 'runs.csv'} and {out / 'curves.png'}")
    return runs


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
    args = parser.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    try:
        check_policies(policies)
        shared = parse_run_config_text(args.run_config)
        if args.seeds is not None and "seed" in shared:
            raise ValueError("give either --seeds or run-config 'seed', not both")
        seeds = parse_seeds(args.seeds) if args.seeds is not None else [shared.pop("seed", 0)]
        seeds = check_seeds(seeds)
        for policy in policies:
            for seed in seeds:
                validated_run_config({**shared, "policy": policy, "seed": seed})
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    runs = run_policies(
        policies,
        shared,
        args.out.resolve(),
        seeds=seeds,
        target_accuracy=args.target_accuracy,
        num_supernodes=args.num_supernodes,
        engine=args.engine,
    )
    return 0 if len(runs) == len(policies) * len(seeds) else 1


if __name__ == "__main__":
    raise SystemExit(main())
