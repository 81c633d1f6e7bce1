"""``fedcgd paper schedule-table``: Table II without training (docs/evidence.md)."""

from __future__ import annotations

import math
import sys
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from channel import Cell, CellConfig
from channel.report import PAPER_CIFAR10_MODEL_BITS
from experiments.analysis.statistics import mean_ci95
from experiments.analysis.tables import write_csv
from experiments.paper.settings import CIFAR10_CLASSES, CIFAR10_TRAIN_PER_CLASS, PAPER_CIFAR10
from experiments.run.progress import step_reporter
from fedcgd_config.settings import TaskSettings
from fedcgd_strategy.policies import POLICY_NAMES, Decision, PolicyContext, RoundInputs, make_policy
from fedcgd_task.partition import partition_indices

#: The paper's POC scheduled number in Table II, the target of ``--fit-poc``.
POC_TARGET_SCHEDULED = 13.71
#: Seed-stream tags keeping the random streams of one drop apart: "CHAN", "BATC", "SCOR", "POLI".
CHANNEL_STREAM, BATCH_STREAM, SCORE_STREAM, POLICY_STREAM = (
    0x4348414E, 0x42415443, 0x53434F52, 0x504F4C49,
)  # fmt: skip
#: Label-distribution modes of ``--label-dist``.
LABEL_DIST_MODES: tuple[str, ...] = ("batch", "local")

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def policy_stream_word(name: str) -> int:
    """The seed word of policy ``name``'s stream (CRC-32): other policies never shift it."""
    return zlib.crc32(name.encode("utf-8"))


@dataclass(frozen=True)
class TableSettings:
    """The simulation's settings (defaults: the paper's CIFAR-10 Table II setting).

    ``drops`` drops (seeds ``seed ..``); POC's V' (0: all available); ``label_dist``: the round's
    τ·b labels (``"batch"``) or the whole shard (``"local"``).
    """

    drops: int = 20
    rounds: int = 50
    seed: int = 0
    num_devices: int = PAPER_CIFAR10["num-devices"]
    num_classes: int = CIFAR10_CLASSES
    samples_per_class: int = CIFAR10_TRAIN_PER_CLASS
    shards_per_device: int = PAPER_CIFAR10["shards-per-device"]
    availability_prob: float = PAPER_CIFAR10["channel.availability-prob"]
    total_bandwidth_hz: float = PAPER_CIFAR10["channel.total-bandwidth-hz"]
    deadline_s: float = PAPER_CIFAR10["channel.deadline-s"]
    model_bits: float = float(PAPER_CIFAR10_MODEL_BITS)
    batch_size: int = PAPER_CIFAR10["batch-size"]
    local_steps: int = PAPER_CIFAR10["local-steps"]
    sigma_over_sqrt_b_g: float = 1.0
    poc_candidates: int = 0
    label_dist: str = "batch"
    pack_rule: str = "stop"

    def __post_init__(self) -> None:
        """Reject values the simulation cannot use, naming the field."""
        for name in ("drops", "rounds", "num_devices", "num_classes", "samples_per_class",
                     "shards_per_device", "batch_size", "local_steps"):  # fmt: skip
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        if self.seed < 0 or self.poc_candidates < 0:
            raise ValueError("seed and poc_candidates must be >= 0")
        if not (math.isfinite(sigma := self.sigma_over_sqrt_b_g) and sigma >= 0):
            raise ValueError(f"sigma_over_sqrt_b_g must be finite and >= 0; got {sigma}")
        if self.label_dist not in LABEL_DIST_MODES:
            raise ValueError(f"label_dist must be one of {LABEL_DIST_MODES}; got {self.label_dist}")


@dataclass(frozen=True)
class Drop:
    """One drop: the cell, each device's shard labels, local distributions, |D_v|."""

    cell: Cell
    local_labels: list[IntArray]
    local_dist: FloatArray
    num_examples: FloatArray


@dataclass(frozen=True)
class RoundResult:
    """One simulated round: the inputs every policy saw and each policy's decision (by label)."""

    drop: int
    round: int
    inputs: RoundInputs
    decisions: dict[str, Decision]


@dataclass(frozen=True)
class PolicySpec:
    """A policy to simulate: the results' ``label`` (``"poc@7"``), its ``name`` and POC's V'."""

    label: str
    name: str
    poc_candidates: int = 0


@dataclass(frozen=True)
class PolicyStats:
    """Per-drop means of one policy: scheduled number, WEMD; and the rounds with none scheduled."""

    scheduled: list[float]
    wemd: list[float]
    empty_rounds: int

    def summary(self) -> dict[str, float]:
        """Mean over the drops of both, each with its 95 % half-width (Student t)."""
        (sched, sched_ci), (wemd, wemd_ci) = mean_ci95(self.scheduled), mean_ci95(self.wemd)
        return {"mean_scheduled": sched, "scheduled_ci95": sched_ci, "mean_wemd": wemd,
                "wemd_ci95": wemd_ci}  # fmt: skip


def make_drop(settings: TableSettings, index: int, labels: IntArray) -> Drop:
    """Drop the devices, split the labels and build the cell of drop ``index``."""
    task = TaskSettings(
        seed=settings.seed + index, num_devices=settings.num_devices,
        dataset=PAPER_CIFAR10["dataset"], data_dir="", model=PAPER_CIFAR10["model"],
        partition=PAPER_CIFAR10["partition"], dirichlet_alpha=1.0,  # not read by shards
        shards_per_device=settings.shards_per_device,
        imbalance_ratio=PAPER_CIFAR10["imbalance-ratio"],
    )  # fmt: skip
    parts = partition_indices(task, labels)
    local_labels = [labels[p] for p in parts]
    counts = np.stack([np.bincount(y, minlength=settings.num_classes) for y in local_labels])
    sizes = counts.sum(axis=1).astype(np.float64)
    config = CellConfig(
        num_devices=settings.num_devices, availability_prob=settings.availability_prob,
        deadline_s=settings.deadline_s, total_bandwidth_hz=settings.total_bandwidth_hz,
    )  # fmt: skip
    cell = Cell(config, np.random.default_rng([settings.seed, index, CHANNEL_STREAM]))
    return Drop(cell, local_labels, counts / sizes[:, None], sizes)


def round_label_dist(
    drop: Drop, candidate: npt.NDArray[np.bool_], settings: TableSettings, rng: np.random.Generator
) -> FloatArray:
    """p_v of the round for every candidate (zero rows for the others), per ``label_dist``."""
    if settings.label_dist == "local":
        return np.where(candidate[:, None], drop.local_dist, 0.0)
    out = np.zeros_like(drop.local_dist)
    used = settings.local_steps * settings.batch_size  # τ·b labels
    for v in np.flatnonzero(candidate).tolist():
        shard = drop.local_labels[v]
        positions = rng.permutation(shard.size)[np.arange(used) % shard.size]
        out[v] = np.bincount(shard[positions], minlength=settings.num_classes) / used
    return out


def simulate_rounds(
    settings: TableSettings,
    specs: Sequence[PolicySpec],
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[RoundResult]:
    """Every round of every drop with each policy's decision; ``progress(done, drops)``."""
    labels = np.repeat(np.arange(settings.num_classes), settings.samples_per_class)
    target = np.full(settings.num_classes, 1.0 / settings.num_classes)
    sigma = settings.sigma_over_sqrt_b_g * math.sqrt(settings.batch_size)
    for d in range(settings.drops):
        if progress is not None:
            progress(d, settings.drops)
        drop = make_drop(settings, d, labels)
        context = PolicyContext(
            num_devices=settings.num_devices, num_classes=settings.num_classes, initial_g=1.0,
            pack_rule=settings.pack_rule,
        )  # fmt: skip
        policies = {  # fresh for each drop, so that Fed-CBS's counts live for one drop
            s.label: make_policy(s.name, replace(context, poc_candidates=s.poc_candidates))
            for s in specs
        }
        rngs = {
            s.label: np.random.default_rng(
                [settings.seed, d, POLICY_STREAM, policy_stream_word(s.name), s.poc_candidates]
            )
            for s in specs
        }
        batch_rng = np.random.default_rng([settings.seed, d, BATCH_STREAM])
        score_rng = np.random.default_rng([settings.seed, d, SCORE_STREAM])
        for r in range(settings.rounds):
            draw = drop.cell.draw_round(settings.model_bits)
            candidate = draw.available
            inputs = RoundInputs(
                candidate=candidate,
                label_dist=round_label_dist(drop, candidate, settings, batch_rng),
                num_examples=np.where(candidate, drop.num_examples, 0.0),
                sigma_v=np.full(settings.num_devices, sigma),
                min_bandwidth_hz=draw.min_bandwidth_hz, gain_lin=draw.gain_lin,
                total_bandwidth_hz=settings.total_bandwidth_hz, batch_size=settings.batch_size,
                target_dist=target, train_loss=score_rng.random(settings.num_devices),
                update_norm=score_rng.random(settings.num_devices), local_dist=drop.local_dist,
            )  # fmt: skip
            decisions = {
                label: policy.schedule(inputs, rngs[label]) for label, policy in policies.items()
            }
            yield RoundResult(d, r, inputs, decisions)
    if progress is not None:
        progress(settings.drops, settings.drops)


def simulate(
    settings: TableSettings,
    specs: Sequence[PolicySpec],
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, PolicyStats]:
    """Per-drop mean scheduled number and WEMD (rounds with a schedule) of every policy."""
    shape = (len(specs), settings.drops, settings.rounds)
    counts, wemds = np.zeros(shape), np.full(shape, np.nan)
    for res in simulate_rounds(settings, specs, progress):
        for i, spec in enumerate(specs):
            decision = res.decisions[spec.label]
            counts[i, res.drop, res.round] = decision.selected.sum()
            wemds[i, res.drop, res.round] = decision.wemd
    out = {}
    for i, spec in enumerate(specs):
        finite = np.isfinite(wemds[i])
        with np.errstate(invalid="ignore"):  # a drop without a schedule: NaN
            wemd = np.nansum(wemds[i], axis=1) / finite.sum(axis=1)
        out[spec.label] = PolicyStats(
            scheduled=counts[i].mean(axis=1).tolist(),
            wemd=wemd.tolist(),
            empty_rounds=int((~finite).sum()),
        )
    return out


def choose_poc_candidates(
    candidates: Sequence[int], means: Sequence[float], target: float = POC_TARGET_SCHEDULED
) -> int:
    """The V' whose mean scheduled number is nearest ``target`` (ties: the smaller V')."""
    scored = [(abs(m - target), int(v)) for v, m in zip(candidates, means, strict=True)]
    finite = [key for key in scored if math.isfinite(key[0])]
    if not finite:
        raise ValueError("no finite mean scheduled number to choose V' from")
    return min(finite)[1]


#: The paper's Table II (CIFAR-10, l = 1, r = 1, τ = 1: the only setting the table reports):
#: policy -> (name in the paper, avg. scheduled number, avg. WEMD), in the printed order.
PAPER_TABLE_II: dict[str, tuple[str, float, float]] = {
    "fedcgd-fscd-gc": ("FedCGD-FSCD-Gc", 10.10, 0.310),
    "fedcgd-fscd": ("FedCGD-FSCD", 10.20, 0.306), "fedcgd-gs": ("FedCGD-GS", 10.01, 0.311),
    "bc": ("BC", 17.67, 0.527), "bn2": ("BN", 17.39, 0.537), "poc": ("POC", 13.71, 0.621),
    "fedcbs": ("FCBS", 17.34, 0.536),
}  # fmt: skip
#: Policies of Table II, in the order of the printed table.
TABLE_POLICIES: tuple[str, ...] = tuple(PAPER_TABLE_II)
#: Columns of ``table.csv``.
TABLE_COLUMNS: tuple[str, ...] = (
    "policy", "paper_name", "mean_scheduled", "scheduled_ci95", "paper_scheduled", "mean_wemd",
    "wemd_ci95", "paper_wemd", "empty_rounds", "drops", "rounds", "poc_candidates",
    "sigma_over_sqrt_b_g", "label_dist",
)  # fmt: skip


def _ci(mean: float, ci: float, digits: int) -> str:
    return f"{mean:.{digits}f} ± " + (f"{ci:.{digits}f}" if math.isfinite(ci) else "n/a")


def _bars(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Bar chart: ours (with 95 % CI) beside the paper, scheduled number and WEMD."""
    from experiments.analysis.plot_runs import plt, save_figure

    x = np.arange(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    titles = {"scheduled": "Avg. scheduled number", "wemd": "Avg. WEMD"}
    for ax, (key, title) in zip(axes, titles.items(), strict=True):
        err = np.nan_to_num([float(r[f"{key}_ci95"]) for r in rows])
        ax.bar(x - 0.2, [r[f"mean_{key}"] for r in rows], 0.4, yerr=err, capsize=3,
               label="ours (95 % CI)")  # fmt: skip
        ax.bar(x + 0.2, [r[f"paper_{key}"] for r in rows], 0.4, label="paper Table II")
        ax.set_xticks(x, [r["policy"] for r in rows], rotation=30, ha="right")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    save_figure(fig, path)


def _fit_plot(rows: Sequence[Mapping[str, float]], chosen: int, path: Path) -> None:
    """POC's mean scheduled number against V', with the paper's 13.71 and the chosen V'."""
    from experiments.analysis.figures import POLICY_COLORS, count_ticks
    from experiments.analysis.plot_runs import plt, save_figure

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(
        [r["poc_candidates"] for r in rows],
        [r["mean_scheduled"] for r in rows],
        yerr=np.nan_to_num([r["scheduled_ci95"] for r in rows]),
        marker="o", ms=3, capsize=2, color=POLICY_COLORS["poc"], label="POC (95 % CI)",
    )  # fmt: skip
    ax.axhline(POC_TARGET_SCHEDULED, color="0.2", ls="--", label="paper POC 13.71")
    ax.axvline(chosen, color="0.5", ls=":", label=f"chosen V' = {chosen}")
    count_ticks(ax.xaxis, 0.0)  # V': a number of devices
    ax.set(xlabel="V' (POC candidates)", ylabel="avg. scheduled number")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def main(
    settings: TableSettings, policies_text: str, out: Path, *, fit_poc_max: int | None = None,
    quiet: bool = False,
) -> int:  # fmt: skip
    """``fedcgd paper schedule-table`` (``fit_poc_max``: POC's V' nearest 13.71 in 1..it first)."""
    policies = [p.strip() for p in policies_text.split(",") if p.strip()]
    if unknown := [p for p in policies if p not in POLICY_NAMES]:
        print(f"error: unknown policies {unknown}; allowed: {', '.join(POLICY_NAMES)}",
              file=sys.stderr)  # fmt: skip
        return 2
    out.mkdir(parents=True, exist_ok=True)
    if fit_poc_max is not None:
        scan = [PolicySpec(f"poc@{v}", "poc", v) for v in range(1, fit_poc_max + 1)]
        found = simulate(settings, scan, None if quiet else step_reporter("fit: drop"))
        fit = [{"poc_candidates": s.poc_candidates, **found[s.label].summary()} for s in scan]
        chosen = choose_poc_candidates(
            [int(r["poc_candidates"]) for r in fit], [r["mean_scheduled"] for r in fit]
        )
        print(f"POC V' scan (target: the paper's {POC_TARGET_SCHEDULED} scheduled)")
        for point in fit:
            mark = "  <- chosen" if point["poc_candidates"] == chosen else ""
            print(f"  V' = {point['poc_candidates']:>2}: "
                  f"{_ci(point['mean_scheduled'], point['scheduled_ci95'], 2)}{mark}")  # fmt: skip
        write_csv(out / "poc_fit.csv", fit)
        _fit_plot(fit, chosen, out / "poc_fit.png")
        settings = replace(settings, poc_candidates=chosen)
    specs = [PolicySpec(p, p, settings.poc_candidates if p == "poc" else 0) for p in policies]
    results = simulate(settings, specs, None if quiet else step_reporter("table: drop"))
    fields = asdict(settings)
    rows: list[dict[str, Any]] = []
    for policy, stats in results.items():
        name, scheduled, wemd = PAPER_TABLE_II.get(policy, (policy, math.nan, math.nan))
        row: dict[str, object] = {"policy": policy, "paper_name": name, **stats.summary()}
        row.update(paper_scheduled=scheduled, paper_wemd=wemd, empty_rounds=stats.empty_rounds)
        rows.append({k: row.get(k, fields.get(k)) for k in TABLE_COLUMNS})
    print(
        f"Table II (CIFAR-10, l = 1, r = 1, tau = {settings.local_steps}): {settings.drops} drops"
        f" x {settings.rounds} rounds, sigma/(sqrt(b) G) = {settings.sigma_over_sqrt_b_g}, POC "
        f"V' = {settings.poc_candidates or 'all available'}, p_v = {settings.label_dist}"
    )
    print(
        f"{'policy':<16} {'scheduled (ours)':>18} {'paper':>7}   {'WEMD (ours)':>15} {'paper':>7}"
    )
    for r in rows:
        print(
            f"{r['policy']:<16} {_ci(r['mean_scheduled'], r['scheduled_ci95'], 2):>18} "
            f"{r['paper_scheduled']:>7.2f}   {_ci(r['mean_wemd'], r['wemd_ci95'], 3):>15} "
            f"{r['paper_wemd']:>7.3f}"
        )
    write_csv(out / "table.csv", rows, TABLE_COLUMNS)
    _bars(rows, out / "table.png")
    print(f"wrote {out / 'table.csv'} and {out / 'table.png'}")
    return 0
