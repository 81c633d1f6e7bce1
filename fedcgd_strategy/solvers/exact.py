"""Exact solution of problem P1 by one mixed-integer linear program per schedule size.

Uses :func:`scipy.optimize.milp` (HiGHS branch and cut).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import Bounds, LinearConstraint, milp

from fedcgd_strategy.problem import SchedulingProblem, sampling_term
from fedcgd_strategy.solvers.heuristics import fscd_schedule, greedy_schedule, swap_search
from fedcgd_strategy.solvers.result import ScheduleResult, is_improvement

#: Largest number of (size S, batch total T) pairs the exact solver accepts for per-device batch
#: sizes; each pair costs one MILP.
MAX_SIZE_BATCH_PAIRS = 4096
#: HiGHS options: close the gap completely (the default relative gap of 1e-4 is too loose to
#: match brute force to 1e-9). ``mip_abs_gap`` is passed to HiGHS verbatim by scipy.
_MILP_OPTIONS: dict[str, float | bool] = {"mip_rel_gap": 0.0, "mip_abs_gap": 0.0, "presolve": True}
#: Budget tightening used for a second solve when HiGHS' feasibility tolerance let the rounded
#: solution exceed ``B`` by more than the rounding slack.
_BUDGET_BACKOFF = 1e-7


def size_batch_pairs(problem: SchedulingProblem) -> list[tuple[int, int]]:
    """All ``(S, T)`` with ``S`` feasible devices whose batch sizes sum to ``T``, best ``T`` first.

    Sizes whose cheapest ``S`` devices exceed ``B`` are left out. The list is sorted by ``T``
    descending (smallest sampling term first), then ``S`` descending. With a uniform batch size
    there is one pair per size, ``T = S b``. Raises ValueError if per-device batch sizes give
    more than :data:`MAX_SIZE_BATCH_PAIRS` pairs.
    """
    feasible = np.flatnonzero(problem.feasible)
    cheapest_hz = np.cumsum(np.sort(problem.min_bandwidth_hz[feasible]))
    max_size = int(np.searchsorted(cheapest_hz, problem.bandwidth_limit_hz, side="right"))
    batch = problem.batch_size_array[feasible]
    reachable: list[set[int]] = [{0}] + [set() for _ in range(max_size)]
    for value in batch.tolist():
        for size in range(max_size, 0, -1):
            reachable[size].update(total + value for total in reachable[size - 1])
        if sum(len(totals) for totals in reachable) > MAX_SIZE_BATCH_PAIRS:
            raise ValueError(
                "batch_size: the exact solver needs one MILP per (schedule size, batch total) "
                f"pair and these batch sizes give more than {MAX_SIZE_BATCH_PAIRS}; use a uniform "
                "batch size or fewer distinct values"
            )
    pairs = [(size, total) for size in range(1, max_size + 1) for total in reachable[size]]
    return sorted(pairs, key=lambda pair: (-pair[1], -pair[0]))


@dataclass(frozen=True)
class MilpOutcome:
    """Answer of one per-size MILP.

    ``mask``: the best schedule found with WEMD below the cutoff, bool ``[V]``, or ``None``;
    ``wemd_lower_bound``: a proven lower bound on the WEMD of every schedule of this size (and
    batch total) that beats the cutoff, the cutoff itself when HiGHS proved that none does;
    ``proven``: False when the time limit stopped HiGHS before it closed the gap.
    """

    mask: NDArray[np.bool_] | None
    wemd_lower_bound: float
    proven: bool


def best_wemd_milp(
    problem: SchedulingProblem,
    size: int,
    batch_total: int | None,
    *,
    cutoff: float = np.inf,
    time_limit_s: float | None = None,
    budget_scale: float = 1.0,
) -> MilpOutcome:
    """Minimum-WEMD schedule with exactly ``size`` devices (and batch total), as a MILP.

    With ``sum_v x_v = S`` the WEMD (paper eq. (G1)) is linear after the usual linearisation of the
    absolute values::

        min_{x, t}  (1/S) sum_c G_c t_c
        s.t.        t_c >=  sum_v x_v p_vc - S p_c,   t_c >= -(sum_v x_v p_vc - S p_c),
                    sum_v x_v = S,  [sum_v x_v b_v = T],  sum_v x_v B*_v / B <= budget_scale,
                    x_v in {0, 1} for feasible v (infeasible devices are fixed to 0), t_c >= 0.

    ``size`` S >= 1; ``batch_total`` T (None: free, uniform batch sizes); only schedules with WEMD
    below ``cutoff`` matter (HiGHS ``objective_bound``; from the incumbent, best objective −
    sigma / sqrt(T)); ``time_limit_s`` HiGHS's limit in seconds (None: none, the answer is then
    always proven); ``budget_scale`` the normalised budget row's right-hand side (1 = B). Returns
    the schedule (if one beats the cutoff), a WEMD lower bound and whether it is proven.
    """
    feasible = np.flatnonzero(problem.feasible)
    n_x, n_c = feasible.size, problem.num_classes
    labels = problem.label_dist[feasible]
    target = problem.target_dist
    eye = np.eye(n_c)
    rows = [
        np.hstack([labels.T, -eye]),  # sum x p_c - t_c <= S p_c
        np.hstack([-labels.T, -eye]),  # -sum x p_c - t_c <= -S p_c
        np.concatenate([np.ones(n_x), np.zeros(n_c)])[None, :],
    ]
    lower = [np.full(2 * n_c, -np.inf), np.array([size])]
    upper = [size * target, -size * target, np.array([size])]
    if batch_total is not None:
        batch = problem.batch_size_array[feasible].astype(float)
        rows.append(np.concatenate([batch, np.zeros(n_c)])[None, :])
        lower.append(np.array([batch_total]))
        upper.append(np.array([batch_total]))
    share = problem.min_bandwidth_hz[feasible] / problem.total_bandwidth_hz
    rows.append(np.concatenate([share, np.zeros(n_c)])[None, :])
    lower.append(np.array([-np.inf]))
    upper.append(np.array([budget_scale]))
    constraints = LinearConstraint(np.vstack(rows), np.concatenate(lower), np.concatenate(upper))
    cost = np.concatenate([np.zeros(n_x), problem.class_gradient_array / size])
    integrality = np.concatenate([np.ones(n_x), np.zeros(n_c)])
    bounds = Bounds(np.zeros(n_x + n_c), np.concatenate([np.ones(n_x), np.full(n_c, np.inf)]))
    options = dict(_MILP_OPTIONS)
    if np.isfinite(cutoff):
        options["objective_bound"] = float(cutoff)
    if time_limit_s is not None:
        options["time_limit"] = float(time_limit_s)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unrecognized options", category=RuntimeWarning)
        res = milp(
            cost, integrality=integrality, bounds=bounds, constraints=constraints, options=options
        )
    mask: NDArray[np.bool_] | None = None
    if res.x is not None:
        mask = np.zeros(problem.num_devices, dtype=bool)
        mask[feasible[np.asarray(res.x[:n_x]) > 0.5]] = True
    if res.status == 0 and mask is not None:
        # HiGHS proved this schedule optimal up to its feasibility tolerances (~1e-7); its true
        # WEMD, not the slightly relaxed ``res.fun``, is the size's optimum.
        return MilpOutcome(mask, float(min(problem.wemd(mask), cutoff)), True)
    if res.status in (0, 2):  # no schedule of this size beats the cutoff (or fits the budget)
        return MilpOutcome(None, float(cutoff), True)
    dual = getattr(res, "mip_dual_bound", None)
    bound = float(dual) if dual is not None and np.isfinite(dual) else 0.0
    return MilpOutcome(mask, max(0.0, min(bound, cutoff)), False)


def exact_schedule(
    problem: SchedulingProblem, *, milp_time_limit_s: float | None = None
) -> ScheduleResult:
    """Solve P1 (:mod:`fedcgd_strategy.problem`) to optimality (tested against brute force).

    Not in the paper, which reports the optimum without saying how it was found: the incumbent
    starts as the better of GS and FSCD. For a fixed size ``S`` and batch total ``T`` the sampling
    term is the constant ``sigma / sqrt(T)``, so only the WEMD remains, a MILP
    (:func:`best_wemd_milp`) that has to beat ``incumbent - sigma / sqrt(T)``. Pairs are visited
    by ``T`` descending (:func:`size_batch_pairs`) until ``sigma / sqrt(T)`` alone no longer
    beats the incumbent. Each MILP answer is polished by FSCD's 1-step transits (only removes the
    residue of HiGHS' tolerances); one that exceeds ``B`` beyond the rounding slack is solved again
    with the budget tightened by 1e-7 relative.

    P1 is NP-hard (paper Lemma lemma4; times: docs/running.md): ``milp_time_limit_s`` (s per MILP;
    None: the optimum) caps each MILP. ``iterations`` = MILPs solved; ``lower_bound`` = a proven
    lower bound (``objective`` unless a time limit was hit); an empty schedule with objective
    ``inf`` when no device is feasible or fits. ValueError naming ``batch_size`` for too many pairs.
    """
    uniform = problem.uniform_batch
    best_mask = np.zeros(problem.num_devices, dtype=bool)
    best_objective = np.inf
    for heuristic in (greedy_schedule(problem), fscd_schedule(problem)):
        if is_improvement(heuristic.objective, best_objective):
            best_mask, best_objective = heuristic.selected.copy(), heuristic.objective
    lower_bound = np.inf  # min over the pairs of the proven bound; pruned pairs give >= best
    solved = 0
    for size, total in size_batch_pairs(problem):
        sampling = float(sampling_term(problem.sigma, total))
        if not is_improvement(sampling, best_objective):
            break
        batch_total = None if uniform else total
        for budget_scale in (1.0, 1.0 - _BUDGET_BACKOFF):  # the second: see the docstring
            outcome = best_wemd_milp(
                problem,
                size,
                batch_total,
                cutoff=best_objective - sampling,
                time_limit_s=milp_time_limit_s,
                budget_scale=budget_scale,
            )
            solved += 1
            if outcome.mask is None or problem.is_feasible(outcome.mask):
                break
        lower_bound = min(lower_bound, sampling + outcome.wemd_lower_bound)
        mask = outcome.mask
        if mask is None or int(mask.sum()) != size or not problem.is_feasible(mask):
            continue
        mask, _, _ = swap_search(problem, mask)
        objective = problem.objective(mask)
        if is_improvement(objective, best_objective):
            best_mask, best_objective = mask, objective
    lower_bound = min(lower_bound, best_objective)
    result = ScheduleResult.from_mask(problem, best_mask, iterations=solved, method="exact")
    return replace(result, lower_bound=float(lower_bound))
