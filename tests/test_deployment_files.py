"""docker-compose.yml, docker-compose.test.yml and the Dockerfile agree with the installed Flower,
with each other and with the package layout.

Static checks only (no Docker engine in the test suite); ``make test-compose``
(scripts/test_compose.sh) builds the image and runs both compose files for real.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SERVICES = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
TEST_SERVICES = yaml.safe_load((ROOT / "docker-compose.test.yml").read_text())["services"]
SUPERNODES = sorted(n for n in SERVICES if n.startswith("supernode"))


@cache
def help_text(binary: str) -> str:
    exe = Path(sys.executable).parent / binary
    return subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120).stdout


def flag_value(command: list[str], flag: str) -> str:
    assert command.count(flag) == 1, (flag, command)
    return command[command.index(flag) + 1]


@pytest.mark.parametrize(
    ("file", "name"),
    [("docker-compose.yml", n) for n in sorted(SERVICES)]
    + [("docker-compose.test.yml", n) for n in sorted(TEST_SERVICES)],
)
def test_every_flag_exists_in_the_installed_flower(file, name):
    command = (SERVICES if file == "docker-compose.yml" else TEST_SERVICES)[name]["command"]
    binary, *args = command
    assert binary in ("flower-superlink", "flower-supernode")
    text = help_text(binary)
    for flag in (a for a in args if a.startswith("--")):
        assert re.search(rf"(^|\s){re.escape(flag)}(\s|,|=|$)", text, re.M), (binary, flag)


def test_dockerfile_copies_every_package_onto_the_public_python_image():
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in wheel["targets"]["wheel"]["packages"]:
        assert f"COPY {package} ./{package}" in dockerfile
    assert "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1" in dockerfile
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}" in dockerfile
    assert "python3 python3-venv" in dockerfile  # a base without Python gets it from apt


@pytest.mark.parametrize("services", [SERVICES, TEST_SERVICES], ids=["public", "test"])
def test_tls_and_supernode_authentication_everywhere(services):
    superlink = services["superlink"]["command"]
    assert "--insecure" not in superlink
    assert "--enable-supernode-auth" in superlink
    assert flag_value(superlink, "--ssl-ca-certfile") == "/certificates/ca.crt"
    assert flag_value(superlink, "--ssl-certfile") == "/certificates/server.pem"
    assert flag_value(superlink, "--ssl-keyfile") == "/certificates/server.key"
    keys = []
    for name in SUPERNODES:
        command = services[name]["command"]
        assert "--insecure" not in command
        assert flag_value(command, "--root-certificates") == "/certificates/ca.crt"
        keys.append(flag_value(command, "--auth-supernode-private-key"))
    assert keys == [f"/certificates/supernode-{i}.key" for i in range(len(SUPERNODES))]


def test_certificates_are_mounted_read_only_where_they_are_used():
    merged = {name: {"volumes": TEST_SERVICES[name].get("volumes", []) + SERVICES[name].get(
        "volumes", [])} for name in SERVICES}  # fmt: skip
    for services in (SERVICES, merged):
        for name, service in services.items():
            mounts = {v.split(":")[1]: v for v in service["volumes"]}
            assert mounts["/certificates"].endswith(":ro"), (name, mounts)
    assert "./results:/results" in SERVICES["superlink"]["volumes"]


def test_the_supernodes_cover_every_partition_once_and_run_on_loopback_in_the_test_override():
    assert set(TEST_SERVICES) == set(SERVICES)
    assert all(s["network_mode"] == "host" for s in TEST_SERVICES.values())
    superlink = TEST_SERVICES["superlink"]["command"]
    assert flag_value(superlink, "--host") == "127.0.0.1"
    link_port = flag_value(superlink, "--port")
    ports = [link_port]
    for name in SUPERNODES:
        command = TEST_SERVICES[name]["command"]
        assert flag_value(command, "--superlink") == f"127.0.0.1:{link_port}"
        assert flag_value(command, "--host") == "127.0.0.1"
        ports.append(flag_value(command, "--port"))
        public = SERVICES[name]["command"]  # the same device as in the public file
        assert flag_value(command, "--node-config") == flag_value(public, "--node-config")
    assert len(set(ports)) == len(ports), ports
    script = (ROOT / "scripts" / "test_compose.sh").read_text()  # make test-compose's script
    assert f"SUPERLINK_PORT={link_port}" in script
    assert all(port in script for port in ports)
    assert "-f docker-compose.yml -f docker-compose.test.yml" in script
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test-compose:.*\n\t.*scripts/test_compose\.sh", makefile, re.M)
    # the public file's supernodes cover every partition once, on the superlink's port
    configs = [flag_value(SERVICES[name]["command"], "--node-config") for name in SUPERNODES]
    parsed = [dict(kv.split("=") for kv in c.split()) for c in configs]
    n = len(parsed)
    assert sorted(int(p["partition-id"]) for p in parsed) == list(range(n))
    assert {int(p["num-partitions"]) for p in parsed} == {n}
    assert all("superlink:8000" in SERVICES[name]["command"] for name in SUPERNODES)


def compose_merge(files: list[dict[str, Any]]) -> dict[str, Any]:
    """Compose's merge of ``files`` as far as these files need: each service's keys, later wins."""
    services: dict[str, dict[str, Any]] = {}
    for each in files:
        for name, service in each["services"].items():
            services.setdefault(name, {}).update(service)
    return {"services": services}


def test_the_documented_test_compose_commands_start_no_host_service_with_published_ports():
    # Compose v1 refuses a service on host networking that publishes ports ("host" network_mode
    # is incompatible with port_bindings). The header's commands, played on the files: a
    # `config | <filter> >FILE` line writes FILE (its filter run as written), an `up` line starts.
    header = (ROOT / "docker-compose.test.yml").read_text().split("\nservices:")[0]
    commands = [line[4:] for line in header.splitlines() if line.startswith("#   docker")]
    written: dict[str, dict[str, Any]] = {}
    started = []
    for command in commands:
        compose, _, rest = command.partition(" | ")
        words = shlex.split(compose)
        names = [words[i + 1] for i, word in enumerate(words) if word == "-f"]
        merged = compose_merge(
            [written.get(n) or yaml.safe_load((ROOT / n).read_text()) for n in names]
        )
        if "up" in words:
            for name, service in merged["services"].items():
                host = service.get("network_mode") == "host"
                assert not (host and service.get("ports")), (command, name)
            started.append(command)
        elif words[-1] == "config":
            program, _, target = rest.rpartition(" >")
            python, option, code = shlex.split(program)
            assert python == ".venv/bin/python" and option == "-c", program
            filtered = subprocess.run(
                [sys.executable, "-c", code], input=yaml.safe_dump(merged), capture_output=True,
                text=True, check=True, timeout=60,
            ).stdout  # fmt: skip
            written[target] = yaml.safe_load(filtered)
    assert started, commands


def test_the_flower_version_named_is_the_installed_one():
    installed = ".".join(version("flwr").split(".")[:2])
    named = re.findall(r"Flower (\d+\.\d+)", (ROOT / "docker-compose.yml").read_text())
    assert named and set(named) == {installed}, (named, installed)
