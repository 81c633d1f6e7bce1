"""Helpers of the tests that run Python in a child process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from fedcgd_config.schema import PROJECT_DIR


def assert_import_pulls_neither_flwr_nor_torch(*modules: str) -> None:
    """Import ``modules`` in a fresh interpreter and fail if that loaded flwr or torch."""
    code = (
        "import sys\n"
        f"import {', '.join(modules)}\n"
        "bad = sorted(m for m in ('flwr', 'torch') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


#: The console script ``fedcgd`` installed beside this interpreter (pyproject.toml).
FEDCGD = str(Path(sys.executable).with_name("fedcgd"))


def fedcgd(*args: str) -> list[str]:
    """The command line ``fedcgd args``, with the script of this environment."""
    return [FEDCGD, *args]


def run_fedcgd(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``fedcgd args`` (15 min at most), assert that it exits with 0 and return it."""
    proc = subprocess.run(fedcgd(*args), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc


def run_ok(
    command: Sequence[str], *, timeout: float, cwd: Path = PROJECT_DIR, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (in the project folder by default), assert that it exits with 0."""
    proc = subprocess.run(
        list(command), cwd=cwd, capture_output=True, text=True, timeout=timeout, **kwargs
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def start_in_own_session(
    command: Sequence[str], env: Mapping[str, str], *, merge_stderr: bool = False
) -> subprocess.Popen[str]:
    """Start ``command`` in the project folder, in a session of its own, with text pipes and
    SIGINT at its default, as at a terminal (a suite started in the background has it ignored,
    and ``make`` would ignore a Ctrl-C)."""
    return subprocess.Popen(
        list(command),
        cwd=PROJECT_DIR,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for(predicate: Callable[[], bool], proc: subprocess.Popen[str], limit_s: float) -> None:
    """Poll ``predicate`` until it holds; fail if ``proc`` ends first or ``limit_s`` pass."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if proc.poll() is not None:
            out, err = proc.communicate()
            tail = (out or "")[-2000:] + (err or "")[-3000:]
            pytest.fail(f"ended early (exit {proc.returncode}): {tail}")
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)
