"""Table II's "scheduled number" and "WEMD" columns from labels and the channel alone.

``python -m experiments.schedule_table [--drops 20 --rounds 50 --out results/schedule_table]``
reproduces the two scheduling columns of the paper's Table II ("Performance of baselines":
CIFAR-10, sort-and-partition with l = 1 shard per device, r = 1, τ = 1) for every policy, in
seconds, without CIFAR images, training or a GPU. Every policy sees the same devices, the same
channel draws and the same label histograms (common random numbers), and is called exactly as
the Flower strategy calls it: :func:`fedcgd_strategy.policies.registry.make_policy` builds it,
:class:`~fedcgd_strategy.policies.RoundInputs` carries the round, ``policy.schedule(inputs, rng)``
returns the :class:`~fedcgd_strategy.policies.Decision` whose ``selected`` and plain ``wemd``
(Σ_c |p̄_c − p_c|) are recorded.

Settings (paper Section V and Table I; docs/design.md, "Paper settings")
------------------------------------------------------------------------
The defaults of :class:`TableSettings` are :data:`experiments.paper_settings.PAPER_CIFAR10`.

* Labels: CIFAR-10's training-label layout, 10 classes × 5,000 labels (``np.repeat``, class
  after class; no images). The split is the app's own
  :func:`fedcgd_task.partition.partition_indices` (sort-and-partition, l = 1, r = 1) seeded with the
  drop's seed, so drop ``d`` gives the devices a run with ``seed = --seed + d`` would give
  (up to the order of CIFAR's labels inside the file, which only decides which 16 surplus
  samples are dropped). With V = 64 each device holds one shard of 781 labels; 6.4 shards per
  class, so some shards straddle two classes.
* Channel: one :class:`channel.Cell` per drop (V, p_a, B and the deadline of the setting, the
  other Table I values are the defaults of :class:`channel.CellConfig`); ``draw_round`` every
  round with the paper CNN's size, :data:`channel.report.PAPER_CIFAR10_MODEL_BITS`
  (docs/design.md, "Model size").
  Candidates are the available devices (infeasible ones included: no policy takes them).
* ``label_dist`` (p_v of the round): by default (``--label-dist batch``) the histogram of the
  τ·b = 32 labels the device would train on this round, drawn from its shard as
  :func:`fedcgd_task.training.local_batches` draws them (a seeded permutation of the shard read
  cyclically). This is what the app's devices report and what Decision.wemd, hence the logged
  WEMD, is evaluated on, so it is the quantity comparable with the paper's "Avg. WEMD".
  ``--label-dist local`` uses the whole local distribution instead (a noiseless variant; with
  l = 1 the two differ only on the shards that straddle two classes).
* ``local_dist`` (Fed-CBS's QCID): the whole local class distribution; ``num_examples`` |D_v|.
  The target p is uniform (CIFAR-10 is balanced).
* FedCGD's σ̂ and Ĝ: there is no training, so Ĝ stays at ``initial_g = 1`` (``observe_uploads``
  is never called) and every candidate reports ``sigma_v = ratio × √b`` with ratio
  ``--sigma-over-sqrt-b-g`` (default 1.0). Then σ̂ = ratio·√b and P1's objective is
  ratio / √|S| + Σ_c |p̄_c − p_c|: the ratio alone sets the trade-off, which is why it is the one
  knob. Consequence: FedCGD-FSCD-Gc (Ĝ_c all 1) schedules exactly as FedCGD-FSCD here; the paper's
  differences between them come from the estimated Ĝ_c.
* BN2 / POC: their scores (update norm, accumulated loss) exist only after training. They are
  replaced by i.i.d. Uniform(0, 1) scores per device and round from a seeded stream, independent
  of the channel and the labels; this matches the property that matters for the count, namely
  that the ranking ignores the channel. POC draws V' = ``--poc-candidates`` of the available
  devices (0 = all). Best effort stops at the first device that does not fit
  (docs/design.md, "Best effort").
* Fed-CBS: one policy object per drop, so its selection counts persist over the drop's rounds.
* Random streams: each drop's channel, batches, scores and every policy's own stream are
  seeded apart; a policy's stream is keyed by its name (:func:`policy_stream_word`), so adding
  a policy leaves the others' numbers unchanged.

Statistics: per drop, the mean over rounds of the number scheduled (rounds with no candidate
count as 0) and of the WEMD (over rounds with a non-empty schedule); the table gives the mean of
the per-drop means and the 95 % Student-t half-width over drops.

``--fit-poc`` scans V' = 1 .. ``--fit-max`` (30) and picks the V' whose mean scheduled number is
nearest the paper's POC value 13.71 (ties: the smaller V'); it writes ``poc_fit.csv`` /
``poc_fit.png`` and then builds the table with that V'. Neighbouring V' differ by about 0.5
scheduled devices there, so few drops cannot separate them reliably (10 drops pick 16, 20 and
100 drops pick 17): the presets' value came from ``--fit-poc --policies poc --drops 100``.

Outputs under ``--out``: ``table.csv``, ``table.png`` (and ``poc_fit.*``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from channel import Cell, CellConfig
from channel.report import PAPER_CIFAR10_MODEL_BITS
from experiments.paper_settings import CIFAR10_CLASSES, CIFAR10_TRAIN_PER_CLASS, PAPER_CIFAR10
from experiments.statistics import mean_ci95
from experiments.tables import write_csv
from fedcgd_strategy.policies import (
    POLICY_NAMES,
    Decision,
    Policy,
    PolicyContext,
    RoundInputs,
    make_policy,
)
from fedcgd_task.partition import partition_indices
from fedcgd_task.settings import TaskSettings

#: The paper's POC scheduled number in Table II, the target of ``--fit-poc``.
POC_TARGET_SCHEDULED = 13.71

#: Policies of Table II, in the order of the printed table.
TABLE_POLICIES: tuple[str, ...] = (
    "fedcgd-fscd-gc",
    "fedcgd-fscd",
    "fedcgd-gs",
    "bc",
    "bn2",
    "poc",
    "fedcbs",
)

#: The paper's Table II (CIFAR-10, l = 1, r = 1, τ = 1: the only setting the table reports):
#: policy -> (name in the paper, avg. scheduled number, avg. WEMD).
PAPER_TABLE_II: dict[str, tuple[str, float, float]] = {
    "fedcgd-fscd-gc": ("FedCGD-FSCD-Gc", 10.10, 0.310),
    "fedcgd-fscd": ("FedCGD-FSCD", 10.20, 0.306),
    "fedcgd-gs": ("FedCGD-GS", 10.01, 0.311),
    "bc": ("BC", 17.67, 0.527),
    "bn2": ("BN", 17.39, 0.537),
    "poc": ("POC", 13.71, 0.621),
    "fedcbs": ("FCBS", 17.34, 0.536),
}

#: Columns of ``table.csv``.
TABLE_COLUMNS: tuple[str, ...] = (
    "policy",
    "paper_name",
    "mean_scheduled",
    "scheduled_ci95",
    "paper_scheduled",
    "mean_wemd",
    "wemd_ci95",
    "paper_wemd",
    "empty_rounds",
    "drops",
    "rounds",
    "poc_candidates",
    "sigma_over_sqrt_b_g",
    "label_dist",
)
#: Columns of ``poc_fit.csv``.
FIT_COLUMNS: tuple[str, ...] = ("poc_candidates", "mean_scheduled", "scheduled_ci95", "mean_wemd")

#: Seed-stream tags (ASCII codes), keeping the random streams of one drop apart.
CHANNEL_STREAM = 0x4348414E  # "CHAN"
BATCH_STREAM = 0x42415443  # "BATC"
SCORE_STREAM = 0x53434F52  # "SCOR"
POLICY_STREAM = 0x504F4C49  # "POLI"
#: Label-distribution modes of ``--label-dist``.
LABEL_DIST_MODES: tuple[str, ...] = ("batch", "local")

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def policy_stream_word(name: str) -> int:
    """The seed word of policy ``name``'s random stream: CRC-32 of the name's UTF-8 bytes.

    A policy's stream (POC's candidate draw, Fed-CBS's sampling, ``fedcgd-cd``'s random start)
    is seeded with ``[seed, drop, POLICY_STREAM, policy_stream_word(name), poc_candidates]``,
    so it depends on the policy's own name only: adding, removing or reordering policies leaves
    every other policy's numbers unchanged.

    Parameters
    ----------
    name : str
        The policy name given to :func:`make_policy` (e.g. ``"poc"``).

    Returns
    -------
    int
        An unsigned 32-bit word.

    """
    return zlib.crc32(name.encode("utf-8"))


@dataclass(frozen=True)
class TableSettings:
    """Settings of the simulation (defaults: the paper's CIFAR-10 Table II setting).

    Attributes
    ----------
    drops : int
        Number of independent drops (seeds ``seed .. seed + drops - 1``): device positions,
        partition and channel.
    rounds : int
        Rounds per drop.
    seed : int
        Base seed.
    num_devices : int
        V.
    num_classes : int
        C.
    samples_per_class : int
        Training labels per class (CIFAR-10: 5,000).
    shards_per_device : int
        l of the sort-and-partition split.
    availability_prob : float
        p_a.
    total_bandwidth_hz : float
        B in Hz.
    deadline_s : float
        Upload deadline in s.
    model_bits : float
        D_w in bits.
    batch_size : int
        b.
    local_steps : int
        τ.
    sigma_over_sqrt_b_g : float
        σ̂ / (√b Ĝ) of every FedCGD round (Ĝ = 1).
    poc_candidates : int
        POC's V' (0 = all available).
    label_dist : str
        ``"batch"`` (histogram of the round's τ·b labels) or ``"local"`` (whole shard).
    pack_rule : str
        Best-effort rule of the baselines (``"stop"`` or ``"skip"``).

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
        counts = ("drops", "rounds", "num_devices", "num_classes", "samples_per_class")
        for name in (*counts, "shards_per_device", "batch_size", "local_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        if self.seed < 0 or self.poc_candidates < 0:
            raise ValueError("seed and poc_candidates must be >= 0")
        if not (math.isfinite(self.sigma_over_sqrt_b_g) and self.sigma_over_sqrt_b_g >= 0):
            raise ValueError(
                f"sigma_over_sqrt_b_g must be finite and >= 0; got {self.sigma_over_sqrt_b_g}"
            )
        if self.label_dist not in LABEL_DIST_MODES:
            raise ValueError(f"label_dist must be one of {LABEL_DIST_MODES}; got {self.label_dist}")

    @property
    def samples_per_round(self) -> int:
        """τ·b, the number of labels a device uses in a round."""
        return self.local_steps * self.batch_size


@dataclass(frozen=True)
class Drop:
    """One drop: the cell, the devices' shards and the random streams of its rounds.

    Attributes
    ----------
    index : int
        Drop number d (seed ``settings.seed + d``).
    cell : Cell
        Device positions and the per-round channel.
    local_labels : list of int arrays
        Labels of each device's shard.
    local_dist : float[V, C]
        Whole local class distributions.
    num_examples : float[V]
        |D_v|.

    """

    index: int
    cell: Cell
    local_labels: list[IntArray]
    local_dist: FloatArray
    num_examples: FloatArray


@dataclass(frozen=True)
class RoundResult:
    """One simulated round: the inputs every policy saw and each policy's decision.

    Attributes
    ----------
    drop, round : int
        Drop and round numbers (0-based).
    inputs : RoundInputs
        The round's inputs (shared by all policies).
    decisions : dict
        Policy label -> :class:`~fedcgd_strategy.policies.Decision`.

    """

    drop: int
    round: int
    inputs: RoundInputs
    decisions: dict[str, Decision]


@dataclass(frozen=True)
class PolicySpec:
    """A policy to simulate under a label (the label keys the results).

    Attributes
    ----------
    label : str
        Key of the results (e.g. ``"poc"`` or ``"poc@7"`` in the V' scan).
    name : str
        Policy name for :func:`make_policy`.
    poc_candidates : int
        POC's V' (ignored by the other policies).

    """

    label: str
    name: str
    poc_candidates: int = 0


@dataclass
class PolicyStats:
    """Per-drop means of one policy.

    Attributes
    ----------
    scheduled : list of float
        Per drop, mean number scheduled per round.
    wemd : list of float
        Per drop, mean WEMD over the rounds with a non-empty schedule (NaN if none).
    empty_rounds : int
        Rounds (over all drops) in which nothing was scheduled.

    """

    scheduled: list[float] = field(default_factory=list)
    wemd: list[float] = field(default_factory=list)
    empty_rounds: int = 0


def cifar10_labels(
    num_classes: int = CIFAR10_CLASSES, samples_per_class: int = CIFAR10_TRAIN_PER_CLASS
) -> IntArray:
    """CIFAR-10's training-label layout: ``samples_per_class`` labels of each class, in order."""
    return np.repeat(np.arange(num_classes, dtype=np.int64), samples_per_class)


def make_drop(settings: TableSettings, index: int, labels: IntArray) -> Drop:
    """Drop the devices, split the labels and build the cell of drop ``index``.

    The split is :func:`fedcgd_task.partition.partition_indices` for the run seed
    ``seed + index``; the cell draws from ``default_rng([seed, index, CHANNEL_STREAM])``.
    """
    task = TaskSettings(
        seed=settings.seed + index,
        num_devices=settings.num_devices,
        dataset=PAPER_CIFAR10["dataset"],
        data_dir="",
        model=PAPER_CIFAR10["model"],
        partition=PAPER_CIFAR10["partition"],
        dirichlet_alpha=1.0,  # not read by the shards split
        shards_per_device=settings.shards_per_device,
        imbalance_ratio=PAPER_CIFAR10["imbalance-ratio"],
    )
    parts = partition_indices(task, labels)
    local_labels = [labels[p] for p in parts]
    counts = np.stack([np.bincount(y, minlength=settings.num_classes) for y in local_labels])
    sizes = counts.sum(axis=1).astype(np.float64)
    config = CellConfig(
        num_devices=settings.num_devices,
        availability_prob=settings.availability_prob,
        deadline_s=settings.deadline_s,
        total_bandwidth_hz=settings.total_bandwidth_hz,
    )
    cell = Cell(config, np.random.default_rng([settings.seed, index, CHANNEL_STREAM]))
    return Drop(index, cell, local_labels, counts / sizes[:, None], sizes)


def round_label_dist(
    drop: Drop, candidate: npt.NDArray[np.bool_], settings: TableSettings, rng: np.random.Generator
) -> FloatArray:
    """p_v of the round for every candidate (zero rows for the others).

    ``"batch"``: histogram of τ·b positions of the device's shard, a permutation drawn from
    ``rng`` read cyclically (as :func:`fedcgd_task.training.local_batches` does); ``"local"``: the
    whole local distribution.
    """
    if settings.label_dist == "local":
        return np.where(candidate[:, None], drop.local_dist, 0.0)
    out = np.zeros_like(drop.local_dist)
    used = settings.samples_per_round
    for v in np.flatnonzero(candidate).tolist():
        shard = drop.local_labels[v]
        positions = rng.permutation(shard.size)[np.arange(used) % shard.size]
        out[v] = np.bincount(shard[positions], minlength=settings.num_classes) / used
    return out


def build_policies(settings: TableSettings, specs: Sequence[PolicySpec]) -> dict[str, Policy]:
    """Fresh policy objects (one set per drop, so Fed-CBS's counts live for one drop)."""
    return {
        spec.label: make_policy(
            spec.name,
            PolicyContext(
                num_devices=settings.num_devices,
                num_classes=settings.num_classes,
                initial_g=1.0,
                pack_rule=settings.pack_rule,
                poc_candidates=spec.poc_candidates,
            ),
        )
        for spec in specs
    }


def simulate_rounds(
    settings: TableSettings,
    specs: Sequence[PolicySpec],
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[RoundResult]:
    """Yield every round of every drop with each policy's decision.

    Parameters
    ----------
    settings : TableSettings
        Simulation settings.
    specs : sequence of PolicySpec
        Policies to run (all on the same rounds).
    progress : callable, optional
        Called with (drops done, drops) before each drop and at the end.

    Yields
    ------
    RoundResult
        One per (drop, round).

    """
    labels = cifar10_labels(settings.num_classes, settings.samples_per_class)
    target = np.full(settings.num_classes, 1.0 / settings.num_classes)
    sigma = settings.sigma_over_sqrt_b_g * math.sqrt(settings.batch_size)
    for d in range(settings.drops):
        if progress is not None:
            progress(d, settings.drops)
        drop = make_drop(settings, d, labels)
        policies = build_policies(settings, specs)
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
                min_bandwidth_hz=draw.min_bandwidth_hz,
                gain_lin=draw.gain_lin,
                total_bandwidth_hz=settings.total_bandwidth_hz,
                batch_size=settings.batch_size,
                target_dist=target,
                train_loss=score_rng.random(settings.num_devices),
                update_norm=score_rng.random(settings.num_devices),
                local_dist=drop.local_dist,
            )
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
    """Per-drop mean scheduled number and WEMD of every policy (see the module docstring)."""
    out = {s.label: PolicyStats() for s in specs}
    counts: dict[str, list[int]] = {s.label: [] for s in specs}
    wemds: dict[str, list[float]] = {s.label: [] for s in specs}

    def close_drop() -> None:
        for label, result in out.items():
            result.scheduled.append(float(np.mean(counts[label])))
            finite = [w for w in wemds[label] if math.isfinite(w)]
            result.wemd.append(float(np.mean(finite)) if finite else float("nan"))
            result.empty_rounds += len(counts[label]) - len(finite)
            counts[label].clear()
            wemds[label].clear()

    current = 0
    for res in simulate_rounds(settings, specs, progress):
        if res.drop != current:
            close_drop()
            current = res.drop
        for label, decision in res.decisions.items():
            counts[label].append(int(decision.selected.sum()))
            wemds[label].append(decision.wemd)
    close_drop()
    return out


def choose_poc_candidates(
    candidates: Sequence[int], means: Sequence[float], target: float = POC_TARGET_SCHEDULED
) -> int:
    """The V' whose mean scheduled number is nearest ``target`` (ties: the smaller V').

    Raises
    ------
    ValueError
        If the sequences are empty or of different lengths, or no mean is finite.

    """
    if len(candidates) != len(means) or not candidates:
        raise ValueError("candidates and means must be non-empty and of equal length")
    best: tuple[float, int] | None = None
    for v, m in zip(candidates, means, strict=True):
        if not math.isfinite(m):
            continue
        key = (abs(m - target), int(v))
        if best is None or key < best:
            best = key
    if best is None:
        raise ValueError("no finite mean scheduled number to choose from")
    return best[1]


def table_rows(
    settings: TableSettings, results: Mapping[str, PolicyStats]
) -> list[dict[str, object]]:
    """Rows of ``table.csv`` (our means ± CI beside the paper's Table II values)."""
    rows: list[dict[str, object]] = []
    for policy, result in results.items():
        sched, sched_ci = mean_ci95(result.scheduled)
        wemd, wemd_ci = mean_ci95(result.wemd)
        paper_name, paper_sched, paper_wemd = PAPER_TABLE_II.get(
            policy, (policy, float("nan"), float("nan"))
        )
        rows.append(
            {
                "policy": policy,
                "paper_name": paper_name,
                "mean_scheduled": sched,
                "scheduled_ci95": sched_ci,
                "paper_scheduled": paper_sched,
                "mean_wemd": wemd,
                "wemd_ci95": wemd_ci,
                "paper_wemd": paper_wemd,
                "empty_rounds": result.empty_rounds,
                "drops": settings.drops,
                "rounds": settings.rounds,
                "poc_candidates": settings.poc_candidates,
                "sigma_over_sqrt_b_g": settings.sigma_over_sqrt_b_g,
                "label_dist": settings.label_dist,
            }
        )
    return rows


def fit_poc(
    settings: TableSettings,
    max_candidates: int = 30,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, object]]:
    """POC's mean scheduled number for V' = 1 .. ``max_candidates`` on the same rounds."""
    specs = [PolicySpec(f"poc@{v}", "poc", v) for v in range(1, max_candidates + 1)]
    results = simulate(settings, specs, progress)
    rows: list[dict[str, object]] = []
    for spec in specs:
        sched, ci = mean_ci95(results[spec.label].scheduled)
        wemd, _ = mean_ci95(results[spec.label].wemd)
        rows.append(
            {
                "poc_candidates": spec.poc_candidates,
                "mean_scheduled": sched,
                "scheduled_ci95": ci,
                "mean_wemd": wemd,
            }
        )
    return rows


def number(value: object) -> float:
    """A table cell as a float (cells are ints, floats or numpy scalars).

    Raises
    ------
    TypeError
        For anything else (e.g. a policy name).

    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def plot_table(rows: Sequence[Mapping[str, object]], path: Path) -> None:
    """Bar chart: ours (with 95 % CI) beside the paper, scheduled number and WEMD."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [str(r["policy"]) for r in rows]
    x = np.arange(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in (
        (axes[0], "scheduled", "Avg. scheduled number"),
        (axes[1], "wemd", "Avg. WEMD"),
    ):
        ours = [number(r[f"mean_{key}"]) for r in rows]
        err = [number(r[f"{key}_ci95"]) for r in rows]
        paper = [number(r[f"paper_{key}"]) for r in rows]
        err = [0.0 if not math.isfinite(e) else e for e in err]
        ax.bar(x - 0.2, ours, 0.4, yerr=err, capsize=3, label="ours (95 % CI)")
        ax.bar(x + 0.2, paper, 0.4, label="paper Table II")
        ax.set_xticks(x, names, rotation=30, ha="right")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_fit(rows: Sequence[Mapping[str, object]], chosen: int, path: Path) -> None:
    """POC's mean scheduled number against V', with the paper's 13.71 and the chosen V'."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    v = [int(number(r["poc_candidates"])) for r in rows]
    m = [number(r["mean_scheduled"]) for r in rows]
    ci = [number(r["scheduled_ci95"]) for r in rows]
    ci = [0.0 if not math.isfinite(c) else c for c in ci]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(v, m, yerr=ci, marker="o", ms=3, capsize=2, label="POC (95 % CI)")
    ax.axhline(POC_TARGET_SCHEDULED, color="C1", ls="--", label="paper POC 13.71")
    ax.axvline(chosen, color="C2", ls=":", label=f"chosen V' = {chosen}")
    ax.set_xlabel("V' (POC candidates)")
    ax.set_ylabel("avg. scheduled number")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(mean: object, ci: object, digits: int) -> str:
    m, c = number(mean), number(ci)
    ci_text = f"{c:.{digits}f}" if math.isfinite(c) else "n/a"
    return f"{m:.{digits}f} ± {ci_text}"


def format_table(rows: Sequence[Mapping[str, object]]) -> str:
    """The printed table: policy, ours ± CI and the paper's value for both columns."""
    head = (
        f"{'policy':<16} {'scheduled (ours)':>18} {'paper':>7}   {'WEMD (ours)':>15} {'paper':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['policy']!s:<16} {_fmt(r['mean_scheduled'], r['scheduled_ci95'], 2):>18} "
            f"{number(r['paper_scheduled']):>7.2f}   "
            f"{_fmt(r['mean_wemd'], r['wemd_ci95'], 3):>15} "
            f"{number(r['paper_wemd']):>7.3f}"
        )
    return "\n".join(lines)


def _progress_printer(prefix: str) -> Callable[[int, int], None]:
    start = time.perf_counter()

    def report(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        print(
            f"\r{prefix}: drop {done}/{total} ({time.perf_counter() - start:.1f} s)",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return report


def build_parser() -> argparse.ArgumentParser:
    """Command-line options (see the module docstring)."""
    defaults = TableSettings()
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--drops", type=int, default=defaults.drops, help="drops (seeds)")
    parser.add_argument("--rounds", type=int, default=defaults.rounds, help="rounds per drop")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="base seed")
    parser.add_argument(
        "--sigma-over-sqrt-b-g",
        type=float,
        default=defaults.sigma_over_sqrt_b_g,
        help="FedCGD's sigma-hat / (sqrt(b) G-hat), fixed (no training here)",
    )
    parser.add_argument(
        "--poc-candidates",
        type=int,
        default=defaults.poc_candidates,
        help="POC's V' (0 = all available)",
    )
    parser.add_argument(
        "--fit-poc",
        action="store_true",
        help="scan V' = 1..--fit-max, pick the one nearest the paper's 13.71, use it",
    )
    parser.add_argument("--fit-max", type=int, default=30, help="largest V' of --fit-poc")
    parser.add_argument(
        "--label-dist",
        choices=LABEL_DIST_MODES,
        default=defaults.label_dist,
        help="p_v: histogram of the round's tau*b labels, or the whole shard",
    )
    parser.add_argument("--num-devices", type=int, default=defaults.num_devices, help="V")
    parser.add_argument("--local-steps", type=int, default=defaults.local_steps, help="tau")
    parser.add_argument(
        "--pack-rule", choices=("stop", "skip"), default=defaults.pack_rule, help="best effort"
    )
    parser.add_argument(
        "--policies",
        default=",".join(TABLE_POLICIES),
        help="comma-separated policies (Table II's by default)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/schedule_table"))
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the simulation, print the table and write the files."""
    args = build_parser().parse_args(argv)
    policies = [p.strip() for p in str(args.policies).split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown:
        raise SystemExit(f"unknown policies {unknown}; allowed: {', '.join(POLICY_NAMES)}")
    if args.fit_max < 1:
        raise SystemExit("--fit-max must be >= 1")
    # The options named after a settings field (the others steer the command).
    names = {f.name for f in fields(TableSettings)}
    settings = TableSettings(**{k: v for k, v in vars(args).items() if k in names})
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    written: list[Path] = []
    if args.fit_poc:
        fit_rows = fit_poc(settings, args.fit_max, None if args.quiet else _progress_printer("fit"))
        chosen = choose_poc_candidates(
            [int(number(r["poc_candidates"])) for r in fit_rows],
            [number(r["mean_scheduled"]) for r in fit_rows],
        )
        print(f"POC V' scan (target: paper's {POC_TARGET_SCHEDULED} scheduled)")
        for r in fit_rows:
            mark = "  <- chosen" if r["poc_candidates"] == chosen else ""
            print(
                f"  V' = {r['poc_candidates']!s:>2}: "
                f"{_fmt(r['mean_scheduled'], r['scheduled_ci95'], 2)}{mark}"
            )
        print(f"chosen V' = {chosen}")
        write_csv(out / "poc_fit.csv", fit_rows, FIT_COLUMNS)
        plot_fit(fit_rows, chosen, out / "poc_fit.png")
        written += [out / "poc_fit.csv", out / "poc_fit.png"]
        settings = replace(settings, poc_candidates=chosen)
    specs = [PolicySpec(p, p, settings.poc_candidates if p == "poc" else 0) for p in policies]
    results = simulate(settings, specs, None if args.quiet else _progress_printer("table"))
    rows = table_rows(settings, results)
    elapsed = time.perf_counter() - start
    print(
        f"Table II (CIFAR-10, l = 1, r = 1, tau = {settings.local_steps}): "
        f"{settings.drops} drops x {settings.rounds} rounds, "
        f"sigma/(sqrt(b) G) = {settings.sigma_over_sqrt_b_g}, "
        f"POC V' = {settings.poc_candidates or 'all available'}, p_v = {settings.label_dist}"
    )
    print(format_table(rows))
    write_csv(out / "table.csv", rows, TABLE_COLUMNS)
    plot_table(rows, out / "table.png")
    written += [out / "table.csv", out / "table.png"]
    print(f"{elapsed:.1f} s; wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
