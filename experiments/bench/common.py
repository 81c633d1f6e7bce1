"""Helpers of the benchmarks: progress lines, a run's per-round fields, random CIFAR-10 files."""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.analysis.tables import text_table, write_csv
from experiments.paper import settings as paper_settings
from run_files.files import atomic_write

#: Per-round timing columns of ``metrics.jsonl`` the benchmarks report (seconds).
PHASES: tuple[str, ...] = (
    "query_s",
    "schedule_s",
    "train_phase_s",
    "client_train_s",
    "aggregate_s",
    "eval_s",
)
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
#: The fields of a run's metrics lines a benchmark keeps per round, besides its phase timings.
ROUND_FIELDS = ("round", "wall_time_s", "num_available", "num_scheduled", "accuracy")


@dataclass(frozen=True)
class TimedRuns:
    """The options of a benchmark that times seeded runs (``fedcgd bench round``, ``inprocess``).

    Rounds 2..``rounds`` are timed (round 1 holds the start-up: at least 2); the results go
    to ``out``.
    """

    rounds: int
    seed: int
    out: Path


@dataclass(frozen=True)
class SolverInstances:
    """The options of a benchmark of the P1 solvers (``fedcgd bench solvers``, ``fscd-scale``).

    ``instances`` random instances for each V in ``num_devices``, drawn from ``seed``; the
    tables go to ``out``.
    """

    out: Path
    num_devices: list[int]
    instances: int
    seed: int


def quantity_table(key: str, key_width: int, numbers: str, rows: Sequence[Sequence[str]]) -> str:
    """A benchmark's printed table: a ``key`` column, the quantities, then the numbers.

    ``rows`` are (key, quantity, numbers) texts; the quantity column is as wide as its widest
    entry, ``numbers`` heads the formatted numbers.
    """
    width = max(len(quantity) for _, quantity, _ in rows)
    return text_table(
        f"{key:<{key_width}} {'quantity':<{width}} {numbers}",
        (f"{k:<{key_width}} {quantity:<{width}} {text}" for k, quantity, text in rows),
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
    """Print one line ``[tag] text`` with the 1-minute load average; append it to ``log``."""
    load = load_average()
    suffix = "" if load is None else f" [load {load:.1f}]"
    print(f"[{tag}] {text}{suffix}", flush=True)
    if log is not None:
        log.append({"time": time.time(), "text": text, "load_1min": load})


def round_fields(
    metrics: Sequence[Mapping[str, Any]], phases: Sequence[str]
) -> list[dict[str, Any]]:
    """Per round, the values of :data:`ROUND_FIELDS` and of ``phases`` (None where absent)."""
    return [{k: m.get(k) for k in (*ROUND_FIELDS, *phases)} for m in metrics]


def write_table(
    out: Path, header: Sequence[str], rows: Sequence[Sequence[Any]], payload: Mapping[str, Any]
) -> tuple[Path, Path]:
    """Write a benchmark's ``table.csv`` (``header``, ``rows``) and ``table.json`` (``payload``)."""
    csv_path, json_path = out / "table.csv", out / "table.json"
    write_csv(csv_path, [dict(zip(header, row, strict=True)) for row in rows], header)
    atomic_write(json_path, json.dumps(payload, indent=2))
    return csv_path, json_path


def largest_accuracy_gap(
    metrics: Sequence[Mapping[str, Any]], accuracies: Sequence[float | None]
) -> float:
    """Largest |run accuracy − replayed accuracy| over the rounds both evaluated (NaN if none)."""
    gaps = [
        abs(float(m["accuracy"]) - float(a))
        for m, a in zip(metrics, accuracies, strict=True)
        if m.get("accuracy") is not None and a is not None
    ]
    return max(gaps) if gaps else float("nan")


def write_random_cifar10(root: Path, seed: int) -> Path:
    """Write a ``cifar-10-batches-py`` folder of random pixels in the official archive's format."""
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
