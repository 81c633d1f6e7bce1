"""Round benchmark (``fedcgd bench round``): ``flwr run`` against the same rounds in one process.

Runs the paper's CIFAR-10 setting on random CIFAR-shaped files with ``flwr run`` for each
policy of ``--policies``, replays the rounds in this process
(:func:`experiments.bench.round_replay.replay_plain`, ``--threads`` intra-op threads; under load
``--threads 1`` is the robust baseline), and prints seconds per round of both without round 1,
their ratio and the phases. The replay must reach the run's accuracy every round. See
docs/performance.md.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from experiments.bench.common import (
    PHASES,
    TimedRuns,
    largest_accuracy_gap,
    progress,
    quantity_table,
    round_fields,
    write_random_cifar10,
    write_table,
)
from experiments.bench.round_replay import PlainRun, replay_plain
from experiments.paper import settings as paper_settings
from experiments.run.flwr_run import run_flwr
from fedcgd_task.settings import default_run_config
from run_files.results import read_metrics_lines

#: The paper's CIFAR-10 setting (:data:`experiments.paper.settings.PAPER_CIFAR10`), every round
#: evaluated so that the central evaluation is timed in each round.
PAPER_CIFAR10: dict[str, Any] = {**paper_settings.PAPER_CIFAR10, "eval-every": 1}
#: CPUs per ClientApp in the simulation (two at a time on 2 cores).
CPUS_PER_CLIENT = 1
#: Smallest plain time (s) a ratio is printed for (below, the ratio is noise).
MIN_RATIO_BASE_S = 1e-3


@dataclass(frozen=True)
class FlwrRun:
    """One ``flwr run``: its policy, wall time (start to exit) and ``metrics.jsonl`` lines."""

    policy: str
    total_s: float
    metrics: list[dict[str, Any]]


def run_config_for(policy: str, data_dir: Path, result_dir: Path, rounds: int, seed: int) -> dict:
    """The ``--run-config`` overrides of one benchmark run."""
    return {
        **PAPER_CIFAR10,
        "data-dir": str(data_dir),
        "result-dir": str(result_dir),
        "num-server-rounds": rounds,
        "policy": policy,
        "seed": seed,
    }


def run_simulation(
    overrides: Mapping[str, Any], flwr_home: Path, log_path: Path
) -> tuple[int, float, str]:
    """Run ``flwr run`` with ``overrides`` (log to ``log_path``): exit code, seconds, log's end."""
    start = time.perf_counter()
    with open(log_path, "w") as log_fh, contextlib.redirect_stdout(log_fh):
        proc = run_flwr(
            overrides,
            num_supernodes=int(overrides["num-devices"]),
            cpus_per_client=CPUS_PER_CLIENT,
            flwr_home=flwr_home,
        )
    tail = "".join(proc.stdout.splitlines(keepends=True)[-40:])
    return proc.returncode, time.perf_counter() - start, tail


#: The heads of the printed table's numbers.
NUMBERS = f"{'flwr s':>8} {'plain s':>8} {'flwr/plain':>10}"


@dataclass(frozen=True)
class Row:
    """One line of the table: a quantity per round (mean over rounds 2..R) both ways, a note."""

    policy: str
    quantity: str
    flwr_s: float | None
    plain_s: float | None
    note: str

    @property
    def ratio(self) -> float | None:
        """Return flwr / plain, when both are known and plain takes at least 1 ms."""
        if self.flwr_s is None or self.plain_s is None or self.plain_s < MIN_RATIO_BASE_S:
            return None
        return self.flwr_s / self.plain_s

    def cells(self) -> tuple[str, str, str]:
        """Its line of the printed table (:data:`NUMBERS`)."""
        numbers = (_fmt(self.flwr_s), _fmt(self.plain_s), _fmt(self.ratio, "10.2f"))
        return self.policy, self.quantity, " ".join(numbers)


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values)) if values else float("nan")


def build_rows(run: FlwrRun, plain: PlainRun) -> list[Row]:
    """Compare one policy's run and replay, per round, leaving out round 1.

    A ``flwr run`` round's seconds are the differences of consecutive ``wall_time_s``.
    """
    lines = sorted(run.metrics, key=lambda m: int(m["round"]))
    walls = [float(m["wall_time_s"]) for m in lines]
    steady = lines[1:]
    per_round = [b - a for a, b in itertools.pairwise(walls)]
    flwr = {key: _mean([float(m[key]) for m in steady]) for key in PHASES}
    prounds = plain.rounds[1:]
    p = {
        field: _mean([float(getattr(r, field)) for r in prounds])
        for field in (
            "channel_s",
            "sigma_s",
            "train_s",
            "train_local_s",
            "aggregate_s",
            "eval_s",
            "round_s",
        )
    }
    flwr_round = _mean(per_round)
    flwr_known = sum(flwr[k] for k in PHASES if k != "client_train_s")
    plain_known = sum(p[k] for k in ("channel_s", "sigma_s", "train_s", "aggregate_s", "eval_s"))
    pol = run.policy
    return [
        Row(
            pol,
            "seconds per round",
            flwr_round,
            p["round_s"],
            "flwr: diff of wall_time_s; plain: whole replayed round",
        ),
        Row(
            pol,
            "query / sigma-hat phase",
            flwr["query_s"],
            p["sigma_s"],
            "query_s (query.stats round trip) vs sigma-hat on every available device",
        ),
        Row(
            pol,
            "schedule",
            flwr["schedule_s"],
            None,
            "schedule_s; plain takes the schedule from metrics.jsonl",
        ),
        Row(
            pol,
            "training phase",
            flwr["train_phase_s"],
            p["train_s"],
            "train_phase_s (send to last reply) vs training of the scheduled devices",
        ),
        Row(
            pol,
            "  of which SGD steps (sum over devices)",
            flwr["client_train_s"],
            p["train_local_s"],
            "client_train_s vs train_local calls",
        ),
        Row(
            pol,
            "aggregate",
            flwr["aggregate_s"],
            p["aggregate_s"],
            "aggregate_s (FedAvg + G-hat update) vs FedAvg",
        ),
        Row(pol, "central evaluation", flwr["eval_s"], p["eval_s"], "eval_s vs evaluate()"),
        Row(
            pol,
            "rest (unaccounted)",
            flwr_round - flwr_known,
            p["round_s"] - plain_known,
            "seconds per round minus the phases above (plain: includes channel replay)",
        ),
        Row(
            pol,
            "whole run incl. start-up",
            run.total_s,
            plain.setup_s + sum(r.round_s for r in plain.rounds),
            "flwr run from SuperLink start to exit vs plain set-up + all rounds",
        ),
    ]


def _fmt(value: float | None, spec: str = "8.3f") -> str:
    return " " * (len(format(0.0, spec)) - 1) + "-" if value is None else format(value, spec)


def write_outputs(
    out: Path,
    rows: Sequence[Row],
    runs: Sequence[FlwrRun],
    plains: Sequence[PlainRun],
    settings: Mapping[str, Any],
) -> tuple[Path, Path]:
    """Write ``table.csv`` and ``table.json`` (the rows plus per-round data) under ``out``."""
    header = ["policy", "quantity", "flwr_s", "plain_s", "flwr_over_plain", "note"]
    table = [[r.policy, r.quantity.strip(), r.flwr_s, r.plain_s, r.ratio, r.note] for r in rows]
    payload = {
        "settings": dict(settings),
        "rows": [{**asdict(r), "quantity": r.quantity.strip(), "ratio": r.ratio} for r in rows],
        "flwr_runs": [
            {
                "policy": run.policy,
                "total_s": run.total_s,
                "rounds": round_fields(run.metrics, PHASES),
            }
            for run in runs
        ],
        "plain_runs": [
            {
                "policy": p.policy,
                "threads": p.threads,
                "setup_s": p.setup_s,
                "rounds": [asdict(r) for r in p.rounds],
            }
            for p in plains
        ],
    }
    return write_table(out, header, table, payload)


@dataclass(frozen=True)
class Options(TimedRuns):
    """The options of ``fedcgd bench round`` (their defaults are the command's)."""

    threads: int
    policies: str


def main(args: Options) -> int:
    """Run the benchmark; return the exit code (0 on success)."""
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-round-"))
    data_dir = tmp / "data"
    runs: list[FlwrRun] = []
    plains: list[PlainRun] = []
    rows: list[Row] = []
    accuracy_gaps: dict[str, float] = {}
    phases: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        progress(f"writing random CIFAR-10 files (50,000 + 10,000 images) to {data_dir}", phases)
        write_random_cifar10(data_dir, args.seed)
        progress(f"data written in {time.perf_counter() - t0:.1f} s", phases)
        defaults = default_run_config()
        for policy in policies:
            result_dir = tmp / f"run-{policy}"
            overrides = run_config_for(policy, data_dir, result_dir, args.rounds, args.seed)
            log_path = out / f"flwr-{policy}.log"
            progress(f"{policy}: flwr run, {args.rounds} rounds (log: {log_path})", phases)
            code, total_s, tail = run_simulation(overrides, tmp / f"flwr-home-{policy}", log_path)
            if code != 0 or not (result_dir / "metrics.jsonl").exists():
                progress(
                    f"{policy}: flwr run failed (exit code {code}); last lines:\n{tail}", phases
                )
                return code or 1
            metrics = read_metrics_lines(result_dir)
            shutil.copyfile(result_dir / "metrics.jsonl", out / f"metrics-{policy}.jsonl")
            if len(metrics) != args.rounds:
                progress(
                    f"{policy}: metrics.jsonl has {len(metrics)} rounds, not {args.rounds}", phases
                )
                return 1
            run = FlwrRun(policy=policy, total_s=total_s, metrics=metrics)
            runs.append(run)
            progress(f"{policy}: flwr run done in {total_s:.1f} s", phases)

            progress(f"{policy}: plain PyTorch replay ({args.threads} torch thread(s))", phases)
            plain = replay_plain({**defaults, **overrides}, metrics, args.threads)
            plains.append(plain)
            accuracies = [r.accuracy for r in plain.rounds]
            accuracy_gaps[policy] = largest_accuracy_gap(metrics, accuracies)
            replay_s = plain.setup_s + sum(r.round_s for r in plain.rounds)
            progress(
                f"{policy}: plain replay done in {replay_s:.1f} s; largest test-accuracy "
                f"difference to the run {accuracy_gaps[policy]:.4f}",
                phases,
            )
            rows += build_rows(run, plain)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    settings = {
        **PAPER_CIFAR10,
        "rounds": args.rounds,
        "seed": args.seed,
        "policies": policies,
        "plain_threads": args.threads,
        "cpus_per_client": CPUS_PER_CLIENT,
        "client_threads": 1,
        "cpu_count": os.cpu_count(),
        "timed_rounds": f"2..{args.rounds}",
        "max_accuracy_difference": accuracy_gaps,
        "phases": phases,
    }
    csv_path, json_path = write_outputs(out, rows, runs, plains, settings)
    print()
    print(
        f"Per-round means over rounds 2..{args.rounds} (round 1 left out), seed {args.seed}; "
        f"flwr: {CPUS_PER_CLIENT} CPU and 1 torch thread per ClientApp on {os.cpu_count()} "
        f"cores; plain: one process, {args.threads} torch thread(s)."
    )
    for run in runs:
        steady = run.metrics[1:]
        print(
            f"  {run.policy}: mean available {_mean([m['num_available'] for m in steady]):.1f}, "
            f"mean scheduled {_mean([m['num_scheduled'] for m in steady]):.1f}, "
            f"largest accuracy difference flwr vs plain {accuracy_gaps[run.policy]:.4f}"
        )
    print()
    print(quantity_table("policy", 12, NUMBERS, [r.cells() for r in rows]))
    print()
    progress(f"wrote {csv_path} and {json_path}", phases)
    return 0
