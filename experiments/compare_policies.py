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
from pathlib import Path
from typing import Any

from experiments.launcher import default_run_config, parse_run_config_text, run_flwr
from experiments.plot_runs import load_run, plot_runs
from fedcgd_strategy.policies import POLICY_NAMES

TABLE_COLUMNS = ("policy", "final_accuracy", "max_accuracy", "mean_scheduled", "mean_wemd")


def summarise(result_dir: Path) -> dict[str, Any]:
    """One row of the comparison table from a run's ``metrics.jsonl``."""
    policy, lines = load_run(result_dir)
    accs = [x["accuracy"] for x in lines if x.get("accuracy") is not None]
    wemds = [x["wemd"] for x in lines if x.get("wemd") is not None]
    return {
        "policy": policy,
        "final_accuracy": accs[-1] if accs else None,
        "max_accuracy": max(accs) if accs else None,
        "mean_scheduled": sum(x.get("num_scheduled", 0) for x in lines) / max(len(lines), 1),
        "mean_wemd": sum(wemds) / len(wemds) if wemds else None,
    }


def write_table(rows: list[dict[str, Any]], path: Path) -> None:
    """Write the comparison table as CSV."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=TABLE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default="fedcgd-fscd,fedcgd-gs,bc,bn2,poc,fedcbs,all")
    parser.add_argument("--run-config", default="", help="overrides shared by every run")
    parser.add_argument("--out", type=Path, default=Path("results/compare"))
    parser.add_argument("--num-supernodes", type=int, default=None)
    args = parser.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown:
        parser.error(f"unknown policies {unknown}; allowed: {', '.join(POLICY_NAMES)}")
    shared = parse_run_config_text(args.run_config)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, policy in enumerate(policies, start=1):
        print(f"=== [{i}/{len(policies)}] policy {policy}", flush=True)
        result_dir = out / policy
        run_config = {**shared, "policy": policy, "result-dir": str(result_dir)}
        num_nodes = args.num_supernodes or int(
            shared.get("num-devices", default_run_config()["num-devices"])
        )
        proc = run_flwr(run_config, num_supernodes=num_nodes)
        if proc.returncode != 0:
            print(f"policy {policy} failed (exit code {proc.returncode}); skipped", flush=True)
            continue
        rows.append(summarise(result_dir))
        print(json.dumps(rows[-1]), flush=True)
    write_table(rows, out / "table.csv")
    plot_runs([out / r["policy"] for r in rows], out / "curves.png")
    print(f"wrote {out / 'table.csv'} and {out / 'curves.png'}")
    return 0 if len(rows) == len(policies) else 1


if __name__ == "__main__":
    raise SystemExit(main())
