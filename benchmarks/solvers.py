"""``python -m benchmarks solvers`` and ``bench fscd-scale``: the P1 solvers timed per V.

What they measure: docs/evidence.md, "The paper's solver figure and the speed benchmark", and
docs/performance.md, "FSCD at scale"; each solver against its oracle: tests/reference_solvers.py.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from benchmarks import app
from benchmarks.common import write_table
from experiments.analysis.tables import write_csv
from experiments.cli.options import numbers


@app.command("solvers")
def main(
    out: Path = Path("results/bench_solvers"),
    instances: Annotated[int, typer.Option(min=1)] = 3,
    seed: int = 0,
    num_devices: str = "16,32,64,128",
    milp_time_limit_s: float = 0.5,
) -> int:
    """Time the P1 solvers (GS, FSCD, CD, exact) per number of candidates."""
    sizes = numbers(num_devices, int, "--num-devices")
    return time_solvers(out, sizes, instances, seed, milp_time_limit_s=milp_time_limit_s)


@app.command("fscd-scale")
def fscd_scale(
    out: Path = Path("results/bench_fscd_scale"),
    num_devices: str = "1000,3000",
    instances: Annotated[int, typer.Option(min=1)] = 5,
    seed: int = 0,
    ratio: Annotated[float, typer.Option(help="sigma / (sqrt(b) G)")] = 1.0,
) -> int:
    """Time FSCD at 1,000s of candidate devices."""
    sizes = numbers(num_devices, int, "--num-devices")
    return time_solvers(out, sizes, instances, seed, methods=("fscd",), alpha=0.1, ratio=ratio)


def time_solvers(
    out: Path,
    num_devices: list[int],
    instances: int,
    seed: int,
    *,
    methods: tuple[str, ...] = ("gs", "fscd", "cd", "exact"),
    alpha: float = 1.0,
    ratio: float = 1.0,
    milp_time_limit_s: float = 0.0,
) -> int:
    """Solve ``instances`` random instances per V with each method; print and write the tables."""
    from experiments.paper.solver_performance import instance_problem, make_instance
    from fedcgd_strategy import solve

    runs: list[dict[str, Any]] = []
    summary: list[dict[str, object]] = []
    for size in num_devices:
        rngs = [np.random.default_rng([seed, size, i, 7]) for i in range(instances)]
        problems = [instance_problem(*make_instance(size, alpha, rng), ratio) for rng in rngs]
        for method in methods:
            group: list[dict[str, Any]] = []
            for i, problem in enumerate(problems):
                rng = np.random.default_rng([seed, size, i, 8])
                limit = milp_time_limit_s or None
                wall, cpu = time.perf_counter(), time.process_time()
                result = solve(problem, method, rng=rng, milp_time_limit_s=limit)
                group.append({
                    "num_devices": size, "instance": i, "method": method,
                    "num_feasible": int(problem.feasible.sum()),
                    "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                    "iterations": result.iterations, "num_selected": result.num_selected,
                    "objective": result.objective,
                    "proven": result.lower_bound >= result.objective * (1 - 1e-9),
                })  # fmt: skip
            summary.append({
                "num_devices": size, "method": method, "instances": instances,
                "median_s": statistics.median(r["wall_s"] for r in group),
                "max_s": max(r["wall_s"] for r in group),
                "median_cpu_s": statistics.median(r["cpu_s"] for r in group),
                "iterations": statistics.fmean(r["iterations"] for r in group),
                "proven": sum(r["proven"] for r in group),
            })  # fmt: skip
            runs += group
    write_csv(out / "runs.csv", runs)
    write_table(out, summary, None, "summary")
    return 0
