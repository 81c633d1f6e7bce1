"""``fedcgd compare``: policies on the same settings and seeds (docs/comparing.md)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from experiments.compare.execution import launch_settings, run_points
from experiments.compare.plans import check_comparison, plan_points
from experiments.run.resume_command import rerun_line
from experiments.run.run_config import parse_run_config_text
from fedcgd_strategy.policies.registry import canonical_policy
from server_app.run_folder.files import ResultWriteError, exit_code_stopping_on_signals
from server_app.run_folder.folder_lock import FolderClaim

#: The ``--aggregators`` name of the scheduler's FedAvg (run-config ``aggregator = ""``).
DEFAULT_AGGREGATOR_NAME = "default"


def option_points(
    aggregators: str | None, channels: str | None, shared: dict[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    """``("", shared)``, or per ``--aggregators`` / ``--channels`` value its folder and settings."""
    if aggregators is not None and channels is not None:
        raise ValueError("give --aggregators or --channels, not both")
    option, key, given = (
        ("--aggregators", "aggregator", aggregators)
        if channels is None
        else ("--channels", "channel.model", channels)
    )
    if given is None:
        return [("", shared)]
    names = [a.strip() for a in given.split(",") if a.strip()]
    if not names:
        raise ValueError(f"{option} is empty; allowed: comma-separated {option[2:]}")
    if key in shared:
        raise ValueError(f"give the {option[2:]} with {option}, not run-config {key!r}")
    points = []
    for name in names:
        value = "" if key == "aggregator" and name == DEFAULT_AGGREGATOR_NAME else name
        shown = name.rsplit(":", 1)[-1] if key == "channel.model" else name
        label = f"{key.split('.')[0]}={re.sub(r'[^A-Za-z0-9._-]', '_', shown)}"
        points.append((label, {**shared, key: value}))
    return points


def run_command(
    check: Callable[[list[FolderClaim]], Callable[[], int]], out: Path, command: str | None = None
) -> int:
    """``check`` everything (refused: exit code 2), then run; the exit code and, after a failure
    or a signal, a last line with ``command`` to run again."""  # noqa: D205, D209

    def checked_then_run() -> int:
        claims: list[FolderClaim] = []
        try:
            go = check(claims)
        except BaseException as err:  # the folders it created go with it; a bad setting: one line
            for claim in reversed(claims):
                claim.abandon()
            if not isinstance(err, ValueError | FileNotFoundError):
                raise
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"output folder: {out}", flush=True)
        try:
            code = go()
        except ResultWriteError as err:  # a table or a figure: disk full, ...
            print(f"failed: {err}", file=sys.stderr, flush=True)
            code = 1
        finally:
            for claim in claims:
                claim.release()
        if code == 1 and command is not None:
            print(rerun_line(command), file=sys.stderr, flush=True)
        return code

    last_words = None if command is None else lambda: rerun_line(command)
    return exit_code_stopping_on_signals(checked_then_run, last_words)


def compare(args: Mapping[str, Any], command: str | None = None) -> int:
    """Validate and plan every run, run them, write the tables; the exit code (0, 1 or 2)."""
    policies = [canonical_policy(p.strip()) for p in args["policies"].split(",") if p.strip()]
    out = args["out"].resolve()

    def check(claims: list[FolderClaim]) -> Callable[[], int]:
        shared = parse_run_config_text(args["run_config"])
        if args["seeds"] is not None and "seed" in shared:
            raise ValueError("give either --seeds or run-config 'seed', not both")
        given = args["seeds"] if args["seeds"] is not None else [shared.pop("seed", 0)]
        variants = option_points(args["aggregators"], args["channels"], shared)
        seeds = [check_comparison(policies, s, given) for _, s in variants].pop()
        points = plan_points(policies, variants, seeds, out, claims, "--out")
        ray = (args["ray_address"], args["cpus_per_run"], args["gpus_per_run"])
        how = launch_settings(
            args["engine"], args["jobs"], ray, "--", num_supernodes=args["num_supernodes"]
        )
        return lambda: run_points(points, out, how, args["target_accuracy"]).report()

    return run_command(check, out, command)
