"""Many ``fedcgd`` command lines in one child process, each through the Typer app in-process.

A fresh Python process that imports torch costs about 4 s on two cores; a test of a command
line's refusal (exit code 2, one line on stderr, nothing started) or of a run's one-line
failure needs the command's exit code and output, not a process of its own.
:func:`in_one_process` runs a list of command lines in one child process (run as a script:
``python tests/command_batch.py``), each with its own captured stdout and stderr and its exit
code as Python would give it. What a command imported from outside the project and the
virtual environment (a researcher's ``my_policies.py``) is forgotten before the next one
runs. One command line of each family still runs as a whole process of its own in the tests
that use this.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def in_one_process(
    argvs: list[list[str]], *, pythonpath: list[Path] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """``fedcgd <argv>`` for each of ``argvs``, in one child process, in order.

    Each runs through :func:`experiments.cli.invoke` (the Typer app, as the console script
    runs it, without a process of its own).

    Parameters
    ----------
    argvs : list of list of str
        The command lines without the program name (``["inprocess", "--run-config", ...]``).
    pythonpath : list of Path, optional
        Folders put in front of the child's ``PYTHONPATH``.

    Returns
    -------
    list of subprocess.CompletedProcess
        One per command line: ``returncode`` (the command's exit code, the code of
        ``SystemExit``, 1 with the traceback on stderr for any other exception), ``stdout``,
        ``stderr``.
    """
    from subprocesses import run_ok  # not in the child: it imports pytest

    paths = [str(p) for p in pythonpath or []] + [os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    script = [sys.executable, str(Path(__file__).resolve())]
    done = run_ok(script, input=json.dumps(argvs), cwd=PROJECT, env=env, timeout=600)
    results = json.loads(done.stdout)
    return [
        subprocess.CompletedProcess(["fedcgd", *argv], r["returncode"], r["stdout"], r["stderr"])
        for argv, r in zip(argvs, results, strict=True)
    ]


def _exit_code(err: SystemExit, stderr: io.StringIO) -> int:
    """The process exit code Python gives ``raise SystemExit(err.code)``."""
    if err.code is None:
        return 0
    if isinstance(err.code, int):
        return err.code
    print(err.code, file=stderr)
    return 1


def _own_or_installed(name: str) -> bool:
    """Whether module ``name`` comes from the project or the environment (kept between runs)."""
    file = getattr(sys.modules.get(name), "__file__", None)
    if file is None:
        return True
    roots = (str(PROJECT), sys.prefix, sys.base_prefix)
    return str(Path(file).resolve()).startswith(roots)


def _main() -> None:
    """The child: read the command lines as JSON on stdin, write the results as JSON."""
    sys.path.insert(0, str(PROJECT))
    from experiments.cli import invoke

    results = []
    for argv in json.loads(sys.stdin.read()):
        before = set(sys.modules)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = invoke(argv)
            except SystemExit as stop:
                code = _exit_code(stop, err)
            except BaseException:
                traceback.print_exc(file=err)
                code = 1
        for name in set(sys.modules) - before:
            if not _own_or_installed(name):
                del sys.modules[name]
        results.append({"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    _main()
