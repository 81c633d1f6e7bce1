"""Checkpoint / resume: a run killed after round k and resumed equals the uninterrupted run."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from run_results import assert_same_run
from subprocesses import FEDCGD, wait_for
from task_settings import checkpointed_run_config

from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import format_run_config
from run_files.results import MODEL_FILE
from server_app.checkpoint import checkpoint_round

ROUNDS = 12


def config(result_dir: Path, policy: str, **changes: object) -> dict:
    """Run-config of a 20-device run of ``policy`` that checkpoints after every round."""
    return checkpointed_run_config(
        result_dir, policy=policy, **{"num-devices": 20, "num-server-rounds": ROUNDS, **changes}
    )


@pytest.mark.parametrize("policy", ["fedcgd-fscd-gc", "fedcbs"])  # with a policy state
def test_killed_and_resumed_run_equals_the_uninterrupted_run(tmp_path, policy):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    run_inprocess(config(whole, policy))
    run_config = format_run_config(config(broken, policy))
    child = subprocess.Popen(
        [FEDCGD, "inprocess", "--run-config", run_config],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: (checkpoint_round(broken) or 0) >= 3, child, limit_s=300)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL  # killed mid-run, not finished
    assert 3 <= (checkpoint_round(broken) or 0) < ROUNDS and not (broken / MODEL_FILE).exists()
    run_inprocess(config(broken, policy, **{"resume-from": str(broken)}))
    assert_same_run(broken, whole, ROUNDS)


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
