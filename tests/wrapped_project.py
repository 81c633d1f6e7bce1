"""Run ``flwr run`` with a test ClientApp (a wrapper around ``client_app.app:app``).

:func:`build_wrapped_project` writes a Flower project folder: our ``pyproject.toml`` with
``[tool.flwr.app.components] clientapp = "<module>:app"`` and a copy of the wrapper module next
to it. ``flwr run`` bundles the folder (the FAB holds ``*.py`` and ``*.toml``) and the SuperLink
loads the ClientApp from the installed bundle, whose folder is on ``sys.path`` (in simulation
the Ray workers get the same ``PYTHONPATH``); ``server_app``, ``client_app`` and
``fedcgd_task`` come from the editable install of this project. The wrapper reads its settings
from environment variables: :func:`run_wrapped` sets them in the environment the SuperLink
(and, in a deployment, the SuperNodes) start with, which their ClientApp processes and Ray workers
inherit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from experiments.run.flwr_run import run_flwr
from fedcgd_task.schema import PROJECT_DIR

#: The ``clientapp`` line of ``[tool.flwr.app.components]`` in our pyproject.toml.
CLIENTAPP_LINE = re.compile(r'^clientapp\s*=\s*"[^"]*"\s*$', re.MULTILINE)


def build_wrapped_project(folder: Path, wrapper: Path) -> Path:
    """Write a copy of our Flower project whose ClientApp is ``<wrapper stem>:app``.

    Parameters
    ----------
    folder : Path
        Where to write it (created; must not hold another project).
    wrapper : Path
        A Python file with a module-level ``app`` (a ``ClientApp``); copied into ``folder``.

    Returns
    -------
    Path
        ``folder``.
    """
    module = wrapper.stem
    if not module.isidentifier() or module.startswith("test_") or module.endswith("_test"):
        raise ValueError(
            f"wrapper {wrapper.name!r}: the module name must be a Python identifier that "
            "flwr bundles (not test_*.py / *_test.py)"
        )
    text = (PROJECT_DIR / "pyproject.toml").read_text()
    new_text, count = CLIENTAPP_LINE.subn(f'clientapp = "{module}:app"', text)
    if count != 1:
        raise ValueError(f"pyproject.toml: expected one clientapp line, found {count}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(new_text)
    shutil.copyfile(wrapper, folder / wrapper.name)
    return folder


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block, then restore what was there."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def run_wrapped(
    run_config: Mapping[str, Any],
    *,
    wrapper: Path,
    env: Mapping[str, str],
    num_supernodes: int,
    workdir: Path,
    deployment: bool = False,
    cpus_per_client: int = 1,
) -> subprocess.CompletedProcess[str]:
    """``flwr run`` (simulation, or SuperNode processes) with ``wrapper`` as the ClientApp.

    ``env`` reaches every process the run starts (SuperLink, SuperNodes, ClientApps, Ray
    workers). ``workdir`` holds the project copy (``project/``) and ``FLWR_HOME``
    (``flwr-home/``). Returns the finished ``flwr run`` process (output in ``stdout``).
    """
    project = build_wrapped_project(workdir / "project", wrapper)
    with environment(env):
        return run_flwr(
            run_config,
            num_supernodes=num_supernodes,
            deployment=deployment,
            cpus_per_client=cpus_per_client,
            flwr_home=workdir / "flwr-home",
            project_dir=project,
        )
