"""What the tests that stop and continue runs compare: metrics lines (timings aside), models.

Also the two-policy preset those tests stop (its command-line words).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

#: Fields of a metrics line that are timings (they differ between any two runs).
TIMINGS = frozenset(
    {"eval_s", "wall_time_s", "query_s", "schedule_s", "train_phase_s", "aggregate_s",
     "client_train_s", "discovery_s"}
)  # fmt: skip


def two_policy_preset(out: Path, *settings: str) -> list[str]:
    """Command-line words of the ``digits_policies`` preset for BC and FedCGD-FSCD, in process,
    into ``out``, with the Hydra ``settings`` added."""
    return ["experiment=digits_policies", "policies=[bc,fedcgd-fscd]", f"out={out}",
            "launcher.engine=inprocess", *settings]  # fmt: skip


def lines(folder: Path) -> list[dict]:
    """The run's metrics lines, parsed."""
    return [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]


def comparable(folder: Path) -> list[dict]:
    """The run's metrics lines without their timings."""
    return [{k: v for k, v in line.items() if k not in TIMINGS} for line in lines(folder)]


def same_model(a: Path, b: Path) -> bool:
    """True when the final models of runs ``a`` and ``b`` are equal bit for bit."""
    x, y = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    same = [
        x[k].dtype == y[k].dtype and x[k].cpu().numpy().tobytes() == y[k].cpu().numpy().tobytes()
        for k in x
    ]
    return x.keys() == y.keys() and all(same)


def rounds_written(folder: Path) -> int:
    """How many metrics lines the run has written so far (0 before its file exists)."""
    try:
        return len((folder / "metrics.jsonl").read_text().splitlines())
    except OSError:
        return 0


def whole_run(folder: Path, values: dict, *, per_device: bool = False) -> None:
    """The uninterrupted run of ``values`` into ``folder``, in this process.

    ``per_device``: one device at a time, as ``flwr run`` computes (cohorts sum in another order).
    """
    from experiments.run.inprocess import run_inprocess
    from experiments.run.run_config import validated_run_config, with_resolved_data_dir

    run_inprocess(
        with_resolved_data_dir(validated_run_config({**values, "result-dir": str(folder)})),
        cohorts=not per_device,
    )


def assert_same_run(folder: Path, whole: Path, rounds: int) -> None:
    """Run ``folder`` wrote rounds 1..``rounds`` once each and equals the uninterrupted ``whole``:
    every metrics line but its timings, and the final model bit for bit."""
    assert [x["round"] for x in lines(folder)] == list(range(1, rounds + 1))
    assert comparable(folder) == comparable(whole)
    assert same_model(folder, whole)
