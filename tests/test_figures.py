"""Figure conventions: bands stay inside what a metric can be; figures tell runs apart."""

from __future__ import annotations

import copy
import math
import zlib
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from fake_runs import write_run
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex

from experiments.analysis.figures import (
    BAND_LABEL,
    POLICY_COLORS,
    USER_COLORS,
    VARIANT_COLORS,
    draw_group,
    label_axis,
    legend_below,
    metric,
    policy_style,
    series_styles,
    settings_title,
    smoothing_window,
)
from experiments.analysis.plot_runs import (
    group_runs,
    plot_estimates,
    plot_mean_runs,
    plot_runs,
    plot_sweep,
    run_labels,
)
from fedcgd_strategy.policies.registry import POLICY_NAMES as BUILT_IN

OWN_POLICY = "examples.proportional_fair:ProportionalFair"
FSCD_COLOUR, BC_COLOUR = (to_hex(POLICY_COLORS[p]) for p in ("fedcgd-fscd", "bc"))


def _band_y(ax: plt.Axes) -> np.ndarray:
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    return np.concatenate([path.vertices[:, 1] for band in bands for path in band.get_paths()])


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every figure the plotting functions would save (drawn, not written)."""
    kept: list[Any] = []

    def keep(fig: Any, out: Path, dpi: int = 120) -> Path:
        fig.canvas.draw()
        kept.append(fig)
        return out

    monkeypatch.setattr("experiments.analysis.plot_runs.save_figure", keep)
    return kept


def _series(ax: Any) -> list[tuple[str, str, str]]:
    """(label, colour, line style) of every labelled line of ``ax``."""
    return [
        (line.get_label(), to_hex(line.get_color()), repr(line.get_linestyle()))
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    ]


def _visible_ticks(axis: Any) -> list[float]:
    lo, hi = sorted(axis.get_view_interval())
    return [t for t in axis.get_majorticklocs() if lo - 1e-9 <= t <= hi + 1e-9]


def _lines(rounds: int, scheduled: Any = 4, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"round": r, "accuracy": 0.1 * r, "num_scheduled": scheduled, "wemd": 0.2, **extra}
        for r in range(1, rounds + 1)
    ]


@pytest.mark.parametrize(
    ("curves", "name", "mean", "low", "high", "legend"),
    [
        # accuracy, round 1: 0.2, 0.9, 1.0 -> mean 0.7, sd 0.4359, t(0.975, 2) = 4.3027:
        # half-width 1.083, so the raw band would be [-0.383, 1.783]; clipped it is [0, 1]
        (
            [{1: 0.2, 2: 0.5}, {1: 0.9, 2: 0.5}, {1: 1.0, 2: 0.5}], "accuracy", [0.7, 0.5], 0.0,
            1.0, ["runs", BAND_LABEL],
        ),
        # a count: mean 2, half-width 4.3027 * 3.4641 / 1.732 = 8.6 -> [-6.6, 10.6], cut at 0
        ([{1: 0.0}, {1: 0.0}, {1: 6.0}], "num_scheduled", [2.0], 0.0, 2.0 + 4.302653 * 2, None),
        # sigma at round 1: 10 and 11 -> mean 10.5, sd 0.7071, t(0.975, 1) = 12.7062:
        # half-width 12.7062 * 0.7071 / sqrt(2) = 6.3531; round 2: no spread
        ([{1: 10.0, 2: 3.0}, {1: 11.0, 2: 3.0}], "sigma", [10.5, 3.0], 3.0, 16.853102, None),
        ([{1: 0.2, 2: 0.4}], "accuracy", [0.2, 0.4], None, None, ["runs"]),  # one run: no band
    ],
)  # fmt: skip
def test_a_band_is_the_t_interval_inside_what_the_metric_can_be(
    curves: list, name: str, mean: list, low: Any, high: Any, legend: Any
) -> None:
    fig, ax = plt.subplots()
    draw_group(ax, curves, name, "runs")
    (line,) = ax.get_lines()
    assert list(line.get_ydata()) == pytest.approx(mean)
    if low is None:
        assert not ax.collections
    else:
        y = _band_y(ax)
        assert (y.min(), y.max()) == pytest.approx((low, high), abs=1e-5)
        assert [c.get_gid() for c in ax.collections] == ["ci95-band"]
    if legend:
        legend_below(fig, ax)
        assert [t.get_text() for t in fig.legends[0].get_texts()] == legend
    plt.close(fig)


def test_metrics_are_labelled_and_each_policy_and_aggregator_gets_its_own_colour_and_style():
    assert metric("accuracy").label.endswith("(fraction correct)")
    assert "(count)" in metric("num_scheduled").label
    assert (metric("wemd").low, metric("wemd").high) == (0.0, 2.0)
    fig, ax = plt.subplots()  # a count that stays at zero never gets ticks below zero
    ax.plot([1, 2, 3], [0, 0, 0])
    label_axis(ax, "num_scheduled")
    fig.canvas.draw()
    assert ax.get_ylim() == (0.0, 1.0) and _visible_ticks(ax.yaxis) == [0.0, 1.0]
    plt.close(fig)
    assert policy_style("fedcgd-fscd")["linewidth"] > policy_style("bc")["linewidth"]
    assert policy_style("bc")["linestyle"] != policy_style("fedcgd-gs")["linestyle"]
    own = [f"lab.policies:Mine{i}" for i in range(9)] + ["/abs/fair.py:Fair"]
    styles = series_styles([*BUILT_IN, *own])
    assert len({(to_hex(s["color"]), repr(s["linestyle"])) for s in styles}) == len(styles)
    reordered = dict(zip(reversed(BUILT_IN), series_styles(list(reversed(BUILT_IN))), strict=True))
    for policy, style in zip(BUILT_IN, styles, strict=False):  # fixed, the same in every figure
        assert to_hex(style["color"]) == POLICY_COLORS[policy] and style == reordered[policy]
    # The case: a researcher's policy beside BC is not a second blue dashed line.
    bc, mine = series_styles(["bc", "lab.policies:Mine0"])
    assert (bc["color"], bc["linestyle"]) != (mine["color"], mine["linestyle"])
    assert to_hex(mine["color"]) not in POLICY_COLORS.values()
    # an own policy's colour follows its name, not its place among the figure's policies
    picks = {n: zlib.crc32(n.encode()) % len(USER_COLORS) for n in ("RoundRobin", "Fair")}
    assert picks["RoundRobin"] != picks["Fair"]  # so neither moves the other
    alone = series_styles(["bc", "RoundRobin"])[1]
    beside = series_styles(["fedcgd-fscd", "Fair", "RoundRobin", "bc"])[2]
    assert alone["color"] == beside["color"] == USER_COLORS[picks["RoundRobin"]]
    # two names that pick the same colour: the second by name takes the next free one
    same = [n for n in (f"P{i}" for i in range(100)) if zlib.crc32(n.encode()) % 6 == 0][:2]
    first, second = series_styles(sorted(same, reverse=True))[::-1]
    assert first["color"] == USER_COLORS[0] and second["color"] == USER_COLORS[1]
    # a policy's further aggregators take their own colours; a repeated series its own style
    styles = series_styles(
        ["fedcgd-fscd", "fedcgd-fscd", "bc", "fedcgd-fscd", "fedcgd-fscd"],
        ["", "FedAdam", "", "", "FedAdam"],
    )
    colours = [to_hex(style["color"]) for style in styles]
    assert colours == [FSCD_COLOUR, "#aec7e8", BC_COLOUR, FSCD_COLOUR, "#aec7e8"]
    assert len({(to_hex(s["color"]), repr(s["linestyle"])) for s in styles}) == 5


@pytest.mark.parametrize(
    ("runs", "labels", "colours"),
    [
        (  # two runs of one policy: the setting that differs; one colour, two line styles
            {
                "cmp/bc/seed-0": {"policy": "bc", "seed": 0},
                "cmp/bc/seed-1": {"policy": "bc", "seed": 1},
                "other": {"policy": "fedcgd-fscd"},
            },
            ["BC (best channel) · seed=0", "BC (best channel) · seed=1", "FedCGD-FSCD · seed=0"],
            [BC_COLOUR, BC_COLOUR, FSCD_COLOUR],
        ),
        (  # a policy's further aggregators take their own colours; where/how settings no label
            {
                "plain": {"policy": "fedcgd-fscd"},
                "adam": {"policy": "fedcgd-fscd", "aggregator": "FedAdam"},
                "median": {"policy": "fedcgd-fscd", "aggregator": "FedMedian", "local-steps": 5},
                "bc": {"policy": "bc", "device": "cpu", "checkpoint-every": 0},
            },
            [
                'FedCGD-FSCD · aggregator="", local_steps=10',
                "FedCGD-FSCD · aggregator=FedAdam, local_steps=10",
                "FedCGD-FSCD · aggregator=FedMedian, local_steps=5",
                'BC (best channel) · aggregator="", local_steps=10',
            ],
            [FSCD_COLOUR, *VARIANT_COLORS[:2], BC_COLOUR],
        ),
    ],
)
def test_plot_runs_labels_each_run_by_the_settings_that_differ(
    runs: dict[str, dict[str, Any]],
    labels: list[str],
    colours: list[str],
    tmp_path: Path,
    figures: list[Any],
) -> None:
    """Rounds and device counts get integer ticks, even when constant (rounds 1, 2; 4 always)."""
    dirs = [tmp_path / name for name in runs]
    for folder, overrides in zip(dirs, runs.values(), strict=True):
        write_run(folder, overrides, _lines(2, scheduled=4))
    plot_runs(dirs, tmp_path / "runs.png")
    (fig,) = figures
    series = _series(fig.axes[0])
    assert [label for label, _, _ in series] == labels
    assert [colour for _, colour, _ in series] == colours
    assert len({(colour, style) for _, colour, style in series}) == len(runs)
    assert [text.get_text() for text in fig.legends[0].get_texts()] == labels  # no band
    accuracy, scheduled, wemd = fig.axes
    for axis in (accuracy.xaxis, scheduled.xaxis, wemd.xaxis, scheduled.yaxis):
        ticks = _visible_ticks(axis)
        assert len(ticks) >= 2 and all(t == int(t) for t in ticks), ticks
    assert 4 in _visible_ticks(scheduled.yaxis)
    assert not all(t == int(t) for t in _visible_ticks(wemd.yaxis))  # not a count: untouched


def test_the_title_names_the_data_set_and_settings_and_labels_name_the_parts_that_differ():
    def config(seed: int, alpha: float = 0.1, tau: int = 1) -> dict[str, Any]:
        task = {"dataset": "mnist1d", "partition": "dirichlet", "dirichlet_alpha": alpha}
        task |= {"imbalance_ratio": 1.0, "num_devices": 64, "seed": seed}
        return {"task": task, "training": {"local_steps": tau}, "aggregator": ""}

    five = [config(s) for s in range(5)]
    assert settings_title(five) == "MNIST-1D · Dirichlet α = 0.1 · τ = 1 · V = 64 · 5 seeds"
    mixed = [config(0, tau=1), config(0, tau=5), None]  # a folder without config.json: skipped
    assert settings_title(mixed) == "MNIST-1D · Dirichlet α = 0.1 · τ = 1, 5 · V = 64 · seed 0"
    shards = config(3)
    shards["task"] |= {"partition": "shards", "shards_per_device": 1, "imbalance_ratio": 9.0}
    shards["aggregator"] = "FedMedian"
    assert settings_title([shards]) == (
        "MNIST-1D · 1 shard per device, r = 9 · τ = 1 · V = 64 · aggregator FedMedian · seed 3"
    )
    assert settings_title([None]) == "" and settings_title([{"task": "not a table"}]) == ""
    # a sweep lists each setting once with its values: r over 1, 3, 9; α over 0.1, 1, 10
    swept = [copy.deepcopy(shards) for _ in range(3)]
    for run, ratio in zip(swept, (1.0, 3.0, 9.0), strict=True):
        run["task"]["imbalance_ratio"] = ratio
    assert settings_title(swept) == (
        "MNIST-1D · 1 shard per device, r = 1, 3, 9 · τ = 1 · V = 64 · aggregator FedMedian"
        " · seed 3"
    )
    alphas = [config(0, alpha=a) for a in (0.1, 1.0, 10.0)]
    assert settings_title(alphas) == "MNIST-1D · Dirichlet α = 0.1, 1, 10 · τ = 1 · V = 64 · seed 0"
    hostile = config(0)
    hostile["task"] |= {"seed": [1, 2], "dataset": "pkg.data:" + "x" * 500, "num_devices": "64"}
    assert settings_title([hostile]) == (f"{'x' * 40} · Dirichlet α = 0.1 · τ = 1 · V = ? · seed ?")
    odd = config(0)
    odd["task"] |= {"partition": "shards", "shards_per_device": [1, 2], "imbalance_ratio": {}}
    title = settings_title([odd])
    assert title == "MNIST-1D · ? shards per device, r = ? · τ = 1 · V = 64 · seed 0"
    # runs sharing a folder name are labelled by the parts that differ
    dirs = [Path("/r/a/seed-0"), Path("/r/b/seed-0"), Path("/r/a/seed-0")]
    assert run_labels(dirs, ["poc"] * 3) == [
        "POC (power of choice) · seed-0 #1",
        "POC (power of choice) · b/seed-0",
        "POC (power of choice) · seed-0 #2",
    ]
    assert run_labels(dirs[:2], ["poc", "bc"]) == ["POC (power of choice)", "BC (best channel)"]


@pytest.mark.parametrize(
    ("estimates", "key", "panel"), [(False, "num_scheduled", 1), (True, "sigma", 0)]
)
def test_noisy_panels_draw_the_moving_average_over_the_faint_raw_line(
    estimates: bool, key: str, panel: int, tmp_path: Path, figures: list[Any]
) -> None:
    """Devices per round in the run figure, σ̂ in ``estimates.png``: averaged over 3 rounds."""
    assert [smoothing_window(n) for n in (10, 30, 400, 1500)] == [1, 3, 21, 75]
    raw = [3.0, 9.0, 6.0, 12.0, 0.0] * 6  # 30 rounds: window 3; spikes every few rounds
    folder = tmp_path / "fedcgd-fscd" / "seed-0"
    lines = [{**x, key: raw[x["round"] - 1]} for x in _lines(30, class_gradient_used=2.0)]
    write_run(folder, {"policy": "fedcgd-fscd"}, lines)
    if estimates:
        plot_estimates({("default", "fedcgd-fscd"): [folder]}, tmp_path / "estimates.png")
    else:
        plot_runs([folder], tmp_path / "r.png")
    ax = figures[0].axes[panel]
    (line,) = [x for x in ax.get_lines() if not x.get_label().startswith("_")]
    (faint,) = [x for x in ax.get_lines() if x.get_label().startswith("_")]
    assert list(faint.get_ydata()) == raw and faint.get_alpha() < 0.5
    assert "moving average over 3 rounds" in ax.get_title()
    # the centred mean over 3 rounds, of 2 at the ends, by hand
    inner = [sum(raw[i - 1 : i + 2]) / 3 for i in range(1, len(raw) - 1)]
    expected = [(raw[0] + raw[1]) / 2, *inner, (raw[-2] + raw[-1]) / 2]
    assert list(line.get_ydata()) == pytest.approx(expected)
    if not estimates:  # accuracy is not smoothed
        (accuracy,) = figures[0].axes[0].get_lines()
        assert list(accuracy.get_ydata()) == pytest.approx([0.1 * r for r in range(1, 31)])


def test_estimates_of_each_variant_and_sweep_point_are_drawn_apart_and_the_sweep_figure(
    tmp_path: Path, figures: list[Any]
) -> None:
    groups = {}
    for tau in (1, 5):
        for policy in ("fedcgd-fscd", "fedcgd-gs", "fedcgd-fscd-gc", "bc"):
            folder = tmp_path / f"local-steps={tau}" / policy / "seed-0"
            lines = _lines(3, sigma=1.0, class_gradient_used=1.0)
            write_run(folder, {"policy": policy, "local-steps": tau}, lines)
            groups[(f"local-steps={tau}", policy)] = [folder]
    plot_estimates(groups, tmp_path / "estimates.png")
    (fig,) = figures
    series = _series(fig.axes[0])
    assert len(series) == 6  # FedCGD only
    assert len({(colour, style) for _, colour, style in series}) == 6
    assert "τ = 1, 5" in fig.get_suptitle()
    # long legend names (policy and sweep point) wrap into rows instead of running off
    assert series[1][0] == "FedCGD-FSCD, local-steps=5"
    box = fig.legends[0].get_window_extent()
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width
    # the sweep figure: error bars and the Kaplan-Meier median
    rows = [  # two seeds: bars; under half reached the target at τ = 5: no point there
        {"sweep": f"local-steps={t}", "policy": "bc", "n_seeds": 2, "final_accuracy_mean": m}
        | {"final_accuracy_ci95": 0.05, "rounds_to_target_km_median": km}
        for t, m, km in ((1, 0.5, 630.0), (5, 0.6, math.inf))
    ]
    metrics = ["final_accuracy", "rounds_to_target"]
    plot_sweep(rows, {"local-steps": [1, 5]}, metrics, tmp_path / "s.png", "T")
    _, fig = figures
    accuracy, rounds = fig.axes
    assert "95 % CI" in accuracy.get_title() and fig.get_suptitle() == "T"
    (bars,) = accuracy.containers[0].lines[2]
    assert [seg[1][1] - seg[0][1] for seg in bars.get_segments()] == pytest.approx([0.1, 0.1])
    assert "Kaplan–Meier median" in rounds.get_title()
    y = rounds.containers[0].lines[0].get_ydata()
    assert y[0] == 630 and math.isnan(y[1])


def test_mean_curves_group_by_settings_besides_the_seed_bands_can_go_and_policies_apart(
    tmp_path: Path, figures: list[Any]
) -> None:
    """Seeds scheduling 0, 40 and 40 of V = 40 devices: mean 26.7, half-width t(0.975, 2) · 23.1
    / √3 = 57.4, so the raw band spans −30.7 to 84.1; it is cut at 0 and at V = 40."""
    dirs = []
    for aggregator in ("", "FedAdam"):
        for seed in (0, 1, 2):
            folder = tmp_path / (aggregator or "fedavg") / f"seed-{seed}"
            overrides = {"aggregator": aggregator, "seed": seed, "num-devices": 40}
            write_run(folder, overrides, _lines(3, 40 if seed else 0))
            dirs.append(folder)
    groups = group_runs(dirs)
    assert list(groups) == [("fedcgd-fscd", 'aggregator=""'), ("fedcgd-fscd", "aggregator=FedAdam")]
    assert [len(g) for g in groups.values()] == [3, 3]
    plot_mean_runs(groups, tmp_path / "bands.png")
    plot_mean_runs(groups, tmp_path / "lines.png", bands=False)
    with_bands, lines_only = figures
    assert [label for label, _, _ in _series(with_bands.axes[0])] == [
        'FedCGD-FSCD · aggregator="" (n=3)',
        "FedCGD-FSCD · aggregator=FedAdam (n=3)",
    ]
    assert len(with_bands.axes[0].collections) == 2  # a band per group
    assert with_bands.axes[1].get_ylabel().startswith("scheduled devices")
    assert (_band_y(with_bands.axes[1]).min(), _band_y(with_bands.axes[1]).max()) == (0.0, 40.0)
    assert len(lines_only.axes[0].collections) == 0
    assert _series(lines_only.axes[0]) == _series(with_bands.axes[0])
    # a comparison figure draws own policies apart and is titled from the configs
    shared = {"dataset": "digits", "partition": "dirichlet", "dirichlet-alpha": 0.3}
    shared |= {"local-steps": 5, "num-devices": 12}
    groups: dict[str, list[Path]] = {}
    for policy in ("bc", OWN_POLICY, "fedcgd-fscd"):
        for seed in (0, 1, 2):
            folder = tmp_path / policy.rsplit(":", 1)[-1] / f"seed-{seed}"
            write_run(folder, {**shared, "policy": policy, "seed": seed}, _lines(4))
            groups.setdefault(policy, []).append(folder)
    plot_mean_runs(groups, tmp_path / "mean.png")
    _, _, fig = figures
    for ax in fig.axes:
        assert len({(colour, style) for _, colour, style in _series(ax)}) == 3
    assert [label for label, _, _ in _series(fig.axes[0])] == [
        "FedCGD-FSCD (n=3)",
        "BC (best channel) (n=3)",
        "ProportionalFair (n=3)",
    ]
    assert fig.get_suptitle() == "digits · Dirichlet α = 0.3 · τ = 5 · V = 12 · 3 seeds"
