"""The commands of README.md and docs/ run as written, with only their size knobs made small.

Their settings are validated against the schema; each command runs in a child process with
only rounds, devices, seeds, policies and output folders made small, and must exit 0 with its
result files, or (CIFAR, whose data are not here) exit 2 in one line, creating nothing. Those
that start ``flwr run`` are marked ``slow``; the in-process ones run in the default suite.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from doc_pages import PROJECT, doc_text
from fake_runs import read_csv, write_run
from hydra import compose, initialize_config_dir
from subprocesses import fedcgd

from experiments.analysis.plot_runs import point_label
from experiments.analysis.tables import write_csv
from experiments.compare.plans import check_policy_params_used, with_policy_params
from experiments.compare.reproduce import (
    CONF_DIR,
    hydra_overrides,
    planned_runs,
    reproduce,
    sweep_points,
)
from experiments.run.run_config import (
    format_run_config,
    parse_run_config_text,
    validated_run_config,
)
from fedcgd_config.imports import reference_label

ROUNDS, DEVICES = 2, 4
SLOW = pytest.mark.slow


def readme_commands() -> list[str]:
    """Shell commands in README.md and docs/ (code blocks line by line, and inline code spans)."""
    text = doc_text()
    commands: list[str] = []
    for block in re.findall(r"```(?:[a-z]*)\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands += [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    spans = re.findall(r"`([^`]+)`", prose)
    commands += [" ".join(span.split()) for span in spans if "\n\n" not in span]
    return commands


def fedcgd_commands(subcommand: str) -> list[list[str]]:
    """The arguments of every ``.venv/bin/fedcgd SUBCOMMAND ...`` command, once each.

    ``subcommand`` may be several words (``"bench round"``).
    """
    head = [".venv/bin/fedcgd", *subcommand.split()]
    found: dict[str, list[str]] = {}
    for command in readme_commands():
        if command.startswith(".venv/bin/fedcgd "):
            words = shlex.split(command)
            if words[: len(head)] == head:
                args = words[len(head) :]
                found.setdefault(" ".join(args), args)
    return list(found.values())


def run_config_texts() -> list[tuple[str, str]]:
    """(run config, the ``--policies`` of its command or "") of every README command."""
    texts = []
    for command in readme_commands():
        policies = re.findall(r"--policies (\S+)", command)
        texts += [(t, "") for t in re.findall(r'RUN_CONFIG="([^"]*)"', command)]
        texts += [(t, ",".join(policies)) for t in re.findall(r'--run-config "([^"]*)"', command)]
    return [(t, p) for t, p in texts if "…" not in t and "..." not in t]


def make_run_configs() -> list[str]:
    """The run config of every ``make run`` command ("" for plain ``make run``), once each."""
    found = {""}
    for command in readme_commands():
        if command.startswith("make run RUN_CONFIG="):
            found.update(re.findall(r'RUN_CONFIG="([^"]*)"', command))
    return sorted(found)


def reproduce_commands() -> list[list[str]]:
    return [args for args in fedcgd_commands("reproduce") if args]


def resized(text: str, **values: Any) -> str:
    """``--run-config`` text with the keys in ``values`` set (replaced or added)."""
    settings = parse_run_config_text(text)
    settings.update({k.replace("_", "-"): v for k, v in values.items()})
    return format_run_config(settings)


def run(subcommand: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``fedcgd SUBCOMMAND ARGS`` from the project folder, as the README runs it."""
    return subprocess.run(
        fedcgd(*subcommand.split(), *args),
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_completed(result_dir: Path, rounds: int) -> None:
    """A run's result files: completed status, one metrics line per round, summary, model."""
    status = json.loads((result_dir / "status.json").read_text())
    assert status["state"] == "completed", status
    lines = (result_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["round"] for x in lines] == list(range(1, rounds + 1))
    for name in ("config.json", "summary.json", "model.pt"):
        assert (result_dir / name).exists(), name


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout[-3000:] + proc.stderr[-3000:]


def test_the_readme_has_commands_to_check() -> None:
    assert len(run_config_texts()) >= 3
    assert any("channel." in t for t, _ in run_config_texts())
    assert len(reproduce_commands()) >= 5
    assert any("--engine" in a for a in fedcgd_commands("compare"))
    assert any("--deployment" in a for a in fedcgd_commands("run"))
    presets = {preset_of(p.values[0]) for p in reproductions()}
    assert {p for p in presets if "mnist1d" in p} == {
        "mnist1d_local_steps", "mnist1d_imbalance", "mnist1d_dirichlet"
    }  # fmt: skip


@pytest.mark.parametrize(("text", "policies"), run_config_texts())
def test_readme_run_config_is_valid(text: str, policies: str) -> None:
    overrides = parse_run_config_text(text)
    assert overrides, text
    if not policies:
        validated_run_config(overrides)
        return
    names = policies.split(",")
    check_policy_params_used(names, overrides)  # a comparison: each policy with its own params
    for policy in names:
        validated_run_config({**with_policy_params(policy, overrides), "policy": policy})


@pytest.mark.parametrize("words", reproduce_commands(), ids=lambda w: " ".join(w))
def test_readme_reproduce_command_composes_and_validates(words: list[str]) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=hydra_overrides(words))
    assert planned_runs(cfg)


# --- the commands, executed ---------------------------------------------------------------


def cifar(text: str) -> bool:
    return "cifar" in str(parse_run_config_text(text).get("dataset", ""))


def trace(text: str) -> bool:
    """The README's ``channel.trace`` path is an example (tests/test_channel_trace.py runs one)."""
    return "channel.trace" in parse_run_config_text(text)


@pytest.mark.slow
@pytest.mark.parametrize("text", [t for t in make_run_configs() if not cifar(t) and not trace(t)])
def test_make_run_runs(text: str, tmp_path: Path) -> None:
    """``make run [RUN_CONFIG="..."]``: the launcher, ``flwr run`` on its own SuperLink."""
    out = tmp_path / "run"
    small = resized(text, num_server_rounds=ROUNDS, num_devices=DEVICES, result_dir=str(out))
    proc = run("run", "--run-config", small)
    assert proc.returncode == 0, output(proc)
    assert_completed(out, ROUNDS)
    assert (out / "curves.png").exists()


@pytest.mark.parametrize("text", [t for t in make_run_configs() if cifar(t)])
def test_make_run_on_cifar_without_the_data_stops_in_one_line(text: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "no" / "data"
    small = resized(text, num_server_rounds=ROUNDS, data_dir=str(data_dir))
    proc = run("run", "--run-config", small)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.startswith("error:") and proc.stderr.count("\n") == 1, proc.stderr
    assert str(data_dir) in proc.stderr
    assert not (tmp_path / "no").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "args", [a for a in fedcgd_commands("run") if "--deployment" in a], ids=" ".join
)
def test_launcher_deployment_commands_run(args: list[str], tmp_path: Path) -> None:
    """``--deployment [--tls]``: SuperNode processes on loopback (two of them here).

    The GPU variant (``device='cuda'``) runs where torch sees a CUDA device; elsewhere it must be
    refused before anything starts, in one line naming the setting and what is allowed.
    """
    import torch

    out = tmp_path / "run"
    args = list(args)
    i = args.index("--run-config") + 1
    on_cuda = "device='cuda'" in args[i]
    args[i] = resized(args[i], num_server_rounds=ROUNDS, num_devices=2, result_dir=str(out))
    proc = run("run", *args)
    if on_cuda and not torch.cuda.is_available():
        assert proc.returncode == 2, output(proc)
        assert "run-config key 'device' = 'cuda', but this process sees 0 CUDA" in proc.stderr
        assert 'allowed here: "auto", "cpu"' in proc.stderr and "Traceback" not in proc.stderr
        assert not out.exists()
        return
    assert proc.returncode == 0, output(proc)
    assert_completed(out, ROUNDS)


@pytest.mark.slow
def test_resume_through_the_launcher(tmp_path: Path) -> None:
    """``make run RUN_CONFIG="... checkpoint-every=1"``, then ``... resume-from='...'``."""
    out = tmp_path / "run"
    first = resized("", num_server_rounds=ROUNDS, num_devices=DEVICES, checkpoint_every=1)
    proc = run("run", "--run-config", f"{first} result-dir='{out}'")
    assert proc.returncode == 0, output(proc)
    assert_completed(out, ROUNDS)
    more = resized(first, num_server_rounds=ROUNDS + 1)
    proc = run("run", "--run-config", f"{more} resume-from='{out}'")
    assert proc.returncode == 0, output(proc)
    assert_completed(out, ROUNDS + 1)


def option(args: list[str], name: str, value: str | None = None) -> list[str]:
    """``args`` with ``name``'s value set to ``value`` (added if absent; None: removed)."""
    args = list(args)
    if name in args:
        del args[args.index(name) : args.index(name) + 2]
    return args + ([name, value] if value is not None else [])


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(a, id=" ".join(a), marks=[] if "--engine" in a else [SLOW])
        for a in fedcgd_commands("compare")
    ],
)
def test_readme_compare_command_runs(args: list[str], tmp_path: Path) -> None:
    """Each comparison of the docs with tiny runs (seven policies: three; ``--seeds``: 0 and 1,
    paired and each seed reaching the app); its tables per point (``--channels``: a folder
    each), its runs, its ``policy-params``."""
    out = tmp_path / "compare"
    given = parse_run_config_text(dict(itertools.pairwise(args)).get("--run-config", ""))
    small = format_run_config({**given, "num-server-rounds": ROUNDS, "num-devices": DEVICES})
    args = option(option(args, "--out", str(out)), "--run-config", small)
    seeds = ["0", "1"] if "--seeds" in args else ["0"]
    if "--seeds" in args:
        args = option(args, "--seeds", ",".join(seeds))
    if "--policies" not in args:
        args = option(args, "--policies", "fedcgd-fscd,bc,all")
    proc = run("compare", *args)
    assert proc.returncode == 0, output(proc)
    labels = [reference_label(p) for p in args[args.index("--policies") + 1].split(",")]
    channels = args[args.index("--channels") + 1].split(",") if "--channels" in args else [""]
    params = {k.split(".", 1)[1]: v for k, v in given.items() if k.startswith("policy-params.")}
    n = len(seeds)
    assert f"[policy {len(labels)}/{len(labels)}, seed {n}/{n}] {labels[-1]} seed={n - 1}" in (
        proc.stdout
    )
    for channel in channels:
        folder = out / f"channel={reference_label(channel)}" if channel else out
        table = read_csv(folder / "table.csv")
        assert [r["policy"] for r in table] == labels
        runs = read_csv(folder / "runs.csv")
        assert [(r["policy"], r["seed"]) for r in runs] == list(itertools.product(labels, seeds))
        finals = [float(r["final_accuracy"]) for r in runs if r["policy"] == labels[-1]]
        assert float(table[-1]["final_accuracy_mean"]) == pytest.approx(sum(finals) / n)
        assert (table[-1]["n_seeds"], table[-1]["n_paired"]) == (str(n), str(n))
        assert (folder / "curves.png").stat().st_size > 0
        for label, seed in itertools.product(labels, seeds):
            assert_completed(folder / label / f"seed-{seed}", ROUNDS)
            recorded = json.loads((folder / label / f"seed-{seed}" / "config.json").read_text())
            assert recorded["task"]["seed"] == int(seed)
            assert recorded["channel_model"] == (channel or "paper")
            assert label != labels[-1] or recorded["policy_params"] == params
    last = proc.stdout.strip().splitlines()[-1]
    assert last == f"all {len(labels) * len(channels) * n} runs completed"


def preset_of(args: list[str]) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith("experiment="))


def preset_config(preset: str, *overrides: str) -> Mapping[str, Any]:
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose(config_name="config", overrides=[f"experiment={preset}", *overrides])


def small_reproduction(args: list[str], out: Path, policies: str | None) -> list[str]:
    """The command with one seed, tiny runs and ``out`` as its folder (and ``policies``)."""
    own = ("seeds=", "out=", "policies=") if policies else ("seeds=", "out=")
    args = [a for a in args if not a.startswith(own)]
    args += ["seeds=[0]", f"run.num-server-rounds={ROUNDS}", f"run.num-devices={DEVICES}"]
    return args + [f"out={out}"] + ([f"policies=[{policies}]"] if policies else [])


def reproductions() -> list[Any]:
    """The presets on digits and MNIST-1D of the docs (a cluster's command: test_ray_cluster.py
    runs the recipe as written); the quick in-process ones in the default suite."""
    params = []
    for args in reproduce_commands():
        dataset = preset_config(preset_of(args)).run.get("dataset", "digits")
        if dataset not in ("digits", "mnist1d") or any("ray-address=" in a for a in args):
            continue
        quick = preset_of(args) == "digits_local_steps" or args == [
            "experiment=mnist1d_local_steps"
        ]
        params.append(pytest.param(args, id=" ".join(args), marks=[] if quick else [SLOW]))
    return params


@pytest.mark.parametrize("args", reproductions())
def test_readme_reproduce_command_runs(args: list[str], tmp_path: Path) -> None:
    """Each preset with one seed, tiny runs and two policies (a user's policy kept), side by side
    as written; its tables per sweep point and over them, its runs; MNIST-1D: the indicator."""
    out = tmp_path / "reproduce"
    own = [a for a in args if a.startswith("policies=") and ":" in a]
    small = small_reproduction(args, out, None if own else "fedcgd-fscd,bc")
    mnist1d = preset_config(preset_of(args)).run.get("dataset") == "mnist1d"
    if mnist1d:
        small += [f"run.data-dir={tmp_path / 'data'}", "run.mnist1d-samples=600"]
    if preset_of(args) == "digits_aggregators":
        # Krum and Bulyan need 3 uploads a round (2f + 3, 4f + 3 with f = 0), and a run whose
        # aggregation fails in most rounds ends failed (docs/aggregation.md): 8 devices, every
        # one available, a deadline that every one meets in a fraction of the band
        small = [a for a in small if not a.startswith("run.num-devices=")]
        small += ["run.num-devices=8", "run.channel.availability-prob=1.0"]
        small += ["run.channel.deadline-s=1.0"]
    proc = run("reproduce", *small)
    assert proc.returncode == 0, output(proc)
    assert "run(s) at once" in proc.stdout
    sweep = hydra_overrides([a for a in small if a.startswith("sweep.")])
    cfg = preset_config(preset_of(args), *sweep)  # with the command's own sweep
    policies = own[0].removeprefix("policies=[").strip("]") if own else "fedcgd-fscd,bc"
    labels = [reference_label(p.strip("'\"")) for p in policies.split(",")]
    points = [point_label(p) for p in sweep_points({k: list(v) for k, v in cfg.sweep.items()})]
    expected = [(point, label) for point in points for label in labels]
    table = read_csv(out / "table.csv")
    assert [(r["sweep"], r["policy"]) for r in table] == expected
    assert {r["n_seeds"] for r in table} == {"1"}
    assert len(read_csv(out / "runs.csv")) == len(expected)
    for point, label in expected:
        assert_completed(out / point / label / "seed-0", ROUNDS)
        assert (out / point / "curves.png").stat().st_size > 0
    assert (out / "estimates.png").stat().st_size > 0
    assert proc.stdout.strip().splitlines()[-1] == f"all {len(expected)} runs completed"
    if mnist1d:  # the Ĝ/σ̂ indicator over every sweep point (one seed: a point each) and per point
        config = json.loads((out / points[0] / "bc" / "seed-0" / "config.json").read_text())
        assert config["task"]["model"] == "cnn1d" and config["task"]["mnist1d_samples"] == 600
        assert [p["setting"] for p in read_csv(out / "indicator.csv")] == points
        assert read_csv(out / "indicator_test.csv")[0]["n_points"] == str(len(points))
        assert len(read_csv(out / points[0] / "indicator.csv")) == 1
        assert "Spearman" in proc.stdout or "no correlation" in proc.stdout


def test_the_indicator_command_runs(tmp_path: Path) -> None:
    """``fedcgd indicator`` as the docs give it, over hand-made comparisons of the folders named."""
    (args,) = fedcgd_commands("indicator")
    out_at = args.index("--out")
    folders = [a for i, a in enumerate(args) if not a.startswith("--") and i != out_at + 1]
    assert len(folders) >= 2, args
    ratio = 0.5
    for k, folder in enumerate(folders):
        where, runs = tmp_path / Path(folder).name, []
        for seed in (0, 1):
            ratio += 0.25  # the gap grows with Ĝ/σ̂: rho = 1
            for policy, last in (("fedcgd-fscd", ratio), ("bc", 0.5)):
                lines = [
                    {"round": r, "accuracy": a, "sigma": 2.0, "class_gradient_used": 2 * ratio}
                    for r, a in ((1, 0.2), (2, last))
                ]
                overrides = {"policy": policy, "seed": seed, "learning-rate": 0.1 * (k + 1)}
                run_dir = where / policy / f"seed-{seed}"
                write_run(run_dir, overrides, lines)
                runs.append({"policy": policy, "seed": seed, "result_dir": str(run_dir)})
        write_csv(where / "runs.csv", runs)
    small = [str(tmp_path / Path(a).name) if a in folders else a for a in args]
    small[out_at + 1] = str(tmp_path / "indicator")
    proc = run("indicator", *small)
    assert proc.returncode == 0, output(proc)
    assert "Spearman rho = +1.000" in proc.stdout, proc.stdout
    points = read_csv(tmp_path / "indicator" / "indicator.csv")
    assert [p["setting"] for p in points] == [Path(f).name for f in folders for _ in (0, 1)]
    assert read_csv(tmp_path / "indicator" / "indicator_test.csv")[0]["n_points"] == str(
        len(points)
    )


@pytest.mark.parametrize(
    "args", [a for a in reproduce_commands() if "cifar" in preset_of(a)], ids=" ".join
)
def test_reproduce_cifar_command_without_the_data_stops_in_one_line(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run in this process (Hydra composed as on the command line): no data, exit 2, one line."""
    data_dir = tmp_path / "abs" / "data"
    words = [a if not a.startswith("run.data-dir=") else f"run.data-dir={data_dir}" for a in args]
    words = small_reproduction(words, tmp_path / "out", None)
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=hydra_overrides(words))
    assert reproduce(cfg) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and str(data_dir) in err, err
    assert not (tmp_path / "abs").exists() and not (tmp_path / "out").exists()
