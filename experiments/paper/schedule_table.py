"""``fedcgd paper schedule-table``: Table II's scheduled number and WEMD without training.

How: docs/evidence.md, "Table II without CIFAR or a GPU".
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from experiments.analysis.tables import write_csv
from experiments.paper.schedule_simulation import (
    POC_TARGET_SCHEDULED,
    PolicySpec,
    TableSettings,
    choose_poc_candidates,
    fit_poc,
    simulate,
)
from experiments.run.progress import step_reporter
from fedcgd_strategy.policies import POLICY_NAMES

#: The paper's Table II (CIFAR-10, l = 1, r = 1, τ = 1: the only setting the table reports):
#: policy -> (name in the paper, avg. scheduled number, avg. WEMD), in the printed order.
PAPER_TABLE_II: dict[str, tuple[str, float, float]] = {
    "fedcgd-fscd-gc": ("FedCGD-FSCD-Gc", 10.10, 0.310),
    "fedcgd-fscd": ("FedCGD-FSCD", 10.20, 0.306),
    "fedcgd-gs": ("FedCGD-GS", 10.01, 0.311),
    "bc": ("BC", 17.67, 0.527),
    "bn2": ("BN", 17.39, 0.537),
    "poc": ("POC", 13.71, 0.621),
    "fedcbs": ("FCBS", 17.34, 0.536),
}
#: Policies of Table II, in the order of the printed table.
TABLE_POLICIES: tuple[str, ...] = tuple(PAPER_TABLE_II)
#: Columns of ``table.csv``.
TABLE_COLUMNS: tuple[str, ...] = (
    "policy", "paper_name", "mean_scheduled", "scheduled_ci95", "paper_scheduled", "mean_wemd",
    "wemd_ci95", "paper_wemd", "empty_rounds", "drops", "rounds", "poc_candidates",
    "sigma_over_sqrt_b_g", "label_dist",
)  # fmt: skip


def _ci(mean: float, ci: float, digits: int) -> str:
    return f"{mean:.{digits}f} ± " + (f"{ci:.{digits}f}" if math.isfinite(ci) else "n/a")


def _bars(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Bar chart: ours (with 95 % CI) beside the paper, scheduled number and WEMD."""
    from experiments.analysis.plot_runs import plt, save_figure

    x = np.arange(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    titles = {"scheduled": "Avg. scheduled number", "wemd": "Avg. WEMD"}
    for ax, (key, title) in zip(axes, titles.items(), strict=True):
        err = np.nan_to_num([float(r[f"{key}_ci95"]) for r in rows])
        ax.bar(x - 0.2, [r[f"mean_{key}"] for r in rows], 0.4, yerr=err, capsize=3,
               label="ours (95 % CI)")  # fmt: skip
        ax.bar(x + 0.2, [r[f"paper_{key}"] for r in rows], 0.4, label="paper Table II")
        ax.set_xticks(x, [r["policy"] for r in rows], rotation=30, ha="right")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    save_figure(fig, path)


def _fit_plot(rows: Sequence[Mapping[str, float]], chosen: int, path: Path) -> None:
    """POC's mean scheduled number against V', with the paper's 13.71 and the chosen V'."""
    from experiments.analysis.figures import POLICY_COLORS, count_ticks
    from experiments.analysis.plot_runs import plt, save_figure

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(
        [r["poc_candidates"] for r in rows],
        [r["mean_scheduled"] for r in rows],
        yerr=np.nan_to_num([r["scheduled_ci95"] for r in rows]),
        marker="o", ms=3, capsize=2, color=POLICY_COLORS["poc"], label="POC (95 % CI)",
    )  # fmt: skip
    ax.axhline(POC_TARGET_SCHEDULED, color="0.2", ls="--", label="paper POC 13.71")
    ax.axvline(chosen, color="0.5", ls=":", label=f"chosen V' = {chosen}")
    count_ticks(ax.xaxis, 0.0)  # V': a number of devices
    ax.set(xlabel="V' (POC candidates)", ylabel="avg. scheduled number")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def main(
    settings: TableSettings,
    policies_text: str,
    out: Path,
    *,
    fit_poc_max: int | None = None,
    quiet: bool = False,
) -> int:
    """``fedcgd paper schedule-table``: simulate, print the table and write the files.

    ``fit_poc_max``: scan POC's V' = 1..it first and use the one nearest the paper's 13.71.
    """
    policies = [p.strip() for p in policies_text.split(",") if p.strip()]
    if unknown := [p for p in policies if p not in POLICY_NAMES]:
        print(f"error: unknown policies {unknown}; allowed: {', '.join(POLICY_NAMES)}",
              file=sys.stderr)  # fmt: skip
        return 2
    out.mkdir(parents=True, exist_ok=True)
    if fit_poc_max is not None:
        fit = fit_poc(settings, fit_poc_max, None if quiet else step_reporter("fit: drop"))
        chosen = choose_poc_candidates(
            [int(r["poc_candidates"]) for r in fit], [r["mean_scheduled"] for r in fit]
        )
        print(f"POC V' scan (target: the paper's {POC_TARGET_SCHEDULED} scheduled)")
        for point in fit:
            mark = "  <- chosen" if point["poc_candidates"] == chosen else ""
            print(f"  V' = {point['poc_candidates']:>2}: "
                  f"{_ci(point['mean_scheduled'], point['scheduled_ci95'], 2)}{mark}")  # fmt: skip
        write_csv(out / "poc_fit.csv", fit)
        _fit_plot(fit, chosen, out / "poc_fit.png")
        settings = replace(settings, poc_candidates=chosen)
    specs = [PolicySpec(p, p, settings.poc_candidates if p == "poc" else 0) for p in policies]
    results = simulate(settings, specs, None if quiet else step_reporter("table: drop"))
    fields = asdict(settings)
    rows: list[dict[str, Any]] = []
    for policy, stats in results.items():
        name, scheduled, wemd = PAPER_TABLE_II.get(policy, (policy, math.nan, math.nan))
        row: dict[str, object] = {"policy": policy, "paper_name": name, **stats.summary()}
        row.update(paper_scheduled=scheduled, paper_wemd=wemd, empty_rounds=stats.empty_rounds)
        rows.append({k: row.get(k, fields.get(k)) for k in TABLE_COLUMNS})
    print(
        f"Table II (CIFAR-10, l = 1, r = 1, tau = {settings.local_steps}): {settings.drops} drops"
        f" x {settings.rounds} rounds, sigma/(sqrt(b) G) = {settings.sigma_over_sqrt_b_g}, POC "
        f"V' = {settings.poc_candidates or 'all available'}, p_v = {settings.label_dist}"
    )
    print(
        f"{'policy':<16} {'scheduled (ours)':>18} {'paper':>7}   {'WEMD (ours)':>15} {'paper':>7}"
    )
    for r in rows:
        print(
            f"{r['policy']:<16} {_ci(r['mean_scheduled'], r['scheduled_ci95'], 2):>18} "
            f"{r['paper_scheduled']:>7.2f}   {_ci(r['mean_wemd'], r['wemd_ci95'], 3):>15} "
            f"{r['paper_wemd']:>7.3f}"
        )
    write_csv(out / "table.csv", rows, TABLE_COLUMNS)
    _bars(rows, out / "table.png")
    print(f"wrote {out / 'table.csv'} and {out / 'table.png'}")
    return 0
