"""Statistics over seeds for the policy comparisons: means, 95 % CIs, paired tests, Holm, KM.

Pure functions on numbers. Missing values (None, NaN) are dropped from means first; rounds to
the target are summarised by :func:`km_median`, which counts the runs that never reached it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


def finite(values: Iterable[float | None]) -> list[float]:
    """The values that are numbers and finite (None and NaN dropped), as floats, in order."""
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def ci95_halfwidth(values: Iterable[float | None]) -> float:
    """95 % confidence half-width of the mean: ``t.ppf(0.975, n - 1) * sd / sqrt(n)`` (``ddof=1``).

    NaN for fewer than two finite values.
    """
    x = finite(values)
    if len(x) < 2:
        return math.nan
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(x) - 1) * stats.sem(x))


def mean_ci95(values: Iterable[float | None]) -> tuple[float, float]:
    """Mean and :func:`ci95_halfwidth` over seeds (the mean NaN for no value)."""
    x = finite(values)
    mean = float(np.mean(x)) if x else math.nan
    return mean, ci95_halfwidth(x)


@dataclass(frozen=True)
class PairedTest:
    """Result of a paired comparison of a policy with a reference over common seeds.

    Attributes
    ----------
    n : int
        Seeds both runs have a value for.
    mean_diff : float
        Mean of ``policy - reference`` over those seeds (NaN for n = 0).
    p_value : float
        Two-sided p-value of the paired t-test; NaN for n < 2 or zero spread of the differences.
    """

    n: int
    mean_diff: float
    p_value: float


def paired_test(
    values: Mapping[int, float | None], reference: Mapping[int, float | None]
) -> PairedTest:
    """Paired two-sided t-test (``scipy.stats.ttest_rel``) of ``values`` against ``reference``.

    Both map seed to metric; only the seeds where both are finite count. Why not Wilcoxon:
    docs/comparing.md, "Comparing policies".
    """
    seeds = sorted(
        s for s in set(values) & set(reference) if finite([values[s]]) and finite([reference[s]])
    )
    a = np.array([values[s] for s in seeds], dtype=float)
    b = np.array([reference[s] for s in seeds], dtype=float)
    n = len(seeds)
    if n == 0:
        return PairedTest(0, math.nan, math.nan)
    diff = a - b
    mean_diff = float(np.mean(diff))
    scale = max(1.0, float(np.max(np.abs(a))), float(np.max(np.abs(b))))
    if n < 2 or float(np.ptp(diff)) <= 1e-12 * scale:
        return PairedTest(n, mean_diff, math.nan)
    return PairedTest(n, mean_diff, float(stats.ttest_rel(a, b).pvalue))


def holm(p_values: Sequence[float | None]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (docs/comparing.md, "One rule").

    The family is the finite p-values (None and NaN stay NaN): the i-th smallest of m becomes
    ``max over j <= i of min(1, (m - j + 1) p_(j))``.
    """
    p = np.array([math.nan if v is None else float(v) for v in p_values], dtype=float)
    known = np.flatnonzero(np.isfinite(p))
    order = known[np.argsort(p[known], kind="stable")]
    m = len(order)
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.full(len(p), math.nan)
    adjusted[order] = np.maximum.accumulate(scaled)
    return [float(v) for v in adjusted]


def km_median(runs: Sequence[tuple[int | None, int]]) -> float:
    """Kaplan–Meier median of rounds to the target over ``(rounds to it or None, rounds run)``.

    A run that never reached the target is right-censored at its rounds run
    (``scipy.stats.ecdf`` of ``scipy.stats.CensoredData``); the median is the first round by
    which the estimated fraction that reached it is at least one half: ``inf`` when fewer than
    half of the runs reached it, NaN without runs. Why the median: docs/comparing.md.
    """
    reached = [int(r) for r, _ in runs if r is not None]
    censored = [int(n) for r, n in runs if r is None]
    if not reached:
        return math.inf if censored else math.nan
    cdf = stats.ecdf(stats.CensoredData(uncensored=reached, right=censored)).cdf
    # a product of (1 - d/n) factors: allow its rounding below an exact one half
    half = np.flatnonzero(cdf.probabilities >= 0.5 - 1e-12)
    return float(cdf.quantiles[half[0]]) if half.size else math.inf


def first_round_reaching(
    rounds: Sequence[int], accuracies: Sequence[float], target: float | None
) -> int | None:
    """First of the ``rounds`` whose accuracy reaches ``target``; None if never (or no target)."""
    if target is None:
        return None
    return next((int(r) for r, acc in zip(rounds, accuracies, strict=True) if acc >= target), None)


@dataclass(frozen=True)
class Band:
    """Mean curve over seeds (``x``: rounds), its 95 % half-width and the seeds ``n`` per round."""

    x: np.ndarray
    mean: np.ndarray
    half_width: np.ndarray
    n: np.ndarray


def mean_band(curves: Sequence[Mapping[int, float | None]]) -> Band:
    """Per-round :func:`mean_ci95` of several curves (per seed, round -> value; gaps left out)."""
    curves = [{int(r): value for r, value in curve.items()} for curve in curves]
    x = sorted({r for curve in curves for r in curve})
    columns = [finite(curve.get(r) for curve in curves) for r in x]
    means, halves = zip(*(mean_ci95(c) for c in columns), strict=True) if x else ((), ())
    return Band(
        x=np.array(x, dtype=int),
        mean=np.array(means, dtype=float),
        half_width=np.array(halves, dtype=float),
        n=np.array([len(c) for c in columns], dtype=int),
    )
