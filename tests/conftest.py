"""What every test shares: the environment the Makefile gives ``make test``.

``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`` stops a SuperLink from installing the app's
dependencies for each run (several GB, another torch); set here too, so a plain ``pytest``
behaves as ``make test`` does. Shared run configs are in ``task_settings.py``, shared result
readers in ``run_results.py``, process helpers in ``subprocesses.py``.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    os.environ["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] = "1"
