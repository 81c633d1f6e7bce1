"""docker-compose.yml and Dockerfile agree with the installed Flower and with the package layout.

No Docker engine runs here; the same SuperLink/SuperNode commands run for real on loopback in
tests/test_flwr_run.py::test_deployment_with_supernode_processes.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


@cache
def help_text(binary: str) -> str:
    exe = Path(sys.executable).parent / binary
    return subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120).stdout


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_flag_exists_in_the_installed_flower(name):
    command = SERVICES[name]["command"]
    binary, *args = command
    assert binary in ("flower-superlink", "flower-supernode")
    text = help_text(binary)
    for flag in (a for a in args if a.startswith("--")):
        assert re.search(rf"(^|\s){re.escape(flag)}(\s|,|=|$)", text, re.M), (binary, flag)


def test_supernodes_cover_every_partition_once():
    configs = [
        s["command"][s["command"].index("--node-config") + 1]
        for n, s in SERVICES.items()
        if n.startswith("supernode")
    ]
    parsed = [dict(kv.split("=") for kv in c.split()) for c in configs]
    n = len(parsed)
    assert sorted(int(p["partition-id"]) for p in parsed) == list(range(n))
    assert {int(p["num-partitions"]) for p in parsed} == {n}
    for name, service in SERVICES.items():
        if name.startswith("supernode"):
            assert "superlink:8000" in service["command"]


def test_dockerfile_copies_every_package():
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"
    ]["wheel"]["packages"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in packages:
        assert f"COPY {package} ./{package}" in dockerfile
    assert "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1" in dockerfile
