"""Every policy's decision is checked against the round: candidates, deadline, budget, numbers.

Unit cases on a hand-made round (V = 4, B = 20 MHz, B* = 5, 8, 9 MHz and inf), a property
check of every built-in policy on random rounds, and runs of users' policies that break the
physics (each fails in its round, in one line) or return no ``Decision`` (refused before the
start).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import subprocess
import textwrap
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from command_batch import in_one_process
from subprocesses import FEDCGD

from experiments.run.run_config import format_run_config
from fedcgd_strategy.policies import (
    POLICY_NAMES,
    Decision,
    Policy,
    PolicyContext,
    RoundInputs,
    decision_from_mask,
    make_policy,
    next_class_gradient,
    schedule_checked,
)
from fedcgd_strategy.policies.check import PolicyDecisionError, check_decision, synthetic_round
from fedcgd_strategy.policies.core import BUDGET_REL_TOL
from fedcgd_strategy.solvers import ScheduleResult
from fedcgd_task.settings import PROJECT_DIR

MHZ = 1e6
RNG = np.random.default_rng(0)


def round_of(min_bandwidth_hz, candidate=(True, True, True, False), total=20 * MHZ):
    v = len(min_bandwidth_hz)
    label_dist = np.tile([0.5, 0.5], (v, 1))
    return RoundInputs(
        candidate=np.array(candidate),
        label_dist=label_dist,
        num_examples=np.full(v, 10.0),
        sigma_v=np.ones(v),
        min_bandwidth_hz=np.array(min_bandwidth_hz, dtype=float),
        gain_lin=np.ones(v),
        total_bandwidth_hz=total,
        batch_size=4,
        target_dist=np.array([0.5, 0.5]),
    )


INPUTS = round_of([5 * MHZ, 8 * MHZ, 9 * MHZ, np.inf], candidate=(True, True, True, True))


def mask(*devices: int, v: int = 4) -> np.ndarray:
    out = np.zeros(v, dtype=bool)
    out[list(devices)] = True
    return out


def check(decision, inputs=INPUTS, uses_budget=True):
    return check_decision(decision, inputs, policy="mine", server_round=7, uses_budget=uses_budget)


def test_a_schedule_within_the_budget_passes_with_its_own_copy_of_the_mask():
    decision = decision_from_mask(INPUTS, mask(0, 1))  # 13 MHz
    checked = check(decision)
    assert checked.selected.tolist() == [True, True, False, False]
    assert checked.bandwidth_used_hz == 13 * MHZ
    assert (checked.sigma, checked.wemd, checked.sampling_term) == (
        decision.sigma,
        decision.wemd,
        decision.sampling_term,
    )
    decision.selected[2] = True  # the policy's handle on its mask reaches nothing checked
    assert checked.selected.tolist() == [True, True, False, False]


def test_a_schedule_over_the_budget_fails_naming_policy_round_devices_and_bandwidth():
    with pytest.raises(PolicyDecisionError) as err:
        check(decision_from_mask(INPUTS, mask(0, 1, 2)))  # 5 + 8 + 9 = 22 MHz
    assert str(err.value) == (
        "policy 'mine', round 7: scheduled devices [0, 1, 2] need 22 MHz (the sum of their "
        "minimum bandwidths B*), more than the 20 MHz budget (tolerance 1e-09 relative); a "
        "decision must fit the bandwidth budget"
    )


def test_the_budget_tolerance_is_one_part_in_a_billion():
    b = 20 * MHZ
    at = round_of([b / 2, b / 2 * (1 + 2 * BUDGET_REL_TOL) - 1e-9, 1.0, 1.0])
    over = round_of([b / 2, b / 2 * (1 + 2 * BUDGET_REL_TOL) + 1e-6, 1.0, 1.0])
    check(decision_from_mask(at, mask(0, 1)), inputs=at)  # B (1 + 1e-9) minus a hair: fits
    with pytest.raises(PolicyDecisionError, match="more than the 20 MHz budget"):
        check(decision_from_mask(over, mask(0, 1)), inputs=over)


NUMBERS = ("sigma", "wemd", "sampling_term", "bandwidth_used_hz")
HONEST = decision_from_mask(INPUTS, mask(0, 1))


def lie(field: str) -> Decision:
    """:data:`HONEST` with the number ``field`` not that of its schedule."""
    values = {f: getattr(HONEST, f) for f in NUMBERS}
    values[field] = values[field] / 2 + 0.001
    return Decision(HONEST.selected, **values)


DEVICE_3_UNAVAILABLE = round_of([5 * MHZ, 8 * MHZ, 9 * MHZ, 1 * MHZ])
SHAPE = r"bool mask of shape \(4,\)"
#: (what schedule() returned, the round, uses_budget, what the refusal says)
REFUSALS = [
    (decision_from_mask(INPUTS, mask(0, 3)), INPUTS, True, r"round 7: .*\[3\] that cannot"),
    (decision_from_mask(INPUTS, mask(2, 3)), INPUTS, False, "cannot meet the deadline"),
    (Decision(mask(3), 1.0, 0.0, 0.5, 1e6), DEVICE_3_UNAVAILABLE, True, r"\[3\] that are not cand"),
    (mask(0), INPUTS, True, "returned ndarray, not a Decision"),
    (None, INPUTS, True, "returned NoneType, not a Decision"),
    ([True, False, False, False], INPUTS, True, "returned list, not a Decision"),
    (Decision(np.ones(3, dtype=bool), 1.0, 0.0, 0.5, 0.0), INPUTS, True, SHAPE),
    (Decision(np.array([1, 0, 0, 0]), 1.0, 0.0, 0.5, 0.0), INPUTS, True, SHAPE),
    *[(lie(f), INPUTS, True, f"decision's {f} = .* is not that of") for f in NUMBERS],
]  # fmt: skip


@pytest.mark.parametrize(("returned", "inputs", "uses_budget", "match"), REFUSALS)
def test_a_decision_that_breaks_a_rule_is_refused(returned, inputs, uses_budget, match):
    # a hand-made Decision (not decision_from_mask's) is held to the same rules
    with pytest.raises(PolicyDecisionError, match=match):
        check(returned, inputs=inputs, uses_budget=uses_budget)


def test_a_rule_without_a_budget_may_exceed_it():
    check(decision_from_mask(INPUTS, mask(0, 1, 2)), uses_budget=False)  # 22 MHz: allowed


def random_round(rng: np.random.Generator, v: int, c: int) -> RoundInputs:
    """A round like a cell's: some devices unavailable or infeasible, B* spread widely."""
    candidate = rng.random(v) < 0.7
    need = rng.lognormal(np.log(4 * MHZ), 1.0, size=v)
    need[rng.random(v) < 0.15] = np.inf
    counts = rng.integers(0, 5, size=(v, c)).astype(float)
    counts[:, 0] += 1
    dist = counts / counts.sum(axis=1, keepdims=True)
    return RoundInputs(
        candidate=candidate,
        label_dist=dist,
        num_examples=rng.integers(20, 200, size=v).astype(float),
        sigma_v=rng.random(v) + 0.1,
        min_bandwidth_hz=need,
        gain_lin=rng.random(v),
        total_bandwidth_hz=20 * MHZ,
        batch_size=8,
        target_dist=np.full(c, 1.0 / c),
        train_loss=rng.random(v),
        update_norm=rng.random(v),
        local_dist=dist,
    )


@pytest.mark.parametrize(
    "name", [p for p in POLICY_NAMES if p != "fedcgd-exact"] + ["fedcgd-exact"]
)
def test_every_built_in_policy_passes_the_check_on_random_rounds(name):
    # The check must not break honest runs: each built-in's decisions obey every rule.
    rng = np.random.default_rng(2024)
    v, c = (10, 3) if name == "fedcgd-exact" else (30, 5)
    policy = make_policy(name, PolicyContext(num_devices=v, num_classes=c))
    for r in range(15 if name == "fedcgd-exact" else 40):
        inputs = random_round(rng, v, c)
        check_decision(
            policy.schedule(inputs, rng),
            inputs,
            policy=name,
            server_round=r + 1,
            uses_budget=type(policy).uses_budget,
        )


def test_only_the_all_reference_schedules_without_the_budget():
    without = [p for p in POLICY_NAMES if not type(make_policy(p, PolicyContext(4, 2))).uses_budget]
    assert without == ["all"]


def test_the_synthetic_round_fits_every_device_into_half_the_budget():
    inputs = synthetic_round(40, 10, 20 * MHZ, 32)
    assert inputs.candidate.all() and np.isfinite(inputs.min_bandwidth_hz).all()
    assert inputs.min_bandwidth_hz.sum() == pytest.approx(10 * MHZ)
    every = decision_from_mask(inputs, np.ones(40, dtype=bool))
    check_decision(every, inputs, policy="p", server_round=None)


def test_the_probe_names_a_policy_that_raises():
    class Broken(make_policy("bc", PolicyContext(4, 2)).__class__):  # type: ignore[misc]
        def schedule(self, inputs, rng):
            raise KeyError("gain")

    policy = Broken()
    policy.name = "mine:Broken"
    with pytest.raises(PolicyDecisionError) as err:
        schedule_checked(policy, synthetic_round(4, 2, 20 * MHZ, 8), RNG, server_round=None)
    line = inspect.getsourcelines(Broken.schedule)[1] + 1  # its raise: the user's own line
    assert str(err.value) == (
        "policy 'mine:Broken', a synthetic round before the start: schedule() raised "
        f"KeyError: 'gain' (test_decision_check.py:{line} in schedule)"
    )


def test_a_users_schedule_of_an_unavailable_device_names_the_device_the_rule_and_the_line():
    class Greedy(make_policy("bc", PolicyContext(4, 2)).__class__):  # type: ignore[misc]
        def schedule(self, inputs, rng):
            return decision_from_mask(inputs, np.ones(inputs.num_devices, dtype=bool))

    policy = Greedy()
    policy.name = "mine:Greedy"
    with pytest.raises(PolicyDecisionError) as err:
        schedule_checked(policy, DEVICE_3_UNAVAILABLE, RNG, server_round=7)
    line = inspect.getsourcelines(Greedy.schedule)[1] + 1
    assert str(err.value) == (
        "policy 'mine:Greedy', round 7: schedule(): decision_from_mask got scheduled devices [3] "
        "that are not candidates this round (unavailable, or without a valid report) "
        f"(test_decision_check.py:{line} in schedule)"
    )


#: Users' policies that break the physics, each in a file outside the project.
CHEATS = """
import numpy as np

from fedcgd_strategy import Policy, decision_from_mask


class EveryCandidate(Policy):
    needs_reports = False

    def schedule(self, inputs, rng):
        return decision_from_mask(inputs, inputs.candidate.copy())


class EveryFeasible(Policy):  # fits the budget only by luck; never exceeds the deadline
    needs_reports = False

    def schedule(self, inputs, rng):
        return decision_from_mask(inputs, inputs.candidate & np.isfinite(inputs.min_bandwidth_hz))


class BareMask(Policy):
    needs_reports = False

    def schedule(self, inputs, rng):
        return inputs.candidate & np.isfinite(inputs.min_bandwidth_hz)


class Raises(Policy):
    needs_reports = False

    def schedule(self, inputs, rng):
        return inputs.no_such_field


class ZeroesTheBandwidths(Policy):  # would pass the budget rule on the round it changed
    needs_reports = False

    def schedule(self, inputs, rng):
        inputs.min_bandwidth_hz[:] = 0.0
        return decision_from_mask(inputs, inputs.candidate.copy())


class UnlocksAndZeroes(Policy):  # makes its copy writable again, then "frees" the band
    needs_reports = False
    calls = 0

    def schedule(self, inputs, rng):
        type(self).calls += 1  # honest in the pre-start probe (call 1), cheats in the run
        if type(self).calls == 1:
            return decision_from_mask(inputs, np.zeros(inputs.num_devices, dtype=bool))
        inputs.min_bandwidth_hz.setflags(write=True)
        inputs.min_bandwidth_hz[np.isfinite(inputs.min_bandwidth_hz)] = 0.0
        return decision_from_mask(inputs, inputs.candidate & np.isfinite(inputs.min_bandwidth_hz))


class FailsInRound3(Policy):
    needs_reports = False
    calls = 0

    def schedule(self, inputs, rng):
        type(self).calls += 1  # the pre-start probe is call 1
        if type(self).calls == 4:
            raise RuntimeError("out of ideas")
        return decision_from_mask(inputs, np.zeros(inputs.num_devices, dtype=bool))
"""


@pytest.fixture(scope="module")
def cheats(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("user") / "cheats.py"
    path.write_text(textwrap.dedent(CHEATS))
    return path


def settings(cheats: Path, name: str, folder: Path, **values: object) -> dict[str, object]:
    own = {"num-server-rounds": 3, "result-dir": str(folder), "policy": f"{cheats}:{name}"}
    return {**own, **values}


def run(cheats: Path, name: str, folder: Path, **values: object):
    """The run as a whole process of its own."""
    return subprocess.run(
        [FEDCGD, "inprocess", "--run-config",
         format_run_config(settings(cheats, name, folder, **values))],
        cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


#: The cheats run in one child process (tests/command_batch.py): name -> extra settings.
BATCHED = {
    "EveryFeasible": {},
    "UnlocksAndZeroes": {},
    "BareMask": {},
    "Raises": {},
    "ZeroesTheBandwidths": {},
    "FailsInRound3": {"num-server-rounds": 5, "checkpoint-every": 1},  # resumable after round 2
}


@pytest.fixture(scope="module")
def batched(cheats, tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """Each of BATCHED's runs: its folder and its outcome (exit code, stdout, stderr)."""
    folders = {name: tmp_path_factory.mktemp(name) / "run" for name in BATCHED}
    argvs = [
        [
            "inprocess",
            "--run-config",
            format_run_config(settings(cheats, name, folders[name], **values)),
        ]
        for name, values in BATCHED.items()
    ]
    done = in_one_process(argvs)
    return {name: (folders[name], d) for name, d in zip(BATCHED, done, strict=True)}


def test_a_policy_that_schedules_every_candidate_fails_in_round_1_in_one_line(cheats, tmp_path):
    done = run(cheats, "EveryCandidate", tmp_path / "run")
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 2 and "Traceback" not in done.stderr, err
    assert err[0].startswith(f"failed: policy '{cheats}:EveryCandidate', round 1: scheduled ")
    assert err[1].startswith(
        f"cannot be resumed: {tmp_path / 'run'} holds no checkpoint (it stopped before its "
        "first checkpoint); to start again in a new folder: "
    )
    assert "MHz budget" in err[0] or "cannot meet the deadline" in err[0]
    status = (tmp_path / "run" / "status.json").read_text()
    assert '"state": "failed"' in status and "round 1: scheduled devices" in status
    assert not (tmp_path / "run" / "metrics.jsonl").read_text()  # round 1 never happened


# EveryFeasible: the cell's B* are in the MHz, 20 of them exceed 20 MHz. UnlocksAndZeroes:
# honest in the pre-start probe; in round 1 the server's own B* say what the schedule needs,
# whatever the policy did to the copy it was given (on the shared arrays this run ended
# "completed" with 14-21 devices needing 39.5-439 MHz of 20 MHz).
@pytest.mark.parametrize("name", ["EveryFeasible", "UnlocksAndZeroes"])
def test_a_policy_that_exceeds_the_budget_names_the_bandwidth_against_it(cheats, batched, name):
    _, done = batched[name]
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 2 and "Traceback" not in done.stderr, err
    assert err[0].startswith(f"failed: policy '{cheats}:{name}', round 1: scheduled devices [")
    assert "MHz (the sum of their minimum bandwidths B*), more than the 20 MHz budget" in err[0]


def test_the_all_reference_is_exempt_from_the_budget_only(tmp_path):
    done = subprocess.run(
        [FEDCGD, "inprocess", "--run-config",
         format_run_config({"num-server-rounds": 2, "policy": "all",
                            "result-dir": str(tmp_path / "run")})],
        cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"policy_uses_budget": false' in (tmp_path / "run" / "config.json").read_text()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("BareMask", "schedule() returned ndarray, not a Decision"),
        ("Raises", "schedule() raised AttributeError: 'RoundInputs' object has no attribute"),
        ("ZeroesTheBandwidths", "raised ValueError: assignment destination is read-only"),
    ],
)
def test_a_policy_that_returns_no_decision_is_refused_before_the_start(
    cheats, batched, name, message
):
    folder, done = batched[name]
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr[-2000:]
    assert err[0].startswith(f"error: policy '{cheats}:{name}'") and message in err[0], err
    assert not folder.exists()


def test_the_readme_lists_every_round_inputs_field():
    import dataclasses

    text = (PROJECT_DIR / "docs" / "bring-your-own.md").read_text()
    section = text[text.index("What `schedule` gets, `RoundInputs`") :]
    section = section[: section.index("**The budget rule**")]
    listed = [line.split("|")[1].strip(" `") for line in section.splitlines() if line[:3] == "| `"]
    assert listed == [f.name for f in dataclasses.fields(RoundInputs)]


def test_a_users_policy_that_raises_mid_run_fails_that_round_in_one_line(cheats, batched):
    _, done = batched["FailsInRound3"]
    err = done.stderr.strip().splitlines()  # (rounds 1, 2 warn: nothing scheduled, uploaded)
    assert done.returncode == 1 and "Traceback" not in done.stderr, err
    line = CHEATS.splitlines().index('            raise RuntimeError("out of ideas")') + 1
    assert err[-2] == (
        f"failed: policy '{cheats}:FailsInRound3', round 3: schedule() raised RuntimeError: "
        f"out of ideas (cheats.py:{line} in schedule)"
    )
    assert err[-1].startswith("to continue after round 2 of 5: "), err[-1]


def test_the_round_inputs_a_policy_gets_are_read_only():
    from fedcgd_strategy.policies import round_inputs

    inputs = round_inputs(
        available=np.ones(3, dtype=bool),
        min_bandwidth_hz=np.ones(3),
        gain_lin=np.ones(3),
        total_bandwidth_hz=10.0,
        batch_size=2,
        num_classes=2,
        target_dist=np.array([0.5, 0.5]),
    )
    for name in ("candidate", "label_dist", "num_examples", "sigma_v", "min_bandwidth_hz",
                 "gain_lin", "target_dist"):  # fmt: skip
        with pytest.raises(ValueError, match="read-only"):
            getattr(inputs, name)[0] = 0


class _Unlocks(Policy):
    """Re-enables writing on its copy of B* and zeroes it, then schedules every feasible device."""

    needs_reports = False

    def schedule(self, inputs, rng):
        need = inputs.min_bandwidth_hz
        need.setflags(write=True)
        feasible = inputs.candidate & np.isfinite(need)
        need[feasible] = 0.0
        return decision_from_mask(inputs, feasible)


class _WidensTheBudget(Policy):
    """Writes a huge budget into its (frozen) copy, then schedules every feasible device."""

    needs_reports = False

    def schedule(self, inputs, rng):
        object.__setattr__(inputs, "total_bandwidth_hz", 1e12)
        return decision_from_mask(inputs, inputs.candidate & np.isfinite(inputs.min_bandwidth_hz))


def _frozen_round():
    from fedcgd_strategy.policies import round_inputs

    return round_inputs(  # as in a run: read-only arrays that own their memory
        available=np.ones(4, dtype=bool),
        min_bandwidth_hz=np.array([5 * MHZ, 8 * MHZ, 9 * MHZ, np.inf]),
        gain_lin=np.ones(4),
        total_bandwidth_hz=20 * MHZ,
        batch_size=4,
        num_classes=2,
        target_dist=np.array([0.5, 0.5]),
    )


def _refused_on_a_frozen_round(policy_class):
    """The round's inputs and the refusal of ``policy_class``'s schedule on a frozen round."""
    inputs = _frozen_round()
    policy = policy_class()
    policy.name = f"mine:{policy_class.__name__.lstrip('_')}"
    with pytest.raises(PolicyDecisionError) as err:
        schedule_checked(policy, inputs, np.random.default_rng(0), server_round=3)
    return inputs, str(err.value)


@pytest.mark.parametrize("cheat", [_Unlocks, _WidensTheBudget])
def test_what_a_policy_writes_into_its_copy_changes_no_verdict(cheat):
    inputs, refusal = _refused_on_a_frozen_round(cheat)
    # the decision it built says 0 Hz or a 1 THz budget; the server's B* say 5 + 8 + 9 = 22 MHz
    assert (
        "devices [0, 1, 2] need 22 MHz (the sum of their minimum bandwidths B*), more "
        "than the 20 MHz budget" in refusal
    )
    assert inputs.min_bandwidth_hz.tolist()[:3] == [5 * MHZ, 8 * MHZ, 9 * MHZ]
    assert not inputs.min_bandwidth_hz.flags.writeable
    assert inputs.total_bandwidth_hz == 20 * MHZ


def test_the_pre_start_probe_also_hands_the_policy_a_copy():
    inputs = synthetic_round(4, 2, 20 * MHZ, 8)
    before = inputs.min_bandwidth_hz.copy()
    policy = _Unlocks()
    policy.name = "mine:Unlocks"
    with pytest.raises(PolicyDecisionError, match=r"bandwidth_used_hz = 0\.0 is not that"):
        schedule_checked(policy, inputs, RNG, server_round=None)
    assert np.array_equal(inputs.min_bandwidth_hz, before)


# --- what a decision carries besides its schedule: Ĝ and the solver's result ------------------
SCHEDULED = mask(0, 1)
SOLVED = ScheduleResult(SCHEDULED, 0.25, 0.0, 0.25, 13 * MHZ, 7, "fscd")


def carrying(class_gradient=None, solver=None) -> Decision:
    return decision_from_mask(INPUTS, SCHEDULED, class_gradient, solver)


#: (Ĝ a decision carries, what the refusal shows of it); INPUTS has C = 2 classes
BAD_GRADIENTS = [
    ("abc", "str 'abc'"),
    ([1.0, "abc"], "list [1.0, 'abc']"),
    ([np.nan], "list [nan]"),
    (np.array([1.0, np.inf]), "ndarray array([ 1., inf])"),
    ([-1.0], "list [-1.0]"),
    (True, "bool True"),
    ([[1.0, 2.0]], "list [[1.0, 2.0]]"),
    ([[1.0], [2.0, 3.0]], "list [[1.0], [2.0, 3.0]]"),
    (10**30, "int 1000000000000000000000000000000"),
    (np.zeros(10**6), "ndarray array([0., 0."),
    ([1.0, 2.0, 3.0], "list [1.0, 2.0, 3.0]"),
    (1 + 2j, "complex (1+2j)"),
    ({"g": 1.0}, "dict {'g': 1.0}"),
]  # fmt: skip


@pytest.mark.parametrize(("gradient", "shown"), BAD_GRADIENTS)
def test_a_class_gradient_that_is_not_1_or_c_numbers_is_refused_naming_it(gradient, shown):
    with pytest.raises(PolicyDecisionError) as err:
        check(carrying(class_gradient=gradient))
    refusal = str(err.value)
    assert refusal.startswith(f"policy 'mine', round 7: the decision's class_gradient is {shown}")
    assert refusal.endswith(
        "; it must be None or Ĝ: 1 or 2 (the number of classes) finite numbers >= 0"
    )
    assert len(refusal) < 200 and "\n" not in refusal


@pytest.mark.parametrize(
    ("gradient", "kept"),
    [
        (None, None),
        (0.5, [0.5]),
        (np.float32(2), [2.0]),
        ([1, 3], [1.0, 3.0]),
        ((0.0, 0.5), [0, 0.5]),
    ],
)
def test_a_class_gradient_of_1_or_c_numbers_is_kept_as_a_float_copy(gradient, kept):
    checked = check(carrying(class_gradient=gradient))
    assert (None if kept is None else checked.class_gradient.tolist()) == kept
    if isinstance(gradient, list):
        gradient[0] = 99  # the policy's list reaches nothing checked
        assert checked.class_gradient.tolist() == kept


def solved(**changes: object) -> ScheduleResult:
    return dataclasses.replace(SOLVED, **changes)


BAD_SOLVERS = [
    ({"objective": -1e300}, "solver.objective is float -1e+300; it must be a number >= 0 "
     "(finite when devices are scheduled)"),
    ({"objective": math.nan}, "solver.objective is float nan"),
    ({"objective": math.inf}, "solver.objective is float inf"),
    ({"objective": "0.5"}, "solver.objective is str '0.5'"),
    ({"objective": True}, "solver.objective is bool True"),
    ({"objective": 10**400}, "solver.objective is int 100000000000000000..."),
    ({"iterations": 10**30}, "solver.iterations is int 1000000000000000000000000000000; it must "
     "be a whole number in [0, 2**53]"),
    ({"iterations": -1}, "solver.iterations is int -1"),
    ({"iterations": 2**53 + 1}, "solver.iterations is int 9007199254740993"),
    ({"iterations": 2.0}, "solver.iterations is float 2.0"),
    ({"iterations": np.float64(3)}, "solver.iterations is float64 np.float64(3.0)"),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "message"), BAD_SOLVERS)
def test_a_solver_result_with_numbers_that_cannot_be_is_refused_naming_the_field(changes, message):
    with pytest.raises(PolicyDecisionError) as err:
        check(carrying(solver=solved(**changes)))
    assert str(err.value).startswith(f"policy 'mine', round 7: the decision's {message}")


@pytest.mark.parametrize("solver", ["fscd", {"objective": 0.25}, SCHEDULED, 7])
def test_a_solver_of_another_type_is_refused_naming_policy_and_round(solver):
    with pytest.raises(PolicyDecisionError) as err:
        check(carrying(solver=solver))
    assert str(err.value).startswith(
        f"policy 'mine', round 7: the decision's solver is {type(solver).__name__} "
    )
    assert str(err.value).endswith(
        "; it must be None or the ScheduleResult of fedcgd_strategy.solvers.solve"
    )


def test_a_solver_result_is_recorded_as_plain_numbers_and_nothing_scheduled_may_cost_inf():
    checked = check(carrying(solver=solved(objective=np.float32(0.25), iterations=np.int64(7))))
    assert type(checked.solver.objective) is float and type(checked.solver.iterations) is int
    assert (checked.solver.objective, checked.solver.iterations) == (0.25, 7)
    empty = decision_from_mask(INPUTS, mask(), None, solved(objective=math.inf, iterations=0))
    assert check(empty).solver.objective == math.inf  # the empty schedule's objective


class _Gradients(Policy):
    """Schedules nothing; its ``class_gradient`` property returns (or raises) ``next_g``."""

    needs_reports = False
    next_g: object = None

    @property
    def class_gradient(self):
        if isinstance(self.next_g, Exception):
            raise self.next_g
        return self.next_g

    def schedule(self, inputs, rng):
        return decision_from_mask(inputs, np.zeros(inputs.num_devices, dtype=bool))


@pytest.mark.parametrize(
    ("next_g", "refusal"),
    [
        (np.zeros(10**6), "its class_gradient property is ndarray array([0., 0."),
        ("abc", "its class_gradient property is str 'abc'; it must be None or Ĝ: 1 or 2"),
        (ZeroDivisionError("no uploads"), "its class_gradient property raised "
         "ZeroDivisionError: no uploads"),
    ],
)  # fmt: skip
def test_the_next_rounds_class_gradient_is_checked_too(next_g, refusal):
    policy = _Gradients()
    policy.name, policy.next_g = "mine:Gradients", next_g
    with pytest.raises(PolicyDecisionError) as err:
        next_class_gradient(policy, 2, server_round=4)
    assert str(err.value).startswith(f"policy 'mine:Gradients', round 4: {refusal}")
    assert len(str(err.value)) < 200
    policy.next_g = [0.5, 1]
    assert next_class_gradient(policy, 2, server_round=4).tolist() == [0.5, 1.0]


class _ReachesItsCaller(Policy):
    """Looks for the server's ``RoundInputs`` in its caller's frame (``f_back``)."""

    needs_reports = False
    found: ClassVar[list[str]] = []

    def schedule(self, inputs, rng):
        caller = inspect.currentframe().f_back
        others = [k for k, v in caller.f_locals.items() if isinstance(v, RoundInputs)]
        type(self).found = [k for k in others if caller.f_locals[k] is not inputs]
        return decision_from_mask(inputs, np.zeros(inputs.num_devices, dtype=bool))


def test_the_policys_caller_holds_only_the_policys_own_copy():
    # on the old call the server's own RoundInputs sat in f_back (`inputs`): a policy unlocked
    # its candidate mask there and unavailable devices uploaded. (Frames further up still hold
    # it: code in the server's process can reach anything; docs/bring-your-own.md says so.)
    policy = _ReachesItsCaller()
    policy.name = "mine:ReachesItsCaller"
    schedule_checked(policy, _frozen_round(), RNG, server_round=2)
    assert _ReachesItsCaller.found == []
