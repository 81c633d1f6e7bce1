"""The ``fedcgd`` tool: its subcommands, its one-line refusals, and the commands the docs give
(each parsed by the tool without running it: a subcommand and options it declares)."""

from __future__ import annotations

import re
import shlex
import subprocess

import click
import pytest
import typer
from subprocesses import FEDCGD
from test_readme_commands import readme_commands

from experiments.cli import app, invoke, tools
from experiments.compare.plans import NOT_SETTABLE

#: The subcommands, as the README lists them (groups with theirs).
COMMANDS = "run inprocess compare reproduce plot runs indicator certificates channel-report"
SUBCOMMANDS = dict.fromkeys([*COMMANDS.split(), "settings"]) | {
    "paper": {"solver-performance", "schedule-table"}
}


def help_commands(*words: str) -> set[str]:
    """The command names ``fedcgd WORDS --help`` lists (the installed script, a process)."""
    done = subprocess.run(
        [FEDCGD, *words, "--help"], capture_output=True, text=True, timeout=120, check=True
    )
    listed = done.stdout.split("Commands", 1)[1]
    return set(re.findall(r"^\W*([a-z][a-z-]*)\s{2,}", listed, flags=re.M))


def test_the_help_lists_every_subcommand():
    assert help_commands() == set(SUBCOMMANDS)
    for group, names in SUBCOMMANDS.items():
        if names is not None:
            assert help_commands(group) == names, group


ROOT = typer.main.get_command(app)


def test_compares_run_config_help_suggests_no_key_it_refuses():
    compare = ROOT.get_command(click.Context(ROOT), "compare")
    [option] = [p for p in compare.params if p.name == "run_config"]
    assert not [key for key in NOT_SETTABLE if f"{key}=" in option.help], option.help


def parse_documented(words: list[str]) -> click.Context:
    """Parse ``fedcgd <words>`` as the tool does, without running it or converting values."""
    ctx = click.Context(ROOT, info_name="fedcgd")
    command: click.Command = ROOT
    args = list(words)
    while isinstance(command, click.Group) and args and not args[0].startswith("-"):
        name = args.pop(0)
        found = command.get_command(ctx, name)
        if found is None:
            raise click.UsageError(f"no subcommand {name!r} in {shlex.join(words)!r}")
        command = found
        ctx = click.Context(command, info_name=name, parent=ctx)
    _, extra, _ = command.make_parser(ctx).parse_args(args)
    if extra and not isinstance(command, click.Group):
        raise click.UsageError(f"unexpected arguments {extra} in {shlex.join(words)!r}")
    return ctx


#: The words that start a ``fedcgd`` command in the docs.
PROGRAMS = ("fedcgd", ".venv/bin/fedcgd")
#: Shell words that end one command.
SEPARATORS = ("&&", "||", ";", "|")


def unbracketed(word: str) -> str:
    """A word of a synopsis without the brackets of an optional part (``[--host NAME]``)."""
    if word.startswith("[-"):
        word = word[1:]
    return word[:-1] if word.endswith("]") and "[" not in word else word


def fedcgd_invocations(command: str) -> list[list[str]]:
    """The ``fedcgd`` commands in a shell command of the docs (also inside ``sh -c '...'``)."""
    found: list[list[str]] = []
    words = [unbracketed(w) for w in shlex.split(command, comments=True)]
    for i, word in enumerate(words):
        if word in PROGRAMS:
            rest = words[i + 1 :]
            cut = [j for j, w in enumerate(rest) if w in SEPARATORS]
            found.append(rest[: cut[0]] if cut else rest)
        elif re.search(r"(^|[\s/])fedcgd\s", word):
            found += fedcgd_invocations(word)
    return found


def documented() -> list[list[str]]:
    commands = [c for c in readme_commands() if re.search(r"(^|[\s/])fedcgd(\s|$)", c)]
    every = [words for c in commands for words in fedcgd_invocations(c)]
    return list({shlex.join(w): w for w in every}.values())


@pytest.mark.parametrize("words", documented(), ids=shlex.join)
def test_every_documented_command_names_a_subcommand_and_its_options(words):
    parse_documented(words)


def test_the_docs_give_fedcgd_commands_and_their_check_fails_on_a_name_the_tool_lacks():
    names = {words[0] for words in documented() if words}
    assert {"run", "inprocess", "compare", "reproduce", "plot", "channel-report"} <= names
    parse_documented(["paper", "schedule-table", "--rounds", "N"])  # a placeholder value passes
    with pytest.raises(click.NoSuchOption):
        parse_documented(["run", "--deployment", "--no-such-option", "1"])
    with pytest.raises(click.UsageError):
        parse_documented(["paper", "no-such-figure"])
    with pytest.raises(click.UsageError):
        parse_documented(["certificates", "--out", "x", "stray"])
    inner = fedcgd_invocations(
        "unshare --net sh -c 'ip link set lo up && exec .venv/bin/fedcgd run "
        '--run-config "num-devices=4"\' && .venv/bin/fedcgd plot'
    )
    assert inner == [["run", "--run-config", "num-devices=4"], ["plot"]]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--no-such-option"], "error: No such option '--no-such-option'"),
        (["inprocess", "--cohort-threads", "-1"], "error: Invalid value for '--cohort-threads'"),
        (["compare", "--engine", "ray"], "error: Invalid value for '--engine'"),
        (["paper", "schedule-table", "--fit-max", "0"], "error: Invalid value for '--fit-max'"),
        (["paper", "solver-performance", "--alphas", "a,b"], "error: --alphas = 'a,b'"),
        (["no-such-command"], "error: No such command 'no-such-command'"),
        (["certificates", "--supernodes", "-1"], "error: Invalid value for '--supernodes': -1"),
        (["run", "--deployment", "--num-supernodes", "-1"], "error: Invalid value for '--num-s"),
        (["run", "--flwr-home", __file__], f"error: Invalid value for '--flwr-home': --flwr-home "
         f"= '{__file__}' is a file; allowed: a folder (made if missing)"),
    ],
)  # fmt: skip
def test_a_usage_error_is_one_line_and_exit_code_2(argv, message, capsys):
    assert invoke(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(message), line


def test_the_script_exits_with_the_commands_code():
    done = subprocess.run(
        [FEDCGD, "plot", "/no/such/run"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr == "error: /no/such/run has no metrics.jsonl; is it a result directory?\n"


def test_ctrl_c_in_any_command_exits_130(monkeypatch):
    # typer turns a KeyboardInterrupt in a command into exit code 130, as SIGINT gives
    def interrupted() -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(tools, "settings_lines", interrupted)
    assert invoke(["settings"]) == 130
