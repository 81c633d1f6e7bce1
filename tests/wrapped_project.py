"""Run ``flwr run`` with a test ClientApp (a wrapper around ``client_app.app:app``).

The project copy names ``<module>:app`` as its ClientApp; ``flwr run`` bundles the wrapper with
it. The wrapper reads its settings from environment variables, which every process the run
starts inherits.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from unittest import mock

from experiments.run.flwr_run import run_flwr
from fedcgd_config.schema import PROJECT_DIR

#: The ``clientapp`` line of ``[tool.flwr.app.components]`` in our pyproject.toml.
CLIENTAPP_LINE = re.compile(r'^clientapp\s*=\s*"[^"]*"\s*$', re.MULTILINE)


def build_wrapped_project(folder: Path, wrapper: Path) -> Path:
    """Write into ``folder`` a copy of our project whose ClientApp is ``<wrapper stem>:app``."""
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
    """``flwr run`` with ``wrapper`` as the ClientApp and ``env`` in every process it starts."""
    project = build_wrapped_project(workdir / "project", wrapper)
    with mock.patch.dict(os.environ, env):
        return run_flwr(
            run_config,
            num_supernodes=num_supernodes,
            deployment=deployment,
            cpus_per_client=cpus_per_client,
            flwr_home=workdir / "flwr-home",
            project_dir=project,
        )
