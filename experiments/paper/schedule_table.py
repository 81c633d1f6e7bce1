"""Table II's "scheduled number" and "WEMD" columns from labels and the channel alone.

``fedcgd paper schedule-table [--drops 20 --rounds 50 --out results/schedule_table]``
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
The defaults of :class:`~experiments.paper.schedule_simulation.TableSettings` are
:data:`experiments.paper.settings.PAPER_CIFAR10`.

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
  seeded apart; a policy's stream is keyed by its name
  (:func:`~experiments.paper.schedule_simulation.policy_stream_word`), so adding a policy leaves the
  others' numbers unchanged.

Statistics: per drop, the mean over rounds of the number scheduled (rounds with no candidate
count as 0) and of the WEMD (over rounds with a non-empty schedule); the table gives the mean of
the per-drop means and the 95 % Student-t half-width over drops.

``--fit-poc`` scans V' = 1 .. ``--fit-max`` (30) and picks the V' whose mean scheduled number is
nearest the paper's POC value 13.71 (ties: the smaller V'); it writes ``poc_fit.csv`` /
``poc_fit.png`` and then builds the table with that V'. Neighbouring V' differ by about 0.5
scheduled devices there, so few drops cannot separate them reliably (10 drops pick 16, 20 and
100 drops pick 17): the presets' value came from ``--fit-poc --policies poc --drops 100``.

Outputs under ``--out``: ``table.csv``, ``table.png`` (and ``poc_fit.*``).

This module holds the command line; the simulation is :mod:`experiments.paper.schedule_simulation`,
the table and plots :mod:`experiments.paper.schedule_report`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from experiments.analysis.tables import write_csv
from experiments.paper.schedule_report import (
    FIT_COLUMNS,
    TABLE_COLUMNS,
    format_fit,
    format_table,
    number,
    plot_fit,
    plot_table,
    table_rows,
)
from experiments.paper.schedule_simulation import (
    PolicySpec,
    TableSettings,
    choose_poc_candidates,
    fit_poc,
    simulate,
)
from experiments.run.progress import step_reporter
from fedcgd_strategy.policies import POLICY_NAMES

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


def _progress_printer(prefix: str) -> Callable[[int, int], None]:
    return step_reporter(f"{prefix}: drop")


def main(
    settings: TableSettings,
    policies_text: str,
    out: Path,
    *,
    fit_poc_max: int | None = None,
    quiet: bool = False,
) -> int:
    """``fedcgd paper schedule-table``: simulate, print the table and write the files.

    ``policies_text`` is comma-separated (Table II's by default); ``fit_poc_max`` scans POC's
    V' = 1..it first and uses the one nearest the paper's 13.71. Exit code 2 with one line
    for an unknown policy.
    """
    policies = [p.strip() for p in policies_text.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown:
        print(
            f"error: unknown policies {unknown}; allowed: {', '.join(POLICY_NAMES)}",
            file=sys.stderr,
        )
        return 2
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    written: list[Path] = []
    if fit_poc_max is not None:
        fit_rows = fit_poc(settings, fit_poc_max, None if quiet else _progress_printer("fit"))
        chosen = choose_poc_candidates(
            [int(number(r["poc_candidates"])) for r in fit_rows],
            [number(r["mean_scheduled"]) for r in fit_rows],
        )
        print(format_fit(fit_rows, chosen))
        write_csv(out / "poc_fit.csv", fit_rows, FIT_COLUMNS)
        plot_fit(fit_rows, chosen, out / "poc_fit.png")
        written += [out / "poc_fit.csv", out / "poc_fit.png"]
        settings = replace(settings, poc_candidates=chosen)
    specs = [PolicySpec(p, p, settings.poc_candidates if p == "poc" else 0) for p in policies]
    results = simulate(settings, specs, None if quiet else _progress_printer("table"))
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
