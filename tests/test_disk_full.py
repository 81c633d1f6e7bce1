"""A full disk (or another I/O error) while a run writes: one line, a true status, no leftovers."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from run_results import comparable, rounds_written, same_model
from subprocesses import fedcgd

from experiments.cli import invoke
from experiments.run.run_config import format_run_config
from fedcgd_config.schema import PROJECT_DIR
from server_app.run_folder.files import ResultWriteError, append_line, atomic_write, sync_files

SMALL = {"num-devices": 8, "num-server-rounds": 5, "channel.availability-prob": 0.8,
         "checkpoint-every": 1}  # fmt: skip


def fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@contextlib.contextmanager
def disk_full(
    folder: Path, when: Callable[[str], bool], code: int = errno.ENOSPC
) -> Iterator[None]:
    """Writes of files in ``folder`` fail with ``code`` while ``when(path)`` holds."""
    prefix = str(folder) + os.sep

    def failing(real):
        def call(target, *args):
            path = fd_path(target) if isinstance(target, int) else os.fspath(target)
            if path.startswith(prefix) and when(path):
                raise OSError(code, os.strerror(code))
            return real(target, *args)

        return call

    with pytest.MonkeyPatch.context() as patch:
        for name in ("write", "fsync", "replace"):
            patch.setattr(os, name, failing(getattr(os, name)))
        yield


def run_main(capsys, **values: object) -> tuple[int, str, str]:
    code = invoke(["inprocess", "--run-config", format_run_config({**SMALL, **values})])
    out = capsys.readouterr()
    return code, out.out, out.err


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_full_disk_mid_run_is_one_line_no_temporary_file_and_a_true_resume(capsys, tmp_path):
    whole = tmp_path / "whole"
    assert run_main(capsys, **{"result-dir": str(whole)})[0] == 0

    folder = tmp_path / "run"
    with disk_full(folder, lambda _: rounds_written(folder) >= 2):
        code, _, err = run_main(capsys, **{"result-dir": str(folder)})
    lines = err.strip().splitlines()
    assert code == 1, err
    assert "Traceback" not in err and len(lines) == 2, err
    # round 2's line went in, its status could not be written
    assert lines[0] == f"failed: no space left on device while writing {folder}/status.json"
    continue_after = "to continue after round 1 of 5: "
    assert lines[1].startswith(continue_after), lines[1]
    assert temporaries(folder) == []
    # status.json could not say failed (the whole disk is full): it says where it got
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "running" and status["last_round"] == 1
    # the advice is true: after freeing space the printed command continues the run exactly
    words = shlex.split(lines[1].removeprefix(continue_after))
    assert words[1] == "inprocess"
    code = invoke(words[1:])
    assert code == 0, capsys.readouterr().err
    assert comparable(folder) == comparable(whole) and same_model(folder, whole)


@pytest.mark.parametrize(
    ("errno_code", "said"),
    [(errno.ENOSPC, "no space left on device"), (errno.EIO, "input/output error")],
)
def test_a_failed_checkpoint_write_is_one_line_failed_in_the_status_and_no_temporary(
    capsys, tmp_path, errno_code, said
):
    folder = tmp_path / "run"
    is_checkpoint = lambda path: os.path.basename(path).startswith(".checkpoint.pt.")  # noqa: E731
    with disk_full(folder, lambda p: is_checkpoint(p) and rounds_written(folder) >= 3, errno_code):
        code, _, err = run_main(capsys, **{"result-dir": str(folder)})
    assert code == 1 and "Traceback" not in err and err.count("\n") == 2, err
    assert err.startswith(f"failed: {said} while writing {folder}/checkpoint.pt\n")
    assert err.splitlines()[1].startswith("to continue after round 2 of 5: "), err
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "failed" and status["last_round"] == 3
    assert status["reason"] == f"{said} while writing {folder}/checkpoint.pt"
    assert temporaries(folder) == []
    assert torch.load(folder / "checkpoint.pt")["round"] == 2  # the last whole checkpoint


def test_without_a_checkpoint_the_advice_is_to_run_again_in_a_new_folder(capsys, tmp_path):
    folder = tmp_path / "run"
    with disk_full(folder, lambda _: rounds_written(folder) >= 2):
        code, _, err = run_main(capsys, **{"result-dir": str(folder), "checkpoint-every": 0})
    assert code == 1 and err.count("\n") == 2, err
    assert "no space left on device while writing" in err and "resume-from" not in err
    assert err.splitlines()[1].startswith(
        f"cannot be resumed: {folder} holds no checkpoint (it was started with "
        "checkpoint-every = 0); to start again in a new folder: "
    ), err
    assert not (folder / "checkpoint.pt").exists()


def test_atomic_writes_leave_the_old_file_whole_and_no_temporary(tmp_path):
    target = tmp_path / "status.json"
    atomic_write(target, "old")
    with disk_full(tmp_path, lambda _: True):
        with pytest.raises(ResultWriteError, match="no space left on device while writing"):
            atomic_write(target, "new")
        with pytest.raises(ResultWriteError) as err:
            append_line(tmp_path / "metrics.jsonl", "{}")
        with pytest.raises(ResultWriteError, match=f"while writing {tmp_path}/status.json$"):
            sync_files(tmp_path, ["missing.jsonl", "status.json"])  # a missing file is skipped
    assert err.value.disk_full and err.value.errno == errno.ENOSPC
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "status.json"]


def test_a_full_disk_while_the_comparison_writes_its_table_is_one_line(capsys, tmp_path):
    out = tmp_path / "compare"
    with disk_full(out, lambda p: os.path.basename(p).startswith(".table.csv")):
        code = invoke(
            ["compare", "--engine", "inprocess", "--policies", "bc", "--out", str(out),
             "--run-config", "num-devices=8 num-server-rounds=2"]
        )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 2, err
    assert err[0] == f"failed: no space left on device while writing {out}/table.csv"
    assert err[1].startswith("to go on, run the same command again (completed runs are kept, ")
    assert temporaries(out) == []


def launch(values: dict) -> subprocess.CompletedProcess[str]:
    """``fedcgd run --run-config VALUES`` to its end, output captured."""
    return subprocess.run(
        fedcgd("run", "--run-config", format_run_config(values)),
        cwd=PROJECT_DIR, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


@pytest.mark.slow
def test_a_real_full_disk_under_flwr_run_is_one_line_with_true_advice(tmp_path):
    """A 160 kB tmpfs as the result folder of a ``flwr run`` (root only)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        folder = mount / "run"
        values = {"num-devices": 4, "num-server-rounds": 200, "checkpoint-every": 1}
        proc = launch({**values, "result-dir": str(folder)})
        failed, last = proc.stderr.strip().splitlines()[-2:]
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert failed.startswith(f"failed: no space left on device while writing {folder}/")
        assert "resume-from" not in failed  # said once, by the last line
        said = "free space on the disk, then continue the run from its checkpoint with resume-from"
        assert f"{said}='{folder}'" in proc.stdout  # the ServerApp's own line
        assert last.startswith("to continue after round "), last
        assert "Traceback" not in proc.stdout + proc.stderr
        assert temporaries(folder) == []
        checkpoint_round = torch.load(folder / "checkpoint.pt")["round"]
        # free space: move the run to a disk with room, and resume it there
        moved = tmp_path / "run"
        shutil.copytree(folder, moved, symlinks=True)
        again = launch({**values, "resume-from": str(moved)})
        assert again.returncode == 0, again.stderr[-2000:]
        text = (moved / "metrics.jsonl").read_text()
        rounds = [json.loads(x)["round"] for x in text.splitlines()]
        assert rounds == list(range(1, 201)) and checkpoint_round >= 1
    finally:
        subprocess.run(["umount", str(mount)], check=False)
