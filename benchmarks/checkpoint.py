"""``python -m benchmarks checkpoint``: a checkpoint's write per built-in model, its cost a round.

What it measures: docs/performance.md, "Checkpoints and result files".
"""

from __future__ import annotations

import contextlib
import io
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from benchmarks import app
from benchmarks.common import per_round_s, write_table
from benchmarks.inprocess import SETTING

#: (model, data set, input shape, classes, writes timed).
MODELS = (
    ("mlp", "digits", (1, 8, 8), 10, 20),
    ("cnn1d", "mnist1d", (1, 40), 10, 20),
    ("cnn", "cifar10", (3, 32, 32), 10, 20),
    ("resnet18gn", "cifar100", (3, 32, 32), 100, 5),
)
#: ``checkpoint-every`` values of the run part.
CADENCES = (0, 1, 5, 10)
#: The run part's run config: the paper cell of ``python -m benchmarks inprocess --local-steps 1
#: --deadline-s 0.0402`` (MNIST-1D, its CNN, V = 64, FedCGD-FSCD, evaluation every round).
RUN_SETTING = {**SETTING, "local-steps": 1, "channel.deadline-s": 0.0402, "policy": "fedcgd-fscd"}


def time_writes() -> list[dict[str, object]]:
    """Median and largest milliseconds of ``save_checkpoint`` per built-in model, file size."""
    from fedcgd_task.models import build_model, count_parameters
    from server_app.checkpoint import CHECKPOINT_FILE, Checkpoint, save_checkpoint

    rows: list[dict[str, object]] = []
    state = dict(np.random.default_rng(0).bit_generator.state)
    for name, dataset, shape, classes, writes in MODELS:
        model = build_model(name, classes, shape, seed=0)
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        checkpoint = Checkpoint(
            round=1, model=weights, policy_state={"class-gradient": [1.0]}, cell_rng_state=state,
            policy_rng_state=state, elapsed_s=1.0,
        )  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as folder:
            times = []
            for _ in range(writes):
                t0 = time.perf_counter()
                save_checkpoint(Path(folder), checkpoint)
                times.append(1000 * (time.perf_counter() - t0))
            size = (Path(folder) / CHECKPOINT_FILE).stat().st_size
        rows.append({
            "model": name, "dataset": dataset, "parameters": count_parameters(model),
            "file_bytes": size, "write_ms_median": statistics.median(times),
            "write_ms_max": max(times),
        })  # fmt: skip
    return rows


def time_runs(repeats: int, rounds: int) -> list[dict[str, object]]:
    """Seconds per round of :data:`RUN_SETTING` at each cadence, interleaved ``repeats`` times."""
    from experiments.run.inprocess import run_inprocess
    from experiments.run.run_config import validated_run_config, with_resolved_data_dir
    from server_app.run_folder.results import read_metrics_lines

    per_round: dict[int, list[float]] = {c: [] for c in CADENCES}
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-runs-") as folder:
        for rep in range(repeats):
            for cadence in CADENCES:
                result_dir = Path(folder) / f"every-{cadence}-{rep}"
                overrides = {
                    **RUN_SETTING, "checkpoint-every": cadence, "num-server-rounds": rounds,
                    "result-dir": str(result_dir),
                }  # fmt: skip
                with contextlib.redirect_stdout(io.StringIO()):  # the run's progress lines
                    run_inprocess(with_resolved_data_dir(validated_run_config(overrides)))
                per_round[cadence].append(per_round_s(read_metrics_lines(result_dir)))
    base = statistics.mean(per_round[0])
    return [
        {
            "checkpoint_every": cadence, "s_per_round_mean": statistics.mean(times),
            "s_per_round_min": min(times),
            "overhead_vs_none": f"{statistics.mean(times) / base - 1:+.1%}", "repeats": len(times),
        }
        for cadence, times in per_round.items()
    ]  # fmt: skip


@app.command("checkpoint")
def main(
    repeats: Annotated[int, typer.Option(min=1)] = 3,
    rounds: Annotated[int, typer.Option(min=2, help="rounds of each run")] = 50,
    out: Path = Path("results/bench_checkpoint"),
) -> int:
    """What a checkpoint costs: each model's write, the paper cell's rounds at each cadence."""
    write_table(out, time_writes(), None, "checkpoint_writes")
    write_table(out, time_runs(repeats, rounds), None, "checkpoint_runs")
    return 0
