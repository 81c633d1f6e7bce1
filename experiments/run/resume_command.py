"""What a command says last when it stops before its end: the exact command that continues.

For a POSIX shell in the stopped command's folder (docs/deployment.md, "Checkpoint and resume").
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server_app.run_folder.results import CHECKPOINT_FILE, SUMMARY_FILE
from server_app.run_folder.run_status import read_status


def fedcgd_command(words: Sequence[str]) -> str:
    """``fedcgd <words>`` quoted for a shell (the script beside this interpreter, else ``-m``)."""
    script = Path(sys.executable).with_name("fedcgd")
    program = [str(script)] if script.is_file() else [sys.executable, "-m", "experiments.cli"]
    if Path(program[0]).is_relative_to(Path.cwd()):
        shown = str(Path(program[0]).relative_to(Path.cwd()))
        program[0] = shown if "/" in shown else f"./{shown}"  # not looked up on PATH
    return shlex.join([*program, *words])


@dataclass(frozen=True)
class StartedAs:
    """How a single run was started: subcommand, options (not ``--run-config``), ``--out``."""

    subcommand: tuple[str, ...]
    options: tuple[str, ...] = ()
    out: tuple[str, ...] = ()


def continue_line(
    started: StartedAs,
    overrides: Mapping[str, Any],
    result_dir: Path,
    checkpoint_every: int,
    superlink: str | None = None,
) -> Callable[[], str]:
    """A stopped single run's last line, made when printed (``overrides``: its --run-config)."""
    from experiments.run.run_config import format_run_config

    head = [*started.subcommand, *started.options]
    fresh = {k: v for k, v in overrides.items() if k not in ("result-dir", "resume-from")}
    resume_config = format_run_config({**fresh, "resume-from": str(result_dir)})
    resume = fedcgd_command([*head, "--run-config", resume_config])
    again = fedcgd_command(
        [*head, *started.out, *(["--run-config", format_run_config(fresh)] if fresh else [])]
    )
    if superlink:
        return lambda: (
            f"to continue, when {result_dir} on the SuperLink's machine holds a "
            f"checkpoint.pt: {resume}"
        )
    return lambda: single_run_line(result_dir, resume, again, checkpoint_every)


def single_run_line(result_dir: Path, resume: str, again: str, checkpoint_every: int) -> str:
    """The last line of a single run that stopped: how it continues (``resume``, ``again``)."""
    folder = Path(result_dir)
    status = read_status(folder, quiet=True)  # unreadable: say what the other files say
    total = f" of {status.num_server_rounds}" if status else ""
    if (
        status
        and status.last_round >= status.num_server_rounds
        and (folder / SUMMARY_FILE).exists()
    ):
        return (
            f"nothing to continue: all {status.num_server_rounds} rounds ran; results in {folder}"
        )
    if (folder / CHECKPOINT_FILE).is_file():
        from server_app.checkpoint import checkpoint_round

        done = checkpoint_round(folder)
        where = "from its checkpoint" if done is None else f"after round {done}{total}"
        return f"to continue {where}: {resume}"
    why = "it stopped before its first checkpoint"
    if checkpoint_every == 0:
        why = "it was started with checkpoint-every = 0"
    return (
        f"cannot be resumed: {folder} holds no checkpoint ({why}); to start again in a new "
        f"folder: {again}"
    )


def rerun_line(command: str) -> str:
    """The last line of a comparison or preset that stopped."""
    return (
        "to go on, run the same command again (completed runs are kept, stopped ones continue "
        f"from their checkpoints): {command}"
    )


#: What makes the line a command ends with when it stops early (the last one put in counts).
LastWords = list[Callable[[], str]]
