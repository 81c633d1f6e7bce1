"""Checkpoint / resume: a run killed after round k and resumed equals the uninterrupted run.

A user's policy state of arrays resumes bit for bit; one a checkpoint cannot hold fails the run
at its first checkpoint, naming the policy, the key and the type.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from run_results import assert_same_run
from subprocesses import FEDCGD, wait_for
from task_settings import checkpointed_run_config

from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import format_run_config
from fedcgd_strategy.policies import PolicyDecisionError
from server_app.checkpoint import checkpoint_round, load_checkpoint
from server_app.run_folder.results import CHECKPOINT_FILE, MODEL_FILE
from server_app.run_folder.run_status import read_status

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
    child = subprocess.Popen([FEDCGD, "inprocess", "--run-config", run_config],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(lambda: (checkpoint_round(broken) or 0) >= 3, child, limit_s=300)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL  # killed mid-run, not finished
    assert 3 <= (checkpoint_round(broken) or 0) < ROUNDS and not (broken / MODEL_FILE).exists()
    run_inprocess(config(broken, policy, **{"resume-from": str(broken)}))
    assert_same_run(broken, whole, ROUNDS)


#: A user's policy whose state holds what a policy's state normally holds: numpy arrays (float,
#: int, bool, 0-d), a numpy scalar, a torch tensor, numbers, strings, lists, tuples and dicts;
#: its schedule depends on it, so a state restored wrongly changes the run.
STATEFUL = """
import numpy as np
import torch

from fedcgd_strategy import Policy, decision_from_mask


class Stateful(Policy):
    needs_reports = False

    def __init__(self):
        self.state = {
            "avg": np.arange(3.0) / 7, "picks": np.zeros(4, dtype=np.int64),
            "mask": np.array([True, False]), "zero_d": np.array(2.5, dtype=np.float32),
            "scalar": np.float64(1 / 3), "tensor": torch.arange(3, dtype=torch.float16) / 3,
            "big_endian": np.arange(3.0).astype(">f8"),
            "nested": {"rounds": 0, "label": "a", "ratios": [0.1, (1, "b")]},
        }

    def schedule(self, inputs, rng):
        s = self.state
        need = np.where(inputs.candidate, inputs.min_bandwidth_hz, np.inf) * (1 + s["picks"])
        selected = (need == need.min()) & (need.min() <= inputs.total_bandwidth_hz)
        s["picks"] = s["picks"] + selected
        s["avg"] = s["avg"] * 1.1 + s["nested"]["rounds"] / 3
        s["tensor"] = s["tensor"] * 1.5
        s["nested"]["rounds"] += 1
        s["nested"]["label"] += "a"
        return decision_from_mask(inputs, selected)

    def state_dict(self):
        return self.state

    def load_state_dict(self, state):
        self.state = state


class Sets(Stateful):
    def state_dict(self):
        return {**self.state, "seen": {1, 2}}
"""


def same_state(a: Any, b: Any) -> bool:
    """``a`` and ``b`` equal bit for bit: the same types, dtypes and shapes, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(same_state, a, b))
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes() and a.shape == b.shape
    return a == b


def test_a_users_policy_state_of_arrays_resumes_bit_identically(tmp_path):
    (tmp_path / "stateful.py").write_text(STATEFUL)
    policy, rounds = f"{tmp_path / 'stateful.py'}:Stateful", 4
    whole, part = tmp_path / "whole", tmp_path / "part"
    small = {"num-devices": 4, "num-server-rounds": rounds}
    run_inprocess(checkpointed_run_config(whole, policy=policy, **small))
    run_inprocess(checkpointed_run_config(part, policy=policy, **{**small, "num-server-rounds": 2}))
    run_inprocess(
        checkpointed_run_config(part, policy=policy, **small, **{"resume-from": str(part)})
    )
    assert_same_run(part, whole, rounds)
    ends = [load_checkpoint(folder).policy_state for folder in (whole, part)]
    assert ends[0]["nested"] == {"rounds": 4, "label": "aaaaa", "ratios": [0.1, (1, "b")]}
    assert same_state(*ends) and int(ends[0]["picks"].sum()) == rounds
    assert same_state(ends[0]["scalar"], np.array(1 / 3))  # a numpy scalar comes back 0-d
    assert same_state(ends[0]["big_endian"], np.arange(3.0))  # in native byte order


def test_a_policy_state_a_checkpoint_cannot_hold_is_refused_at_the_first_checkpoint(tmp_path):
    (tmp_path / "stateful.py").write_text(STATEFUL)
    policy = f"{tmp_path / 'stateful.py'}:Sets"
    run = checkpointed_run_config(tmp_path / "run", policy=policy, **{"num-devices": 4})
    with pytest.raises(PolicyDecisionError) as err:
        run_inprocess({**run, "checkpoint-every": 2})
    assert str(err.value) == (
        f"policy '{policy}', round 2: its state for the checkpoint: state_dict()['seen'] is set: "
        "a checkpoint holds numbers, strings, numpy and torch arrays and lists, "
        "tuples and str-keyed dicts of these"
    )
    status = read_status(tmp_path / "run")
    assert status is not None and (status.state, status.reason) == ("failed", str(err.value))
    assert not (tmp_path / "run" / CHECKPOINT_FILE).exists()
