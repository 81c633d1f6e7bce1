"""Rounds at scale in-process (``fedcgd bench scale``): seconds per phase and memory at V devices.

One ``fedcgd inprocess`` process per V of ``--devices`` (and per ``--per-device`` /
``--compare-with`` variant) on generated MNIST-1D; medians of rounds 2..R of each phase, peak
resident memory and memory after round 2 and at the end (docs/performance.md, "At scale").
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.bench.common import checkouts, progress, run_engine, write_table

#: Phases read from each round's metrics line.
PHASES = ("query_s", "schedule_s", "train_phase_s", "eval_s")


@dataclass(frozen=True)
class Options:
    """The options of ``fedcgd bench scale`` (their defaults are the command's)."""

    devices: list[int]
    rounds: int
    samples: int
    per_device: bool
    compare_with: Path | None
    out: Path


def main(args: Options) -> int:
    """Run the benchmark; return the exit code (0 on success, 2 for a bad ``--compare-with``)."""
    projects = checkouts(args.compare_with)
    if projects is None:
        return 2
    variants: list[tuple[str, Path, tuple[str, ...]]] = [("cohorts", projects["this"], ())]
    if args.per_device:
        variants.append(("per device", projects["this"], ("--per-device",)))
    if "other" in projects:
        variants.append(("other checkout", projects["other"], ()))
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for v in args.devices:
        for name, project, extra in variants:
            folder = f"V{v}-{name.replace(' ', '-')}-{len(rows)}"
            overrides = {
                "dataset": "mnist1d",
                "mnist1d-samples": args.samples,
                "num-devices": v,
                "num-server-rounds": args.rounds,
                "data-dir": str(out / "data"),
                "result-dir": str(out / folder),
            }
            progress(f"V = {v}, {name} ({project})", "bench_scale")
            run = run_engine(project, overrides, out / f"{folder}.log", *extra)
            later = run.metrics[1:]
            walls = [float(x["wall_time_s"]) for x in run.metrics]
            rows.append(
                {
                    "V": v,
                    "variant": name,
                    "round_s": statistics.median(b - a for a, b in itertools.pairwise(walls)),
                    "queried": statistics.median(int(x["num_available"]) for x in later),
                    **{p: statistics.median(float(x.get(p) or 0.0) for x in later) for p in PHASES},
                    "peak_rss_mib": run.peak_rss_mib,
                    "rss_after_round_2_mib": run.rss_by_round.get(2),
                    "rss_at_end_mib": run.rss_by_round[max(run.rss_by_round, default=0)]
                    if run.rss_by_round
                    else None,
                }
            )
    write_table(out, rows, {"rounds": args.rounds, "samples": args.samples}, "table")
    return 0
