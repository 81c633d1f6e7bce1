"""Benchmark FSCD at scale (``fedcgd bench fscd-scale``): dense swap grid vs incremental search.

Table I cell instances with every device a candidate, solved by
:func:`experiments.bench.reference_solvers.fscd_dense` and
:func:`fedcgd_strategy.solvers.fscd.fscd_schedule`: median wall and CPU times and whether both
agree (docs/performance.md, "FSCD at scale").
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import SupportsFloat

import numpy as np

from experiments.analysis.tables import write_csv
from experiments.bench.common import SolverInstances
from experiments.bench.reference_solvers import fscd_dense
from experiments.paper.solver_performance import random_problem
from fedcgd_strategy.problem import SchedulingProblem
from fedcgd_strategy.solvers.fscd import fscd_schedule, single_threaded_blas
from fedcgd_strategy.solvers.result import ScheduleResult

ALPHA = 0.1


def scale_problem(num_devices: int, seed: int, instance: int, ratio: float) -> SchedulingProblem:
    """One Table I instance with ``num_devices`` candidate devices (see the module docstring)."""
    rng = np.random.default_rng([seed, num_devices, instance, 11])
    return random_problem(num_devices, ALPHA, ratio, rng)


def timed(
    solver: Callable[[SchedulingProblem], ScheduleResult], problem: SchedulingProblem
) -> tuple[ScheduleResult, float, float]:
    """Solve ``problem`` once; return the result, the wall time and the process CPU time in s."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = solver(problem)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def agree(a: ScheduleResult, b: ScheduleResult) -> bool:
    """Same schedule, same iteration count and the same objective (to 1e-12 relative)."""
    return (
        bool(np.array_equal(a.selected, b.selected))
        and a.iterations == b.iterations
        and abs(a.objective - b.objective) <= 1e-12 * abs(b.objective)
    )


def column(
    rows: Sequence[dict[str, object]], key: str, reduce: Callable[[list[float]], SupportsFloat]
) -> float:
    """``reduce`` (e.g. ``np.median``) of the numeric column ``key`` of ``rows``."""
    return float(reduce([float(str(row[key])) for row in rows]))


@dataclass(frozen=True)
class Options(SolverInstances):
    """The options of ``fedcgd bench fscd-scale`` (their defaults are the command's)."""

    ratio: float
    single_thread_dense: bool


def main(args: Options) -> int:
    """Run the benchmark, print the table and write ``runs.csv`` and ``summary.csv``."""
    runs: list[dict[str, object]] = []
    summary: list[dict[str, object]] = []
    print(
        f"{'V':>5} {'inst':>4} {'feasible':>8} {'dense s':>8} {'incr s':>8} {'speed-up':>8} "
        f"{'agree':>5} {'iters':>6} {'|Pi|':>5}"
    )
    for num_devices in args.num_devices:
        group: list[dict[str, object]] = []
        for instance in range(args.instances):
            problem = scale_problem(num_devices, args.seed, instance, args.ratio)
            limit = single_threaded_blas() if args.single_thread_dense else contextlib.nullcontext()
            with limit:
                dense, dense_s, dense_cpu_s = timed(fscd_dense, problem)
            incremental, incremental_s, incremental_cpu_s = timed(fscd_schedule, problem)
            row: dict[str, object] = {
                "num_devices": num_devices,
                "instance": instance,
                "num_feasible": int(problem.feasible.sum()),
                "dense_s": dense_s,
                "incremental_s": incremental_s,
                "dense_cpu_s": dense_cpu_s,
                "incremental_cpu_s": incremental_cpu_s,
                "agree": agree(incremental, dense),
                "iterations": incremental.iterations,
                "num_selected": incremental.num_selected,
                "objective": incremental.objective,
            }
            group.append(row)
            print(
                f"{num_devices:>5} {instance:>4} {row['num_feasible']:>8} {dense_s:8.3f} "
                f"{incremental_s:8.3f} {dense_s / incremental_s:7.1f}x {row['agree']!s:>5} "
                f"{incremental.iterations:>6} {incremental.num_selected:>5}",
                flush=True,
            )
        summary.append(
            {
                "num_devices": num_devices,
                "instances": len(group),
                "dense_median_s": column(group, "dense_s", np.median),
                "incremental_median_s": column(group, "incremental_s", np.median),
                "speedup": column(group, "dense_s", np.median)
                / column(group, "incremental_s", np.median),
                "incremental_max_s": column(group, "incremental_s", np.max),
                "dense_median_cpu_s": column(group, "dense_cpu_s", np.median),
                "incremental_median_cpu_s": column(group, "incremental_cpu_s", np.median),
                "all_agree": all(bool(r["agree"]) for r in group),
            }
        )
        runs.extend(group)
    print(
        f"\n{'V':>5} {'dense median s':>14} {'incr median s':>13} {'speed-up':>8} "
        f"{'incr max s':>10} {'dense cpu s':>11} {'incr cpu s':>10} {'agree':>5}"
    )
    for row in summary:
        print(
            f"{row['num_devices']:>5} {row['dense_median_s']:14.3f} "
            f"{row['incremental_median_s']:13.3f} {row['speedup']:7.1f}x "
            f"{row['incremental_max_s']:10.3f} {row['dense_median_cpu_s']:11.3f} "
            f"{row['incremental_median_cpu_s']:10.3f} {row['all_agree']!s:>5}"
        )
    write_csv(args.out / "runs.csv", runs)
    write_csv(args.out / "summary.csv", summary)
    print(f"wrote {args.out / 'runs.csv'} and {args.out / 'summary.csv'}")
    return 0 if all(bool(row["all_agree"]) for row in summary) else 1
