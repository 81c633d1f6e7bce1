"""What the ``fedcgd`` commands share: the Typer apps, checked paths, one-line refusals, options."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import typer

from experiments.run.resume_command import StartedAs


class CheckedPath(click.ParamType):
    """A path option a run config can hold (:func:`fedcgd_config.setting.check_path_names`)."""

    name = "path"

    def __init__(self, folder: bool = False) -> None:
        self.folder = folder  # True: an existing path must be a folder

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        """``value`` as a Path, or a usage error naming the option."""
        from fedcgd_config.setting import check_path_names

        if isinstance(value, Path):
            return value
        option = param.opts[0] if param is not None else "path"
        try:
            path = Path(check_path_names(str(value), option, label=option))
        except ValueError as err:
            self.fail(str(err), param, ctx)
        if self.folder and path.exists() and not path.is_dir():
            self.fail(f"{option} = {str(value)!r} is a file; allowed: a folder (made if missing)")
        return path


def path_option(*names: str, help: str, folder: bool = False, **kwargs: Any) -> Any:
    """A ``typer.Option`` of a checked path (:class:`CheckedPath`; ``folder``: not a file)."""
    return typer.Option(*names, click_type=CheckedPath(folder), help=help, **kwargs)


def choice_option(choices: Sequence[str], help: str) -> Any:
    """A ``typer.Option`` that takes one of ``choices``."""
    return typer.Option(click_type=click.Choice(list(choices)), help=help)


def flag(name: str, help: str) -> Any:
    """A ``typer.Option`` of the flag ``name`` alone (no ``--no-`` form)."""
    return typer.Option(name, help=help)


def tool(name: str, help: str) -> typer.Typer:
    """A command-line tool: ``-h`` / ``--help``, its help without arguments, plain tracebacks."""
    return typer.Typer(
        name=name,
        help=help,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )


app = tool("fedcgd", "FedCGD on Flower: runs, comparisons, paper presets and figures.")
paper = typer.Typer(
    help="The paper's figures and tables that need no training.", no_args_is_help=True
)
app.add_typer(paper, name="paper")


def subcommand(ctx: click.Context) -> tuple[str, ...]:
    """The words that name ``ctx``'s command below the program (``("paper", "schedule-table")``)."""
    return tuple(ctx.command_path.split()[1:])


def given_options(
    ctx: click.Context, skip: Sequence[str] = (), only: Sequence[str] | None = None
) -> list[str]:
    """The options of ``ctx`` not at their defaults as words (``--out x``, ``--no-x``)."""
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
        values: list[Any] = list(value or ()) if param.multiple else [value]
        for each in values:
            words += [param.opts[0], str(each)]
    return words


def started_as(ctx: click.Context) -> StartedAs:
    """How a single run's command was started (its continue line: ``resume_command``)."""
    return StartedAs(
        subcommand(ctx),
        tuple(given_options(ctx, skip=("run_config", "out"))),
        tuple(given_options(ctx, only=("out",))),
    )


def given_fields(ctx: click.Context, cls: Any) -> dict[str, Any]:
    """The options of ``ctx`` that are fields of dataclass ``cls``, given (not None)."""
    names = {field.name for field in dataclasses.fields(cls)}
    return {k: v for k, v in ctx.params.items() if k in names and v is not None}


def refuse(message: str) -> None:
    """Refuse the command before it starts: one line ``error: <message>``, exit code 2."""
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(2)


def numbers(text: str, kind: type[int] | type[float], option: str) -> list[Any]:
    """The comma-separated numbers of ``option`` (``16,32,64``); refused in one line if not."""
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values:
        refuse(f"{option} = {text!r}; allowed: comma-separated {kind.__name__} values")
    return values
