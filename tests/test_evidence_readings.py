"""The presets' and comparisons' readings in the docs, recomputed from their per-run rows.

``docs/mnist1d_<preset>_runs.csv`` holds a preset's runs (one row per sweep point × policy ×
seed), ``docs/compare_digits_runs.csv`` the digits comparison's (no sweep). The tables
(``docs/<preset>.csv``) are recomputed here from those rows with scipy (Holm and Kaplan–Meier:
experiments/analysis/statistics.py, checked by hand in tests/test_statistics.py); the docs'
sentences (:data:`PHRASES`) must print the readings."""

from __future__ import annotations

import csv
import functools
import gzip
import itertools
import math
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from experiments.analysis.evidence import indicator_test
from experiments.analysis.statistics import holm, km_median
from experiments.compare import results
from fedcgd_strategy.policies.registry import POLICY_LABELS

DOCS = Path(__file__).resolve().parent.parent / "docs"
FSCD, GS, GC = "fedcgd-fscd", "fedcgd-gs", "fedcgd-fscd-gc"
BASELINES = ("bc", "bn2", "poc", "fedcbs")
DIRICHLET, LOCAL, IMBALANCE, DIGITS = (
    "mnist1d_dirichlet", "mnist1d_local_steps", "mnist1d_imbalance", "compare_digits",
)  # fmt: skip
TAU = f"{LOCAL}_rerun"  # the τ preset's evidence (today's code); LOCAL: the code of 2026-11-26
DIGITS_1126 = f"{DIGITS}_1126"  # the digits comparison with the code of 2026-11-26
ETA01 = f"{LOCAL}_eta0.1"  # the τ preset again at η = 0.1, declared before its runs
#: file stem -> (its sweep points as written in the tables, its number of runs, its policies)
PRESETS: dict[str, tuple[tuple[str, ...], int, tuple[str, ...]]] = {
    DIRICHLET: (
        tuple(f"dirichlet-alpha={a}" for a in ("0.1", "1.0", "10.0")), 90, (FSCD, GS, *BASELINES),
    ),
    LOCAL: (("local-steps=1", "local-steps=5"), 70, (GC, FSCD, GS, *BASELINES)),
    IMBALANCE: (
        tuple(f"imbalance-ratio={r}" for r in ("1.0", "3.0", "9.0")), 105,
        (GC, FSCD, GS, *BASELINES),
    ),
    DIGITS: (("",), 35, (FSCD, GS, *BASELINES, "all")),
    DIGITS_1126: (("",), 35, (FSCD, GS, *BASELINES, "all")),
    TAU: (("local-steps=1", "local-steps=5"), 70, (GC, FSCD, GS, *BASELINES)),
    ETA01: (("local-steps=1", "local-steps=5"), 70, (GC, FSCD, GS, *BASELINES)),
}  # fmt: skip
ALPHAS = A01, A1, A10 = PRESETS[DIRICHLET][0]
TAU1, TAU5 = PRESETS[LOCAL][0]
R1, R3, R9 = PRESETS[IMBALANCE][0]
FINAL, BEST, SCHEDULED, WEMD = "final_accuracy", "max_accuracy", "mean_scheduled", "mean_wemd"
#: Where a sentence is: a page, or a section of evidence.md by its heading.
TABLE_II, RATIO, POOLED = "### Local steps and Table II", "### Imbalance ratio", "### Ĝ/σ̂ over"
ALPHA, PAPER = "### Dirichlet α", "### The paper's claims against these runs"
#: The p columns of a table by Holm's family, each with a ``_holm`` twin adjusted over its
#: family's columns of every policy at a sweep point: final and best accuracy together, each
#: rounds test alone, both TOSTs together (docs/comparing.md "One rule for many tests").
FAMILIES = tuple(
    tuple(f"{p}_vs_fedcgd_fscd" for p in family)
    for family in (
        ("p_value", "best_p_value"), ("rounds_sign_p",), ("rounds_wilcoxon_p",),
        ("tost_p", "best_tost_p"),
    )
)  # fmt: skip


def _rows(name: str) -> list[dict[str, str]]:
    with (DOCS / f"{name}.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


@functools.cache
def _runs(preset: str) -> list[dict[str, str]]:
    """The runs of ``docs/<preset>_runs.csv``; a comparison's (no sweep column) have sweep ""."""
    return [{"sweep": "", **r} for r in _rows(f"{preset}_runs")]


@functools.cache
def _table(preset: str) -> dict[tuple[str, str], dict[str, str]]:
    return {(r.get("sweep", ""), r["policy"]): r for r in _rows(preset)}


def _by_seed(preset: str, policy: str, sweep: str) -> dict[str, dict[str, str]]:
    return {r["seed"]: r for r in _runs(preset) if (r["policy"], r["sweep"]) == (policy, sweep)}


def _column(preset: str, policy: str, sweep: str, column: str) -> dict[str, float]:
    return {s: float(r[column]) for s, r in _by_seed(preset, policy, sweep).items()}


def _mean(preset: str, policy: str, sweep: str, column: str) -> float:
    return statistics.fmean(_column(preset, policy, sweep, column).values())


def _rounds(preset: str, policy: str, sweep: str) -> dict[str, int | None]:
    """Seed -> rounds to the target (None: never reached in the run)."""
    runs = _by_seed(preset, policy, sweep)
    return {
        s: int(r["rounds_to_target"]) if r["rounds_to_target"] else None for s, r in runs.items()
    }


def _counts(preset: str, policy: str, sweep: str) -> tuple[int, int, int]:
    """Seeds where FedCGD-FSCD reached the target before / after ``policy``, or tied.

    A censored run is after any run that reached the target; two censored runs tie.
    """
    ours, theirs = _rounds(preset, FSCD, sweep), _rounds(preset, policy, sweep)
    counts = [0, 0, 0]
    for seed, a in ours.items():
        a_key, b_key = (math.inf if x is None else x for x in (a, theirs[seed]))
        counts[0 if a_key < b_key else 1 if a_key > b_key else 2] += 1
    return counts[0], counts[1], counts[2]


def _sign_p(wins: int, n: int) -> float:
    """Exact two-sided sign test of ``wins`` of ``n`` untied pairs."""
    return float(stats.binomtest(wins, n).pvalue)


def _holm(p_values: dict[Any, float]) -> dict[Any, float]:
    return dict(zip(p_values, holm(list(p_values.values())), strict=True))


def _paired_t_p(
    preset: str, policy: str, sweep: str, column: str, reference: str = FSCD
) -> tuple[float, float]:
    """Mean of ``policy`` − ``reference`` over seeds and its two-sided paired t-test p-value."""
    ours, theirs = (_column(preset, p, sweep, column) for p in (reference, policy))
    seeds = sorted(ours)
    a, b = [theirs[s] for s in seeds], [ours[s] for s in seeds]
    return statistics.fmean(x - y for x, y in zip(a, b, strict=True)), float(
        stats.ttest_rel(a, b).pvalue
    )


def _tost_p(
    preset: str, policy: str, sweep: str, column: str, margin: float = 0.01, reference: str = FSCD
) -> float:
    """Paired TOST p of ``policy`` − ``reference`` at ±``margin``: the larger of scipy's one-sided
    one-sample t-tests of the differences against −margin (greater) and +margin (less)."""
    ours, theirs = (_column(preset, p, sweep, column) for p in (reference, policy))
    diffs = [theirs[s] - ours[s] for s in sorted(ours)]
    return max(
        float(stats.ttest_1samp(diffs, -margin, alternative="greater").pvalue),
        float(stats.ttest_1samp(diffs, margin, alternative="less").pvalue),
    )


@functools.cache
def _tied_settings() -> tuple[float, float, int]:
    """Spearman's ρ over the pooled settings (mean early Ĝ/σ̂ against mean late FSCD − BC gap)
    with the Ĝ/σ̂ means that lie within each other's 95 % intervals tied; its exact two-sided p
    over every order of the gaps; how many are tied."""
    means, halves, gaps = [], [], []
    for points in _settings()["points"].values():
        x = [a for a, _ in points]
        means.append(statistics.fmean(x))
        halves.append(stats.t.ppf(0.975, len(x) - 1) * statistics.stdev(x) / len(x) ** 0.5)
        gaps.append(statistics.fmean(g for _, g in points))
    k = range(len(means))
    near = [[abs(means[i] - means[j]) < min(halves[i], halves[j]) for j in k] for i in k]
    close = [i for i in k if any(near[i][j] for j in k if j != i)]
    tied = [max(means[j] for j in close) if i in close else means[i] for i in k]
    return (*_spearman(list(zip(tied, gaps, strict=True))), len(close))


def _least_tost(preset: str, sweep: str, policies: tuple[str, ...]) -> float:
    return min(_tost_p(preset, p, sweep, c) for p in policies for c in (FINAL, BEST))


def _holm_accuracy(preset: str, sweep: str) -> dict[tuple[str, str], float]:
    """(policy, column) -> Holm over the paired t-tests of final and best accuracy of the
    preset's other policies at ``sweep``, one family."""
    others = [p for p in PRESETS[preset][2] if p != FSCD]
    return _holm(
        {(p, c): _paired_t_p(preset, p, sweep, c)[1] for p in others for c in (FINAL, BEST)}
    )


def _like(value: float, text: str) -> str:
    """``value`` printed as ``text`` is: as many decimals, a sign if it has one (U+2212 for
    minus, as the docs print it), thousands commas if it has them, ``.2g`` for ``e`` notation."""
    if "e" in text:
        return re.sub(r"e-0*", "e-", f"{value:.2g}")
    sign, comma = "+" if text[0] in "+−" else "", "," if "," in text else ""
    return format(value, f"{sign}{comma}.{len(text.partition('.')[2])}f").replace("-", "−")


@functools.cache
def _section(where: str) -> str:
    """A page (``*.md``) or an evidence.md section (``###`` heading) as written."""
    page = where if where.endswith(".md") else "evidence.md"
    text = (DOCS.parent / page if page == "README.md" else DOCS / page).read_text("utf-8")
    if where.startswith("###"):
        start = text.index(where)
        text = text[start : text.index("\n### ", start + 1)]
    return text


def _md_table(where: str, first: str, after: str = "") -> list[list[str]]:
    """The cells of the body rows of the first Markdown table after ``after`` whose header starts
    with ``first``."""
    text = _section(where)
    text = text[text.index(after) :]
    lines = text[text.index(first) :].splitlines()[2:]
    rows = itertools.takewhile(lambda line: line.startswith("|"), lines)
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in rows]


def _points(name: str, setting: str | None = None) -> list[tuple[float, float]]:
    """(early Ĝ/σ̂, late gap recomputed from both accuracies) of ``docs/<name>_indicator.csv``."""
    return [
        (
            float(p["ghat_over_sigma_early"]),
            float(p["fscd_late_accuracy"]) - float(p["bc_late_accuracy"]),
        )
        for p in _rows(f"{name}_indicator")
        if setting is None or p["setting"] == setting
    ]


def _orders_p(x: np.ndarray, y: np.ndarray, orders: np.ndarray) -> tuple[float, float]:
    """Spearman's ρ of centred ranks ``x``, ``y`` and scipy's two-sided p over ``orders`` of
    ``y``: twice the smaller share with ρ at least as large, or as small (at most 1)."""
    norm = math.sqrt(x @ x * (y @ y))
    rho, rhos = y @ x / norm, orders @ x / norm
    tail = min(np.mean(rhos >= rho - 1e-12), np.mean(rhos <= rho + 1e-12))
    return float(rho), float(min(1.0, 2 * tail))


def _ranks(points: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = (stats.rankdata(v) - (len(v) + 1) / 2 for v in zip(*points, strict=True))
    return x, y


def _spearman(points: Any) -> tuple[float, float]:
    """Spearman's ρ and its two-sided p: by hand over every order up to 9 points; above, the
    product's p from 10⁶ drawn orders (checked against orders drawn here by
    ``test_each_drawn_p_is_orders_drawn_by_hand``)."""
    x, y = _ranks(points)
    if len(points) > 9:
        return _orders_p(x, y, y[None])[0], _drawn_p(tuple(map(tuple, points)))
    return _orders_p(x, y, np.array(list(itertools.permutations(y))))


@functools.cache
def _drawn_p(points: tuple[tuple[float, float], ...]) -> float:
    return indicator_test(list(points)).p_value


@functools.cache
def _settings(name: str = "mnist1d_pooled") -> dict[str, Any]:
    """The pooled indicator of ``docs/<name>_indicator.csv`` by setting: the claim's level (the
    7 settings' means) and beside it."""
    names = sorted({p["setting"] for p in _rows(f"{name}_indicator")})
    points = {k: _points(name, k) for k in names}
    means = {k: np.mean(v, axis=0) for k, v in points.items()}
    between = [means[k][0] for k, v in points.items() for _ in v]
    centred = [(a - means[k][0], b - means[k][1]) for k, v in points.items() for a, b in v]
    return {
        "exact": _spearman(list(means.values())),  # the pairings at least as extreme: p · 7!
        "between": 100 * np.var(between) / np.var([a for v in points.values() for a, _ in v]),
        "within": _spearman(centred),
        "centred": centred,
        "left out": {k: _spearman([v for j, v in means.items() if j != k])[0] for k in names},
        "each": {k: _spearman(v) for k, v in points.items()},
        "points": points,
    }


@pytest.mark.parametrize("name", ["α", "τ", "r", "pooled", "within"])
def test_each_drawn_p_is_orders_drawn_by_hand(name: str) -> None:
    """A p over more than 9 points that the docs print (the product's, over 10⁶ drawn orders) is
    within four standard errors of the p over 200,000 orders drawn here; scipy's two-sided p is
    twice a share, so each estimate's variance is p (2 − p) / N."""
    points = _settings()["centred"] if name == "within" else _points(*INDICATORS[name])
    x, y = _ranks(points)
    assert len(points) > 9
    mine = _orders_p(x, y, np.random.default_rng(1).permuted(np.tile(y, (200_000, 1)), axis=1))
    error = math.sqrt(mine[1] * (2 - mine[1]) * (1 / 10**6 + 1 / 200_000))
    assert abs(indicator_test(points).p_value - mine[1]) <= 4 * error


#: Each table's target accuracy (its rounds columns are the runs' own rounds to it).
TARGETS = {DIRICHLET: 0.8, LOCAL: 0.8, IMBALANCE: 0.7, DIGITS: 0.85, DIGITS_1126: 0.85, TAU: 0.8}
TARGETS[ETA01] = 0.8


def _typed(run: dict[str, str]) -> dict[str, Any]:
    numbers = {FINAL, BEST, SCHEDULED, WEMD}
    whole = {"seed", "rounds_to_target", "rounds_run", "devices_lost"}
    return {
        k: (None if v == "" else float(v) if k in numbers else int(v) if k in whole else v)
        for k, v in run.items()
    }


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_table_is_recomputed_from_its_runs(preset: str) -> None:
    """Every cell of ``docs/<preset>.csv`` recomputed here with scipy, and written again by
    ``results.table_rows`` (what a fresh ``fedcgd compare`` or ``reproduce`` over these runs
    writes); one code digest per table in ``runs.csv``'s code column."""
    sweeps, n_runs, policies = PRESETS[preset]
    table = _table(preset)
    assert len(_runs(preset)) == n_runs and set(table) == set(itertools.product(sweeps, policies))
    for (sweep, policy), row in table.items():
        runs = _by_seed(preset, policy, sweep).values()
        assert len(runs) == 5
        for column in (FINAL, BEST, SCHEDULED, WEMD):
            mean = _mean(preset, policy, sweep, column)
            assert float(row[f"{column}_mean"]) == pytest.approx(mean, abs=1e-12)
        reached = [(int(r["rounds_to_target"] or 0) or None, int(r["rounds_run"])) for r in runs]
        assert int(row["reached_target"]) == sum(r is not None for r, _ in reached)
        assert float(row["rounds_to_target_km_median"]) == km_median(reached)
        if policy == FSCD:
            assert {row[f"{prefix}tost_p_vs_fedcgd_fscd"] for prefix in ("", "best_")} == {""}
        else:  # the table counts from the other policy's side
            earlier, later, tied = _counts(preset, policy, sweep)
            counted = (int(row[f"rounds_{k}_vs_fedcgd_fscd"]) for k in ("later", "earlier", "tied"))
            assert tuple(counted) == (earlier, later, tied)
            if earlier + later:
                expected = _sign_p(earlier, earlier + later)
                assert float(row["rounds_sign_p_vs_fedcgd_fscd"]) == pytest.approx(expected)
            for prefix, column in (("", FINAL), ("best_", BEST)):
                diff, p = _paired_t_p(preset, policy, sweep, column)
                assert float(row[f"{prefix}diff_vs_fedcgd_fscd"]) == pytest.approx(diff, abs=1e-12)
                assert float(row[f"{prefix}p_value_vs_fedcgd_fscd"]) == pytest.approx(p)
                tost = _tost_p(preset, policy, sweep, column)
                assert float(row[f"{prefix}tost_p_vs_fedcgd_fscd"]) == pytest.approx(tost)
    for sweep, family in itertools.product(sweeps, FAMILIES):  # Holm over each sweep point
        cells = {(p, c): table[(sweep, p)][c] for p in policies if p != FSCD for c in family}
        assert len(cells) == len(family) * (len(policies) - 1)
        for (policy, column), text in cells.items():  # no p: every pair tied (none reached)
            assert text != "" or table[(sweep, policy)][f"{column}_holm"] == ""
        raw = {key: float(text) for key, text in cells.items() if text}
        for (policy, column), expected in _holm(raw).items():
            assert float(table[(sweep, policy)][f"{column}_holm"]) == pytest.approx(expected)
    points: dict[str, list[dict[str, Any]]] = {}
    for run in _runs(preset):
        points.setdefault(run["sweep"], []).append(_typed(run))
    written = [
        (sweep, row) for sweep, runs in points.items()
        for row in results.table_rows(runs, TARGETS[preset])
    ]  # fmt: skip
    assert [(s, r["policy"]) for s, r in written] == list(table)
    for sweep, row in written:
        committed = table[(sweep, row["policy"])]
        for column in results.TABLE_COLUMNS[1:]:
            value, text = row[column], committed[column]
            if column == "seeds":
                assert value == text
            elif value is None or (isinstance(value, float) and math.isnan(value)):
                assert text == "", (sweep, row["policy"], column)
            else:
                assert float(text) == pytest.approx(value, rel=1e-12), (sweep, column)
    # a resumed run lists each of its codes; the τ and r presets' runs of c307e0f recorded none
    # (``unknown``): docs/evidence.md shows their sources are those of the one digest
    digests = {d for run in _runs(preset) for d in run["code"].split()}
    (code,) = digests - {"unknown"}  # quoted where the docs give the table
    where = {TAU: TABLE_II, LOCAL: TABLE_II, IMBALANCE: RATIO, DIRICHLET: ALPHA}
    assert f"`{code}`" in _section(where.get(preset, "comparing.md"))
    assert "unknown" not in digests or preset in (LOCAL, IMBALANCE)


#: The keys of :func:`_value`: a sweep point (``α*``, ``r*``: pooled over the preset's), a
#: policy, a table column (``h``: its Holm twin; won / lost / tied: FSCD earlier / later / even).
SETTINGS = {
    "τ1": (TAU, TAU1), "τ5": (TAU, TAU5), "τ1old": (LOCAL, TAU1), "r1": (IMBALANCE, R1),
    "r3": (IMBALANCE, R3), "r9": (IMBALANCE, R9), "α.1": (DIRICHLET, A01), "α1": (DIRICHLET, A1),
    "α10": (DIRICHLET, A10), "d": (DIGITS, ""), "d26": (DIGITS_1126, ""), "α*": (DIRICHLET, "*"),
    "r*": (IMBALANCE, "*"), "r9old": (f"{IMBALANCE}_1126", R9),
}  # fmt: skip
POLICIES = {"fscd": FSCD, "gs": GS, "gc": GC, "cbs": "fedcbs", **{p: p for p in BASELINES[:3]}}
CELLS = {
    "final": "final_accuracy_mean", "best": "max_accuracy_mean", "sched": "mean_scheduled_mean",
    "wemd": "mean_wemd_mean", "median": "rounds_to_target_km_median", "Δ": "diff_vs_fedcgd_fscd",
    "bΔ": "best_diff_vs_fedcgd_fscd", "p": "p_value_vs_fedcgd_fscd",
    "bp": "best_p_value_vs_fedcgd_fscd", "sp": "rounds_sign_p_vs_fedcgd_fscd",
    "won": "rounds_later_vs_fedcgd_fscd", "lost": "rounds_earlier_vs_fedcgd_fscd",
    "tied": "rounds_tied_vs_fedcgd_fscd", "tp": "tost_p_vs_fedcgd_fscd",
    "btp": "best_tost_p_vs_fedcgd_fscd", "reached": "reached_target", "ci": "final_accuracy_ci95",
}  # fmt: skip
#: Ĝ/σ̂ points: ``ρ <key>``, ``ρp <key>`` (its p), ``n <key>`` (how many).
INDICATORS = {
    "α": (DIRICHLET, None), "τ": (TAU, None), "r": (IMBALANCE, None), "τ1": (TAU, TAU1),
    "τ5": (TAU, TAU5), "τ5 first": (LOCAL, TAU5), "pooled": ("mnist1d_pooled", None),
}  # fmt: skip


def _pooled(preset: str, policy: str, field: str) -> float:
    """Over the preset's sweep points: FSCD's wins, untied pairs, sign p, Holm over policies."""
    table, others = _table(preset), [p for p in PRESETS[preset][2] if p != FSCD]
    counts = {
        p: [sum(int(table[(s, p)][CELLS[k]]) for s in PRESETS[preset][0]) for k in ("won", "lost")]
        for p in others
    }
    sign = {p: _sign_p(w, w + lost) for p, (w, lost) in counts.items()}
    won, lost = counts[policy]
    return {"won": won, "n": won + lost, "sp": sign[policy], "sph": _holm(sign)[policy]}[field]


def _percent_fewer(policy: str, reference: str, sweep: str) -> float:
    ratio = _mean(TAU, policy, sweep, SCHEDULED) / _mean(TAU, reference, sweep, SCHEDULED)
    return 100 * (1 - ratio)


#: Readings that are no table cell; a list's ``low`` and ``high`` are its least and largest.
EXTRA: dict[str, Callable[[], Any]] = {
    "late α10 1": lambda: next(
        float(p["fscd_late_accuracy"])
        for p in _rows(f"{DIRICHLET}_indicator")
        if (p["setting"], p["seed"]) == (A10, "1")
    ),
    "gc−cbs τ1": lambda: _paired_t_p(TAU, GC, TAU1, BEST, "fedcbs"),
    "gc−cbs τ5": lambda: _paired_t_p(TAU, GC, TAU5, BEST, "fedcbs"),
    "gc−cbs τ1 final": lambda: _paired_t_p(TAU, GC, TAU1, FINAL, "fedcbs"),
    "gc−cbs τ5 final": lambda: _paired_t_p(TAU, GC, TAU5, FINAL, "fedcbs"),
    "gc−cbs holm least": lambda: min(
        holm([_paired_t_p(TAU, GC, t, c, "fedcbs")[1] for t in (TAU1, TAU5) for c in (FINAL, BEST)])
    ),
    "tost gc−cbs least": lambda: min(
        _tost_p(TAU, GC, t, c, reference="fedcbs") for t in (TAU1, TAU5) for c in (FINAL, BEST)
    ),
    "6p r* bc": lambda: 6 * _pooled(IMBALANCE, "bc", "sp"),
    "% fscd τ1": lambda: _percent_fewer(FSCD, "bc", TAU1),
    "% fscd τ5": lambda: _percent_fewer(FSCD, "bc", TAU5),
    "% gc τ1": lambda: _percent_fewer(GC, "fedcbs", TAU1),
    "% gc τ5": lambda: _percent_fewer(GC, "fedcbs", TAU5),
    "Ĝσ τ1": lambda: [x for x, _ in _points(TAU, TAU1)],
    "Ĝσ τ5": lambda: [x for x, _ in _points(TAU, TAU5)],
    "gap τ1": lambda: [g for _, g in _points(TAU, TAU1)],
    "gap τ5": lambda: [g for _, g in _points(TAU, TAU5)],
    "settings": lambda: _settings()["exact"],  # ρ, exact p; "1126": the runs of 2026-11-26
    "r9 points": lambda: -100 * _value("r9 bc bΔ"),
    "settings 1126": lambda: _settings("mnist1d_pooled_1126")["exact"],
    "extreme": lambda: _settings()["exact"][1] * math.factorial(7),
    "pairings": lambda: math.factorial(7),
    "between %": lambda: _settings()["between"],
    "within": lambda: _settings()["within"],
    "left out": lambda: list(_settings()["left out"].values()),
    "without τ5": lambda: _settings()["left out"][f"{LOCAL}/{TAU5}"],
    "each": lambda: [r for r, _ in _settings()["each"].values()],
    "each least p": lambda: min(p for _, p in _settings()["each"].values()),
    "best r9": lambda: [_mean(IMBALANCE, p, R9, BEST) for p in PRESETS[IMBALANCE][2] if p != "bn2"],
    "sched α baselines": lambda: [
        _mean(DIRICHLET, p, a, SCHEDULED) for p in BASELINES for a in ALPHAS
    ],
    "gs first τ5": lambda: sum(  # seeds where GS reaches 0.8 before every other policy
        all(r < (_rounds(TAU, p, TAU5)[s] or math.inf) for p in PRESETS[TAU][2] if p != GS)
        for s, r in _rounds(TAU, GS, TAU5).items()
    ),
    "reached r9 gc": lambda: sum(r is not None for r in _rounds(IMBALANCE, GC, R9).values()),
    "d fscd reached": lambda: _mean(DIGITS, FSCD, "", "rounds_to_target"),  # each run reached
    "d bc reached": lambda: _mean(DIGITS, "bc", "", "rounds_to_target"),
    "d26 fscd reached": lambda: _mean(DIGITS_1126, FSCD, "", "rounds_to_target"),
    "α10 bc least p": lambda: min(
        float(_table(DIRICHLET)[(A10, "bc")][f"{p}_vs_fedcgd_fscd"])
        for p in ("p_value", "best_p_value")
    ),
    "tost τ1 least": lambda: _least_tost(TAU, TAU1, (GC, GS, *BASELINES)),
    "tost τ5 others least": lambda: min(
        _tost_p(TAU, p, TAU5, c)
        for p in (GC, GS, *BASELINES)
        for c in (FINAL, BEST)
        if (p, c) != ("bc", BEST)
    ),
    "tost gs least": lambda: min(_least_tost(*setting, (GS,)) for setting in _seven()),
    "d holm least": lambda: min(_holm_accuracy(DIGITS, "").values()),
    "gs holm least": lambda: min(_gs_holm()),
    "sched final τ1": lambda: (
        stats.spearmanr(
            [_mean(TAU, p, TAU1, SCHEDULED) for p in BASELINES],
            [_mean(TAU, p, TAU1, FINAL) for p in BASELINES],
        ).statistic
    ),
    "cbs−bn2 τ1": lambda: _mean(TAU, "fedcbs", TAU1, FINAL) - _mean(TAU, "bn2", TAU1, FINAL),
    "tost9 d bc": lambda: _tost_p(DIGITS, "bc", "", BEST, 0.009),
    "tost9 d cbs": lambda: _tost_p(DIGITS, "fedcbs", "", BEST, 0.009),
    "tied ρ": lambda: _tied_settings()[0],
    "tied p": lambda: _tied_settings()[1],
    "tied n": lambda: _tied_settings()[2],
    "d others least p": lambda: min(
        _paired_t_p(DIGITS, p, "", FINAL)[1] for p in (GS, "bn2", "poc", "fedcbs", "all")
    ),
}


def _value(key: str) -> float:
    """The number ``{key}`` marks: :data:`EXTRA` (a pair's second by ``p``, a list's ``low`` or
    ``high``), ``ρ``/``ρp``/``n`` of :data:`INDICATORS`, ``run setting policy seed column``, or
    ``setting policy column`` of :data:`SETTINGS`, :data:`POLICIES`, :data:`CELLS`, ``below
    setting policy column`` (its seeds below FSCD's); a leading ``-`` negates it."""
    if key.startswith("-"):
        return -_value(key[1:])
    name, _, last = key.rpartition(" ")
    if name in EXTRA and last in ("p", "low", "high"):
        got = EXTRA[name]()
        return float(got[1] if last == "p" else min(got) if last == "low" else max(got))
    if key in EXTRA:
        got = EXTRA[key]()
        return float(got[0] if isinstance(got, tuple) else got)
    head, rest = key.split(" ", 1)
    if head in ("run", "below"):  # a seed's run, or how many seeds are below FSCD's
        setting, policy, *seed, field = rest.split()
        (preset, sweep), column = SETTINGS[setting], {"best": BEST, "final": FINAL}[field]
        ours, mine = (_column(preset, p, sweep, column) for p in (FSCD, POLICIES[policy]))
        return mine[seed[0]] if seed else sum(mine[s] < ours[s] for s in mine)
    if head in ("ρ", "ρp", "n"):
        points = _points(*INDICATORS[rest])
        return len(points) if head == "n" else _spearman(points)[head == "ρp"]
    setting, policy, field = key.split()
    (preset, sweep), policy = SETTINGS[setting], POLICIES[policy]
    if sweep == "*":
        return _pooled(preset, policy, field)
    column = CELLS[field.removesuffix("h")] + ("_holm" if field.endswith("ph") else "")
    return float(_table(preset)[(sweep, policy)][column])


#: The sentences that print the readings, by page or evidence.md section; ``{key}`` marks a
#: number, which must be :func:`_value` of ``key`` as printed (:func:`_like`).
PHRASES = {
    "evidence.md": [
        "earlier in {α.1 bc won} of 5 seeds at α = 0.1 (sign test p = {α.1 bc sp}",
        "in {α1 bc won} of 5 at α = 1 and at α = 10 (p = {α10 bc sp} each)",
        "earlier in {α* bc won} of {α* bc n} pairs: exact sign test p = {α* bc sp}",
        "({α* bc sph} after Holm's correction over the five baselines' pooled tests)",
        "(p = {α.1 poc sp} each; {α* poc won} of {α* bn2 n} pooled, p = {α* cbs sp})",
        "{α.1 gs won} / {α.1 gs lost} / {α.1 gs tied} at α = 0.1 and at α = 1, {α10 gs won} / "
        "{α10 gs lost} / {α10 gs tied}",
        "pooled, earlier in {α* gs won} of the {α* gs n} untied pairs",
        "p = {α* gs sp}, also {α* gs sph} after Holm",
        "over the {n α} (α, seed) points: Spearman ρ = {ρ α}, p = {ρp α} (3 settings",
    ],
    TABLE_II: [
        "FedCGD-FSCD {τ1 fscd sched} devices at WEMD {τ1 fscd wemd} (10.20, 0.306), FedCGD-GS "
        "{τ1 gs sched} at {τ1 gs wemd} (10.01, 0.311), FedCGD-FSCD-Gc {τ1 gc sched} at "
        "{τ1 gc wemd} (10.10, 0.310), BC {τ1 bc sched} at {τ1 bc wemd} (17.67, 0.527), BN2 "
        "{τ1 bn2 sched} at {τ1 bn2 wemd} (17.39, 0.537), POC {τ1 poc sched} at {τ1 poc wemd} "
        "(13.71, 0.621), Fed-CBS {τ1 cbs sched} at {τ1 cbs wemd} (17.34, 0.536)",
        "({τ1 fscd final} ± {τ1 fscd ci}) is pulled down by its seed 2, which ends at "
        "{run τ1 fscd 2 final} after a best of {run τ1 fscd 2 best}",
        "FSCD-Gc ({τ1 gc Δ}, p = {τ1 gc p}), GS ({τ1 gs Δ}, p = {τ1 gs p}) and BC ({τ1 bc Δ}, p = "
        "{τ1 bc p}) end above it, BN2 ({τ1 bn2 Δ}, p = {τ1 bn2 p}), POC ({τ1 poc Δ}, p = "
        "{τ1 poc p}) and Fed-CBS ({τ1 cbs Δ}, p = {τ1 cbs p}) below; seed by seed GS and BC end "
        "below FSCD in {below τ1 gs final} of 5 seeds each. Its best accuracy "
        "({τ1 fscd best}) is above every other policy's: BC's by {-τ1 bc bΔ} (p = {τ1 bc bp}), "
        "Fed-CBS's by {-τ1 cbs bΔ} (p = {τ1 cbs bp}), POC's by {-τ1 poc bΔ} (p = {τ1 poc bp}), "
        "BN2's by {-τ1 bn2 bΔ} (p = {τ1 bn2 bp}), GS's by {-τ1 gs bΔ} (p = {τ1 gs bp}) and "
        "FSCD-Gc's by {-τ1 gc bΔ} (p = {τ1 gc bp})",
        "becomes {τ1 bn2 bph}; best accuracy against BC {τ1 bc bph})",
        "the paired TOST at ±0.01 gives p ≥ {tost τ1 least} for every policy and both endpoints",
        "GS {τ1 gs median}, FSCD {τ1 fscd median}, BC {τ1 bc median}, FSCD-Gc {τ1 gc median}, "
        "Fed-CBS {τ1 cbs median} ({τ1 cbs reached} of 5 runs reached it), POC {τ1 poc reached} of "
        "5, BN2 {τ1 bn2 reached} of 5",
        "than BC, BN2, POC and Fed-CBS in {τ1 bc won} of 5 seeds (sign test p = {τ1 poc sp}, the "
        "smallest 5 seeds allow; {τ1 cbs sph} after Holm: the direction) and than GS and Gc in "
        "{τ1 gs won} of 5 (p = {τ1 gc sp})",
        "ends at {τ5 fscd final} ± {τ5 fscd ci}; GS ({τ5 gs Δ}, p = {τ5 gs p}; best {τ5 gs bΔ}, "
        "p = {τ5 gs bp}), BC ({τ5 bc Δ}, p = {τ5 bc p}; best {τ5 bc bΔ}, p = {τ5 bc bp}) and "
        "FSCD-Gc ({τ5 gc Δ}, p = {τ5 gc p}; its seed 0 ends at {run τ5 gc 0 final} after a best "
        "of {run τ5 gc 0 best})",
        "Fed-CBS (final {-τ5 cbs Δ}, p = {τ5 cbs p}; best {-τ5 cbs bΔ}, p = {τ5 cbs bp}), POC "
        "(final {-τ5 poc Δ}, p = {τ5 poc p}), BN2 (final {-τ5 bn2 Δ}, p = {τ5 bn2 p}) and FSCD-Gc "
        "in best accuracy ({-τ5 gc bΔ}, p = {τ5 gc bp})",
        "becomes {τ5 gc bph}; final accuracy against Fed-CBS {τ5 cbs ph})",
        "by the paired TOST at p = {τ5 bc btp}, but {τ5 bc btph} after Holm over the setting's 12 "
        "TOSTs: not shown similar; every other TOST has p ≥ {tost τ5 others least}",
        "GS first in {gs first τ5} of 5 seeds, not significantly.** GS reaches 0.8 before all six "
        "other policies in {gs first τ5} of 5 seeds and before FSCD in {τ5 gs lost} of 5 (median "
        "{τ5 gs median} rounds against {τ5 fscd median}; sign test p = {τ5 gs sp})",
        "earlier in {τ5 bc won} of 5 seeds, later in {τ5 bc lost}, one tie (p = {τ5 bc sp}; median "
        "{τ5 fscd median} against {τ5 bc median} rounds)",
        "than Fed-CBS, POC and BN2 in {τ5 poc won} of 5 seeds (p = {τ5 bn2 sp}, {τ5 cbs sph} after "
        "Holm)", "scheduling {% fscd τ1} % fewer devices than BC",
        "({% fscd τ5} % fewer at τ = 5, {τ5 fscd sched} against {τ5 bc sched}, WEMD {τ5 fscd wemd} "
        "against {τ5 bc wemd})", "{gc−cbs τ1} at τ = 1, p = {gc−cbs τ1 p}",
        "{gc−cbs τ5} at τ = 5, p = {gc−cbs τ5 p}; final {gc−cbs τ1 final}, p = "
        "{gc−cbs τ1 final p}, and {gc−cbs τ5 final}, p = {gc−cbs τ5 final p}), none significant "
        "after Holm over these four tests (the least {gc−cbs holm least}), nor shown similar "
        "(TOST p ≥ {tost gc−cbs least})",
        "{% gc τ1} % fewer devices at τ = 1 ({τ1 gc sched} against {τ1 cbs sched})",
        "and {% gc τ5} % fewer at τ = 5 ({τ5 gc sched} against {τ5 cbs sched})",
        "Ĝ/σ̂ is {Ĝσ τ1 low}–{Ĝσ τ1 high} at τ = 1 and {Ĝσ τ5 low}–{Ĝσ τ5 high} at τ = 5",
        "ρ = {ρ τ1} (exact p = {ρp τ1}, {n τ1} points, gaps of {gap τ1 low} to {gap τ1 high}); "
        "at τ = 5, ρ = {ρ τ5} (exact p = {ρp τ5}, {n τ5} points, gaps of {gap τ5 low} to "
        "{gap τ5 high}); over the preset's {n τ} points, ρ = {ρ τ} (p = {ρp τ})",
        "with the runs of 2026-11-26 τ = 5 gave ρ = {ρ τ5 first}, exact p = {ρp τ5 first})",
        "seed 0 ends at {run τ1 fscd 0 final} against {run τ1old fscd 0 final}",
        "final accuracy at τ = 1 is {τ1 fscd final} (it was {τ1old fscd final})",
        "FSCD against BC at 0.8 was {τ1old bc won} / {τ1old bc lost} and is {τ1 bc won} / "
        "{τ1 bc lost}",
    ],
    RATIO: [
        "Against FSCD-Gc over the three r: earlier in {r* gc won} of the {r* gc n} untied pairs "
        "(sign test p = {r* gc sp}, {r* gc sph} after Holm)",
        "{best r9 low}–{best r9 high} for every policy but BN2 ({r9 bn2 best})",
        "best accuracy ({r9 fscd best}) is above each of the four baselines': BC's (the best "
        "baseline, {r9 bc best}) by {-r9 bc bΔ} (paired t-test, p = {r9 bc bp}), Fed-CBS's by "
        "{-r9 cbs bΔ} (p = {r9 cbs bp}), POC's by {-r9 poc bΔ} (p = {r9 poc bp}), BN2's by "
        "{-r9 bn2 bΔ} (p = {r9 bn2 bp})",
        "only BN2's stays below 0.05 ({r9 bn2 bph}); Fed-CBS's and POC's become {r9 cbs bph} each "
        "and BC's {r9 bc bph}. FedCGD-GS's best accuracy is the highest at r = 9 ({r9 gs best}, "
        "{r9 gs bΔ} above FSCD's, p = {r9 gs bp})",
        "above Fed-CBS's by {-r3 cbs bΔ} (p = {r3 cbs bp}), POC's by {-r3 poc bΔ} (p = "
        "{r3 poc bp}) and BN2's by {-r3 bn2 bΔ} (p = {r3 bn2 bp}), but only {-r3 bc bΔ} above "
        "BC's (p = {r3 bc bp})",
        "only BN2's final accuracy gap ({-r3 bn2 Δ}, p = {r3 bn2 p}) stays below 0.05 "
        "({r3 bn2 ph}); Fed-CBS's best-accuracy gap becomes {r3 cbs bph}, POC's {r3 poc bph}, "
        "BN2's {r3 bn2 bph}.",
        "{-r1 bc bΔ} above BC's (p = {r1 bc bp}, {r1 bc bph} after",
        "Earlier than BC in {r1 bc won} of 5 seeds at r = 1, {r3 bc won} of 4 untied at r = 3 and "
        "{r9 bc won} of 5 at r = 9: {r* bc won} of the {r* bc n} untied pairs, exact sign test "
        "p = {r* bc sp} ({r* bc sph} after Holm",
        "Best accuracy {r3 gs bΔ} (p = {r3 gs bp}) at r = 3 and {r9 gs bΔ} (p = {r9 gs bp}) at r = "
        "9, not shown similar either (TOST at ±0.01: p = {r3 gs btp} and {r9 gs btp})",
        "GS earlier in {r9 gs lost} of 5 seeds at r = 9 (median {r9 gs median} against "
        "{r9 fscd median}, sign test p = {r9 gs sp}); at r = 3 earlier / later / tied "
        "{r3 gs won} / {r3 gs lost} / {r3 gs tied}",
        "({r1 fscd sched} → {r3 fscd sched} → {r9 fscd sched}) while BC stays at {r1 bc sched}, "
        "POC at {r1 poc sched} and Fed-CBS at {r1 cbs sched}",
        "({r1 fscd wemd}, {r3 fscd wemd}, {r9 fscd wemd} against BC's {r1 bc wemd}, {r3 bc wemd}, "
        "{r9 bc wemd})", "ρ = {ρ r} over its {n r} points (p = {ρp r})",
    ],
    POOLED: [
        "pooled as if they were, ρ = {ρ pooled}, p = {ρp pooled}",
        "Spearman ρ = {settings} over the 7 settings, exact permutation p = {settings p} "
        "({extreme} of the {pairings} pairings as extreme): not shown.",
        "{n pooled} points in 7 settings",
        "{between %} % of Ĝ/σ̂'s variance lies between the settings",
        "ρ = {within} (p = {within p})",
        "ranges from {left out low} (without r = 9) to {left out high}; without τ = 5 it is "
        "{without τ5}",
        "Per setting (5 seeds each) ρ goes from {each low} to {each high}, none with an exact p "
        "below 0.05 (the least, r = 3's, {each least p})", "r ρ = {ρ r} (p = {ρp r})",
        "the same test gave ρ = {settings 1126}, exact p = {settings 1126 p}",
    ],
    ALPHA: [
        "Against BC its lead is not significant at any α: at α = 1 neither in best accuracy "
        "({-α1 bc bΔ}, p = {α1 bc bp}, {α1 bc bph} after Holm over the final and best accuracy "
        "tests) nor in final accuracy ({-α1 bc Δ}, p = {α1 bc p}, {α1 bc ph} after Holm), nor at "
        "α = 0.1 (final {-α.1 bc Δ}, p = {α.1 bc p};", "or α = 10 (p ≥ {α10 bc least p})",
        "do not stay below 0.05 after Holm ({α.1 cbs ph}, {α.1 cbs bph}, {α1 cbs bph})",
        "the best-accuracy gap at α = 1 does ({α1 bn2 bph}), at α = 0.1 it does not "
        "({α.1 bn2 bph})",
        "({α.1 fscd median}, {α1 fscd median}, {α10 fscd median} rounds; GS {α.1 gs median}, "
        "{α1 gs median}, {α10 gs median}; BC {α.1 bc median}, {α1 bc median}, {α10 bc median})",
        "Fed-CBS's median is {α.1 cbs median} at α = 0.1 (3 of 5 runs reach 0.8), {α1 cbs median} "
        "at α = 1 and {α10 cbs median}",
        "({α.1 fscd wemd}, {α1 fscd wemd}, {α10 fscd wemd}, against BC's {α.1 bc wemd}, "
        "{α1 bc wemd}, {α10 bc wemd})",
        "seed 1, which ends at {run α10 fscd 1 final} after a best of {run α10 fscd 1 best} (its "
        "late mean over the last 240 rounds is {late α10 1}",
        "a fall of the step size, **not of the schedule**",
    ],
    PAPER: [
        "τ = 1: FSCD {τ1 fscd sched} ({τ1 fscd wemd}), GS {τ1 gs sched} ({τ1 gs wemd}), FSCD-Gc "
        "{τ1 gc sched} ({τ1 gc wemd}), BC {τ1 bc sched} ({τ1 bc wemd}), BN2 {τ1 bn2 sched} "
        "({τ1 bn2 wemd}), POC {τ1 poc sched} ({τ1 poc wemd}), Fed-CBS {τ1 cbs sched} "
        "({τ1 cbs wemd})", "(smallest Holm p {τ1 bn2 bph}, best accuracy against BN2)",
        "none shown similar either (TOST p ≥ {tost τ1 least}; final accuracy BN2 {τ1 bn2 Δ}, POC "
        "{τ1 poc Δ}, Fed-CBS {τ1 cbs Δ})", "not shown: neither different nor similar",
        "{-τ1 gs bΔ} below FSCD's (p = {τ1 gs bp})",
        "final {τ5 cbs Δ} (p = {τ5 cbs p}, Holm {τ5 cbs ph}), best {τ5 cbs bΔ} (p = {τ5 cbs bp})",
        "FSCD-Gc best {τ5 gc bΔ} (p = {τ5 gc bp}, Holm {τ5 gc bph})", "GS best {τ5 gs bΔ}",
        "above Fed-CBS {-r3 cbs bΔ} (Holm {r3 cbs bph}), BN2 {-r3 bn2 bΔ} (Holm {r3 bn2 bph}), "
        "POC {-r3 poc bΔ} (Holm {r3 poc bph}), BC only {-r3 bc bΔ} (p = {r3 bc bp}; TOST p = "
        "{r3 bc btp}); BN2's final accuracy gap the one shown (Holm {r3 bn2 ph})",
        "BC, by {-r9 bc bΔ} (p = {r9 bc bp}, Holm {r9 bc bph}), above Fed-CBS by {-r9 cbs bΔ} "
        "(Holm {r9 cbs bph}); above BN2 shown (Holm {r9 bn2 bph}); GS's best accuracy above "
        "FSCD's ({r9 gs bΔ}, p = {r9 gs bp})", "it was shown: BC by {-r9old bc bΔ}, Holm "
        "{r9old bc bph})",
        "FSCD {α.1 fscd median} and {α1 fscd median}, GS {α.1 gs median} and {α1 gs median}, BC "
        "{α.1 bc median} and {α1 bc median}",
        "{α* bc won} of {α* bc n} seed pairs over the three α (sign test p = {α* bc sp}, Holm "
        "{α* bc sph})", "medians FSCD {α10 fscd median}, GS {α10 gs median}, BC {α10 bc median}",
        "{sched α baselines low}–{sched α baselines high}",
        "FSCD {α.1 fscd sched} → {α1 fscd sched} → {α10 fscd sched}; GS {α.1 gs sched} → "
        "{α1 gs sched} → {α10 gs sched}",
        "{% gc τ1} % fewer ({τ1 gc sched} against {τ1 cbs sched}) at a best accuracy {gc−cbs τ1} "
        "higher (p = {gc−cbs τ1 p})", "τ = 5: {% gc τ5} % fewer",
        "in any of the 7 settings (smallest Holm p {gs holm least}), none shown similar (TOST p ≥ "
        "{tost gs least})", "neither different nor similar in accuracy",
        "supports fewer devices; \"performs as\" not shown: Gc ahead, not significantly, and not "
        "shown similar (TOST p ≥ {tost gc−cbs least})",
        "not shown (no best-accuracy gap significant after Holm; against BC neither a gap nor "
        "similarity)",
        "({α* gs won} of {α* gs n} untied pairs, Holm {α* gs sph})",
        "{τ5 gs lost} of 5 seeds (Holm {τ5 gs sph})",
        "ρ = {settings}, exact p = {settings p} (7 settings could show it: the least exact p is "
        "2/5040); with the {tied n} settings whose Ĝ/σ̂ lie within each other's 95 % intervals "
        "tied, ρ = {tied ρ}, exact p = {tied p}; within settings ρ = {within}; with the runs of "
        "2026-11-26, ρ = {settings 1126}, exact p = {settings 1126 p}",
        # "Where the results disagree with the paper" (its words: test_the_readings_in_words)
        "among the last, not on top (final {τ5 cbs Δ}, Holm {τ5 cbs ph})",
        "Fed-CBS and BN2 (Holm ≥ {r3 bn2 bph})", "BC ({-r9 bc bΔ}), is not shown (Holm "
        "{r9 bc bph}), and GS's best accuracy is above FSCD's (not significantly, p = {r9 gs bp})",
        "| not shown (the direction agrees, by {r9 points} accuracy points, about the paper's "
        "4.3 %; with the code of 2026-11-26 it was shown",
        "as α grows ({α.1 gs sched} → {α10 gs sched})",
        "reaches 0.8 first ({α10 gs won} of 4 untied pairs, sign test p = {α10 gs sp})",
        "over the r preset ({r* gc won} of {r* gc n} untied pairs, Holm {r* gc sph})",
        "not the most accurate (best {τ1 gs bΔ} against FSCD, p = {τ1 gs bp})",
        "does not reject (exact p = {settings p}; {settings 1126 p} with the runs of 2026-11-26)",
        "seed 1 at α = 10 ends at {run α10 fscd 1 final} after a best of {run α10 fscd 1 best}",
        "its seed 2 at τ = 1 falls too (best {run τ1 fscd 2 best}, final {run τ1 fscd 2 final})",
        "FSCD earlier than GS in {α10 gs won} seeds, later in none (sign test p = {α10 gs sp}, "
        "the least 4 untied pairs allow)",
        "τ = 1: BC {τ1 bc sched} devices (final {τ1 bc final}), Fed-CBS {τ1 cbs sched} "
        "({τ1 cbs final}), BN2 {τ1 bn2 sched} ({τ1 bn2 final}), POC {τ1 poc sched} "
        "({τ1 poc final}): Spearman ρ = {sched final τ1} over the 4 baselines; BN2 and Fed-CBS "
        "schedule the same number {cbs−bn2 τ1} apart",
        "τ = 1: final {τ1 gc Δ} (p = {τ1 gc p}, Holm {τ1 gc ph}), median rounds to 0.8 "
        "{τ1 gc median} against FSCD's {τ1 fscd median}",
        "τ = 5: FSCD's final accuracy {-τ5 bc Δ} above BC's (p = {τ5 bc p}, Holm {τ5 bc ph})",
        "BC only {-r3 bc bΔ} (p = {r3 bc bp}; TOST p = {r3 bc btp})",
        "(at α = 10 FSCD earlier in {α10 gs won} of 4 untied pairs, Holm {α10 gs sph})",
        "in rounds to 0.7 over the r preset FSCD is earlier in {r* gc won} of {r* gc n} untied "
        "pairs (Holm {r* gc sph}; also at 0.8 and 0.85, not at 0.75)",
    ],
    "comparing.md": [
        "({d fscd sched} against {d bc sched}) at the lowest WEMD of all ({d fscd wemd} against "
        "{d bc wemd})",
        "({d bc Δ} for BC, p = {d bc p}; {d bc ph} after Holm over the 6 baselines' final and best "
        "accuracy tests, so not significant)",
        "POC's best accuracy, ahead of FSCD's ({d poc bΔ} for POC, p = {d poc bp}), and BC's final "
        "accuracy (above); after it they are {d holm least} and {d bc ph}",
        "nor shown similar (paired TOST, ±0.01: p = {d gs tp} final, {d gs btp} best)",
        "BC's best accuracy within ±0.01 of FSCD's (p = {d bc btp}), becomes {d bc btph} after "
        "Holm over the setting's 12 TOSTs; the next, Fed-CBS's best accuracy, is just above 0.05 "
        "(p = {d cbs btp}; {d cbs btph} after Holm)", "would be {tost9 d bc} and {tost9 d cbs}",
        "before BC in {d bc won} of 5 seeds ({d fscd reached} rounds against {d bc reached} on "
        "average, medians {d fscd median} and {d bc median}; sign test p = {d bc sp}, the smallest "
        "5 seeds allow, {d bc sph} after Holm", "are not significant (p ≥ {d others least p})",
        "FSCD's final accuracy {d26 fscd final} → {d fscd final} and mean rounds to 85 % "
        "{d26 fscd reached} → {d fscd reached}; BC's final-accuracy p {d26 bc p} → {d bc p} (Holm "
        "{d26 bc ph} → {d bc ph}); POC's best-accuracy p {d26 poc bp} → {d poc bp} (Holm "
        "{d26 poc bph} → {d poc bph}), now below 0.05 before Holm; the best-accuracy TOST p's of "
        "BC {d26 bc btp} → {d bc btp} and Fed-CBS {d26 cbs btp} → {d cbs btp}, no longer below "
        "0.05; FSCD earlier / later against BN2 {d26 bn2 won} / {d26 bn2 lost} → {d bn2 won} / "
        "{d bn2 lost} and POC {d26 poc won} / {d26 poc lost} → {d poc won} / {d poc lost}",
    ],
    "README.md": [
        "({d fscd sched} against {d bc sched}) at the lowest WEMD of all ({d fscd wemd} against "
        "{d bc wemd})",
        "it is ahead of it in final accuracy ({d fscd final} against {d bc final}, paired p = "
        "{d bc p}, {d bc ph} after Holm's correction over the six baselines' final and best "
        "accuracy tests: not significant) and reaches 85 % earlier in every seed ({d fscd reached} "
        "rounds against {d bc reached} on average; sign test p = {d bc sp}, {d bc sph} after "
        "Holm); no other difference on this easy problem is significant",
        "reaches 0.8 test accuracy in a median of {α.1 fscd median} rounds against best channel's "
        "{α.1 bc median} (earlier in {α.1 bc won} of 5 seeds, sign test p = {α.1 bc sp}, "
        "{α.1 bc sph} after Holm: the direction; pooled over the three α, earlier in {α* bc won} "
        "of {α* bc n} pairs, {α* bc sph} after Holm: significant)",
        "scheduling {α.1 fscd sched} devices a round against {α.1 bc sched}",
        "ends at {α.1 fscd final} against {α.1 bc final} (paired p = {α.1 bc p}; at α = 1 neither "
        "its final accuracy lead, {-α1 bc Δ}, p = {α1 bc p}, nor its best accuracy lead, "
        "{-α1 bc bΔ}, p = {α1 bc bp}, is significant after Holm's correction over both endpoints "
        "of every baseline, {α1 bc ph} and {α1 bc bph})",
    ],
}  # fmt: skip
NUMBER = r"[−+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e-?\d+)?"


@pytest.mark.parametrize("where", list(PHRASES))
def test_the_docs_print_these_readings(where: str) -> None:
    """Each phrase is in the text, each marked number the reading it names."""
    text, wrong = " ".join(_section(where).split()), []
    for phrase in PHRASES[where]:
        parts = re.split(r"\{([^}]*)\}", phrase)
        keys = parts[1::2]
        pattern = "".join(
            re.escape(p) if i % 2 == 0 else f"({NUMBER})" for i, p in enumerate(parts)
        )
        found = re.search(pattern, text)
        if found is None:
            wrong.append(phrase)
            continue
        for i, (key, shown) in enumerate(zip(keys, found.groups(), strict=True)):
            if parts[2 * i].endswith("≥ "):  # a floor: rounded down, never up past the value
                step = 10.0 ** -len(shown.partition(".")[2])
                wrong += [] if float(shown) <= _value(key) < float(shown) + step else [(key, shown)]
            elif _like(_value(key), shown) != shown:
                wrong.append((key, shown))
    assert wrong == []


def _same(preset: str, sweep: str) -> list[tuple[str, ...]]:
    keep = ("policy", "seed", FINAL, BEST, SCHEDULED, WEMD)
    return sorted(tuple(r[k] for k in keep) for r in _runs(preset) if r["sweep"] == sweep)


def _pooled_rows(*names: str) -> list[tuple[str, ...]]:
    key = ("seed", "ghat_over_sigma_early", "fscd_late_accuracy", "bc_late_accuracy")
    return sorted({tuple(p[k] for k in key) for n in names for p in _rows(f"{n}_indicator")})


def test_the_readings_in_words() -> None:
    """What the docs say without a number: who is lowest, which seed, which settings are equal."""
    # early Ĝ/σ̂ larger at τ = 1 in every seed (FSCD's best above every other policy's: PHRASES)
    assert min(_points(TAU, TAU1))[0] > max(_points(TAU, TAU5))[0]
    # pooled: each preset's points once (r = 1 is τ = 1); least without r = 9; least p r = 3's
    assert _pooled_rows(TAU, IMBALANCE, DIRICHLET) == _pooled_rows("mnist1d_pooled")
    left_out = _settings()["left out"]
    assert min(left_out, key=left_out.__getitem__) == f"{IMBALANCE}/{R9}"
    each = _settings()["each"]
    assert (
        min(each, key=lambda k: each[k][1]) == f"{IMBALANCE}/{R3}"
        and each[f"{IMBALANCE}/{R3}"][1] > 0.05
    )
    # r = 1 is the τ = 1 runs; BC the best baseline at r = 9; FSCD the lowest WEMD everywhere
    assert _same(TAU, TAU1) == _same(IMBALANCE, R1) and len(_same(IMBALANCE, R1)) == 35
    assert max(BASELINES, key=lambda p: _mean(IMBALANCE, p, R9, BEST)) == "bc"
    assert max(PRESETS[IMBALANCE][2], key=lambda p: _mean(IMBALANCE, p, R9, BEST)) == GS
    for preset, sweep in ((IMBALANCE, R1), (IMBALANCE, R3), (IMBALANCE, R9), (DIGITS, "")):
        wemd = {p: _mean(preset, p, sweep, WEMD) for p in PRESETS[preset][2]}
        assert min(wemd, key=wemd.__getitem__) == FSCD, sweep
    for policy, fmt in (("bc", ".2f"), ("poc", ".1f"), ("fedcbs", ".1f")):  # "stays at" over r
        assert len({format(_mean(IMBALANCE, policy, r, SCHEDULED), fmt) for r in (R1, R3, R9)}) == 1
    for column in (FINAL, BEST):  # τ = 5: Fed-CBS "among the last" (of the last three)
        assert sorted(PRESETS[TAU][2], key=lambda p: _mean(TAU, p, TAU5, column))[2] == "fedcbs"
    assert _value("below τ1 bc final") == _value("below τ1 gs final")  # "in 3 of 5 seeds each"


def _seven() -> list[tuple[str, str]]:
    """The 7 MNIST-1D settings as (preset, sweep): r = 1 is τ = 1's, read from the τ preset."""
    return [(p, s) for p in (TAU, IMBALANCE, DIRICHLET) for s in PRESETS[p][0] if s != R1]


def _gs_holm() -> list[float]:
    """GS's Holm p's (final and best) in the 7 settings."""
    return [_holm_accuracy(*setting)[(GS, c)] for setting in _seven() for c in (FINAL, BEST)]


def test_which_tests_stay_significant_after_holm() -> None:
    """Both endpoints one family per setting. τ = 1 and τ = 5: none below 0.05 (the least as
    :data:`PHRASES` says); r = 3: BN2's final accuracy; r = 9: BN2's both endpoints;
    α = 1: BN2's best accuracy, not BC's; α = 0.1: none; digits: none; GS: none anywhere."""
    tau1, tau5 = (_holm_accuracy(TAU, s) for s in (TAU1, TAU5))
    assert min(tau1, key=tau1.__getitem__) == ("bn2", BEST) and min(tau1.values()) > 0.05
    assert min(tau5, key=tau5.__getitem__) == (GC, BEST) and min(tau5.values()) > 0.05
    r3, r9 = (_holm_accuracy(IMBALANCE, r) for r in (R3, R9))
    assert {k for k, p in r3.items() if p < 0.05} == {("bn2", FINAL)}
    assert {k for k, p in r9.items() if p < 0.05} == {("bn2", FINAL), ("bn2", BEST)}
    a1, a01 = _holm_accuracy(DIRICHLET, A1), _holm_accuracy(DIRICHLET, A01)
    assert a1[("bn2", BEST)] < 0.05 < a1[("bc", BEST)] and min(a01.values()) > 0.05
    digits = _holm_accuracy(DIGITS, "")
    assert min(digits, key=digits.__getitem__) == ("poc", BEST) and min(digits.values()) > 0.05
    raw = {k for k in digits if _paired_t_p(DIGITS, k[0], "", k[1])[1] < 0.05}
    assert raw == {("poc", BEST), ("bc", FINAL)}  # before Holm
    holm_gs = _gs_holm()
    assert len(holm_gs) == 14 and min(holm_gs) > 0.05


def test_no_similar_claim_without_an_equivalence_test() -> None:
    """Words of likeness ("similar", "as good as", "within the noise") only where a TOST shows
    it: before Holm only τ = 5's and digits' BC in best accuracy (none after it,
    their Holm p's in :data:`PHRASES`), the docs say so."""
    shown = {
        (preset, s, p, c) for preset in (TAU, IMBALANCE, DIRICHLET, DIGITS)
        for s in PRESETS[preset][0] for p in PRESETS[preset][2] if p != FSCD
        for c in (FINAL, BEST) if _tost_p(preset, p, s, c) < 0.05
    }  # fmt: skip
    assert shown == {(TAU, TAU5, "bc", BEST), (DIGITS, "", "bc", BEST)}
    words = re.compile(r"similar|level with|as good as|within the noise|level accuracy|matches")
    for page in ("evidence.md", "comparing.md", "README.md"):
        text = " ".join(_section(page).split())
        for found in words.finditer(text):
            around = text[max(0, found.start() - 200) : found.end() + 200]
            assert ALLOWED.search(around), (page, around)


#: What a hit of those words may stand beside: the paper's words quoted, a TOST, "not shown".
ALLOWED = re.compile(
    r"not shown similar|none shown similar|TOST|the paper|paper's|\bsays\b|CIFAR|Table II|"
    r"matches the paper|match the paper|schedul"
)


def test_the_digits_runs_their_rounds_what_moved_and_the_attack_sweeps() -> None:
    """Each run is its rounds; what moved since 2026-11-26; no-attack FedAvg runs are these."""
    with gzip.open(DOCS / f"{DIGITS}_rounds.csv.gz", "rt", newline="") as handle:
        rounds = list(csv.DictReader(handle))
    keep = (FINAL, BEST, "rounds_to_target", SCHEDULED, WEMD)
    for run in _runs(DIGITS):
        rows = [r for r in rounds if (r["policy"], r["seed"]) == (run["policy"], run["seed"])]
        columns = ("accuracy", "num_scheduled", "wemd")  # wemd "": nothing scheduled
        accuracy, *means = ([float(r[k]) for r in rows if r[k]] for k in columns)
        assert [int(r["round"]) for r in rows] == list(range(1, 1 + int(run["rounds_run"])))
        reached = next((r["round"] for r in rows if float(r["accuracy"] or 0) >= 0.85), "")
        expected = [accuracy[-1], max(accuracy), reached, *map(statistics.fmean, means)]
        assert [run[k] if k == keep[2] else float(run[k]) for k in keep] == pytest.approx(expected)
    now, then = ({(r["policy"], r["seed"]): r for r in _runs(p)} for p in (DIGITS, DIGITS_1126))
    moved = {(*k, c): abs(float(r[c]) - float(then[k][c]))
             for k, r in now.items() for c in keep if r[c] != then[k][c]}  # fmt: skip
    assert moved.pop((FSCD, "4", "rounds_to_target")) == 3
    assert {k: round(360 * d, 9) for k, d in moved.items() if k[2] != WEMD} == {
        (FSCD, "2", BEST): 1, (FSCD, "4", FINAL): 1, (GS, "3", FINAL): 1, (GS, "3", BEST): 1
    }  # fmt: skip
    wemd = {k[:2]: d for k, d in moved.items() if k[2] == WEMD}
    assert set(wemd) == {(FSCD, "4"), *((GS, s) for s in "123")} and max(wemd.values()) < 0.002
    rows = [r for p in (DIGITS, DIGITS_1126) for r in _table(p).values()]  # no verdict changed
    assert min(float(v) for r in rows for c, v in r.items() if c.endswith("_holm") and v) > 0.05
    fedavg = [r for r in _rows("attack_aggregators_runs") if r["aggregator"] == "FedAvg"]
    same = [{tuple(r[k] for k in ("policy", "seed", *keep[:-1], "code")) for r in runs}
            for runs in ([r for r in fedavg if r["attackers"] == "0"], _runs(DIGITS))]  # fmt: skip
    assert len(same[0]) == 15 and same[0] <= same[1]


def _g3(value: str) -> str:
    return format(float(value), ".3g")


def _expected_cells(row: dict[str, str]) -> list[str]:
    """A docs table's cells after the sweep point, formatted here from the CSV row."""

    def pm(column: str, fmt: str) -> str:
        return f"{float(row[column + '_mean']):{fmt}} ± {float(row[column + '_ci95']):{fmt}}"

    median = float(row["rounds_to_target_km_median"])
    rounds = f"{'–' if math.isinf(median) else f'{median:.0f}'} ({row['reached_target']}/5)"
    sign = final = best = "–"
    if row["policy"] != FSCD:
        earlier, later, tied = (
            row[f"rounds_{k}_vs_fedcgd_fscd"] for k in ("earlier", "later", "tied")
        )
        p = "rounds_sign_p_vs_fedcgd_fscd"
        sign = f"{later} / {earlier} / {tied} ({_g3(row[p])} / {_g3(row[p + '_holm'])})"
        final, best = (
            f"{_like(float(row[prefix + 'diff_vs_fedcgd_fscd']), '+.000')} "
            f"({_g3(row[prefix + 'p_value_vs_fedcgd_fscd'])} / "
            f"{_g3(row[prefix + 'p_value_vs_fedcgd_fscd_holm'])})"
            for prefix in ("", "best_")
        )
    return [
        POLICY_LABELS[row["policy"]], pm(FINAL, ".3f"), pm(BEST, ".3f"), rounds, sign,
        pm(SCHEDULED, ".2f"), pm(WEMD, ".3f"), final, best,
    ]  # fmt: skip


@pytest.mark.parametrize(("page", "preset", "first"), [
    ("evidence.md", TAU, "| τ | policy | final accuracy |"),
    ("evidence.md", IMBALANCE, "| r | policy |"), ("evidence.md", DIRICHLET, "| α | policy |"),
    ("comparing.md", DIGITS, "| policy | final accuracy |"),
])  # fmt: skip
def test_every_docs_table_cell_is_its_csv_value(page: str, preset: str, first: str) -> None:
    lines, table = _md_table(page, first), _table(preset)
    assert len(lines) == len(table)
    assert {row["runs_with_lost_devices"] for row in table.values()} == {"0"}
    assert page != "evidence.md" or "No run of these tables lost a device" in _section(page)
    for cells, ((sweep, _), row) in zip(lines, table.items(), strict=True):
        if sweep:
            assert cells[0] == sweep.split("=")[1].removesuffix(".0")
            cells = cells[1:]
        assert cells == _expected_cells(row)


def test_the_paper_table() -> None:
    """17 claims, their numbers in :data:`PHRASES`; what no test recomputes says so."""
    rows = {r[0]: " | ".join(r) for r in _md_table(PAPER, "| paper's claim")}
    assert len(rows) == 17
    (indicator,) = [r for k, r in rows.items() if k.startswith("Ĝ/σ̂")]
    assert indicator.endswith("| not supported (the direction agrees, the test does not reject)")
    (solver,) = [r for k, r in rows.items() if k.startswith("solver figure")]
    assert "no test recomputes these" in solver and f"{228 / 5.16:.0f} times" in solver
    curves = [r for k, r in rows.items() if "at the start" in k or "not committed" in r]
    assert len(curves) == 3 and all("untested here" in r or "contradicts" in r for r in curves)


#: The η tables of the falls: (the words before the table, its CSV, the η of its columns).
FALLS = [
    ("per round from the checkpoint after round 635", "mnist1d_eta_fall",
     ("0.3", "0.2", "0.1", "0.1_round_636_only")),
    ("The second fall, from the checkpoint after round 1,083", "mnist1d_eta_fall",
     ("0.3", "0.2", "0.1")),
    ("has every round 1,100–1,200", "mnist1d_eta_fall_a10", ("0.3", "0.2", "0.1")),
]  # fmt: skip


def _fall_rows(name: str) -> dict[int, dict[str, str]]:
    return {int(row["round"]): row for row in _rows(name)}


@pytest.mark.parametrize(("anchor", "name", "etas"), FALLS)
def test_each_fall_tables_cells_are_its_csv_values(anchor: str, name: str, etas: tuple) -> None:
    """Accuracy (test loss) of each η at each round shown, as its CSV holds them."""
    body, rows = _md_table("evidence.md", "| round |", anchor), _fall_rows(name)
    assert len(body) >= 9
    for cells in body:
        row = rows[int(cells[0].replace(",", ""))]
        assert cells[1:] == [
            f"{float(row[f'eta_{e}_accuracy']):.3f} ({float(row[f'eta_{e}_loss']):.2f})"
            for e in etas
        ], cells


def test_the_alpha_10_falls_readings() -> None:
    """σ̂'s climb at η = 0.3 and its ceiling, the lowest accuracy at η ≤ 0.2, equal schedules."""
    rows = _fall_rows("mnist1d_eta_fall_a10")
    after = range(1106, 1201)
    text = " ".join(_section("evidence.md").split())

    def top(eta: str, column: str) -> float:
        return max(float(rows[r][f"eta_{eta}_{column}"]) for r in after)

    low = {e: min(float(rows[r][f"eta_{e}_accuracy"]) for r in after) for e in ("0.2", "0.1")}
    peak = max(after, key=lambda r: float(rows[r]["eta_0.3_sigma"]))
    assert (
        f"σ̂ climbs from {float(rows[1105]['eta_0.3_sigma']):.2f} (round 1,105) to "
        f"{top('0.3', 'sigma'):.2f} (round {peak:,})" in text
    )
    assert f"it stays at most {top('0.2', 'sigma'):.2f} and {top('0.1', 'sigma'):.2f}" in text
    assert f"after round 1,105 is {low['0.2']:.3f} and {low['0.1']:.3f}" in text
    assert f"(lowest accuracy {low['0.2']:.3f} and {low['0.1']:.3f} up to round 1,200" in text
    assert f"{min(low.values()):.3f}" > f"{float(rows[1117]['eta_0.3_accuracy']):.3f}"
    same = [len({rows[r][f"eta_{e}_num_scheduled"] for e in ("0.3", "0.2", "0.1")}) for r in after]
    assert same[:4] == [1] * 4 and "rounds 1,106–1,109 are the same in all three" in text


ATTACK_ROBUST = ("FedMedian", "FedTrimmedAvg", "Krum", "Bulyan")
ATTACK_POLICIES = (FSCD, "bc", "all")


def _family(name: str, pairs: list[tuple[str, str, str, str, str]]) -> dict[tuple, tuple]:
    """(policy, aggregator, attackers, vs aggregator, vs attackers, endpoint) -> (mean
    difference, raw paired p, Holm's p over both endpoints of every pair) from
    ``docs/<name>_runs.csv``."""
    runs = _rows(f"{name}_runs")

    def values(policy: str, aggregator: str, attackers: str, endpoint: str) -> list[float]:
        mine = [r for r in runs if (r["policy"], r["aggregator"], r["attackers"]) == (
            policy, aggregator, attackers)]  # fmt: skip
        return [float(r[endpoint]) for r in sorted(mine, key=lambda r: int(r["seed"]))]

    keys, found = [], []
    for (policy, aggregator, k, other, k0), endpoint in itertools.product(pairs, (FINAL, BEST)):
        a, b = values(policy, aggregator, k, endpoint), values(policy, other, k0, endpoint)
        keys.append((policy, aggregator, k, other, k0, endpoint))
        found.append((float(np.mean(np.subtract(a, b))), stats.ttest_rel(a, b).pvalue))
    adjusted = holm([p for _, p in found])
    return {key: (*f, h) for key, f, h in zip(keys, found, adjusted, strict=True)}


def _sweep_cells(name: str) -> dict[tuple[str, str, str], tuple[str, ...]]:
    """``docs/<name>.csv`` recomputed from its runs (today's code; means, 95 % half-widths,
    Kaplan–Meier medians) and each row's Markdown cells: final, best, rounds to 85 %."""
    runs, cells = _rows(f"{name}_runs"), {}
    assert {r["code"] for r in runs} == {"1e2de2cde922c934"}
    for row in _rows(name):
        key = (row["policy"], row["aggregator"], row["attackers"])
        mine = [r for r in runs if (r["policy"], r["aggregator"], r["attackers"]) == key]
        shown = []
        for metric in (FINAL, BEST):
            x = [float(r[metric]) for r in mine]
            half = stats.t.ppf(0.975, len(x) - 1) * stats.sem(x)
            assert float(row[f"{metric}_mean"]) == pytest.approx(np.mean(x), abs=1e-12)
            assert float(row[f"{metric}_ci95"]) == pytest.approx(half, abs=1e-12)
            shown.append(f"{np.mean(x):.3f} ± {half:.3f}")
        reached = [int(r["rounds_to_target"]) for r in mine if r["rounds_to_target"]]
        km = km_median([(r, 50) for r in reached] + [(None, 50)] * (len(mine) - len(reached)))
        assert float(row["rounds_to_target_km_median"]) == km
        assert int(row["reached_target"]) == len(reached)
        shown.append(f"{'–' if math.isinf(km) else int(km)} ({len(reached)}/{len(mine)})")
        cells[key] = tuple(shown)
    return cells


def test_the_attack_sweep_in_aggregation_md_is_its_runs() -> None:
    """The attack table is its runs' means, 95 % half-widths and Kaplan–Meier medians; the
    bullets' numbers are paired t-tests with Holm over each bullet's family."""
    cells, table = _sweep_cells("attack_aggregators"), _rows("attack_aggregators")
    assert len(_rows("attack_aggregators_runs")) == 225
    lines = _md_table("aggregation.md", "| policy | aggregator | final, 0 attackers")
    assert len(lines) == 15
    for line in lines:
        key = (line[0], line[1].split()[0])
        finals, bests = zip(*(cells[(*key, k)][:2] for k in "013"), strict=True)
        assert line[2:9] == [*finals, *bests, cells[(*key, "0")][2]]
    text = " ".join(_section("aggregation.md").split())
    A, P, R, T = "attack_aggregators", ATTACK_POLICIES, ATTACK_ROBUST, "FedTrimmedAvg"
    attack = _family(A, [(p, "FedAvg", k, "FedAvg", "0") for p in P for k in "13"])
    three = [attack[(p, "FedAvg", "3", "FedAvg", "0", FINAL)] for p in P]
    one = [attack[(p, "FedAvg", "1", "FedAvg", "0", FINAL)] for p in ("all", FSCD, "bc")]
    numbers = [-d for d, _, _ in three] + [p for _, p, _ in three] + [h for *_, h in three]
    numbers += [-d for d, _, _ in one] + [min(h for *_, h in one)]
    assert (
        "Three attackers cost the scheduler's FedAvg {:.3f} final accuracy under FedCGD-FSCD, "
        "{:.3f} under BC and {:.3f} under `all` (raw p {:.3f}, {:.3f} and {:.3f}; Holm over the "
        "bullet's 12 tests {:.3f}, {:.3f} and {:.3f}); one attacker costs `all` {:.3f}, "
        "FedCGD-FSCD {:.3f} and BC {:.3f} (Holm ≥ {:.3f})".format(*numbers)
    ) in text
    moved = _family(A, [(p, a, "3", a, "0") for p in P for a in R])
    largest = sorted(moved.items(), key=lambda item: -abs(item[1][0]))  # by the change
    (first, (d1, _, h1)), (second, (d2, _, h2)) = largest[:2]
    assert (first[0], first[5], second[0], second[5]) == (FSCD, BEST, "all", FINAL)
    assert first[1] == second[1] == "FedMedian" and min(h for *_, h in moved.values()) == h1
    assert (
        f"FedMedian's under FedCGD-FSCD (best accuracy −{-d1:.3f}) and under `all` "
        f"(final −{-d2:.3f}), with Holm {h1:.3f} and {h2:.3f} over the bullet's 24 tests"
    ) in text
    cost0 = _family(A, [(p, a, "0", "FedAvg", "0") for p in P for a in R])
    harsh = [v for k, v in cost0.items() if k[5] == FINAL and k[1] != T]
    trim = [v for k, v in cost0.items() if k[5] == FINAL and k[1] == T]
    assert {round(h, 3) for k, (*_, h) in cost0.items() if k[1] == T} == {0.058}
    assert (
        f"FedMedian, Krum and Bulyan lose {-max(harsh)[0]:.2f}–{-min(harsh)[0]:.2f} final accuracy "
        f"against FedAvg (Holm ≤ {max(h for *_, h in harsh):.3f} over the bullet's 24 tests) and "
        f"never reach 85 % in 50 rounds; FedTrimmedAvg loses {-max(trim)[0]:.2f}–"
        f"{-min(trim)[0]:.2f} (raw p ≤ {max(p for _, p, _ in trim):.3f}, Holm 0.058: not shown)"
    ) in text
    cells = {(r["policy"], r["aggregator"], r["attackers"]): r for r in table}
    km = "rounds_to_target_km_median"
    medians = [float(cells[(p, "FedAvg", "0")][km]) for p in ("all", "bc")]
    assert float(cells[(FSCD, T, "0")][km]) == 43
    assert f"against FedAvg's median of 23–{max(medians):.0f}" in text and min(medians) > 23
    reached = [sorted({cells[(p, a, "0")]["reached_target"] for p in P}) for a in R]
    assert reached == [["0"], ["2", "3"], ["0"], ["0"]]  # FedTrimmedAvg: "in 2–3 of 5 seeds"
    rounds = [float(cells[(p, "FedAvg", "3")]["attacker_rounds_mean"]) for p in (FSCD, "all")]
    assert "({:.0f} of 50 for three attackers against {:.0f} for `all`)".format(*rounds) in text
    defend = _family(A, [(p, a, k, "FedAvg", k) for k in "13" for p in P for a in R])
    pairs = [("all", T), ("all", "Bulyan"), (FSCD, T), ("bc", T)]
    (d1, p1), (d2, p2), (d3, p3), (d4, p4) = (
        defend[(p, a, "3", "FedAvg", "3", FINAL)][:2] for p, a in pairs
    )
    assert (
        f"`all` end above FedAvg (+{d1:.3f}, raw p {p1:.3f}; +{d2:.3f}, raw p {p2:.3f}), and "
        f"FedTrimmedAvg under FedCGD-FSCD and BC too (+{d3:.3f} and +{d4:.3f}, raw p {p3:.2f} and "
        f"{p4:.2f})"
    ) in text
    assert all(h == 1.0 for k, (d, _, h) in defend.items() if k[2] == "3" and d > 0)
    assert all(
        d < 0 for k, (d, *_) in defend.items() if k[1] in ("FedMedian", "Krum") or k[2] == "1"
    )
    below = {k[:2] for k, (*_, h) in defend.items() if k[2] == "1" and k[1] != T and h < 0.05}
    assert f"are shown below it in {len(below)} of their 9 cells" in text


def test_the_dp_table_in_aggregation_md_is_its_runs() -> None:
    """The DP table and its readings: its runs, paired t-tests with Holm over the table's 10
    tests and over the 4 under attack."""
    cells = _sweep_cells("dp_aggregators")
    private = [a for (_, a, k) in cells if k == "0" and a != "FedAvg"]
    table = _family("dp_aggregators", [(FSCD, a, "0", "FedAvg", "0") for a in private])

    def p(value: float) -> str:
        return "< 0.001" if value < 0.001 else f"{value:.3f}"

    lines = _md_table("aggregation.md", "| aggregator | final accuracy | best | rounds to 85 %")
    assert [line[1:4] for line in lines] == [
        list(cells[(FSCD, a, "0")]) for a in ("FedAvg", *private)
    ]
    for line, a in zip(lines[1:], private, strict=True):
        tests = [table[(FSCD, a, "0", "FedAvg", "0", e)] for e in (FINAL, BEST)]
        assert line[4:] == [
            f"{d:+.3f} ({p(raw)} / {p(h)})".replace("-", "−") for d, raw, h in tests
        ]
    attacked = _family(
        "dp_aggregators", [(FSCD, a, "3", "FedAvg", "3") for a in ("DP-fixed-z0", "DP-fixed-z0.3")]
    )
    (d0, p0, h0), (d3, p3, _) = (
        attacked[(FSCD, a, "3", "FedAvg", "3", FINAL)] for a in private[:2]
    )
    assert {round(h, 2) for *_, h in attacked.values()} == {round(h0, 2)}
    shown = [cells[(FSCD, a, "3")][0] for a in (*private[:2], "FedAvg")]
    assert (
        "DP fixed at z = 0 ends at {} and at z = 0.3 at {} against FedAvg's {} (+{:.3f} and "
        "+{:.3f}, raw p {:.2f} and {:.2f}, Holm {:.2f} over their 4 tests".format(
            *shown, d0, d3, p0, p3, h0
        )
    ) in (text := " ".join(_section("aggregation.md").split()))
    z1 = [table[(FSCD, a, "0", "FedAvg", "0", FINAL)] for a in ("DP-fixed-z1", "DP-adaptive-z1")]
    z0 = [table[(FSCD, "DP-fixed-z0", "0", "FedAvg", "0", e)] for e in (BEST, FINAL)]
    z03 = [
        table[(FSCD, a, "0", "FedAvg", "0", FINAL)] for a in ("DP-fixed-z0.3", "DP-adaptive-z0.3")
    ]
    assert max(h for *_, h in z1) < 0.0165 and min(z03, key=lambda t: t[2])[2] > 0.265
    assert (
        f"z = 1 costs {-z1[0][0]:.2f}–{-z1[1][0]:.2f} final accuracy (Holm ≤ 0.016) and never "
        f"reaches 85 %; clipping alone (z = 0) costs {-z0[0][0]:.3f} best accuracy (Holm "
        f"{z0[0][2]:.3f}) and {-z0[1][0]:.3f} final (Holm {z0[1][2]:.3f}, not shown); at z = 0.3 "
        f"no cost is shown (fixed −{-z03[0][0]:.3f}, adaptive −{-z03[1][0]:.3f} final; Holm ≥ 0.27)"
    ) in text
