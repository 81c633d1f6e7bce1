"""Scheduling × aggregation under a sign-flip attack (docs/aggregation.md).

A test-harness command: the first ``k`` partitions upload with :mod:`misbehaving`'s
``"sign-flip-x5"``; every policy × aggregator × attackers × seed runs in this process (completed
runs are read back) into ``runs.csv``, ``table.csv`` (mean, 95 % half-width, the Kaplan–Meier
median of the rounds to the target) and ``attack.png``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from misbehaving import misbehaving

from client_app.app import make_app
from client_app.cohort import Cohorts
from experiments.analysis.statistics import km_median, mean_ci95
from experiments.analysis.tables import write_csv
from experiments.compare.results import summarise
from experiments.run.inprocess import InProcessGrid, node_contexts
from fedcgd_config.settings import default_run_config
from server_app.app import run_federation
from server_app.config import fold_policy_params, parse_run_config
from server_app.run_folder.results import read_metrics_lines
from server_app.run_folder.run_status import COMPLETED, read_status

#: label -> (aggregator, aggregator-params); "FedAvg" is the scheduler's own (the default).
ROBUST: dict[str, tuple[str, dict[str, Any]]] = {
    "FedAvg": ("", {}),
    "FedMedian": ("FedMedian", {}),
    "FedTrimmedAvg": ("FedTrimmedAvg", {"beta": 0.2}),
    "Krum": ("Krum", {"num-malicious-nodes": 1}),
    "Bulyan": ("Bulyan", {"num-malicious-nodes": 1}),
}
#: Flower's server-side DP around its FedAvg, C = 0.5 (about the median update norm of the
#: default digits run's middle rounds), fixed or adaptive, noise multiplier z.
DP_FIXED, DP_ADAPTIVE = (
    "DifferentialPrivacyServerSideFixedClipping",
    "DifferentialPrivacyServerSideAdaptiveClipping",
)
PRIVATE: dict[str, tuple[str, dict[str, Any]]] = {
    f"DP-{kind}-z{z}": (name, {"noise-multiplier": float(z), norm: 0.5})
    for kind, name, norm in (
        ("fixed", DP_FIXED, "clipping-norm"),
        ("adaptive", DP_ADAPTIVE, "initial-clipping-norm"),
    )
    for z in ("0", "0.3", "1")
}
AGGREGATORS = {**ROBUST, **PRIVATE}
POLICIES = ("fedcgd-fscd", "bc", "all")
ATTACKERS = (0, 1, 3)
FAULT = "sign-flip-x5"
METRICS = ("final_accuracy", "max_accuracy", "rounds_to_target", "kept_rounds", "attacker_rounds")
KEYS = ("policy", "aggregator", "attackers")
RUN_COLUMNS = (*KEYS, "seed", *METRICS, "mean_scheduled", "rounds_run", "code", "result_dir")


def run_config(
    policy: str, aggregator: str, seed: int, result_dir: Path, shared: Mapping[str, Any]
) -> dict[str, Any]:
    """One run's config: the app's defaults, ``shared``, the run's own keys."""
    name, params = AGGREGATORS[aggregator]
    flat = {f"aggregator-params.{k}": v for k, v in params.items()}
    own = {"policy": policy, "aggregator": name, "seed": seed, "result-dir": str(result_dir)}
    return fold_policy_params({**default_run_config(), **shared, **flat, **own})


def run_attacked(config: Mapping[str, Any], attackers: int) -> None:
    """One federation in this process; partitions 0 .. attackers-1 run the attack."""
    parsed = parse_run_config(config)
    num_devices = parsed.task.num_devices
    nodes = [1_000_003 * (v + 1) for v in range(num_devices)]
    cohorts = Cohorts()  # as the in-process engine runs: cohort execution
    client_app = make_app(cohorts)
    handler = misbehaving(client_app, FAULT, range(attackers)) if attackers else client_app
    contexts = node_contexts(nodes, config, num_devices)
    run_federation(InProcessGrid(dict.fromkeys(nodes, handler), contexts, cohorts=cohorts), parsed)


def run_row(
    result_dir: Path, policy: str, aggregator: str, attackers: int, seed: int, target: float
) -> dict[str, Any]:
    """One ``runs.csv`` row from a finished run's folder."""
    lines = read_metrics_lines(result_dir)
    changed = [x for x in lines if not x.get("model_kept")]
    return {
        **summarise(result_dir, target, seed),
        **dict(zip(KEYS, (policy, aggregator, attackers), strict=True)),
        "kept_rounds": len(lines) - len(changed),
        "attacker_rounds": sum(
            any(v < attackers for v in x.get("uploaded") or []) for x in changed
        ),
    }


def table(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean and 95 % CI half-width over the seeds per (policy, aggregator, attackers)."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for run in runs:
        groups.setdefault(tuple(run[k] for k in KEYS), []).append(run)
    rows = []
    for key, members in groups.items():
        row: dict[str, Any] = {**dict(zip(KEYS, key, strict=True)), "n_seeds": len(members)}
        row["reached_target"] = sum(m["rounds_to_target"] is not None for m in members)
        reached = [(m["rounds_to_target"], m["rounds_run"]) for m in members]
        row["rounds_to_target_km_median"] = km_median(reached)
        for metric in METRICS:
            row[f"{metric}_mean"], row[f"{metric}_ci95"] = mean_ci95(m[metric] for m in members)
        rows.append(row)
    return rows


def plot(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Final accuracy per aggregator, one panel per policy, one bar per attacker count."""
    from experiments.analysis.plot_runs import plt, save_figure

    policies = list(dict.fromkeys(r["policy"] for r in rows))
    aggregators = list(dict.fromkeys(r["aggregator"] for r in rows))
    counts = sorted({int(r["attackers"]) for r in rows})
    size = (4.2 * len(policies), 3.6)
    fig, (axes,) = plt.subplots(1, len(policies), figsize=size, sharey=True, squeeze=False)
    width = 0.8 / max(len(counts), 1)
    for ax, policy in zip(axes, policies, strict=True):
        for j, count in enumerate(counts):
            here = [r for r in rows if r["policy"] == policy and int(r["attackers"]) == count]
            found = {r["aggregator"]: r for r in here}
            xs = [i + (j - (len(counts) - 1) / 2) * width for i in range(len(aggregators))]
            means = [found[a]["final_accuracy_mean"] if a in found else 0.0 for a in aggregators]
            halves = [found[a]["final_accuracy_ci95"] if a in found else 0.0 for a in aggregators]
            halves = [h if h == h else 0.0 for h in halves]  # NaN (one seed): no bar
            ax.bar(xs, means, width, yerr=halves, capsize=2, label=f"{count} of 40 attack")
        ax.set(title=policy, ylim=(0, 1))
        ax.set_xticks(range(len(aggregators)), aggregators, rotation=30)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("final test accuracy")
    axes[0].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    """Command line; exit code 0 when every run completed, 1 otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--out", default="results/attack", help="output folder")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--aggregators", default=",".join(ROBUST))
    parser.add_argument("--attackers", default=",".join(map(str, ATTACKERS)))
    parser.add_argument("--target-accuracy", type=float, default=0.85)
    parser.add_argument("--rounds", type=int, default=0, help="num-server-rounds (0: default)")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    policies = args.policies.split(",")
    aggregators = args.aggregators.split(",")
    unknown = [a for a in aggregators if a not in AGGREGATORS]
    if unknown:
        print(f"--aggregators {unknown[0]!r}; allowed: {', '.join(AGGREGATORS)}", file=sys.stderr)
        return 2
    attacker_counts = [int(k) for k in args.attackers.split(",")]
    shared = {"num-server-rounds": args.rounds} if args.rounds else {}
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    plans = [
        (p, a, k, s) for p in policies for a in aggregators for k in attacker_counts for s in seeds
    ]
    runs, failed, start = [], 0, time.monotonic()
    for i, (policy, aggregator, attackers, seed) in enumerate(plans, 1):
        result_dir = out / policy / aggregator / f"{attackers}-attackers" / f"seed-{seed}"
        status = read_status(result_dir) if result_dir.exists() else None
        if status is None or status.state != COMPLETED:
            if result_dir.exists():
                shutil.rmtree(result_dir)
            config = run_config(policy, aggregator, seed, result_dir, shared)
            try:
                run_attacked(config, attackers)
            except Exception as err:  # reported, counted; the sweep goes on
                failed += 1
                print(f"[{i}/{len(plans)}] {result_dir}: failed: {err}", flush=True)
                continue
        row = run_row(result_dir, policy, aggregator, attackers, seed, args.target_accuracy)
        runs.append(row)
        elapsed = time.monotonic() - start
        print(
            f"[{i}/{len(plans)}] {policy} {aggregator} {attackers} attackers seed {seed}: "
            f"final {row['final_accuracy']:.3f} ({elapsed:.0f} s)",
            flush=True,
        )
    if runs:
        for run in runs:  # relative: the table reads the same wherever the sweep ran
            run["result_dir"] = str(Path(run["result_dir"]).relative_to(out))
        write_csv(out / "runs.csv", [{c: r.get(c) for c in RUN_COLUMNS} for r in runs])
        rows = table(runs)
        write_csv(out / "table.csv", rows)
        plot(rows, out / "attack.png")
    print(f"{len(runs)} of {len(plans)} runs completed; tables in {out}", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
