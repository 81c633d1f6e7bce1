"""Checkpoint / resume: a run killed after round k and resumed equals the uninterrupted run."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from subprocesses import FEDCGD
from task_settings import checkpointed_run_config

from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import (
    format_run_config,
)
from run_files.results import METRICS_FILE, MODEL_FILE
from server_app.checkpoint import CHECKPOINT_FILE, load_checkpoint

ROUNDS = 12


def config(result_dir: Path, policy: str, **changes: object) -> dict:
    """Run-config of a 20-device run of ``policy`` that checkpoints after every round."""
    return checkpointed_run_config(
        result_dir, policy=policy, **{"num-devices": 20, "num-server-rounds": ROUNDS, **changes}
    )


def lines(result_dir: Path) -> list[dict]:
    text = (result_dir / METRICS_FILE).read_text().splitlines()
    return [json.loads(x) for x in text]


def comparable(result_dir: Path) -> list[tuple]:
    keep = ("round", "accuracy", "scheduled", "uploaded", "wemd", "class_gradient_used")
    return [tuple(json.dumps(line[k]) for k in keep) for line in lines(result_dir)]


@pytest.mark.parametrize("policy", ["fedcgd-fscd-gc", "fedcbs"])
def test_killed_and_resumed_run_equals_the_uninterrupted_run(tmp_path, policy):
    whole = tmp_path / "whole"
    run_inprocess(config(whole, policy))

    broken = tmp_path / "broken"
    child = subprocess.Popen(
        [
            FEDCGD,
            "inprocess",
            "--run-config",
            format_run_config(config(broken, policy)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and child.poll() is None:
            if (broken / CHECKPOINT_FILE).exists() and load_checkpoint(broken).round >= 3:
                break
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL  # killed mid-run, not finished
    done = load_checkpoint(broken).round
    assert 3 <= done < ROUNDS and not (broken / MODEL_FILE).exists()

    run_inprocess(config(broken, policy, **{"resume-from": str(broken)}))
    assert comparable(broken) == comparable(whole)
    assert [x["round"] for x in lines(broken)] == list(range(1, ROUNDS + 1))
    a, b = torch.load(whole / MODEL_FILE), torch.load(broken / MODEL_FILE)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_resume_refuses_other_settings_and_a_missing_checkpoint(tmp_path):
    first = tmp_path / "first"
    run_inprocess(config(first, "fedcgd-fscd", **{"num-server-rounds": 2}))
    with pytest.raises(ValueError, match="seed"):
        run_inprocess(config(first, "fedcgd-fscd", seed=7, **{"resume-from": str(first)}))
    with pytest.raises(ValueError, match="nothing to run"):
        run_inprocess(
            config(first, "fedcgd-fscd", **{"num-server-rounds": 2, "resume-from": str(first)})
        )
    with pytest.raises(FileNotFoundError, match=r"no checkpoint\.pt"):
        run_inprocess(config(tmp_path, "fedcgd-fscd", **{"resume-from": str(tmp_path)}))
    # More rounds on a finished run: it continues from its last checkpoint.
    run_inprocess(
        config(first, "fedcgd-fscd", **{"num-server-rounds": 3, "resume-from": str(first)})
    )
    assert [x["round"] for x in lines(first)] == [1, 2, 3]
