"""The figures of a preset's reproduction: σ̂ and Ĝ per round (``estimates.png``), ``sweep.png``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.analysis.figures import (
    MIN_RUNS_FOR_BAND,
    estimate_styles,
    is_fedcgd,
    label_axis,
    legend_below,
    metric,
    policy_name,
    policy_order,
    series_styles,
)
from experiments.analysis.plot_runs import draw_panels, plt, save_figure

#: ``table.csv``'s summary of rounds to the target drawn in place of a mean (no bars).
KM_COLUMN = "rounds_to_target_km_median"


def point_label(point: Mapping[str, Any]) -> str:
    """Folder name of a sweep point, e.g. ``local-steps=5`` (``default`` for no sweep)."""
    return ",".join(f"{k}={v}" for k, v in point.items()) or "default"


def group_name(label: str, policy: str) -> str:
    """Legend name of a (sweep point, policy) group: ``FedCGD-FSCD, local-steps=5``."""
    name = policy_name(policy)
    return name if label == "default" else f"{name}, {label}"


def plot_estimates(groups: Mapping[tuple[str, str], Sequence[Path]], out: Path) -> Path:
    """σ̂ and Ĝ per round of every (sweep label, policy) group of FedCGD runs (``estimates.png``).

    Each group as :func:`~experiments.analysis.plot_runs.draw_panels` draws it, as moving
    averages once the runs are long enough (single rounds' spikes would set the scale otherwise).
    """
    labels = list(dict.fromkeys(label for label, _ in groups))
    fedcgd = [(lb, p) for lb, p in groups if is_fedcgd(p)]
    order = policy_order(p for _, p in fedcgd)
    drawn = sorted(fedcgd, key=lambda g: (order.index(g[1]), labels.index(g[0])))
    return draw_panels(
        [(group_name(label, policy), list(groups[(label, policy)])) for label, policy in drawn],
        estimate_styles(drawn, labels),
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
    """``sweep.png``: each metric's mean over seeds ± 95 % CI against the one swept key's values.

    One panel per metric, one line per policy (``rows`` of ``table.csv`` with a ``sweep`` label);
    bars from two seeds on, clipped to the metric's range. None unless one key is swept.
    """
    if len(sweep) != 1 or not metrics:
        return None
    ((key, values),) = sweep.items()
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(5.6 * len(metrics), 4.7), squeeze=False, constrained_layout=True
    )
    labels = [point_label({key: v}) for v in values]
    policies = policy_order(r["policy"] for r in rows)
    styles = series_styles(policies)
    for ax, name in zip(axes[0], metrics, strict=True):
        bounds = metric(name)
        for policy, style in zip(policies, styles, strict=True):
            by_label = {r["sweep"]: r for r in rows if r["policy"] == policy}
            column = KM_COLUMN if name == "rounds_to_target" else f"{name}_mean"
            mean = np.array([_number(by_label.get(lb, {}).get(column)) for lb in labels])
            mean[np.isinf(mean)] = np.nan  # under half of the runs reached the target
            ci = np.array([_number(by_label.get(lb, {}).get(f"{name}_ci95")) for lb in labels])
            seeds = np.array([_number(by_label.get(lb, {}).get("n_seeds")) for lb in labels])
            ci = np.where(seeds >= MIN_RUNS_FOR_BAND, np.nan_to_num(ci), 0.0)
            lower = mean - bounds.clip(mean - ci)
            upper = bounds.clip(mean + ci) - mean
            ax.errorbar(
                range(len(values)),
                mean,
                yerr=np.nan_to_num(np.vstack([lower, upper])),
                marker="o",
                capsize=3,
                label=policy_name(policy),
                **style,
            )
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        label_axis(ax, name, xlabel=key, x_count=False)
        ax.set_title(
            "Kaplan–Meier median over seeds (none: under half reached it)"
            if name == "rounds_to_target"
            else "mean over seeds; bars: 95 % CI (Student t)",
            fontsize=10,
        )
    legend_below(fig, axes[0][0])
    if title:
        fig.suptitle(title)
    return save_figure(fig, out)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")
