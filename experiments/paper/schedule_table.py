"""Table II's "scheduled number" and "WEMD" columns from labels and the channel alone.

``fedcgd paper schedule-table``: every policy is built and called as the Flower strategy calls
it, on the same drops and draws, without images or training (docs/evidence.md, "Table II without
CIFAR or a GPU"). The simulation is :mod:`experiments.paper.schedule_simulation`, the table and
plots :mod:`experiments.paper.schedule_report`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from experiments.analysis.tables import write_csv
from experiments.paper.schedule_report import (
    FIT_COLUMNS,
    TABLE_COLUMNS,
    format_fit,
    format_table,
    number,
    plot_fit,
    plot_table,
    table_rows,
)
from experiments.paper.schedule_simulation import (
    PolicySpec,
    TableSettings,
    choose_poc_candidates,
    fit_poc,
    simulate,
)
from experiments.run.progress import step_reporter
from fedcgd_strategy.policies import POLICY_NAMES

#: Policies of Table II, in the order of the printed table.
TABLE_POLICIES: tuple[str, ...] = (
    "fedcgd-fscd-gc",
    "fedcgd-fscd",
    "fedcgd-gs",
    "bc",
    "bn2",
    "poc",
    "fedcbs",
)


def _progress_printer(prefix: str) -> Callable[[int, int], None]:
    return step_reporter(f"{prefix}: drop")


def main(
    settings: TableSettings,
    policies_text: str,
    out: Path,
    *,
    fit_poc_max: int | None = None,
    quiet: bool = False,
) -> int:
    """``fedcgd paper schedule-table``: simulate, print the table and write the files.

    ``policies_text`` is comma-separated (Table II's by default); ``fit_poc_max`` scans POC's
    V' = 1..it first and uses the one nearest the paper's 13.71. Exit code 2 with one line
    for an unknown policy.
    """
    policies = [p.strip() for p in policies_text.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown:
        print(
            f"error: unknown policies {unknown}; allowed: {', '.join(POLICY_NAMES)}",
            file=sys.stderr,
        )
        return 2
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    written: list[Path] = []
    if fit_poc_max is not None:
        fit_rows = fit_poc(settings, fit_poc_max, None if quiet else _progress_printer("fit"))
        chosen = choose_poc_candidates(
            [int(number(r["poc_candidates"])) for r in fit_rows],
            [number(r["mean_scheduled"]) for r in fit_rows],
        )
        print(format_fit(fit_rows, chosen))
        write_csv(out / "poc_fit.csv", fit_rows, FIT_COLUMNS)
        plot_fit(fit_rows, chosen, out / "poc_fit.png")
        written += [out / "poc_fit.csv", out / "poc_fit.png"]
        settings = replace(settings, poc_candidates=chosen)
    specs = [PolicySpec(p, p, settings.poc_candidates if p == "poc" else 0) for p in policies]
    results = simulate(settings, specs, None if quiet else _progress_printer("table"))
    rows = table_rows(settings, results)
    elapsed = time.perf_counter() - start
    print(
        f"Table II (CIFAR-10, l = 1, r = 1, tau = {settings.local_steps}): "
        f"{settings.drops} drops x {settings.rounds} rounds, "
        f"sigma/(sqrt(b) G) = {settings.sigma_over_sqrt_b_g}, "
        f"POC V' = {settings.poc_candidates or 'all available'}, p_v = {settings.label_dist}"
    )
    print(format_table(rows))
    write_csv(out / "table.csv", rows, TABLE_COLUMNS)
    plot_table(rows, out / "table.png")
    written += [out / "table.csv", out / "table.png"]
    print(f"{elapsed:.1f} s; wrote " + ", ".join(map(str, written)))
    return 0
