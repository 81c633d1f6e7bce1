"""Many ``fedcgd`` command lines in one child process, each through the Typer app in-process.

A fresh process that imports torch costs about 4 s on two cores; a test of a refusal or of a
one-line failure needs the exit code and output, not a process of its own. What a command
imported from outside the project and the environment (a researcher's ``my_policies.py``) is
forgotten before the next one runs.
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
    """``fedcgd <argv>`` for each of ``argvs`` through :func:`experiments.cli.invoke`, in order.

    ``pythonpath``: folders put in front of the child's ``PYTHONPATH``. Each result's
    ``returncode`` is the command's exit code (``SystemExit``'s, or 1 with the traceback on
    stderr for any other exception).
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
            except SystemExit as stop:  # the exit code Python gives raise SystemExit(code)
                code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
                if stop.code is not None and not isinstance(stop.code, int):
                    print(stop.code, file=err)
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
