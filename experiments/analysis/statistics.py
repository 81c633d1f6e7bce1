"""Statistics over seeds for the policy comparisons: means, 95 % confidence intervals, paired tests.

Pure functions on numbers (no Flower, no files), used by ``compare_policies`` and
``plot_runs``:

- :func:`mean_ci95`: mean and the 95 % confidence half-width of the mean over seeds,
  ``t.ppf(0.975, n - 1) * sd / sqrt(n)`` with the sample standard deviation (``ddof=1``);
- :func:`paired_test`: paired t-test of one policy against a reference over the seeds both ran;
- :func:`first_round_reaching`: the first round whose accuracy reaches a target;
- :func:`mean_band`: mean and 95 % band of per-round curves over seeds (for the figures).

Missing values (None, NaN) are dropped before anything is computed, so a run that never reached
the target accuracy simply does not count towards the mean of ``rounds_to_target``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


def finite(values: Iterable[float | None]) -> list[float]:
    """The values that are numbers and finite (None and NaN dropped), as floats.

    Parameters
    ----------
    values : iterable of float or None
        Raw values, e.g. one metric of every seed.

    Returns
    -------
    list of float
        The finite values, in order.
    """
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def ci95_halfwidth(values: Iterable[float | None]) -> float:
    """95 % confidence half-width of the mean (Student t, ``n - 1`` degrees of freedom).

    Parameters
    ----------
    values : iterable of float or None
        One value per seed; None / NaN are dropped.

    Returns
    -------
    float
        ``t.ppf(0.975, n - 1) * sd / sqrt(n)`` with the sample standard deviation; NaN for
        fewer than two values (no spread can be estimated from one seed).
    """
    x = finite(values)
    n = len(x)
    if n < 2:
        return math.nan
    sd = float(np.std(x, ddof=1))
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n)


def mean_ci95(values: Iterable[float | None]) -> tuple[float, float]:
    """Mean and 95 % confidence half-width over seeds.

    ``values`` is read as by :func:`ci95_halfwidth`: one value per seed, None / NaN dropped.

    Returns
    -------
    tuple of float
        ``(mean, half_width)``; the mean is NaN for no value, the half-width NaN for fewer than
        two (see :func:`ci95_halfwidth`).
    """
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
        Mean of ``policy - reference`` over those seeds (NaN for n = 0); negative means the
        policy is below the reference.
    p_value : float
        Two-sided p-value of the paired t-test; NaN for n < 2 or when every difference is the
        same (zero spread: the t statistic is undefined).
    """

    n: int
    mean_diff: float
    p_value: float


def paired_test(
    values: Mapping[int, float | None], reference: Mapping[int, float | None]
) -> PairedTest:
    """Paired two-sided t-test of ``values`` against ``reference``, matched by seed.

    The same seed gives both policies the same devices, channel draws and partitions, so the
    per-seed difference removes that shared variation. We use the paired t-test
    (``scipy.stats.ttest_rel``) rather than the Wilcoxon signed-rank test: with the handful of
    seeds a federated comparison can afford, the exact Wilcoxon test cannot reach p < 0.05 at
    all for n ≤ 5 (its smallest two-sided p-value is 2 / 2^n = 0.0625 at n = 5), while the
    t-test has power there; its assumption, roughly normal differences of final test
    accuracies (each an average over the whole test set), is a mild one. Read p-values from
    3–5 seeds as evidence, not proof.

    Parameters
    ----------
    values : mapping of int to float or None
        Seed → metric of the policy under test.
    reference : mapping of int to float or None
        Seed → metric of the reference policy (e.g. FedCGD-FSCD).

    Returns
    -------
    PairedTest
        Over the seeds where both values are finite.
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


def first_round_reaching(
    rounds: Sequence[int], accuracies: Sequence[float], target: float | None
) -> int | None:
    """First round whose accuracy reaches ``target`` (the paper's "epochs to the target").

    Parameters
    ----------
    rounds : sequence of int
        Evaluated rounds, increasing.
    accuracies : sequence of float
        Test accuracy at those rounds.
    target : float or None
        Target accuracy; None gives None.

    Returns
    -------
    int or None
        The round, or None when the target is never reached (or not given).
    """
    if target is None:
        return None
    for r, acc in zip(rounds, accuracies, strict=True):
        if acc >= target:
            return int(r)
    return None


@dataclass(frozen=True)
class Band:
    """Mean curve over seeds with its 95 % confidence band.

    Attributes
    ----------
    x : numpy.ndarray
        Rounds (the union over seeds, increasing).
    mean : numpy.ndarray
        Mean over the seeds that have a finite value at each round.
    half_width : numpy.ndarray
        95 % half-width at each round (NaN where fewer than two seeds have a value).
    n : numpy.ndarray
        Seeds with a value at each round.
    """

    x: np.ndarray
    mean: np.ndarray
    half_width: np.ndarray
    n: np.ndarray


def mean_band(curves: Sequence[Mapping[int, float | None]]) -> Band:
    """Per-round mean and 95 % half-width of several curves (one per seed).

    Parameters
    ----------
    curves : sequence of mapping of int to float or None
        Per seed, round → value (e.g. test accuracy); missing rounds and None / NaN values are
        left out of that round's statistics.

    Returns
    -------
    Band
        One entry per round present in any curve; each round's mean and half-width are
        :func:`mean_ci95` of the seeds' finite values there (computed for all rounds at once).
    """
    x = sorted({int(r) for curve in curves for r in curve})
    column = {r: i for i, r in enumerate(x)}
    values = np.full((len(curves), len(x)), np.nan)
    for row, curve in enumerate(curves):
        for r, value in curve.items():
            if value is not None:
                values[row, column[int(r)]] = float(value)
    values[~np.isfinite(values)] = np.nan  # NaN and infinities are missing values
    n = np.sum(~np.isnan(values), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):  # rounds without 1 or 2 values
        mean = np.nansum(values, axis=0) / n
        sd = np.sqrt(np.nansum((values - mean) ** 2, axis=0) / (n - 1))
        t = stats.t.ppf(0.5 + CONFIDENCE / 2, np.maximum(n - 1, 1))
        half = np.where(n >= 2, t * sd / np.sqrt(n), np.nan)
    return Band(
        x=np.array(x, dtype=int),
        mean=np.where(n > 0, mean, np.nan),
        half_width=half,
        n=n.astype(int),
    )
