"""A policy's decision checked against the round's physics (budget, deadline, availability);
what a user's policy raises, as one line naming its file and line. The policy is trusted: no
thread, no copy, no probe (docs/design.md, "Trust boundary", "Checked decisions")."""  # noqa: D205, D209

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from fedcgd_config.imports import first_line, said
from fedcgd_strategy.errors import OneLineMessage, RuleBrokenError
from fedcgd_strategy.policies.core import BUDGET_REL_TOL, Decision, Policy, RoundInputs

T = TypeVar("T")


def devices_named(mask: NDArray[np.bool_]) -> str:
    """``[3, 5, 9]`` (at most 12, then ``... (n in all)``)."""
    idx = np.flatnonzero(mask).tolist()
    return str(idx) if len(idx) <= 12 else f"{str(idx[:12])[:-1]}, ...] ({len(idx)} in all)"


class PolicyDecisionError(OneLineMessage, ValueError):
    """A user's policy raised, or a decision breaks the round's physics; one line."""


def policy_call(policy: Policy, server_round: int, what: str, call: Callable[[], T]) -> T:
    """``call()``, the policy's ``what``; what a user's policy raises becomes one line.

    ``policy 'X', round 7: <what> raised <type>: <first line> (<file>:<line> in <function>)``,
    cause chained. A built-in's exception goes on unchanged (a bug: its traceback says where).
    """
    try:
        return call()
    except Exception as err:
        if ":" not in policy.name:
            raise
        head = f"policy {policy.name!r}, round {server_round}: {what}"
        if isinstance(err, RuleBrokenError):  # the rule's own words, where it was broken
            raise PolicyDecisionError(f"{head}: {first_line(err)}") from err
        raise PolicyDecisionError(f"{head} raised {said(err)}") from err


def check_decision(
    decision: object,
    inputs: RoundInputs,
    *,
    policy: str,
    server_round: int,
    uses_budget: bool = True,
) -> Decision:
    """Return ``decision`` if its schedule obeys the round's physics, else raise
    :class:`PolicyDecisionError` (docs/design.md, "Checked decisions").

    A :class:`Decision` with a bool mask over the devices, candidates only (availability), none
    with B*_v = inf (the deadline), Σ B*_v <= B (1 + :data:`BUDGET_REL_TOL`) unless
    ``uses_budget`` is False. The decision's own numbers are the policy's.
    """  # noqa: D205
    head = f"policy {policy!r}, round {server_round}"
    if not isinstance(decision, Decision):
        raise PolicyDecisionError(
            f"{head}: schedule() returned {type(decision).__name__}, not a Decision; return "
            "decision_from_mask(inputs, mask) with a bool mask over the devices"
        )
    selected = np.asarray(decision.selected)
    if selected.dtype != np.bool_ or selected.shape != inputs.candidate.shape:
        raise PolicyDecisionError(
            f"{head}: the decision's selected is {selected.dtype} of shape {selected.shape}; "
            f"it must be a bool mask of shape ({inputs.num_devices},), one entry per device"
        )
    budget = float(inputs.total_bandwidth_hz)
    need = inputs.min_bandwidth_hz
    used = float(np.sum(need[selected & np.isfinite(need)]))
    mhz = f"{used / 1e6:.6g} MHz", f"{budget / 1e6:.6g} MHz"
    tail = f"bandwidth used {mhz[0]} of the {mhz[1]} budget"
    outside = selected & ~inputs.candidate
    if outside.any():
        raise PolicyDecisionError(
            f"{head}: scheduled devices {devices_named(outside)} that are not candidates this "
            f"round (unavailable, or without a valid report); {tail}"
        )
    infeasible = selected & ~np.isfinite(need)
    if infeasible.any():
        raise PolicyDecisionError(
            f"{head}: scheduled devices {devices_named(infeasible)} that cannot meet the deadline "
            f"this round (minimum bandwidth B* = inf); {tail}"
        )
    if uses_budget and used > budget * (1.0 + BUDGET_REL_TOL):
        raise PolicyDecisionError(
            f"{head}: scheduled devices {devices_named(selected)} need {mhz[0]} (the sum of "
            f"their minimum bandwidths B*), more than the {mhz[1]} budget (tolerance "
            f"{BUDGET_REL_TOL:g} relative); a decision must fit the bandwidth budget"
        )
    return decision


def schedule_checked(
    policy: Policy, inputs: RoundInputs, rng: np.random.Generator, *, server_round: int
) -> Decision:
    """``policy.schedule(inputs, rng)`` (:func:`policy_call`), its decision checked."""
    decision = policy_call(policy, server_round, "schedule()", lambda: policy.schedule(inputs, rng))
    uses_budget = bool(getattr(type(policy), "uses_budget", True))
    return check_decision(
        decision, inputs, policy=policy.name, server_round=server_round, uses_budget=uses_budget
    )
