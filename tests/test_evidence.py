"""Rounds to the target and the Ĝ/σ̂ indicator, by hand or by an oracle (every sign flip)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from fake_runs import read_csv, write_run
from scipy import stats

from experiments.analysis.evidence import (
    early_ratio,
    indicator_line,
    indicator_points,
    indicator_summary,
    indicator_test,
    late_accuracy,
    rounds_to_target_test,
)
from experiments.cli import invoke
from experiments.compare import execution, results
from experiments.compare import plans as planning


def signed_rank_p_by_enumeration(diffs: list[float]) -> float:
    """Two-sided p of the signed-rank statistic over all 2^n sign flips (zeros dropped)."""
    d = [x for x in diffs if x != 0]
    ranks = stats.rankdata([abs(x) for x in d])  # tied values share the mean of their ranks
    centre = sum(ranks) / 2
    observed = abs(sum(r for r, x in zip(ranks, d, strict=True) if x > 0) - centre)
    flips = list(itertools.product((0, 1), repeat=len(d)))
    extreme = sum(
        abs(sum(r for r, s in zip(ranks, signs, strict=True) if s) - centre) >= observed - 1e-9
        for signs in flips
    )
    return extreme / len(flips)


@pytest.mark.parametrize(
    ("policy", "reference", "counts", "sign_p", "wilcoxon_p"),
    [
        # policy earlier in 4 seeds, later in 1: 2 * P(X <= 1), X ~ Bin(5, 1/2) = 2 * 6/32;
        # signed ranks: |d| = 40 30 20 10 40 -> ranks 4.5 3 2 1 4.5; W+ = 4.5
        (
            {s: (r, 100) for s, r in enumerate([10, 20, 30, 40, 90])},
            {s: (50, 100) for s in range(5)}, (5, 4, 1, 0, 0), 12 / 32,
            signed_rank_p_by_enumeration([-40, -30, -20, -10, 40]),
        ),
        # d = -10 -20 -30 -40 +55: ranks 1..5, W+ = 5; sign sets with rank sum <= 5: {}, {1},
        # {2}, {3}, {4}, {5}, {1,2}, {1,3}, {1,4}, {2,3} = 10 of 32, two-sided 20/32
        (
            {0: (40, 200), 1: (30, 200), 2: (20, 200), 3: (10, 200), 4: (105, 200)},
            {s: (50, 200) for s in range(5)}, (5, 4, 1, 0, 0), 12 / 32, 20 / 32,
        ),
        # seed 0: the policy never reached it in 100 rounds (101), the reference at 60: later
        # by 41; seed 1: neither reached it: tied; seed 2: the reference never did (121)
        (
            {0: (None, 100), 1: (None, 100), 2: (70, 120), 3: (55, 100)},
            {0: (60, 100), 1: (None, 100), 2: (None, 120), 3: (50, 100)}, (4, 1, 2, 1, 3),
            1.0, signed_rank_p_by_enumeration([41, -51, 5]),
        ),
        # one difference: two sign flips, both as extreme as the one seen
        ({0: (10, 50), 1: (20, 50)}, {0: (10, 50), 1: (None, 50)}, (2, 1, 0, 1, 1), 1.0, 1.0),
        # no common seed, or no difference: no p-value
        ({0: (10, 50)}, {1: (10, 50)}, (0, 0, 0, 0, 0), math.nan, math.nan),
        (
            {0: (10, 50), 1: (None, 50)}, {0: (10, 50), 1: (None, 50)}, (2, 0, 0, 2, 1),
            math.nan, math.nan,
        ),
    ],
)  # fmt: skip
def test_rounds_to_the_target_by_hand(
    policy: dict, reference: dict, counts: tuple, sign_p: float, wilcoxon_p: float
) -> None:
    test = rounds_to_target_test(policy, reference)
    assert (test.n, test.earlier, test.later, test.tied, test.censored) == counts
    assert (test.sign_p, test.wilcoxon_p) == pytest.approx((sign_p, wilcoxon_p), nan_ok=True)
    assert signed_rank_p_by_enumeration([-10, -20, -30, -40, 55]) == pytest.approx(20 / 32)


@pytest.mark.parametrize("seed", range(12))
def test_signed_rank_p_equals_the_enumeration_of_every_sign_flip(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 11))
    # rounds on a 5-round evaluation grid: ties and zeros are common, as in the presets
    policy = {s: (int(5 * rng.integers(1, 40)), 300) for s in range(n)}
    reference = {s: (int(5 * rng.integers(1, 40)), 300) for s in range(n)}
    for s in range(n):
        if rng.random() < 0.2:
            policy[s] = (None, 300)
    diffs = [(301 if policy[s][0] is None else policy[s][0]) - reference[s][0] for s in range(n)]
    test = rounds_to_target_test(policy, reference)
    if all(d == 0 for d in diffs):
        assert math.isnan(test.wilcoxon_p)
    else:
        assert test.wilcoxon_p == pytest.approx(signed_rank_p_by_enumeration(diffs))
    k, m = sum(d < 0 for d in diffs), sum(d != 0 for d in diffs)
    tail = sum(math.comb(m, i) for i in range(min(k, m - k) + 1)) / 2**m if m else math.nan
    assert test.sign_p == pytest.approx(min(1.0, 2 * tail), nan_ok=True)


def test_early_ratio_late_accuracy_and_the_indicator_test_by_hand() -> None:
    lines = [
        {"round": 1, "class_gradient_used": 1.0, "sigma": 2.0},  # 0.5
        {"round": 2, "class_gradient_used": 3.0, "sigma": 2.0},  # 1.5
        {"round": 3, "class_gradient_used": [1.0, 2.0], "sigma": 2.0},  # Ĝ_c: left out
        {"round": 4, "class_gradient_used": 1.0, "sigma": 0.0},  # no σ̂: left out
        {"round": 5, "class_gradient_used": 1.0, "sigma": None},
        {"round": 6, "class_gradient_used": 9.0, "sigma": 1.0},  # after the early rounds
    ]
    assert early_ratio(lines, early_rounds=5) == pytest.approx(1.0)
    assert early_ratio(lines, early_rounds=6) == pytest.approx((0.5 + 1.5 + 9.0) / 3)
    assert math.isnan(early_ratio(lines[2:5], early_rounds=5))
    lines = [{"round": r, "accuracy": r / 10 if r % 2 == 0 else None} for r in range(1, 11)]
    # 10 rounds, last 20 %: rounds 9 and 10; only 10 was evaluated
    assert late_accuracy(lines, 0.2) == pytest.approx(1.0)
    # last 50 %: rounds 6..10, evaluated 6, 8, 10
    assert late_accuracy(lines, 0.5) == pytest.approx((0.6 + 0.8 + 1.0) / 3)
    assert math.isnan(late_accuracy([], 0.2))
    # ranks x 1 2 3 4, y 1 3 2 4: sum d^2 = 2, rho = 1 - 6 * 2 / (4 * 15) = 0.8
    # exact p: |ρ| ≥ 0.8 (Σd² ≤ 2 or ≥ 18) in 8 of the 4! orders (1 + 3 swaps, reversed likewise)
    test = indicator_test([(0.1, 0.0), (0.2, 0.3), (0.3, 0.1), (0.4, 0.5), (math.nan, 1.0)])
    assert test.n == 4 and test.rho == pytest.approx(0.8) and test.p_value == pytest.approx(8 / 24)
    assert math.isnan(indicator_test([(1, 2), (2, 3)]).rho)  # under three points
    assert math.isnan(indicator_test([(1, 2), (2, 2), (3, 2)]).p_value)  # a constant gap


def test_holm_runs_over_both_accuracy_endpoints_as_one_family() -> None:
    """4 p-values over two columns, by hand: 0.01, 0.03, 0.04, 0.5 (m = 4) become
    4 · 0.01 = 0.04, 3 · 0.03 = 0.09, 2 · 0.04 = 0.08 raised to 0.09, 1 · 0.5; per column
    (m = 2) they would be 0.02 / 0.03 and 0.08 / 0.5. The rounds tests stay their own
    family: 0.0625 and 0.375 become 0.125 and 0.375. The TOSTs of both endpoints are a family
    of their own: the same four p-values give the same four adjusted ones."""
    final, best = results.HOLM_FAMILIES[0]
    tost, best_tost = results.HOLM_FAMILIES[-1]
    sign, wilcoxon = results.ROUNDS_TEST_COLUMNS[-2:]

    def row(p: float | None, best_p: float | None, sign_p: float | None) -> dict:
        return {final: p, best: best_p, sign: sign_p, wilcoxon: None, tost: p, best_tost: best_p}

    rows = [row(None, None, None), row(0.01, 0.04, 0.0625), row(0.03, 0.5, 0.375)]
    results.adjust_by_holm(rows)
    assert [r[f"{final}_holm"] for r in rows[1:]] == pytest.approx([0.04, 0.09])
    assert [r[f"{best}_holm"] for r in rows[1:]] == pytest.approx([0.09, 0.5])
    assert [r[f"{sign}_holm"] for r in rows[1:]] == pytest.approx([0.125, 0.375])
    assert [r[f"{tost}_holm"] for r in rows[1:]] == pytest.approx([0.04, 0.09])
    assert [r[f"{best_tost}_holm"] for r in rows[1:]] == pytest.approx([0.09, 0.5])
    assert all(math.isnan(rows[0][f"{c}_holm"]) for c in results.P_COLUMNS)
    assert all(math.isnan(r[f"{wilcoxon}_holm"]) for r in rows)


@pytest.mark.parametrize(
    ("n_settings", "pooled_rho", "setting_p", "verdict"),
    [  # pooled: per setting d = (−2, 0, 2) on the ranks, Σd² = 8 per setting
        # 4 settings: the exact p is at least 2/4! = 1/12 > 0.05: no rho, no p, said so
        (4, 1 - 6 * 32 / (12 * 143), 2 / 24, "settings (means over seeds), not testable across "
         "settings: the exact p cannot go below 2/4! = 0.0833"),
        (5, 1 - 6 * 40 / (15 * 224), 2 / 120, "settings (means over seeds), setting-level (exact "
         "permutation p) Spearman rho = +1.000, p = 0.0167: larger Ĝ/σ̂ goes with a larger "
         "FedCGD-FSCD lead"),
    ],
)  # fmt: skip
def test_the_indicator_is_tested_across_settings_not_across_points(
    n_settings: int, pooled_rho: float, setting_p: float, verdict: str
) -> None:
    points = [  # settings k = 1..n: across them Ĝ/σ̂ and the gap rise together; within, opposite
        {"setting": f"s{k}", "ghat_over_sigma_early": k + dx, "gap_late": 10 * k - 2 * dx}
        for k in range(1, n_settings + 1)
        for dx in (-0.25, 0.0, 0.25)
    ]
    summary = indicator_summary(points)
    assert summary["n_points"] == 3 * n_settings and summary["p_value"] < 0.001
    assert summary["spearman_rho"] == pytest.approx(pooled_rho)
    # the setting means rank alike: ρ = 1; exact p: the 2 of n! pairings with |ρ| = 1
    assert summary["n_settings"] == n_settings
    assert summary["setting_spearman_rho"] == pytest.approx(1.0)
    assert summary["setting_p_value"] == pytest.approx(setting_p)
    assert summary["within_setting_rho"] == pytest.approx(-1.0)  # centred: opposite ranks
    assert summary["leave_one_out_rho_min"] == pytest.approx(1.0)
    assert summary["leave_one_out_rho_max"] == pytest.approx(1.0)
    line = indicator_line(summary)
    assert verdict in line.splitlines()[0] and f"{n_settings} settings" in line
    assert line.splitlines()[0].startswith("Ĝ/σ̂ over rounds 1-50 (FedCGD-FSCD)")  # no rounds known


def write_pair(out: Path, seed: int, fscd: list[float], bc: list[float], ratio: float, **kw):
    """A FedCGD-FSCD and a BC run of ``seed`` under ``out`` (settings ``kw``), Ĝ/σ̂ = ``ratio``."""
    for policy, accs in (("fedcgd-fscd", fscd), ("bc", bc)):
        lines = [
            {"round": r, "accuracy": a, "sigma": 2.0, "class_gradient_used": 2.0 * ratio}
            for r, a in enumerate(accs, start=1)
        ]
        overrides = {"policy": policy, "seed": seed, **kw}
        write_run(planning.run_dir(out, policy, seed), overrides, lines)


def test_indicator_points_pair_fscd_with_bc_per_setting_and_seed_and_count_a_run_once(
    tmp_path: Path,
) -> None:
    write_pair(tmp_path / "a", 0, [0.1, 0.2, 0.3, 0.4, 0.6], [0.1, 0.2, 0.3, 0.4, 0.5], 0.7)
    write_pair(tmp_path / "b", 0, [0.1, 0.2, 0.3, 0.4, 0.9], [0.1, 0.2, 0.3, 0.4, 0.5], 1.1,
               **{"local-steps": 5})  # fmt: skip
    # the τ = 1 runs of one preset are the r = 1 runs of another: the same settings count once
    write_pair(tmp_path / "a-again", 0, [0.1, 0.2, 0.3, 0.4, 0.6], [0.1, 0.2, 0.3, 0.4, 0.5], 0.7)
    runs = [
        {"sweep": label, "policy": p, "seed": 0, "result_dir": tmp_path / label / p / "seed-0"}
        | ({"setting": label, "sweep": "not read"} if label == "b" else {})
        for label in ("a", "b", "a-again")
        for p in ("fedcgd-fscd", "bc", "poc")
    ]
    points = indicator_points(runs, early_rounds=2, late_fraction=0.2)
    assert [(p["setting"], p["seed"]) for p in points] == [("a", "0"), ("b", "0")]
    assert [p["ghat_over_sigma_early"] for p in points] == pytest.approx([0.7, 1.1])
    assert [p["gap_late"] for p in points] == pytest.approx([0.1, 0.4])  # round 5 only
    assert points[1]["fscd_late_accuracy"] == pytest.approx(0.9)


def test_the_indicator_command_pools_comparisons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(execution, "run_flwr", lambda *a, **k: pytest.fail("kept runs ran"))
    gaps = {"one": [0.0, 0.1], "two": [0.2, 0.3]}  # gap grows with Ĝ/σ̂ 1, 2, 3, 4
    ratio = iter([1.0, 2.0, 3.0, 4.0])
    for name, per_seed in gaps.items():
        shared = {"learning-rate": 0.1 if name == "one" else 0.2}
        for seed, gap in enumerate(per_seed):
            write_pair(tmp_path / name, seed, [0.2, 0.5 + gap], [0.2, 0.5], next(ratio), **shared)
        execution.run_policies(["fedcgd-fscd", "bc"], shared, tmp_path / name, seeds=[0, 1])
    capsys.readouterr()
    out = tmp_path / "indicator"
    code = invoke(["indicator", str(tmp_path / "one"), str(tmp_path / "two"), "--out", str(out)])
    assert code == 0
    said = capsys.readouterr().out.splitlines()
    # 2-round runs: Ĝ/σ̂ of rounds 1-2, not 1-50; 2 settings and 4 points are too few for a test
    # (the exact p of 4 points cannot go below 2/4! = 1/12): no rho or p printed; the table's
    # pooled p is that least one (ρ = 1 of 4 points, exact)
    assert said[0].startswith("Ĝ/σ̂ over rounds 1-2 (FedCGD-FSCD) against")
    assert said[0].endswith("2 settings (means over seeds), not testable across settings "
                            "(fewer than 3, or a constant variable)")  # fmt: skip
    assert said[2] == (
        "  pooled: too few points (4) for a test: its exact p cannot go below 2/4! = 0.0833 (the "
        "points of one setting are not independent), 4 (setting, seed) points"
    )
    assert [p["setting"] for p in read_csv(out / "indicator.csv")] == ["one", "one", "two", "two"]
    (summary,) = read_csv(out / "indicator_test.csv")
    assert float(summary["spearman_rho"]) == pytest.approx(1.0)
    assert float(summary["p_value"]) == pytest.approx(2 / 24)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--late-fraction", "0"], "Invalid value for '--late-fraction': 0.0 is not in the range"),
        (["--early-rounds", "0"], "Invalid value for '--early-rounds': 0 is not in the range x>=1"),
        ([], "{out}: no runs.csv (not the folder of a comparison or a preset)"),
    ],
)
def test_the_indicator_command_refuses_bad_options_and_folders(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert invoke(["indicator", str(tmp_path), *args]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("error: " + message.format(out=tmp_path)) and "\n" not in line
