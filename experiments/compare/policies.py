"""Run several scheduling policies on the same settings and seeds and compare them.

What it writes (``runs.csv``, ``table.csv``, ``curves.png``), which runs it keeps, its exit codes
and ``--aggregators``: docs/comparing.md, "Comparing policies". The work is in
:mod:`experiments.compare.plans`, :mod:`experiments.compare.execution` and
:mod:`experiments.compare.results`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from experiments.compare.execution import run_policies
from experiments.compare.plans import (
    check_comparison,
    check_plans_before_start,
    check_policies,
    parse_seeds,
    plan_runs,
)
from experiments.run.ray_runs import connect, ray_settings
from experiments.run.resume_command import LastWords, rerun_line
from experiments.run.run_config import parse_run_config_text, validated_run_config
from fedcgd_strategy.policies.registry import canonical_policy
from server_app.run_folder.files import ResultWriteError
from server_app.run_folder.folder_lock import FolderClaim, claim_folder
from server_app.run_folder.signals import exit_code_stopping_on_signals


@dataclass(frozen=True)
class CompareOptions:
    """The options of ``fedcgd compare`` (their defaults: :mod:`experiments.cli.runs`)."""

    policies: str
    seeds: str | None
    run_config: str
    aggregators: str | None
    out: Path
    num_supernodes: int | None
    target_accuracy: float | None
    engine: str
    jobs: int
    ray_address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    channels: str | None = None


def main(options: CompareOptions, command: str | None = None) -> int:
    """``fedcgd compare`` stopping on signals (``command``: the line a stopped one gives)."""
    last_words = LastWords()
    if options.aggregators is not None or options.channels is not None:
        return exit_code_stopping_on_signals(
            lambda: compare_aggregators(options, command, last_words), last_words
        )
    return exit_code_stopping_on_signals(lambda: compare(options, command, last_words), last_words)


#: The ``--aggregators`` name of the scheduler's FedAvg (run-config ``aggregator = ""``).
DEFAULT_AGGREGATOR_NAME = "default"


def aggregator_comparisons(args: CompareOptions) -> list[CompareOptions]:
    """One comparison's options per value of ``--aggregators`` or ``--channels``, all validated.

    Each goes into ``<out>/aggregator=<name>`` or ``<out>/channel=<name>`` (a class path as its
    class name). Raises ValueError (one line).
    """
    if args.aggregators is not None and args.channels is not None:
        raise ValueError("give --aggregators or --channels, not both")
    option, key, given = (
        ("--aggregators", "aggregator", args.aggregators)
        if args.aggregators is not None
        else ("--channels", "channel.model", args.channels)
    )
    names = [a.strip() for a in str(given).split(",") if a.strip()]
    if not names:
        raise ValueError(f"{option} is empty; allowed: comma-separated {option[2:]}")
    shared = parse_run_config_text(args.run_config)
    if key in shared:
        raise ValueError(f"give the {option[2:]} with {option}, not run-config {key!r}")
    out = args.out.resolve()
    comparisons = []
    for name in names:
        value = "" if key == "aggregator" and name == DEFAULT_AGGREGATOR_NAME else name
        validated_run_config({**shared, key: value})
        text = f'{args.run_config} {key}="{value}"'.strip()
        shown = name.rsplit(":", 1)[-1] if key == "channel.model" else name
        folder = out / f"{key.split('.')[0]}={re.sub(r'[^A-Za-z0-9._-]', '_', shown)}"
        each = replace(args, run_config=text, out=folder, aggregators=None, channels=None)
        comparisons.append(each)
    return comparisons


def compare_aggregators(
    args: CompareOptions, command: str | None = None, last_words: LastWords | None = None
) -> int:
    """:func:`compare` per aggregator or channel (all validated first); the worst code."""
    try:
        comparisons = aggregator_comparisons(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"output folder: {args.out.resolve()}", flush=True)
    if command is not None and last_words is not None:
        last_words.set(lambda: rerun_line(command))
    codes = []
    for i, each in enumerate(comparisons, 1):
        print(f"== {i}/{len(comparisons)}: {each.out.name} ==", flush=True)
        codes.append(compare(each))
    if 1 in codes and command is not None:  # a run failed (another comparison may be refused)
        print(rerun_line(command), file=sys.stderr, flush=True)
    return max(codes)


def run_command(
    check: Callable[[list[FolderClaim]], Callable[[], int]],
    out: Path,
    command: str | None = None,
    last_words: LastWords | None = None,
) -> int:
    """A comparison's or a preset's command: check everything, then run; the exit code.

    ``check`` plans and checks every run before any starts (appending the folder claims it
    takes) and returns what runs them; a ValueError or FileNotFoundError it raises is the one
    line ``error: ...`` and exit code 2. Then the first line names ``out`` and, after a
    failure (exit code 1: a run, or writing a table) or a signal (also one while checking,
    e.g. during Ray's start), the last line gives ``command`` to run again.
    """
    claims: list[FolderClaim] = []
    if command is not None and last_words is not None:  # a signal while checking: Ray's start
        last_words.set(lambda: rerun_line(command))
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


def compare(
    args: CompareOptions, command: str | None = None, last_words: LastWords | None = None
) -> int:
    """Validate and plan every run, run them, write the tables; the exit code (0, 1 or 2).

    See :func:`run_command` for the first and last lines.
    """
    policies = [canonical_policy(p.strip()) for p in args.policies.split(",") if p.strip()]
    out = args.out.resolve()

    def check(claims: list[FolderClaim]) -> Callable[[], int]:
        check_policies(policies)
        shared = parse_run_config_text(args.run_config)
        if args.seeds is not None and "seed" in shared:
            raise ValueError("give either --seeds or run-config 'seed', not both")
        given = parse_seeds(args.seeds) if args.seeds is not None else [shared.pop("seed", 0)]
        seeds, jobs = check_comparison(policies, shared, given, args.engine, args.jobs)
        claims.append(claim_folder(out, "--out"))  # one comparison in a folder at a time
        plans = plan_runs(policies, shared, out, seeds)
        check_plans_before_start(plans)
        ray = ray_settings(
            args.ray_address, args.cpus_per_run, args.gpus_per_run, engine=args.engine,
            jobs=args.jobs, prefix="--",
        )  # fmt: skip
        if ray is not None:
            connect(ray, prefix="--")

        def go() -> int:
            result = run_policies(
                policies,
                shared,
                out,
                seeds=seeds,
                target_accuracy=args.target_accuracy,
                num_supernodes=args.num_supernodes,
                engine=args.engine,
                plans=plans,
                jobs=jobs,
                ray=ray,
            )
            print(result.last_line(), file=sys.stderr if result.code else sys.stdout, flush=True)
            return result.code

        return go

    return run_command(check, out, command, last_words)
