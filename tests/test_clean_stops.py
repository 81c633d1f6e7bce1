"""A stop is always clean: SIGINT / SIGTERM take effect between writes (issue 30, point 3).

A signal sent from inside a write is held until the file is whole, then stops the run: status
``stopped``, every file whole, exit 130 / 143, and the printed command finishes the run.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from unittest import mock

import pytest
import torch
from run_results import assert_same_run, lines, whole_run
from test_resume_command import CONTINUE, printed_command, run_config_text, run_verbatim

from experiments.cli import invoke
from experiments.run import flwr_run
from server_app.run_folder.files import Interrupted, atomic_write, held
from server_app.run_folder.run_status import (
    COMPLETED,
    FAILED,
    RUNNING,
    STOPPED,
    RunStatus,
    read_status,
    write_status,
)

#: A checkpoint after every round: the round a stop lands in is the one that can be continued.
VALUES = {"num-devices": 8, "num-server-rounds": 6, "policy": "fedcgd-fscd", "checkpoint-every": 1}

#: The round in whose writes the signal is sent: from inside torch.save of its checkpoint
#: (between two chunks of the file), from its metrics line, from its status.
STOP_ROUND = 3


def signal_inside_torch_save(monkeypatch, signum: int, call: int) -> None:
    """The ``call``-th ``torch.save`` sends ``signum`` to this process after its first chunk."""
    real_save, calls = torch.save, []

    class Signalling:
        def __init__(self, handle):
            self.handle, self.sent = handle, False

        def write(self, data):
            written = self.handle.write(data)
            if not self.sent:
                self.sent = True
                os.kill(os.getpid(), signum)
            return written

        def flush(self):
            self.handle.flush()

    def save(obj, f, *args, **kwargs):
        calls.append(1)
        target = Signalling(f) if len(calls) == call else f
        return real_save(obj, target, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


#: The file a signal is sent from, the call that sends it, and which of that file's calls
#: (round 3's line is the third appended; its status the fourth written, after the start's).
WRITES = {
    "metrics.jsonl": ("write", "metrics.jsonl", STOP_ROUND),
    "status.json": ("replace", ".status.json.", 4),
}


def signal_inside_write(monkeypatch, signum: int, where: str) -> None:
    """The write of ``where`` named by :data:`WRITES` sends ``signum`` first."""
    function, name, call = WRITES[where]
    real, calls = getattr(os, function), []

    def hooked(target, *args):
        path = os.readlink(f"/proc/self/fd/{target}") if isinstance(target, int) else target
        if Path(path).name.startswith(name):
            calls.append(1)
            if len(calls) == call:
                os.kill(os.getpid(), signum)
        return real(target, *args)

    monkeypatch.setattr(os, function, hooked)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole") / "run"
    whole_run(folder, VALUES)
    return folder


@pytest.mark.parametrize(
    ("where", "signum"),
    [("checkpoint.pt", signal.SIGINT), ("checkpoint.pt", signal.SIGTERM),
     ("metrics.jsonl", signal.SIGINT), ("status.json", signal.SIGTERM)],
    ids=["torch-save-sigint", "torch-save-sigterm", "metrics-line-sigint", "status-sigterm"],
)  # fmt: skip
def test_a_signal_inside_a_write_stops_the_run_cleanly(
    tmp_path, monkeypatch, capsys, whole, where, signum
):
    if where == "checkpoint.pt":
        signal_inside_torch_save(monkeypatch, signum, call=STOP_ROUND)
    else:
        signal_inside_write(monkeypatch, signum, where)
    out_dir = tmp_path / "runs"
    code = invoke(["inprocess", "--out", str(out_dir), "--run-config", run_config_text(VALUES)])
    monkeypatch.undo()
    out, err = capsys.readouterr()
    name = signal.Signals(signum).name
    assert code == 128 + signum, err[-3000:]
    assert "Traceback" not in err and "RuntimeError" not in err, err[-3000:]
    folder = Path(out.splitlines()[0].removeprefix("result folder: "))
    stopped, last = err.strip().splitlines()[-2:]
    assert stopped.startswith(f"stopped by {name}: "), stopped
    written = lines(folder)  # each line parses: every file whole
    assert (folder / "metrics.jsonl").read_bytes().endswith(b"\n")
    assert [x["round"] for x in written] == list(range(1, STOP_ROUND + 1))
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "stopped" and status["reason"] == f"stopped by {name}"
    assert status["last_round"] == STOP_ROUND
    done = torch.load(folder / "checkpoint.pt")["round"]  # loads: whole
    # a stop waits for the round's files and its progress line: all say the same round
    assert done == STOP_ROUND
    progress = [x for x in out.splitlines() if x.startswith("round ")]
    assert progress[-1].startswith(f"round    {STOP_ROUND}/")
    assert not list(folder.glob(".*.tmp")) and not (folder / "model.pt").exists()
    assert last.startswith(f"{CONTINUE}{done} of {VALUES['num-server-rounds']}: "), last
    run_verbatim(printed_command(last, CONTINUE))
    assert_same_run(folder, whole, rounds=VALUES["num-server-rounds"])


class Stop(BaseException):
    pass


def raising_handler(signum, frame):
    raise Stop(signum)


def test_a_signal_during_a_write_is_delivered_after_it_once_and_other_threads_hold_none(tmp_path):
    previous = signal.signal(signal.SIGINT, raising_handler)
    try:
        reached_end = []
        with pytest.raises(Stop):
            with held():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)  # twice: delivered once
                with held():  # nested: the outer block delivers
                    atomic_write(tmp_path / "f.txt", "whole")
                reached_end.append(True)
        assert reached_end == [True]
        assert (tmp_path / "f.txt").read_text() == "whole"
        assert signal.getsignal(signal.SIGINT) is raising_handler
        seen = []  # outside the main thread nothing is held: the handler stays

        def write():
            with held():
                seen.append(signal.getsignal(signal.SIGINT))

        thread = threading.Thread(target=write)
        thread.start()
        thread.join()
        assert seen == [raising_handler]
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("state", [RUNNING, COMPLETED, FAILED, None])
def test_a_run_stopped_under_flwr_run_is_recorded_stopped(tmp_path: Path, monkeypatch, state):
    """``flwr run``'s ServerApp is stopped by PID and cannot record it: the command that ran it
    (the launcher, a comparison) does, once every process is gone; nothing else changes."""
    folder, reason = tmp_path / "run", "it broke" if state == FAILED else None
    folder.mkdir()
    if state is not None:
        write_status(folder, RunStatus(state, 4, 50, reason=reason, devices_lost=2))
    stopped = mock.MagicMock()  # SIGTERM while the run's processes run
    stopped.return_value.__enter__.side_effect = Interrupted(signal.SIGTERM)
    monkeypatch.setattr(flwr_run, "LocalFederation", stopped)
    with pytest.raises(Interrupted):
        flwr_run.run_flwr({"result-dir": str(folder)}, num_supernodes=2)
    status = read_status(folder)
    if state is None:  # no status: nothing written
        assert status is None and not list(folder.iterdir())
        return
    after = STOPPED if state == RUNNING else state
    assert status is not None and (status.state, status.last_round) == (after, 4)
    assert (status.num_server_rounds, status.devices_lost) == (50, 2)
    assert status.reason == ("stopped by SIGTERM" if after == STOPPED else reason)
