"""``python -m benchmarks inprocess``: the in-process engine against its arithmetic in a bare loop.

What it measures: docs/performance.md, "A round in-process against its arithmetic".
"""

from __future__ import annotations

import statistics
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any

import typer

from benchmarks import app
from benchmarks.common import (
    Checkout,
    Rounds,
    Seed,
    checkouts,
    compared,
    per_round_s,
    progress,
    replay,
    run_engine,
    with_ratio,
    write_table,
)
from fedcgd_config.settings import TaskSettings, default_run_config
from fedcgd_task.datasets import load_test_set, load_train_set

#: The benchmark's run config (the data and result folders, rounds, τ, policy, deadline and
#: seed are added per run): the paper's device setting on MNIST-1D with its 1-D CNN.
SETTING: dict[str, Any] = {
    "dataset": "mnist1d", "model": "cnn1d", "num-devices": 64, "channel.availability-prob": 0.3,
    "batch-size": 32, "eval-every": 1,
}  # fmt: skip


@app.command("inprocess")
def main(
    rounds: Rounds = 20,
    seed: Seed = 0,
    out: Path = Path("results/bench-inprocess"),
    repeats: Annotated[int, typer.Option(min=1, help="runs per checkout")] = 3,
    local_steps: Annotated[int, typer.Option(help="tau")] = 5,
    policy: str = "fedcgd-fscd",
    deadline_s: Annotated[float, typer.Option(help="channel.deadline-s")] = 0.02,
    compare_with: Checkout = None,
) -> int:
    """Seconds per round: the in-process engine against its arithmetic in a bare loop."""
    projects = checkouts(compare_with)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    settings = {
        **SETTING, "num-server-rounds": rounds, "local-steps": local_steps, "policy": policy,
        "channel.deadline-s": deadline_s, "seed": seed,
    }  # fmt: skip
    values: dict[tuple[str, str], list[tuple[float, float | None]]] = defaultdict(list)
    gaps = []
    with tempfile.TemporaryDirectory(prefix="bench-inprocess-") as tmp:
        settings["data-dir"] = str(Path(tmp) / "data")
        task = TaskSettings.from_run_config({**default_run_config(), **settings})
        load_train_set(task), load_test_set(task)  # generated before the clocks start
        for repeat in range(repeats):
            order = list(projects) if repeat % 2 == 0 else list(reversed(projects))
            runs = {}
            for name in order:
                progress(f"repeat {repeat + 1}/{repeats}: {name}, in-process", "inprocess")
                overrides = {**settings, "result-dir": str(Path(tmp) / f"{name}-{repeat}")}
                runs[name] = run_engine(projects[name], overrides, out / f"{name}-{repeat}.log")
                progress(f"  {per_round_s(runs[name].metrics):.4f} s a round", "inprocess")
            metrics = runs["this"].metrics
            plain = replay({**default_run_config(), **settings}, metrics)
            gaps.append(plain.accuracy_gap)
            progress(f"  bare: {plain.mean('round_s'):.4f} s a round", "inprocess")
            for name, run in runs.items():
                for row in compared(name, run.metrics, plain):
                    values[(name, row["quantity"])].append((row["engine_s"], row["plain_s"]))
                startup = run.process_s - per_round_s(run.metrics) * (len(run.metrics) - 1)
                values[(name, "start-up (process - rounds 2..R)")].append((startup, None))
    rows = []
    for (name, quantity), pairs in values.items():
        plain_s = [b for _, b in pairs if b is not None]
        engine_s = statistics.median(a for a, _ in pairs)
        bare = statistics.median(plain_s) if plain_s else None
        rows.append(with_ratio({"group": name, "quantity": quantity, "engine_s": engine_s,
                                "plain_s": bare}))  # fmt: skip
    print(
        f"\nMedians over {repeats} run(s) of rounds 2..{rounds}, tau = "
        f"{local_steps}, {policy}; largest accuracy difference to the bare replay "
        f"{max(gaps):.3g}.\n"
    )
    write_table(out, rows, {**settings, "repeats": repeats, "max_accuracy_gap": max(gaps)}, "table")
    return 0
