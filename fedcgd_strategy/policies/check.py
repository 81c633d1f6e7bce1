"""Every policy call watched, every decision checked against the server's copy of the round.

:func:`check_decision` holds the rule (docs/design.md, "Checked decisions");
:func:`schedule_checked` calls a policy on a copy of its inputs and checks what it returns, every
round and once before the start on :func:`synthetic_round`; :func:`policy_call` gives any call of
a policy ``stall-limit-s`` and turns what a user's policy raises into one line. Pure numpy.
"""

from __future__ import annotations

import math
import numbers
import reprlib
import threading
from collections.abc import Callable
from dataclasses import fields, replace
from functools import partial
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from fedcgd_strategy.policies.core import (
    BUDGET_REL_TOL,
    NOT_CANDIDATES,
    Decision,
    Policy,
    ReportedStats,
    RoundInputs,
    decision_from_mask,
    devices_named,
    policy_copy,
    round_inputs,
)
from fedcgd_strategy.solvers import ScheduleResult
from fedcgd_task.errors import OneLineMessage, RuleBrokenError
from fedcgd_task.imports import first_line, said

T = TypeVar("T")
#: Largest solver iteration count recorded: 2**53, the last integer a JSON reader's float holds.
MAX_SOLVER_ITERATIONS = 2**53


class PolicyDecisionError(OneLineMessage, ValueError):
    """A policy's call raised or stalled, or its decision breaks the round's physics; one line.

    ``SystemExit``, ``KeyboardInterrupt`` and the like are no stop when a policy raises them.
    """


def call_within(limit_s: float | None, call: Callable[[], T], what: str) -> T:
    """``call()`` in a thread of its own, given ``limit_s`` seconds (None: no limit, no thread).

    Its ``Exception`` is raised here; a :class:`PolicyDecisionError` that begins with ``what``
    when it raised anything else or did not return in time (the thread cannot be stopped: it is
    left behind, a daemon, and the run fails).
    """
    if limit_s is None:
        return call()
    ended: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            ended.append((True, call()))
        except BaseException as err:  # raised in the caller's thread
            ended.append((False, err))

    thread = threading.Thread(target=target, name="fedcgd-policy-call", daemon=True)
    thread.start()
    thread.join(limit_s)
    if not ended:
        raise PolicyDecisionError(
            f"{what} did not return within {limit_s:g} s (stall-limit-s); a stuck policy or "
            "solver stops the run: raise stall-limit-s if it needs longer"
        )
    returned, value = ended[0]
    if returned:
        return value
    if isinstance(value, Exception):
        raise value
    raise PolicyDecisionError(f"{what} raised {said(value)}") from value


def policy_call(
    policy: Policy,
    server_round: int | None,
    what: str,
    call: Callable[[], T],
    limit_s: float | None = None,
) -> T:
    """``call()``, the policy's ``what``, within ``limit_s`` seconds (:func:`call_within`).

    ``server_round`` None is the pre-start probe. An exception of a user's policy, or of any
    policy in the probe, becomes a :class:`PolicyDecisionError`
    ``policy 'X', round 7: <what> raised <type>: <first line> (<file>:<line> in <function>)``
    (cause chained; a :class:`~fedcgd_task.errors.RuleBrokenError`: ``<what>: <the rule broken>
    (<file>...)``); a built-in's in a run goes on unchanged (a bug: its traceback says where).
    """
    head = f"{_head(policy.name, server_round)}: {what}"

    def guarded() -> T:
        try:
            return call()
        except Exception as err:
            if ":" not in policy.name and server_round is not None:
                raise
            if isinstance(err, RuleBrokenError):  # the rule's own words, where it was broken
                raise PolicyDecisionError(f"{head}: {first_line(err)}") from err
            raise PolicyDecisionError(f"{head} raised {said(err)}") from err

    return call_within(limit_s, guarded, head)


def _mhz(value_hz: float) -> str:
    return f"{value_hz / 1e6:.6g} MHz"


def _head(policy: str, server_round: int | None) -> str:
    """``policy 'X', round 7`` (``server_round`` None: the pre-start probe)."""
    if server_round is None:
        return f"policy {policy!r}, a synthetic round before the start"
    return f"policy {policy!r}, round {server_round}"


def _shown(value: object) -> str:
    """``value`` in a few dozen characters at most (:func:`reprlib.repr`), its type first."""
    return f"{type(value).__name__} {reprlib.repr(value)}"


def _gradient(value: object, num_classes: int, head: str, what: str) -> NDArray[np.float64] | None:
    """``value`` (None, or Ĝ: 1 or C numbers, finite, >= 0) as a new float[1] or float[C]."""
    if value is None:
        return None
    try:
        g = np.asarray(value)
        ok = g.dtype.kind in "iuf" and g.ndim <= 1 and g.size in {1, num_classes}
        ok = ok and bool(np.all(np.isfinite(g) & (g >= 0)))
    except Exception:  # whatever the object does, it is no gradient
        ok = False
    if not ok:
        raise PolicyDecisionError(
            f"{head}: {what} is {_shown(value)}; it must be None or Ĝ: 1 or {num_classes} (the "
            "number of classes) finite numbers >= 0"
        )
    return np.array(g, dtype=float).reshape(-1)


def _number(value: object, kind: type) -> float | None:
    """``value`` as a float (an int if ``kind`` is Integral) if it is a number of ``kind``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, kind):
        return None
    number: Any = value  # a number of ``kind``: float() and int() take it
    try:
        return int(number) if kind is numbers.Integral else float(number)
    except Exception:  # 10**400, or a number type that cannot say
        return None


def _solver(solver: object, scheduled: bool, head: str) -> ScheduleResult | None:
    """A plain copy of ``solver`` (None or a ScheduleResult) with its recorded numbers checked."""
    if solver is None:
        return None
    if not isinstance(solver, ScheduleResult):
        raise PolicyDecisionError(
            f"{head}: the decision's solver is {_shown(solver)}; it must be None or the "
            "ScheduleResult of fedcgd_strategy.solvers.solve"
        )
    objective = _number(solver.objective, numbers.Real)
    if objective is None or not (objective >= 0 and (math.isfinite(objective) or not scheduled)):
        raise PolicyDecisionError(
            f"{head}: the decision's solver.objective is {_shown(solver.objective)}; it must be "
            "a number >= 0 (finite when devices are scheduled)"
        )
    iterations = _number(solver.iterations, numbers.Integral)
    if iterations is None or not 0 <= iterations <= MAX_SOLVER_ITERATIONS:
        raise PolicyDecisionError(
            f"{head}: the decision's solver.iterations is {_shown(solver.iterations)}; it must "
            "be a whole number in [0, 2**53]"
        )
    values = {f.name: getattr(solver, f.name) for f in fields(ScheduleResult)}
    values.update(objective=objective, iterations=int(iterations))
    return ScheduleResult(**values)


def check_decision(
    decision: object,
    inputs: RoundInputs,
    *,
    policy: str,
    server_round: int | None,
    uses_budget: bool = True,
) -> Decision:
    """Return ``decision``, rebuilt from ``inputs``, if it obeys the rules; else raise.

    The rules are docs/design.md's, "Checked decisions" (Σ B*_v <= B (1 +
    :data:`BUDGET_REL_TOL`) unless ``uses_budget`` is False; ``class_gradient`` None or 1 or C
    finite numbers >= 0; ``solver`` None or a ``ScheduleResult`` with objective >= 0, finite if
    anything is scheduled, and iterations in [0, 2**53]). The result holds a copy of the
    schedule, the numbers computed on ``inputs``, and copies of the gradient and the solver's
    result. Raises :class:`PolicyDecisionError`:
    ``policy 'X', round 7: <what is wrong>; <what a decision must be>``.
    """
    head = _head(policy, server_round)
    if not isinstance(decision, Decision):
        raise PolicyDecisionError(
            f"{head}: schedule() returned {type(decision).__name__}, not a Decision; return "
            "decision_from_mask(inputs, mask) with a bool mask over the devices"
        )
    selected = np.array(decision.selected)  # a copy: the policy keeps no handle on it
    if selected.dtype != np.bool_ or selected.shape != inputs.candidate.shape:
        raise PolicyDecisionError(
            f"{head}: the decision's selected is {selected.dtype} of shape {selected.shape}; "
            f"it must be a bool mask of shape ({inputs.num_devices},), one entry per device"
        )
    budget = float(inputs.total_bandwidth_hz)
    need = np.array(inputs.min_bandwidth_hz, dtype=float)
    used = float(np.sum(need[selected & np.isfinite(need)]))
    tail = f"bandwidth used {_mhz(used)} of the {_mhz(budget)} budget"
    outside = selected & ~inputs.candidate
    if outside.any():
        raise PolicyDecisionError(
            f"{head}: scheduled devices {devices_named(outside)} {NOT_CANDIDATES}; {tail}"
        )
    infeasible = selected & ~np.isfinite(need)
    if infeasible.any():
        raise PolicyDecisionError(
            f"{head}: scheduled devices {devices_named(infeasible)} that cannot meet the deadline "
            f"this round (minimum bandwidth B* = inf); {tail}"
        )
    if uses_budget and used > budget * (1.0 + BUDGET_REL_TOL):
        raise PolicyDecisionError(
            f"{head}: scheduled devices {devices_named(selected)} need {_mhz(used)} (the sum of "
            f"their minimum bandwidths B*), more than the {_mhz(budget)} budget (tolerance "
            f"{BUDGET_REL_TOL:g} relative); a decision must fit the bandwidth budget"
        )
    honest = decision_from_mask(inputs, selected)
    for name in ("sigma", "wemd", "sampling_term", "bandwidth_used_hz"):
        given, true = float(getattr(decision, name)), float(getattr(honest, name))
        if given != true and not (math.isnan(given) and math.isnan(true)):
            raise PolicyDecisionError(
                f"{head}: the decision's {name} = {given!r} is not that of its schedule "
                f"({true!r}); build the decision with decision_from_mask(inputs, mask)"
            )
    classes = int(inputs.target_dist.shape[0])
    return replace(
        honest,
        class_gradient=_gradient(
            decision.class_gradient, classes, head, "the decision's class_gradient"
        ),
        solver=_solver(decision.solver, bool(selected.any()), head),
    )


def _schedule(policy: Policy, copy: RoundInputs, rng: np.random.Generator) -> object:
    """``policy.schedule``, called from a frame that holds the policy's own copy only."""
    return policy.schedule(copy, rng)


def schedule_checked(
    policy: Policy,
    inputs: RoundInputs,
    rng: np.random.Generator,
    *,
    server_round: int | None,
    limit_s: float | None = None,
) -> Decision:
    """``policy.schedule`` on a copy of ``inputs`` (:func:`policy_call`), checked on ``inputs``.

    ``server_round`` None is the pre-start probe of a fresh policy (on :func:`synthetic_round`).
    The policy's caller holds only its copy; what the copy protects against, and what not:
    docs/bring-your-own.md.
    """
    call = partial(_schedule, policy, policy_copy(inputs), rng)
    decision = policy_call(policy, server_round, "schedule()", call, limit_s)
    uses_budget = bool(getattr(type(policy), "uses_budget", True))
    return check_decision(
        decision, inputs, policy=policy.name, server_round=server_round, uses_budget=uses_budget
    )


def next_class_gradient(
    policy: Policy, num_classes: int, *, server_round: int
) -> NDArray[np.float64] | None:
    """``policy.class_gradient`` (Ĝ of the next round, recorded), checked as a decision's."""
    what = "its class_gradient property"
    value = policy_call(policy, server_round, what, lambda: policy.class_gradient)
    return _gradient(value, num_classes, _head(policy.name, server_round), what)


def synthetic_round(
    num_devices: int, num_classes: int, total_bandwidth_hz: float, batch_size: int
) -> RoundInputs:
    """A small round every device of which can be scheduled: for the pre-start probe.

    Device v holds classes v mod C and v + 1 mod C, |D_v| = 100, σ̂_v = 1, with a training loss
    and update norm, and B*_v = B / (2V): all together take half the budget. Read-only arrays.
    """
    devices = np.arange(num_devices)
    hist = np.zeros((num_devices, num_classes), dtype=np.int64)
    np.add.at(hist, (devices, devices % num_classes), 1)
    np.add.at(hist, (devices, (devices + 1) % num_classes), 1)
    ramp = 1.0 + devices / max(num_devices, 1)
    every = np.ones(num_devices, dtype=bool)
    reported = ReportedStats(every, hist, np.full(num_devices, 100.0), every * 1.0, ramp, ramp)
    return round_inputs(
        available=every,
        min_bandwidth_hz=np.full(num_devices, total_bandwidth_hz / (2 * num_devices)),
        gain_lin=1e-10 * ramp,
        total_bandwidth_hz=float(total_bandwidth_hz),
        batch_size=int(batch_size),
        num_classes=num_classes,
        target_dist=np.full(num_classes, 1.0 / num_classes),
        reported=reported,
        local_counts=hist,
    )
