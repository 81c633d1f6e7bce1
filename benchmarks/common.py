"""What the run benchmarks share: the engine as a process, a run's rounds replayed bare, tables."""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from experiments.analysis.tables import write_csv
from experiments.cli.options import refuse
from experiments.run.run_config import format_run_config
from server_app.run_folder.files import atomic_write
from server_app.run_folder.results import read_metrics_lines

#: Per-round timing columns of ``metrics.jsonl`` the benchmarks report (seconds).
PHASES = ("query_s", "schedule_s", "train_phase_s", "client_train_s", "aggregate_s", "eval_s")
#: ``--rounds`` and ``--seed`` of the round benchmarks.
Rounds = Annotated[int, typer.Option(min=2, help="rounds per run (>= 2: round 1 is not timed)")]
Seed = Annotated[int, typer.Option(help="run seed")]
#: ``--compare-with`` of the in-process benchmarks.
Checkout = Annotated[Path | None, typer.Option(help="another checkout (a git worktree), timed too")]


def progress(text: str, tag: str) -> None:
    """Print one line ``[tag] text`` with the machine's 1-minute load average."""
    print(f"[{tag}] {text} [load {os.getloadavg()[0]:.1f}]", flush=True)


def checkouts(compare_with: Path | None) -> dict[str, Path]:
    """The checkouts to time, ``this`` and ``other`` (refused in one line: not a checkout)."""
    other = {} if compare_with is None else {"other": compare_with.resolve()}
    if other and not (other["other"] / "experiments" / "cli" / "__main__.py").is_file():
        refuse(f"--compare-with {other['other']}: not a checkout of this project")
    return {"this": Path(__file__).resolve().parents[1], **other}


@dataclass(frozen=True)
class EngineRun:
    """One engine process: its metrics lines, wall seconds and resident memory (MiB)."""

    metrics: list[dict[str, Any]]
    process_s: float
    peak_rss_mib: float
    rss_by_round: dict[int, float]


def per_round_s(metrics: Sequence[Mapping[str, Any]]) -> float:
    """Seconds per round of a run's metrics lines over rounds 2..R (round 1 holds the start-up)."""
    first, last = (float(metrics[i]["wall_time_s"]) for i in (0, -1))
    return (last - first) / (len(metrics) - 1)


def run_engine(project: Path, overrides: Mapping[str, Any], log_path: Path) -> EngineRun:
    """Run ``project``'s in-process engine as a process, its memory sampled every 0.1 s."""
    run_config = format_run_config(overrides)
    command = [sys.executable, "-m", "experiments.cli", "inprocess", "--run-config", run_config]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result_dir = Path(str(overrides["result-dir"]))
    by_round: dict[int, float] = {}
    started = time.perf_counter()
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, cwd=project, stdout=log, stderr=subprocess.STDOUT, env=env)
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.1):
                try:
                    status = Path(f"/proc/{proc.pid}/status").read_text()
                except OSError:
                    continue
                if "VmRSS:" not in status:  # exited, not yet reaped
                    continue
                lines = result_dir / "metrics.jsonl"
                done = lines.read_bytes().count(b"\n") if lines.exists() else 0
                rss = int(status.split("VmRSS:")[1].split()[0]) / 1024
                by_round[done] = max(by_round.get(done, 0.0), rss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        stop.set()
        sampler.join()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"the run in {project} failed ({code}):\n{log_path.read_text()[-2000:]}")
    process_s = time.perf_counter() - started
    return EngineRun(read_metrics_lines(result_dir), process_s, usage.ru_maxrss / 1024, by_round)


#: The replay's timed parts of a round (:func:`replay`), each beside an engine phase.
PARTS = ("round_s", "sigma_s", "train_s", "aggregate_s", "eval_s")


@dataclass
class Replay:
    """A replay's set-up seconds, each part's seconds per round, the largest accuracy gap."""

    setup_s: float
    parts: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in PARTS})
    accuracy_gap: float = math.nan

    def mean(self, name: str) -> float:
        """Mean of the part ``name`` over rounds 2..R."""
        return statistics.fmean(self.parts[name][1:])


def replay(
    run_config: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]], threads: int = 1
) -> Replay:
    """A run's rounds (``metrics.jsonl`` lines) redone bare (no messages, checks, files), timed.

    RuntimeError if the redrawn channel disagrees with the run.
    """
    import torch

    from client_app.device_round import pre_training_stats
    from fedcgd_strategy.aggregation import fedavg
    from fedcgd_task.partition import local_split
    from fedcgd_task.training import dropout_seed, local_batches, train_local
    from server_app.config import parse_run_config
    from server_app.recorder import evaluation_due
    from server_app.setup import build_setup

    torch.set_num_threads(threads)
    started = time.perf_counter()
    setup = build_setup(parse_run_config(run_config))
    config, model = setup.config, setup.model
    splits = [local_split(config.task, v) for v in range(config.task.num_devices)]
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = Replay(setup_s=time.perf_counter() - started)
    gaps = []
    for line in metrics:
        server_round = int(line["round"])
        available = np.flatnonzero(setup.cell.draw_round(setup.model_bits).available).tolist()
        if len(available) != int(line["num_available"]):
            raise RuntimeError(
                f"round {server_round}: the redrawn channel has {len(available)} available "
                f"devices, the run {line['num_available']}"
            )

        def batches(v: int, r: int = server_round) -> list[np.ndarray]:
            return local_batches(config.seed, config.training, len(splits[v]), r, v)

        queried = [(splits[v], batches(v)) for v in available if setup.policy.needs_sigma]
        trained = []
        for v in (int(u) for u in line["scheduled"]):
            rows = batches(v)
            x, y = splits[v].tensors(np.concatenate(rows))
            positions = [np.arange(t * len(b), (t + 1) * len(b)) for t, b in enumerate(rows)]
            trained.append((v, x, y, positions, dropout_seed(config.seed, server_round, v)))
        uploaded = [int(v) for v in line.get("uploaded", line["scheduled"])]

        clock = [time.perf_counter()]
        model.load_state_dict(state)
        for split, rows in queried:
            pre_training_stats(model, split, rows)
        clock.append(time.perf_counter())
        states = {}
        for v, x, y, positions, seed in trained:
            model.load_state_dict(state)
            train_local(model, x, y, positions, config.training.learning_rate, torch_seed=seed)
            states[v] = {k: t.detach().cpu().numpy().copy() for k, t in model.state_dict().items()}
        clock.append(time.perf_counter())
        if uploaded:
            averaged = fedavg([states[v] for v in uploaded], [len(splits[v]) for v in uploaded])
            state = {k: torch.from_numpy(np.ascontiguousarray(a)) for k, a in averaged.items()}
        clock.append(time.perf_counter())
        due = evaluation_due(server_round, config.num_server_rounds, config.eval_every)
        accuracy = setup.evaluate(state)[1] if due else None
        clock.append(time.perf_counter())
        for name, (a, b) in zip(PARTS[1:], itertools.pairwise(clock), strict=True):
            out.parts[name].append(b - a)
        out.parts["round_s"].append(clock[-1] - clock[0])
        if accuracy is not None and line.get("accuracy") is not None:
            gaps.append(abs(float(line["accuracy"]) - accuracy))
    out.accuracy_gap = max(gaps, default=math.nan)
    return out


def compared(group: str, metrics: Sequence[Mapping[str, Any]], plain: Replay) -> list[dict]:
    """A run's means over rounds 2..R beside the replay's: rows (group, quantity, s, s, ratio)."""
    per_round = per_round_s(metrics)
    engine = {k: statistics.fmean(float(m.get(k) or 0.0) for m in metrics[1:]) for k in PHASES}
    pairs: list[tuple[str, float, float | None]] = [
        ("seconds per round", per_round, plain.mean("round_s")),
        ("query / sigma-hat", engine["query_s"], plain.mean("sigma_s")),
        ("schedule", engine["schedule_s"], None),
        ("training phase / SGD steps", engine["train_phase_s"], plain.mean("train_s")),
        ("  of which SGD steps (sum)", engine["client_train_s"], None),
        ("aggregate / FedAvg", engine["aggregate_s"], plain.mean("aggregate_s")),
        ("evaluation", engine["eval_s"], plain.mean("eval_s")),
        ("rest", per_round - sum(v for k, v in engine.items() if k != "client_train_s"), None),
    ]
    return [
        with_ratio({"group": group, "quantity": q, "engine_s": a, "plain_s": b})
        for q, a, b in pairs
    ]


def with_ratio(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with ``ratio`` = engine_s / plain_s (None without a plain time of 1 ms or more)."""
    plain = row["plain_s"]
    return {**row, "ratio": row["engine_s"] / plain if plain and plain >= 1e-3 else None}


def write_table(
    out: Path, rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any] | None, name: str
) -> None:
    """Print ``rows``; write them as ``name.csv`` and, with ``settings``, ``name.json``."""
    header = list(rows[0])

    def cell(value: object) -> str:
        return f"{value:.4g}" if isinstance(value, float) else "-" if value is None else str(value)

    widths = [max(len(h), *(len(cell(r.get(h))) for r in rows)) for h in header]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))

    print("\n".join([line(header), "-" * len(line(header))]))
    print("\n".join(line([cell(r.get(h)) for h in header]) for r in rows))
    write_csv(out / f"{name}.csv", rows, header)
    if settings is not None:
        payload = {"settings": dict(settings), "rows": list(rows)}
        atomic_write(out / f"{name}.json", json.dumps(payload, indent=2, default=str))
    print(f"wrote {out / name}.*")
