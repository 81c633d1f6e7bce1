"""The launcher leaves nothing behind: processes, temporary Flower homes, keys, data folders.

``fedcgd run`` runs in a session of its own, ``TMPDIR`` in ``tmp_path``; the process tree is
read from ``/proc`` here, not with the code under test.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from proc_tree import alive, command_line, descendants
from run_results import rounds_written
from subprocesses import FEDCGD, start_in_own_session, wait_for


def start_launcher(tmp_path: Path, *args: str, command: str = "run") -> subprocess.Popen[str]:
    """``fedcgd COMMAND ARGS`` in its own session, temporary files in tmp_path."""
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    # Ray's sockets live under its temporary folder and must stay short (AF_UNIX: 107 bytes)
    env = {**os.environ, "TMPDIR": str(temp), "RAY_TMPDIR": "/tmp", "PYTHONUNBUFFERED": "1"}
    return start_in_own_session([FEDCGD, command, *args], env)


def run_launcher_to_the_end(tmp_path: Path, result_dir: Path, *args: str) -> int:
    """Run a one-round launch with ``args`` into ``result_dir`` to completion; its PID."""
    run_config = f"num-devices=2 num-server-rounds=1 result-dir='{result_dir}'"
    proc = start_launcher(tmp_path, *args, "--run-config", run_config)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    assert (result_dir / "summary.json").exists()
    return proc.pid


def leftovers(tmp_path: Path, pattern: str) -> list[Path]:
    return sorted((tmp_path / "tmp").glob(pattern))


#: (subcommand, extra arguments, folder of the run's metrics relative to tmp_path)
LAUNCHER = ("run", ("--out", "{tmp}/runs"), "run")
COMPARISON = ("compare", ("--policies", "bc", "--out", "{tmp}/compare"),
              "compare/bc/seed-0")  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "signum", "code", "to_group"),
    [
        (LAUNCHER, signal.SIGTERM, 143, False),
        (LAUNCHER, signal.SIGINT, 130, True),
        (COMPARISON, signal.SIGTERM, 143, False),
    ],
    ids=["sigterm", "ctrl-c", "comparison-sigterm"],
)
def test_a_signal_stops_every_process_and_removes_the_flower_home(
    tmp_path: Path, command: tuple[str, tuple[str, ...], str], signum: int, code: int,
    to_group: bool,
) -> None:  # fmt: skip
    """SIGTERM to the launcher or a comparison, or Ctrl-C (SIGINT to the process group, as a
    terminal does): every process it started is gone, one line says so, no traceback."""
    subcommand, extra, folder = command
    result_dir = tmp_path / folder
    run_config = "num-devices=4 num-server-rounds=500 checkpoint-every=1"  # resumable at once
    if subcommand == LAUNCHER[0]:
        run_config += f" result-dir='{result_dir}'"
    args = [a.format(tmp=tmp_path) for a in extra]
    proc = start_launcher(tmp_path, *args, "--run-config", run_config, command=subcommand)
    tree: set[int] = set()
    try:
        wait_for(lambda: rounds_written(result_dir) >= 1, proc, limit_s=300)  # all up
        tree = descendants(proc.pid)
        assert len(tree) >= 3, tree  # flwr run, SuperLink, superexec / simulation, Ray, ...
        if to_group:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=120)
        still = {pid for pid in tree if alive(pid)}
        if still:  # give processes that were SIGKILLed a moment to be reaped
            time.sleep(2)
            still = {pid for pid in tree if alive(pid)}
        assert not still, {pid: command_line(pid) for pid in still}
        assert proc.returncode == code, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        stopped, last = err.strip().splitlines()[-2:]
        assert "stopped" in stopped and signal.Signals(signum).name in stopped, err[-2000:]
        # then how to go on (tests/test_resume_command.py runs these commands)
        assert last.startswith(("to continue after round ", "to go on, run the same command")), last
        status = json.loads((result_dir / "status.json").read_text())
        assert status["state"] == "stopped", status  # not "running": its launcher says so
        assert status["reason"] == f"stopped by {signal.Signals(signum).name}"
        assert leftovers(tmp_path, "flwr-home-*") == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        for pid in filter(alive, tree):  # clean up after a failure: SIGKILL what is alive
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_finished_tls_run_leaves_no_flower_home_and_no_keys_unless_asked(tmp_path: Path):
    pid = run_launcher_to_the_end(tmp_path, tmp_path / "run", "--deployment", "--tls")
    assert descendants(pid) == set()
    assert leftovers(tmp_path, "fedcgd-certificates-*") == []
    assert list((tmp_path / "tmp").rglob("*.key")) == []
    assert leftovers(tmp_path, "flwr-home-*") == []

    kept = tmp_path / "certificates"  # asked for: kept
    tls = ("--deployment", "--tls", "--certificates-dir", str(kept))
    run_launcher_to_the_end(tmp_path, tmp_path / "run2", *tls)
    keys = ["ca.key", "server.key", "supernode-0.key", "supernode-1.key"]
    assert sorted(p.name for p in kept.glob("*.key")) == keys


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--run-config", "dataset='cifar10' data-dir='{tmp}/absent/data' num-devices=2"],
         ["{tmp}/absent/data"]),
        (["--ray-address", "127.0.0.1:{port}", "--run-config",
          "num-devices=2 num-server-rounds=1 result-dir='{tmp}/absent'"],
         ["127.0.0.1:{port}", "--ray-address"]),
    ],
    ids=["missing-cifar-folder", "unreachable-ray-address"],
)  # fmt: skip
def test_a_refused_launch_is_one_line_and_creates_nothing(
    tmp_path: Path, options: list[str], said: list[str]
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))  # a port nothing listens on: bound, never listening
        port = int(sock.getsockname()[1])
        proc = start_launcher(tmp_path, *[a.format(tmp=tmp_path, port=port) for a in options])
        try:
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert proc.returncode == 2, out[-2000:] + err[-2000:]
    assert err.startswith("error:") and err.count("\n") == 1, err
    assert all(words.format(tmp=tmp_path, port=port) in err for words in said), err
    assert not (tmp_path / "absent").exists()
    assert leftovers(tmp_path, "flwr-home-*") == []
