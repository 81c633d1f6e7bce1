"""The report of Table II's simulation: table rows beside :data:`PAPER_TABLE_II`, text and plots."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from experiments.analysis.statistics import mean_ci95
from experiments.paper.schedule_simulation import POC_TARGET_SCHEDULED, PolicyStats, TableSettings

#: The paper's Table II (CIFAR-10, l = 1, r = 1, τ = 1: the only setting the table reports):
#: policy -> (name in the paper, avg. scheduled number, avg. WEMD).
PAPER_TABLE_II: dict[str, tuple[str, float, float]] = {
    "fedcgd-fscd-gc": ("FedCGD-FSCD-Gc", 10.10, 0.310),
    "fedcgd-fscd": ("FedCGD-FSCD", 10.20, 0.306),
    "fedcgd-gs": ("FedCGD-GS", 10.01, 0.311),
    "bc": ("BC", 17.67, 0.527),
    "bn2": ("BN", 17.39, 0.537),
    "poc": ("POC", 13.71, 0.621),
    "fedcbs": ("FCBS", 17.34, 0.536),
}

#: Columns of ``table.csv``.
TABLE_COLUMNS: tuple[str, ...] = (
    "policy",
    "paper_name",
    "mean_scheduled",
    "scheduled_ci95",
    "paper_scheduled",
    "mean_wemd",
    "wemd_ci95",
    "paper_wemd",
    "empty_rounds",
    "drops",
    "rounds",
    "poc_candidates",
    "sigma_over_sqrt_b_g",
    "label_dist",
)
#: Columns of ``poc_fit.csv``.
FIT_COLUMNS: tuple[str, ...] = ("poc_candidates", "mean_scheduled", "scheduled_ci95", "mean_wemd")


def table_rows(
    settings: TableSettings, results: Mapping[str, PolicyStats]
) -> list[dict[str, object]]:
    """Rows of ``table.csv`` (our means ± CI beside the paper's Table II values)."""
    rows: list[dict[str, object]] = []
    for policy, result in results.items():
        sched, sched_ci = mean_ci95(result.scheduled)
        wemd, wemd_ci = mean_ci95(result.wemd)
        paper_name, paper_sched, paper_wemd = PAPER_TABLE_II.get(
            policy, (policy, float("nan"), float("nan"))
        )
        rows.append(
            {
                "policy": policy,
                "paper_name": paper_name,
                "mean_scheduled": sched,
                "scheduled_ci95": sched_ci,
                "paper_scheduled": paper_sched,
                "mean_wemd": wemd,
                "wemd_ci95": wemd_ci,
                "paper_wemd": paper_wemd,
                "empty_rounds": result.empty_rounds,
                "drops": settings.drops,
                "rounds": settings.rounds,
                "poc_candidates": settings.poc_candidates,
                "sigma_over_sqrt_b_g": settings.sigma_over_sqrt_b_g,
                "label_dist": settings.label_dist,
            }
        )
    return rows


def number(value: object) -> float:
    """A table cell as a float (cells are ints, floats or numpy scalars).

    Raises
    ------
    TypeError
        For anything else (e.g. a policy name).

    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def plot_table(rows: Sequence[Mapping[str, object]], path: Path) -> None:
    """Bar chart: ours (with 95 % CI) beside the paper, scheduled number and WEMD."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [str(r["policy"]) for r in rows]
    x = np.arange(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in (
        (axes[0], "scheduled", "Avg. scheduled number"),
        (axes[1], "wemd", "Avg. WEMD"),
    ):
        ours = [number(r[f"mean_{key}"]) for r in rows]
        err = [number(r[f"{key}_ci95"]) for r in rows]
        paper = [number(r[f"paper_{key}"]) for r in rows]
        err = [0.0 if not math.isfinite(e) else e for e in err]
        ax.bar(x - 0.2, ours, 0.4, yerr=err, capsize=3, label="ours (95 % CI)")
        ax.bar(x + 0.2, paper, 0.4, label="paper Table II")
        ax.set_xticks(x, names, rotation=30, ha="right")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_fit(rows: Sequence[Mapping[str, object]], chosen: int, path: Path) -> None:
    """POC's mean scheduled number against V', with the paper's 13.71 and the chosen V'."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.analysis.figures import POLICY_COLORS, count_ticks

    v = [int(number(r["poc_candidates"])) for r in rows]
    m = [number(r["mean_scheduled"]) for r in rows]
    ci = [number(r["scheduled_ci95"]) for r in rows]
    ci = [0.0 if not math.isfinite(c) else c for c in ci]
    fig, ax = plt.subplots(figsize=(6, 4))
    poc = POLICY_COLORS["poc"]  # POC's colour in every figure
    ax.errorbar(v, m, yerr=ci, marker="o", ms=3, capsize=2, color=poc, label="POC (95 % CI)")
    ax.axhline(POC_TARGET_SCHEDULED, color="0.2", ls="--", label="paper POC 13.71")
    ax.axvline(chosen, color="0.5", ls=":", label=f"chosen V' = {chosen}")
    count_ticks(ax.xaxis, 0.0)  # V': a number of devices
    ax.set_xlabel("V' (POC candidates)")
    ax.set_ylabel("avg. scheduled number")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(mean: object, ci: object, digits: int) -> str:
    m, c = number(mean), number(ci)
    ci_text = f"{c:.{digits}f}" if math.isfinite(c) else "n/a"
    return f"{m:.{digits}f} ± {ci_text}"


def format_table(rows: Sequence[Mapping[str, object]]) -> str:
    """The printed table: policy, ours ± CI and the paper's value for both columns."""
    head = (
        f"{'policy':<16} {'scheduled (ours)':>18} {'paper':>7}   {'WEMD (ours)':>15} {'paper':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['policy']!s:<16} {_fmt(r['mean_scheduled'], r['scheduled_ci95'], 2):>18} "
            f"{number(r['paper_scheduled']):>7.2f}   "
            f"{_fmt(r['mean_wemd'], r['wemd_ci95'], 3):>15} "
            f"{number(r['paper_wemd']):>7.3f}"
        )
    return "\n".join(lines)


def format_fit(rows: Sequence[Mapping[str, object]], chosen: int) -> str:
    """The printed V' scan of ``--fit-poc``: one line per V', the chosen one marked."""
    lines = [f"POC V' scan (target: paper's {POC_TARGET_SCHEDULED} scheduled)"]
    for r in rows:
        mark = "  <- chosen" if r["poc_candidates"] == chosen else ""
        lines.append(
            f"  V' = {r['poc_candidates']!s:>2}: "
            f"{_fmt(r['mean_scheduled'], r['scheduled_ci95'], 2)}{mark}"
        )
    lines.append(f"chosen V' = {chosen}")
    return "\n".join(lines)
