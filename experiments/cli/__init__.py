"""``fedcgd``: the project's command-line tool (the console script of pyproject.toml).

One Typer app with a subcommand for each thing users do (``fedcgd --help``); each declares its
options here and calls the function that does the work. Exit codes: 0 done, 1 failed, 2 refused
before the start (one line ``error: ...``), 130 / 143 stopped by SIGINT / SIGTERM.
:func:`main` is the console script; :func:`invoke` runs a command line in this process (tests).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
import typer

from experiments.bench import checkpoint, inprocess, scale, solvers
from experiments.bench import round as bench_round
from experiments.cli import runs, tools

app = typer.Typer(
    name="fedcgd",
    help="FedCGD on Flower: runs, comparisons, paper presets, figures and benchmarks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("run")(runs.run_command)
app.command("inprocess")(runs.inprocess_command)
app.command("compare")(runs.compare_command)
app.command("reproduce", context_settings={"ignore_unknown_options": True})(runs.reproduce_command)
app.command("plot")(runs.plot_command)
app.command("runs")(runs.runs_command)
app.command("indicator")(runs.indicator_command)
app.command("certificates")(tools.certificates_command)
app.command("channel-report")(tools.channel_report_command)
app.command("settings")(tools.settings_command)

paper = typer.Typer(
    help="The paper's figures and tables that need no training.", no_args_is_help=True
)
paper.command("solver-performance")(tools.solver_performance_command)
paper.command("schedule-table")(tools.schedule_table_command)
app.add_typer(paper, name="paper")

bench = typer.Typer(help="Benchmarks (docs/performance.md).", no_args_is_help=True)
bench.command("solvers")(solvers.main)
bench.command("fscd-scale")(solvers.fscd_scale)
bench.command("scale")(scale.main)
bench.command("checkpoint")(checkpoint.main)
bench.command("inprocess")(inprocess.main)
bench.command("round")(bench_round.main)
bench.command("client")(tools.bench_client_command)
app.add_typer(bench, name="bench")


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


def main() -> int:
    """The console script ``fedcgd``: :func:`invoke` with this process's arguments."""
    return invoke(sys.argv[1:])
