"""The ``fedcgd`` commands of runs; each imports its work when it runs (a fast ``--help``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import click
import typer

from experiments.cli.options import (
    OUT_HELP,
    RUN_CONFIG_HELP,
    app,
    choice_option,
    given_options,
    path_option,
    refuse,
    started_as,
    subcommand,
)
from experiments.run.launcher import DEFAULT_RESULTS
from experiments.run.resume_command import fedcgd_command

#: ``--run-config`` and ``--out`` of a single run.
RunConfig = Annotated[str, typer.Option(help=RUN_CONFIG_HELP)]
Out = Annotated[Path, path_option("--out", "--results", help=OUT_HELP, show_default="results/")]


@app.command("run")
def run_command(
    ctx: typer.Context,
    run_config: RunConfig = "",
    num_supernodes: Annotated[
        int | None, typer.Option(min=0, help="default: num-devices (0 too)")
    ] = None,
    deployment: Annotated[
        bool,
        typer.Option(
            "--deployment",
            help="run SuperNode processes on loopback instead of the simulation engine",
        ),
    ] = False,
    cpus_per_client: int = 1,
    gpus_per_client: float = 0.0,
    out: Out = DEFAULT_RESULTS,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            help="TLS on every connection and SuperNode authentication (certificates are "
            "generated)",
        ),
    ] = False,
    certificates_dir: Annotated[
        Path | None,
        path_option(
            "--certificates-dir",
            help="with --tls: write the certificates and keys here and keep them (default: a "
            "temporary folder, removed at the end)",
        ),
    ] = None,
    supernode_gpus: Annotated[
        str | None,
        typer.Option(
            help="with --deployment: SuperNode i sees GPU number i mod len(list) alone "
            "(CUDA_VISIBLE_DEVICES), e.g. 0,1",
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            envvar="RAY_ADDRESS",
            help="join this Ray cluster for the simulation (e.g. HEAD:6379; default: $RAY_ADDRESS)",
        ),
    ] = None,
    flwr_home: Annotated[
        Path | None,
        path_option(
            "--flwr-home",
            help="FLWR_HOME for the run (default: a fresh temporary folder); on a Ray cluster "
            "of several machines it must be a shared folder at the same path everywhere",
        ),
    ] = None,
    superlink: Annotated[
        str | None,
        typer.Option(help="run on an existing SuperLink at HOST:PORT instead of starting one"),
    ] = None,
    root_certificates: Annotated[
        Path | None,
        path_option(
            "--root-certificates",
            help="with --superlink: CA certificate of a TLS SuperLink (default: insecure)",
        ),
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
    per_device: Annotated[
        bool,
        typer.Option(
            "--per-device", help="hand every message to the ClientApp alone (no cohort execution)"
        ),
    ] = False,
    cohort_threads: Annotated[
        int,
        typer.Option(
            min=0,
            help="threads for a cohort's sigma-hat passes (default 0: one per usable CPU core)",
        ),
    ] = 0,
    out: Out = DEFAULT_RESULTS,
) -> int:
    """One run in this process: the real ServerApp and ClientApp, no Ray, no network."""
    from experiments.run import inprocess

    return inprocess.main(inprocess.InProcessOptions(**ctx.params), started_as(ctx))


@app.command("compare")
def compare_command(
    ctx: typer.Context,
    policies: Annotated[
        str, typer.Option(help="comma-separated policies")
    ] = "fedcgd-fscd,fedcgd-gs,bc,bn2,poc,fedcbs,all",
    seeds: Annotated[
        str | None,
        typer.Option(
            help="comma-separated run seeds, e.g. 0,1,2,3,4 (default: the run config's seed, 0)",
        ),
    ] = None,
    run_config: Annotated[str, typer.Option(help="run-config overrides shared by every run")] = "",
    aggregators: Annotated[
        str | None,
        typer.Option(
            help="comma-separated aggregators, one comparison each into <out>/aggregator=<name> "
            "(default = the scheduler's FedAvg; e.g. default,FedMedian,FedTrimmedAvg)",
        ),
    ] = None,
    channels: Annotated[
        str | None,
        typer.Option(
            help="comma-separated channel.model values, one comparison each into "
            "<out>/channel=<name> (e.g. paper,examples.rayleigh_channel:RayleighChannel)",
        ),
    ] = None,
    out: Annotated[Path, path_option("--out", help="output folder")] = Path("results/compare"),
    num_supernodes: int | None = None,
    target_accuracy: float | None = None,
    engine: Annotated[
        str,
        choice_option(
            ("simulation", "deployment", "inprocess"),
            "simulation (flwr run, Ray), deployment (SuperNode processes) or inprocess "
            "(one process, no Ray: same results, fastest for small models)",
        ),
    ] = "simulation",
    jobs: Annotated[
        int,
        typer.Option(
            help="inprocess runs going at once, each a task of a Ray of this machine with its "
            "output in <run folder>/run.log (0: one per usable CPU core)",
        ),
    ] = 1,
    ray_address: Annotated[
        str | None,
        typer.Option(
            envvar="RAY_ADDRESS",
            help="run the runs as Ray tasks on this cluster (auto or HOST:PORT; default: "
            "$RAY_ADDRESS), each the in-process engine",
        ),
    ] = None,
    cpus_per_run: Annotated[float, typer.Option(help="with Ray: CPUs a run takes")] = 1.0,
    gpus_per_run: Annotated[
        float, typer.Option(help="GPUs a run takes (a fraction shares one; > 0: Ray)")
    ] = 0.0,
) -> int:
    """Several policies on the same settings and seeds, compared (the paper's Table II)."""
    from experiments.compare import policies as compare

    command = fedcgd_command([*subcommand(ctx), *given_options(ctx)])
    return compare.main(compare.CompareOptions(**ctx.params), command)


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
    mean: Annotated[
        bool,
        typer.Option(
            "--mean",
            help="group the runs by policy and the settings other than the seed that differ: a "
            "mean curve per group and, from two runs on, its 95 % confidence band",
        ),
    ] = False,
    bands: Annotated[
        bool, typer.Option("--bands/--no-bands", help="with --mean: draw the 95 % bands")
    ] = True,
) -> int:
    """Accuracy, scheduled devices and WEMD per round of runs, from their result folders."""
    from experiments.analysis import plot_runs

    return plot_runs.main(result_dirs, out, mean, bands)


@app.command("indicator")
def indicator_command(
    folders: Annotated[
        list[Path], typer.Argument(help="folders of comparisons or presets (their runs.csv)")
    ],
    out: Annotated[
        Path, path_option("--out", help="folder for indicator.csv and indicator_test.csv")
    ] = DEFAULT_RESULTS / "indicator",
    early_rounds: Annotated[
        int, typer.Option(min=1, help="Ĝ/σ̂ of FedCGD-FSCD averaged over rounds 1..N")
    ] = 50,
    late_fraction: Annotated[
        float,
        typer.Option(
            click_type=click.FloatRange(0, 1, min_open=True),
            help="the FedCGD-FSCD − BC accuracy gap averaged over this last fraction",
        ),
    ] = 0.2,
) -> None:
    """Does early Ĝ/σ̂ predict the later FedCGD-FSCD − BC gap? Spearman over the settings' means."""
    from experiments.compare.results import indicator_from_folders

    try:
        line = indicator_from_folders(folders, out, early_rounds, late_fraction)
    except ValueError as err:
        refuse(str(err))
    print(line)
    print(f"wrote {out / 'indicator.csv'} and {out / 'indicator_test.csv'}")


@app.command("runs")
def runs_command(
    folder: Annotated[
        Path,
        typer.Argument(
            help="a results folder, a comparison or a preset (every run below it)",
            show_default="results/",
        ),
    ] = DEFAULT_RESULTS,
) -> None:
    """List the runs under a folder, oldest first: policy, aggregator, seed, rounds, status."""
    from server_app.run_folder.run_status import runs_table

    try:
        print(runs_table(folder))
    except ValueError as err:
        refuse(str(err))
