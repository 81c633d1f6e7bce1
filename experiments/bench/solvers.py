"""Benchmark of the P1 solvers (``fedcgd bench solvers``): times per V, vectorised vs loop.

Instances of :mod:`experiments.paper.solver_performance` with σ / (√b G) = 1; the exact solver's
MILPs run under ``--milp-time-limit-s`` (docs/evidence.md, "The paper's solver figure").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from experiments.analysis.tables import write_csv
from experiments.bench.common import SolverInstances
from experiments.bench.reference_solvers import coordinate_descent_loop, fscd_loop, greedy_loop
from experiments.paper.solver_performance import random_problem
from fedcgd_strategy.problem import SchedulingProblem
from fedcgd_strategy.solvers.coordinate_descent import coordinate_descent_schedule
from fedcgd_strategy.solvers.exact import exact_schedule
from fedcgd_strategy.solvers.fscd import fscd_schedule
from fedcgd_strategy.solvers.greedy import greedy_schedule
from fedcgd_strategy.solvers.result import ScheduleResult

RATIO = 1.0
ALPHA = 1.0
#: Printed line of a ``times.csv`` row and of a ``speedup.csv`` row.
TIME_LINE = (
    "{num_devices:>4} {method:>6} {median_time_s:10.4f} {mean_iterations:10.1f} "
    "{proven_optimal!s:>7}"
)
SPEEDUP_LINE = (
    "{method:>6} {vectorised_median_s:10.4f} {loop_median_s:10.3f} {speedup:8.0f}x {identical!s:>9}"
)


def bench_problem(num_devices: int, seed: int, instance: int) -> SchedulingProblem:
    """One benchmark instance (see the module docstring)."""
    rng = np.random.default_rng([seed, num_devices, instance, 7])
    return random_problem(num_devices, ALPHA, RATIO, rng)


def timed(func: Callable[[], ScheduleResult]) -> tuple[ScheduleResult, float]:
    """Run ``func`` once and return its result and wall time in seconds."""
    start = time.perf_counter()
    result = func()
    return result, time.perf_counter() - start


def call(
    func: Callable[..., ScheduleResult], problem: SchedulingProblem, seed: list[int]
) -> ScheduleResult:
    """Call a solver; coordinate descent gets a generator seeded with ``seed``."""
    if func in (coordinate_descent_schedule, coordinate_descent_loop):
        return func(problem, np.random.default_rng(seed))
    return func(problem)


@dataclass(frozen=True)
class Options(SolverInstances):
    """The options of ``fedcgd bench solvers`` (their defaults are the command's)."""

    speedup_devices: int
    speedup_instances: int
    milp_time_limit_s: float


def main(args: Options) -> int:
    """Run the benchmark, print two tables and write ``times.csv`` and ``speedup.csv``."""
    limit = args.milp_time_limit_s if args.milp_time_limit_s > 0 else None
    time_rows: list[dict[str, object]] = []
    print(f"{'V':>4} {'method':>6} {'median s':>10} {'mean iters':>10} {'proven':>7}")
    for num_devices in args.num_devices:
        records: dict[str, list[tuple[ScheduleResult, float]]] = {}
        for instance in range(args.instances):
            problem = bench_problem(num_devices, args.seed, instance)
            rng = np.random.default_rng([args.seed, num_devices, instance, 8])
            runs: dict[str, Callable[[], ScheduleResult]] = {
                "gs": partial(greedy_schedule, problem),
                "fscd": partial(fscd_schedule, problem),
                "cd": partial(coordinate_descent_schedule, problem, rng),
                "exact": partial(exact_schedule, problem, milp_time_limit_s=limit),
            }
            for method, func in runs.items():
                records.setdefault(method, []).append(timed(func))
        for method, results in records.items():
            proven = [r.lower_bound >= r.objective * (1 - 1e-9) for r, _ in results]
            row = {
                "num_devices": num_devices,
                "method": method,
                "instances": len(results),
                "median_time_s": float(np.median([s for _, s in results])),
                "mean_iterations": float(np.mean([r.iterations for r, _ in results])),
                "proven_optimal": sum(proven) if method == "exact" else "",
            }
            time_rows.append(row)
            print(TIME_LINE.format(**row), flush=True)
    write_csv(args.out / "times.csv", time_rows)

    speed_rows: list[dict[str, object]] = []
    pairs: dict[str, tuple[Callable[..., ScheduleResult], Callable[..., ScheduleResult]]] = {
        "gs": (greedy_schedule, greedy_loop),
        "fscd": (fscd_schedule, fscd_loop),
        "cd": (coordinate_descent_schedule, coordinate_descent_loop),
    }
    print(f"\nvectorised vs loop at V = {args.speedup_devices}")
    print(f"{'method':>6} {'vector s':>10} {'loop s':>10} {'speed-up':>9} {'identical':>9}")
    for method, (fast, slow) in pairs.items():
        fast_s, slow_s, same = [], [], True
        for instance in range(args.speedup_instances):
            problem = bench_problem(args.speedup_devices, args.seed, instance)
            seed = [args.seed, instance, 9]
            a, ta = timed(partial(call, fast, problem, seed))
            b, tb = timed(partial(call, slow, problem, seed))
            fast_s.append(ta)
            slow_s.append(tb)
            same = (
                same
                and bool(np.array_equal(a.selected, b.selected))
                and (a.objective == b.objective)
            )
        row = {
            "method": method,
            "num_devices": args.speedup_devices,
            "instances": args.speedup_instances,
            "vectorised_median_s": float(np.median(fast_s)),
            "loop_median_s": float(np.median(slow_s)),
            "speedup": float(np.median(slow_s) / np.median(fast_s)),
            "identical": same,
        }
        speed_rows.append(row)
        print(SPEEDUP_LINE.format(**row), flush=True)
    write_csv(args.out / "speedup.csv", speed_rows)
    print(f"wrote {args.out / 'times.csv'} and {args.out / 'speedup.csv'}")
    return 0
