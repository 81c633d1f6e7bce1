"""The README's other commands (channel report, tables, figures, benchmarks) run as written.

Only ``--out`` and size knobs change; exit code 0 and the files the README names are checked.
The flwr/Ray-based families are in test_readme_commands.py.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from fake_runs import fake_run
from test_readme_commands import fedcgd_commands, output, readme_commands
from test_readme_commands import run as run_fedcgd

import benchmarks

PROJECT = Path(__file__).resolve().parents[1]

#: subcommand -> (extra arguments that make it tiny, files it must write under --out)
TINY: dict[str, tuple[list[str], list[str]]] = {
    "channel-report": (["--rounds", "20"], ["summary.json", "channel.png"]),
    "paper schedule-table": (
        ["--drops", "1", "--rounds", "2", "--quiet"],
        ["table.csv", "table.png"],
    ),
    "paper solver-performance": (
        ["--instances", "1", "--num-devices", "8", "--alphas", "1", "--ratios", "1"],
        ["rows.csv", "summary.csv", "solver_performance.png"],
    ),
    "bench solvers": (["--instances", "1", "--num-devices", "8"], ["runs.csv", "summary.csv"]),
    "bench fscd-scale": (["--num-devices", "30", "--instances", "1"], ["summary.csv"]),
    "bench inprocess": (["--rounds", "2", "--repeats", "1"], ["table.csv", "table.json"]),
    "bench scale": (
        ["--devices", "12", "--rounds", "3", "--samples", "2000"],
        ["table.csv", "table.json"],
    ),
    "certificates": (["--supernodes", "1"], []),
    "bench checkpoint": (
        ["--repeats", "1", "--rounds", "2"],
        ["checkpoint_writes.csv", "checkpoint_runs.csv"],
    ),
}

#: Commands that write nothing (they print timings): subcommand -> extra arguments.
PRINTING: dict[str, list[str]] = {"bench client": ["--repeats", "1", "--vmap-repeats", "1"]}


BENCH = ".venv/bin/python -m benchmarks"
BENCH_COMMAND = re.compile(r"(\.venv/bin/)?python -m benchmarks [a-z]")  # NAME: a placeholder


def commands(command: str) -> list[list[str]]:
    """The documented arguments of ``fedcgd COMMAND``, or of ``python -m benchmarks NAME`` for
    ``bench NAME``, once each."""
    if not command.startswith("bench "):
        return fedcgd_commands(command)
    head = [*BENCH.split(), command.split()[1]]
    found = [[*BENCH.split(), *shlex.split(c)[3:]] for c in readme_commands()
             if BENCH_COMMAND.match(c)]  # fmt: skip
    return list({shlex.join(w): w[len(head) :] for w in found if w[: len(head)] == head}.values())


def run(subcommand: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    if subcommand.startswith("bench "):
        command = [sys.executable, "-m", "benchmarks", *subcommand.split()[1:], *args]
        proc = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=600)
    else:
        proc = run_fedcgd(subcommand, *args, timeout=600)
    assert proc.returncode == 0, (shlex.join(args), output(proc))
    return proc


def with_out(args: list[str], out: Path) -> list[str]:
    """``args`` with ``--out`` and ``--docs-png`` in ``out``, ``--compare-with`` this checkout."""
    args = list(args)
    for flag, value in (("--compare-with", PROJECT), ("--docs-png", out / "docs.png")):
        if flag in args:
            args[args.index(flag) + 1] = str(value)
    if "--out" in args:
        i = args.index("--out")
        return [*args[:i], "--out", str(out), *args[i + 2 :]]
    return [*args, "--out", str(out)]


CASES = [(command, args) for command in TINY for args in commands(command)]


def _case(command: str, args: list[str]) -> object:
    """A parametrize entry; the in-process benchmark's variants other than the README's fullest
    (each 40 s: it also times Python's start-up) are slow, their options parsed by the fullest."""
    fullest = max(commands(command), key=len)
    slow = command == "bench inprocess" and args != fullest
    return pytest.param(
        command, args, id=" ".join(args) or command, marks=[pytest.mark.slow] if slow else []
    )


@pytest.mark.slow  # 40 s: it times σ̂ on every model, ResNet-18 included
@pytest.mark.parametrize("command", list(PRINTING))
def test_readme_printing_command_runs(command: str) -> None:
    for args in commands(command):
        proc = run(command, [*args, *PRINTING[command]])
        assert "sigma" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize(("command", "args"), [_case(m, a) for m, a in CASES])
def test_readme_tool_command_runs(command: str, args: list[str], tmp_path: Path) -> None:
    extra, files = TINY[command]
    out = tmp_path / "out"
    run(command, with_out([*args, *extra], out))
    for name in files:
        assert (out / name).stat().st_size > 0, name
    if command == "bench inprocess":  # the bare replay computes what the engine computed
        settings = json.loads((out / "table.json").read_text())["settings"]
        assert settings["max_accuracy_gap"] <= 0.01, settings
    if "--docs-png" in args:  # the committed figure's copy: the figure itself
        assert (out / "docs.png").read_bytes() == (out / "solver_performance.png").read_bytes()
    if command == "certificates":  # CA, SuperLink certificate and key, one key pair
        assert len([p for p in out.rglob("*") if p.is_file()]) >= 5


@pytest.mark.parametrize("command", ["bench scale", "bench inprocess"])
def test_a_compare_with_that_is_no_checkout_is_refused_before_anything_runs(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "experiments").mkdir()  # a folder, not a checkout of this project
    out = tmp_path / "out"
    args = [command.split()[1], "--compare-with", str(tmp_path), "--out", str(out)]
    assert benchmarks.main(args) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"--compare-with {tmp_path}: not a checkout of this project" in line
    assert not out.exists()


def test_readme_plot_runs_command_runs(tmp_path: Path) -> None:
    (args,) = fedcgd_commands("plot")  # results/A results/B --out cmp.png
    for name, policy in (("A", "bc"), ("B", "fedcgd-fscd")):  # two finished 2-round runs
        fake_run(tmp_path / name, policy, 0, [0.5, 0.6], {"num-devices": 6})
    out = tmp_path / "cmp.png"
    rewritten = [str(tmp_path / "A"), str(tmp_path / "B"), "--out", str(out)]
    assert [a.startswith("results/") for a in args[:2]] == [True, True]
    run("plot", rewritten)
    assert out.stat().st_size > 0


@pytest.mark.slow
def test_readme_round_benchmark_command_runs(tmp_path: Path) -> None:
    """The paper's CIFAR-10 setting on generated CIFAR-shaped data, flwr run against plain."""
    (args,) = [a for a in commands("bench round") if a]  # --rounds 4 --threads 1, not the name
    out = tmp_path / "bench"
    proc = run("bench round", [*args, "--rounds", "2", "--policies", "bc", "--out", str(out)])
    assert "flwr" in proc.stdout and any(out.rglob("*.csv")), proc.stdout[-2000:]


def test_every_tool_family_is_covered_and_each_benchmark_names_a_benchmark_and_its_options():
    assert {command for command, _ in CASES} == set(TINY)
    assert all(commands(command) for command in PRINTING)
    documented = [c for c in readme_commands() if BENCH_COMMAND.match(c)]
    assert {shlex.split(c)[3] for c in documented} >= {"solvers", "inprocess", "scale", "round"}
    for command in documented:
        assert benchmarks.main([*shlex.split(command)[3:], "--help"]) == 0, command
    assert benchmarks.main(["round", "--rounds", "1"]) == 2
