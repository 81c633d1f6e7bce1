"""``fedcgd``: the project's command-line tool (the console script of pyproject.toml).

One Typer app with a subcommand for each thing users do: ``run`` (one run with ``flwr run``),
``inprocess`` (one run in this process), ``compare`` (policies over seeds), ``reproduce`` (a
paper preset, Hydra ``key=value`` overrides), ``plot``, ``certificates``, ``channel-report``,
``ray-cluster run|check``, ``paper ...`` and ``bench ...``. Each command declares its options
here and calls the function that does the work; the modules hold no option parsing.
``fedcgd --help`` lists them; ``fedcgd COMMAND --help`` gives each one's options.

Exit codes: 0 done, 1 failed, 2 refused before anything started (a bad option or setting: one
line ``error: ...`` on stderr), 130 / 143 stopped by SIGINT / SIGTERM. :func:`main` is the
console script (nothing it started outlives it); :func:`invoke` runs a command line in this
process (tests).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import click
import typer

from experiments.run.resume_command import StartedAs, fedcgd_command
from fedcgd_task.settings import PROJECT_DIR

app = typer.Typer(
    name="fedcgd",
    help="FedCGD on Flower: runs, comparisons, paper presets, figures and benchmarks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class CheckedPath(click.ParamType):
    """A path option whose name can be printed on one line and written to a run config.

    The checks of a run-config path (:func:`fedcgd_task.settings.check_path_names`): a control
    character or a name that is not UTF-8 is refused before anything starts.
    """

    name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        """``value`` as a Path, or a usage error naming the option."""
        from fedcgd_task.settings import check_path_names

        if isinstance(value, Path):
            return value
        option = param.opts[0] if param is not None else "path"
        try:
            return Path(check_path_names(str(value), option, label=option))
        except ValueError as err:
            self.fail(str(err), param, ctx)


def path_option(*names: str, help: str, **kwargs: Any) -> Any:
    """A ``typer.Option`` of a checked path (:class:`CheckedPath`)."""
    return typer.Option(*names, click_type=CheckedPath(), help=help, **kwargs)


#: ``--out`` of a single run by default: the project's ``results/``.
DEFAULT_RESULTS = PROJECT_DIR / "results"

RUN_CONFIG_HELP = (
    "run-config overrides, e.g. \"policy='bc' num-server-rounds=5\" (keys of pyproject.toml's "
    "\\[tool.flwr.app.config], docs/running.md)"
)
OUT_HELP = (
    "folder for the run's result folder <policy>-<UTC time> (ignored when the run config sets "
    "result-dir or resume-from)"
)


def _subcommand(ctx: click.Context) -> tuple[str, ...]:
    """The words that name ``ctx``'s command below the program (``("bench", "round")``)."""
    names: list[str] = []
    while ctx.parent is not None:
        names.insert(0, str(ctx.info_name))
        ctx = ctx.parent
    return tuple(names)


def given_options(
    ctx: click.Context, skip: Sequence[str] = (), only: Sequence[str] | None = None
) -> list[str]:
    """The options of ``ctx`` whose values differ from their defaults, as command-line words.

    Read from click's public parameters: a flag as its name when set (its ``--no-`` name when
    cleared against a true default), an option with a value as its first name and the value
    (``--out results/x``). Parameters named in ``skip`` are left out; with ``only``, all but
    those named there.
    """
    words: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if not isinstance(param, click.Option) or name is None or name in skip:
            continue
        if only is not None and name not in only:
            continue
        value = ctx.params.get(name)
        default = param.get_default(ctx)
        if default is not None:
            default = param.type_cast_value(ctx, default)
        if value == default:
            continue
        if param.is_flag:
            if value:
                words.append(param.opts[0])
            elif param.secondary_opts:
                words.append(param.secondary_opts[0])
            continue
        values = value if param.multiple else [value]
        for each in values:
            words += [param.opts[0], str(each)]
    return words


def started_as(ctx: click.Context) -> StartedAs:
    """How a single run's command was started (its continue line: ``resume_command``)."""
    return StartedAs(
        _subcommand(ctx),
        tuple(given_options(ctx, skip=("run_config", "out"))),
        tuple(given_options(ctx, only=("out",))),
    )


def _done(code: int | None) -> None:
    """End the command with exit code ``code`` (0 when None)."""
    raise typer.Exit(code or 0)


@app.command("run")
def run_command(
    ctx: typer.Context,
    run_config: Annotated[str, typer.Option("--run-config", help=RUN_CONFIG_HELP)] = "",
    num_supernodes: Annotated[
        int | None, typer.Option("--num-supernodes", help="default: num-devices")
    ] = None,
    deployment: Annotated[
        bool,
        typer.Option(
            "--deployment",
            help="run SuperNode processes on loopback instead of the simulation engine",
        ),
    ] = False,
    cpus_per_client: Annotated[int, typer.Option("--cpus-per-client")] = 1,
    gpus_per_client: Annotated[float, typer.Option("--gpus-per-client")] = 0.0,
    out: Annotated[
        Path, path_option("--out", "--results", help=OUT_HELP, show_default="results/")
    ] = DEFAULT_RESULTS,
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
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
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
        typer.Option(
            "--superlink", help="run on an existing SuperLink at HOST:PORT instead of starting one"
        ),
    ] = None,
    root_certificates: Annotated[
        Path | None,
        path_option(
            "--root-certificates",
            help="with --superlink: CA certificate of a TLS SuperLink (default: insecure)",
        ),
    ] = None,
) -> None:
    """One run with `flwr run` on a SuperLink of its own (simulation, or --deployment)."""
    from experiments.run import launcher

    params = dict(ctx.params)
    params["ray_address"] = params["ray_address"] or None  # RAY_ADDRESS="" is unset
    _done(launcher.main(launcher.LaunchOptions(**params), started_as(ctx)))


@app.command("inprocess")
def inprocess_command(
    ctx: typer.Context,
    run_config: Annotated[str, typer.Option("--run-config", help=RUN_CONFIG_HELP)] = "",
    per_device: Annotated[
        bool,
        typer.Option(
            "--per-device", help="hand every message to the ClientApp alone (no cohort execution)"
        ),
    ] = False,
    cohort_threads: Annotated[
        int,
        typer.Option(
            "--cohort-threads",
            min=0,
            help="threads for a cohort's sigma-hat passes (default 0: one per usable CPU core)",
        ),
    ] = 0,
    out: Annotated[
        Path, path_option("--out", "--results", help=OUT_HELP, show_default="results/")
    ] = DEFAULT_RESULTS,
) -> None:
    """One run in this process: the real ServerApp and ClientApp, no Ray, no network."""
    from experiments.run import inprocess

    _done(inprocess.main(inprocess.InProcessOptions(**ctx.params), started_as(ctx)))


ENGINE_CHOICE = click.Choice(["simulation", "deployment", "inprocess"])


@app.command("compare")
def compare_command(
    ctx: typer.Context,
    policies: Annotated[
        str, typer.Option("--policies", help="comma-separated policies")
    ] = "fedcgd-fscd,fedcgd-gs,bc,bn2,poc,fedcbs,all",
    seeds: Annotated[
        str | None,
        typer.Option(
            "--seeds",
            help="comma-separated run seeds, e.g. 0,1,2,3,4 (default: the run config's seed, 0)",
        ),
    ] = None,
    run_config: Annotated[
        str, typer.Option("--run-config", help="run-config overrides shared by every run")
    ] = "",
    aggregators: Annotated[
        str | None,
        typer.Option(
            "--aggregators",
            help="comma-separated aggregators, one comparison each into <out>/aggregator=<name> "
            "(default = the scheduler's FedAvg; e.g. default,FedMedian,FedTrimmedAvg)",
        ),
    ] = None,
    out: Annotated[Path, path_option("--out", help="output folder")] = Path("results/compare"),
    num_supernodes: Annotated[int | None, typer.Option("--num-supernodes")] = None,
    target_accuracy: Annotated[float | None, typer.Option("--target-accuracy")] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            click_type=ENGINE_CHOICE,
            help="simulation (flwr run, Ray), deployment (SuperNode processes) or inprocess "
            "(one process, no Ray: same results, fastest for small models)",
        ),
    ] = "simulation",
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            help="inprocess runs going at once, each in its own process with its output in "
            "<run folder>/run.log (0: one per usable CPU core)",
        ),
    ] = 1,
) -> None:
    """Several policies on the same settings and seeds, compared (the paper's Table II)."""
    from experiments.compare import policies as compare

    command = fedcgd_command([*_subcommand(ctx), *given_options(ctx)])
    _done(compare.main(compare.CompareOptions(**ctx.params), command))


@app.command(
    "reproduce",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
def reproduce_command(
    overrides: Annotated[list[str] | None, typer.Argument(metavar="[KEY=VALUE]...")] = None,
) -> None:
    r"""A table or figure of the paper from a preset of conf/experiment/.

    KEY=VALUE are Hydra overrides of conf/config.yaml, e.g. experiment=mnist1d_dirichlet
    'seeds=\[0,1,2]' run.num-server-rounds=3 launcher.engine=inprocess (docs/comparing.md).
    """
    from experiments.compare import reproduce

    _done(reproduce.main(list(overrides or [])))


@app.command("plot")
def plot_command(
    result_dirs: Annotated[list[Path], typer.Argument(help="result folders of runs")],
    out: Annotated[Path, typer.Option("--out", help="the figure (PNG)")] = Path(
        "results/curves.png"
    ),
    mean: Annotated[
        bool,
        typer.Option(
            "--mean",
            help="group the runs by policy: mean curve per policy and, from two runs on, its "
            "95 % confidence band",
        ),
    ] = False,
) -> None:
    """Accuracy, scheduled devices and WEMD per round of runs, from their result folders."""
    from experiments.analysis import plot_runs

    _done(plot_runs.main(result_dirs, out, mean))


@app.command("certificates")
def certificates_command(
    out: Annotated[Path, path_option("--out", help="folder for the set")] = Path("certificates"),
    supernodes: Annotated[int, typer.Option("--supernodes", help="SuperNode key pairs")] = 4,
    host: Annotated[
        list[str] | None,
        typer.Option("--host", help="extra SuperLink name (repeatable, e.g. the compose service)"),
    ] = None,
) -> None:
    """TLS certificates and SuperNode keys for a deployment (docs/deployment.md)."""
    from experiments.run import certificates

    _done(certificates.main(out, supernodes, host or ()))


def _given(values: dict[str, Any]) -> dict[str, Any]:
    """The options given (not None): the others keep their dataclass defaults."""
    return {k: v for k, v in values.items() if v is not None}


@app.command("channel-report")
def channel_report_command(
    out: Annotated[Path, typer.Option("--out", help="output folder")],
    num_devices: Annotated[int | None, typer.Option("--num-devices", help="V (default 64)")] = None,
    availability_prob: Annotated[
        float | None, typer.Option("--availability-prob", help="p_a (default 0.3)")
    ] = None,
    model_bits: Annotated[
        int | None, typer.Option("--model-bits", help="uploaded model size in bits")
    ] = None,
    model_params: Annotated[
        int | None,
        typer.Option(
            "--model-params",
            help="model parameters, uploaded as 32 bit each (default: the paper's CIFAR-10 CNN, "
            "258,898); give this or --model-bits",
        ),
    ] = None,
    deadline_s: Annotated[
        float | None, typer.Option("--deadline-s", help="upload deadline (default 2 s)")
    ] = None,
    rounds: Annotated[int, typer.Option("--rounds")] = 1000,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    pathloss_model: Annotated[
        str | None,
        typer.Option(
            "--pathloss-model",
            click_type=click.Choice(["paper", "tr38901"]),
            help="default: paper",
        ),
    ] = None,
    total_bandwidth_hz: Annotated[
        float | None, typer.Option("--total-bandwidth-hz", help="default 20 MHz")
    ] = None,
) -> None:
    """The UMi-Street Canyon uplink of a cell: availability, feasibility, bandwidths."""
    from channel.cell import CellConfig
    from channel.report import BITS_PER_PARAM, PAPER_CIFAR10_CNN_PARAMS, format_summary, run_report

    if model_bits is not None and model_params is not None:
        _refuse("give --model-bits or --model-params, not both")
    if model_params is not None and model_params < 1:
        _refuse(f"--model-params must be an integer >= 1, got {model_params}")
    if model_bits is not None and model_bits < 1:
        _refuse(f"--model-bits must be an integer >= 1, got {model_bits}")
    if model_bits is None:
        model_bits = (model_params or PAPER_CIFAR10_CNN_PARAMS) * BITS_PER_PARAM
    cell = {
        "num_devices": num_devices,
        "availability_prob": availability_prob,
        "deadline_s": deadline_s,
        "pathloss_model": pathloss_model,
        "total_bandwidth_hz": total_bandwidth_hz,
    }
    try:
        summary = run_report(CellConfig(**_given(cell)), model_bits, rounds, seed, out)
    except ValueError as err:
        _refuse(str(err))
    print(format_summary(summary))
    print(f"wrote {out / 'summary.json'} and {out / 'channel.png'}")


def _refuse(message: str) -> None:
    """Refuse the command before it starts: one line ``error: <message>``, exit code 2."""
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(2)


ray_cluster = typer.Typer(
    help="A Ray cluster of several nodes on loopback (docs/deployment.md, needs a network "
    "namespace with loopback only).",
    no_args_is_help=True,
)
app.add_typer(ray_cluster, name="ray-cluster")


@ray_cluster.command("run")
def ray_cluster_run_command(
    command: Annotated[
        list[str] | None, typer.Argument(help="the command to run, after --", metavar="-- COMMAND")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="worker nodes besides the head")] = 1,
    cpus_per_node: Annotated[int, typer.Option("--cpus-per-node")] = 1,
    object_store_mb: Annotated[int, typer.Option("--object-store-mb")] = 200,
    temp_dir: Annotated[
        Path | None, typer.Option("--temp-dir", help="default: a fresh folder")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="seconds to start the cluster")
    ] = 120.0,
) -> None:
    """Start a head and worker nodes, run the command with RAY_ADDRESS set, stop the cluster."""
    from experiments.run import ray_cluster as cluster

    _done(cluster.main(command or [], workers, cpus_per_node, object_store_mb, temp_dir, timeout))


@ray_cluster.command("check")
def ray_cluster_check_command(
    result_dir: Annotated[Path, typer.Option("--result-dir", help="the run's result folder")],
    num_devices: Annotated[int, typer.Option("--num-devices")] = 4,
    rounds: Annotated[int, typer.Option("--rounds")] = 2,
    cpus_per_client: Annotated[int, typer.Option("--cpus-per-client")] = 1,
    flwr_home: Annotated[Path | None, typer.Option("--flwr-home")] = None,
) -> None:
    """A small simulation on the cluster at RAY_ADDRESS: 0 when it ran on every node."""
    from experiments.run import ray_cluster_check

    _done(ray_cluster_check.main(result_dir, num_devices, rounds, cpus_per_client, flwr_home))


def _numbers(text: str, kind: type[int] | type[float], option: str) -> list[Any]:
    """The comma-separated numbers of ``option`` (``16,32,64``); refused in one line if not."""
    try:
        numbers = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        numbers = []
    if not numbers:
        _refuse(f"{option} = {text!r}; allowed: comma-separated {kind.__name__} values")
    return numbers


paper = typer.Typer(
    help="The paper's figures and tables that need no training.", no_args_is_help=True
)
app.add_typer(paper, name="paper")


@paper.command("solver-performance")
def solver_performance_command(
    out: Annotated[Path, typer.Option("--out")] = Path("results/solver_performance"),
    instances: Annotated[
        int, typer.Option("--instances", min=1, help="instances per (V, alpha)")
    ] = 1,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    num_devices: Annotated[str, typer.Option("--num-devices", help="values of V")] = (
        "16,24,32,40,48,56,64"
    ),
    alphas: Annotated[str, typer.Option("--alphas", help="Dirichlet alphas")] = "0.1,1,10",
    ratios: Annotated[
        str, typer.Option("--ratios", help="values of sigma / (sqrt(b) G)")
    ] = "0.1,0.3,1,3,10",
    milp_time_limit_s: Annotated[
        float,
        typer.Option(
            "--milp-time-limit-s", help="time limit per MILP of the exact solver (<= 0: none)"
        ),
    ] = 0.2,
    docs_png: Annotated[
        str,
        typer.Option(
            "--docs-png",
            help="also write the figure here (e.g. docs/img/solver_performance.png to refresh "
            "the copy in docs/evidence.md); default: only under --out",
        ),
    ] = "",
) -> None:
    """The paper's figure "Performance of proposed algorithms": P1 solvers' iterations, error."""
    from experiments.paper import solver_performance

    options = solver_performance.Options(
        out,
        instances,
        seed,
        _numbers(num_devices, int, "--num-devices"),
        _numbers(alphas, float, "--alphas"),
        _numbers(ratios, float, "--ratios"),
        milp_time_limit_s,
        docs_png,
    )
    _done(solver_performance.main(options))


@paper.command("schedule-table")
def schedule_table_command(
    drops: Annotated[int | None, typer.Option("--drops", help="drops (seeds); default 20")] = None,
    rounds: Annotated[
        int | None, typer.Option("--rounds", help="rounds per drop; default 50")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="base seed; default 0")] = None,
    sigma_over_sqrt_b_g: Annotated[
        float | None,
        typer.Option(
            "--sigma-over-sqrt-b-g",
            help="FedCGD's sigma-hat / (sqrt(b) G-hat), fixed (no training here); default 1",
        ),
    ] = None,
    poc_candidates: Annotated[
        int | None,
        typer.Option("--poc-candidates", help="POC's V' (0 = all available, the default)"),
    ] = None,
    fit_poc: Annotated[
        bool,
        typer.Option(
            "--fit-poc", help="scan V' = 1..--fit-max, pick the one nearest the paper's 13.71"
        ),
    ] = False,
    fit_max: Annotated[int, typer.Option("--fit-max", min=1, help="largest V' of --fit-poc")] = 30,
    label_dist: Annotated[
        str | None,
        typer.Option(
            "--label-dist",
            click_type=click.Choice(["batch", "local"]),
            help="p_v: histogram of the round's tau*b labels (batch, the default), or the shard",
        ),
    ] = None,
    num_devices: Annotated[
        int | None, typer.Option("--num-devices", help="V (default: the paper's)")
    ] = None,
    local_steps: Annotated[
        int | None, typer.Option("--local-steps", help="tau (default: the paper's)")
    ] = None,
    pack_rule: Annotated[
        str | None,
        typer.Option(
            "--pack-rule", click_type=click.Choice(["stop", "skip"]), help="best effort (stop)"
        ),
    ] = None,
    policies: Annotated[
        str | None,
        typer.Option("--policies", help="comma-separated policies (Table II's by default)"),
    ] = None,
    out: Annotated[Path, typer.Option("--out")] = Path("results/schedule_table"),
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress on stderr")] = False,
) -> None:
    """The paper's Table II: scheduled number and WEMD of each policy, without training."""
    from experiments.paper import schedule_table
    from experiments.paper.schedule_simulation import TableSettings

    given = {
        "drops": drops,
        "rounds": rounds,
        "seed": seed,
        "sigma_over_sqrt_b_g": sigma_over_sqrt_b_g,
        "poc_candidates": poc_candidates,
        "label_dist": label_dist,
        "num_devices": num_devices,
        "local_steps": local_steps,
        "pack_rule": pack_rule,
    }
    try:
        settings = TableSettings(**_given(given))
    except ValueError as err:
        _refuse(str(err))
    text = policies if policies is not None else ",".join(schedule_table.TABLE_POLICIES)
    fit = fit_max if fit_poc else None
    _done(schedule_table.main(settings, text, out, fit_poc_max=fit, quiet=quiet))


bench = typer.Typer(help="Benchmarks (docs/performance.md).", no_args_is_help=True)
app.add_typer(bench, name="bench")

ROUNDS_HELP = "rounds per run (>= 2: round 1 is left out of the timings)"


@bench.command("solvers")
def bench_solvers_command(
    out: Annotated[Path, typer.Option("--out")] = Path("results/bench_solvers"),
    instances: Annotated[int, typer.Option("--instances", min=1)] = 3,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    num_devices: Annotated[str, typer.Option("--num-devices")] = "16,32,64,128",
    speedup_devices: Annotated[int, typer.Option("--speedup-devices")] = 64,
    speedup_instances: Annotated[int, typer.Option("--speedup-instances", min=1)] = 3,
    milp_time_limit_s: Annotated[float, typer.Option("--milp-time-limit-s")] = 0.5,
) -> None:
    """Time the P1 solvers; vectorised against loop implementations."""
    from experiments.bench import solvers

    options = solvers.Options(
        out, instances, seed, num_devices, speedup_devices, speedup_instances, milp_time_limit_s
    )
    _done(solvers.main(options))


@bench.command("fscd-scale")
def bench_fscd_scale_command(
    out: Annotated[Path, typer.Option("--out")] = Path("results/bench_fscd_scale"),
    num_devices: Annotated[str, typer.Option("--num-devices")] = "1000,3000",
    instances: Annotated[int, typer.Option("--instances", min=1)] = 5,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    ratio: Annotated[float, typer.Option("--ratio", help="sigma / (sqrt(b) G)")] = 1.0,
    single_thread_dense: Annotated[
        bool,
        typer.Option(
            "--single-thread-dense",
            help="run the dense solver with BLAS on one thread too (the incremental one always "
            "does)",
        ),
    ] = False,
) -> None:
    """Time dense against incremental FSCD at scale."""
    from experiments.bench import fscd_scale

    options = fscd_scale.Options(out, num_devices, instances, seed, ratio, single_thread_dense)
    _done(fscd_scale.main(options))


@bench.command("scale")
def bench_scale_command(
    devices: Annotated[str, typer.Option("--devices", help="values of V")] = "1000,10000",
    rounds: Annotated[
        int, typer.Option("--rounds", min=3, help="rounds per run (>= 3: rounds 2..R are timed)")
    ] = 4,
    samples: Annotated[int, typer.Option("--samples", help="mnist1d-samples")] = 200_000,
    per_device: Annotated[bool, typer.Option("--per-device", help="also time cohorts off")] = False,
    compare_with: Annotated[
        Path | None, typer.Option("--compare-with", help="another checkout")
    ] = None,
    out: Annotated[Path, typer.Option("--out")] = Path("results/bench-scale"),
) -> None:
    """In-process rounds at scale: seconds per phase and memory."""
    from experiments.bench import scale

    sizes = _numbers(devices, int, "--devices")
    _done(scale.main(scale.Options(sizes, rounds, samples, per_device, compare_with, out)))


@bench.command("checkpoint")
def bench_checkpoint_command(
    repeats: Annotated[int, typer.Option("--repeats", min=1)] = 3,
    rounds: Annotated[int, typer.Option("--rounds", min=2, help="rounds of each run")] = 50,
    out: Annotated[Path, typer.Option("--out")] = Path("results/bench_checkpoint"),
) -> None:
    """What writing a checkpoint every round costs."""
    from experiments.bench import checkpoint

    _done(checkpoint.main(out, repeats, rounds))


@bench.command("inprocess")
def bench_inprocess_command(
    rounds: Annotated[int, typer.Option("--rounds", min=2, help=ROUNDS_HELP)] = 20,
    seed: Annotated[int, typer.Option("--seed", help="run seed")] = 0,
    out: Annotated[Path, typer.Option("--out")] = Path("results/bench-inprocess"),
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="runs per checkout")] = 3,
    local_steps: Annotated[int, typer.Option("--local-steps", help="tau")] = 5,
    policy: Annotated[str, typer.Option("--policy")] = "fedcgd-fscd",
    deadline_s: Annotated[float, typer.Option("--deadline-s", help="channel.deadline-s")] = 0.02,
    compare_with: Annotated[
        Path | None,
        typer.Option(
            "--compare-with",
            help="another checkout of the project, timed beside this one (e.g. a git worktree)",
        ),
    ] = None,
) -> None:
    """Seconds per round: the in-process engine against its arithmetic in a bare loop."""
    from experiments.bench import inprocess

    options = inprocess.Options(
        rounds, seed, out, repeats, local_steps, policy, deadline_s, compare_with
    )
    _done(inprocess.main(options))


@bench.command("round")
def bench_round_command(
    rounds: Annotated[int, typer.Option("--rounds", min=2, help=ROUNDS_HELP)] = 5,
    seed: Annotated[int, typer.Option("--seed", help="run seed")] = 0,
    out: Annotated[Path, typer.Option("--out")] = Path("results/bench_round"),
    threads: Annotated[
        int, typer.Option("--threads", min=1, help="torch threads of the plain process")
    ] = 2,
    policies: Annotated[str, typer.Option("--policies")] = "fedcgd-fscd,bc",
) -> None:
    """Seconds per round: flwr run against the same computation in one plain process."""
    from experiments.bench import round as bench_round

    _done(bench_round.main(bench_round.Options(rounds, seed, out, threads, policies)))


@bench.command("client")
def bench_client_command(
    repeats: Annotated[
        int, typer.Option("--repeats", min=1, help="timed calls after warm-up")
    ] = 10,
    vmap_repeats: Annotated[
        int, typer.Option("--vmap-repeats", min=1, help="timed calls of the slow vmap sigma-hat")
    ] = 3,
    threads: Annotated[int, typer.Option("--threads", min=1, help="torch intra-op threads")] = 1,
) -> None:
    """The ClientApp's handlers and sigma-hat against one SGD step."""
    from client_app import benchmark

    _done(benchmark.main(repeats, vmap_repeats, threads))


def _one_line(err: click.ClickException) -> str:
    """A click error as one line ``error: ...`` (with the command's help option to read)."""
    message = " ".join(err.format_message().split())
    ctx = getattr(err, "ctx", None)
    hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
    return f"error: {message}{hint}"


def invoke(argv: Sequence[str]) -> int:
    """Run the command line ``fedcgd <argv>`` in this process; its exit code.

    A usage error (an unknown option, a value of the wrong type) is one line ``error: ...``
    on stderr and exit code 2, as a setting the command refuses.
    """
    command = typer.main.get_command(app)
    try:
        code = command.main(args=list(argv), prog_name="fedcgd", standalone_mode=False)
    except click.ClickException as err:
        print(_one_line(err), file=sys.stderr)
        return err.exit_code
    except click.Abort:
        return 1
    return int(code or 0)


def main() -> int | None:
    """The console script ``fedcgd``: :func:`invoke` with this process's arguments.

    Nothing the command started outlives it (:func:`experiments.run.processes.run_as_command`).
    """
    from experiments.run.processes import run_as_command

    return run_as_command(lambda: invoke(sys.argv[1:]))


if __name__ == "__main__":
    raise SystemExit(main())
