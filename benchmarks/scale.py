"""``python -m benchmarks scale``: in-process rounds at V devices, seconds per phase and memory.

What it measures: docs/performance.md, "At scale".
"""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path
from typing import Annotated, Any

import typer

from benchmarks import app
from benchmarks.common import Checkout, checkouts, progress, run_engine, write_table
from experiments.cli.options import numbers

#: Phases read from each round's metrics line.
PHASES = ("query_s", "schedule_s", "train_phase_s", "eval_s")


@app.command("scale")
def main(
    devices: Annotated[str, typer.Option(help="values of V")] = "1000,10000",
    rounds: Annotated[
        int, typer.Option(min=3, help="rounds per run (>= 3: rounds 2..R are timed)")
    ] = 4,
    samples: Annotated[int, typer.Option(help="mnist1d-samples")] = 200_000,
    compare_with: Checkout = None,
    out: Path = Path("results/bench-scale"),
) -> int:
    """In-process rounds at scale: seconds per phase and memory."""
    sizes = numbers(devices, int, "--devices")
    projects = checkouts(compare_with)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for v in sizes:
        for name, project in projects.items():
            folder = f"V{v}-{name}-{len(rows)}"
            overrides = {
                "dataset": "mnist1d", "mnist1d-samples": samples, "num-devices": v,
                "num-server-rounds": rounds, "data-dir": str(out / "data"),
                "result-dir": str(out / folder),
            }  # fmt: skip
            progress(f"V = {v}, {name} ({project})", "bench_scale")
            run = run_engine(project, overrides, out / f"{folder}.log")
            later = run.metrics[1:]
            walls = [float(x["wall_time_s"]) for x in run.metrics]
            rows.append({
                "V": v, "variant": name,
                "round_s": statistics.median(b - a for a, b in itertools.pairwise(walls)),
                "queried": statistics.median(int(x["num_available"]) for x in later),
                **{p: statistics.median(float(x.get(p) or 0.0) for x in later) for p in PHASES},
                "peak_rss_mib": run.peak_rss_mib, "rss_after_round_2_mib": run.rss_by_round.get(2),
                "rss_at_end_mib": max(run.rss_by_round.items(), default=(0, None))[1],
            })  # fmt: skip
    write_table(out, rows, {"rounds": rounds, "samples": samples}, "table")
    return 0
