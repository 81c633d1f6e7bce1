"""Figure conventions: bands stay inside what a metric can be; few seeds are drawn run by run."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from experiments.figures import draw_group, metric, policy_style


def _band_y(ax: plt.Axes) -> np.ndarray:
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    return np.concatenate([path.vertices[:, 1] for path in band.get_paths()])


def test_accuracy_band_is_clipped_to_zero_one() -> None:
    # Round 1: 0.2, 0.9, 1.0 -> mean 0.7, sd 0.4359, t(0.975, 2) = 4.3027: half-width 1.083,
    # so the raw band would be [-0.383, 1.783]; clipped it is [0, 1].
    curves = [{1: 0.2, 2: 0.5}, {1: 0.9, 2: 0.5}, {1: 1.0, 2: 0.5}]
    fig, ax = plt.subplots()
    draw_group(ax, curves, "accuracy", "policy")
    y = _band_y(ax)
    assert y.min() == pytest.approx(0.0) and y.max() == pytest.approx(1.0)
    (line,) = ax.get_lines()
    assert list(line.get_ydata()) == pytest.approx([0.7, 0.5])
    plt.close(fig)


def test_count_band_stays_non_negative() -> None:
    curves = [{1: 0.0}, {1: 0.0}, {1: 6.0}]  # mean 2, half-width 4.3027 * 3.4641 / 1.732 = 8.6
    fig, ax = plt.subplots()
    draw_group(ax, curves, "num_scheduled", "bc")
    y = _band_y(ax)
    assert y.min() == pytest.approx(0.0)
    assert y.max() == pytest.approx(2.0 + 4.302653 * np.std([0, 0, 6], ddof=1) / np.sqrt(3))
    plt.close(fig)


def test_fewer_than_three_runs_are_drawn_one_by_one_without_a_band() -> None:
    curves = [{1: 0.1, 2: 0.3}, {1: 0.9, 2: 0.7}]
    fig, ax = plt.subplots()
    draw_group(ax, curves, "accuracy", "two seeds")
    lines = ax.get_lines()
    assert [list(line.get_ydata()) for line in lines] == [[0.1, 0.3], [0.9, 0.7]]
    assert lines[0].get_label() == "two seeds"
    assert lines[0].get_color() == lines[1].get_color()
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    plt.close(fig)


def test_labels_carry_units_and_fedcgd_stands_out() -> None:
    assert metric("accuracy").label.endswith("(fraction correct)")
    assert "(count)" in metric("num_scheduled").label
    assert (metric("wemd").low, metric("wemd").high) == (0.0, 2.0)
    assert policy_style("fedcgd-fscd")["linewidth"] > policy_style("bc")["linewidth"]
    assert policy_style("bc")["linestyle"] != policy_style("fedcgd-gs")["linestyle"]


def test_the_shared_legend_fits_inside_the_figure_with_long_names():
    """Long legend names (policy and sweep point) wrap into rows instead of running off."""
    import matplotlib.pyplot as plt

    from experiments.figures import legend_below

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), constrained_layout=True)
    for name in ("FedCGD-FSCD", "FedCGD-FSCD (Ĝ_c)", "FedCGD-GS"):
        for tau in (1, 5):
            axes[0].plot([0, 1], [0, tau], label=f"{name}, local-steps={tau}")
    legend_below(fig, axes[0])
    fig.canvas.draw()
    box = fig.legends[0].get_window_extent()
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width
    plt.close(fig)
