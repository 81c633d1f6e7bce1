"""What a command says last when it stops before its end: the exact command that continues.

A single run (the launcher, the in-process engine) continues from its folder's checkpoint with
the same command and ``resume-from`` set to the folder (:func:`single_run_line`), or says why
it cannot (no checkpoint yet, or nothing left to run). A comparison or a preset continues when
the same command runs again: completed runs are kept, stopped ones resume from their
checkpoints (:func:`rerun_line`). Commands are written for a POSIX shell, to be started in the
working folder of the command that stopped (:func:`fedcgd_command`).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from run_files.results import CHECKPOINT_FILE, MODEL_FILE
from run_files.run_status import COMPLETED, RunStatus, read_status

#: The run-config keys that name a run's folder: a resume sets ``resume-from`` alone.
FOLDER_KEYS = ("result-dir", "resume-from")


#: The console script of the project (``[project.scripts]`` in pyproject.toml).
SCRIPT = "fedcgd"


def fedcgd_command(words: Sequence[str]) -> str:
    """The command line ``fedcgd <words>``, quoted for a POSIX shell.

    The script is the one installed beside this interpreter, written relative to the working
    folder when it lies inside it (``.venv/bin/fedcgd``, as the README writes it), else as an
    absolute path; where it is not installed, ``<interpreter> -m experiments.cli``.
    """
    script = Path(sys.executable).with_name(SCRIPT)
    program = [str(script)] if script.is_file() else [sys.executable, "-m", "experiments.cli"]
    try:
        shown = str(Path(program[0]).relative_to(Path.cwd()))
        program[0] = shown if "/" in shown else f"./{shown}"  # not looked up on PATH
    except ValueError:
        pass
    return shlex.join([*program, *words])


@dataclass(frozen=True)
class StartedAs:
    """How a single run was started, for the commands that continue it.

    Attributes
    ----------
    subcommand : tuple of str
        The words that name the command (``("run",)``).
    options : tuple of str
        The options it was given, ``--run-config`` and ``--out`` aside.
    out : tuple of str
        ``--out`` and its value when given, else empty.
    """

    subcommand: tuple[str, ...]
    options: tuple[str, ...] = ()
    out: tuple[str, ...] = ()


def resume_overrides(overrides: Mapping[str, Any], result_dir: Path) -> dict[str, Any]:
    """The run-config overrides that continue the run in ``result_dir``.

    The same settings (a resume must use them), the folder given as ``resume-from`` only.
    """
    kept = {k: v for k, v in overrides.items() if k not in FOLDER_KEYS}
    return {**kept, "resume-from": str(result_dir)}


def fresh_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The overrides that start the same run again in a new folder (no folder keys)."""
    return {k: v for k, v in overrides.items() if k not in FOLDER_KEYS}


def single_run_commands(
    started: StartedAs, overrides: Mapping[str, Any], result_dir: Path
) -> tuple[str, str]:
    """The commands that continue a single run, and that start it again in a new folder.

    Parameters
    ----------
    started : StartedAs
        The command and options the run was started with.
    overrides : mapping
        The ``--run-config`` the run was started with (parsed, not merged with the defaults).
    result_dir : Path
        The run's folder.

    Returns
    -------
    (str, str)
        The same options (``--out`` aside: a resume stays in its folder) and run config with
        ``resume-from`` = ``result_dir`` (:func:`resume_overrides`); and the same options and
        run config without a folder (:func:`fresh_overrides`).
    """
    from experiments.run.run_config import format_run_config

    head = [*started.subcommand, *started.options]
    resume_words = [
        *head,
        "--run-config",
        format_run_config(resume_overrides(overrides, result_dir)),
    ]
    again_words = [*head, *started.out]
    fresh = fresh_overrides(overrides)
    if fresh:
        again_words += ["--run-config", format_run_config(fresh)]
    return fedcgd_command(resume_words), fedcgd_command(again_words)


def _status(result_dir: Path) -> RunStatus | None:
    try:
        return read_status(result_dir)
    except ValueError:  # unreadable: say what the files say
        return None


def single_run_line(
    result_dir: Path, resume_command: str, again_command: str, checkpoint_every: int
) -> str:
    """The last line of a single run that stopped (a signal, a failure): how it continues.

    Parameters
    ----------
    result_dir : Path
        The run's folder.
    resume_command : str
        The command that continues it from its checkpoint (``resume-from`` = the folder).
    again_command : str
        The command that starts it again in a new folder (when it holds no checkpoint).
    checkpoint_every : int
        The run's ``checkpoint-every`` (0: the run never writes a checkpoint).

    Returns
    -------
    str
        ``to continue after round k of N: <command>``; ``cannot be resumed: ... (why); to
        start again in a new folder: <command>``; or ``nothing to continue: ...`` when the
        run completed or ran all its rounds.
    """
    folder = Path(result_dir)
    status = _status(folder)
    if status is not None and status.state == COMPLETED:
        return f"nothing to continue: the run completed; results in {folder}"
    if (
        status is not None
        and status.last_round >= status.num_server_rounds
        and (folder / MODEL_FILE).is_file()
    ):
        return (
            f"nothing to continue: all {status.num_server_rounds} rounds ran; results in {folder}"
        )
    if (folder / CHECKPOINT_FILE).is_file():
        from server_app.checkpoint import checkpoint_round

        done = checkpoint_round(folder)
        total = f" of {status.num_server_rounds}" if status is not None else ""
        where = "from its checkpoint" if done is None else f"after round {done}{total}"
        return f"to continue {where}: {resume_command}"
    why = (
        "it was started with checkpoint-every = 0"
        if checkpoint_every == 0
        else "it stopped before its first checkpoint"
    )
    return (
        f"cannot be resumed: {folder} holds no checkpoint ({why}); to start again in a new "
        f"folder: {again_command}"
    )


def rerun_line(command: str | None) -> str:
    """The last line of a comparison or preset that stopped: the same command goes on.

    ``command`` None (not known: called from Python, not from a command line): the line
    says so without it.
    """
    line = (
        "to go on, run the same command again (completed runs are kept, stopped ones "
        "continue from their checkpoints)"
    )
    return line if command is None else f"{line}: {command}"


class LastWords:
    """The line a command ends with when it stops early, known once its folder is.

    Handed to :func:`experiments.run.processes.exit_code_stopping_on_signals`, which prints it
    after the line that names the signal; None (nothing printed) until :meth:`set`.
    """

    def __init__(self) -> None:
        self._make: Callable[[], str] | None = None

    def set(self, make: Callable[[], str]) -> None:
        """From now on the last line is ``make()`` (read when it is printed)."""
        self._make = make

    def __call__(self) -> str | None:
        """The last line, or None while nothing is known to continue."""
        return None if self._make is None else self._make()
