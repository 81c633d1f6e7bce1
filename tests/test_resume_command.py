"""A run that stops says how to go on: its folder first, the exact command last, run verbatim.

Each command is stopped by a signal after round k; the command it prints is run word for word,
and the run must end as an uninterrupted one does (timings aside, the same model).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import click
import pytest
import torch
import typer
from run_results import assert_same_run, lines, rounds_written, whole_run
from subprocesses import FEDCGD, fedcgd, run_ok, start_in_own_session, wait_for
from test_paths import hostile_folder

from experiments.cli import app
from experiments.cli.options import given_options, started_as
from experiments.run.resume_command import single_run_line
from experiments.run.run_config import format_run_config as run_config_text
from fedcgd_config.schema import PROJECT_DIR
from server_app.run_folder.run_status import FAILED, RUNNING, RunStatus, write_status

CONTINUE = "to continue after round "
NO_CHECKPOINT = "cannot be resumed: "


def start(words: list[str]) -> subprocess.Popen[str]:
    """``words`` in the project folder, in a session of its own (a Ctrl-C reaches the group)."""
    return start_in_own_session(words, {**os.environ, "PYTHONUNBUFFERED": "1"})


def first_line_folder(proc: subprocess.Popen[str], prefix: str = "result folder: ") -> Path:
    """The folder the command's first line names (read as soon as it is printed)."""
    assert proc.stdout is not None
    first = proc.stdout.readline().rstrip("\n")
    assert first.startswith(prefix), first
    return Path(first.removeprefix(prefix))


def stop_after(
    proc: subprocess.Popen[str], folder: Path, rounds: int, signum: int, limit_s: float = 300
) -> tuple[str, str]:
    """Signal the command (its whole group for SIGINT, as Ctrl-C) once ``rounds`` are written."""
    wait_for(lambda: rounds_written(folder) >= rounds, proc, limit_s)
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    return proc.communicate(timeout=120)


def printed_command(line: str, head: str) -> list[str]:
    """The command words at the end of ``line`` after ``head`` (``head`` ends with ': ')."""
    assert line.startswith(head), line
    return shlex.split(line.split(": ", 1)[1])


def run_verbatim(words: list[str], limit_s: float = 600) -> subprocess.CompletedProcess[str]:
    """A printed command run word for word from the project folder; it must exit with 0."""
    assert Path(PROJECT_DIR / words[0]).resolve() == Path(FEDCGD).resolve(), words
    return run_ok(words, timeout=limit_s)


@pytest.mark.parametrize(
    "signum",
    [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stopped_inprocess_run_prints_the_command_that_finishes_it_exactly(tmp_path, signum):
    """``--out`` and ``data-dir`` lie in a folder whose name holds a space, both quotes, a
    backslash and a non-BMP character; the printed command is pasted into ``bash``."""
    base = hostile_folder(tmp_path)
    out, data = base / "runs 😀", base / "data 'ü'"
    # 40 rounds: the signal after round 12 leaves 28 to go (a round takes tens of milliseconds);
    # the default checkpoint-every = 10 puts it between two checkpoints
    values = {
        "num-devices": 12, "num-server-rounds": 40, "policy": "fedcgd-fscd", "data-dir": str(data)
    }  # fmt: skip
    proc = start(fedcgd("inprocess", "--out", str(out), "--run-config", run_config_text(values)))
    folder = first_line_folder(proc)
    assert folder.parent == out  # named by what differs from the defaults, then the time
    assert folder.name.startswith("fedcgd-fscd_num-server-rounds=40_num-devices=12-")
    _, err = stop_after(proc, folder, 12, signum)
    assert proc.returncode == 128 + signum, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    stopped, last = err.strip().splitlines()[-2:]
    name = signal.Signals(signum).name
    assert stopped == f"stopped by {name}: every process of the run was stopped (exit code " + (
        f"{128 + signum})"
    )
    # the last checkpoint before the signal (round 10, or a later one under load); the
    # resume drops the lines after it and runs those rounds again
    done = torch.load(folder / "checkpoint.pt")["round"]
    assert 10 <= done < 40 and not (folder / "model.pt").exists()
    assert last.startswith(f"{CONTINUE}{done} of 40: "), last
    words = printed_command(last, CONTINUE)
    assert words[1] == "inprocess"

    again = run_ok(["bash", "-c", last.split(": ", 1)[1]], timeout=600)  # pasted into a shell
    assert again.stdout.splitlines()[0] == f"result folder: {folder}"
    assert json.loads((folder / "config.json").read_text())["task"]["data_dir"] == str(data)
    assert again.stdout.strip().splitlines()[-1] == f"completed: 40 rounds, results in {folder}"
    whole = tmp_path / "whole"
    whole_run(whole, values)
    assert_same_run(folder, whole, rounds=40)


def test_a_run_stopped_before_its_first_checkpoint_says_so_and_how_to_start_again(tmp_path):
    # the first checkpoint is due after round 1,000, i.e. after the last round (40)
    values = {"num-devices": 10, "num-server-rounds": 40, "checkpoint-every": 1000}
    out_dir = tmp_path / "runs"
    proc = start(
        fedcgd("inprocess", "--out", str(out_dir), "--run-config", run_config_text(values))
    )
    folder = first_line_folder(proc)
    _, err = stop_after(proc, folder, 3, signal.SIGTERM)
    assert proc.returncode == 143, err[-3000:]
    last = err.strip().splitlines()[-1]
    head = (
        f"{NO_CHECKPOINT}{folder} holds no checkpoint (it stopped before its first "
        "checkpoint); to start again in a new folder: "
    )
    assert last.startswith(head), last
    words = shlex.split(last.removeprefix(head))
    assert "resume-from" not in last and words[words.index("--out") + 1] == str(out_dir)
    again = run_verbatim(words)
    folders = sorted(p for p in out_dir.iterdir() if p != folder)
    assert len(folders) == 1 and again.stdout.splitlines()[0] == f"result folder: {folders[0]}"
    assert [x["round"] for x in lines(folders[0])] == list(range(1, 41))
    assert rounds_written(folder) < 40  # the stopped run's folder is left as it was


@pytest.mark.slow
def test_a_stopped_launcher_prints_the_command_that_finishes_it_exactly(tmp_path):
    """``make run``'s launcher (flwr run, Ray) stopped with Ctrl-C after round 12 (after the
    first checkpoint of the default checkpoint-every = 10)."""
    values = {"num-devices": 4, "num-server-rounds": 40}
    proc = start(
        fedcgd("run", "--out", str(tmp_path / "runs"), "--run-config", run_config_text(values))
    )  # fmt: skip
    folder = first_line_folder(proc)
    _, err = stop_after(proc, folder, 12, signal.SIGINT, limit_s=600)
    assert proc.returncode == 130, err[-3000:]
    last = err.strip().splitlines()[-1]
    done = torch.load(folder / "checkpoint.pt")["round"]
    assert last.startswith(f"{CONTINUE}{done} of 40: "), last
    words = printed_command(last, CONTINUE)
    assert words[1] == "run"
    again = run_verbatim(words, limit_s=900)
    assert again.stdout.splitlines()[0] == f"result folder: {folder}"
    whole = tmp_path / "whole"
    whole_run(whole, values, per_device=True)  # the launcher's flwr run: one device at a time
    assert_same_run(folder, whole, rounds=40)


@pytest.mark.slow
def test_make_run_stopped_with_ctrl_c_ends_with_the_continue_command(tmp_path):
    """``make run`` stopped by Ctrl-C: the continue command stays the last line (no make line),
    and make itself ends by the signal, as the run did."""
    folder = tmp_path / "run"
    config = run_config_text({"num-devices": 4, "num-server-rounds": 40, "checkpoint-every": 1})
    proc = start_in_own_session(  # -o: the virtual environment is there, do not reinstall it
        ["make", "-o", ".venv/.installed", "run", f"RUN_CONFIG={config} result-dir='{folder}'"],
        {**os.environ, "PYTHONUNBUFFERED": "1"},
        merge_stderr=True,
    )
    out, _ = stop_after(proc, folder, 3, signal.SIGINT, limit_s=600)
    assert proc.returncode in (-signal.SIGINT, 130), out[-3000:]
    assert "make: ***" not in out, out[-3000:]
    done = torch.load(folder / "checkpoint.pt")["round"]
    assert out.strip().splitlines()[-1].startswith(f"{CONTINUE}{done} of 40: "), out[-3000:]


def folder_with(tmp_path: Path, status: RunStatus, *files: str) -> Path:
    """A run folder with ``status`` and ``files`` (``checkpoint.pt``: the one of round 7), from
    which the last line is said without a run."""
    folder = tmp_path / "run"
    folder.mkdir()
    write_status(folder, status)
    for name in files:
        (folder / name).write_bytes(b"")
    if "checkpoint.pt" in files:
        stand_in_checkpoint(folder, 7)
    return folder


def stand_in_checkpoint(folder: Path, server_round: int) -> None:
    """A checkpoint of ``server_round`` with the fields the checkpoint reader requires."""
    empty = {key: {} for key in ("model", "policy_state", "cell_rng_state", "policy_rng_state")}
    torch.save({"round": server_round, "elapsed_s": 0.0, **empty}, folder / "checkpoint.pt")


@pytest.mark.parametrize(
    ("status", "files", "every", "says"),
    [
        (RunStatus(FAILED, 50, 50, reason="no device uploaded"), ("checkpoint.pt", "summary.json"),
         1, "nothing to continue: all 50 rounds ran; results in {}"),
        # a full disk refused summary.json: the resume writes the run's last files
        (RunStatus(FAILED, 50, 50, reason="no space"), ("checkpoint.pt", "model.pt"), 1,
         "to continue after round 7 of 50: RESUME"),
        # round 8's checkpoint never written: the checkpoint's own round is named
        (RunStatus(RUNNING, 8, 50), ("checkpoint.pt",), 1, "to continue after round 7 of 50: "
         "RESUME"),
    ],
)  # fmt: skip
def test_the_last_line_from_the_folders_files(tmp_path, status, files, every, says):
    folder = folder_with(tmp_path, status, *files)
    assert single_run_line(folder, "RESUME", "AGAIN", every) == says.format(folder)


def command_context(command: str, argv: list[str]) -> click.Context:
    """The click context of ``fedcgd <command> <argv>`` once parsed (what it is given)."""
    group = typer.main.get_command(app)
    parent = click.Context(group, info_name="fedcgd")
    return group.get_command(parent, command).make_context(command, argv, parent=parent)


def test_the_resume_command_keeps_the_options_and_settings_as_written(tmp_path, monkeypatch):
    from experiments.run.resume_command import continue_line

    # every kind of click option the commands declare comes back as the user wrote it
    ctx = command_context("certificates", ["--host", "a", "--host", "b c"])
    assert given_options(ctx) == ["--host", "a", "--host", "b c"]
    flag = click.Command("x", params=[click.Option(["--on/--off"], default=True)])
    assert given_options(flag.make_context("x", ["--off"])) == ["--off"]
    assert given_options(flag.make_context("x", ["--on"])) == []
    monkeypatch.chdir(PROJECT_DIR)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    folder = folder_with(tmp_path, RunStatus(RUNNING, 3, 9))
    stand_in_checkpoint(folder, 3)
    text = f"num-devices=4 num-server-rounds=9 policy='bc' result-dir='{folder}'"
    argv = ["--out", "elsewhere", "--deployment", "--num-supernodes", "5", "--run-config", text]
    argv += ["--cpus-per-client", "1"]  # the default: not repeated
    ctx = command_context("run", argv)
    overrides = {"num-devices": 4, "num-server-rounds": 9, "policy": "bc"}
    overrides["result-dir"] = str(folder)
    line = continue_line(started_as(ctx), overrides, folder, 1)()
    words = printed_command(line, CONTINUE)
    assert line.startswith(f"{CONTINUE}3 of 9: ")
    # --out has no say in a resume; result-dir gives way to resume-from
    assert words == [
        ".venv/bin/fedcgd", "run", "--num-supernodes", "5", "--deployment", "--run-config",
        f'num-devices=4 num-server-rounds=9 policy="bc" resume-from="{folder}"',
    ]  # fmt: skip
    (folder / "checkpoint.pt").unlink()
    again = continue_line(started_as(ctx), overrides, folder, 1)()
    assert shlex.split(again.split("new folder: ", 1)[1])[1:] == [
        "run", "--num-supernodes", "5", "--deployment", "--out", "elsewhere", "--run-config",
        'num-devices=4 num-server-rounds=9 policy="bc"',
    ]  # fmt: skip


def test_the_script_is_written_as_the_readme_writes_it(tmp_path, monkeypatch):
    from experiments.run.resume_command import fedcgd_command

    monkeypatch.setattr(sys, "executable", str(PROJECT_DIR / ".venv" / "bin" / "python"))
    monkeypatch.chdir(PROJECT_DIR)
    assert fedcgd_command(["inprocess", "--run-config", "a='b c'"]) == (
        ".venv/bin/fedcgd inprocess --run-config 'a='\"'\"'b c'\"'\"''"
    )
    monkeypatch.chdir(tmp_path)  # elsewhere: the absolute path
    assert fedcgd_command([]) == f"{PROJECT_DIR}/.venv/bin/fedcgd"
    python = tmp_path / "bin" / "python"  # an interpreter without the script beside it
    monkeypatch.setattr(sys, "executable", str(python))
    assert fedcgd_command(["run"]) == "bin/python -m experiments.cli run"
