"""One writer per result folder: concurrent runs, live resumes, live comparisons, links, names.

The processes are real; the holder a refused process names is checked against the PID started.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from run_results import lines
from subprocesses import (
    FEDCGD,
    assert_import_pulls_neither_flwr_nor_torch,
    start_in_own_session,
    wait_for,
)

from experiments.cli import invoke
from experiments.run.preflight import claim_run
from experiments.run.run_config import format_run_config
from fedcgd_config.schema import PROJECT_DIR
from server_app.checkpoint import CHECKPOINT_FILE, save_model
from server_app.run_folder.files import atomic_write
from server_app.run_folder.folder_lock import (
    LOCK_FILE,
    OWNERS_ENV,
    WRITER_LOCK_FILE,
    FolderInUseError,
    claim_folder,
    let_go,
    take_lock,
)
from server_app.run_folder.results import METRICS_FILE

SMALL = {"num-devices": 8, "channel.availability-prob": 0.8}


def start(command: str, *args: str) -> subprocess.Popen[str]:
    """``fedcgd command args`` in the project folder, output captured as text."""
    return start_in_own_session([FEDCGD, command, *args], os.environ)


#: The head of a script that imports the project (``argv[1]``) and works on ``Path(argv[2])``.
IN_PROJECT = "import sys; sys.path.insert(0, sys.argv[1])\nfrom pathlib import Path\n"


def in_project(folder: Path) -> tuple[str, str]:
    """The arguments of an :data:`IN_PROJECT` script on ``folder``."""
    return str(PROJECT_DIR), str(folder)


@contextlib.contextmanager
def holding(script: str, *args: str, says: str) -> Iterator[subprocess.Popen[str]]:
    """``python -c script args`` for the block, entered once it says ``says``; killed after."""
    pipe = subprocess.PIPE  # stdin too: a holder reading a line holds until killed, not until EOF
    holder = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdin=pipe, stdout=pipe, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == says
        yield holder
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()


def holding_lock(
    folder: Path, acquire: str
) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
    """:func:`holding` a process that runs the line ``acquire`` on ``folder``, then sleeps."""
    script = IN_PROJECT + (
        "import time\n"
        "from server_app.run_folder.folder_lock import WRITER_LOCK_FILE, claim_folder, take_lock\n"
        f"folder = Path(sys.argv[2]); {acquire}\n"
        "print('held', flush=True); time.sleep(300)\n"
    )
    return holding(script, *in_project(folder), says="held")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty result folder."""
    (tmp_path / "run").mkdir()
    return tmp_path / "run"


def inprocess(**values: object) -> subprocess.Popen[str]:
    return start("inprocess", "--run-config", format_run_config({**SMALL, **values}))


@pytest.mark.parametrize("trial", range(3))
def test_two_runs_started_together_into_one_folder_one_is_refused_naming_the_other(tmp_path, trial):
    folder = tmp_path / "run"
    runs = [
        inprocess(**{"result-dir": str(folder), "seed": s, "num-server-rounds": 4}) for s in (1, 2)
    ]
    outputs = [proc.communicate(timeout=300) for proc in runs]
    codes = [proc.returncode for proc in runs]
    assert sorted(codes) == [0, 2], outputs
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    err = outputs[loser][1].strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: run-config key 'result-dir'"), err
    # The refused one names the other's PID (or, when it came after the end, the used folder).
    assert f"process {runs[winner].pid} " in err[0] or "already holds" in err[0], err
    assert [x["round"] for x in lines(folder)] == [1, 2, 3, 4]  # one run's lines, once each
    seed = json.loads((folder / "config.json").read_text())["task"]["seed"]
    assert seed == (1, 2)[winner]
    assert json.loads((folder / "status.json").read_text())["state"] == "completed"


@pytest.mark.parametrize("what", ["resume", "comparison"])
def test_a_second_command_into_a_live_runs_folder_is_refused_naming_its_pid(tmp_path, what):
    """A resume of a live run, a comparison into a live comparison's ``--out``."""
    folder, live_values = tmp_path / "run", {"num-server-rounds": 400, "checkpoint-every": 1}
    compare = ["compare", "--engine", "inprocess", "--policies", "bc", "--out", str(folder)]
    compare += ["--run-config", "num-devices=8 num-server-rounds=400"]
    if what == "resume":
        live = inprocess(**{"result-dir": str(folder), **live_values})
        written, head = folder / CHECKPOINT_FILE, "error: run-config key 'resume-from'"
    else:
        live = start(*compare)
        written, head = folder / "bc" / "seed-0" / METRICS_FILE, "error: --out"
    try:
        wait_for(written.exists, live, limit_s=120)
        resume = {"resume-from": str(folder), "num-server-rounds": 400}
        second = inprocess(**resume) if what == "resume" else start(*compare)
        _, err = second.communicate(timeout=300)
        lines = err.strip().splitlines()
        assert second.returncode == 2 and len(lines) == 1, err
        assert lines[0].startswith(head) and f"in use by process {live.pid} " in lines[0]
        assert live.poll() is None  # the live run goes on, untouched
    finally:
        live.kill()  # a no-op once it has ended
        live.communicate()


def refused_here(capsys, monkeypatch, **values: object) -> str:
    """The one error line of ``fedcgd inprocess`` with ``values``, run in this process (its
    locks' bookkeeping in the environment put back after), which must exit with 2."""
    monkeypatch.delenv(OWNERS_ENV, raising=False)
    code = invoke(["inprocess", "--run-config", format_run_config({**SMALL, **values})])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2, line
    return line


def test_a_run_into_a_folder_whose_writer_is_alive_is_refused(folder, capsys, monkeypatch):
    # A ServerApp left running (say by a `flwr run` of its own) holds the writer lock only.
    lock = "lock = take_lock(folder, WRITER_LOCK_FILE, 'k', shared=False)"
    with holding_lock(folder, lock) as holder:
        values = {"result-dir": str(folder), "num-server-rounds": 1}
        line = refused_here(capsys, monkeypatch, **values)
        assert f"written by process {holder.pid} " in line, line
        assert {p.name for p in folder.iterdir()} == {LOCK_FILE, WRITER_LOCK_FILE}


@pytest.mark.slow
def test_default_folders_of_runs_started_together_never_collide(tmp_path):
    out = tmp_path / "results"
    one_round = format_run_config({**SMALL, "num-server-rounds": 1})
    runs = [start("inprocess", "--out", str(out), "--run-config", one_round) for _ in range(3)]
    for proc in runs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    folders = sorted(out.iterdir())
    assert len(folders) == 3
    assert all([x["round"] for x in lines(f)] == [1] for f in folders)


def test_a_default_name_taken_in_the_same_second_takes_the_next_one(tmp_path, monkeypatch):
    import server_app.config as config_module

    monkeypatch.setattr(config_module.time, "strftime", lambda *_: "20250101-000000")
    from experiments.run.run_config import validated_run_config, with_resolved_data_dir

    config = with_resolved_data_dir(validated_run_config({**SMALL, "num-server-rounds": 1}))
    first, claim_a = claim_run(config, tmp_path)
    second, claim_b = claim_run(config, tmp_path)
    try:
        # the policy, then the settings that differ from the defaults, then the time
        name = "fedcgd-fscd_num-server-rounds=1_num-devices=8_availability-prob=0.8-20250101-000000"
        assert Path(first["result-dir"]).name == name
        assert Path(second["result-dir"]).name == f"{name}-2"
    finally:
        claim_a.release()
        claim_b.release()


@pytest.mark.parametrize("link", ["inside", "the folder"])
def test_a_result_folder_that_holds_or_is_a_link_is_refused_and_left_alone(
    tmp_path, capsys, monkeypatch, link
):
    victim, real = tmp_path / "victim.txt", tmp_path / "real"
    victim.write_text("precious")
    real.mkdir()
    for name in ("checkpoint.tmp", "model.tmp"):
        (real / name).symlink_to(victim)
    folder = real if link == "inside" else tmp_path / "link"
    if link != "inside":
        folder.symlink_to(real)
    values = {"result-dir": str(folder), "num-server-rounds": 2, "checkpoint-every": 1}
    line = refused_here(capsys, monkeypatch, **values)
    says = "holds a symbolic link ('checkpoint.tmp'" if link == "inside" else "is a symbolic link"
    assert says in line, line
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in real.iterdir()) == ["checkpoint.tmp", "model.tmp"]


@pytest.mark.parametrize("planted", ["checkpoint.tmp", "model.tmp", ".status.json.tmp"])
def test_writes_never_go_through_a_link_planted_during_the_run(tmp_path, folder, planted):
    # A link planted after the folder was checked (the old fixed temporary names, and any
    # other) cannot redirect a write: temporary files are created exclusively under new names.
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (folder / planted).symlink_to(victim)
    save_model(folder, {"w": torch.ones(3)})
    atomic_write(folder / "status.json", "{}")
    assert victim.read_text() == "precious"
    assert torch.equal(torch.load(folder / "model.pt")["w"], torch.ones(3))
    assert sorted(p.name for p in folder.iterdir()) == sorted([planted, "model.pt", "status.json"])


def test_a_lock_file_that_is_a_link_is_refused(tmp_path, folder):
    victim = tmp_path / "victim"
    victim.write_text("x")
    (folder / LOCK_FILE).symlink_to(victim)
    with pytest.raises(ValueError, match="symbolic link"):
        claim_folder(folder, "result-dir")
    with pytest.raises(ValueError, match="symbolic link"):  # the lock itself never follows one
        take_lock(folder, LOCK_FILE, "result-dir", shared=True)
    assert victim.read_text() == "x"


def test_a_held_lock_names_its_holder_in_its_file_and_dies_with_it(folder):
    with holding_lock(folder, "claim = claim_folder(folder, 'result-dir')") as holder:
        with pytest.raises(FolderInUseError) as err:
            claim_folder(folder, "result-dir")
        assert err.value.pid == holder.pid and "\n" not in str(err.value)
        holder.kill()  # kill -9: the kernel drops the lock
        holder.wait()
    claim = claim_folder(folder, "result-dir", writer=True)
    try:
        for name in (LOCK_FILE, WRITER_LOCK_FILE):
            pid, command = (folder / name).read_text().split(" ", 1)
            assert int(pid) == os.getpid() and command[:40] == " ".join(sys.orig_argv)[:40]
            fd = os.open(folder / name, os.O_RDONLY)
            try:
                with pytest.raises(BlockingIOError):  # the lock is the kernel's
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
    finally:
        claim.release()
    assert [(folder / name).read_bytes() for name in (LOCK_FILE, WRITER_LOCK_FILE)] == [b"", b""]


#: Claims ``argv[2]`` (as the writer when ``argv[3]`` is ``writer``; after a line on stdin when
#: ``argv[4]`` is ``later``), says how it holds it, and holds it until a line on stdin.
CLAIM_AND_SAY = IN_PROJECT + (
    "from server_app.run_folder.folder_lock import FolderInUseError, claim_folder\n"
    "if sys.argv[4:] == ['later']: sys.stdin.readline()\n"
    "try:\n"
    "    c = claim_folder(Path(sys.argv[2]), 'k', writer=sys.argv[3] == 'writer')\n"
    "    print('delegated' if c.owner is None else 'owner', flush=True)\n"
    "except FolderInUseError as err:\n"
    "    print('refused', err.pid, flush=True)\n"
    "sys.stdin.readline()\n"
)

#: Starts ``CLAIM_AND_SAY argv[4:]`` (after claiming ``argv[2]`` itself), stdin and stdout piped.
OWNER_HEAD = IN_PROJECT + (
    "import subprocess\n"
    "from server_app.run_folder.folder_lock import claim_folder\n"
    "claim = claim_folder(Path(sys.argv[2]), 'k')\n"
    "say = [sys.executable, '-c', sys.argv[3], sys.argv[1], sys.argv[2], *sys.argv[4:]]\n"
    "def child(): return subprocess.Popen(say, stdin=subprocess.PIPE, stdout=subprocess.PIPE,\n"
    "                                     text=True)\n"
)


def start_owner(folder: Path, body: str, *child_args: str) -> subprocess.Popen[str]:
    """A process that claims ``folder`` and runs ``body`` (:data:`OWNER_HEAD`), text pipes."""
    argv = [sys.executable, "-c", OWNER_HEAD + body, *in_project(folder)]
    pipe = subprocess.PIPE
    return subprocess.Popen([*argv, CLAIM_AND_SAY, *child_args], stdin=pipe, stdout=pipe, text=True)


def test_processes_the_owner_starts_work_under_its_lock_and_one_of_them_writes(folder):
    # What a launcher and its ServerApps do, without Flower between them: the owner's
    # descendants share its owner lock; the writer lock is never shared, not even among them.
    owner = start_owner(
        folder,
        "first, second = child(), child()\n"
        "print(first.stdout.readline().strip(), flush=True)\n"
        "print(second.stdout.readline().strip(), flush=True)\n"
        "sys.stdin.readline()\n",
        "writer",
    )
    try:
        assert owner.stdout is not None
        said = sorted(owner.stdout.readline().split() for _ in range(2))
        assert said[0] == ["delegated"]  # one child writes, under the owner's lock
        assert said[1][0] == "refused" and int(said[1][1]) not in (owner.pid, os.getpid())
        with pytest.raises(FolderInUseError) as err:  # the owner's parent does not share it
            claim_folder(folder, "result-dir")
        assert err.value.pid == owner.pid
    finally:
        owner.kill()
        owner.wait()


def test_a_process_started_by_an_owner_that_let_go_is_refused_by_the_next_owner(folder):
    owner = start_owner(
        folder,
        "late = child(); claim.release(); print('released', flush=True)\n"
        "sys.stdin.readline(); late.stdin.write('claim\\n'); late.stdin.flush()\n"
        "print(late.stdout.readline().strip(), flush=True); sys.stdin.readline()\n",
        "owner",
        "later",
    )
    try:
        assert owner.stdout is not None and owner.stdin is not None
        assert owner.stdout.readline().strip() == "released"
        with holding(CLAIM_AND_SAY, *in_project(folder), "owner", says="owner") as next_owner:
            owner.stdin.write("go\n")
            owner.stdin.flush()
            assert owner.stdout.readline().split() == ["refused", str(next_owner.pid)]
    finally:
        owner.kill()
        owner.wait()


def test_the_run_files_package_imports_neither_flwr_nor_torch():
    assert_import_pulls_neither_flwr_nor_torch(
        "server_app.run_folder.folder_lock",
        "server_app.run_folder.files",
        "server_app.run_folder.run_status",
        "server_app.run_folder.results",
    )


#: Locks ``argv[1]`` with a bare flock and writes nothing in it (a holder in its first moment),
#: says "held", and lets go after ``argv[2]`` seconds.
BARE_FLOCK = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def test_a_killed_owners_line_shares_the_lock_with_nobody(folder, monkeypatch):
    # A killed owner left "PID command" in the lock file, and one of its orphans still lists
    # the PID. A new owner has locked the file but not yet written its own line: the orphan
    # must be refused, not let in under the dead owner's PID.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / LOCK_FILE).write_text(f"{dead.pid} old owner")
    monkeypatch.setenv(OWNERS_ENV, str(dead.pid))
    with holding(BARE_FLOCK, str(folder / LOCK_FILE), "30", says="held"):
        with pytest.raises(FolderInUseError) as err:
            take_lock(folder, LOCK_FILE, "result-dir", shared=True)
        assert err.value.pid is None


def test_a_lock_let_go_before_its_holder_wrote_is_taken_not_refused(folder):
    # The holder of an empty lock file lets go a moment later (a holder's first or last
    # moment): the next process takes the lock instead of refusing "another process".
    with holding(BARE_FLOCK, str(folder / LOCK_FILE), "0.3", says="held"):
        lock = take_lock(folder, LOCK_FILE, "result-dir", shared=False)
        assert lock is not None and lock.is_locked
        let_go(lock)
