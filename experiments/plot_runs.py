"""Plot one or more runs from their result directories (reads ``metrics.jsonl`` only).

``python -m experiments.plot_runs RESULT_DIR [RESULT_DIR ...] --out curves.png`` draws, per
run, test accuracy, the number of scheduled devices and the WEMD of the schedule against the
round, labelled by each run's policy (from its ``config.json``). With ``--mean`` the runs are
grouped by policy (e.g. the seeds of a comparison, ``results/compare/*/seed-*``) and each
policy is drawn as its mean over the runs with a shaded 95 % confidence band
(:func:`plot_mean_runs`).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from experiments.figures import (
    draw_group,
    label_axis,
    legend_below,
    policy_name,
    policy_order,
    policy_style,
)
from server_app.atomic_files import ResultWriteError, atomic_write
from server_app.json_files import read_json_object
from server_app.results import CONFIG_FILE, METRICS_FILE, read_metrics_lines

#: The three panels of a run figure: one metric each (labels and ranges in
#: :data:`experiments.figures.METRICS`).
PANEL_KEYS = ("accuracy", "num_scheduled", "wemd")


def load_run(result_dir: Path) -> tuple[str, list[dict]]:
    """Return (label, per-round lines) of a result directory.

    A torn last line of ``metrics.jsonl`` (a run stopped, or still writing it) is left out
    (:func:`server_app.results.read_metrics_lines`); the label is the policy of
    ``config.json`` (bounded in size and depth), else the folder's name.

    Raises
    ------
    ValueError
        One line naming the file: a damaged metrics line, or a ``config.json`` that is not a
        run's.
    """
    try:
        lines = read_metrics_lines(result_dir)
        config_path = result_dir / CONFIG_FILE
        label = result_dir.name
        if config_path.exists():
            label = str(read_json_object(config_path).get("policy", label))
    except OSError as err:
        raise ValueError(f"{result_dir}: cannot be read ({err.strerror or err})") from err
    return label, lines


def save_figure(fig: Any, out: Path, dpi: int = 120) -> Path:
    """Save ``fig`` as PNG at ``out`` whole or not at all (temporary file renamed over it).

    Raises
    ------
    server_app.atomic_files.ResultWriteError
        One line naming ``out`` (disk full, ...); no temporary file is left.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        return atomic_write(out, lambda handle: fig.savefig(handle, dpi=dpi, format="png"))
    finally:
        plt.close(fig)


def round_values(lines: Sequence[Mapping[str, Any]], key: str) -> dict[int, float]:
    """Round → finite value of ``key`` in a run's metrics lines (rounds without one left out).

    Parameters
    ----------
    lines : sequence of mapping
        The run's ``metrics.jsonl`` lines.
    key : str
        Metric, e.g. ``accuracy``, ``num_scheduled``, ``wemd``.

    Returns
    -------
    dict of int to float
        One entry per round that has a finite value.
    """
    out: dict[int, float] = {}
    for line in lines:
        value = line.get(key)
        if isinstance(value, int | float) and math.isfinite(float(value)):
            out[int(line["round"])] = float(value)
    return out


def _panels(num: int = len(PANEL_KEYS)) -> tuple[Any, Any]:
    fig, axes = plt.subplots(1, num, figsize=(14, 4.4), constrained_layout=True)
    return fig, axes


def finish_figure(fig: Any, axes: Sequence[Any], keys: Sequence[str], out: Path) -> Path:
    """Label every panel (y label with unit), put one legend below the panels, save ``out``."""
    for ax, key in zip(axes, keys, strict=True):
        label_axis(ax, key)
    legend_below(fig, axes[0])
    return save_figure(fig, out)


def plot_mean_bands(
    axes: Sequence[Any],
    keys: Sequence[str],
    result_dirs: Sequence[Path],
    label: str,
    color: str | None = None,
    policy: str | None = None,
) -> None:
    """Draw on each axis one group of runs of its key (:func:`experiments.figures.draw_group`).

    Parameters
    ----------
    axes : sequence of matplotlib axes
        One panel per key.
    keys : sequence of str
        Metric of each panel (see :func:`round_values`).
    result_dirs : sequence of Path
        The runs of one group (e.g. the seeds of one policy).
    label : str
        Legend label of the group's curves.
    color : str, optional
        Colour of the group's curves; by default the first curve's automatic colour.
    policy : str, optional
        The group's policy, for its line style (FedCGD solid and thick, baselines dashed).

    Three runs or more: the mean and its 95 % band clipped to the metric's range; fewer: each
    run. A panel whose key no run has is left without a curve.
    """
    runs = [load_run(d)[1] for d in result_dirs]
    style = policy_style(policy) if policy else None
    for ax, key in zip(axes, keys, strict=True):
        curves = [round_values(lines, key) for lines in runs]
        drawn = draw_group(ax, curves, key, label, color=color, style=style)
        color = drawn or color


def plot_runs(result_dirs: list[Path], out: Path) -> Path:
    """Write a three-panel PNG (accuracy, scheduled devices, WEMD vs round) to ``out``."""
    fig, axes = _panels()
    for result_dir in result_dirs:
        label, _ = load_run(result_dir)
        plot_mean_bands(axes, PANEL_KEYS, [result_dir], policy_name(label), policy=label)
    return finish_figure(fig, axes, PANEL_KEYS, out)


def group_by_label(result_dirs: Sequence[Path]) -> dict[str, list[Path]]:
    """Result directories grouped by their label (the run's policy), in first-seen order."""
    groups: dict[str, list[Path]] = {}
    for result_dir in result_dirs:
        groups.setdefault(load_run(result_dir)[0], []).append(result_dir)
    return groups


def plot_mean_runs(groups: Mapping[str, Sequence[Path]], out: Path) -> Path:
    """Three panels as :func:`plot_runs`, one mean curve and 95 % band per group of runs.

    Parameters
    ----------
    groups : mapping of str to sequence of Path
        Label (e.g. the policy) → its result directories (e.g. one per seed).
    out : Path
        PNG to write.

    Returns
    -------
    Path
        ``out``. Each curve is the per-round mean over the group's runs, the shaded band the
        95 % confidence interval of that mean (Student t over the runs that have the round),
        clipped to the metric's range; a group of fewer than three runs is drawn run by run
        (a t-band over two runs says nothing).
    """
    fig, axes = _panels()
    for label in policy_order(groups):
        dirs = groups[label]
        name = f"{policy_name(label)} (n={len(dirs)})"
        plot_mean_bands(axes, PANEL_KEYS, dirs, name, policy=label)
    return finish_figure(fig, axes, PANEL_KEYS, out)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("result_dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("results/curves.png"))
    parser.add_argument(
        "--mean",
        action="store_true",
        help="group the runs by policy: mean curve and 95 %% confidence band per policy",
    )
    args = parser.parse_args(argv)
    for d in args.result_dirs:
        if not (d / METRICS_FILE).exists():
            parser.error(f"{d} has no {METRICS_FILE}; is it a result directory?")
    try:
        if args.mean:
            out = plot_mean_runs(group_by_label(args.result_dirs), args.out)
        else:
            out = plot_runs(args.result_dirs, args.out)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ResultWriteError as err:
        print(f"failed: {err}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
