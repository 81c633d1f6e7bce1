"""In-process round benchmark (``fedcgd bench inprocess``): the engine against its arithmetic alone.

Runs ``fedcgd inprocess`` ``--repeats`` times (alternating with ``--compare-with`` another
checkout) and the bare loop (:func:`experiments.bench.bare_loop.bare_rounds`: the same set-up,
devices, σ̂, τ SGD steps, FedAvg and evaluation, without messages or files) on MNIST-1D
(:data:`SETTING`); prints the medians of seconds per round (rounds 2..R), their ratio, start-up
and import costs, and checks that the bare loop reaches the run's accuracy every round. See
docs/performance.md.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.bench.bare_loop import BareRun, bare_rounds
from experiments.bench.common import (
    PHASES,
    TimedRuns,
    largest_accuracy_gap,
    load_average,
    progress,
    quantity_table,
    round_fields,
    write_table,
)
from experiments.run.run_config import format_run_config
from fedcgd_task.settings import default_run_config
from run_files.results import read_metrics_lines

#: The benchmark's run config (the data and result folders, rounds, τ, policy, deadline and
#: seed are added per run): the paper's device setting on MNIST-1D with its 1-D CNN.
SETTING: dict[str, Any] = {
    "dataset": "mnist1d",
    "model": "cnn1d",
    "num-devices": 64,
    "channel.availability-prob": 0.3,
    "batch-size": 32,
    "eval-every": 1,
}
#: Statements timed in a fresh interpreter (label -> code).
IMPORT_STATEMENTS: dict[str, str] = {
    "import torch": "import torch",
    "import torch.optim": "import torch.optim",
    "import torch + first torch.optim.SGD": (
        "import torch; torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)"
    ),
}
#: The name of this checkout in the table.
THIS = "this"
#: The name of the ``--compare-with`` checkout in the table.
OTHER = "other"


def log(text: str) -> None:
    """One progress line with the machine's load average."""
    progress(text, tag="bench_inprocess")


@dataclass(frozen=True)
class InProcessRun:
    """One ``fedcgd inprocess`` run: its checkout, the process's wall time, its metrics lines."""

    checkout: str
    process_s: float
    metrics: list[dict[str, Any]]

    @property
    def rounds_s(self) -> float:
        """Rounds 2..R: last minus first ``wall_time_s``."""
        walls = [float(m["wall_time_s"]) for m in self.metrics]
        return walls[-1] - walls[0]

    @property
    def per_round_s(self) -> float:
        """Seconds per round over rounds 2..R."""
        return self.rounds_s / (len(self.metrics) - 1)

    @property
    def startup_s(self) -> float:
        """Everything but rounds 2..R: imports, data, set-up, round 1 and the result files."""
        return self.process_s - self.rounds_s

    def phase_medians(self) -> dict[str, float]:
        """Median over rounds 2..R of each :data:`PHASES` column."""
        steady = self.metrics[1:]
        return {k: statistics.median(float(m[k]) for m in steady) for k in PHASES}


def run_config_for(
    data_dir: Path, result_dir: Path, rounds: int, local_steps: int, policy: str, deadline_s: float,
    seed: int,
) -> dict[str, Any]:  # fmt: skip
    """The ``--run-config`` overrides of one benchmark run."""
    return {
        **SETTING,
        "data-dir": str(data_dir),
        "result-dir": str(result_dir),
        "num-server-rounds": rounds,
        "local-steps": local_steps,
        "policy": policy,
        "channel.deadline-s": deadline_s,
        "seed": seed,
    }


#: How a checkout's in-process engine is started: (the module file of its layout, the
#: interpreter's arguments), for this layout and the two earlier ones ``--compare-with`` meets.
ENGINE_COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("experiments/cli/__main__.py", ("-m", "experiments.cli", "inprocess")),
    ("experiments/run/inprocess.py", ("-m", "experiments.run.inprocess")),
    ("experiments/inprocess.py", ("-m", "experiments.inprocess")),
)


def engine_command(project: Path) -> list[str] | None:
    """The interpreter's arguments that run the in-process engine of the checkout ``project``.

    None: ``project`` is not a checkout of this project.
    """
    for marker, words in ENGINE_COMMANDS:
        if (project / marker).is_file():
            return list(words)
    return None


def run_inprocess_process(
    project: Path, overrides: Mapping[str, Any], checkout: str, log_path: Path
) -> InProcessRun:
    """Run the in-process engine (:func:`engine_command`) in ``project``'s folder; time it all.

    Raises
    ------
    RuntimeError
        With the end of the log when the run fails.

    """
    words = engine_command(project)
    if words is None:
        raise RuntimeError(f"{project}: not a checkout of this project (no in-process engine)")
    command = [sys.executable, *words]
    command += ["--run-config", format_run_config(overrides)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=project, capture_output=True, text=True, env=env)
    process_s = time.perf_counter() - started
    log_path.write_text(proc.stdout + proc.stderr)
    result_dir = Path(str(overrides["result-dir"]))
    if proc.returncode != 0 or not (result_dir / "metrics.jsonl").exists():
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise RuntimeError(f"{checkout}: the in-process run failed ({proc.returncode}):\n{tail}")
    return InProcessRun(checkout, process_s, read_metrics_lines(result_dir))


def time_statement(code: str, cwd: Path) -> float:
    """Wall seconds of ``python -c code`` in a fresh interpreter."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - started


#: The heads of the printed table's numbers.
NUMBERS = f"{'median':>9} {'min':>9} {'max':>9}"


@dataclass(frozen=True)
class Row:
    """One line of the table: a quantity's median, min and max over the repeats."""

    checkout: str
    quantity: str
    values: list[float]

    @property
    def median(self) -> float:
        """Median over the repeats."""
        return float(statistics.median(self.values))

    def cells(self) -> tuple[str, str, str]:
        """Its line of the printed table: median, min and max (:data:`NUMBERS`)."""
        numbers = f"{self.median:9.4f} {min(self.values):9.4f} {max(self.values):9.4f}"
        return self.checkout, self.quantity, numbers


def build_rows(
    runs: Mapping[str, Sequence[InProcessRun]],
    bares: Sequence[BareRun],
    imports: Mapping[str, Sequence[float]],
) -> list[Row]:
    """The table's rows: per checkout, then the import costs (see the module docstring)."""
    rows: list[Row] = []
    bare = [b.per_round_s for b in bares]
    for checkout, its_runs in runs.items():
        per_round = [r.per_round_s for r in its_runs]
        ratios = [a / b for a, b in zip(per_round, bare, strict=True)]
        rows += [
            Row(checkout, "in-process s/round", per_round),
            Row(checkout, "bare loop s/round", bare),
            Row(checkout, "in-process / bare", ratios),
            Row(checkout, "process wall s", [r.process_s for r in its_runs]),
            Row(checkout, "start-up s (wall - rounds 2..R)", [r.startup_s for r in its_runs]),
        ]
        for phase in PHASES:
            rows.append(Row(checkout, f"  {phase}", [r.phase_medians()[phase] for r in its_runs]))
    rows += [
        Row(THIS, "  bare sigma-hat s", [statistics.fmean(b.sigma_s[1:]) for b in bares]),
        Row(THIS, "  bare SGD steps s", [statistics.fmean(b.train_s[1:]) for b in bares]),
        Row(THIS, "  bare FedAvg s", [statistics.fmean(b.aggregate_s[1:]) for b in bares]),
        Row(THIS, "  bare evaluation s", [statistics.fmean(b.eval_s[1:]) for b in bares]),
    ]
    rows += [Row("python", label, list(values)) for label, values in imports.items()]
    return rows


def write_outputs(
    out: Path,
    rows: Sequence[Row],
    runs: Mapping[str, Sequence[InProcessRun]],
    bares: Sequence[BareRun],
    settings: Mapping[str, Any],
) -> tuple[Path, Path]:
    """Write ``table.csv`` (medians and values) and ``table.json`` (plus per-round data)."""
    table: list[list[Any]] = []
    for r in rows:
        low, high = min(r.values), max(r.values)
        table.append([r.checkout, r.quantity.strip(), r.median, low, high, json.dumps(r.values)])
    payload = {
        "settings": dict(settings),
        "rows": [
            {
                "checkout": r.checkout,
                "quantity": r.quantity.strip(),
                "median": r.median,
                "values": r.values,
            }
            for r in rows
        ],
        "runs": {
            checkout: [
                {
                    "process_s": r.process_s,
                    "rounds": round_fields(r.metrics, PHASES),
                }
                for r in its_runs
            ]
            for checkout, its_runs in runs.items()
        },
        "bare_runs": [b.__dict__ for b in bares],
    }
    header = ["checkout", "quantity", "median", "min", "max", "values"]
    return write_table(out, header, table, payload)


@dataclass(frozen=True)
class Options(TimedRuns):
    """The options of ``fedcgd bench inprocess`` (their defaults are the command's)."""

    repeats: int
    local_steps: int
    policy: str
    deadline_s: float
    compare_with: Path | None


def main(args: Options) -> int:
    """Run the benchmark; return the exit code (0 on success, 2 for a bad ``--compare-with``)."""
    this = Path(__file__).resolve().parents[2]
    projects = {THIS: this}
    if args.compare_with is not None:
        other = args.compare_with.resolve()
        if engine_command(other) is None:
            print(f"error: --compare-with {other}: not a checkout of this project", file=sys.stderr)
            return 2
        projects[OTHER] = other
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-inprocess-"))
    data_dir = tmp / "data"
    runs: dict[str, list[InProcessRun]] = {name: [] for name in projects}
    bares: list[BareRun] = []
    gaps: list[float] = []
    imports: dict[str, list[float]] = {label: [] for label in IMPORT_STATEMENTS}
    try:
        from fedcgd_task.datasets import load_test_set, load_train_set
        from fedcgd_task.settings import TaskSettings

        defaults = default_run_config()
        log(f"generating MNIST-1D into {data_dir}")
        first = run_config_for(
            data_dir, tmp / "r", args.rounds, args.local_steps, args.policy, args.deadline_s,
            args.seed,
        )  # fmt: skip
        task = TaskSettings.from_run_config({**defaults, **first})
        load_train_set(task), load_test_set(task)
        for repeat in range(args.repeats):
            order = list(projects) if repeat % 2 == 0 else list(reversed(projects))
            for name in order:
                result_dir = tmp / f"run-{name}-{repeat}"
                overrides = {**first, "result-dir": str(result_dir)}
                log(f"repeat {repeat + 1}/{args.repeats}: {name} in-process, {args.rounds} rounds")
                log_path = out / f"inprocess-{name}-{repeat}.log"
                run = run_inprocess_process(projects[name], overrides, name, log_path)
                runs[name].append(run)
                log(f"  {run.per_round_s:.4f} s/round, process {run.process_s:.2f} s")
            reference = runs[THIS][-1]
            log(f"repeat {repeat + 1}/{args.repeats}: bare loop")
            bare = bare_rounds({**defaults, **first}, reference.metrics)
            bares.append(bare)
            gaps.append(largest_accuracy_gap(reference.metrics, bare.accuracy))
            log(f"  {bare.per_round_s:.4f} s/round, accuracy difference {gaps[-1]:.3g}")
            for label, code in IMPORT_STATEMENTS.items():
                imports[label].append(time_statement(code, this))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rows = build_rows(runs, bares, imports)
    steady = runs[THIS][0].metrics[1:]
    settings = {
        **SETTING,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "seed": args.seed,
        "local-steps": args.local_steps,
        "policy": args.policy,
        "channel.deadline-s": args.deadline_s,
        "checkouts": {name: str(path) for name, path in projects.items()},
        "mean_available": float(statistics.fmean(m["num_available"] for m in steady)),
        "mean_scheduled": float(statistics.fmean(m["num_scheduled"] for m in steady)),
        "max_accuracy_difference": max(gaps),
        "cpu_count": os.cpu_count(),
        "load_1min_end": load_average(),
    }
    csv_path, json_path = write_outputs(out, rows, runs, bares, settings)
    print()
    print(
        f"Rounds 2..{args.rounds} of {args.repeats} run(s) per checkout, seed {args.seed}, "
        f"tau = {args.local_steps}, {args.policy}: mean available "
        f"{settings['mean_available']:.1f}, mean scheduled {settings['mean_scheduled']:.1f}; "
        f"largest accuracy difference in-process vs bare {max(gaps):.3g}."
    )
    print()
    print(quantity_table("checkout", 8, NUMBERS, [r.cells() for r in rows]))
    print()
    log(f"wrote {csv_path} and {json_path}")
    return 0
