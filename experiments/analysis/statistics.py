"""Statistics over seeds (None, NaN dropped): 95 % CIs, paired t, TOST, Holm, Kaplan–Meier."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


def finite(values: Iterable[float | None]) -> list[float]:
    """The values that are finite numbers, as floats, in order."""
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def mean_ci95(values: Iterable[float | None]) -> tuple[float, float]:
    """Mean and 95 % half-width ``t.ppf(0.975, n - 1) * sem`` (NaN: no value / under two)."""
    x = finite(values)
    mean = float(np.mean(x)) if x else math.nan
    half = float(stats.t.ppf(0.975, len(x) - 1) * stats.sem(x)) if len(x) > 1 else math.nan
    return mean, half


@dataclass(frozen=True)
class PairedTest:
    """``n`` common seeds, mean of ``policy - reference`` and the two-sided paired t-test p."""

    n: int
    mean_diff: float
    p_value: float


def paired_test(
    values: Mapping[int, float | None], reference: Mapping[int, float | None]
) -> PairedTest:
    """``scipy.stats.ttest_rel`` over the seeds both have finite; p NaN under two or no spread."""
    a, b = _paired_seeds(values, reference)
    if not a.size:
        return PairedTest(0, math.nan, math.nan)
    diff = a - b
    mean_diff = float(np.mean(diff))
    scale = max(1.0, float(np.max(np.abs(a))), float(np.max(np.abs(b))))
    if a.size < 2 or float(np.ptp(diff)) <= 1e-12 * scale:
        return PairedTest(int(a.size), mean_diff, math.nan)
    return PairedTest(int(a.size), mean_diff, float(stats.ttest_rel(a, b).pvalue))


#: The equivalence margin of :func:`equivalence_test`, in accuracy (docs/comparing.md "One rule
#: for many tests" says when it was chosen).
EQUIVALENCE_MARGIN = 0.01


def _paired_seeds(
    values: Mapping[int, float | None], reference: Mapping[int, float | None]
) -> tuple[np.ndarray, np.ndarray]:
    """The two sides' values over the seeds both have finite, in seed order."""
    seeds = sorted(
        s for s in set(values) & set(reference) if finite([values[s]]) and finite([reference[s]])
    )
    a = np.array([values[s] for s in seeds], dtype=float)
    b = np.array([reference[s] for s in seeds], dtype=float)
    return a, b


@dataclass(frozen=True)
class EquivalenceTest:
    """``n`` common seeds, mean of ``policy - reference``, the margin and the TOST p-value
    (the larger of the two one-sided p's: below 0.05, the difference is shown within
    ``±margin``)."""  # noqa: D205, D209

    n: int
    mean_diff: float
    margin: float
    p_value: float


def equivalence_test(
    values: Mapping[int, float | None],
    reference: Mapping[int, float | None],
    margin: float = EQUIVALENCE_MARGIN,
) -> EquivalenceTest:
    """Paired TOST (two one-sided t-tests) of the per-seed differences ``values - reference``
    over the seeds both have finite: H0 the mean difference ≤ −margin, and H0 it is ≥ +margin,
    each rejected by a one-sided t-test with n − 1 degrees of freedom; p NaN under two seeds or
    no spread (as :func:`paired_test`)."""  # noqa: D205, D209
    a, b = _paired_seeds(values, reference)
    if not a.size:
        return EquivalenceTest(0, math.nan, margin, math.nan)
    diff = a - b
    mean_diff = float(np.mean(diff))
    scale = max(1.0, float(np.max(np.abs(a))), float(np.max(np.abs(b))))
    if a.size < 2 or float(np.ptp(diff)) <= 1e-12 * scale:
        return EquivalenceTest(int(a.size), mean_diff, margin, math.nan)
    se, df = float(stats.sem(diff)), a.size - 1
    above_lower = float(stats.t.sf((mean_diff + margin) / se, df))  # H0: mean ≤ −margin
    below_upper = float(stats.t.cdf((mean_diff - margin) / se, df))  # H0: mean ≥ +margin
    return EquivalenceTest(int(a.size), mean_diff, margin, max(above_lower, below_upper))


def holm(p_values: Sequence[float | None]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given; the family: the finite ones."""
    p = np.array([math.nan if v is None else float(v) for v in p_values], dtype=float)
    known = np.flatnonzero(np.isfinite(p))
    order = known[np.argsort(p[known], kind="stable")]
    scaled = np.minimum(1.0, (len(order) - np.arange(len(order))) * p[order])
    adjusted = np.full(len(p), math.nan)
    adjusted[order] = np.maximum.accumulate(scaled)
    return [float(v) for v in adjusted]


def km_median(runs: Sequence[tuple[int | None, int]]) -> float:
    """Kaplan–Meier median of ``(rounds to the target or None: censored, rounds run)`` runs;
    ``inf`` when under half reached it, NaN without runs."""  # noqa: D205, D209
    reached = [int(r) for r, _ in runs if r is not None]
    censored = [int(n) for r, n in runs if r is None]
    if not reached:
        return math.inf if censored else math.nan
    cdf = stats.ecdf(stats.CensoredData(uncensored=reached, right=censored)).cdf
    # a product of (1 - d/n) factors: allow its rounding below an exact one half
    half = np.flatnonzero(cdf.probabilities >= 0.5 - 1e-12)
    return float(cdf.quantiles[half[0]]) if half.size else math.inf


@dataclass(frozen=True)
class Band:
    """Mean curve over seeds (``x``: rounds) and its 95 % half-width per round."""

    x: np.ndarray
    mean: np.ndarray
    half_width: np.ndarray


def mean_band(curves: Sequence[Mapping[int, float | None]]) -> Band:
    """Per-round :func:`mean_ci95` of several curves (round -> value; gaps left out)."""
    x = sorted({int(r) for curve in curves for r in curve})
    means, halves = (
        zip(*(mean_ci95(c.get(r) for c in curves) for r in x), strict=True) if x else ((), ())
    )
    return Band(np.array(x, dtype=int), np.array(means, dtype=float), np.array(halves, dtype=float))
