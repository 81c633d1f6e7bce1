"""``fedcgd plot`` (accuracy, scheduled devices, WEMD per round) and a preset's figures."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from experiments.analysis import figures
from fedcgd_config.imports import reference_label
from fedcgd_config.settings import WHERE_AND_HOW
from server_app.run_folder.files import ResultWriteError, atomic_write, read_json_object
from server_app.run_folder.results import CONFIG_FILE, METRICS_FILE, read_metrics_lines
from server_app.run_folder.run_status import flat_settings

#: The panels of a run figure; the noisy ones drawn as a moving average over a faint raw line.
PANEL_KEYS, SMOOTHED_KEYS = ("accuracy", "num_scheduled", "wemd"), ("num_scheduled", "wemd")
#: Settings (dotted, with what lies below them) that never label a line: where or how a run ran,
#: values derived from the others, and the policy (every label starts with it).
UNLABELLED = (
    *WHERE_AND_HOW, "num_parameters", "model_bits_used", "num_classes", "target_dist_global",
    "policy_uses_budget", "aggregator_resolved", "policy_resolved", "policy", "protocol", "code",
)  # fmt: skip
#: Longest value shown in a label (a longer one keeps its end).
MAX_LABEL_VALUE = 24


def load_run(result_dir: Path) -> tuple[str, list[dict]]:
    """(policy label or the folder's name, per-round lines); ValueError: a damaged file."""
    try:
        lines = read_metrics_lines(result_dir)
        config_path = result_dir / CONFIG_FILE
        label = result_dir.name
        if config_path.exists():
            label = reference_label(str(read_json_object(config_path).get("policy", label)))
    except OSError as err:
        raise ValueError(f"{result_dir}: cannot be read ({err.strerror or err})") from err
    return label, lines


def save_figure(fig: Any, out: Path, dpi: int = 120) -> Path:
    """Save ``fig`` as PNG at ``out`` atomically (``run_folder.files.atomic_write``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        return atomic_write(out, lambda handle: fig.savefig(handle, dpi=dpi, format="png"))
    finally:
        plt.close(fig)


def draw_panels(
    groups: Sequence[tuple[str, list[Path]]],
    styles: Sequence[Mapping[str, Any]],
    out: Path,
    bands: bool = True,
    titles: Mapping[str, str] | None = None,
) -> Path:
    """Each (label, folders) group in its style on a panel per metric (``titles``: all smoothed)."""
    titles = titles or dict.fromkeys(PANEL_KEYS, "")
    smoothed = SMOOTHED_KEYS if titles.keys() == set(PANEL_KEYS) else tuple(titles)
    size = (14 if len(titles) > 2 else 12, 4.8)
    fig, axes = plt.subplots(1, len(titles), figsize=size, constrained_layout=True)
    loaded = [[load_run(d)[1] for d in dirs] for _, dirs in groups]
    window = figures.smoothing_window(max((len(x) for runs in loaded for x in runs), default=0))
    for (label, dirs), runs, style in zip(groups, loaded, styles, strict=True):
        most = max(map(num_devices, dirs), default=math.inf)
        for ax, key in zip(axes, titles, strict=True):
            curves = [  # round -> finite value (rounds without one left out)
                {int(x["round"]): float(x[key]) for x in lines if _finite(x.get(key))}
                for lines in runs
            ]
            smooth = window if key in smoothed else 1
            figures.draw_group(
                ax, curves, key, label, style=style, smooth=smooth, bands=bands, num_devices=most
            )
    for ax, (key, title) in zip(axes, titles.items(), strict=True):
        averaged = f"moving average over {window} rounds (faint: per round)"
        lines = [title, averaged if window > 1 and key in smoothed else ""]
        ax.set_title("\n".join(line for line in lines if line), fontsize=9)
        figures.label_axis(ax, key)
    figures.legend_below(fig, axes[0])
    if title := runs_title(d for _, dirs in groups for d in dirs):
        fig.suptitle(title)
    return save_figure(fig, out)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(float(value))


def folder_suffix(index: int, paths: Sequence[Path]) -> str:
    """The fewest trailing parts of ``paths[index]`` no other path ends with, else ``name #k``."""
    parts = paths[index].parts
    others = [p.parts for i, p in enumerate(paths) if i != index]
    for k in range(1, len(parts) + 1):
        if all(o[-k:] != parts[-k:] for o in others):
            return "/".join(parts[-k:])
    return f"{paths[index].name} #{paths[: index + 1].count(paths[index])}"


def _value_text(value: Any) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value)
    text = "".join(c if c.isprintable() else "?" for c in (text or '""'))
    return text if len(text) <= MAX_LABEL_VALUE else "…" + text[-(MAX_LABEL_VALUE - 1) :]


def differing_settings(
    configs: Sequence[Mapping[str, Any] | None], skip: Sequence[str] = ()
) -> list[str]:
    """Per ``config.json``, the settings that differ between them: ``local_steps=5, seed=1``."""
    flats = [flat_settings(c) if c else None for c in configs]
    known = [f for f in flats if f is not None]
    left_out = (*UNLABELLED, *skip)
    names = sorted({k for f in known for k in f})
    differ = [
        k
        for k in names
        if not any(k == u or k.startswith(f"{u}.") for u in left_out)
        and len({json.dumps(f.get(k), sort_keys=True) for f in known}) > 1
    ]
    return [
        ""
        if f is None
        else ", ".join(f"{k.rsplit('.', 1)[-1]}={_value_text(f.get(k))}" for k in differ)
        for f in flats
    ]


def run_labels(
    result_dirs: Sequence[Path], policies: Sequence[str], settings: Sequence[str] | None = None
) -> list[str]:
    """Each run's policy name and ``settings``, then its folder where another has the same."""
    names = [figures.policy_name(p) for p in policies]
    if settings is not None:
        names = [f"{n} · {s}" if s else n for n, s in zip(names, settings, strict=True)]
    paths = [Path(d).resolve() for d in result_dirs]
    labels = []
    for i, name in enumerate(names):
        same = [j for j, other in enumerate(names) if other == name]
        if len(same) == 1:
            labels.append(name)
        else:
            suffix = folder_suffix(same.index(i), [paths[j] for j in same])
            labels.append(f"{name} · {suffix}")
    return labels


def plot_runs(result_dirs: list[Path], out: Path) -> Path:
    """The three-panel PNG, one line per run labelled by its policy and the settings that differ."""
    policies = [load_run(d)[0] for d in result_dirs]
    configs = [read_config(d) for d in result_dirs]
    labels = run_labels(result_dirs, policies, differing_settings(configs))
    aggregators = [str((c or {}).get("aggregator") or "") for c in configs]
    styles = figures.series_styles(policies, aggregators)
    return draw_panels([(lb, [d]) for lb, d in zip(labels, result_dirs, strict=True)], styles, out)


def group_runs(result_dirs: Sequence[Path]) -> dict[tuple[str, str], list[Path]]:
    """Result folders by (policy, the settings besides the seed that differ), first seen first."""
    policies = [load_run(d)[0] for d in result_dirs]
    settings = differing_settings([read_config(d) for d in result_dirs], skip=("task.seed",))
    groups: dict[tuple[str, str], list[Path]] = {}
    for result_dir, policy, setting in zip(result_dirs, policies, settings, strict=True):
        groups.setdefault((policy, setting), []).append(result_dir)
    return groups


def plot_mean_runs(
    groups: Mapping[str, Sequence[Path]] | Mapping[tuple[str, str], Sequence[Path]],
    out: Path,
    *,
    bands: bool = True,
) -> Path:
    """:func:`plot_runs`' panels, a mean curve (and band) per policy or (policy, settings)."""
    keyed = {(k, "") if isinstance(k, str) else k: list(v) for k, v in groups.items()}
    legend = figures.policy_order(p for p, _ in keyed)
    order = sorted(keyed, key=lambda key: legend.index(key[0]))
    aggregators = [str((read_config(keyed[k][0]) or {}).get("aggregator") or "") for k in order]
    styles = figures.series_styles([p for p, _ in order], aggregators)
    named = [
        (f"{figures.policy_name(p)}{f' · {s}' if s else ''} (n={len(dirs)})", dirs)
        for (p, s), dirs in ((key, keyed[key]) for key in order)
    ]
    return draw_panels(named, styles, out, bands)


def main(result_dirs: Sequence[Path], out: Path, mean: bool = False, bands: bool = True) -> int:
    """``fedcgd plot``: exit code 0, 2 (not a result folder, damaged runs), 1 (not written)."""
    for d in result_dirs:
        if not (d / METRICS_FILE).exists():
            print(f"error: {d} has no {METRICS_FILE}; is it a result directory?", file=sys.stderr)
            return 2
    try:
        if mean:
            written = plot_mean_runs(group_runs(list(result_dirs)), out, bands=bands)
        else:
            written = plot_runs(list(result_dirs), out)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ResultWriteError as err:
        print(f"failed: {err}", file=sys.stderr)
        return 1
    print(f"wrote {written}")
    return 0


# --- A run's ``config.json``: the title, the bound of device counts ---


def read_config(result_dir: Path) -> dict[str, Any] | None:
    """The ``config.json`` of ``result_dir``; None when absent or unreadable."""
    try:
        return read_json_object(result_dir / CONFIG_FILE)
    except (OSError, ValueError):
        return None


def num_devices(result_dir: Path) -> float:
    """The run's V from its ``config.json`` (inf when unknown: no bound)."""
    task = (read_config(result_dir) or {}).get("task")
    value = task.get("num_devices") if isinstance(task, Mapping) else None
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else math.inf


def runs_title(result_dirs: Iterable[Path]) -> str:
    """:func:`figures.settings_title` of the runs in ``result_dirs``."""
    return figures.settings_title([read_config(d) for d in result_dirs])


# --- A preset's figures: σ̂ and Ĝ per round (``estimates.png``), ``sweep.png`` ---


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
    """``sweep.png``: per metric, each policy's mean ± 95 % CI (rounds: Kaplan–Meier median)
    against the swept key's values; None unless one key is swept."""  # noqa: D205, D209
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
