"""``fedcgd``: the project's command-line tool, one Typer app (:mod:`experiments.cli.options`).

Exit codes: 0 done, 1 failed, 2 refused before the start (one line ``error: ...``), 130 / 143
stopped by SIGINT / SIGTERM.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
import typer

# the modules whose commands register themselves (imported for that)
from experiments.cli import runs, tools  # noqa: F401
from experiments.cli.options import app


def invoke(argv: Sequence[str], tool: typer.Typer = app, prog: str = "fedcgd") -> int:
    """Run ``<prog> <argv>`` of ``tool`` in this process; its exit code (a usage error: 2)."""
    command = typer.main.get_command(tool)
    try:
        code = command.main(args=list(argv), prog_name=prog, standalone_mode=False)
    except click.ClickException as err:  # one line, naming the command's help
        ctx = getattr(err, "ctx", None)
        hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        print(f"error: {' '.join(err.format_message().split())}{hint}", file=sys.stderr)
        return err.exit_code
    except click.Abort:
        return 1
    return int(code or 0)


def main() -> int:
    """The console script ``fedcgd``: :func:`invoke` with this process's arguments."""
    return invoke(sys.argv[1:])
