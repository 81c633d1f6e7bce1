"""Rounds at scale in-process (``fedcgd bench scale``): seconds per phase and memory at V devices.

One ``fedcgd inprocess`` process per V of ``--devices`` (and per ``--per-device`` /
``--compare-with`` variant) on generated MNIST-1D; medians of rounds 2..R of each phase, peak
resident memory (``wait4``) and memory after round 2 and at the end (docs/performance.md, "At
scale").
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.analysis.tables import text_table
from experiments.bench.common import write_table
from experiments.bench.inprocess import engine_command
from experiments.run.run_config import format_run_config
from run_files.results import read_metrics_lines

#: Phases read from each round's metrics line.
PHASES = ("query_s", "schedule_s", "train_phase_s", "eval_s")
#: Seconds between two samples of the run's resident memory.
SAMPLE_S = 0.1


def log(text: str) -> None:
    """Progress on stderr."""
    print(f"[bench_scale] {text}", file=sys.stderr, flush=True)


def resident_mib(pid: int) -> float | None:
    """The process's resident memory (VmRSS) in MiB, or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def rounds_done(metrics_path: Path) -> int:
    """Complete lines of ``metrics.jsonl`` so far (one per round)."""
    try:
        return metrics_path.read_bytes().count(b"\n")
    except OSError:
        return 0


def run_one(project: Path, overrides: dict[str, Any], per_device: bool, log_path: Path) -> dict:
    """Run one in-process run; return its per-round medians and memory figures."""
    words = engine_command(project)
    if words is None:
        raise RuntimeError(f"{project}: not a checkout of this project (no in-process engine)")
    command = [sys.executable, *words]
    command += ["--run-config", format_run_config(overrides)]
    if per_device:
        command.append("--per-device")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    metrics_path = Path(overrides["result-dir"]) / "metrics.jsonl"
    with log_path.open("w") as out:
        proc = subprocess.Popen(command, cwd=project, stdout=out, stderr=subprocess.STDOUT, env=env)
        by_round: dict[int, float] = {}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                rss = resident_mib(proc.pid)
                if rss is not None:
                    done = rounds_done(metrics_path)
                    by_round[done] = max(by_round.get(done, 0.0), rss)
                stop.wait(SAMPLE_S)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        stop.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log_path.read_text()[-2000:]
        raise RuntimeError(f"the run in {project} failed ({proc.returncode}):\n{tail}")
    lines = read_metrics_lines(Path(overrides["result-dir"]))
    walls = [float(x["wall_time_s"]) for x in lines]
    later = lines[1:]
    result = {
        "round_s": statistics.median(b - a for a, b in itertools.pairwise(walls)),
        "queried": statistics.median(int(x["num_available"]) for x in later),
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "rss_after_round_2_mib": by_round.get(2),
        "rss_at_end_mib": by_round.get(max(by_round)) if by_round else None,
    }
    for phase in PHASES:
        result[phase] = statistics.median(float(x.get(phase) or 0.0) for x in later)
    return result


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
    here = Path(__file__).resolve().parents[2]
    variants: list[tuple[str, Path, bool]] = [("cohorts", here, False)]
    if args.per_device:
        variants.append(("per device", here, True))
    if args.compare_with is not None:
        other = args.compare_with.resolve()
        if engine_command(other) is None:
            print(f"error: --compare-with {other}: not a checkout of this project", file=sys.stderr)
            return 2
        variants.append(("other checkout", other, False))
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for v in args.devices:
        for name, project, per_device in variants:
            result_dir = out / f"V{v}-{name.replace(' ', '-')}-{time.time_ns()}"
            overrides = {
                "dataset": "mnist1d",
                "mnist1d-samples": args.samples,
                "num-devices": v,
                "num-server-rounds": args.rounds,
                "data-dir": str(out / "data"),
                "result-dir": str(result_dir),
            }
            log(f"V = {v}, {name} ({project}) ...")
            result = run_one(project, overrides, per_device, out / f"{result_dir.name}.log")
            rows.append({"V": v, "variant": name, **result})
            log(f"  {result['round_s']:.2f} s a round, peak {result['peak_rss_mib']:.0f} MiB")
    header = ["V", "variant", "round_s", "queried", *PHASES, "peak_rss_mib"]
    header += ["rss_after_round_2_mib", "rss_at_end_mib"]
    settings = {"rounds": args.rounds, "samples": args.samples, "cpu_count": os.cpu_count()}
    table = [[row.get(h) for h in header] for row in rows]
    write_table(out, header, table, {"settings": settings, "rows": rows})

    def cell(value: object) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    widths = [max(len(h), *(len(cell(row.get(h))) for row in rows)) for h in header]
    lines = [
        "  ".join(cell(row.get(h)).rjust(w) for h, w in zip(header, widths, strict=True))
        for row in rows
    ]
    print(text_table("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)), lines))
    log(f"wrote {out / 'table.csv'} and {out / 'table.json'}")
    return 0
