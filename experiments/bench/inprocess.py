"""In-process round benchmark (``fedcgd bench inprocess``): the engine against its arithmetic alone.

Runs ``fedcgd inprocess`` ``--repeats`` times (alternating with ``--compare-with`` another
checkout) and replays each of this checkout's runs bare (:func:`experiments.bench.common.replay`)
on MNIST-1D (:data:`SETTING`); prints the medians over the repeats of each phase's seconds per
round (rounds 2..R) both ways and the start-up, and checks that the replay reaches the run's
accuracy every round. See docs/performance.md.
"""

from __future__ import annotations

import statistics
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.bench.common import (
    accuracy_gap,
    checkouts,
    compared,
    progress,
    replay,
    run_engine,
    with_ratio,
    write_table,
)
from fedcgd_task.datasets import load_test_set, load_train_set
from fedcgd_task.settings import TaskSettings, default_run_config

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


@dataclass(frozen=True)
class Options:
    """The options of ``fedcgd bench inprocess`` (their defaults are the command's)."""

    rounds: int
    seed: int
    out: Path
    repeats: int
    local_steps: int
    policy: str
    deadline_s: float
    compare_with: Path | None


def main(args: Options) -> int:
    """Run the benchmark; return the exit code (0 on success, 2 for a bad ``--compare-with``)."""
    projects = checkouts(args.compare_with)
    if projects is None:
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    settings = {
        **SETTING,
        "num-server-rounds": args.rounds,
        "local-steps": args.local_steps,
        "policy": args.policy,
        "channel.deadline-s": args.deadline_s,
        "seed": args.seed,
    }
    values: dict[tuple[str, str], list[tuple[float, float | None]]] = defaultdict(list)
    gaps = []
    with tempfile.TemporaryDirectory(prefix="bench-inprocess-") as tmp:
        settings["data-dir"] = str(Path(tmp) / "data")
        task = TaskSettings.from_run_config({**default_run_config(), **settings})
        load_train_set(task), load_test_set(task)  # generated before the clocks start
        for repeat in range(args.repeats):
            order = list(projects) if repeat % 2 == 0 else list(reversed(projects))
            runs = {}
            for name in order:
                progress(f"repeat {repeat + 1}/{args.repeats}: {name}, in-process", "inprocess")
                overrides = {**settings, "result-dir": str(Path(tmp) / f"{name}-{repeat}")}
                runs[name] = run_engine(projects[name], overrides, out / f"{name}-{repeat}.log")
                progress(f"  {runs[name].per_round_s():.4f} s a round", "inprocess")
            metrics = runs["this"].metrics
            plain = replay({**default_run_config(), **settings}, metrics)
            gaps.append(accuracy_gap(metrics, plain.accuracy))
            progress(f"  bare: {plain.mean('round_s'):.4f} s a round", "inprocess")
            for name, run in runs.items():
                for row in compared(name, run.metrics, plain):
                    values[(name, row["quantity"])].append((row["engine_s"], row["plain_s"]))
                startup = run.process_s - run.per_round_s() * (len(run.metrics) - 1)
                values[(name, "start-up (process - rounds 2..R)")].append((startup, None))
    rows = []
    for (name, quantity), pairs in values.items():
        plain_s = [b for _, b in pairs if b is not None]
        engine_s = statistics.median(a for a, _ in pairs)
        bare = statistics.median(plain_s) if plain_s else None
        rows.append(with_ratio({"group": name, "quantity": quantity, "engine_s": engine_s,
                                "plain_s": bare}))  # fmt: skip
    print(
        f"\nMedians over {args.repeats} run(s) of rounds 2..{args.rounds}, tau = "
        f"{args.local_steps}, {args.policy}; largest accuracy difference to the bare replay "
        f"{max(gaps):.3g}.\n"
    )
    write_table(
        out, rows, {**settings, "repeats": args.repeats, "max_accuracy_gap": max(gaps)}, "table"
    )
    return 0
