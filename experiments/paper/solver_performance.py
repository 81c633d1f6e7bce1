"""The paper's figure "Performance of proposed algorithms" (P1 solvers; docs/evidence.md)."""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from channel import Cell, CellConfig
from channel.report import PAPER_CIFAR10_MODEL_BITS
from experiments.analysis.tables import write_csv
from experiments.paper.settings import CIFAR10_CLASSES, PAPER_CIFAR10
from experiments.run.progress import step_reporter
from fedcgd_strategy import SchedulingProblem, solve
from fedcgd_strategy.solvers.exact import exact_schedule

#: Line style of each σ/(√b G) ratio's thin curve in panel (b), in the order of the ratios.
RATIO_LINESTYLES = (":", "-.", "--", (0, (3, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 4)))

#: Model size D_w in bit (the paper's CIFAR-10 CNN), classes C and batch size b.
MODEL_BITS = PAPER_CIFAR10_MODEL_BITS
NUM_CLASSES = CIFAR10_CLASSES
BATCH_SIZE: int = PAPER_CIFAR10["batch-size"]
CLASS_GRADIENT = 1.0
HEURISTICS = ("gs", "fscd", "cd")
PAPER_RELATIVE_ERROR = {"gs": 0.0516, "fscd": 0.0019}

METHOD_FIELDS = (
    "objective", "iterations", "rel_error", "rel_error_upper", "num_selected", "time_s",
)  # fmt: skip
#: The columns of ``rows.csv``.
ROW_FIELDS = [
    "num_devices", "alpha", "ratio", "instance", "sigma", "num_feasible", "opt_objective",
    "opt_lower_bound", "opt_proven", "opt_num_selected", "exact_iterations", "exact_time_s",
] + [f"{m}_{k}" for m in HEURISTICS for k in METHOD_FIELDS]  # fmt: skip


def make_instance(
    num_devices: int, alpha: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Label mixes ``p_v ~ Dir(alpha p)`` ([V, C]) and ``B*`` in Hz ([V]); all are candidates."""
    target = np.full(NUM_CLASSES, 1.0 / NUM_CLASSES)
    labels = rng.dirichlet(alpha * target, size=num_devices)
    labels = labels / labels.sum(axis=1, keepdims=True)
    cell = Cell(CellConfig(num_devices=num_devices), rng)
    draw = cell.draw_round(MODEL_BITS)
    return labels, np.asarray(draw.min_bandwidth_hz, dtype=float)


def instance_problem(
    labels: np.ndarray, bandwidth_hz: np.ndarray, ratio: float
) -> SchedulingProblem:
    """P1 of one instance: uniform target, Table I budget, ``sigma = ratio sqrt(b) G``."""
    return SchedulingProblem(
        labels,
        np.full(NUM_CLASSES, 1.0 / NUM_CLASSES),
        bandwidth_hz,
        CellConfig().total_bandwidth_hz,
        ratio * np.sqrt(BATCH_SIZE) * CLASS_GRADIENT,
        CLASS_GRADIENT,
        BATCH_SIZE,
    )


def relative_error(objective: float, reference: float) -> float:
    """``(objective - reference) / reference``; NaN when the reference is not positive/finite."""
    if not np.isfinite(reference) or reference <= 0 or not np.isfinite(objective):
        return float("nan")
    return (objective - reference) / reference


Row = dict[str, float | int | bool]


def run(
    num_devices_list: Sequence[int],
    alphas: Sequence[float],
    ratios: Sequence[float],
    instances: int,
    seed: int,
    milp_time_limit_s: float | None,
) -> list[Row]:
    """Solve every instance with every method and return one row per (instance, ratio)."""
    rows: list[Row] = []
    cases = list(itertools.product(num_devices_list, enumerate(alphas), range(instances)))
    report = step_reporter("instances")
    for done, (num_devices, (alpha_index, alpha), instance) in enumerate(cases):
        report(done, len(cases))
        rng = np.random.default_rng([seed, num_devices, alpha_index, instance])
        labels, bandwidth_hz = make_instance(num_devices, alpha, rng)
        for ratio in ratios:
            problem = instance_problem(labels, bandwidth_hz, ratio)
            start = time.perf_counter()
            exact = exact_schedule(problem, milp_time_limit_s=milp_time_limit_s)
            row: Row = {
                "num_devices": num_devices, "alpha": alpha, "ratio": ratio,
                "instance": instance, "sigma": problem.sigma,
                "num_feasible": int(problem.feasible.sum()), "opt_objective": exact.objective,
                "opt_lower_bound": exact.lower_bound,
                "opt_proven": bool(exact.lower_bound >= exact.objective * (1 - 1e-9)),
                "opt_num_selected": exact.num_selected, "exact_iterations": exact.iterations,
                "exact_time_s": time.perf_counter() - start,
            }  # fmt: skip
            cd_rng = np.random.default_rng([seed, num_devices, alpha_index, instance, 1])
            for method in HEURISTICS:
                start = time.perf_counter()
                result = solve(problem, method, rng=cd_rng)
                seconds = time.perf_counter() - start
                values = (
                    result.objective, result.iterations,
                    relative_error(result.objective, exact.objective),
                    relative_error(result.objective, exact.lower_bound),
                    result.num_selected, seconds,
                )  # fmt: skip
                row.update(zip((f"{method}_{k}" for k in METHOD_FIELDS), values, strict=True))
            rows.append(row)
    report(len(cases), len(cases))
    return rows


def summarise(rows: Sequence[Row]) -> list[dict[str, float | int | str]]:
    """Average iterations and relative errors per (V, ratio, method), plus ratio = "all"."""
    out: list[dict[str, float | int | str]] = []
    ratios: list[float | str] = [*sorted({float(r["ratio"]) for r in rows}), "all"]
    for num_devices, ratio in itertools.product(
        sorted({int(r["num_devices"]) for r in rows}), ratios
    ):
        group = [
            r for r in rows if r["num_devices"] == num_devices and ratio in ("all", r["ratio"])
        ]
        for method in HEURISTICS:

            def values(key: str) -> list[float]:
                return [float(r[f"{method}_{key}"]) for r in group]  # noqa: B023

            out.append({
                "num_devices": num_devices, "ratio": ratio, "method": method,
                "instances": len(group), "mean_iterations": float(np.mean(values("iterations"))),
                "mean_rel_error": float(np.nanmean(values("rel_error"))),
                "max_rel_error": float(np.nanmax(values("rel_error"))),
                "mean_rel_error_upper": float(np.nanmean(values("rel_error_upper"))),
                "proven_fraction": float(np.mean([bool(r["opt_proven"]) for r in group])),
            })  # fmt: skip
    return out


def figure_title(alphas: Sequence[float], instances: int) -> str:
    """The settings behind the figure, in one line."""
    listed = ", ".join(f"{a:g}" for a in alphas)
    return (
        f"P1 instances: UMi uplinks, CIFAR-10 CNN ({MODEL_BITS / 32:,.0f} × 32 bit), deadline 2 s"
        f" · Dirichlet α = {listed} · {instances} per (V, α)"
    )


def plot(
    summary: Sequence[dict[str, float | int | str]], paths: Sequence[Path], title: str = ""
) -> None:
    """(a) average iterations, (b) average relative error (a thin line per ratio), versus V."""
    from experiments.analysis.figures import POLICY_COLORS, count_ticks
    from experiments.analysis.plot_runs import plt, save_figure

    fig, (ax_it, ax_err) = plt.subplots(1, 2, figsize=(11, 3.8))
    ratios = sorted({r["ratio"] for r in summary if r["ratio"] != "all"}, key=float)

    def curve(method: str, ratio: object, key: str, scale: float = 1) -> tuple[list, list]:
        rows = [r for r in summary if r["method"] == method and r["ratio"] == ratio]
        return [r["num_devices"] for r in rows], [scale * float(r[key]) for r in rows]

    for method in HEURISTICS:
        color, name = POLICY_COLORS[f"fedcgd-{method}"], method.upper()
        ax_it.plot(*curve(method, "all", "mean_iterations"), "o-", color=color, label=name)
        error = curve(method, "all", "mean_rel_error", 100)
        ax_err.plot(*error, "o-", color=color, label=f"{name} (all ratios)")
        for ratio, style in zip(ratios, RATIO_LINESTYLES, strict=False):
            x, y = curve(method, ratio, "mean_rel_error", 100)
            ax_err.plot(x, y, linestyle=style, color=color, alpha=0.6, linewidth=1)
    for ratio, key in zip(ratios, RATIO_LINESTYLES, strict=False):  # legend keys, grey
        ax_err.plot([], [], linestyle=key, color="0.4", linewidth=1, label=f"σ/(√b G) = {ratio}")
    ax_it.set(ylabel="average iterations (count)", title="(a) solver iterations")
    ax_err.set(ylabel="average relative error (%)", title="(b) objective above the exact optimum")
    ax_err.set_yscale("symlog", linthresh=0.1)
    ax_it.legend(fontsize=9)
    ax_err.legend(fontsize=8, title="solid: mean over all ratios; thin: one ratio",
                  title_fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))  # fmt: skip
    sizes = sorted({int(r["num_devices"]) for r in summary})
    for ax in (ax_it, ax_err):
        ax.set_xlabel("number of devices V")
        ax.grid(alpha=0.3)
        count_ticks(ax.xaxis, 0.0)  # V: a number of devices
        if len(sizes) <= 12:
            ax.set_xticks(sizes)  # the swept V, not round numbers between them
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, paths[0], dpi=150)
    for path in paths[1:]:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(paths[0], path)


def main(
    out: Path,
    instances: int,
    seed: int,
    num_devices: list[int],
    alphas: list[float],
    ratios: list[float],
    milp_time_limit_s: float,
    docs_png: str,
) -> int:
    """``fedcgd paper solver-performance``: write ``rows.csv``, ``summary.csv`` and the figure."""
    limit = milp_time_limit_s if milp_time_limit_s > 0 else None
    rows = run(num_devices, alphas, ratios, instances, seed, limit)
    summary = summarise(rows)
    write_csv(out / "rows.csv", rows)
    write_csv(out / "summary.csv", summary)
    paths = [out / "solver_performance.png"]
    if docs_png:
        paths.append(Path(docs_png))
    plot(summary, paths, figure_title(alphas, instances))
    print(f"{'V':>4} {'ratio':>6} {'method':>6} {'iters':>7} {'rel err %':>10} {'<= %':>8}")
    for r in summary:
        print(
            f"{r['num_devices']:>4} {r['ratio']!s:>6} {r['method']:>6} "
            f"{float(r['mean_iterations']):7.1f} {100 * float(r['mean_rel_error']):10.3f} "
            f"{100 * float(r['mean_rel_error_upper']):8.3f}"
        )
    for method, paper in PAPER_RELATIVE_ERROR.items():
        overall = [r for r in summary if r["method"] == method and r["ratio"] == "all"]
        worst = max(float(r["mean_rel_error"]) for r in overall)
        print(f"{method}: largest mean relative error over V {100 * worst:.3f} % (paper "
              f"{100 * paper:.2f} %)")  # fmt: skip
    written = [out / "rows.csv", out / "summary.csv", *paths]
    print("wrote " + ", ".join(map(str, written)))
    return 0
