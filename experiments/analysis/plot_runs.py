"""Plot one or more runs from their result directories (``fedcgd plot``; reads ``metrics.jsonl``).

Accuracy, scheduled devices and WEMD per round; with ``--mean`` one mean curve per policy with
its 95 % band (:func:`plot_mean_runs`). The figure's rules: :mod:`experiments.analysis.figures`.
"""

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

from experiments.analysis.figures import (
    draw_group,
    label_axis,
    legend_below,
    policy_name,
    policy_order,
    series_styles,
    smoothing_window,
)
from fedcgd_task.datasets import BUILTIN_DATASETS
from fedcgd_task.imports import reference_label
from fedcgd_task.settings import WHERE_AND_HOW
from server_app.run_folder.files import ResultWriteError, atomic_write, read_json_object
from server_app.run_folder.results import CONFIG_FILE, METRICS_FILE, read_metrics_lines
from server_app.run_folder.run_status import flat_settings

#: The three panels of a run figure, one metric each.
PANEL_KEYS = ("accuracy", "num_scheduled", "wemd")
#: Noisy per-round panels, drawn as a moving average over their faint per-round line.
SMOOTHED_KEYS = ("num_scheduled", "wemd")
#: Settings (dotted, with what lies below them) that never label a line: where or how a run ran
#: or reported (:data:`fedcgd_task.settings.WHERE_AND_HOW`), values derived from the others (the
#: protocol ``auto`` resolves by policy), and the policy (every label starts with it).
UNLABELLED = (
    *WHERE_AND_HOW, "num_parameters", "model_bits_used", "num_classes", "target_dist_global",
    "policy_uses_budget", "aggregator_resolved", "policy_resolved", "policy", "protocol", "code",
)  # fmt: skip
#: Longest value shown in a label (a longer one keeps its end).
MAX_LABEL_VALUE = 24


def load_run(result_dir: Path) -> tuple[str, list[dict]]:
    """Return (label, per-round lines) of a result directory; the label: its policy, else its name.

    A policy named by reference (``path/to/file.py:Fair``, ``pkg.mod:Fair``) is labelled by its
    class name (:func:`fedcgd_task.imports.reference_label`), as its folder is named.

    Raises
    ------
    ValueError
        One line naming the file: a damaged metrics line, or a ``config.json`` that is not a run's.
    """
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


def round_values(lines: Sequence[Mapping[str, Any]], key: str) -> dict[int, float]:
    """Round -> finite value of ``key`` in a run's metrics lines (rounds without one left out)."""
    out: dict[int, float] = {}
    for line in lines:
        value = line.get(key)
        if isinstance(value, int | float) and math.isfinite(float(value)):
            out[int(line["round"])] = float(value)
    return out


def draw_panels(
    groups: Sequence[tuple[str, list[Path]]],
    styles: Sequence[Mapping[str, Any]],
    out: Path,
    bands: bool = True,
    titles: Mapping[str, str] | None = None,
) -> Path:
    """Draw each (label, folders) group on one panel per key of ``titles``; title and save.

    ``titles``: metric -> panel title (default: the :data:`PANEL_KEYS`, untitled, the
    :data:`SMOOTHED_KEYS` smoothed); each group in its style by :func:`draw_group`, the smoothed
    panels as moving averages (all of them for given ``titles``).
    """
    titles = titles or dict.fromkeys(PANEL_KEYS, "")
    smoothed = SMOOTHED_KEYS if titles.keys() == set(PANEL_KEYS) else tuple(titles)
    size = (14 if len(titles) > 2 else 12, 4.8)
    fig, axes = plt.subplots(1, len(titles), figsize=size, constrained_layout=True)
    loaded = [[load_run(d)[1] for d in dirs] for _, dirs in groups]
    window = smoothing_window(max((len(lines) for runs in loaded for lines in runs), default=0))
    for (label, dirs), runs, style in zip(groups, loaded, styles, strict=True):
        most = max(map(num_devices, dirs), default=math.inf)
        for ax, key in zip(axes, titles, strict=True):
            curves = [round_values(lines, key) for lines in runs]
            smooth = window if key in smoothed else 1
            draw_group(
                ax, curves, key, label, style=style, smooth=smooth, bands=bands, num_devices=most
            )
    for ax, (key, title) in zip(axes, titles.items(), strict=True):
        averaged = f"moving average over {window} rounds (faint: per round)"
        lines = [title, averaged if window > 1 and key in smoothed else ""]
        ax.set_title("\n".join(line for line in lines if line), fontsize=9)
        label_axis(ax, key)
    legend_below(fig, axes[0])
    if title := runs_title(d for _, dirs in groups for d in dirs):
        fig.suptitle(title)
    return save_figure(fig, out)


def folder_suffix(index: int, paths: Sequence[Path]) -> str:
    """The fewest trailing parts of ``paths[index]`` that no other path ends with.

    ``results/cmp/bc/seed-0`` among ``.../seed-1`` -> ``seed-0``; ``runs/a/seed-0`` among
    ``runs/b/seed-0`` -> ``a/seed-0``; a folder given twice gets its name and ``#2``, ``#3``.
    """
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
    """Per run, the settings whose values differ between these runs: ``local_steps=5, seed=1``.

    Read from each run's ``config.json`` (None: unknown, nothing shown); the settings of
    :data:`UNLABELLED` and ``skip`` (dotted, e.g. ``task.seed``) are left out; a setting is named
    by its last part (``training.local_steps`` as ``local_steps``), ``""`` when none differs.
    """
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
    """Legend label of each run: its policy's name, then what tells it from the others.

    ``settings``: per run, the settings that differ (:func:`differing_settings`); the folder is
    added where another run still has the same label.
    """
    names = [policy_name(p) for p in policies]
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


def aggregator_of(config: Mapping[str, Any] | None) -> str:
    """The run's aggregator as its ``config.json`` names it (``""``: the scheduler's FedAvg)."""
    return str((config or {}).get("aggregator") or "")


def plot_runs(result_dirs: list[Path], out: Path) -> Path:
    """Write a three-panel PNG (accuracy, scheduled devices, WEMD vs round), one line per run.

    Each line is labelled by its policy and the settings that differ between the runs; different
    policies and aggregators never share a colour (:func:`figures.series_styles
    <experiments.analysis.figures.series_styles>`).
    """
    policies = [load_run(d)[0] for d in result_dirs]
    configs = [read_config(d) for d in result_dirs]
    labels = run_labels(result_dirs, policies, differing_settings(configs))
    styles = series_styles(policies, [aggregator_of(c) for c in configs])
    return draw_panels([(lb, [d]) for lb, d in zip(labels, result_dirs, strict=True)], styles, out)


def group_runs(result_dirs: Sequence[Path]) -> dict[tuple[str, str], list[Path]]:
    """Result folders grouped by policy and the settings other than the seed that differ.

    In first-seen order; the settings as :func:`differing_settings` writes them.
    """
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
    """Three panels as :func:`plot_runs`: a mean curve and 95 % band per group of folders.

    ``groups``: policy -> folders, or (policy, the settings that tell the group apart) ->
    folders (:func:`group_runs`); ``bands`` False draws the mean lines alone.
    """
    keyed = {(k, "") if isinstance(k, str) else k: list(v) for k, v in groups.items()}
    order = [
        key for policy in policy_order(p for p, _ in keyed) for key in keyed if key[0] == policy
    ]
    aggregators = [aggregator_of(read_config(keyed[key][0])) for key in order]
    styles = series_styles([p for p, _ in order], aggregators)
    named = [
        (policy_name(p) + (f" · {s}" if s else "") + f" (n={len(keyed[(p, s)])})", keyed[(p, s)])
        for p, s in order
    ]
    return draw_panels(named, styles, out, bands)


def main(result_dirs: Sequence[Path], out: Path, mean: bool = False, bands: bool = True) -> int:
    """``fedcgd plot``: the runs' curves (or with ``mean`` each policy's mean) into ``out``.

    Exit code 0 (one line names the figure), 2 when a folder is not a result folder or the
    runs cannot be drawn together, 1 when the figure cannot be written.
    """
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


# --- Titles: data set, split, τ, V and the seeds of the runs, from their ``config.json`` ---

#: Display names of the built-in data sets (a researcher's data set shows its function name).
DATASET_NAMES = {name: builtin.title for name, builtin in BUILTIN_DATASETS.items()}


def read_config(result_dir: Path) -> dict[str, Any] | None:
    """The ``config.json`` of ``result_dir``; None when absent or unreadable (no title part)."""
    try:
        return read_json_object(result_dir / CONFIG_FILE)
    except (OSError, ValueError):
        return None


def num_devices(result_dir: Path) -> float:
    """The run's V from its ``config.json`` (inf when unknown: no bound)."""
    task = (read_config(result_dir) or {}).get("task")
    value = task.get("num_devices") if isinstance(task, Mapping) else None
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else math.inf


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
    """The title of a figure over runs with these ``config.json`` ("" when none is known).

    Data set · split · τ · V · aggregator (unless FedAvg) · seeds, each listing its distinct values
    in order (a data set given by reference as its function name, at most 40 characters); an
    unknown config is left out.
    """
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


def runs_title(result_dirs: Iterable[Path]) -> str:
    """:func:`settings_title` of the runs in ``result_dirs``."""
    return settings_title([read_config(d) for d in result_dirs])
