"""``fedcgd runs``: the runs under a folder, a line each, oldest first."""

from __future__ import annotations

import json
import os
from pathlib import Path

from experiments.cli import invoke
from server_app.run_folder.run_status import COMPLETED, RUNNING, RunStatus, write_status


def make_run(folder: Path, config: dict, status: RunStatus | None, accuracies: list, t: float):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    os.utime(folder / "config.json", (t, t))
    if status is not None:
        write_status(folder, status)
    lines = [{"round": i + 1, "accuracy": a} for i, a in enumerate(accuracies)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_the_runs_of_a_folder_a_comparison_and_a_damaged_run(tmp_path: Path, capsys) -> None:
    assert invoke(["runs", str(tmp_path)]) == 2  # a folder without runs: one line
    assert capsys.readouterr().err == (
        f"error: {tmp_path} holds no run (no config.json or status.json below it)\n"
    )
    assert invoke(["runs", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'missing'} is not a folder\n"
    root = tmp_path / "results"
    make_run(
        root / "fedcgd-fscd-1",
        {"policy": "fedcgd-fscd", "aggregator": "", "task": {"seed": 0}, "num_server_rounds": 5},
        RunStatus(RUNNING, 3, 5), [0.1, 0.3, 0.25], t=2000.0,
    )  # fmt: skip
    make_run(
        root / "cmp" / "bc" / "seed-1",
        {"policy": "bc", "aggregator": "FedMedian", "task": {"seed": 1}, "num_server_rounds": 3},
        RunStatus(COMPLETED, 3, 3, devices_lost=2), [0.5, 0.875, 0.45], t=1000.0,
    )  # fmt: skip
    make_run(
        root / "hostile",
        {"policy": "p\n" + "x" * 60 + ":Name", "aggregator": 7, "task": [], "num_server_rounds": 2},
        None, [None, "0.9"], t=3000.0,
    )  # fmt: skip
    (root / "damaged").mkdir()
    (root / "damaged" / "status.json").write_text("{")  # no config.json: oldest
    (root / "cmp" / "empty").mkdir()  # no run: not listed
    assert invoke(["runs", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "folder         policy                                    aggregator  seed  rounds  "
        "status     final   best    lost",
        "damaged        ?                                         ?           ?     ?/?     "
        "?          -       -       ?",
        "cmp/bc/seed-1  bc                                        FedMedian   1     3/3     "
        "completed  45.00%  87.50%  2",
        "fedcgd-fscd-1  fedcgd-fscd                               FedAvg      0     3/5     "
        "running    25.00%  30.00%  0",
        "hostile        …xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx:Name  7           ?     ?/2     "
        "?          -       -       ?",
    ]
