"""``kill -9`` of a command: nothing it started stays alive, and a later run continues exactly.

The process tree is read from ``/proc`` before the kill and must be gone within
:data:`GONE_WITHIN_S`; the continued run equals an uninterrupted one (timings aside) bit for bit.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
import torch
from proc_tree import alive, command_line, descendants, marked
from run_results import assert_same_run, lines, rounds_written, two_policy_preset, whole_run
from subprocesses import FEDCGD, wait_for

from experiments.run.run_config import format_run_config
from fedcgd_config.schema import PROJECT_DIR
from fedcgd_config.settings import default_run_config

#: Seconds every process of a killed command has to be gone in.
GONE_WITHIN_S = 5.0


def start(command: str, *args: str, env: dict | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [FEDCGD, command, *args],
        cwd=PROJECT_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # as a terminal would not: a kill of the group cannot help
    )


def finish(proc: subprocess.Popen[str], timeout_s: float) -> None:
    """Wait for the command; assert that it exited with 0."""
    _, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err


def inprocess(values: dict, **more: object) -> subprocess.Popen[str]:
    run_config = format_run_config({**values, **more})
    return start("inprocess", "--run-config", run_config)


def kill9_and_check_nothing_survives(proc: subprocess.Popen[str], before: int | set[int]) -> None:
    """``kill -9`` the command, assert that ``before`` (or its tree, at least that many) goes."""
    if isinstance(before, int):
        minimum, before = before, descendants(proc.pid)
        assert len(before) >= minimum, {p: command_line(p) for p in before}
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + GONE_WITHIN_S
    left = {p for p in before if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {p for p in left if alive(p)}
    for pid in left:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert not left, {p: command_line(p) for p in left}


def test_a_killed_starter_takes_its_trees_along_other_sessions_and_orphans_included(tmp_path):
    mark = f"FEDCGD_TEST_{uuid.uuid4().hex}"
    script = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(PROJECT_DIR)!r})\n"
        "from experiments.run.processes import popen\n"
        "popen(['sh', '-c', 'setsid sleep 300 & (sleep 300 &); sleep 300 & wait'],\n"
        "      start_new_session=True)\n"
        "time.sleep(300)\n"
    )
    env = {**os.environ, mark: "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 30
        # three sleeps: one in a session of its own, one orphaned (its subshell exited); a
        # shell whose command line names "sleep 300" is not one (it may not have forked yet)
        while sum(command_line(p).startswith("sleep 300") for p in marked(mark)) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        before = marked(mark) - {proc.pid}  # the watcher, sh, three sleeps
        assert len(before) >= 5, {p: command_line(p) for p in before}
        kill9_and_check_nothing_survives(proc, before)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in marked(mark):
            os.kill(pid, signal.SIGKILL)


#: Starts a process that ignores SIGTERM (in a session of its own), prints its PID once it
#: does, then exits with 3 (``ended``) or waits for input (``running``).
LEAVES_A_STUBBORN_CHILD = (
    "import subprocess, sys\n"
    "code = 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(1, flush=True); time.sleep(300)'\n"
    "child = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE,\n"
    "                         start_new_session=True)\n"
    "child.stdout.readline(); print(child.pid, flush=True)\n"
    "sys.exit(3) if sys.argv[1] == 'ended' else input()\n"
)


@pytest.mark.parametrize(("state", "code"), [("ended", 3), ("running", -signal.SIGTERM)])
def test_a_stop_kills_the_whole_tree_after_the_grace_period(state, code):
    # The parent ends on SIGTERM (or has ended already); its child ignores SIGTERM: SIGKILL.
    from experiments.run.processes import popen, stop

    command = [sys.executable, "-c", LEAVES_A_STUBBORN_CHILD, state]
    proc = popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        if state == "ended":
            proc.wait(timeout=30)
        stop([proc], grace_s=0.5)
        assert proc.returncode == code
        assert not alive(child), command_line(child)
    finally:
        for pid in (proc.pid, child):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_killed_in_process_run_with_default_settings_resumes_exactly(tmp_path):
    # Default settings: a checkpoint every 10 rounds; killed after the first one
    values = {"num-server-rounds": 60, "num-devices": 20}  # killed far from its end
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    whole_run(whole, values)  # the uninterrupted run, in this process: the same results

    proc = inprocess(values, **{"result-dir": str(broken)})
    wait_for(lambda: rounds_written(broken) >= 12, proc, limit_s=300)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (broken / "model.pt").exists()  # killed mid-run
    # what a kill between creating a temporary file and renaming it leaves: the resume's
    # writer removes it (regular files of that pattern only)
    (broken / ".checkpoint.pt.k1ll3d.tmp").write_bytes(b"half a checkpoint")
    (broken / ".notes.tmp").write_text("not ours")
    finish(inprocess(values, **{"resume-from": str(broken)}), timeout_s=300)
    assert not (broken / ".checkpoint.pt.k1ll3d.tmp").exists()
    assert (broken / ".notes.tmp").read_text() == "not ours"
    assert_same_run(broken, whole, rounds=60)


#: ``fedcgd inprocess ARGS`` whose process kills itself (SIGKILL) right after the metrics line
#: of round ``argv[1]`` is appended (before that round's status and any checkpoint).
KILLED_AFTER_A_LINE = (
    "import os, signal, sys\n"
    "from server_app.run_folder.results import ResultWriter\n"
    "append = ResultWriter.append_round\n"
    "def append_and_die(self, line):\n"
    "    append(self, line)\n"
    "    if line['round'] == int(sys.argv[1]):\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "ResultWriter.append_round = append_and_die\n"
    "from experiments.cli import invoke\n"
    "sys.exit(invoke(sys.argv[2:]))\n"
)


def test_a_kill_between_checkpoints_keeps_the_unsynced_lines_and_resumes_exactly(tmp_path):
    # Default settings; killed half-way between the first checkpoint and the second: the lines
    # and the status written after the checkpoint (without an fsync) are in the files, and the
    # resume runs those rounds again from the checkpoint.
    every = int(default_run_config()["checkpoint-every"])
    killed_after = every + (every + 1) // 2
    values = {"num-server-rounds": killed_after + 5, "num-devices": 20}
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    whole_run(whole, values)
    run_config = format_run_config({**values, "result-dir": str(broken)})
    done = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_A_LINE, str(killed_after), "inprocess",
         "--run-config", run_config],
        cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert [x["round"] for x in lines(broken)] == list(range(1, killed_after + 1))
    status = json.loads((broken / "status.json").read_text())
    assert status["state"] == "running" and status["last_round"] == killed_after - 1
    assert torch.load(broken / "checkpoint.pt")["round"] == every
    assert not (broken / "model.pt").exists()

    finish(inprocess(values, **{"resume-from": str(broken)}), timeout_s=300)
    assert_same_run(broken, whole, rounds=values["num-server-rounds"])


def test_a_killed_comparison_leaves_no_run_alive_and_runs_again_exactly(tmp_path):
    args = ["--engine", "inprocess", "--jobs", "2", "--policies", "bc,fedcgd-fscd"]
    # 200 rounds (about 7 s a run here): the two runs start seconds apart on a busy CI
    # machine, and at 60 rounds one had finished before the other wrote its fifth line
    run_config = "num-devices=20 num-server-rounds=200"
    for policy in ("bc", "fedcgd-fscd"):  # the uninterrupted runs, in this process
        values = {"num-devices": 20, "num-server-rounds": 200, "policy": policy}
        whole_run(tmp_path / "whole" / policy / "seed-0", values)

    out = tmp_path / "broken"
    proc = start("compare", *args, "--out", str(out), "--run-config", run_config)
    folders = [out / policy / "seed-0" for policy in ("bc", "fedcgd-fscd")]
    wait_for(lambda: all(rounds_written(f) >= 5 for f in folders), proc, limit_s=300)
    # the watcher, two run processes
    kill9_and_check_nothing_survives(proc, 3)
    assert all(not (f / "model.pt").exists() for f in folders)

    again = start("compare", *args, "--out", str(out), "--run-config", run_config)
    finish(again, timeout_s=600)
    with open(out / "runs.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted((r["policy"], r["seed"]) for r in rows) == [("bc", "0"), ("fedcgd-fscd", "0")]
    for folder in folders:
        assert_same_run(folder, tmp_path / "whole" / folder.relative_to(out), rounds=200)


def launcher(values: dict, env: dict, **more: object) -> subprocess.Popen[str]:
    run_config = format_run_config({**values, **more})
    return start("run", "--run-config", run_config, env=env)


@pytest.mark.slow
def test_a_killed_launcher_leaves_nothing_of_flower_or_ray_and_resumes_exactly(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "RAY_TMPDIR": "/tmp", "PYTHONUNBUFFERED": "1"}
    values = {"num-devices": 4, "num-server-rounds": 40}
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    finish(launcher(values, env, **{"result-dir": str(whole)}), timeout_s=900)

    proc = launcher(values, env, **{"result-dir": str(broken)})
    wait_for(lambda: rounds_written(broken) >= 12, proc, limit_s=600)  # after a checkpoint
    # flwr run, SuperLink, SuperExec, flwr-simulation, Ray (gcs, raylet, workers), the watcher
    kill9_and_check_nothing_survives(proc, 8)
    finish(launcher(values, env, **{"resume-from": str(broken)}), timeout_s=900)
    assert_same_run(broken, whole, rounds=40)


@pytest.mark.slow
def test_a_killed_reproduce_leaves_no_run_alive_and_runs_again_exactly(tmp_path):
    out = tmp_path / "sweep"
    args = two_policy_preset(
        out, "launcher.jobs=2", "++run.num-server-rounds=200", "++run.num-devices=20"
    )
    proc = start("reproduce", *args)
    folders = [out / "default" / policy / "seed-0" for policy in ("bc", "fedcgd-fscd")]
    wait_for(lambda: all(rounds_written(f) >= 5 for f in folders), proc, limit_s=300)
    kill9_and_check_nothing_survives(proc, 3)
    finish(start("reproduce", *args), timeout_s=900)
    for folder in folders:
        assert [x["round"] for x in lines(folder)] == list(range(1, 201))
