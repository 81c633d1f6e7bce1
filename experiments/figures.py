"""How every figure of the project looks: axis labels with units, value ranges, policy styles.

One place for what a reader needs to read a curve: each metric's y label (with its unit) and the
range the metric can take, so that a 95 % band never leaves it (an accuracy band stays in
[0, 1], a count band above 0); one style per policy, FedCGD's variants drawn solid and thick,
the baselines dashed and thinner, so that with seven policies the method under study stands
out; and :func:`draw_group`, which draws a group of runs (the seeds of one policy) as its mean
with a clipped 95 % band from three runs on, and as the individual runs below three (two runs
give a Student-t band 12.7 standard errors wide, which says nothing).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from experiments.statistics import mean_band

#: Below this many runs a group is drawn run by run instead of as a mean with a band.
MIN_RUNS_FOR_BAND = 3

#: Font size of legends (readable when a 14-inch-wide figure is shown at README width).
LEGEND_FONTSIZE = 9


@dataclass(frozen=True)
class Metric:
    """How to label and bound one metric on a y axis.

    Attributes
    ----------
    label : str
        Y-axis label with the unit (or "fraction", "count" for dimensionless values).
    low, high : float
        The values the metric can take; bands are clipped to ``[low, high]``.

    """

    label: str
    low: float = -math.inf
    high: float = math.inf

    def clip(self, values: np.ndarray) -> np.ndarray:
        """``values`` clipped to the metric's range (NaN stays NaN)."""
        return np.clip(np.asarray(values, dtype=float), self.low, self.high)


#: Per-round metrics (metrics.jsonl) and per-run statistics (runs.csv / table.csv columns).
METRICS: dict[str, Metric] = {
    "accuracy": Metric("test accuracy (fraction correct)", 0.0, 1.0),
    "final_accuracy": Metric("final test accuracy (fraction correct)", 0.0, 1.0),
    "max_accuracy": Metric("best test accuracy (fraction correct)", 0.0, 1.0),
    "loss": Metric("test loss (cross-entropy, nats)", 0.0),
    "num_scheduled": Metric("scheduled devices (count)", 0.0),
    "mean_scheduled": Metric("scheduled devices per round (count)", 0.0),
    "wemd": Metric("WEMD Σ_c |p̄_c − p_c| of the schedule (0–2)", 0.0, 2.0),
    "mean_wemd": Metric("mean WEMD Σ_c |p̄_c − p_c| (0–2)", 0.0, 2.0),
    "rounds_to_target": Metric("rounds to the target accuracy (rounds)", 0.0),
    "sigma": Metric("σ̂, spread of the sampled gradients (gradient norm)", 0.0),
    "class_gradient_used": Metric("Ĝ, class-gradient bound used (gradient norm)", 0.0),
}

#: Human names of the policies, in the order they appear in legends.
POLICY_NAMES: dict[str, str] = {
    "fedcgd-fscd": "FedCGD-FSCD",
    "fedcgd-fscd-gc": "FedCGD-FSCD (Ĝ_c)",
    "fedcgd-gs": "FedCGD-GS",
    "fedcgd-exact": "FedCGD-exact",
    "bc": "BC (best channel)",
    "bn2": "BN2 (best norm)",
    "poc": "POC (power of choice)",
    "fedcbs": "Fed-CBS",
    "all": "all (no budget)",
}


#: A fixed colour per built-in policy (the same in every figure): FedCGD in warm, saturated
#: colours, the baselines in cool or grey ones.
POLICY_COLORS: dict[str, str] = {
    "fedcgd-fscd": "#d62728",
    "fedcgd-fscd-gc": "#8c564b",
    "fedcgd-gs": "#ff7f0e",
    "fedcgd-exact": "#e377c2",
    "bc": "#1f77b4",
    "bn2": "#17becf",
    "poc": "#2ca02c",
    "fedcbs": "#9467bd",
    "all": "#7f7f7f",
}


def policy_order(policies: Iterable[str]) -> list[str]:
    """``policies`` in legend order: the built-ins as in :data:`POLICY_NAMES`, then the rest."""
    known = list(POLICY_NAMES)
    return sorted(dict.fromkeys(policies), key=lambda p: (known.index(p) if p in known else 99, p))


def metric(key: str) -> Metric:
    """The :class:`Metric` of ``key``; an unknown key gets its name as label and no bounds."""
    return METRICS.get(key, Metric(key.replace("_", " ")))


def policy_name(policy: str) -> str:
    """The legend name of ``policy`` (the policy string itself when it is not a built-in)."""
    return POLICY_NAMES.get(policy, policy)


def is_fedcgd(policy: str) -> bool:
    """True for the FedCGD variants (drawn to stand out from the baselines)."""
    return policy.startswith("fedcgd")


def policy_style(policy: str) -> dict[str, Any]:
    """Matplotlib line keywords: FedCGD solid and thick, baselines dashed and thinner.

    Built-in policies also get their fixed colour (:data:`POLICY_COLORS`).
    """
    style: dict[str, Any] = {"linestyle": "--", "linewidth": 1.3, "zorder": 2}
    if is_fedcgd(policy):
        style = {"linestyle": "-", "linewidth": 2.2, "zorder": 3}
    if policy in POLICY_COLORS:
        style["color"] = POLICY_COLORS[policy]
    return style


def draw_group(
    ax: Any,
    curves: Sequence[Mapping[int, float]],
    key: str,
    label: str,
    *,
    color: Any = None,
    style: Mapping[str, Any] | None = None,
) -> Any:
    """Draw one group of runs of ``key`` on ``ax``; return the colour used (None: nothing drawn).

    Parameters
    ----------
    ax : matplotlib axes
        Where to draw.
    curves : sequence of mapping int -> float
        One curve per run (round → value).
    key : str
        The metric (for the band's range, see :data:`METRICS`).
    label : str
        Legend label of the group (drawn once).
    color : matplotlib colour, optional
        The group's colour; by default the axis' next colour.
    style : mapping, optional
        Line keywords (:func:`policy_style`).

    With at least :data:`MIN_RUNS_FOR_BAND` runs: the per-round mean and its 95 % band (Student
    t), the band clipped to the metric's range. With fewer: each run as a thin line, the first
    one labelled.
    """
    style = dict(style or {})
    color = style.pop("color", color)
    band_alpha = 0.2 if style.get("linestyle", "-") == "-" else 0.08
    if len(curves) < MIN_RUNS_FOR_BAND:
        drawn = None
        for i, curve in enumerate(c for c in curves if c):
            rounds = sorted(curve)
            (line,) = ax.plot(
                rounds,
                [curve[r] for r in rounds],
                color=drawn or color,
                label=label if i == 0 else None,
                **style,
            )
            drawn = line.get_color()
        return drawn
    band = mean_band(curves)
    if not len(band.x):
        return None
    (line,) = ax.plot(band.x, band.mean, color=color, label=label, **style)
    bounds = metric(key)
    ax.fill_between(
        band.x,
        bounds.clip(band.mean - band.half_width),
        bounds.clip(band.mean + band.half_width),
        color=line.get_color(),
        alpha=band_alpha,
        linewidth=0,
    )
    return line.get_color()


def label_axis(ax: Any, key: str, *, xlabel: str = "round") -> None:
    """X label, the y label with its unit, and a light grid."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric(key).label)
    ax.grid(alpha=0.3)


def legend_below(fig: Any, ax: Any) -> None:
    """One legend for the whole figure, below the panels, with ``ax``'s entries."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        # As many columns (at most 5) as fit the figure's width: a character of the legend's
        # font is about 0.6 of its size wide, and each entry adds its line sample (~6 chars).
        chars_per_inch = 72 / (0.6 * LEGEND_FONTSIZE)
        width_chars = fig.get_figwidth() * chars_per_inch
        fit = int(width_chars // (max(len(label) for label in labels) + 6))
        fig.legend(
            handles,
            labels,
            loc="outside lower center",
            ncol=max(1, min(len(labels), 5, fit)),
            fontsize=LEGEND_FONTSIZE,
            frameon=False,
        )
