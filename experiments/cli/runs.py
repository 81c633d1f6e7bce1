"""The ``fedcgd`` commands of runs; each imports its work when it runs (a fast ``--help``).

What each option does: docs/running.md, docs/comparing.md and docs/deployment.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import click
import typer

from experiments.cli.options import (
    app,
    choice_option,
    flag,
    given_options,
    path_option,
    refuse,
    started_as,
    subcommand,
)
from experiments.run.launcher import DEFAULT_RESULTS
from experiments.run.resume_command import fedcgd_command

RunConfig = Annotated[
    str, typer.Option(help="run-config overrides, e.g. \"policy='bc' num-server-rounds=5\"")
]
SharedRunConfig = Annotated[
    str, typer.Option(help='run-config overrides shared by every run, e.g. "num-server-rounds=5"')
]
Out = Annotated[
    Path,
    path_option(
        "--out", "--results", help="folder of the run's folder <policy>-<UTC time>",
        show_default="results/",
    ),
]  # fmt: skip
RayAddress = Annotated[
    str | None, typer.Option(envvar="RAY_ADDRESS", help="a Ray cluster (auto or HOST:PORT)")
]


@app.command("run")
def run_command(
    ctx: typer.Context,
    run_config: RunConfig = "",
    num_supernodes: Annotated[int | None, typer.Option(min=0, help="default: num-devices")] = None,
    deployment: Annotated[bool, flag("--deployment", "SuperNode processes on loopback")] = False,
    cpus_per_client: int = 1,
    gpus_per_client: float = 0.0,
    out: Out = DEFAULT_RESULTS,
    tls: Annotated[bool, flag("--tls", "TLS and SuperNode authentication")] = False,
    certificates_dir: Annotated[
        Path | None, path_option("--certificates-dir", help="with --tls: keep them here")
    ] = None,
    supernode_gpus: Annotated[
        str | None, typer.Option(help="with --deployment: GPU of SuperNode i, e.g. 0,1")
    ] = None,
    ray_address: RayAddress = None,
    flwr_home: Annotated[
        Path | None, path_option("--flwr-home", help="FLWR_HOME", folder=True)
    ] = None,
    superlink: Annotated[str | None, typer.Option(help="an existing SuperLink HOST:PORT")] = None,
    root_certificates: Annotated[
        Path | None, path_option("--root-certificates", help="with --superlink: its CA")
    ] = None,
) -> int:
    """One run with `flwr run` on a SuperLink of its own (simulation, or --deployment)."""
    from experiments.run import launcher

    params = dict(ctx.params)
    params["ray_address"] = params["ray_address"] or None  # RAY_ADDRESS="" is unset
    return launcher.main(launcher.LaunchOptions(**params), started_as(ctx))


@app.command("inprocess")
def inprocess_command(
    ctx: typer.Context,
    run_config: RunConfig = "",
    per_device: Annotated[bool, flag("--per-device", "no cohort execution")] = False,
    cohort_threads: Annotated[int, typer.Option(min=0, help="0: one per usable core")] = 0,
    out: Out = DEFAULT_RESULTS,
) -> int:
    """One run in this process: the real ServerApp and ClientApp, no Ray, no network."""
    from experiments.run import inprocess

    return inprocess.main(inprocess.InProcessOptions(**ctx.params), started_as(ctx))


@app.command("compare")
def compare_command(
    ctx: typer.Context,
    policies: Annotated[str, typer.Option(help="comma-separated")] = (
        "fedcgd-fscd,fedcgd-gs,bc,bn2,poc,fedcbs,all"
    ),
    seeds: Annotated[str | None, typer.Option(help="e.g. 0,1,2 (default: 0)")] = None,
    run_config: SharedRunConfig = "",
    aggregators: Annotated[str | None, typer.Option(help="e.g. default,FedMedian")] = None,
    channels: Annotated[str | None, typer.Option(help="channel.model values")] = None,
    out: Annotated[Path, path_option("--out", help="output folder")] = Path("results/compare"),
    num_supernodes: int | None = None,
    target_accuracy: float | None = None,
    engine: Annotated[
        str, choice_option(("simulation", "deployment", "inprocess"), "how each run goes")
    ] = "simulation",
    jobs: Annotated[int, typer.Option(help="inprocess runs at once (0: one per core)")] = 1,
    ray_address: RayAddress = None,
    cpus_per_run: Annotated[float, typer.Option(help="with Ray: CPUs a run takes")] = 1.0,
    gpus_per_run: Annotated[float, typer.Option(help="GPUs a run takes (> 0: Ray)")] = 0.0,
) -> int:
    """Several policies on the same settings and seeds, compared (the paper's Table II)."""
    from experiments.compare import policies as compare

    command = fedcgd_command([*subcommand(ctx), *given_options(ctx)])
    return compare.compare(ctx.params, command)


@app.command("reproduce", context_settings={"ignore_unknown_options": True})
def reproduce_command(
    overrides: Annotated[list[str] | None, typer.Argument(metavar="[KEY=VALUE]...")] = None,
) -> int:
    r"""A table or figure of the paper from a preset of conf/experiment/.

    KEY=VALUE are Hydra overrides of conf/config.yaml, e.g. experiment=mnist1d_dirichlet
    'seeds=\[0,1,2]' run.num-server-rounds=3 launcher.engine=inprocess (docs/comparing.md).
    """
    from experiments.compare import reproduce

    return reproduce.main(list(overrides or []))


@app.command("plot")
def plot_command(
    result_dirs: Annotated[list[Path], typer.Argument(help="result folders of runs")],
    out: Annotated[Path, typer.Option(help="the figure (PNG)")] = Path("results/curves.png"),
    mean: Annotated[bool, flag("--mean", "a mean and 95 % band per policy, setting")] = False,
    bands: Annotated[bool, typer.Option("--bands/--no-bands", help="with --mean")] = True,
) -> int:
    """Accuracy, scheduled devices and WEMD per round of runs, from their result folders."""
    from experiments.analysis import plot_runs

    return plot_runs.main(result_dirs, out, mean, bands)


@app.command("indicator")
def indicator_command(
    folders: Annotated[list[Path], typer.Argument(help="comparisons or presets (runs.csv)")],
    out: Annotated[Path, path_option("--out", help="output folder")] = DEFAULT_RESULTS
    / "indicator",
    early_rounds: Annotated[int, typer.Option(min=1, help="Ĝ/σ̂ over rounds 1..N")] = 50,
    late_fraction: Annotated[
        float,
        typer.Option(
            click_type=click.FloatRange(0, 1, min_open=True),
            help="the accuracy gap over this last fraction",
        ),
    ] = 0.2,
) -> None:
    """Does early Ĝ/σ̂ predict the later FedCGD-FSCD − BC gap? Spearman over the settings' means."""
    from experiments.compare.results import indicator_from_folders

    try:
        print(indicator_from_folders(folders, out, early_rounds, late_fraction))
    except ValueError as err:
        refuse(str(err))
    print(f"wrote {out / 'indicator.csv'} and {out / 'indicator_test.csv'}")


@app.command("runs")
def runs_command(
    folder: Annotated[
        Path, typer.Argument(help="a folder of runs (any depth)", show_default="results/")
    ] = DEFAULT_RESULTS,
) -> None:
    """List the runs under a folder, oldest first: policy, aggregator, seed, rounds, status."""
    from server_app.run_folder.run_status import runs_table

    try:
        print(runs_table(folder))
    except ValueError as err:
        refuse(str(err))
