"""The figures of a preset's reproduction: σ̂ and Ĝ per round (``estimates.png``), ``sweep.png``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.analysis import figures
from experiments.analysis.plot_runs import draw_panels, plt, save_figure


def point_label(point: Mapping[str, Any]) -> str:
    """Folder name of a sweep point, e.g. ``local-steps=5`` (``default`` for no sweep)."""
    return ",".join(f"{k}={v}" for k, v in point.items()) or "default"


def plot_estimates(groups: Mapping[tuple[str, str], Sequence[Path]], out: Path) -> Path:
    """σ̂ and Ĝ per round of each (sweep label, policy) group of FedCGD runs, smoothed."""
    labels = list(dict.fromkeys(label for label, _ in groups))
    fedcgd = [(lb, p) for lb, p in groups if p.startswith("fedcgd")]
    order = figures.policy_order(p for _, p in fedcgd)
    drawn = sorted(fedcgd, key=lambda g: (order.index(g[1]), labels.index(g[0])))
    return draw_panels(
        [
            (figures.policy_name(p) + ("" if lb == "default" else f", {lb}"), list(groups[(lb, p)]))
            for lb, p in drawn
        ],
        figures.series_styles([p for _, p in drawn], [lb for lb, _ in drawn]),
        out,
        titles={
            "sigma": "σ̂: spread of the sampled gradients (paper's global σ estimate)",
            "class_gradient_used": "Ĝ: class-gradient bound FedCGD uses in the WEMD term",
        },
    )


def plot_sweep(
    rows: list[dict[str, Any]],
    sweep: Mapping[str, list[Any]],
    metrics: list[str],
    out: Path,
    title: str = "",
) -> Path | None:
    """``sweep.png``: each metric's mean over seeds ± 95 % CI against the swept key's values.

    One panel per metric, one line per policy (``table.csv`` rows with a ``sweep`` label); bars
    from two seeds on, clipped to the metric's range; rounds to the target: the Kaplan–Meier
    median. None unless one key is swept.
    """
    if len(sweep) != 1 or not metrics:
        return None
    ((key, values),) = sweep.items()
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(5.6 * len(metrics), 4.7), squeeze=False, constrained_layout=True
    )
    policies = figures.policy_order(r["policy"] for r in rows)
    for ax, name in zip(axes[0], metrics, strict=True):
        km = name == "rounds_to_target"
        columns = (
            "rounds_to_target_km_median" if km else f"{name}_mean",
            f"{name}_ci95",
            "n_seeds",
        )
        for policy, style in zip(policies, figures.series_styles(policies), strict=True):
            by_label = {r["sweep"]: r for r in rows if r["policy"] == policy}
            cells = [
                [by_label.get(point_label({key: v}), {}).get(c) for v in values] for c in columns
            ]
            mean, ci, seeds = np.array(cells, dtype=float)  # None: NaN
            mean[np.isinf(mean)] = np.nan  # under half of the runs reached the target
            ci = np.where(seeds >= figures.MIN_RUNS_FOR_BAND, np.nan_to_num(ci), 0.0)
            clip = figures.metric(name).clip
            ax.errorbar(
                range(len(values)),
                mean,
                yerr=np.nan_to_num([mean - clip(mean - ci), clip(mean + ci) - mean]),
                marker="o",
                capsize=3,
                label=figures.policy_name(policy),
                **style,
            )
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        figures.label_axis(ax, name, xlabel=key, x_count=False)
        ax.set_title(
            "Kaplan–Meier median over seeds (none: under half reached it)"
            if km
            else "mean over seeds; bars: 95 % CI (Student t)",
            fontsize=10,
        )
    figures.legend_below(fig, axes[0][0])
    if title:
        fig.suptitle(title)
    return save_figure(fig, out)
