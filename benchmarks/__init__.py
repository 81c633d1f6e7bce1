"""``python -m benchmarks <name>``: one module per measured claim (docs/performance.md)."""

from collections.abc import Sequence

from experiments.cli.options import tool

app = tool("benchmarks", "Benchmarks (docs/performance.md).")


def main(argv: Sequence[str]) -> int:
    """``python -m benchmarks <argv>`` in this process, with the ``fedcgd`` tool's exit codes."""
    from benchmarks import checkpoint, client, inprocess, round, scale, solvers  # noqa: F401
    from experiments.cli import invoke

    return invoke(argv, app, "python -m benchmarks")
