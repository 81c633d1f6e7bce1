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
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from experiments.statistics import mean_band
from server_app.results import CONFIG_FILE, METRICS_FILE

PANEL_TITLES = ("test accuracy", "scheduled devices", "WEMD of the schedule (G = 1)")


def load_run(result_dir: Path) -> tuple[str, list[dict]]:
    """Return (label, per-round lines) of a result directory."""
    lines = [json.loads(x) for x in (result_dir / METRICS_FILE).read_text().splitlines() if x]
    config_path = result_dir / CONFIG_FILE
    label = result_dir.name
    if config_path.exists():
        label = str(json.loads(config_path.read_text()).get("policy", label))
    return label, lines


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


def _finish(fig: Any, axes: Any, out: Path) -> Path:
    for ax, title in zip(axes, PANEL_TITLES, strict=True):
        ax.set_xlabel("round")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_mean_bands(
    axes: Sequence[Any],
    keys: Sequence[str],
    result_dirs: Sequence[Path],
    label: str,
    color: str | None = None,
) -> None:
    """Draw on each axis the mean of its key over the runs and the mean's shaded 95 % band.

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

    A panel whose key no run has is left without a curve.
    """
    runs = [load_run(d)[1] for d in result_dirs]
    for ax, key in zip(axes, keys, strict=True):
        band = mean_band([round_values(lines, key) for lines in runs])
        if not len(band.x):
            continue
        (line,) = ax.plot(band.x, band.mean, color=color, label=label)
        color = line.get_color()
        ax.fill_between(
            band.x,
            band.mean - band.half_width,
            band.mean + band.half_width,
            color=color,
            alpha=0.2,
            linewidth=0,
        )


def plot_runs(result_dirs: list[Path], out: Path) -> Path:
    """Write a three-panel PNG (accuracy, scheduled devices, WEMD vs round) to ``out``."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), constrained_layout=True)
    for result_dir in result_dirs:
        label, lines = load_run(result_dir)
        evaluated = [x for x in lines if x.get("accuracy") is not None]
        axes[0].plot(
            [x["round"] for x in evaluated], [x["accuracy"] for x in evaluated], label=label
        )
        axes[1].plot(
            [x["round"] for x in lines], [x.get("num_scheduled", 0) for x in lines], label=label
        )
        with_wemd = [x for x in lines if x.get("wemd") is not None]
        axes[2].plot([x["round"] for x in with_wemd], [x["wemd"] for x in with_wemd], label=label)
    return _finish(fig, axes, out)


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
        95 % confidence interval of that mean (Student t over the runs that have the round;
        no band where only one does).
    """
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), constrained_layout=True)
    for label, dirs in groups.items():
        keys = ("accuracy", "num_scheduled", "wemd")
        plot_mean_bands(axes, keys, dirs, f"{label} (n={len(dirs)})")
    return _finish(fig, axes, out)


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
    if args.mean:
        out = plot_mean_runs(group_by_label(args.result_dirs), args.out)
    else:
        out = plot_runs(args.result_dirs, args.out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
