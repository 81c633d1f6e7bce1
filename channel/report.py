"""Channel report: statistics of simulated rounds and a figure of path loss and B* vs distance.

:func:`run_report` writes ``summary.json`` and ``channel.png`` (matplotlib, Agg) to a folder.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from channel.arrays import FloatArray
from channel.bandwidth import count_fit_cheapest_first
from channel.cell import Cell, CellConfig
from channel.pathloss import PATHLOSS_MODELS, db_to_linear

#: Parameters of the paper's CIFAR-10 CNN, for code without torch (a test checks the model).
PAPER_CIFAR10_CNN_PARAMS: int = 258_898
#: Bits per uploaded parameter (float32), docs/design.md, "Model size".
BITS_PER_PARAM: int = 32
#: Upload size D_w of the paper's CIFAR-10 CNN in bits.
PAPER_CIFAR10_MODEL_BITS: int = PAPER_CIFAR10_CNN_PARAMS * BITS_PER_PARAM
#: Quantiles of the finite minimum bandwidth reported, in percent.
QUANTILES_PERCENT: tuple[int, ...] = (5, 25, 50, 75, 95)

SUMMARY_FILE = "summary.json"
FIGURE_FILE = "channel.png"


def simulate_rounds(
    config: CellConfig, model_bits: float, rounds: int, seed: int
) -> dict[str, Any]:
    """Per round of a cell dropped with ``seed``: mean available and fitting devices, their
    infeasible and fitting shares, quantiles (kHz) of finite B* (None: no device)."""  # noqa: D205, D209
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    if seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    cell = Cell(config, np.random.default_rng(seed))
    draws = [cell.draw_round(model_bits) for _ in range(rounds)]
    demands: list[FloatArray] = [draw.min_bandwidth_hz[draw.available] for draw in draws]
    num_available = np.array([d.size for d in demands])
    num_fit = np.array([count_fit_cheapest_first(d, config.total_bandwidth_hz) for d in demands])
    finite = np.concatenate([d[np.isfinite(d)] for d in demands])
    total = int(num_available.sum())
    quantiles = None
    if finite.size:
        values_khz = np.percentile(finite, QUANTILES_PERCENT) / 1e3
        quantiles = {f"p{q}": float(v) for q, v in zip(QUANTILES_PERCENT, values_khz, strict=True)}
    return {
        "mean_available": float(num_available.mean()),
        "infeasible_share_of_available": (total - finite.size) / total if total else None,
        "min_bandwidth_khz_quantiles": quantiles,
        "mean_fit_cheapest_first": float(num_fit.mean()),
        "fit_share_of_available": float(num_fit.sum() / total) if total else None,
    }


def plot_channel(config: CellConfig, model_bits: float, path: Path) -> None:
    """A PNG of path loss and B* (zero shadowing, log scale, beside B) vs d2D, both models."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    distance_m = np.linspace(config.min_distance_m, config.radius_m, 400)
    figure, (ax_loss, ax_bw) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    styles = {"paper": "-", "tr38901": "--"}
    colours = {True: "tab:blue", False: "tab:red"}
    for model in PATHLOSS_MODELS:
        for los in (True, False):
            loss_db = config.pathloss_db(distance_m, los, model)
            label = f"{model}, {'LOS' if los else 'NLOS'}"
            style = {"linestyle": styles[model], "color": colours[los], "label": label}
            ax_loss.plot(distance_m, loss_db, **style)
            bandwidth = config.min_bandwidth_hz(model_bits, db_to_linear(-loss_db))
            shown_khz = np.where(np.isfinite(bandwidth), bandwidth / 1e3, np.nan)
            ax_bw.plot(distance_m, shown_khz, **style)
    ax_loss.set(xlabel="2D distance d2D [m]", ylabel="path loss [dB]", title="UMi-Street Canyon")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    ax_bw.axhline(
        config.total_bandwidth_hz / 1e3, color="black", linewidth=0.8, label="total bandwidth B"
    )
    ax_bw.set_yscale("log")
    ax_bw.set(
        xlabel="2D distance d2D [m]",
        ylabel="minimum bandwidth B* [kHz]",
        title=f"B*: D = {model_bits:,.0f} bit, d = {config.deadline_s:g} s, median shadowing",
    )
    ax_bw.legend()
    ax_bw.grid(alpha=0.3, which="both")
    figure.savefig(path, dpi=120)
    plt.close(figure)


def run_report(
    config: CellConfig, model_bits: float, rounds: int, seed: int, out_dir: str | Path
) -> dict[str, Any]:
    """Write and return the settings and :func:`simulate_rounds` (``summary.json``), and the
    figure (``channel.png``) in ``out_dir``."""  # noqa: D205, D209
    statistics = simulate_rounds(config, model_bits, rounds, seed)
    summary: dict[str, Any] = {
        "config": dataclasses.asdict(config),
        "model_bits": model_bits,
        "rounds": rounds,
        "seed": seed,
        **statistics,
    }
    out_path = Path(out_dir)
    out_path.mkdir(parents=True, exist_ok=True)
    (out_path / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    plot_channel(config, model_bits, out_path / FIGURE_FILE)
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """Human-readable lines of a :func:`run_report` summary."""
    config, infeasible = summary["config"], summary["infeasible_share_of_available"]
    fit_share, quantiles = summary["fit_share_of_available"], summary["min_bandwidth_khz_quantiles"]
    lines = [
        f"cell: V={config['num_devices']}, p_a={config['availability_prob']}, "
        f"model={config['pathloss_model']}, B={config['total_bandwidth_hz'] / 1e6:g} MHz, "
        f"deadline={config['deadline_s']:g} s, D={summary['model_bits']:,} bit, "
        f"{summary['rounds']} rounds, seed {summary['seed']}",
        f"mean available devices per round: {summary['mean_available']:.2f}",
        "share of available devices infeasible: "
        + ("n/a (none available)" if infeasible is None else f"{100 * infeasible:.2f} %"),
        "finite B* of available devices [kHz]: "
        + (
            "n/a (none)"
            if quantiles is None
            else ", ".join(f"{key}={value:,.1f}" for key, value in quantiles.items())
        ),
        f"mean devices fitting B cheapest-first: {summary['mean_fit_cheapest_first']:.2f}"
        + ("" if fit_share is None else f" ({100 * fit_share:.1f} % of available)"),
    ]
    return "\n".join(lines)
