"""Result folders: never overwritten, resumable after a crash at any point, truthful exit codes.

Runs go through the command lines (``fedcgd inprocess`` and ``fedcgd run`` in this process,
the latter with ``flwr run`` replaced by an in-process run that exits 0 whatever happened).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from fake_grid import app_grid, make_contexts
from run_results import assert_same_run, lines, same_model
from test_recorder import fsynced_names

import experiments.run.launcher as launcher
from experiments.cli import invoke
from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import (
    format_run_config,
    validated_run_config,
    with_resolved_data_dir,
)
from fedcgd_config.settings import default_run_config
from server_app.app import run_federation
from server_app.checkpoint import CHECKPOINT_FILE, load_checkpoint
from server_app.config import parse_run_config, run_folder_name
from server_app.run_folder.results import METRICS_FILE, MODEL_FILE, SUMMARY_FILE
from server_app.run_folder.run_status import RUNNING, RunStatus, read_status, write_status

SMALL = {"num-devices": 8, "num-server-rounds": 2, "checkpoint-every": 1,
         "channel.availability-prob": 0.8}  # fmt: skip


def overrides(result_dir: Path, **changes: object) -> dict:
    return {**SMALL, "result-dir": str(result_dir), **changes}


def run_config(result_dir: Path, **changes: object) -> dict:
    return with_resolved_data_dir(validated_run_config(overrides(result_dir, **changes)))


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def rounds(folder: Path) -> list[int]:
    return [x["round"] for x in lines(folder)]


def main_code(capsys, **values: object) -> tuple[int, list[str], list[str]]:
    code = invoke(["inprocess", "--run-config", format_run_config(values)])
    out = capsys.readouterr()
    return code, out.out.strip().splitlines(), out.err.strip().splitlines()


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished 2-round run (checkpoint after every round)."""
    folder = tmp_path_factory.mktemp("runs") / "finished"
    run_inprocess(run_config(folder))
    return folder


@pytest.fixture
def copy(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "run"))


def test_the_rounds_files_are_fsynced_once_at_the_end_of_a_run(monkeypatch, tmp_path):
    # checkpoint-every = 0: no round syncs its metrics line or status; the end syncs them all
    folder = tmp_path / "run"
    config = run_config(folder, **{"num-server-rounds": 3, "checkpoint-every": 0})
    names = fsynced_names(monkeypatch, folder)
    run_inprocess(config)
    monkeypatch.undo()
    assert rounds(folder) == [1, 2, 3]
    # the rounds' lines and the final status are synced once, with the folder, after the end's
    # own files (each fsynced before its rename)
    end = [".model.pt.tmp", ".summary.json.tmp"]
    assert names[-5:] == [*end, "metrics.jsonl", "status.json", "run"]
    assert names.count("metrics.jsonl") == 1 and names.count("status.json") == 1
    # before: the whole files, the status at the start, the config, the (emptied) metrics file
    start = [".config.json.tmp", ".metrics.jsonl.tmp", ".status.json.tmp"]
    assert sorted(names[:-5]) == start


def test_a_folder_that_holds_a_run_or_is_a_file_is_refused_and_left_alone(capsys, copy, tmp_path):
    before = hashes(copy)
    code, _, err = main_code(capsys, **overrides(copy, seed=7))  # the command
    assert code == 2
    assert err[-1].startswith("error: run-config key 'result-dir'") and "already holds" in err[-1]
    config = parse_run_config(run_config(copy, seed=7))  # the ServerApp itself
    grid = app_grid(make_contexts([5 + v for v in range(8)], run_config(copy), 8))
    with pytest.raises(ValueError, match=r"'result-dir'.*already holds") as refused:
        run_federation(grid, config)
    assert "\n" not in str(refused.value)
    assert hashes(copy) == before
    target = tmp_path / "results"
    target.write_text("keep me")
    code, _, err = main_code(capsys, **overrides(target))
    assert code == 2 and len(err) == 1 and "'result-dir'" in err[0] and "is a file" in err[0]
    assert target.read_text() == "keep me"
    code, _, err = main_code(capsys, **overrides(target / "run"))  # a folder inside the file
    assert code == 2 and err == [
        f"error: run-config key 'result-dir' = '{target / 'run'}' cannot be created (Not a "
        "directory)"
    ]


def fake_flwr_run(run_config: dict, **_: object) -> subprocess.CompletedProcess[str]:
    """``flwr run`` in this process: the ServerApp runs; exit code 0 whatever happened."""
    try:
        run_inprocess(with_resolved_data_dir(validated_run_config(run_config)))
    except Exception as err:
        print(f"ServerApp raised {err!r}")
    return subprocess.CompletedProcess(["flwr", "run"], 0, "", "")


@pytest.mark.parametrize("command", ["inprocess", "run"])  # run: through the launcher
def test_resume_exits_0_and_a_refused_one_exits_2(capsys, monkeypatch, copy, tmp_path, command):
    monkeypatch.setattr(launcher, "run_flwr", fake_flwr_run)
    monkeypatch.setattr("experiments.analysis.plot_runs.plot_runs", lambda dirs, out: out)
    resume = {**SMALL, "num-server-rounds": 3, "resume-from": str(copy)}
    where = ["--results", str(tmp_path / "stamped")] if command == "run" else []
    if command == "inprocess":
        resume["result-dir"] = str(copy)
    assert invoke([command, "--run-config", format_run_config(resume), *where]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        f"completed: 3 rounds, results in {copy}"
    )
    assert rounds(copy) == [1, 2, 3]
    before = hashes(copy)
    resume["result-dir"] = str(copy)
    for changes, says in (
        ({}, "nothing to run"),  # the same again: finished
        ({"seed": 3, "num-server-rounds": 4}, "other settings (seed = 0 there, 3 now)"),
    ):
        assert invoke([command, "--run-config", format_run_config({**resume, **changes})]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert says in err[-1] and (len(err) == 1 or command == "run"), err
    assert hashes(copy) == before


def failing_client(message, context):
    raise RuntimeError("this device cannot train")


def test_a_run_where_every_device_fails_or_is_silent_exits_1(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("client_app.app.make_app", lambda cohorts=None: failing_client)
    folder = tmp_path / "run"
    code, _, err = main_code(capsys, **overrides(folder))
    assert code == 1
    assert err[-2].startswith("failed: no device uploaded an update in any of the 2 rounds")
    assert "no device answered" in err[-2]
    assert err[-1] == f"nothing to continue: all 2 rounds ran; results in {folder}"
    status = read_status(folder)
    assert status is not None and status.state == "failed" and status.last_round == 2
    from server_app.run_folder.run_status import run_outcome  # new API: imported here

    monkeypatch.undo()  # every node silent
    folder = tmp_path / "silent"
    config = run_config(folder)
    nodes = [11 + v for v in range(8)]
    grid = app_grid(make_contexts(nodes, config, 8), silent=nodes)
    run_federation(grid, parse_run_config(config))
    outcome = run_outcome(folder, 0.0)
    assert outcome.code == 1 and "no device" in outcome.message


def test_torn_last_line_after_the_checkpoint_is_dropped_on_resume(capsys, copy, tmp_path):
    # Killed while writing round 3's line of a resume to 4 rounds (checkpoint after round 2).
    with (copy / METRICS_FILE).open("a") as fh:
        fh.write('{"round": 3, "accuracy": 0.4')
    write_status(copy, RunStatus(RUNNING, 2, 4))
    code, out, _ = main_code(
        capsys, **overrides(copy, **{"num-server-rounds": 4, "resume-from": str(copy)})
    )
    assert code == 0 and out[-1] == f"completed: 4 rounds, results in {copy}"
    whole = tmp_path / "whole"
    run_inprocess(run_config(whole, **{"num-server-rounds": 4}))
    assert_same_run(copy, whole, 4)


@pytest.mark.parametrize(
    ("name", "cut", "says"),
    [  # emptied (a crash during a non-atomic rewrite), its first line cut, the checkpoint
        # round's line torn, a round repeated, the checkpoint cut
        (METRICS_FILE, lambda _: b"", "metrics.jsonl holds no rounds but the checkpoint is after "),
        (METRICS_FILE, lambda x: x[:20] + b"\n" + x.splitlines(True)[1], "line 1 is not a metrics"),
        (METRICS_FILE, lambda x: x.splitlines(True)[0] + x.splitlines(True)[1][:20],
         "holds rounds 1..1 (1 lines) but the checkpoint is after round 2"),
        (METRICS_FILE, lambda x: x + x.splitlines(True)[1], "(3 lines) but the checkpoint is after "
         "round 2: lines are missing or repeated"),
        (CHECKPOINT_FILE, lambda x: x[: len(x) // 3], "checkpoint.pt cannot be read"),
    ],
)  # fmt: skip
def test_a_damaged_folder_is_refused_on_resume_and_left_alone(capsys, copy, name, cut, says):
    (copy / name).write_bytes(cut((copy / name).read_bytes()))
    before = hashes(copy)
    code, _, err = main_code(
        capsys, **overrides(copy, **{"num-server-rounds": 4, "resume-from": str(copy)})
    )
    assert code == 2 and len(err) == 1 and says in err[0], err
    assert hashes(copy) == before


def test_killed_between_final_checkpoint_and_model_is_finished_by_resume(capsys, finished, copy):
    # What a kill right after the last checkpoint leaves: no model, no summary, "running".
    (copy / MODEL_FILE).unlink()
    (copy / SUMMARY_FILE).unlink()
    write_status(copy, RunStatus(RUNNING, 2, 2))
    code, out, _ = main_code(capsys, **overrides(copy, **{"resume-from": str(copy)}))
    assert code == 0 and out[-1] == f"completed: 2 rounds, results in {copy}"
    assert same_model(copy, finished)
    model, saved = torch.load(copy / MODEL_FILE), load_checkpoint(copy).model
    assert model.keys() == saved.keys() and all(torch.equal(model[k], saved[k]) for k in model)
    summary = json.loads((copy / SUMMARY_FILE).read_text())
    original = json.loads((finished / SUMMARY_FILE).read_text())
    for key in ("final_accuracy", "max_accuracy", "mean_scheduled", "mean_wemd", "rounds"):
        assert summary[key] == original[key], key
    status = read_status(copy)
    assert status is not None and status.state == "completed" and rounds(copy) == [1, 2]


def test_a_folder_is_named_by_what_tells_the_run_apart_and_a_policy_label_by_its_name():
    defaults = default_run_config()
    assert run_folder_name(defaults) == "fedcgd-fscd"
    changed = {
        **defaults, "policy": "bc", "aggregator": "FedAdam", "channel.deadline-s": 0.004,
        "local-steps": 5, "seed": 3, "data-dir": "/data",  # where: never in the name
        "device": "cpu", "checkpoint-every": 0,
    }  # fmt: skip
    assert run_folder_name(changed) == "bc_FedAdam_seed=3_local-steps=5_deadline-s=0.004"
    own = {**defaults, "policy": "/abs/my file.py:My Policy", "aggregator": "lab.aggs:Mine"}
    assert run_folder_name(own) == "My_Policy_Mine"
    params = {**defaults, "policy-params": '{beta = 0.5, name = "x/y"}'}
    assert run_folder_name(params) == "fedcgd-fscd_policy-params=_beta_=_0.5_name_=_x_y"
    long = {**defaults, "policy-params": "{" + "a" * 300 + " = 1}"}
    whole = "fedcgd-fscd_policy-params=_" + "a" * 300 + "_=_1"
    digest = hashlib.sha256(whole.encode()).hexdigest()[:8]
    assert run_folder_name(long) == f"{whole[:91]}-{digest}"
    # a policy given by its label, through ``flwr run`` straight (the ServerApp's parse) and the
    # commands (their checked config): Fed-CBS, BC (best channel) run as fedcbs, bc, so named
    bare = parse_run_config({**defaults, "policy": "Fed-CBS"})
    assert bare.policy == "fedcbs" and Path(bare.result_dir).name.startswith("fedcbs-")
    checked = validated_run_config({"policy": "BC (best channel)"})
    assert checked["policy"] == "bc"
    assert parse_run_config(checked).to_dict()["policy"] == "bc"
