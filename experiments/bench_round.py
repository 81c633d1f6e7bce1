"""Round benchmark: ``flwr run`` against the same computation in one plain PyTorch process.

Usage::

    python -m experiments.bench_round [--rounds 5] [--seed 0] [--threads 2]
                                      [--out results/bench_round]

What it does, in one invocation:

1. Writes a CIFAR-10-shaped data set in torchvision's file format (``cifar-10-batches-py/``
   with ``data_batch_1..5``, ``test_batch``, ``batches.meta``; random ``uint8`` pixels, 10
   classes x 5,000 training and x 1,000 test images) to a temporary folder.
2. Runs ``--rounds`` rounds of the paper's CIFAR-10 setting (:data:`PAPER_CIFAR10`: that of
   :mod:`experiments.paper_settings`, central evaluation every round) with ``flwr run`` in the
   simulation engine (:func:`experiments.launcher.run_flwr`, one CPU per ClientApp) for each
   policy of :data:`POLICIES`, and reads back each run's ``metrics.jsonl``.
3. Replays the same rounds in this process (:func:`replay_plain`) on the ServerApp's own
   set-up (:func:`server_app.setup.build_setup`): the same available devices (the uplink
   drawn from the run seed as the ServerApp draws it), sigma-hat on
   every available device's first batch (FedCGD only; BC needs none), tau SGD steps on the
   scheduled devices, FedAvg of the uploaded models and the same central evaluation, with
   ``torch.set_num_threads(--threads)``. The simulation runs two single-threaded ClientApps at
   a time on the machine's 2 cores (and evaluates in the ServerApp with torch's default
   threads), so the fair plain baseline is one process with 2 intra-op threads (the default).
   On a busy shared machine (load above the core count) 2 intra-op threads can be several
   times slower than 1, because every parallel op waits for a descheduled thread; the progress
   lines show the 1-minute load average, and ``--threads 1`` gives the robust baseline.
4. Prints seconds per round of both (round 1, which pays for Ray start-up, node discovery and
   first-call warm-ups, is left out), their ratio, and where the time goes per round, and
   writes the table to ``<out>/table.csv`` and ``<out>/table.json`` (with the per-round data),
   plus the ``flwr`` logs and each run's ``metrics.jsonl``.

The replay checks itself: the plain process must find the same number of available devices
as the run and, since batches and dropout masks depend only on (seed, round, device), reach
the run's test accuracy every round (the largest difference is printed).

The app reads an extracted CIFAR folder in torchvision's file format directly
(:func:`fedcgd_task.datasets.read_cifar_folder`), so the random files load as real ones would. Every
temporary file (data, ``FLWR_HOME``, result folders) is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import json
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments import paper_settings
from experiments.launcher import default_run_config, run_flwr
from experiments.tables import text_table

#: The paper's CIFAR-10 setting (:data:`experiments.paper_settings.PAPER_CIFAR10`), every round
#: evaluated so that the central evaluation is timed in each round.
PAPER_CIFAR10: dict[str, Any] = {**paper_settings.PAPER_CIFAR10, "eval-every": 1}
#: Policies compared; the first needs sigma-hat from every available device, BC none.
POLICIES: tuple[str, ...] = ("fedcgd-fscd", "bc")
#: CIFAR-10 layout: classes, training images per class, test images per class, batch files.
NUM_CLASSES = paper_settings.CIFAR10_CLASSES
TRAIN_PER_CLASS = paper_settings.CIFAR10_TRAIN_PER_CLASS
TEST_PER_CLASS = 1000
NUM_TRAIN_BATCHES = 5
CIFAR10_LABEL_NAMES: tuple[str, ...] = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
#: CPUs per ClientApp in the simulation (two at a time on 2 cores).
CPUS_PER_CLIENT = 1
#: Smallest plain time (s) a ratio is printed for (below, the ratio is noise).
MIN_RATIO_BASE_S = 1e-3
#: Per-round timing columns of ``metrics.jsonl`` (seconds).
FLWR_PHASES: tuple[str, ...] = (
    "query_s",
    "schedule_s",
    "train_phase_s",
    "client_train_s",
    "aggregate_s",
    "eval_s",
)


def load_average() -> float | None:
    """The 1-minute load average of the machine (None where the OS has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def progress(
    text: str, log: list[dict[str, Any]] | None = None, *, tag: str = "bench_round"
) -> None:
    """Print one progress line with the machine's 1-minute load average; append it to ``log``.

    The machine may be shared: the load average tells how much other work ran beside a phase.
    The line starts with ``[tag]``.
    """
    load = load_average()
    suffix = "" if load is None else f" [load {load:.1f}]"
    print(f"[{tag}] {text}{suffix}", flush=True)
    if log is not None:
        log.append({"time": time.time(), "text": text, "load_1min": load})


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def write_random_cifar10(root: Path, seed: int) -> Path:
    """Write a CIFAR-10-shaped ``cifar-10-batches-py`` folder with random pixels.

    Parameters
    ----------
    root : pathlib.Path
        Data folder (the run config's ``data-dir``); created if missing.
    seed : int
        Seed of the pixels and of the label order.

    Returns
    -------
    pathlib.Path
        The ``cifar-10-batches-py`` folder: ``data_batch_1..5`` (10,000 images each),
        ``test_batch`` (10,000) and ``batches.meta``, pickled dicts as in the official
        archive (rows of 3,072 ``uint8``, channel-major; ``labels`` a list of int).

    """
    rng = np.random.default_rng([seed, 0xC1FA])
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    train_labels = rng.permutation(np.repeat(np.arange(NUM_CLASSES), TRAIN_PER_CLASS))
    test_labels = rng.permutation(np.repeat(np.arange(NUM_CLASSES), TEST_PER_CLASS))
    per_batch = train_labels.size // NUM_TRAIN_BATCHES
    files: list[tuple[str, str, np.ndarray]] = [
        (
            f"data_batch_{k + 1}",
            f"training batch {k + 1} of {NUM_TRAIN_BATCHES}",
            train_labels[k * per_batch : (k + 1) * per_batch],
        )
        for k in range(NUM_TRAIN_BATCHES)
    ]
    files.append(("test_batch", "testing batch 1 of 1", test_labels))
    for name, batch_label, labels in files:
        data = rng.integers(0, 256, size=(labels.size, 3 * 32 * 32), dtype=np.uint8)
        entry = {"batch_label": batch_label, "labels": labels.tolist(), "data": data}
        with open(folder / name, "wb") as fh:
            pickle.dump(entry, fh, protocol=pickle.HIGHEST_PROTOCOL)
    meta = {
        "label_names": list(CIFAR10_LABEL_NAMES),
        "num_cases_per_batch": per_batch,
        "num_vis": 3 * 32 * 32,
    }
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump(meta, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return folder


# --------------------------------------------------------------------------------------------
# flwr run
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlwrRun:
    """One ``flwr run`` and its per-round metrics.

    Attributes
    ----------
    policy : str
        Scheduling policy.
    total_s : float
        Wall time of the whole ``flwr run`` (SuperLink start to exit).
    metrics : list of dict
        The lines of ``metrics.jsonl``, one per round.

    """

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
    """Run ``flwr run`` with ``overrides``; its streamed output goes to ``log_path``.

    Returns
    -------
    (int, float, str)
        Exit code, wall time in seconds, and the last lines of the log.

    """
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


def read_metrics(result_dir: Path) -> list[dict[str, Any]]:
    """Read a run's ``metrics.jsonl`` (one dict per round)."""
    text = (result_dir / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------
# Plain PyTorch replay
# --------------------------------------------------------------------------------------------


@dataclass
class PlainRound:
    """Timings (seconds) and outcome of one replayed round.

    Attributes
    ----------
    round : int
        Server round j.
    num_available, num_scheduled : int
        Devices available (replayed channel) and trained (from the run's ``scheduled``).
    channel_s : float
        Replaying the channel draw.
    sigma_s : float
        sigma-hat (and label histogram) on every available device's first batch (0 for BC).
    train_s : float
        The training phase: load the global model, gather the batches, tau SGD steps, copy
        the weights, for every scheduled device.
    train_local_s : float
        The part of ``train_s`` spent in :func:`fedcgd_task.training.train_local` (the same span as
        the devices' own ``train-time-s``, summed in ``client_train_s``).
    aggregate_s : float
        FedAvg of the uploaded models.
    eval_s : float
        Central evaluation on the test set.
    round_s : float
        The whole round.
    accuracy, loss : float
        Test accuracy and loss after the round.

    """

    round: int
    num_available: int
    num_scheduled: int
    channel_s: float
    sigma_s: float
    train_s: float
    train_local_s: float
    aggregate_s: float
    eval_s: float
    round_s: float
    accuracy: float
    loss: float


@dataclass(frozen=True)
class PlainRun:
    """The plain replay of one run: set-up time and one :class:`PlainRound` per round.

    ``setup_s`` is the ServerApp's set-up (:func:`server_app.setup.build_setup`: data, initial
    model, uplink, policy) plus the devices' partitions.
    """

    policy: str
    threads: int
    setup_s: float
    rounds: list[PlainRound]


def replay_plain(
    run_config: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]], threads: int
) -> PlainRun:
    """Redo a run's rounds in this process: same devices, same batches, same model updates.

    Parameters
    ----------
    run_config : mapping
        The run's full run config (pyproject defaults plus the overrides).
    metrics : sequence of mapping
        The run's ``metrics.jsonl`` lines (``scheduled`` and ``uploaded`` per round are used;
        ``num_available`` is checked against the replayed channel).
    threads : int
        ``torch.set_num_threads`` of this process.

    Returns
    -------
    PlainRun

    Raises
    ------
    RuntimeError
        If the replayed channel gives another number of available devices than the run, or a
        scheduled device was not available.

    """
    import torch

    from client_app.sigma import gradient_spread
    from fedcgd_strategy.aggregation import fedavg
    from fedcgd_task.local_data import local_split
    from fedcgd_task.training import dropout_seed, local_batches, train_local
    from server_app.config import parse_run_config
    from server_app.setup import build_setup

    torch.set_num_threads(threads)
    started = time.perf_counter()
    # The ServerApp's own set-up: seeds, data, initial model, D_w, the uplink, the policy.
    setup = build_setup(parse_run_config(run_config))
    config = setup.config
    settings, training = config.task, config.training
    model = setup.model.to(setup.device)
    splits = [local_split(settings, v) for v in range(settings.num_devices)]
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    setup_s = time.perf_counter() - started

    rounds: list[PlainRound] = []
    for line in metrics:
        server_round = int(line["round"])
        t_round = time.perf_counter()
        draw = setup.cell.draw_round(setup.model_bits)
        available = [int(v) for v in np.flatnonzero(draw.available)]
        channel_s = time.perf_counter() - t_round
        if len(available) != int(line["num_available"]):
            raise RuntimeError(
                f"round {server_round}: the replayed channel has {len(available)} available "
                f"devices, the run {line['num_available']}"
            )
        scheduled = [int(v) for v in line["scheduled"]]
        if not set(scheduled) <= set(available):
            raise RuntimeError(f"round {server_round}: scheduled {scheduled} not in {available}")

        t0 = time.perf_counter()
        if setup.policy.needs_sigma:  # as the devices do
            model.load_state_dict(global_state)
            for v in available:
                split = splits[v]
                batches = local_batches(config.seed, training, len(split), server_round, v)
                np.bincount(split.labels[np.concatenate(batches)], minlength=split.num_classes)
                x_first, y_first = split.tensors(batches[0])
                gradient_spread(model, x_first, y_first)
        sigma_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        train_local_s = 0.0
        states: dict[int, dict[str, np.ndarray]] = {}
        for v in scheduled:
            split = splits[v]
            model.load_state_dict(global_state)
            batches = local_batches(config.seed, training, len(split), server_round, v)
            x, y = split.tensors(np.concatenate(batches))
            positions = [np.arange(t * len(b), (t + 1) * len(b)) for t, b in enumerate(batches)]
            t1 = time.perf_counter()
            train_local(
                model,
                x,
                y,
                positions,
                training.learning_rate,
                torch_seed=dropout_seed(config.seed, server_round, v),
            )
            train_local_s += time.perf_counter() - t1
            states[v] = {k: t.detach().cpu().numpy().copy() for k, t in model.state_dict().items()}
        train_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        uploaded = [int(v) for v in line.get("uploaded", scheduled)]
        if uploaded:
            averaged = fedavg([states[v] for v in uploaded], [len(splits[v]) for v in uploaded])
            global_state = {
                k: torch.from_numpy(np.ascontiguousarray(a)) for k, a in averaged.items()
            }
        aggregate_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        loss, accuracy = setup.evaluate(global_state)  # the ServerApp's central evaluation
        eval_s = time.perf_counter() - t0
        rounds.append(
            PlainRound(
                round=server_round,
                num_available=len(available),
                num_scheduled=len(scheduled),
                channel_s=channel_s,
                sigma_s=sigma_s,
                train_s=train_s,
                train_local_s=train_local_s,
                aggregate_s=aggregate_s,
                eval_s=eval_s,
                round_s=time.perf_counter() - t_round,
                accuracy=accuracy,
                loss=loss,
            )
        )
    return PlainRun(
        policy=str(run_config["policy"]), threads=threads, setup_s=setup_s, rounds=rounds
    )


# --------------------------------------------------------------------------------------------
# Table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of the table: a quantity per round (means over rounds 2..R), both ways.

    Attributes
    ----------
    policy : str
        Scheduling policy of the row.
    quantity : str
        What is measured.
    flwr_s, plain_s : float or None
        Seconds under ``flwr run`` and in the plain process (None: not applicable).
    note : str
        Which fields were compared.

    """

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


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values)) if values else float("nan")


def build_rows(run: FlwrRun, plain: PlainRun) -> list[Row]:
    """Compare one policy's run and replay, per round, leaving out round 1.

    Seconds per round under ``flwr run`` are the differences of consecutive ``wall_time_s``
    (the time from one round's metrics line to the next: channel draw, query, schedule,
    training, aggregation, evaluation and Flower's own work in between).
    """
    lines = sorted(run.metrics, key=lambda m: int(m["round"]))
    walls = [float(m["wall_time_s"]) for m in lines]
    steady = lines[1:]
    per_round = [b - a for a, b in itertools.pairwise(walls)]
    flwr = {key: _mean([float(m[key]) for m in steady]) for key in FLWR_PHASES}
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
    flwr_known = sum(flwr[k] for k in FLWR_PHASES if k != "client_train_s")
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


def format_table(rows: Sequence[Row]) -> str:
    """The printed table: one block per policy."""
    width = max(len(r.quantity) for r in rows)
    header = f"{'policy':<12} {'quantity':<{width}} {'flwr s':>8} {'plain s':>8} {'flwr/plain':>10}"
    return text_table(
        header,
        (
            f"{row.policy:<12} {row.quantity:<{width}} {_fmt(row.flwr_s)} {_fmt(row.plain_s)} "
            f"{_fmt(row.ratio, '10.2f')}"
            for row in rows
        ),
    )


#: The fields of a run's metrics lines a benchmark keeps per round, besides its phase timings.
ROUND_FIELDS = ("round", "wall_time_s", "num_available", "num_scheduled", "accuracy")


def round_fields(
    metrics: Sequence[Mapping[str, Any]], phases: Sequence[str]
) -> list[dict[str, Any]]:
    """Per round, the values of :data:`ROUND_FIELDS` and of ``phases`` (None where absent)."""
    return [{k: m.get(k) for k in (*ROUND_FIELDS, *phases)} for m in metrics]


def write_outputs(
    out: Path,
    rows: Sequence[Row],
    runs: Sequence[FlwrRun],
    plains: Sequence[PlainRun],
    settings: Mapping[str, Any],
) -> tuple[Path, Path]:
    """Write ``table.csv`` and ``table.json`` (the rows plus per-round data) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out / "table.csv", out / "table.json"
    with open(csv_path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["policy", "quantity", "flwr_s", "plain_s", "flwr_over_plain", "note"])
        for r in rows:
            writer.writerow([r.policy, r.quantity.strip(), r.flwr_s, r.plain_s, r.ratio, r.note])
    payload = {
        "settings": dict(settings),
        "rows": [{**asdict(r), "quantity": r.quantity.strip(), "ratio": r.ratio} for r in rows],
        "flwr_runs": [
            {
                "policy": run.policy,
                "total_s": run.total_s,
                "rounds": round_fields(run.metrics, FLWR_PHASES),
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
    json_path.write_text(json.dumps(payload, indent=2))
    return csv_path, json_path


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description="Seconds per round: flwr run vs the same computation in one plain process."
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds per run (>= 2; default 5)")
    parser.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads of the plain process (default 2)"
    )
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help=f"default {','.join(POLICIES)}"
    )
    parser.add_argument("--out", type=Path, default=Path("results/bench_round"))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit code (0 on success)."""
    args = build_parser().parse_args(argv)
    if args.rounds < 2:
        build_parser().error("--rounds must be >= 2 (round 1 is left out of the timings)")
    if args.threads < 1:
        build_parser().error("--threads must be >= 1")
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
            metrics = read_metrics(result_dir)
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
            gaps = [
                abs(float(m["accuracy"]) - r.accuracy)
                for m, r in zip(metrics, plain.rounds, strict=True)
                if m.get("accuracy") is not None
            ]
            accuracy_gaps[policy] = max(gaps) if gaps else float("nan")
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
    print(format_table(rows))
    print()
    progress(f"wrote {csv_path} and {json_path}", phases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
