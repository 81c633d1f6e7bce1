"""The ``fedcgd`` tools around runs: ``certificates``, ``channel-report``, ``settings``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from experiments.cli.options import choice_option, done, not_none, path_option, refuse
from fedcgd_task.schema import PATHLOSS_MODELS


def certificates_command(
    out: Annotated[Path, path_option("--out", help="folder for the set")] = Path("certificates"),
    supernodes: Annotated[int, typer.Option(help="SuperNode key pairs")] = 4,
    host: Annotated[
        list[str] | None,
        typer.Option(help="extra SuperLink name (repeatable, e.g. the compose service)"),
    ] = None,
) -> None:
    """TLS certificates and SuperNode keys for a deployment (docs/deployment.md)."""
    from experiments.run import certificates

    done(certificates.main(out, supernodes, host or ()))


def channel_report_command(
    out: Annotated[Path, typer.Option(help="output folder")],
    num_devices: Annotated[int | None, typer.Option(help="V (default 64)")] = None,
    availability_prob: Annotated[float | None, typer.Option(help="p_a (default 0.3)")] = None,
    model_bits: Annotated[
        int | None, typer.Option(min=1, help="uploaded model size in bits")
    ] = None,
    model_params: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="model parameters, uploaded as 32 bit each (default: the paper's CIFAR-10 CNN, "
            "258,898); give this or --model-bits",
        ),
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
    cell = {
        "num_devices": num_devices,
        "availability_prob": availability_prob,
        "deadline_s": deadline_s,
        "pathloss_model": pathloss_model,
        "total_bandwidth_hz": total_bandwidth_hz,
    }
    try:
        summary = run_report(CellConfig(**not_none(cell)), model_bits, rounds, seed, out)
    except ValueError as err:
        refuse(str(err))
    print(format_summary(summary))
    print(f"wrote {out / 'summary.json'} and {out / 'channel.png'}")


def settings_command(
    keys: Annotated[
        list[str] | None, typer.Argument(help="keys to explain in full (default: every key)")
    ] = None,
    markdown: Annotated[
        bool, typer.Option(help="the settings table of docs/running.md, in Markdown")
    ] = False,
) -> None:
    """Every run-config key with its default and what is allowed (KEY ...: what it means)."""
    from fedcgd_task.schema import (
        SCHEMA,
        meaning,
        settings_lines,
        settings_table,
        toml_text,
        unknown_key,
    )

    if markdown:
        typer.echo(settings_table(), nl=False)
        return
    if not keys:
        typer.echo(settings_lines(), nl=False)
        return
    for key in keys:
        if key not in SCHEMA:
            refuse(unknown_key(key))
        setting = SCHEMA[key]
        typer.echo(f"{key} = {toml_text(setting.default)}")
        typer.echo(f"  allowed: {setting.allowed()}")
        typer.echo(f"  {meaning(setting)}")
