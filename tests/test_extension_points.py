"""A researcher's policy, data set, model and channel trace, from one folder outside the project.

Everything is named in the run config alone (the policy's parameter through
``policy-params.*``) and runs with the in-process engine and with ``make run``. The folder holds
one module (a 2-class problem on 4 features, a linear model, a round-robin policy) and a trace
written with numpy; the expected schedules follow from the trace by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from subprocesses import FEDCGD

PROJECT = Path(__file__).resolve().parents[1]

RESEARCHER = """
from dataclasses import dataclass, field

import numpy as np
from torch import nn

from fedcgd_strategy import Policy, decision_from_mask


def load():
    rng = np.random.default_rng(3)
    y_train, y_test = np.repeat([0, 1], 40), np.repeat([0, 1], 10)
    centre = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    x_train = centre[y_train] + 0.3 * rng.standard_normal((80, 4))
    x_test = centre[y_test] + 0.3 * rng.standard_normal((20, 4))
    return (x_train, y_train), (x_test, y_test)


def build(num_classes, input_shape):
    return nn.Linear(input_shape[0], num_classes)


@dataclass
class RoundRobin(Policy):
    per_round: int = 1
    next_device: int = field(default=0, init=False)
    needs_reports = False

    def schedule(self, inputs, rng):
        mask = np.zeros(inputs.num_devices, dtype=bool)
        order = [(self.next_device + i) % inputs.num_devices for i in range(inputs.num_devices)]
        taken = [v for v in order if inputs.candidate[v]][: self.per_round]
        mask[taken] = True
        if taken:
            self.next_device = (taken[-1] + 1) % inputs.num_devices
        return decision_from_mask(inputs, mask)

    def state_dict(self):
        return {"next-device": self.next_device}

    def load_state_dict(self, state):
        self.next_device = int(state["next-device"])
"""

#: Who is available in each of the 4 rounds (4 devices), and their gains: strong enough for
#: every available device to meet the deadline with the tiny model (10 parameters).
AVAILABLE = np.array(
    [[True, True, False, True], [True, False, True, True], [False, True, True, True], [True] * 4]
)
GAIN_LIN = np.full((4, 4), 1e-9)
#: RoundRobin(per_round=2) from device 0, skipping the unavailable ones:
#: round 1 takes 0, 1 (next 2); round 2 takes 2, 3 (next 0); round 3 takes 1, 2 (0 is out;
#: next 3); round 4 takes 3, 0.
EXPECTED = [[0, 1], [2, 3], [1, 2], [0, 3]]


@pytest.fixture
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("my_research")
    (here / "researcher.py").write_text(textwrap.dedent(RESEARCHER))
    np.savez(here / "trace.npz", available=AVAILABLE, gain_lin=GAIN_LIN)
    return here


def settings(folder: Path, result_dir: Path, *, by_file: bool) -> str:
    """The run config; ``by_file``: name the file itself, else the module (on PYTHONPATH)."""
    where = f"{folder / 'researcher.py'}:" if by_file else "researcher:"
    return (
        f"policy='{where}RoundRobin' policy-params.per-round=2 dataset='{where}load' "
        f"model='{where}build' channel.model='trace' "
        f"channel.trace='{folder / 'trace.npz'}' num-devices=4 "
        f"num-server-rounds=4 batch-size=8 result-dir='{result_dir}'"
    )


def check_run(result_dir: Path) -> None:
    status = json.loads((result_dir / "status.json").read_text())
    assert status["state"] == "completed", status
    lines = [json.loads(x) for x in (result_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["scheduled"] for line in lines] == EXPECTED
    assert [line["uploaded"] for line in lines] == EXPECTED
    config = json.loads((result_dir / "config.json").read_text())
    assert config["num_classes"] == 2 and config["num_parameters"] == 4 * 2 + 2
    assert config["policy_params"] == {"per-round": 2} and config["protocol"] == "channel"
    assert 0.0 <= lines[-1]["accuracy"] <= 1.0


def environment(folder: Path | None) -> dict[str, str]:
    """This process's environment, with ``folder`` as PYTHONPATH (without one when None)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return env if folder is None else {**env, "PYTHONPATH": str(folder)}


@pytest.mark.parametrize("by_file", [True, False], ids=["file-paths", "modules-on-pythonpath"])
def test_all_four_run_in_process_named_in_the_run_config_alone(folder, tmp_path, by_file):
    out = tmp_path / "run"
    text = settings(folder, out, by_file=by_file)
    done = subprocess.run(
        [FEDCGD, "inprocess", "--run-config", text], cwd=PROJECT,
        env=environment(None if by_file else folder), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    check_run(out)


@pytest.mark.slow
def test_all_four_run_with_make_run(folder, tmp_path):
    out = tmp_path / "run"
    make = ["make", "-o", ".venv/.installed", "run"]  # -o: the environment is there, keep it
    done = subprocess.run(  # environment(None): the run config alone names everything
        [*make, f"RUN_CONFIG={settings(folder, out, by_file=True)}"], cwd=PROJECT,
        env=environment(None), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    check_run(out)
