"""Result folders as the ServerApp writes them (config, metrics, summary, status), no federation."""

from __future__ import annotations

import csv
import json
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedcgd_config.settings import default_run_config
from server_app.config import parse_run_config
from server_app.run_folder.results import holds_run
from server_app.run_folder.run_status import COMPLETED, FAILED, RUNNING, RunStatus, write_status


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file written by the tools (runs.csv, table.csv, ...)."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def recorded_config(overrides: Mapping[str, Any], result_dir: Path) -> dict[str, Any]:
    """``config.json`` of a run started with ``overrides`` into ``result_dir``."""
    data_dir = str(Path(str(overrides.get("data-dir", "")) or "data").resolve())
    merged = {**default_run_config(), **overrides, "data-dir": data_dir}
    merged["result-dir"] = str(result_dir)
    config = json.loads(json.dumps(parse_run_config(merged).to_dict()))
    config.update(num_parameters=4810, model_bits_used=4810 * 32, num_classes=10)
    return dict(config)


def write_run(
    result_dir: Path,
    overrides: Mapping[str, Any],
    lines: Sequence[Mapping[str, Any]],
    *,
    state: str = COMPLETED,
    reason: str | None = None,
    summary: bool = True,
) -> None:
    """Write a run's files: config, metrics lines, summary (optional) and status."""
    result_dir.mkdir(parents=True, exist_ok=True)
    config = recorded_config(overrides, result_dir)
    (result_dir / "config.json").write_text(json.dumps(config))
    (result_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if summary:
        (result_dir / "summary.json").write_text(json.dumps({"policy": config["policy"]}))
    last = lines[-1]["round"] if lines else 0
    write_status(result_dir, RunStatus(state, last, config["num_server_rounds"], reason=reason))


SCHEDULED = {"fedcgd-fscd": [4, 5, 6], "bc": [6, 6, 7]}  # per round, plus the seed


def fake_run(result_dir: Path, policy: str, seed: int, accuracy: list, shared=None, **status):
    """A run's files with ``accuracy`` per round (settings: ``shared``), σ̂ = 1 + seed, Ĝ = 0.5 +
    seed."""
    scheduled = SCHEDULED.get(policy, [3, 3, 3])
    lines = [
        {"round": r, "accuracy": acc, "num_scheduled": scheduled[r - 1] + seed,
         "wemd": 0.1 * r + 0.01 * seed, "sigma": 1.0 + seed, "class_gradient_used": 0.5 + seed}
        for r, acc in enumerate(accuracy, start=1)
    ]  # fmt: skip
    write_run(result_dir, {**(shared or {}), "policy": policy, "seed": seed}, lines, **status)


#: Ray's ActorPool is empty (GPUs asked, none present): the ServerApp never says why.
CRASHED = (
    "An exception occured!! ActorPool is empty. Stopping Simulation. Check `num_cpus` and/or "
    "`num_gpus` passed to the simulation engine"
)
RED = "\x1b[91mERROR \x1b[0m:     "
CRASH_LOG = f"\x1b[92mINFO \x1b[0m: [ROUND 1/1]\n{RED}{CRASHED}\n{RED}Traceback (most recent...\n"


def finishing_flwr(calls: list, accuracy=lambda c: [0.5], fails=lambda c: None):
    """``run_flwr`` recording each run config and writing a finished run with ``accuracy(it)``,
    or per ``fails(it)``: ``"exit"`` (exit code 1), ``"status"`` (the ServerApp failed),
    ``"crash"`` (Flower's ERROR lines, no status)."""

    def fake_flwr(run_config, **kwargs):
        calls.append(dict(run_config))
        policy, seed, folder = run_config["policy"], run_config["seed"], run_config["result-dir"]
        assert "resume-from" in run_config or not holds_run(Path(folder))
        settings = {k: v for k, v in run_config.items() if k not in ("result-dir", "resume-from")}
        how = fails(run_config)
        if how == "exit":
            return subprocess.CompletedProcess([], 1, "", "")
        if how in ("status", "crash"):  # no round: the ServerApp failed, or never said why
            reason = "RuntimeError: ActorPool is empty" if how == "status" else None
            status = {"state": FAILED if reason else RUNNING, "reason": reason, "summary": False}
            fake_run(Path(folder), policy, seed, [], settings, **status)
        else:
            fake_run(Path(folder), policy, seed, accuracy(run_config), settings)
        return subprocess.CompletedProcess([], 0, CRASH_LOG if how == "crash" else "", "")

    return fake_flwr


def last_two_lines(capsys: Any, out: Path) -> tuple[str, str]:
    """The last two lines on stderr of a comparison whose first on stdout names ``out``."""
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == f"output folder: {out}"
    failed, last = captured.err.strip().splitlines()[-2:]
    return failed, last


RERUN = (
    "to go on, run the same command again (completed runs are kept, stopped ones continue "
    "from their checkpoints): "
)


def rerun_command(line: str, command: str = "compare") -> list[str]:
    """The options of the ``fedcgd <command>`` a last line gives (its script checked)."""
    from subprocesses import FEDCGD

    assert line.startswith(RERUN), line
    words = shlex.split(line.removeprefix(RERUN))
    assert Path(words[0]).resolve() == Path(FEDCGD).resolve(), words
    assert words[1] == command, words
    return words[2:]
