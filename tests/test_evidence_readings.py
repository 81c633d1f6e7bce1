"""The presets' and comparisons' readings in the docs, recomputed from their per-run rows.

``docs/mnist1d_<preset>_runs.csv`` holds a preset's runs (one row per sweep point × policy ×
seed), ``docs/compare_digits_runs.csv`` the digits comparison's (one row per policy × seed, no
sweep); the tables, the paired tests and the Ĝ/σ̂ correlation the docs cite are recomputed here
by hand (counts, means, binomial sums, ranks), not by the code that wrote them.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from pathlib import Path

import pytest
from scipy import stats

DOCS = Path(__file__).resolve().parent.parent / "docs"
FSCD = "fedcgd-fscd"
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
        if reached:
            assert float(row["rounds_to_target_mean"]) == pytest.approx(statistics.fmean(reached))


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
    assert f"{min(1.0, 5 * _two_sided_sign_p(10, 12)):.2f}" == "0.19"


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
    match = re.search(r"Spearman ρ = \+([0-9.]+), p = ([0-9.]+)\. On this preset", _evidence())
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
        assert f"| {final} ({final_p}) | {best} ({best_p}) |" in text
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
    # Bonferroni over the six baselines: none below 0.05; the smallest is best vs BC
    assert min(ps, key=ps.__getitem__) == ("bc", "best")
    assert 0.05 <= 6 * ps[("bc", "best")] < 0.0505
    assert f"{6 * ps[('bc', 'final')]:.2f}" == "0.17"
    assert (
        "none stays below 0.05" in text and "becomes 0.050; final accuracy against BC 0.17" in text
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
    assert f"{6 * ps[('poc', 'best')]:.3f}" == "0.057" and 6 * ps[("poc", "best")] > 0.05
    assert f"{6 * ps[('fedcbs', 'final')]:.3f}" == "0.065"
    assert f"{6 * ps[('fedcgd-gs', 'best')]:.2f}" == "0.27"
    assert "best accuracy against POC, becomes 0.057; final accuracy against Fed-CBS 0.065" in text
    assert (
        f"{_mean(LOCAL, FSCD, TAU5, 'final_accuracy'):.3f}" == "0.925"
        and "ends at 0.925 ± 0.015" in text
    )
    assert "(p = 0.046,\n  0.27 after the correction)" in text


def _rounds_means(sweep: str, policies: tuple[str, ...]) -> dict[str, float]:
    """Mean rounds to the target of ``policies`` that reached it in all 5 seeds."""
    means = {}
    for policy in policies:
        reached = [r for r in _rounds(LOCAL, policy, sweep).values() if r is not None]
        assert len(reached) == 5
        means[policy] = statistics.fmean(reached)
    return means


def _counts(preset: str, sweep: str) -> dict[str, tuple[int, int, int]]:
    """Every other policy of ``preset`` -> :func:`_fscd_earlier_later_tied` at ``sweep``."""
    return {p: _fscd_earlier_later_tied(preset, p, sweep) for p in PRESETS[preset][2] if p != FSCD}


def test_the_tau1_rounds_readings() -> None:
    text = _section("### Local steps and Table II")
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
    assert "than GS and Gc in 3 of 5 (p = 1.0)" in text and "BN2 in 5 of 5 (p = 0.0625" in text
    means = _rounds_means(TAU1, ("fedcgd-fscd", "fedcgd-gs", "bc", "fedcgd-fscd-gc"))
    assert means == {"fedcgd-fscd": 757, "fedcgd-gs": 760, "bc": 775, "fedcgd-fscd-gc": 777}
    assert "(757 rounds; GS 760, BC 775,\n  FSCD-Gc 777" in text


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
    means = _rounds_means(TAU5, ("fedcgd-fscd", "fedcgd-gs", "bc"))
    assert means == {"fedcgd-fscd": 633, "fedcgd-gs": 576, "bc": 623}
    assert "GS is earlier than FSCD in 5 of 5 seeds\n  (576 rounds against 633 on average" in text
    assert "earlier in 2 of 5 seeds (p = 1.0; 633 against\n  623 rounds)" in text
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
    assert f"{6 * worst:.3f}" == "0.033" and "becomes 0.033" in text
    assert "FSCD-Gc is 0.158 below (p = 0.013; 2 of its 5 runs reach 0.7)" in text
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
    assert best("bc", R1) == ("+0.013", "0.008") and "0.013 above BC's (p = 0.008)" in text
    gs = (best("fedcgd-gs", R3), best("fedcgd-gs", R9))
    assert gs == (("−0.005", "0.718"), ("+0.001", "0.865"))  # FSCD − GS
    assert "Best accuracy +0.005 (p = 0.72) at r = 3 and −0.001 (p = 0.87) at r = 9" in text


def test_the_r_rounds_readings() -> None:
    text = " ".join(_section("### Imbalance ratio").split())
    bc = [_fscd_earlier_later_tied(IMBALANCE, "bc", r) for r in (R1, R3, R9)]
    assert bc == [(5, 0, 0), (4, 0, 1), (5, 0, 0)]
    assert f"{_two_sided_sign_p(14, 14):.2g}" == "0.00012"
    assert f"{6 * _two_sided_sign_p(14, 14):.2g}" == "0.00073"
    assert (
        "14 of the 14 untied pairs, exact sign test p = 0.00012 (0.00073 after Bonferroni" in text
    )
    for r in (R3, R9):
        for policy in ("poc", "bn2", "fedcgd-fscd-gc"):
            assert _fscd_earlier_later_tied(IMBALANCE, policy, r) == (5, 0, 0)
    for r in (R1, R9):
        assert _fscd_earlier_later_tied(IMBALANCE, "fedcbs", r) == (5, 0, 0)
    assert _fscd_earlier_later_tied(IMBALANCE, "fedcgd-gs", R3) == (5, 0, 0)
    assert _fscd_earlier_later_tied(IMBALANCE, "fedcgd-gs", R9) == (2, 3, 0)
    means = {
        p: statistics.fmean(r for r in _rounds(IMBALANCE, p, R3).values() if r is not None)
        for p in (FSCD, "fedcgd-gs")
    }
    assert means == {FSCD: 537, "fedcgd-gs": 597} and "at r = 3 (537 against 597)" in text


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
    assert "Spearman ρ = +0.461, p = 0.0053 over the 35 points." in text
    per_setting = {}
    for setting in sorted({p["setting"] for p in pooled}):
        per_setting[setting] = _spearman(_indicator_points("mnist1d_pooled", setting))
    assert len(per_setting) == 7
    rhos = [r for r, _ in per_setting.values()]
    assert f"{min(rhos):+.1f}" == "-0.5" and f"{max(rhos):+.1f}" == "+0.9"
    significant = [s for s, (_, p) in per_setting.items() if p < 0.05]
    assert significant == ["mnist1d_local_steps/local-steps=5"]
    assert "7 settings of 5 seeds each: ρ from −0.5 to +0.9, only τ = 5's p below 0.05" in text
    rho, p_value = _spearman(_indicator_points(IMBALANCE))
    assert f"{rho:+.3f}" == "+0.039" and f"{p_value:.2f}" == "0.89"
    assert "r ρ = +0.039, p = 0.89" in text


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
    assert "(8.80 against 10.81) at the lowest WEMD of all (0.273\nagainst 0.479)" in text
    # final accuracy against BC: the paired t-test, and Bonferroni over the 6 baselines
    diff, p_value = _paired_t_p("compare_digits", "bc", "", "final_accuracy")
    assert f"{diff:+.3f}" == "-0.024" and f"{p_value:.3f}" == "0.031"
    assert f"{6 * p_value:.2f}" == "0.19"
    assert "(−0.024 for BC, p = 0.031; 0.19 after a Bonferroni" in text
    # rounds to 85 %: earlier than BC in every seed; the means
    assert _fscd_earlier_later_tied("compare_digits", "bc", "") == (5, 0, 0)
    for policy, expected in ((FSCD, 22.8), ("bc", 30.4)):
        rounds = list(_rounds("compare_digits", policy, "").values())
        assert None not in rounds
        assert statistics.fmean(r for r in rounds if r is not None) == pytest.approx(expected)
    flowing = " ".join(text.split())
    assert (
        "before BC in 5 of 5 seeds (22.8 rounds against 30.4 on average; sign test p = 0.0625"
        in (flowing)
    )
    # the other baselines: within the noise
    others = {
        p: _paired_t_p("compare_digits", p, "", "final_accuracy")[1]
        for p in ("fedcgd-gs", "bn2", "poc", "fedcbs", "all")
    }
    assert f"{min(others.values()):.2f}" == "0.17" and min(others, key=others.__getitem__) == "bn2"
    assert "within the noise\n(p ≥ 0.17)" in text
    for policy, (final, best, rounds) in DIGITS_EARLIER.items():
        now = (mean(policy, "final_accuracy"), mean(policy, "max_accuracy"))
        reached_now = [r for r in _rounds("compare_digits", policy, "").values() if r is not None]
        if policy in (FSCD, "fedcgd-gs"):  # the two FedCGD rows moved, by less than 0.001
            assert 0 < max(abs(now[0] - final), abs(now[1] - best)) < 0.001
        else:  # the baselines' rows are identical
            assert now == pytest.approx((final, best), abs=1e-12)
            assert statistics.fmean(reached_now) == pytest.approx(rounds)
    assert (
        "five baselines' rows are identical" in text and "(FSCD's rounds to 85 % were 23.4)" in text
    )
