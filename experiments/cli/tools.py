"""The ``fedcgd`` commands other than runs: tools and paper figures without training."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import tomli_w
import typer

from experiments.cli.options import (
    app,
    choice_option,
    flag,
    given_fields,
    numbers,
    paper,
    path_option,
    refuse,
)
from fedcgd_config.schema import PACK_RULES, PATHLOSS_MODELS, SETTINGS
from fedcgd_config.setting import Scalar, Setting


@app.command("certificates")
def certificates_command(
    out: Annotated[Path, path_option("--out", help="folder for the set")] = Path("certificates"),
    supernodes: Annotated[int, typer.Option(min=0, help="SuperNode key pairs")] = 4,
    host: Annotated[
        list[str] | None, typer.Option(help="extra SuperLink name (repeatable)")
    ] = None,
) -> None:
    """TLS certificates and SuperNode keys for a deployment (docs/deployment.md)."""
    from experiments.run.certificates import make_certificates

    try:
        made = make_certificates(out, supernodes=supernodes, hosts=tuple(host or ()))
    except ValueError as err:
        refuse(str(err))
    print(f"wrote {made.ca_cert}, {made.server_cert}, {len(made.supernode_keys)} SuperNode keys")


@app.command("channel-report")
def channel_report_command(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="output folder")],
    num_devices: Annotated[int | None, typer.Option(help="V (default 64)")] = None,
    availability_prob: Annotated[float | None, typer.Option(help="p_a (default 0.3)")] = None,
    model_bits: Annotated[int | None, typer.Option(min=1, help="uploaded bits")] = None,
    model_params: Annotated[
        int | None, typer.Option(min=1, help="parameters of 32 bit (default: the paper's CNN)")
    ] = None,
    deadline_s: Annotated[float | None, typer.Option(help="upload deadline (default 2 s)")] = None,
    rounds: int = 1000,
    seed: int = 0,
    pathloss_model: Annotated[str | None, choice_option(PATHLOSS_MODELS, "default: paper")] = None,
    total_bandwidth_hz: Annotated[float | None, typer.Option(help="default 20 MHz")] = None,
) -> None:
    """The UMi-Street Canyon uplink of a cell: availability, feasibility, bandwidths."""
    from channel.cell import CellConfig
    from channel.report import BITS_PER_PARAM, PAPER_CIFAR10_CNN_PARAMS, format_summary, run_report

    if model_bits is not None and model_params is not None:
        refuse("give --model-bits or --model-params, not both")
    if model_bits is None:
        model_bits = (model_params or PAPER_CIFAR10_CNN_PARAMS) * BITS_PER_PARAM
    try:
        summary = run_report(
            CellConfig(**given_fields(ctx, CellConfig)), model_bits, rounds, seed, out
        )
    except ValueError as err:
        refuse(str(err))
    print(format_summary(summary))
    print(f"wrote {out / 'summary.json'} and {out / 'channel.png'}")


@app.command("settings")
def settings_command(
    keys: Annotated[list[str] | None, typer.Argument(help="keys to explain in full")] = None,
    markdown: Annotated[bool, typer.Option(help="docs/running.md's table")] = False,
) -> None:
    """Every run-config key with its default and what is allowed (KEY ...: what it means)."""
    from fedcgd_config.schema import SCHEMA, unknown_key

    if markdown or not keys:
        typer.echo(settings_table() if markdown else settings_lines(), nl=False)
        return
    for key in keys:
        if key not in SCHEMA:
            refuse(unknown_key(key))
        setting = SCHEMA[key]
        typer.echo(f"{key} = {toml_text(setting.default)}")
        typer.echo(f"  allowed: {setting.allowed()}")
        typer.echo(f"  {meaning(setting)}")


@paper.command("solver-performance")
def solver_performance_command(
    out: Path = Path("results/solver_performance"),
    instances: Annotated[int, typer.Option(min=1, help="instances per (V, alpha)")] = 1,
    seed: int = 0,
    num_devices: Annotated[str, typer.Option(help="values of V")] = "16,24,32,40,48,56,64",
    alphas: Annotated[str, typer.Option(help="Dirichlet alphas")] = "0.1,1,10",
    ratios: Annotated[str, typer.Option(help="values of sigma / (sqrt(b) G)")] = "0.1,0.3,1,3,10",
    milp_time_limit_s: Annotated[float, typer.Option(help="per MILP (<= 0: none)")] = 0.2,
    docs_png: Annotated[str, typer.Option(help="also write the figure here")] = "",
) -> int:
    """The paper's figure "Performance of proposed algorithms": P1 solvers' iterations, error."""
    from experiments.paper import solver_performance

    sizes = numbers(num_devices, int, "--num-devices")
    values = numbers(alphas, float, "--alphas"), numbers(ratios, float, "--ratios")
    return solver_performance.main(
        out, instances, seed, sizes, *values, milp_time_limit_s, docs_png
    )


@paper.command("schedule-table")
def schedule_table_command(
    ctx: typer.Context,
    drops: Annotated[int | None, typer.Option(help="drops (seeds); default 20")] = None,
    rounds: Annotated[int | None, typer.Option(help="rounds per drop; default 50")] = None,
    seed: Annotated[int | None, typer.Option(help="base seed; default 0")] = None,
    sigma_over_sqrt_b_g: Annotated[
        float | None, typer.Option(help="sigma-hat / (sqrt(b) G-hat), fixed; default 1")
    ] = None,
    poc_candidates: Annotated[int | None, typer.Option(help="POC's V' (0: all)")] = None,
    fit_poc: Annotated[bool, flag("--fit-poc", "the V' nearest the paper's 13.71")] = False,
    fit_max: Annotated[int, typer.Option(min=1, help="largest V' of --fit-poc")] = 30,
    label_dist: Annotated[str | None, choice_option(("batch", "local"), "p_v's labels")] = None,
    num_devices: Annotated[int | None, typer.Option(help="V (default: the paper's)")] = None,
    local_steps: Annotated[int | None, typer.Option(help="tau (default: the paper's)")] = None,
    pack_rule: Annotated[str | None, choice_option(PACK_RULES, "best effort (stop)")] = None,
    policies: Annotated[str | None, typer.Option(help="comma-separated (Table II's)")] = None,
    out: Path = Path("results/schedule_table"),
    quiet: Annotated[bool, flag("--quiet", "no progress on stderr")] = False,
) -> int:
    """The paper's Table II: scheduled number and WEMD of each policy, without training."""
    from experiments.paper import schedule_table
    from experiments.paper.schedule_table import TableSettings

    try:
        settings = TableSettings(**given_fields(ctx, TableSettings))
    except ValueError as err:
        refuse(str(err))
    text = policies if policies is not None else ",".join(schedule_table.TABLE_POLICIES)
    fit = fit_max if fit_poc else None
    return schedule_table.main(settings, text, out, fit_poc_max=fit, quiet=quiet)


def toml_text(value: Scalar) -> str:
    """A default as a run config writes it: ``true``, ``"digits"``, ``0.012``, ``2e7``."""
    if isinstance(value, float) and abs(value) >= 1e6:
        return f"{value:.4g}".replace("+0", "").replace("+", "")
    return tomli_w.dumps({"v": value})[4:-1]


#: Said of a setting whose ``computes`` is false.
WHERE_OR_HOW = (
    "(where or how a run runs or reports, not what it computes: no folder name or figure label "
    "shows it, and a resumed run may change it)"
)


def meaning(setting: Setting) -> str:
    """The setting's help; for one that does not change what a run computes, saying so."""
    return setting.help if setting.computes else f"{setting.help} {WHERE_OR_HOW}"


def settings_lines() -> str:
    """Every key as ``key = default  (allowed)``, one line each (``fedcgd settings``)."""
    width = max(len(setting.key) for setting in SETTINGS)
    return "".join(
        f"{setting.key:<{width}} = {toml_text(setting.default)}  ({setting.allowed()})\n"
        for setting in SETTINGS
    )


def settings_table() -> str:
    """The settings table of docs/running.md (Markdown), one row per key in schema order."""
    rows = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    for setting in SETTINGS:
        allowed = setting.allowed().replace("|", "\\|")
        shown = toml_text(setting.default)
        shown = f"`{shown}`" if isinstance(setting.default, str) else shown
        rows.append(f"| `{setting.key}` | {shown} | {allowed} | {meaning(setting)} |")
    return "\n".join(rows) + "\n"
