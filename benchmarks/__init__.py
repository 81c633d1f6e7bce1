"""Benchmarks, one module per measured claim (docs/performance.md), run from the checkout.

``python -m benchmarks <name> [OPTIONS]``: each module registers its command on :data:`app`.
They sit above the installed package (nothing there imports them).
"""

from collections.abc import Sequence

import typer

app = typer.Typer(
    name="benchmarks",
    help="Benchmarks (docs/performance.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def main(argv: Sequence[str]) -> int:
    """``python -m benchmarks <argv>`` in this process, with the ``fedcgd`` tool's exit codes."""
    from benchmarks import checkpoint, client, inprocess, round, scale, solvers  # noqa: F401
    from experiments.cli import invoke

    return invoke(argv, app, "python -m benchmarks")
