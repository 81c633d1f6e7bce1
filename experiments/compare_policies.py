"""Run several scheduling policies on the same settings and compare them (the paper's Table II).

``python -m experiments.compare_policies --policies fedcgd-fscd,bc,all --out results/compare``
runs each policy with ``flwr run`` (same seed, so the same devices, channel draws and
partitions), then writes ``table.csv`` (final and best accuracy, mean scheduled devices, mean
WEMD of the schedule, as in the paper's Table II) and ``curves.png`` from the result files.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.launcher import (
    default_run_config,
    parse_run_config_text,
    run_flwr,
    validated_run_config,
)
from experiments.plot_runs import load_run, plot_runs
from fedcgd_strategy.policies import POLICY_NAMES
from server_app.results import SUMMARY_FILE

TABLE_COLUMNS = (
    "policy",
    "final_accuracy",
    "max_accuracy",
    "rounds_to_target",
    "mean_scheduled",
    "mean_wemd",
)


def summarise(result_dir: Path, target_accuracy: float | None = None) -> dict[str, Any]:
    """One row of the comparison table from a run's ``metrics.jsonl``.

    ``rounds_to_target`` is the first round whose test accuracy reaches ``target_accuracy``
    (the paper's "epochs to reach the target test accuracy"), None if never reached.
    """
    policy, lines = load_run(result_dir)
    evaluated = [x for x in lines if x.get("accuracy") is not None]
    accs = [x["accuracy"] for x in evaluated]
    wemds = [x["wemd"] for x in lines if x.get("wemd") is not None]
    reached = [
        x["round"]
        for x in evaluated
        if target_accuracy is not None and x["accuracy"] >= target_accuracy
    ]
    return {
        "policy": policy,
        "final_accuracy": accs[-1] if accs else None,
        "max_accuracy": max(accs) if accs else None,
        "rounds_to_target": reached[0] if reached else None,
        "mean_scheduled": sum(x.get("num_scheduled", 0) for x in lines) / max(len(lines), 1),
        "mean_wemd": sum(wemds) / len(wemds) if wemds else None,
    }


def write_table(
    rows: list[dict[str, Any]], path: Path, extra_columns: tuple[str, ...] = ()
) -> None:
    """Write the comparison table as CSV (``extra_columns`` first, e.g. the sweep values)."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=(*extra_columns, *TABLE_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)


def check_policies(policies: list[str]) -> None:
    """Raise ValueError naming unknown policy names."""
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown:
        raise ValueError(f"policies: unknown {unknown}; allowed: {', '.join(POLICY_NAMES)}")


def run_policies(
    policies: list[str],
    shared: Mapping[str, Any],
    out: Path,
    *,
    target_accuracy: float | None = None,
    num_supernodes: int | None = None,
    deployment: bool = False,
    cpus_per_client: int = 1,
    gpus_per_client: float = 0.0,
    progress: str = "",
) -> list[dict[str, Any]]:
    """Run each policy with the shared run config into ``out/<policy>`` and summarise them.

    A policy whose result directory already holds a ``summary.json`` is not run again (long
    sweeps can be resumed). Writes ``out/table.csv`` and ``out/curves.png``; returns the rows of
    the policies that finished.
    """
    check_policies(policies)
    out.mkdir(parents=True, exist_ok=True)
    num_nodes = num_supernodes or int(
        shared.get("num-devices", default_run_config()["num-devices"])
    )
    rows = []
    for i, policy in enumerate(policies, start=1):
        result_dir = out / policy
        print(f"=== {progress}[{i}/{len(policies)}] policy {policy} -> {result_dir}", flush=True)
        if not (result_dir / SUMMARY_FILE).exists():
            proc = run_flwr(
                {**shared, "policy": policy, "result-dir": str(result_dir)},
                num_supernodes=num_nodes,
                deployment=deployment,
                cpus_per_client=cpus_per_client,
                gpus_per_client=gpus_per_client,
            )
            if proc.returncode != 0:
                print(f"policy {policy} failed (exit code {proc.returncode}); skipped", flush=True)
                continue
        rows.append(summarise(result_dir, target_accuracy))
        print(json.dumps(rows[-1]), flush=True)
    if rows:
        write_table(rows, out / "table.csv")
        plot_runs([out / r["policy"] for r in rows], out / "curves.png")
        print(f"wrote {out / 'table.csv'} and {out / 'curves.png'}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default="fedcgd-fscd,fedcgd-gs,bc,bn2,poc,fedcbs,all")
    parser.add_argument("--run-config", default="", help="overrides shared by every run")
    parser.add_argument("--out", type=Path, default=Path("results/compare"))
    parser.add_argument("--num-supernodes", type=int, default=None)
    parser.add_argument("--target-accuracy", type=float, default=None)
    args = parser.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    try:
        check_policies(policies)
        shared = parse_run_config_text(args.run_config)
        for policy in policies:
            validated_run_config({**shared, "policy": policy})
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows = run_policies(
        policies,
        shared,
        args.out.resolve(),
        target_accuracy=args.target_accuracy,
        num_supernodes=args.num_supernodes,
    )
    return 0 if len(rows) == len(policies) else 1


if __name__ == "__main__":
    raise SystemExit(main())
