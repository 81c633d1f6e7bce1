"""The presets' and comparisons' readings in the docs, recomputed from their per-run rows.

``docs/mnist1d_<preset>_runs.csv`` holds a preset's runs (one row per sweep point × policy ×
seed), ``docs/compare_digits_runs.csv`` the digits comparison's (one row per policy × seed, no
sweep); the tables, the paired tests and the Ĝ/σ̂ correlation the docs cite are recomputed here
by hand (counts, means, binomial sums, ranks), not by the code that wrote them.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
import statistics
from pathlib import Path

import pytest
from scipy import stats

DOCS = Path(__file__).resolve().parent.parent / "docs"
FSCD = "fedcgd-fscd"
#: The table's p columns, each with a ``_holm`` twin.
P_COLUMNS = (
    "p_value_vs_fedcgd_fscd",
    "best_p_value_vs_fedcgd_fscd",
    "rounds_sign_p_vs_fedcgd_fscd",
    "rounds_wilcoxon_p_vs_fedcgd_fscd",
)
#: file stem -> (its sweep points as written in the tables, its number of runs, its policies)
PRESETS: dict[str, tuple[tuple[str, ...], int, tuple[str, ...]]] = {
    "mnist1d_dirichlet": (
        tuple(f"dirichlet-alpha={a}" for a in ("0.1", "1.0", "10.0")),
        90,
        (FSCD, "fedcgd-gs", "bc", "bn2", "poc", "fedcbs"),
    ),
    "mnist1d_local_steps": (
        ("local-steps=1", "local-steps=5"),
        70,
        ("fedcgd-fscd-gc", FSCD, "fedcgd-gs", "bc", "bn2", "poc", "fedcbs"),
    ),
    "mnist1d_imbalance": (
        tuple(f"imbalance-ratio={r}" for r in ("1.0", "3.0", "9.0")),
        105,
        ("fedcgd-fscd-gc", FSCD, "fedcgd-gs", "bc", "bn2", "poc", "fedcbs"),
    ),
    "compare_digits": (("",), 35, (FSCD, "fedcgd-gs", "bc", "bn2", "poc", "fedcbs", "all")),
}
ALPHAS = PRESETS["mnist1d_dirichlet"][0]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _runs(preset: str) -> list[dict[str, str]]:
    """The runs of ``docs/<preset>_runs.csv``; a comparison's (no sweep column) have sweep ""."""
    return [{"sweep": "", **r} for r in _rows(DOCS / f"{preset}_runs.csv")]


def _table(preset: str) -> dict[tuple[str, str], dict[str, str]]:
    """``docs/<preset>.csv`` by (sweep, policy)."""
    return {(r.get("sweep", ""), r["policy"]): r for r in _rows(DOCS / f"{preset}.csv")}


def _column(preset: str, policy: str, sweep: str, column: str) -> dict[str, float]:
    """Seed -> ``column`` of ``policy``'s runs at ``sweep``."""
    return {
        r["seed"]: float(r[column])
        for r in _runs(preset)
        if r["policy"] == policy and r["sweep"] == sweep
    }


def _mean(preset: str, policy: str, sweep: str, column: str) -> float:
    return statistics.fmean(_column(preset, policy, sweep, column).values())


def _rounds(preset: str, policy: str, sweep: str) -> dict[int, int | None]:
    """Seed -> rounds to the target (None: never reached in the run)."""
    return {
        int(r["seed"]): int(r["rounds_to_target"]) if r["rounds_to_target"] else None
        for r in _runs(preset)
        if r["policy"] == policy and r["sweep"] == sweep
    }


def _fscd_earlier_later_tied(preset: str, policy: str, sweep: str) -> tuple[int, int, int]:
    """Seeds where FedCGD-FSCD reached the target before / after ``policy``, or tied.

    A censored run is after any run that reached the target; two censored runs tie.
    """
    ours, theirs = _rounds(preset, FSCD, sweep), _rounds(preset, policy, sweep)
    counts = [0, 0, 0]
    for seed in ours:
        a, b = ours[seed], theirs[seed]
        a_key = math.inf if a is None else a
        b_key = math.inf if b is None else b
        counts[0 if a_key < b_key else 1 if a_key > b_key else 2] += 1
    return counts[0], counts[1], counts[2]


def _holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm's adjusted p-values by hand: sorted, the i-th of m times m − i + 1, running maximum."""
    adjusted, running = {}, 0.0
    ordered = sorted(p_values, key=p_values.__getitem__)
    for i, key in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - i) * p_values[key]))
        adjusted[key] = running
    return adjusted


def _km_median(runs: list[tuple[int | None, int]]) -> float:
    """Kaplan–Meier median by hand: S(t) = Π (1 − d/n) over the event rounds; first S ≤ 1/2."""
    survival = 1.0
    for t in sorted({r for r, _ in runs if r is not None}):
        at_risk = sum((r if r is not None else n + 0.5) >= t for r, n in runs)
        survival *= 1 - sum(r == t for r, _ in runs) / at_risk
        if survival <= 0.5 + 1e-12:
            return float(t)
    return math.inf


def _two_sided_sign_p(wins: int, n: int) -> float:
    """Exact two-sided sign test: 2 P(X <= min(wins, n - wins)), X ~ Binomial(n, 1/2)."""
    low = min(wins, n - wins)
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(low + 1)) / 2**n)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_table_is_the_mean_of_its_runs(preset: str) -> None:
    sweeps, n_runs, policies = PRESETS[preset]
    runs_all = _runs(preset)
    table = _table(preset)
    assert len(runs_all) == n_runs and set(table) == {(s, p) for s in sweeps for p in policies}
    for (sweep, policy), row in table.items():
        runs = [r for r in runs_all if r["sweep"] == sweep and r["policy"] == policy]
        assert len(runs) == 5
        final = statistics.fmean(float(r["final_accuracy"]) for r in runs)
        assert float(row["final_accuracy_mean"]) == pytest.approx(final, abs=1e-12)
        reached = [int(r["rounds_to_target"]) for r in runs if r["rounds_to_target"]]
        assert int(row["reached_target"]) == len(reached)
        km = _km_median(
            [
                (
                    int(r["rounds_to_target"]) if r["rounds_to_target"] else None,
                    int(r["rounds_run"]),
                )
                for r in runs
            ]
        )
        assert float(row["rounds_to_target_km_median"]) == km
    # Holm over the policies of each sweep point, per p column
    for sweep in sweeps:
        for column in P_COLUMNS:
            raw = {p: float(table[(sweep, p)][column]) for p in policies if p != FSCD}
            for policy, expected in _holm(raw).items():
                assert float(table[(sweep, policy)][f"{column}_holm"]) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("preset", "policy"),
    [(name, p) for name, (_, _, policies) in PRESETS.items() for p in policies if p != FSCD],
)
def test_the_tables_rounds_counts_are_the_runs(preset: str, policy: str) -> None:
    sweeps = PRESETS[preset][0]
    table = _table(preset)
    for sweep in sweeps:
        earlier, later, tied = _fscd_earlier_later_tied(preset, policy, sweep)
        row = table[(sweep, policy)]
        # the table counts from the other policy's side
        assert int(row["rounds_later_vs_fedcgd_fscd"]) == earlier
        assert int(row["rounds_earlier_vs_fedcgd_fscd"]) == later
        assert int(row["rounds_tied_vs_fedcgd_fscd"]) == tied
        untied = earlier + later
        if untied:
            expected = _two_sided_sign_p(earlier, untied)
            assert float(row["rounds_sign_p_vs_fedcgd_fscd"]) == pytest.approx(expected)


def _evidence() -> str:
    return (DOCS / "evidence.md").read_text(encoding="utf-8")


def test_the_docs_rounds_readings() -> None:
    text = _evidence()
    bc = [_fscd_earlier_later_tied("mnist1d_dirichlet", "bc", a) for a in ALPHAS]
    assert bc == [(5, 0, 0), (4, 1, 0), (4, 1, 0)]
    assert "earlier in 5 of 5 seeds at α = 0.1" in text and "in 4 of 5 at α = 1" in text
    pooled = sum(e for e, _, _ in bc)
    assert pooled == 13 and f"{_two_sided_sign_p(13, 15):.4f}" == "0.0074"
    assert "earlier in 13 of 15 pairs: exact sign test p = 0.0074" in text
    for policy in ("bn2", "poc", "fedcbs"):
        assert all(
            _fscd_earlier_later_tied("mnist1d_dirichlet", policy, a) == (5, 0, 0) for a in ALPHAS
        )
    assert f"{_two_sided_sign_p(15, 15):.2g}" == "6.1e-05" and "p = 6.1e-5" in text
    gs = [_fscd_earlier_later_tied("mnist1d_dirichlet", "fedcgd-gs", a) for a in ALPHAS]
    assert gs == [(3, 1, 1), (3, 1, 1), (4, 0, 1)]
    assert "3 / 1 / 1 at α = 0.1 and at α = 1, 4 / 0 / 1" in text
    assert f"{_two_sided_sign_p(10, 12):.3f}" == "0.039" and "10 of the 12 untied pairs" in text
    pooled = _holm(
        {
            "bc": _two_sided_sign_p(13, 15),
            "fedcgd-gs": _two_sided_sign_p(10, 12),
            **{p: _two_sided_sign_p(15, 15) for p in ("bn2", "poc", "fedcbs")},
        }
    )
    assert pooled["fedcgd-gs"] == _two_sided_sign_p(10, 12)  # the largest: times one
    assert f"{pooled['bc']:.3f}" == "0.015"
    flowing = " ".join(text.split())
    assert "(0.015 after Holm's correction over the five baselines' pooled tests)" in flowing
    assert "p = 0.039, also 0.039 after Holm" in flowing


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    for position, index in enumerate(order):
        ranks[index] = position + 1.0
    return ranks


def test_the_docs_indicator_reading() -> None:
    points = _rows(DOCS / "mnist1d_dirichlet_indicator.csv")
    assert len(points) == 15
    rho, p_value = _spearman(_indicator_points("mnist1d_dirichlet"))
    assert rho == pytest.approx(0.375, abs=1e-12) and f"{p_value:.2f}" == "0.17"
    match = re.search(r"Spearman ρ = \+([0-9.]+), p = ([0-9.]+) \(3 settings", _evidence())
    assert match is not None and match.groups() == ("0.375", "0.17")


TAU1, TAU5 = "local-steps=1", "local-steps=5"
LOCAL = "mnist1d_local_steps"


def _paired_t_p(
    preset: str, policy: str, sweep: str, column: str, reference: str = FSCD
) -> tuple[float, float]:
    """Mean of ``policy`` − ``reference`` over seeds and its two-sided paired t-test p-value.

    The t statistic by hand (mean over standard error of the differences); scipy only gives the
    t distribution's tail.
    """
    ours, theirs = (_column(preset, p, sweep, column) for p in (reference, policy))
    diffs = [theirs[seed] - ours[seed] for seed in sorted(ours)]
    mean = statistics.fmean(diffs)
    t = mean / (statistics.stdev(diffs) / math.sqrt(len(diffs)))
    return mean, float(2 * stats.t.sf(abs(t), df=len(diffs) - 1))


def _section(title: str) -> str:
    text = _evidence()
    start = text.index(title)
    return text[start : text.index("\n### ", start + 1)]


def _minus(value: float) -> str:
    """``value`` with its sign as the docs print it (U+2212 for minus), 3 decimals."""
    return f"{value:+.3f}".replace("-", "−")


def _check_accuracy_rows(
    sweep: str, expected: dict[str, tuple[str, str, str, str]], text: str
) -> dict[tuple[str, str], float]:
    """Each policy's (final, p, best, p) against FSCD as printed in the table; the p-values."""
    ps = {}
    for policy, (final, final_p, best, best_p) in expected.items():
        diff, p_value = _paired_t_p(LOCAL, policy, sweep, "final_accuracy")
        best_diff, best_p_value = _paired_t_p(LOCAL, policy, sweep, "max_accuracy")
        assert _minus(diff) == final and f"{p_value:.3f}" == final_p
        assert _minus(best_diff) == best and f"{best_p_value:.3f}" == best_p
        ps[(policy, "final")], ps[(policy, "best")] = p_value, best_p_value
    return ps


def test_the_tau1_accuracy_readings() -> None:
    text = _section("### Local steps and Table II")
    ps = _check_accuracy_rows(
        TAU1,
        {  # policy: (final diff, its p, best diff, its p) as the docs print them
            "bc": ("−0.023", "0.029", "−0.013", "0.008"),
            "fedcbs": ("−0.087", "0.026", "−0.050", "0.018"),
            "bn2": ("−0.471", "0.035", "−0.363", "0.025"),
            "fedcgd-fscd-gc": ("−0.018", "0.014", "−0.016", "0.059"),
            "fedcgd-gs": ("−0.027", "0.316", "−0.021", "0.198"),
            "poc": ("−0.150", "0.161", "−0.057", "0.081"),
        },
        text,
    )
    # Holm over the six baselines, per column: none below 0.05; the smallest is best vs BC
    final = _holm({p: v for (p, m), v in ps.items() if m == "final"})
    best = _holm({p: v for (p, m), v in ps.items() if m == "best"})
    assert min(ps, key=ps.__getitem__) == ("bc", "best")
    assert 0.05 <= best["bc"] < 0.0505 and min(final.values()) > 0.05
    assert f"{final['bc']:.2f}" == "0.13"
    assert (
        "none stays below 0.05" in text and "becomes 0.050; final accuracy against BC 0.13" in text
    )


def test_the_tau5_accuracy_readings() -> None:
    text = _section("### Local steps and Table II")
    ps = _check_accuracy_rows(
        TAU5,
        {
            "bc": ("−0.011", "0.279", "+0.003", "0.362"),
            "fedcbs": ("−0.060", "0.011", "−0.039", "0.038"),
            "bn2": ("−0.308", "0.021", "−0.236", "0.015"),
            "fedcgd-fscd-gc": ("−0.012", "0.135", "−0.010", "0.027"),
            "fedcgd-gs": ("−0.006", "0.551", "+0.008", "0.046"),
            "poc": ("−0.149", "0.099", "−0.037", "0.010"),
        },
        text,
    )
    final = {k: v for k, v in ps.items() if k[1] == "final"}
    assert min(ps, key=ps.__getitem__) == ("poc", "best")
    assert min(final, key=final.__getitem__) == ("fedcbs", "final")
    best = _holm({p: v for (p, m), v in ps.items() if m == "best"})
    assert f"{best['poc']:.3f}" == "0.057" and min(best.values()) > 0.05
    assert f"{_holm({p: v for (p, _), v in final.items()})['fedcbs']:.3f}" == "0.065"
    assert f"{best['fedcgd-gs']:.2f}" == "0.12"
    assert (
        "best accuracy against POC, becomes 0.057; final accuracy against Fed-CBS 0.065)"
        in " ".join(text.split())
    )
    assert (
        f"{_mean(LOCAL, FSCD, TAU5, 'final_accuracy'):.3f}" == "0.925"
        and "ends at 0.925 ± 0.015" in text
    )
    assert "(p = 0.046,\n  0.12 after Holm)" in text


def _rounds_means(sweep: str, policies: tuple[str, ...]) -> dict[str, float]:
    """Mean rounds to the target of ``policies`` that reached it in all 5 seeds."""
    means = {}
    for policy in policies:
        reached = [r for r in _rounds(LOCAL, policy, sweep).values() if r is not None]
        assert len(reached) == 5
        means[policy] = statistics.fmean(reached)
    return means


def _median(preset: str, policy: str, sweep: str) -> float:
    """:func:`_km_median` of ``policy``'s runs at ``sweep`` (every run ran the same rounds)."""
    (rounds_run,) = {int(r["rounds_run"]) for r in _runs(preset)}
    return _km_median([(r, rounds_run) for r in _rounds(preset, policy, sweep).values()])


def _untied(counts: tuple[int, int, int]) -> tuple[int, int]:
    """(FSCD earlier, untied pairs) of :func:`_fscd_earlier_later_tied` counts."""
    return counts[0], counts[0] + counts[1]


def _counts(preset: str, sweep: str) -> dict[str, tuple[int, int, int]]:
    """Every other policy of ``preset`` -> :func:`_fscd_earlier_later_tied` at ``sweep``."""
    return {p: _fscd_earlier_later_tied(preset, p, sweep) for p in PRESETS[preset][2] if p != FSCD}


def test_the_tau1_rounds_readings() -> None:
    text = " ".join(_section("### Local steps and Table II").split())
    assert _counts(LOCAL, TAU1) == {
        "bc": (4, 1, 0),
        "fedcgd-gs": (3, 2, 0),
        "fedcgd-fscd-gc": (3, 2, 0),
        "bn2": (5, 0, 0),
        "poc": (4, 1, 0),
        "fedcbs": (4, 1, 0),
    }
    assert _two_sided_sign_p(4, 5) == 0.375 and _two_sided_sign_p(3, 5) == 1.0
    assert _two_sided_sign_p(5, 5) == 0.0625
    assert "earlier than BC in 4 of 5 seeds (sign test p = 0.375)" in text
    assert "than GS and Gc in 3 of 5 (p = 1.0)" in text
    medians = {p: _median(LOCAL, p, TAU1) for p in PRESETS[LOCAL][2]}
    assert medians == {
        "fedcgd-gs": 735, FSCD: 750, "fedcgd-fscd-gc": 750, "bc": 785, "poc": 865,
        "fedcbs": 870, "bn2": math.inf,
    }  # fmt: skip
    flowing = " ".join(text.split())
    assert "Median rounds: GS 735, FSCD and FSCD-Gc 750, BC 785, POC 865 and Fed-CBS 870" in flowing
    sign = {p: _two_sided_sign_p(*_untied(c)) for p, c in _counts(LOCAL, TAU1).items()}
    assert _holm(sign)["bn2"] == pytest.approx(0.375)
    assert (
        "than BN2 in 5 of 5 (p = 0.0625, the smallest 5 seeds allow; 0.375 after Holm)" in flowing
    )


def test_the_tau5_rounds_readings() -> None:
    text = _section("### Local steps and Table II")
    assert _counts(LOCAL, TAU5) == {
        "fedcgd-fscd-gc": (3, 2, 0),
        "bc": (2, 3, 0),
        "fedcgd-gs": (0, 5, 0),
        "bn2": (5, 0, 0),
        "poc": (4, 0, 1),
        "fedcbs": (5, 0, 0),
    }
    assert _two_sided_sign_p(0, 5) == 0.0625 and _two_sided_sign_p(2, 5) == 1.0
    assert _two_sided_sign_p(4, 4) == 0.125
    medians = {p: _median(LOCAL, p, TAU5) for p in (FSCD, "fedcgd-gs", "bc")}
    assert medians == {FSCD: 620, "fedcgd-gs": 605, "bc": 630}
    flowing = " ".join(text.split())
    assert "GS is earlier than FSCD in 5 of 5 seeds (median 605 rounds against 620" in flowing
    assert "earlier in 2 of 5 seeds (p = 1.0; median 620 against 630 rounds)" in flowing
    assert "than POC in 4 of 5 with\n  one tie (p = 0.125)" in text


def _indicator_points(name: str, setting: str | None = None) -> list[tuple[float, float]]:
    """(early Ĝ/σ̂, late gap recomputed from both accuracies) of ``docs/<name>_indicator.csv``."""
    return [
        (
            float(p["ghat_over_sigma_early"]),
            float(p["fscd_late_accuracy"]) - float(p["bc_late_accuracy"]),
        )
        for p in _rows(DOCS / f"{name}_indicator.csv")
        if setting is None or p["setting"] == setting
    ]


def _spearman(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Spearman's ρ by hand (no ties: plain ranks) and scipy's two-sided p-value."""
    xs, ys = (list(v) for v in zip(*points, strict=True))
    assert len(set(xs)) == len(xs) and len(set(ys)) == len(ys)
    return statistics.correlation(_ranks(xs), _ranks(ys)), float(stats.spearmanr(xs, ys).pvalue)


def test_the_tau_indicator_readings() -> None:
    text = _section("### Local steps and Table II")
    tau1, tau5 = _indicator_points(LOCAL, TAU1), _indicator_points(LOCAL, TAU5)
    both = _indicator_points(LOCAL)
    assert len(tau1) == len(tau5) == 5 and len(both) == 10
    rho, p_value = _spearman(tau1)
    assert f"{rho:+.2f}" == "-0.20" and f"{p_value:.2f}" == "0.75"
    rho, p_value = _spearman(tau5)
    assert f"{rho:+.2f}" == "+0.90" and f"{p_value:.3f}" == "0.037"
    rho, p_value = _spearman(both)
    assert f"{rho:+.3f}" == "+0.479" and f"{p_value:.2f}" == "0.16"
    assert (
        f"{min(g for _, g in tau5):+.3f}" == "-0.009"
        and f"{max(g for _, g in tau5):+.3f}" == "+0.005"
    )
    assert (
        f"{min(g for _, g in tau1):+.3f}" == "-0.018"
        and f"{max(g for _, g in tau1):+.3f}" == "+0.025"
    )
    flowing = " ".join(text.split())
    assert "ρ = −0.20 (p = 0.75, 5 points); at τ = 5, ρ = +0.90 (p = 0.037, 5 points," in flowing
    assert "gaps of −0.009 to +0.005)" in flowing
    assert "ρ = +0.479 (p = 0.16)" in text and "gaps of −0.018 to +0.025" in text
    # σ̂ and Ĝ: early Ĝ/σ̂ larger at τ = 1 in every seed
    early1 = [x for x, _ in tau1]
    early5 = [x for x, _ in tau5]
    assert min(early1) > max(early5)
    assert f"{min(early1):.2f}–{max(early1):.2f}" == "0.83–0.98"
    assert f"{min(early5):.2f}–{max(early5):.2f}" == "0.21–0.30"
    assert "Ĝ/σ̂ is 0.83–0.98 at τ = 1 and 0.21–0.30 at\n  τ = 5" in text


def test_the_table_ii_columns() -> None:
    text = " ".join(_section("### Local steps and Table II").split())

    def mean(policy: str, sweep: str, column: str) -> float:
        return _mean(LOCAL, policy, sweep, column)

    names = {
        FSCD: "FedCGD-FSCD",
        "fedcgd-gs": "FedCGD-GS",
        "fedcgd-fscd-gc": "FedCGD-FSCD-Gc",
        "bc": "BC",
        "bn2": "BN2",
        "poc": "POC",
        "fedcbs": "Fed-CBS",
    }
    for policy, name in names.items():
        scheduled = mean(policy, TAU1, "mean_scheduled")
        wemd = mean(policy, TAU1, "mean_wemd")
        first = f"{name} {scheduled:.2f} devices at WEMD {wemd:.3f}"  # the first policy named
        assert first in text or f"{name} {scheduled:.2f} at {wemd:.3f}" in text, name
    for sweep, percent in ((TAU1, 44), (TAU5, 34)):
        fewer = 1 - mean(FSCD, sweep, "mean_scheduled") / mean("bc", sweep, "mean_scheduled")
        assert round(100 * fewer) == percent
    assert (
        "scheduling 44 % fewer devices than BC" in text
        and "(34 % fewer at τ = 5, 11.27 against 17.18, WEMD 0.284 against 0.500)" in text
    )
    assert f"{mean(FSCD, TAU5, 'mean_scheduled'):.2f}" == "11.27"
    assert (
        f"{mean(FSCD, TAU5, 'mean_wemd'):.3f}" == "0.284"
        and f"{mean('bc', TAU5, 'mean_wemd'):.3f}" == "0.500"
    )
    # FSCD-Gc against Fed-CBS: fewer devices, a higher best accuracy, not significant
    for sweep, percent, gc, diff, p_text in (
        (TAU1, 35, "10.00", "+0.034", "0.086"),
        (TAU5, 17, "12.83", "+0.029", "0.095"),
    ):
        ratio = mean("fedcgd-fscd-gc", sweep, "mean_scheduled") / mean(
            "fedcbs", sweep, "mean_scheduled"
        )
        assert round(100 * (1 - ratio)) == percent
        assert f"{mean('fedcgd-fscd-gc', sweep, 'mean_scheduled'):.2f}" == gc
        assert f"{mean('fedcbs', sweep, 'mean_scheduled'):.2f}" == "15.44"
        gc_diff, p_value = _paired_t_p(LOCAL, "fedcgd-fscd-gc", sweep, "max_accuracy", "fedcbs")
        assert f"{gc_diff:+.3f}" == diff and f"{p_value:.3f}" == p_text
        assert f"{diff} at τ = {sweep[-1]}, p = {p_text}" in text
    assert "35 % fewer devices at τ = 1 (10.00 against 15.44)" in text
    assert "and 17 % fewer at τ = 5 (12.83 against 15.44)" in text


def test_the_what_moved_readings() -> None:
    text = " ".join(_section("### Local steps and Table II").split())
    runs = _runs(LOCAL)

    def rows(policy: str, sweep: str) -> dict[str, dict[str, str]]:
        return {r["seed"]: r for r in runs if r["policy"] == policy and r["sweep"] == sweep}

    fscd = rows(FSCD, TAU1)
    drops = {s: float(r["max_accuracy"]) - float(r["final_accuracy"]) for s, r in fscd.items()}
    worst = max(drops, key=drops.__getitem__)
    assert worst == "2" and drops[worst] < 0.05  # no seed falls
    best, final = (float(fscd["2"][c]) for c in ("max_accuracy", "final_accuracy"))
    assert f"seed 2's: {best:.3f} to {final:.3f}" in text
    assert (
        f"GS's seed 4 ends at {float(rows('fedcgd-gs', TAU1)['4']['final_accuracy']):.3f}" in text
    )

    def final_mean(policy: str, sweep: str) -> str:
        return f"{_mean(LOCAL, policy, sweep, 'final_accuracy'):.3f}"

    assert f"BN2's final mean is {final_mean('bn2', TAU1)}" in text
    assert (
        f"0.867 ± 0.133 (one seed fallen) and is {final_mean('fedcgd-fscd-gc', TAU5)} ± 0.014"
        in text
    )
    assert f"BN2's was 0.409 and is {final_mean('bn2', TAU5)}" in text
    assert f"now ends at {final_mean('fedcgd-gs', TAU5)}" in text
    gs3 = rows("fedcgd-gs", TAU5)["3"]
    best, final = (float(gs3[c]) for c in ("max_accuracy", "final_accuracy"))
    assert f"seed 3 ends at {final:.3f} after a best of {best:.3f}" in text
    assert (
        _rounds_means(TAU5, ("bc",)) == {"bc": 623} and "rounds to 0.8 are unchanged (623)" in text
    )


IMBALANCE = "mnist1d_imbalance"
R1, R3, R9 = PRESETS[IMBALANCE][0]


def test_the_r1_runs_are_the_tau1_runs() -> None:
    def rows(preset: str, sweep: str) -> list[tuple[str, ...]]:
        keep = ("policy", "seed", "final_accuracy", "max_accuracy", "mean_scheduled", "mean_wemd")
        return sorted(tuple(r[k] for k in keep) for r in _runs(preset) if r["sweep"] == sweep)

    assert rows(IMBALANCE, R1) == rows(LOCAL, TAU1) and len(rows(IMBALANCE, R1)) == 35


def test_the_r_accuracy_readings() -> None:
    text = " ".join(_section("### Imbalance ratio").split())

    def best(policy: str, sweep: str) -> tuple[str, str]:
        diff, p_value = _paired_t_p(IMBALANCE, policy, sweep, "max_accuracy")
        return _minus(-diff), f"{p_value:.3f}"  # FSCD − policy

    r9 = {p: best(p, R9) for p in ("bc", "fedcbs", "poc", "bn2", "fedcgd-fscd-gc")}
    assert r9 == {
        "bc": ("+0.065", "0.001"),
        "fedcbs": ("+0.133", "0.002"),
        "poc": ("+0.170", "0.001"),
        "bn2": ("+0.319", "0.005"),
        "fedcgd-fscd-gc": ("+0.158", "0.013"),
    }
    bests = {p: _mean(IMBALANCE, p, R9, "max_accuracy") for p in PRESETS[IMBALANCE][2]}
    baselines = {p: v for p, v in bests.items() if p in ("bc", "bn2", "poc", "fedcbs")}
    assert max(baselines, key=baselines.__getitem__) == "bc" and f"{bests['bc']:.3f}" == "0.759"
    assert f"{bests[FSCD]:.3f}" == "0.824"
    others = [v for p, v in bests.items() if p != "bn2"]
    assert f"{min(others):.2f}–{max(others):.2f}" == "0.65–0.82" and f"{bests['bn2']:.2f}" == "0.50"
    assert "0.65–0.82 for every policy but BN2 (0.50)" in text
    assert "BC's (the best baseline, 0.759) by 0.065 (paired t-test, p = 0.001)" in text
    assert (
        "Fed-CBS's by 0.133 (p = 0.002), POC's by 0.170 (p = 0.001), BN2's by 0.319 (p = 0.005)"
        in text
    )
    worst = max(
        _paired_t_p(IMBALANCE, p, R9, "max_accuracy")[1] for p in ("bc", "fedcbs", "poc", "bn2")
    )
    holm9 = _holm(
        {
            p: _paired_t_p(IMBALANCE, p, R9, "max_accuracy")[1]
            for p in PRESETS[IMBALANCE][2]
            if p != FSCD
        }
    )
    assert max(holm9[p] for p in ("bc", "fedcbs", "poc", "bn2")) == holm9["bn2"] < 0.05
    assert worst == _paired_t_p(IMBALANCE, "bn2", R9, "max_accuracy")[1]
    assert f"{holm9['bn2']:.3f}" == "0.016" and "becomes 0.016" in text
    assert f"{holm9['fedcgd-fscd-gc']:.3f}" == "0.026" and "(p = 0.013, 0.026 after Holm" in text
    holm3 = _holm(
        {
            p: _paired_t_p(IMBALANCE, p, R3, "max_accuracy")[1]
            for p in PRESETS[IMBALANCE][2]
            if p != FSCD
        }
    )
    assert [f"{holm3[p]:.3f}" for p in ("fedcbs", "bn2")] == ["0.041", "0.041"]
    assert f"{holm3['poc']:.2f}" == "0.20"
    assert "Fed-CBS's and BN2's gaps stay significant (0.041 each), POC's does not (0.20)" in text
    assert "FSCD-Gc is 0.158 below (p = 0.013, 0.026 after Holm; 2 of its 5 runs reach 0.7)" in text
    assert sum(r is not None for r in _rounds(IMBALANCE, "fedcgd-fscd-gc", R9).values()) == 2
    r3 = {p: best(p, R3) for p in ("fedcbs", "poc", "bn2", "bc")}
    assert r3 == {
        "fedcbs": ("+0.160", "0.007"),
        "poc": ("+0.104", "0.049"),
        "bn2": ("+0.343", "0.007"),
        "bc": ("+0.013", "0.416"),
    }
    assert "above Fed-CBS's by 0.160 (p = 0.007), POC's by 0.104 (p = 0.049)" in text
    assert "and BN2's by 0.343 (p = 0.007), but only 0.013 above BC's (p = 0.42)" in text
    assert (
        best("bc", R1) == ("+0.013", "0.008") and "0.013 above BC's (p = 0.008, 0.050 after" in text
    )
    gs = (best("fedcgd-gs", R3), best("fedcgd-gs", R9))
    assert gs == (("−0.005", "0.718"), ("+0.001", "0.865"))  # FSCD − GS
    full = [_paired_t_p(IMBALANCE, "fedcgd-gs", r, "max_accuracy")[1] for r in (R3, R9)]
    assert [f"{p:.2f}" for p in full] == ["0.72", "0.86"]  # 0.8648: not 0.87 from 0.865
    assert "Best accuracy +0.005 (p = 0.72) at r = 3 and −0.001 (p = 0.86) at r = 9" in text


def test_the_r_rounds_readings() -> None:
    text = " ".join(_section("### Imbalance ratio").split())
    bc = [_fscd_earlier_later_tied(IMBALANCE, "bc", r) for r in (R1, R3, R9)]
    assert bc == [(5, 0, 0), (4, 0, 1), (5, 0, 0)]
    assert f"{_two_sided_sign_p(14, 14):.2g}" == "0.00012"
    assert f"{6 * _two_sided_sign_p(14, 14):.2g}" == "0.00073"  # Holm's bound
    assert (
        "14 of the 14 untied pairs, exact sign test p = 0.00012 (at most 0.00073 after Holm" in text
    )
    for r in (R3, R9):
        for policy in ("poc", "bn2", "fedcgd-fscd-gc"):
            assert _fscd_earlier_later_tied(IMBALANCE, policy, r) == (5, 0, 0)
    for r in (R1, R9):
        assert _fscd_earlier_later_tied(IMBALANCE, "fedcbs", r) == (5, 0, 0)
    assert _fscd_earlier_later_tied(IMBALANCE, "fedcgd-gs", R3) == (5, 0, 0)
    assert _fscd_earlier_later_tied(IMBALANCE, "fedcgd-gs", R9) == (2, 3, 0)
    medians = {p: _median(IMBALANCE, p, R3) for p in (FSCD, "fedcgd-gs")}
    assert medians == {FSCD: 520, "fedcgd-gs": 590} and "at r = 3 (median 520 against 590)" in text


def test_the_r_scheduled_and_wemd_readings() -> None:
    text = " ".join(_section("### Imbalance ratio").split())

    def mean(policy: str, sweep: str, column: str) -> float:
        return _mean(IMBALANCE, policy, sweep, column)

    fscd = [f"{mean(FSCD, r, 'mean_scheduled'):.2f}" for r in (R1, R3, R9)]
    assert fscd == ["9.68", "9.19", "8.42"] and "(9.68 → 9.19 → 8.42)" in text
    assert {f"{mean('bc', r, 'mean_scheduled'):.2f}" for r in (R1, R3, R9)} == {"17.18"}
    assert {f"{mean('poc', r, 'mean_scheduled'):.1f}" for r in (R1, R3, R9)} == {"13.7"}
    assert {f"{mean('fedcbs', r, 'mean_scheduled'):.1f}" for r in (R1, R3, R9)} == {"15.4"}
    for r in (R1, R3, R9):
        wemd = {p: mean(p, r, "mean_wemd") for p in PRESETS[IMBALANCE][2]}
        assert min(wemd, key=wemd.__getitem__) == FSCD
    assert [f"{mean(FSCD, r, 'mean_wemd'):.3f}" for r in (R1, R3, R9)] == [
        "0.259",
        "0.398",
        "0.643",
    ]
    assert [f"{mean('bc', r, 'mean_wemd'):.3f}" for r in (R1, R3, R9)] == [
        "0.501",
        "0.649",
        "0.874",
    ]
    assert "(0.259, 0.398, 0.643 against BC's 0.501, 0.649, 0.874)" in text


def _setting_rho(xs: list[float], ys: list[float]) -> float:
    """Spearman's ρ of distinct values by hand: 1 − 6 Σ d² / (n (n² − 1))."""
    rx, ry = _ranks(xs), _ranks(ys)
    n = len(xs)
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(rx, ry, strict=True)) / (n * (n * n - 1))


def test_the_pooled_indicator_reading() -> None:
    """The pooled file holds each preset's points once (r = 1 is τ = 1); ρ and p by hand."""
    text = " ".join(_section("### Ĝ/σ̂ over the three presets").split())
    pooled = _rows(DOCS / "mnist1d_pooled_indicator.csv")
    key = ("seed", "ghat_over_sigma_early", "fscd_late_accuracy", "bc_late_accuracy")
    expected = {
        tuple(p[k] for k in key)
        for name in (LOCAL, IMBALANCE, "mnist1d_dirichlet")
        for p in _rows(DOCS / f"{name}_indicator.csv")
    }
    assert len(pooled) == len(expected) == 35
    assert {tuple(p[k] for k in key) for p in pooled} == expected
    rho, p_value = _spearman(_indicator_points("mnist1d_pooled"))
    assert f"{rho:+.3f}" == "+0.461" and f"{p_value:.4f}" == "0.0053"
    assert "pooled as if they were, ρ = +0.461, p = 0.0053" in text
    # the claim's level: the 7 settings' means, ρ by hand, p over all 7! pairings
    settings = sorted({p["setting"] for p in pooled})
    means = {
        k: [statistics.fmean(v) for v in zip(*_indicator_points("mnist1d_pooled", k), strict=True)]
        for k in settings
    }
    xs, ys = ([means[k][i] for k in settings] for i in (0, 1))
    level, extreme, pairings = _setting_rho(xs, ys), 0, 0
    for order in itertools.permutations(range(7)):
        pairings += 1
        extreme += abs(_setting_rho(xs, [ys[i] for i in order])) >= abs(level) - 1e-12
    assert (f"{level:+.3f}", extreme, pairings) == ("+0.643", 700, 5040)
    assert f"{extreme / pairings:.3f}" == "0.139"
    assert (
        "Spearman ρ = +0.643 over the 7 settings, exact permutation p = 0.139 (700 of the 5,040 "
        "pairings as extreme): not shown." in text
    )
    # 94 % of Ĝ/σ̂'s variance between the settings
    points = [(p["setting"], float(p["ghat_over_sigma_early"])) for p in pooled]
    between = statistics.pvariance([means[k][0] for k, _ in points])
    assert round(100 * between / statistics.pvariance([x for _, x in points])) == 94
    assert "94 % of Ĝ/σ̂'s variance lies between the settings" in text
    centred = [
        (x - means[k][0], y - means[k][1])
        for k in settings
        for x, y in _indicator_points("mnist1d_pooled", k)
    ]
    assert f"{_spearman(centred)[0]:+.3f}" == "-0.053" and f"{_spearman(centred)[1]:.2f}" == "0.76"
    assert "ρ = −0.053 (p = 0.76)" in text
    left_out = {
        k: _setting_rho(*([means[j][i] for j in settings if j != k] for i in (0, 1)))
        for k in settings
    }
    assert (
        f"{min(left_out.values()):+.3f}" == "+0.429"
        and f"{max(left_out.values()):+.3f}" == "+0.771"
    )
    assert min(left_out, key=left_out.__getitem__) == "mnist1d_imbalance/imbalance-ratio=9.0"
    assert f"{left_out['mnist1d_local_steps/local-steps=5']:+.3f}" == "+0.486"
    assert "ranges from +0.429 (without r = 9) to +0.771; without τ = 5 it is +0.486" in text
    per_setting = {}
    for setting in sorted({p["setting"] for p in pooled}):
        per_setting[setting] = _spearman(_indicator_points("mnist1d_pooled", setting))
    assert len(per_setting) == 7
    rhos = [r for r, _ in per_setting.values()]
    assert f"{min(rhos):+.1f}" == "-0.5" and f"{max(rhos):+.1f}" == "+0.9"
    significant = [s for s, (_, p) in per_setting.items() if p < 0.05]
    assert significant == ["mnist1d_local_steps/local-steps=5"]
    assert "Per setting (5 seeds each) ρ goes from −0.5 to +0.9, only τ = 5's p below 0.05" in text
    rho, p_value = _spearman(_indicator_points(IMBALANCE))
    assert f"{rho:+.3f}" == "+0.039" and f"{p_value:.2f}" == "0.89"
    assert "r ρ = +0.039 (p = 0.89)" in text


#: docs/compare_digits.csv before this rerun (code before runs recorded theirs): policy ->
#: (final, best, rounds to 85 %) means, copied from git history for the "what moved" reading.
DIGITS_EARLIER = {
    FSCD: (0.9033333333333333, 0.9105555555555556, 23.4),
    "fedcgd-gs": (0.9105555555555555, 0.9172222222222223, 22.0),
    "bc": (0.8794444444444445, 0.9083333333333334, 30.4),
    "bn2": (0.7777777777777778, 0.9044444444444444, 26.4),
    "poc": (0.9, 0.9188888888888889, 25.2),
    "fedcbs": (0.8711111111111112, 0.9094444444444445, 27.0),
    "all": (0.9016666666666666, 0.9077777777777778, 25.6),
}


def test_the_digits_comparison_readings() -> None:
    text = (DOCS / "comparing.md").read_text(encoding="utf-8")

    def mean(policy: str, column: str) -> float:
        return _mean("compare_digits", policy, "", column)

    # Table II's columns: fewer devices than BC, the lowest WEMD of all
    assert f"{mean(FSCD, 'mean_scheduled'):.2f}" == "8.80"
    assert f"{mean('bc', 'mean_scheduled'):.2f}" == "10.81"
    wemd = {p: mean(p, "mean_wemd") for p in PRESETS["compare_digits"][2]}
    assert min(wemd, key=wemd.__getitem__) == FSCD
    assert f"{wemd[FSCD]:.3f}" == "0.273" and f"{wemd['bc']:.3f}" == "0.479"
    assert "(8.80 against 10.81) at the lowest WEMD of all (0.273 against 0.479)" in " ".join(
        text.split()
    )
    # final accuracy against BC: the paired t-test, and Bonferroni over the 6 baselines
    diff, p_value = _paired_t_p("compare_digits", "bc", "", "final_accuracy")
    assert f"{diff:+.3f}" == "-0.024" and f"{p_value:.3f}" == "0.031"
    finals = {
        p: _paired_t_p("compare_digits", p, "", "final_accuracy")[1]
        for p in PRESETS["compare_digits"][2]
        if p != FSCD
    }
    assert f"{_holm(finals)['bc']:.2f}" == "0.19"  # the smallest: 6 × p
    assert (
        "(−0.024 for BC, p = 0.031; 0.19 after Holm over the 6 baselines, so not\nsignificant)"
        in text
    )
    # rounds to 85 %: earlier than BC in every seed; the means
    assert _fscd_earlier_later_tied("compare_digits", "bc", "") == (5, 0, 0)
    for policy, expected in ((FSCD, 22.8), ("bc", 30.4)):
        rounds = list(_rounds("compare_digits", policy, "").values())
        assert None not in rounds
        assert statistics.fmean(r for r in rounds if r is not None) == pytest.approx(expected)
    flowing = " ".join(text.split())
    medians = [_median("compare_digits", p, "") for p in (FSCD, "bc")]
    assert medians == [23, 30]
    assert (
        "before BC in 5 of 5 seeds (22.8 rounds against 30.4 on average, medians 23 and 30; sign "
        "test p = 0.0625, the smallest 5 seeds allow, 0.375 after Holm" in flowing
    )
    # the other baselines: within the noise
    others = {
        p: _paired_t_p("compare_digits", p, "", "final_accuracy")[1]
        for p in ("fedcgd-gs", "bn2", "poc", "fedcbs", "all")
    }
    assert f"{min(others.values()):.2f}" == "0.17" and min(others, key=others.__getitem__) == "bn2"
    assert "within the noise (p ≥ 0.17)" in flowing
    for policy, (final, best, rounds) in DIGITS_EARLIER.items():
        now = (mean(policy, "final_accuracy"), mean(policy, "max_accuracy"))
        reached_now = [r for r in _rounds("compare_digits", policy, "").values() if r is not None]
        if policy in (FSCD, "fedcgd-gs"):  # the two FedCGD rows moved, by less than 0.001
            assert 0 < max(abs(now[0] - final), abs(now[1] - best)) < 0.001
        else:  # the baselines' rows are identical
            assert now == pytest.approx((final, best), abs=1e-12)
            assert statistics.fmean(reached_now) == pytest.approx(rounds)
    assert (
        "five baselines' rows are identical" in flowing
        and "(FSCD's rounds to 85 % were 23.4)" in flowing
    )


def _readme() -> str:
    return " ".join((DOCS.parent / "README.md").read_text(encoding="utf-8").split())


def test_the_readme_readings() -> None:
    """README's sentences on the digits comparison and the Dirichlet preset, from their runs."""
    text = _readme()

    def mean(preset: str, policy: str, sweep: str, column: str) -> float:
        return _mean(preset, policy, sweep, column)

    digits = [mean("compare_digits", p, "", "final_accuracy") for p in (FSCD, "bc")]
    assert [f"{v:.3f}" for v in digits] == ["0.904", "0.879"]
    scheduled = [mean("compare_digits", p, "", "mean_scheduled") for p in (FSCD, "bc")]
    wemd = [mean("compare_digits", p, "", "mean_wemd") for p in (FSCD, "bc")]
    assert "(8.8 against 10.8) at the lowest WEMD of all (0.27 against 0.48)" == (
        f"({scheduled[0]:.1f} against {scheduled[1]:.1f}) at the lowest WEMD of all "
        f"({wemd[0]:.2f} against {wemd[1]:.2f})"
    )
    assert "(8.8 against 10.8) at the lowest WEMD of all (0.27 against 0.48)" in text
    finals = {
        p: _paired_t_p("compare_digits", p, "", "final_accuracy")[1]
        for p in PRESETS["compare_digits"][2]
        if p != FSCD
    }
    assert f"{finals['bc']:.3f}" == "0.031" and f"{_holm(finals)['bc']:.2f}" == "0.19"
    rounds = [
        statistics.fmean(r for r in _rounds("compare_digits", p, "").values() if r is not None)
        for p in (FSCD, "bc")
    ]
    assert rounds == pytest.approx([22.8, 30.4])
    sign = {
        p: _two_sided_sign_p(*_untied(_fscd_earlier_later_tied("compare_digits", p, "")))
        for p in finals
    }
    assert _fscd_earlier_later_tied("compare_digits", "bc", "") == (5, 0, 0)
    assert _holm(sign)["bc"] == pytest.approx(0.375)
    assert (
        "it is ahead of it in final accuracy (0.904 against 0.879, paired p = 0.031, 0.19 after "
        "Holm's correction over the six baselines: not significant) and reaches 85 % earlier in "
        "every seed (22.8 rounds against 30.4 on average; sign test p = 0.0625, 0.375 after Holm)"
        in text
    )
    # the Dirichlet preset at α = 0.1 and α = 1
    a01, a1 = ALPHAS[0], ALPHAS[1]
    medians = [_median("mnist1d_dirichlet", p, a01) for p in (FSCD, "bc")]
    assert medians == [695, 815]
    assert "reaches 0.8 test accuracy in a median of 695 rounds against best channel's 815" in text
    sched = [mean("mnist1d_dirichlet", p, a01, "mean_scheduled") for p in (FSCD, "bc")]
    assert [f"{v:.1f}" for v in sched] == ["9.5", "17.2"]
    assert "scheduling 9.5 devices a round against 17.2" in text
    final = [mean("mnist1d_dirichlet", p, a01, "final_accuracy") for p in (FSCD, "bc")]
    assert [f"{v:.3f}" for v in final] == ["0.900", "0.855"]
    assert f"{_paired_t_p('mnist1d_dirichlet', 'bc', a01, 'final_accuracy')[1]:.2f}" == "0.22"
    holm = {
        m: _holm(
            {
                p: _paired_t_p("mnist1d_dirichlet", p, a1, m)[1]
                for p in PRESETS["mnist1d_dirichlet"][2]
                if p != FSCD
            }
        )
        for m in ("final_accuracy", "max_accuracy")
    }
    diff, p_value = _paired_t_p("mnist1d_dirichlet", "bc", a1, "final_accuracy")
    best_diff = _paired_t_p("mnist1d_dirichlet", "bc", a1, "max_accuracy")[0]
    assert (f"{-diff:+.3f}", f"{p_value:.3f}") == ("+0.021", "0.045")
    assert f"{holm['final_accuracy']['bc']:.2f}" == "0.18"
    assert f"{-best_diff:+.3f}" == "+0.013" and f"{holm['max_accuracy']['bc']:.3f}" == "0.025"
    assert (
        "ends at 0.900 against 0.855 (paired p = 0.22; at α = 1 its final accuracy lead, +0.021, "
        "p = 0.045, is not significant after Holm's correction, 0.18; its best accuracy lead, "
        "+0.013, is, 0.025)" in text
    )


NAMES = {
    "fedcgd-fscd-gc": "FedCGD-FSCD-Gc",
    FSCD: "FedCGD-FSCD",
    "fedcgd-gs": "FedCGD-GS",
    "bc": "BC",
    "bn2": "BN2",
    "poc": "POC",
    "fedcbs": "Fed-CBS",
    "all": "all (no bandwidth budget)",
}


def _g3(value: str) -> str:
    return format(float(value), ".3g")


def _expected_cells(row: dict[str, str]) -> list[str]:
    """A docs table's cells after the sweep point, formatted here from the CSV row."""

    def pm(column: str, fmt: str) -> str:
        return f"{float(row[column + '_mean']):{fmt}} ± {float(row[column + '_ci95']):{fmt}}"

    median = float(row["rounds_to_target_km_median"])
    rounds = f"{'–' if math.isinf(median) else f'{median:.0f}'} ({row['reached_target']}/5)"
    if row["policy"] == FSCD:
        sign, final, best = "–", "–", "–"
    else:
        earlier, later, tied = (
            row[f"rounds_{k}_vs_fedcgd_fscd"] for k in ("earlier", "later", "tied")
        )
        p = "rounds_sign_p_vs_fedcgd_fscd"
        sign = f"{later} / {earlier} / {tied} ({_g3(row[p])} / {_g3(row[p + '_holm'])})"
        final, best = (
            f"{_minus(float(row[prefix + 'diff_vs_fedcgd_fscd']))} "
            f"({_g3(row[prefix + 'p_value_vs_fedcgd_fscd'])} / "
            f"{_g3(row[prefix + 'p_value_vs_fedcgd_fscd_holm'])})"
            for prefix in ("", "best_")
        )
    return [
        NAMES[row["policy"]],
        pm("final_accuracy", ".3f"),
        pm("max_accuracy", ".3f"),
        rounds,
        sign,
        pm("mean_scheduled", ".2f"),
        pm("mean_wemd", ".3f"),
        final,
        best,
    ]


@pytest.mark.parametrize(
    ("page", "preset", "first"),
    [
        ("evidence.md", LOCAL, "| τ | policy |"),
        ("evidence.md", IMBALANCE, "| r | policy |"),
        ("evidence.md", "mnist1d_dirichlet", "| α | policy |"),
        ("comparing.md", "compare_digits", "| policy | final accuracy |"),
    ],
)
def test_every_docs_table_cell_is_its_csv_value(page: str, preset: str, first: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(first)
    lines = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        lines.append([c.strip() for c in line.strip().strip("|").split("|")])
    table = _table(preset)
    assert len(lines) == len(table)
    assert {row["runs_with_lost_devices"] for row in table.values()} == {"0"}
    if page == "evidence.md":
        assert "No run of these tables lost a device" in text
    for cells, ((sweep, _), row) in zip(lines, table.items(), strict=True):
        if sweep:
            value = sweep.split("=")[1].removesuffix(".0")
            assert cells[0] == value
            cells = cells[1:]
        assert cells == _expected_cells(row)


DIRICHLET = "mnist1d_dirichlet"
A01, A1, A10 = ALPHAS


def _holm_column(preset: str, sweep: str, column: str) -> dict[str, float]:
    """Holm over the preset's baselines at ``sweep`` of the paired t-test on ``column``."""
    others = [p for p in PRESETS[preset][2] if p != FSCD]
    return _holm({p: _paired_t_p(preset, p, sweep, column)[1] for p in others})


def _paper_rows() -> list[str]:
    section = _section("### The paper's claims against these runs")
    return [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]


def test_the_paper_table() -> None:
    """Each row of the paper-against-this-project table, its numbers from the CSVs."""
    rows = _paper_rows()
    assert len(rows) == 13  # header and 12 claims

    def row(start: str) -> str:
        (found,) = [r for r in rows if r.startswith("| " + start)]
        return found

    def mean(preset: str, policy: str, sweep: str, column: str) -> float:
        return _mean(preset, policy, sweep, column)

    table2 = row("Table II")
    for policy in ("fedcgd-fscd", "fedcgd-gs", "fedcgd-fscd-gc", "bc", "bn2", "poc", "fedcbs"):
        scheduled = mean(LOCAL, policy, TAU1, "mean_scheduled")
        wemd = mean(LOCAL, policy, TAU1, "mean_wemd")
        assert f"{scheduled:.2f} ({wemd:.3f})" in table2, policy
    tau1 = row("τ = 1")
    final1, best1 = (_holm_column(LOCAL, TAU1, c) for c in ("final_accuracy", "max_accuracy"))
    assert all(_paired_t_p(LOCAL, p, TAU1, "final_accuracy")[0] < 0 for p in final1)
    assert min({**final1, **best1}.values()) == best1["bc"] and f"{best1['bc']:.3f}" == "0.050"
    gs_best = _paired_t_p(LOCAL, "fedcgd-gs", TAU1, "max_accuracy")
    assert f"{-gs_best[0]:.3f}" == "0.021" and f"{gs_best[1]:.2f}" == "0.20"
    assert "(smallest Holm p 0.050" in tau1 and "0.021 below FSCD's (p = 0.20)" in tau1
    tau5 = row("τ = 5")
    final5, best5 = (_holm_column(LOCAL, TAU5, c) for c in ("final_accuracy", "max_accuracy"))
    cbs = _paired_t_p(LOCAL, "fedcbs", TAU5, "final_accuracy")
    cbs_best = _paired_t_p(LOCAL, "fedcbs", TAU5, "max_accuracy")
    gc_best = _paired_t_p(LOCAL, "fedcgd-fscd-gc", TAU5, "max_accuracy")
    assert (
        f"final {_minus(cbs[0])} (p = {cbs[1]:.3f}, Holm {final5['fedcbs']:.3f}), "
        f"best {_minus(cbs_best[0])} (p = {cbs_best[1]:.3f})" in tau5
    )
    assert (
        f"FSCD-Gc best {_minus(gc_best[0])} (p = {gc_best[1]:.3f}, "
        f"Holm {best5['fedcgd-fscd-gc']:.2f})" in tau5
    )
    gs5 = _paired_t_p(LOCAL, "fedcgd-gs", TAU5, "max_accuracy")[0]
    assert f"GS best {_minus(gs5)}" in tau5
    r3 = row("r = 3")
    best_r3 = _holm_column(IMBALANCE, R3, "max_accuracy")
    diff = {p: -_paired_t_p(IMBALANCE, p, R3, "max_accuracy")[0] for p in best_r3}
    assert (
        f"above Fed-CBS {diff['fedcbs']:+.3f} and BN2 {diff['bn2']:+.3f} (Holm "
        f"{best_r3['fedcbs']:.3f} each), POC {diff['poc']:+.3f} (Holm {best_r3['poc']:.2f}), "
        "BC only "
        f"{diff['bc']:+.3f} (p = {_paired_t_p(IMBALANCE, 'bc', R3, 'max_accuracy')[1]:.2f})" in r3
    )
    r9 = row("r = 9")
    best_r9 = _holm_column(IMBALANCE, R9, "max_accuracy")
    bc9 = _paired_t_p(IMBALANCE, "bc", R9, "max_accuracy")
    cbs9 = -_paired_t_p(IMBALANCE, "fedcbs", R9, "max_accuracy")[0]
    bests = {p: mean(IMBALANCE, p, R9, "max_accuracy") for p in ("bc", "bn2", "poc", "fedcbs")}
    assert max(bests, key=bests.__getitem__) == "bc"
    assert (
        f"BC, by {-bc9[0]:.3f} (p = {bc9[1]:.4f}, Holm {best_r9['bc']:.4f}), above Fed-CBS by "
        f"{cbs9:.3f} (Holm {best_r9['fedcbs']:.4f})" in r9
    )
    alpha = row("α = 0.1 and 1")
    medians = {(p, a): _median(DIRICHLET, p, a) for p in (FSCD, "fedcgd-gs", "bc") for a in ALPHAS}
    assert (
        f"FSCD {medians[(FSCD, A01)]:.0f} and {medians[(FSCD, A1)]:.0f}, GS "
        f"{medians[('fedcgd-gs', A01)]:.0f} and {medians[('fedcgd-gs', A1)]:.0f}, BC "
        f"{medians[('bc', A01)]:.0f} and {medians[('bc', A1)]:.0f}" in alpha
    )
    assert sum(_fscd_earlier_later_tied(DIRICHLET, "bc", a)[0] for a in ALPHAS) == 13
    assert "13 of 15 seed pairs over the three α (sign test p = 0.0074, Holm 0.015)" in alpha
    a10 = row("α = 10")
    assert (
        f"medians FSCD {medians[(FSCD, A10)]:.0f}, GS {medians[('fedcgd-gs', A10)]:.0f}, BC "
        f"{medians[('bc', A10)]:.0f}" in a10
    )
    assert _fscd_earlier_later_tied(DIRICHLET, "fedcgd-gs", A10) == (4, 0, 1)
    counts = row("FSCD's and GS's scheduled number")
    for policy, name in ((FSCD, "FSCD"), ("fedcgd-gs", "GS")):
        values = [f"{mean(DIRICHLET, policy, a, 'mean_scheduled'):.2f}" for a in ALPHAS]
        assert f"{name} {' → '.join(values)}" in counts
    baselines = [
        mean(DIRICHLET, p, a, "mean_scheduled")
        for p in ("bc", "bn2", "poc", "fedcbs")
        for a in ALPHAS
    ]
    assert f"{min(baselines):.2f}–{max(baselines):.2f}" == "13.67–17.18" and "13.67–17.18" in counts
    gc = row("FSCD-Gc performs as FCBS")
    assert "35 % fewer (10.00 against 15.44) at a best accuracy 0.034 higher (p = 0.086)" in gc
    assert "τ = 5: 17 % fewer" in gc  # both recomputed in test_the_table_ii_columns
    gs = row("GS against FSCD")
    holm_gs = [
        _holm_column(preset, sweep, column)["fedcgd-gs"]
        for preset in (LOCAL, IMBALANCE, DIRICHLET)
        for sweep in PRESETS[preset][0]
        if sweep != R1  # the τ = 1 runs again
        for column in ("final_accuracy", "max_accuracy")
    ]
    assert len(holm_gs) == 14 and f"{min(holm_gs):.2f}" == "0.11" and min(holm_gs) > 0.05
    assert "in any of the 7 settings (smallest Holm p 0.11)" in gs
    assert "(10 of 12 untied pairs, Holm 0.039)" in gs and "5 of 5 seeds (Holm 0.375)" in gs
    assert "ρ = +0.643, exact p = 0.139; within settings ρ = −0.053" in row("Ĝ/σ̂")
    assert "untested here" in row("solver figure")


def test_the_dirichlet_readings() -> None:
    text = " ".join(_section("### Dirichlet α").split())
    final1, best1 = (_holm_column(DIRICHLET, A1, c) for c in ("final_accuracy", "max_accuracy"))
    final01, best01 = (_holm_column(DIRICHLET, A01, c) for c in ("final_accuracy", "max_accuracy"))
    assert f"{best1['bc']:.3f}" == "0.025" and f"{final1['bc']:.2f}" == "0.18"
    assert (
        "(+0.013, p = 0.006, 0.025 after Holm)" in text
        and "(+0.021, p = 0.045, 0.18 after Holm)" in text
    )
    assert [f"{final01['fedcbs']:.2f}", f"{best01['fedcbs']:.2f}", f"{best1['fedcbs']:.3f}"] == [
        "0.11",
        "0.15",
        "0.052",
    ]
    assert "do not stay below 0.05 after Holm (0.11, 0.15, 0.052)" in text
    assert [f"{best01['bn2']:.3f}", f"{best1['bn2']:.4f}"] == ["0.030", "0.0014"]
    assert "1 do (0.030, 0.0014)" in text
    medians = {
        p: [_median(DIRICHLET, p, a) for a in ALPHAS]
        for p in (FSCD, "fedcgd-gs", "bc", "fedcbs", "poc")
    }
    assert medians[FSCD] == [695, 645, 635] and medians["fedcgd-gs"] == [765, 670, 660]
    assert medians["bc"] == [815, 730, 675] and medians["fedcbs"] == [1175, 855, 770]
    assert medians["poc"][:2] == [math.inf, 965]
    assert "(695, 645, 635 rounds; GS 765, 670, 660; BC 815, 730, 675)" in text
    assert (
        "Fed-CBS's median is 1,175 at α = 0.1 (3 of 5 runs reach 0.8), 855 at α = 1 and 770" in text
    )
    wemd = [f"{_mean(DIRICHLET, p, a, 'mean_wemd'):.3f}" for p in (FSCD, "bc") for a in ALPHAS]
    assert wemd == ["0.254", "0.192", "0.090", "0.485", "0.380", "0.190"]  # 0.4848: not 0.49
    assert "(0.254, 0.192, 0.090, against BC's 0.485, 0.380, 0.190)" in text
    seed1 = [
        r
        for r in _runs(DIRICHLET)
        if r["sweep"] == A10 and r["policy"] == FSCD and r["seed"] == "1"
    ]
    (run,) = seed1
    late = {p["seed"]: p for p in _rows(DOCS / f"{DIRICHLET}_indicator.csv") if p["setting"] == A10}
    assert (f"{float(run['final_accuracy']):.3f}", f"{float(run['max_accuracy']):.3f}") == (
        "0.690",
        "0.898",
    )
    assert f"{float(late['1']['fscd_late_accuracy']):.3f}" == "0.746"
    assert (
        "seed 1, which ends at 0.690 after a best of 0.898 (its late mean over the last 240 "
        "rounds is 0.746" in text
    )
    assert "**unexplained**" in text and "no code record" in text
