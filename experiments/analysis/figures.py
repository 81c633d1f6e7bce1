"""How every figure looks: axis labels with units, ranges, one style per policy, bands, titles."""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.colors import to_hex
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator
from scipy.ndimage import uniform_filter1d

from experiments.analysis.statistics import mean_band
from fedcgd_strategy.policies.registry import POLICY_LABELS
from fedcgd_task.datasets import BUILTIN_DATASETS

#: From this many runs on a group is drawn with the 95 % band of its mean (one run: its line).
MIN_RUNS_FOR_BAND = 2
LEGEND_FONTSIZE = 9
#: ``gid`` of every shaded confidence band, and the legend entry that names them.
BAND_GID, BAND_LABEL = "ci95-band", "shaded: 95 % CI of the mean over seeds (Student t)"


@dataclass(frozen=True)
class Metric:
    """A y axis: label, range, integer ticks (``count``), at most V (``devices``)."""

    label: str
    low: float = -math.inf
    high: float = math.inf
    count: bool = False
    devices: bool = False

    def clip(self, values: np.ndarray, num_devices: float = math.inf) -> np.ndarray:
        """``values`` clipped to the metric's range, a device count to ``num_devices`` too."""
        high = min(self.high, num_devices) if self.devices else self.high
        return np.clip(np.asarray(values, dtype=float), self.low, high)


#: Per-round metrics (metrics.jsonl) and per-run statistics (runs.csv / table.csv columns).
METRICS: dict[str, Metric] = {
    "accuracy": Metric("test accuracy (fraction correct)", 0.0, 1.0),
    "final_accuracy": Metric("final test accuracy (fraction correct)", 0.0, 1.0),
    "max_accuracy": Metric("best test accuracy (fraction correct)", 0.0, 1.0),
    "loss": Metric("test loss (cross-entropy, nats)", 0.0),
    "num_scheduled": Metric("scheduled devices (count)", 0.0, count=True, devices=True),
    "mean_scheduled": Metric("scheduled devices per round (count)", 0.0, count=True, devices=True),
    "wemd": Metric("WEMD Σ_c |p̄_c − p_c| of the schedule (0–2)", 0.0, 2.0),
    "mean_wemd": Metric("mean WEMD Σ_c |p̄_c − p_c| (0–2)", 0.0, 2.0),
    "rounds_to_target": Metric("rounds to the target accuracy (rounds)", 0.0, count=True),
    "sigma": Metric("σ̂, spread of the sampled gradients (gradient norm)", 0.0),
    "class_gradient_used": Metric("Ĝ, class-gradient bound used (gradient norm)", 0.0),
}

#: Fixed colour of each built-in policy, in legend order: FedCGD warm, the baselines cool or grey.
POLICY_COLORS: dict[str, str] = {
    "fedcgd-fscd": "#d62728", "fedcgd-fscd-gc": "#8c564b", "fedcgd-gs": "#ff7f0e",
    "fedcgd-exact": "#e377c2", "fedcgd-cd": "#bcbd22", "bc": "#1f77b4", "bn2": "#17becf",
    "poc": "#2ca02c", "fedcbs": "#9467bd", "all": "#7f7f7f",
}  # fmt: skip
#: A researcher's own policies: dark colours no built-in uses, chosen by name.
USER_COLORS = ("#252525", "#637939", "#8c6d31", "#7b4173", "#393b79", "#843c39")
#: A policy's further aggregators in one figure (its first keeps the policy's colour).
VARIANT_COLORS = (
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
    "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)  # fmt: skip
#: Line styles tried, in order, when a series' (colour, style) is taken in its figure; then
#: ever longer dashes.
LINESTYLES: tuple[Any, ...] = (
    "-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)), (0, (5, 2, 1, 2)),
    (0, (8, 2)), (0, (3, 3)),
)  # fmt: skip


def policy_order(policies: Iterable[str]) -> list[str]:
    """``policies`` in legend order: the built-ins as in :data:`POLICY_COLORS`, then the rest."""
    known = list(POLICY_COLORS)
    return sorted(dict.fromkeys(policies), key=lambda p: (known.index(p) if p in known else 99, p))


def metric(key: str) -> Metric:
    """The :class:`Metric` of ``key``; an unknown key gets its name as label and no bounds."""
    return METRICS.get(key, Metric(key.replace("_", " ")))


def policy_name(policy: str) -> str:
    """The legend name of ``policy``: a built-in's human name, a reference's class name."""
    return POLICY_LABELS.get(policy, policy.rsplit(":", 1)[-1])


def policy_style(policy: str, own_index: int = 0) -> dict[str, Any]:
    """Line keywords: FedCGD solid and thick, baselines dashed, own policies dash-dotted."""
    if policy not in POLICY_COLORS:
        color = USER_COLORS[own_index % len(USER_COLORS)]
        return {"color": color, "linestyle": "-.", "linewidth": 2.0, "zorder": 3}
    if policy.startswith("fedcgd"):
        return {"color": POLICY_COLORS[policy], "linestyle": "-", "linewidth": 2.2, "zorder": 3}
    return {"color": POLICY_COLORS[policy], "linestyle": "--", "linewidth": 1.3, "zorder": 2}


def series_styles(
    policies: Sequence[str], aggregators: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """One style per series (``policies`` may repeat), no two with the same colour and style.

    An own policy's colour: its name's CRC-32 in :data:`USER_COLORS`, the next free if taken.
    With ``aggregators`` (one per series), a policy's further aggregators take
    :data:`VARIANT_COLORS`. A repeated (colour, style) takes the next free line style.
    """
    own: dict[str, int] = {}
    for policy in sorted({p for p in policies if p not in POLICY_COLORS}):
        first = zlib.crc32(policy.encode()) % len(USER_COLORS)
        tried = ((first + step) % len(USER_COLORS) for step in range(len(USER_COLORS)))
        own[policy] = next((i for i in tried if i not in own.values()), first)
    styles = [policy_style(p, own.get(p, 0)) for p in policies]
    first_seen: dict[str, str] = {}
    variant: dict[tuple[str, str], str] = {}
    for i, (policy, aggregator) in enumerate(zip(policies, aggregators or [], strict=False)):
        if first_seen.setdefault(policy, aggregator) != aggregator:
            color = variant.setdefault(
                (policy, aggregator), VARIANT_COLORS[len(variant) % len(VARIANT_COLORS)]
            )
            styles[i]["color"] = color
    taken: set[tuple[str, str]] = set()
    for style in styles:
        free = itertools.chain(LINESTYLES, ((0, (k, 2)) for k in itertools.count(10)))
        for linestyle in itertools.chain([style["linestyle"]], free):
            if (to_hex(style["color"]), repr(linestyle)) not in taken:
                break
        style["linestyle"] = linestyle
        taken.add((to_hex(style["color"]), repr(linestyle)))
    return styles


def smoothing_window(num_rounds: int) -> int:
    """The moving-average window: ``round(num_rounds / 20)`` made odd, at least 1."""
    return max(1, round(num_rounds / 20)) // 2 * 2 + 1


def smooth_curve(curve: Mapping[int, float], window: int) -> dict[int, float]:
    """``curve`` (round -> value) as its centred moving average (at the ends: of what exists)."""
    rounds = sorted(curve)
    x = np.array([curve[r] for r in rounds], dtype=float)
    kept = uniform_filter1d(np.ones_like(x), window, mode="constant")
    mean = uniform_filter1d(x, window, mode="constant") / kept
    return dict(zip(rounds, map(float, mean), strict=True))


def draw_group(
    ax: Any,
    curves: Sequence[Mapping[int, float]],
    key: str,
    label: str,
    *,
    style: Mapping[str, Any] | None = None,
    smooth: int = 1,
    bands: bool = True,
    num_devices: float = math.inf,
) -> None:
    """Draw the per-round mean of ``curves`` on ``ax``, with its clipped 95 % band from two runs on.

    With ``smooth`` > 1: the raw mean faint, the line and band of the runs' moving averages.
    """
    style = dict(style or {})
    color = style.pop("color", None)
    curves = [c for c in curves if c]
    if not curves:
        return
    if smooth > 1:
        raw = mean_band(curves)
        (faint,) = ax.plot(raw.x, raw.mean, color=color, linewidth=0.7, alpha=0.3, zorder=1)
        color = faint.get_color()
        curves = [smooth_curve(c, smooth) for c in curves]
    band = mean_band(curves)
    (line,) = ax.plot(band.x, band.mean, color=color, label=label, **style)
    if bands and len(curves) >= MIN_RUNS_FOR_BAND:
        clip = metric(key).clip
        ax.fill_between(
            band.x,
            clip(band.mean - band.half_width, num_devices),
            clip(band.mean + band.half_width, num_devices),
            color=line.get_color(),
            alpha=0.2 if style.get("linestyle", "-") == "-" else 0.1,
            linewidth=0,
            gid=BAND_GID,
        )


def count_ticks(axis: Any, low: float = -math.inf) -> None:
    """Integer ticks only on ``axis``; a view of under two integers is widened (down to ``low``)."""
    axis.set_major_locator(MaxNLocator(integer=True))
    lo, hi = sorted(axis.get_view_interval())
    if math.floor(hi) - math.ceil(lo) < 1:
        new_lo = max(math.floor(lo), low)
        limits = (new_lo, max(math.ceil(hi), new_lo + 1))
        (axis.axes.set_xlim if axis.axis_name == "x" else axis.axes.set_ylim)(*limits)


def label_axis(ax: Any, key: str, *, xlabel: str = "round", x_count: bool | None = None) -> None:
    """X label, the y label with its unit, a light grid, integer ticks on count axes."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric(key).label)
    ax.grid(alpha=0.3)
    if x_count if x_count is not None else xlabel == "round":
        count_ticks(ax.xaxis, 0.0)
    if metric(key).count:
        count_ticks(ax.yaxis, metric(key).low)


def legend_below(fig: Any, ax: Any) -> None:
    """One legend for the figure below the panels: ``ax``'s entries (and the bands')."""
    handles, labels = ax.get_legend_handles_labels()
    if any(c.get_gid() == BAND_GID for axis in fig.axes for c in axis.collections):
        handles.append(Patch(color="0.5", alpha=0.3, linewidth=0))
        labels.append(BAND_LABEL)
    if handles:
        # as many columns (at most 5) as fit: a character is about 0.6 of the font size wide,
        # each entry's line sample about 6 characters
        width_chars = fig.get_figwidth() * 72 / (0.6 * LEGEND_FONTSIZE)
        fit = int(width_chars // (max(map(len, labels)) + 6))
        fig.legend(
            handles,
            labels,
            loc="outside lower center",
            ncol=max(1, min(len(labels), 5, fit)),
            fontsize=LEGEND_FONTSIZE,
            frameon=False,
        )


# --- Titles: data set, split, τ, V and the seeds of the runs, from their ``config.json`` ---

DATASET_NAMES = {name: builtin.title for name, builtin in BUILTIN_DATASETS.items()}


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) and not isinstance(value, bool) else "?"


def _values(parts: Iterable[str]) -> str:
    return ", ".join(dict.fromkeys(parts))


def split_text(tasks: Sequence[Mapping[str, Any]]) -> str:
    """The split of runs with these ``task`` settings, e.g. ``Dirichlet α = 0.1, 1, r = 10``."""
    alphas = [_number(t.get("dirichlet_alpha")) for t in tasks if t.get("partition") != "shards"]
    shards = [t.get("shards_per_device") for t in tasks if t.get("partition") == "shards"]
    texts = ["Dirichlet α = " + _values(alphas)] if alphas else []
    if shards:
        plural = "" if all(n == 1 for n in shards) else "s"
        texts.append(_values(_number(n) for n in shards) + f" shard{plural} per device")
    ratios = [t.get("imbalance_ratio", 1.0) for t in tasks]
    imbalance = (
        ", r = " + _values(_number(r) for r in ratios) if any(r != 1 for r in ratios) else ""
    )
    return ", ".join(texts) + imbalance


def settings_title(configs: Sequence[Mapping[str, Any] | None]) -> str:
    """Data set · split · τ · V · aggregator (unless FedAvg) · seeds, each part's values."""
    known = [c for c in configs if c and isinstance(c.get("task"), Mapping)]
    tasks = [c["task"] for c in known]
    if not known:
        return ""
    names = (str(t.get("dataset", "?")) for t in tasks)
    training = [c["training"] if isinstance(c.get("training"), Mapping) else {} for c in known]
    parts = [
        _values(DATASET_NAMES.get(n, n.rsplit(":", 1)[-1])[:40] for n in names),
        split_text(tasks),
        "τ = " + _values(_number(t.get("local_steps")) for t in training),
        "V = " + _values(_number(t.get("num_devices")) for t in tasks),
    ]
    aggregators = [str(c.get("aggregator") or "") for c in known]
    if any(aggregators):
        parts.append("aggregator " + _values(a or "FedAvg" for a in aggregators))
    distinct = list(dict.fromkeys(_number(t.get("seed")) for t in tasks))
    parts.append(f"seed {distinct[0]}" if len(distinct) == 1 else f"{len(distinct)} seeds")
    return " · ".join(parts)
