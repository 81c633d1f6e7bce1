"""What a checkpoint costs: the write per built-in model, and the paper cell's seconds per round.

``fedcgd bench checkpoint`` writes ``checkpoint_writes.csv`` and ``checkpoint_runs.csv``
(``checkpoint-every`` = 0, 1, 5, 10 interleaved, on the paper cell of the MNIST-1D presets at
τ = 1: :data:`RUN_SETTING`); the numbers are in docs/performance.md,
"Checkpoints and result files".
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from experiments.analysis.tables import text_table, write_csv
from experiments.bench.inprocess import SETTING as INPROCESS_SETTING

#: (model, data set, input shape, classes, writes timed).
MODELS = (
    ("mlp", "digits", (1, 8, 8), 10, 20),
    ("cnn1d", "mnist1d", (1, 40), 10, 20),
    ("cnn", "cifar10", (3, 32, 32), 10, 20),
    ("resnet18gn", "cifar100", (3, 32, 32), 100, 5),
)
#: ``checkpoint-every`` values of the run part.
CADENCES = (0, 1, 5, 10)
#: The run part's run config: the paper cell of ``fedcgd bench inprocess --local-steps 1
#: --deadline-s 0.0402`` (MNIST-1D, its CNN, V = 64, FedCGD-FSCD, evaluation every round).
RUN_SETTING = {
    **INPROCESS_SETTING,
    "local-steps": 1,
    "channel.deadline-s": 0.0402,
    "policy": "fedcgd-fscd",
}


def time_writes() -> list[dict[str, object]]:
    """Median seconds of ``save_checkpoint`` per built-in model, with the file size."""
    from fedcgd_task.models import build_model, count_parameters
    from server_app.checkpoint import CHECKPOINT_FILE, Checkpoint, save_checkpoint

    rows: list[dict[str, object]] = []
    rng = np.random.default_rng(0)
    for name, dataset, shape, classes, writes in MODELS:
        model = build_model(name, classes, shape, seed=0)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        checkpoint = Checkpoint(
            round=1,
            model=state,
            policy_state={"class-gradient": [1.0]},
            cell_rng_state=dict(rng.bit_generator.state),
            policy_rng_state=dict(rng.bit_generator.state),
            elapsed_s=1.0,
        )
        with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as folder:
            times = []
            for _ in range(writes):
                t0 = time.perf_counter()
                save_checkpoint(Path(folder), checkpoint)
                times.append(time.perf_counter() - t0)
            size = (Path(folder) / CHECKPOINT_FILE).stat().st_size
        rows.append(
            {
                "model": name,
                "dataset": dataset,
                "parameters": count_parameters(model),
                "file_bytes": size,
                "write_ms_median": round(1000 * statistics.median(times), 2),
                "write_ms_max": round(1000 * max(times), 2),
            }
        )
    return rows


def time_runs(repeats: int, rounds: int) -> list[dict[str, object]]:
    """Seconds per round of :data:`RUN_SETTING` at each cadence, interleaved ``repeats`` times."""
    from experiments.run.inprocess import run_inprocess
    from experiments.run.run_config import validated_run_config, with_resolved_data_dir

    per_round: dict[int, list[float]] = {c: [] for c in CADENCES}
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-runs-") as folder:
        for rep in range(repeats):
            for cadence in CADENCES:
                result_dir = Path(folder) / f"every-{cadence}-{rep}"
                config = with_resolved_data_dir(
                    validated_run_config(
                        {
                            **RUN_SETTING,
                            "checkpoint-every": cadence,
                            "num-server-rounds": rounds,
                            "result-dir": str(result_dir),
                        }
                    )
                )
                with contextlib.redirect_stdout(io.StringIO()):  # the run's progress lines
                    run_inprocess(config)
                lines = [json.loads(x) for x in (result_dir / "metrics.jsonl").open()]
                # wall_time_s of round 1 holds the start (data, model): rounds 2..J only
                span = lines[-1]["wall_time_s"] - lines[0]["wall_time_s"]
                per_round[cadence].append(span / (len(lines) - 1))
    base = statistics.mean(per_round[0])
    return [
        {
            "checkpoint_every": cadence,
            "s_per_round_mean": round(statistics.mean(times), 4),
            "s_per_round_min": round(min(times), 4),
            "overhead_vs_none": f"{statistics.mean(times) / base - 1:+.1%}",
            "repeats": len(times),
        }
        for cadence, times in per_round.items()
    ]


def main(out: Path, repeats: int = 3, rounds: int = 50) -> int:
    """``fedcgd bench checkpoint``: time the writes and the runs; write two tables to ``out``."""
    writes = time_writes()
    write_csv(out / "checkpoint_writes.csv", writes)
    print(
        text_table(
            f"{'model':<11} {'params':>10} {'file MB':>8} {'write ms':>9} {'max ms':>8}",
            (
                f"{r['model']:<11} {r['parameters']:>10} {int(r['file_bytes']) / 1e6:>8.2f} "  # type: ignore[call-overload]
                f"{r['write_ms_median']:>9} {r['write_ms_max']:>8}"
                for r in writes
            ),
        )
    )
    runs = time_runs(repeats, max(rounds, 2))
    write_csv(out / "checkpoint_runs.csv", runs)
    print(
        text_table(
            f"{'checkpoint-every':>16} {'s/round':>9} {'min':>8} {'overhead':>9}",
            (
                f"{r['checkpoint_every']:>16} {r['s_per_round_mean']:>9} "
                f"{r['s_per_round_min']:>8} {r['overhead_vs_none']:>9}"
                for r in runs
            ),
        )
    )
    print(f"wrote {out / 'checkpoint_writes.csv'} and {out / 'checkpoint_runs.csv'}")
    return 0
