"""``python -m benchmarks round``: ``flwr run`` against the same rounds in one plain process.

What it measures: docs/performance.md, "A round against its compute".
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from benchmarks import app
from benchmarks.common import Rounds, Seed, compared, progress, replay, write_table
from experiments.paper.settings import PAPER_CIFAR10
from experiments.run.flwr_run import run_flwr
from fedcgd_config.settings import default_run_config
from server_app.run_folder.results import read_metrics_lines

#: CPUs per ClientApp in the simulation (two at a time on 2 cores).
CPUS_PER_CLIENT = 1


def write_random_cifar10(root: Path, seed: int) -> None:
    """Write ``cifar-10-batches-py`` of random pixels in the official format (6 batches of 10,000
    images, each class equally often)."""  # noqa: D205, D209
    rng = np.random.default_rng([seed, 0xC1FA])
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    files = [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]
    for name in files:
        labels = rng.permutation(np.repeat(np.arange(10), 1000))
        data = rng.integers(0, 256, size=(labels.size, 3 * 32 * 32), dtype=np.uint8)
        entry = {"batch_label": name, "labels": labels.tolist(), "data": data}
        (folder / name).write_bytes(pickle.dumps(entry))


@app.command("round")
def main(
    policies: str = "fedcgd-fscd,bc",
    rounds: Rounds = 5,
    threads: Annotated[int, typer.Option(min=1, help="torch threads of the plain process")] = 2,
    seed: Seed = 0,
    out: Path = Path("results/bench_round"),
) -> int:
    """Seconds per round: flwr run against the same computation in one plain process."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    gaps: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-round-") as folder:
        tmp = Path(folder)
        progress(f"writing random CIFAR-10 files to {tmp / 'data'}", "bench_round")
        write_random_cifar10(tmp / "data", seed)
        for policy in [p.strip() for p in policies.split(",") if p.strip()]:
            overrides = {
                **PAPER_CIFAR10, "eval-every": 1,  # the central evaluation timed in each round
                "data-dir": str(tmp / "data"), "result-dir": str(tmp / policy),
                "num-server-rounds": rounds, "policy": policy, "seed": seed,
            }  # fmt: skip
            progress(f"{policy}: flwr run, {rounds} rounds", "bench_round")
            started = time.perf_counter()
            with open(out / f"flwr-{policy}.log", "w") as log, contextlib.redirect_stdout(log):
                proc = run_flwr(
                    overrides,
                    num_supernodes=int(overrides["num-devices"]),
                    cpus_per_client=CPUS_PER_CLIENT,
                    flwr_home=tmp / f"flwr-home-{policy}",
                )
            total_s = time.perf_counter() - started
            metrics = read_metrics_lines(tmp / policy) if proc.returncode == 0 else []
            if len(metrics) != rounds:
                tail = "".join(proc.stdout.splitlines(keepends=True)[-40:])
                progress(f"{policy}: flwr run failed ({proc.returncode}):\n{tail}", "bench_round")
                return proc.returncode or 1
            progress(f"{policy}: replay ({threads} torch thread(s))", "bench_round")
            plain = replay({**default_run_config(), **overrides}, metrics, threads)
            gaps[policy] = plain.accuracy_gap
            rows += compared(policy, metrics, plain)
            whole = plain.setup_s + sum(plain.parts["round_s"])
            rows.append(
                {"group": policy, "quantity": "whole run", "engine_s": total_s, "plain_s": whole}
            )
    print(
        f"\nMeans over rounds 2..{rounds}, seed {seed}; flwr: {CPUS_PER_CLIENT} CPU "
        f"and 1 torch thread per ClientApp on {os.cpu_count()} cores; plain: one process, "
        f"{threads} torch thread(s); largest accuracy difference {gaps}.\n"
    )
    settings = {**PAPER_CIFAR10, "rounds": rounds, "seed": seed, "threads": threads}
    write_table(out, rows, {**settings, "max_accuracy_gap": gaps}, "table")
    return 0
