"""Runs side by side (``launcher.jobs`` > 1: Ray tasks on this machine)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from proc_tree import alive, command_line, descendants
from run_results import comparable, same_model
from subprocesses import FEDCGD, run_ok
from test_reproduce import load

from experiments.compare.reproduce import reproduce
from experiments.run.processes import usable_cores
from experiments.run.ray_runs import RUN_LOG, resolve_jobs


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True, None])
def test_jobs_zero_means_one_per_core_only_inprocess_side_by_side_and_bad_counts_refused(bad):
    assert resolve_jobs(0, "inprocess") == len(os.sched_getaffinity(0)) == usable_cores()
    assert resolve_jobs(3, "inprocess") == 3 and resolve_jobs(1, "simulation") == 1
    with pytest.raises(ValueError, match=r"jobs: got 2 with engine 'simulation'.*inprocess"):
        resolve_jobs(2, "simulation")
    with pytest.raises(ValueError, match=r"jobs: got .*allowed: a whole number >= 1"):
        resolve_jobs(bad, "inprocess")


@pytest.mark.slow  # 60 s; test_paths runs a preset side by side in the default suite
def test_a_preset_run_side_by_side_equals_the_same_preset_one_at_a_time(tmp_path, capsys):
    common = ["policies=[fedcgd-fscd,bc]", "seeds=[0,1]", "++run.num-server-rounds=3",
              "++run.num-devices=8", "launcher.engine=inprocess"]  # fmt: skip
    one, two = tmp_path / "one", tmp_path / "two"
    assert reproduce(load("digits_local_steps", [*common, f"out={one}", "launcher.jobs=1"])) == 0
    assert "1 run(s) at once" in capsys.readouterr().out
    assert reproduce(load("digits_local_steps", [*common, f"out={two}", "launcher.jobs=2"])) == 0
    printed = capsys.readouterr().out
    assert "2 run(s) at once" in printed and "completed in" in printed
    runs = sorted(p.relative_to(one) for p in one.glob("*/*/seed-*"))
    assert len(runs) == 3 * 2 * 2  # tau in {1, 5, 10} x two policies x two seeds
    for run in runs:
        assert comparable(one / run) == comparable(two / run) and same_model(one / run, two / run)
        assert not (one / run / RUN_LOG).exists()
        assert "completed: 3 rounds" in (two / run / RUN_LOG).read_text()
    assert (one / "table.csv").read_text() == (two / "table.csv").read_text().replace(
        str(two), str(one)
    )


def test_a_failed_run_side_by_side_is_named_and_the_exit_code_is_one(tmp_path, capsys):
    # A policy file that raises in its third round: that run fails, the other completes.
    policy = tmp_path / "breaks.py"
    policy.write_text(
        "from dataclasses import dataclass, field\n"
        "import numpy as np\n"
        "from fedcgd_strategy import Policy, decision_from_mask\n"
        "@dataclass\n"
        "class Breaks(Policy):\n"
        "    rounds: int = field(default=0, init=False)\n"
        "    needs_reports = False\n"
        "    def schedule(self, inputs, rng):\n"
        "        self.rounds += 1\n"
        "        if self.rounds == 3:\n"
        "            raise RuntimeError('broken on purpose')\n"
        "        first = np.zeros(inputs.num_devices, dtype=bool)\n"
        "        first[np.flatnonzero(inputs.candidate)[:1]] = True\n"
        "        return decision_from_mask(inputs, first)\n"
    )
    overrides = [f"policies=[bc,'{policy}:Breaks']", "seeds=[0]", "++run.num-server-rounds=4",
                 "++run.num-devices=8", "launcher.engine=inprocess", "launcher.jobs=2",
                 f"out={tmp_path / 'out'}", "sweep.local-steps=[1]"]  # fmt: skip
    assert reproduce(load("digits_local_steps", overrides)) == 1
    captured = capsys.readouterr()
    assert (
        f"1 of 2 runs failed: local-steps=1/Breaks/seed-0 (exit code 1: policy "
        f"'{policy}:Breaks', round 3: schedule() raised RuntimeError: broken on purpose "
        "(breaks.py:11 in schedule))" in captured.err
    )
    log = (tmp_path / "out" / "local-steps=1" / "Breaks" / "seed-0" / RUN_LOG).read_text()
    assert "broken on purpose" in log


@pytest.mark.slow  # 55 s; test_kill9, test_resume_command stop and resume comparisons by default
def test_a_stopped_side_by_side_comparison_stops_every_run_and_resumes_to_the_same_models(
    tmp_path,
):
    """SIGTERM mid-comparison: exit 143, no run left running; again: resumed, bit-identical."""
    project = Path(__file__).resolve().parents[1]
    # 150 rounds: neither run ends between the look at its task and the signal.
    settings = "num-server-rounds=150 num-devices=8 checkpoint-every=1 eval-every=150"
    words = ["--policies", "fedcgd-fscd,bc", "--seeds", "0", "--engine", "inprocess"]
    command = [FEDCGD, "compare", *words]
    stopped, whole = tmp_path / "stopped", tmp_path / "whole"
    side_by_side = [*command, "--jobs", "2", "--run-config", settings, "--out", str(stopped)]
    proc = subprocess.Popen(side_by_side, cwd=project, stdout=-1, stderr=-1, text=True)
    checkpoints = [stopped / p / "seed-0" / "checkpoint.pt" for p in ("fedcgd-fscd", "bc")]
    deadline = time.monotonic() + 120
    while not all(c.exists() for c in checkpoints) and time.monotonic() < deadline:
        time.sleep(0.05)
    children = descendants(proc.pid)
    assert sum("ray::run_task" in command_line(pid) for pid in children) == 2  # side by side
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM" in err
    deadline = time.monotonic() + 5.0  # Ray's processes end as the command ends
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in children)
    again = run_ok(side_by_side, timeout=300, cwd=project)
    assert again.stdout.count("resumed from its checkpoint") == 2
    one_at_a_time = [*command, "--run-config", settings, "--out", str(whole)]
    run_ok(one_at_a_time, timeout=300, cwd=project)
    for policy in ("fedcgd-fscd", "bc"):
        run, ref = stopped / policy / "seed-0", whole / policy / "seed-0"
        assert comparable(run) == comparable(ref) and same_model(run, ref)
