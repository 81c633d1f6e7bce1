"""Rounds to the target (paired, censored) and the Ĝ/σ̂ indicator (docs/comparing.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
from scipy import stats

from experiments.analysis.plot_runs import load_run
from fedcgd_config.settings import unread_settings
from server_app.run_folder.files import read_json_object
from server_app.run_folder.results import CODE_KEY, CONFIG_FILE
from server_app.run_folder.run_status import flat_settings

#: Up to this many nonzero differences the signed-rank test enumerates every sign flip.
EXACT_SEEDS = 13
#: A run's rounds to the target (None: not reached, censored) and the rounds it ran.
Reached = tuple[int | None, int]


@dataclass(frozen=True)
class RoundsTest:
    """Rounds to the target against a reference over ``n`` common seeds: seeds reached
    ``earlier`` / ``later`` / ``tied``, pairs ``censored``, exact sign and signed-rank p (NaN:
    no untied pair)."""  # noqa: D205, D209

    n: int
    earlier: int
    later: int
    tied: int
    censored: int
    sign_p: float
    wilcoxon_p: float


def censored_rounds(run: Reached) -> int:
    """Rounds to the target, or rounds run + 1 for a run that never reached it."""
    reached, rounds_run = run
    return int(reached) if reached is not None else int(rounds_run) + 1


def rounds_to_target_test(
    values: Mapping[int, Reached], reference: Mapping[int, Reached]
) -> RoundsTest:
    """Paired tests of rounds to the target over the seeds both ran (:class:`RoundsTest`)."""
    seeds = sorted(set(values) & set(reference))
    diffs = np.array(
        [censored_rounds(values[s]) - censored_rounds(reference[s]) for s in seeds], dtype=float
    )
    censored = sum(values[s][0] is None or reference[s][0] is None for s in seeds)
    earlier, later = int(np.sum(diffs < 0)), int(np.sum(diffs > 0))
    untied = earlier + later
    sign_p = float(stats.binomtest(earlier, untied, 0.5).pvalue) if untied else math.nan
    nonzero = diffs[diffs != 0]
    # every sign flip (2^n of them) up to EXACT_SEEDS seeds, ties included; beyond, scipy's own
    # (one difference: "exact", as a permutation needs two)
    method: Any = "exact" if len(nonzero) == 1 else "auto"
    if 1 < len(nonzero) <= EXACT_SEEDS:
        method = stats.PermutationMethod(n_resamples=2**EXACT_SEEDS)
    wilcoxon_p = float(stats.wilcoxon(nonzero, method=method).pvalue) if len(nonzero) else math.nan
    return RoundsTest(len(seeds), earlier, later, len(seeds) - untied, censored, sign_p, wilcoxon_p)


#: The paper's indicator compares these two policies (docs/comparing.md, "The Ĝ/σ̂ indicator").
INDICATOR_POLICY, INDICATOR_BASELINE = "fedcgd-fscd", "bc"
#: Early rounds averaged for Ĝ/σ̂ and the last fraction of the rounds averaged for the gap.
EARLY_ROUNDS, LATE_FRACTION = 50, 0.2


def early_ratio(lines: Sequence[Mapping[str, Any]], early_rounds: int = EARLY_ROUNDS) -> float:
    """Mean Ĝ/σ̂ over rounds 1 .. ``early_rounds`` with both numbers, σ̂ > 0; NaN if none."""
    ratios = [
        line["class_gradient_used"] / line["sigma"]
        for line in lines
        if int(line["round"]) <= early_rounds
        and _number(line.get("class_gradient_used"))
        and _number(line.get("sigma"))
        and math.isfinite(line["class_gradient_used"])
        and 0 < line["sigma"] < math.inf
    ]
    return float(np.mean(ratios)) if ratios else math.nan


def late_accuracy(
    lines: Sequence[Mapping[str, Any]], late_fraction: float = LATE_FRACTION
) -> float:
    """Mean test accuracy of the rounds above R × (1 − ``late_fraction``), R the last round."""
    if not lines:
        return math.nan
    last = max(int(line["round"]) for line in lines)
    start = last * (1 - late_fraction)
    accs = [
        float(line["accuracy"])
        for line in lines
        if int(line["round"]) > start and _number(line.get("accuracy"))
    ]
    return float(np.mean(accs)) if accs else math.nan


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class IndicatorTest:
    """Spearman's ``rho`` of early Ĝ/σ̂ with the later FSCD − BC gap over ``n`` points, its p."""

    n: int
    rho: float
    p_value: float


def indicator_test(points: Sequence[tuple[float, float]]) -> IndicatorTest:
    """Spearman's ρ of the finite (x, y) pairs and its permutation p (:func:`setting_test`)."""
    finite = [p for p in points if math.isfinite(p[0]) and math.isfinite(p[1])]
    return setting_test([x for x, _ in finite], [y for _, y in finite])


#: Columns of ``indicator.csv``: one row per (setting, seed) with both policies' runs.
INDICATOR_COLUMNS = (
    "setting", "seed", "ghat_over_sigma_early", "fscd_late_accuracy", "bc_late_accuracy",
    "gap_late", "fscd_result_dir", "bc_result_dir",
)  # fmt: skip
#: Columns of ``indicator_test.csv`` (one row): the setting-level test (the claim's level), the
#: within-setting and leave-one-setting-out figures, the pooled points.
INDICATOR_TEST_COLUMNS = (
    "early_rounds", "late_fraction", "n_settings", "setting_spearman_rho", "setting_p_value",
    "within_setting_rho", "within_setting_p_value", "leave_one_out_rho_min",
    "leave_one_out_rho_max", "n_points", "spearman_rho", "p_value",
)  # fmt: skip
#: Orders of the ranks a permutation p takes: every one up to this many (9! = 362,880), else
#: this many drawn; the drawn p's standard error is at most √(2/10⁶) ≈ 0.0014.
ORDERS = 10**6


def setting_test(x: Sequence[float], y: Sequence[float]) -> IndicatorTest:
    """Spearman's ρ of x and y (settings' means, or points) and its two-sided permutation p.

    The p is scipy's: twice the smaller share of the x ranks' orders with a ρ at least as large,
    or at least as small (at most 1), over every order up to 9 pairs, else over
    :data:`ORDERS` orders drawn by a generator seeded 0.
    """
    n = len(x)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return IndicatorTest(n, math.nan, math.nan)
    x_ranks, y_ranks = stats.rankdata(x), stats.rankdata(y)
    y_centred = y_ranks - y_ranks.mean()
    norm = math.sqrt(float(np.sum((x_ranks - x_ranks.mean()) ** 2) * np.sum(y_centred**2)))

    def rho(a: np.ndarray, axis: int = -1) -> Any:  # an order of the x ranks keeps their norm
        return np.moveaxis(a, axis, -1) @ y_centred / norm

    result = stats.permutation_test(  # one sample: its n! orders are the pairings
        (x_ranks,), rho, permutation_type="pairings", vectorized=True, n_resamples=ORDERS,
        batch=10**5, rng=0,
    )  # fmt: skip
    return IndicatorTest(n, float(result.statistic), float(result.pvalue))


def indicator_points(
    runs: Sequence[Mapping[str, Any]],
    early_rounds: int = EARLY_ROUNDS,
    late_fraction: float = LATE_FRACTION,
) -> list[dict[str, Any]]:
    """One :data:`INDICATOR_COLUMNS` row per (setting, seed) with both runs; an FSCD run with
    the settings of one already counted (τ = 1 and r = 1 are one run) counts once."""  # noqa: D205, D209
    pairs: dict[tuple[str, str], dict[str, Path]] = {}
    for run in runs:
        policy = str(run["policy"])
        if policy in (INDICATOR_POLICY, INDICATOR_BASELINE):
            setting = str(run.get("setting") or run.get("sweep") or "default")
            key = (setting, str(run["seed"]))
            pairs.setdefault(key, {})[policy] = Path(str(run["result_dir"]))
    rows, seen = [], set()
    for (setting, seed), dirs in pairs.items():
        if len(dirs) < 2:
            continue
        fscd, bc = dirs[INDICATOR_POLICY], dirs[INDICATOR_BASELINE]
        identity = _run_settings(fscd)
        if identity is not None and identity in seen:
            continue
        seen.add(identity)
        fscd_lines, bc_lines = load_run(fscd)[1], load_run(bc)[1]
        fscd_late, bc_late = (late_accuracy(x, late_fraction) for x in (fscd_lines, bc_lines))
        ratio = early_ratio(fscd_lines, early_rounds)
        values = (setting, seed, ratio, fscd_late, bc_late, fscd_late - bc_late, str(fscd), str(bc))
        rows.append(dict(zip(INDICATOR_COLUMNS, values, strict=True)))
    return rows


def _run_settings(result_dir: Path) -> str | None:
    """The run's settings from ``config.json`` without where it wrote (None without the file)."""
    path = result_dir / CONFIG_FILE
    if not path.exists():
        return None
    config = read_json_object(path)
    flat = flat_settings({k: v for k, v in config.items() if k != CODE_KEY})
    skip = set(unread_settings(config))
    return json.dumps({k: v for k, v in flat.items() if k not in skip}, sort_keys=True)


def indicator_summary(
    points: Sequence[Mapping[str, Any]],
    early_rounds: int = EARLY_ROUNDS,
    late_fraction: float = LATE_FRACTION,
) -> dict[str, Any]:
    """The :data:`INDICATOR_TEST_COLUMNS` row over ``points`` (docs/comparing.md)."""
    finite_points = [
        (str(p["setting"]), float(p["ghat_over_sigma_early"]), float(p["gap_late"]))
        for p in points
        if math.isfinite(float(p["ghat_over_sigma_early"])) and math.isfinite(float(p["gap_late"]))
    ]
    settings = sorted({s for s, _, _ in finite_points})
    means = {s: np.mean([(x, y) for t, x, y in finite_points if t == s], axis=0) for s in settings}
    level = setting_test([means[s][0] for s in settings], [means[s][1] for s in settings])
    within = IndicatorTest(0, math.nan, math.nan)
    if len(settings) < len(finite_points):  # some setting has two points
        within = indicator_test([(x - means[s][0], y - means[s][1]) for s, x, y in finite_points])
    left_out = [
        setting_test(*zip(*(means[t] for t in settings if t != s), strict=True)).rho
        for s in settings
    ] if len(settings) > 3 else []  # fmt: skip
    pooled = indicator_test([(x, y) for _, x, y in finite_points])
    values = (
        early_rounds, late_fraction, *astuple(level), *astuple(within)[1:],
        min(left_out, default=math.nan), max(left_out, default=math.nan), *astuple(pooled),
    )  # fmt: skip
    return dict(zip(INDICATOR_TEST_COLUMNS, values, strict=True))


#: The level a p must be under for the console to call a correlation shown.
ALPHA = 0.05


def _how(n: int) -> str:
    exact = math.factorial(n) <= ORDERS
    return "exact permutation p" if exact else f"permutation p over {ORDERS:,} drawn orders"


def _least(n: int) -> str:
    """``2/3! = 0.333``: the smallest two-sided p of the exact test of ρ over ``n`` points."""
    return f"2/{n}! = {2 / math.factorial(n):.3g}"


def _rho(rho: float, p: float, what: str, n: int) -> str:
    """``rho = +0.643, p = 0.139``, or why there is none: no correlation, or too few points."""
    if not math.isfinite(rho):
        return f"{what}: no correlation (under three values, or a constant variable)"
    if 2 / math.factorial(n) >= ALPHA:
        return f"{what}: too few points ({n}) for a test: its exact p cannot go below {_least(n)}"
    return f"{what} Spearman rho = {rho:+.3f}, p = {p:.3g}"


def indicator_line(summary: Mapping[str, Any], rounds_run: Sequence[int] = ()) -> str:
    """The console lines: the setting-level verdict, then the other figures (``rounds_run``:
    the FSCD runs', they bound the early rounds); a ρ only where p < :data:`ALPHA` can be."""  # noqa: D205, D209
    n, rho, p = (summary[k] for k in ("n_settings", "setting_spearman_rho", "setting_p_value"))
    testable = math.isfinite(rho) and 2 / math.factorial(n) < ALPHA
    if not math.isfinite(rho):
        verdict = "not testable across settings (fewer than 3, or a constant variable)"
    elif not testable:
        verdict = f"not testable across settings: the exact p cannot go below {_least(n)}"
    elif rho > 0 and p < ALPHA:
        verdict = "larger Ĝ/σ̂ goes with a larger FedCGD-FSCD lead across settings (p < 0.05)"
    else:
        verdict = "not shown across settings (p >= 0.05 or rho <= 0)"
    early, points = int(summary["early_rounds"]), int(summary["n_points"])
    last, first = (min(early, f(rounds_run, default=early)) for f in (max, min))
    shorter = f" ({first} in the shortest run)" if first < last else ""
    low, high = summary["leave_one_out_rho_min"], summary["leave_one_out_rho_max"]
    within = _rho(
        summary["within_setting_rho"], summary["within_setting_p_value"],
        "within settings (centred on each setting's means)", points,
    )  # fmt: skip
    lines = [
        f"Ĝ/σ̂ over rounds 1-{last}{shorter} (FedCGD-FSCD) against the FedCGD-FSCD − BC accuracy "
        f"gap over the last {100 * summary['late_fraction']:g} % of the rounds: {n} settings "
        "(means over seeds), "
        + (f"{_rho(rho, p, f'setting-level ({_how(n)})', n)}: " if testable else "")
        + verdict,
        f"  {within}"
        + (f"; one setting left out: rho {low:+.3f} to {high:+.3f}" if math.isfinite(low) else ""),
        f"  {_rho(summary['spearman_rho'], summary['p_value'], 'pooled', points)} (the points of "
        f"one setting are not independent), {points} (setting, seed) points",
    ]
    return "\n".join(lines)
