"""Every policy's decision is checked against the round's physics: candidates, deadline, budget.

Unit cases on a hand-made round (V = 4, B = 20 MHz, B* = 5, 8, 9 MHz and inf), a property
check of every built-in policy on random rounds, and runs of users' policies that break the
physics, return no ``Decision`` or write into their read-only inputs (each fails in its round,
in one line naming its file and line; issue 51: no probe before the start, no copies).
"""

from __future__ import annotations

import dataclasses
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from command_batch import in_one_process

from experiments.run.run_config import format_run_config
from fedcgd_config.schema import PROJECT_DIR
from fedcgd_strategy.policies import (
    POLICY_NAMES,
    Decision,
    PolicyContext,
    RoundInputs,
    decision_from_mask,
    make_policy,
)
from fedcgd_strategy.policies.check import PolicyDecisionError, check_decision
from fedcgd_strategy.policies.core import BUDGET_REL_TOL

MHZ = 1e6


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


def test_the_budget_rule_passes_a_fitting_schedule_as_made_and_names_an_overrun_in_one_line():
    decision = decision_from_mask(INPUTS, mask(0, 1))  # 5 + 8 = 13 MHz of 20
    assert check(decision) is decision and decision.bandwidth_used_hz == 13 * MHZ
    check(decision_from_mask(INPUTS, mask(0, 1, 2)), uses_budget=False)  # 22 MHz, no budget
    with pytest.raises(PolicyDecisionError) as err:
        check(decision_from_mask(INPUTS, mask(0, 1, 2)))  # 5 + 8 + 9 = 22 MHz
    assert str(err.value) == (
        "policy 'mine', round 7: scheduled devices [0, 1, 2] need 22 MHz (the sum of their "
        "minimum bandwidths B*), more than the 20 MHz budget (tolerance 1e-09 relative); a "
        "decision must fit the bandwidth budget"
    )
    # the tolerance is one part in a billion
    b = 20 * MHZ
    at = round_of([b / 2, b / 2 * (1 + 2 * BUDGET_REL_TOL) - 1e-9, 1.0, 1.0])
    over = round_of([b / 2, b / 2 * (1 + 2 * BUDGET_REL_TOL) + 1e-6, 1.0, 1.0])
    check(decision_from_mask(at, mask(0, 1)), inputs=at)  # B (1 + 1e-9) minus a hair: fits
    with pytest.raises(PolicyDecisionError, match="more than the 20 MHz budget"):
        check(decision_from_mask(over, mask(0, 1)), inputs=over)


DEVICE_3_UNAVAILABLE = round_of([5 * MHZ, 8 * MHZ, 9 * MHZ, 1 * MHZ])
SHAPE = r"bool mask of shape \(4,\)"
#: (what schedule() returned, the round, uses_budget, what the refusal says)
REFUSALS = [
    (decision_from_mask(INPUTS, mask(0, 3)), INPUTS, True, r"round 7: .*\[3\] that cannot"),
    (decision_from_mask(INPUTS, mask(2, 3)), INPUTS, False, "cannot meet the deadline"),
    (Decision(mask(3), 1.0, 0.0, 0.5, 1e6), DEVICE_3_UNAVAILABLE, True, r"\[3\] that are not cand"),
    (mask(0), INPUTS, True, "returned ndarray, not a Decision"),
    (Decision(np.ones(3, dtype=bool), 1.0, 0.0, 0.5, 0.0), INPUTS, True, SHAPE),
    (Decision(np.array([1, 0, 0, 0]), 1.0, 0.0, 0.5, 0.0), INPUTS, True, SHAPE),
]  # fmt: skip


@pytest.mark.parametrize(("returned", "inputs", "uses_budget", "match"), REFUSALS)
def test_a_decision_that_breaks_a_rule_is_refused(returned, inputs, uses_budget, match):
    # a hand-made Decision (not decision_from_mask's) is held to the same rules
    with pytest.raises(PolicyDecisionError, match=match):
        check(returned, inputs=inputs, uses_budget=uses_budget)


def random_round(rng: np.random.Generator, v: int, c: int) -> RoundInputs:
    """A round like a cell's: some devices unavailable or infeasible, B* spread widely."""
    candidate = rng.random(v) < 0.7
    need = rng.lognormal(np.log(4 * MHZ), 1.0, size=v)
    need[rng.random(v) < 0.15] = np.inf
    counts = rng.integers(0, 5, size=(v, c)).astype(float)
    counts[:, 0] += 1
    dist = counts / counts.sum(axis=1, keepdims=True)
    return RoundInputs(
        candidate=candidate, label_dist=dist,
        num_examples=rng.integers(20, 200, size=v).astype(float), sigma_v=rng.random(v) + 0.1,
        min_bandwidth_hz=need, gain_lin=rng.random(v), total_bandwidth_hz=20 * MHZ, batch_size=8,
        target_dist=np.full(c, 1.0 / c), train_loss=rng.random(v), update_norm=rng.random(v),
        local_dist=dist,
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(POLICY_NAMES, key=lambda p: p == "fedcgd-exact"))
def test_every_built_in_policy_passes_the_check_on_random_rounds(name):
    # The check must not break honest runs: each built-in's decisions obey every rule.
    rng = np.random.default_rng(2024)
    v, c = (10, 3) if name == "fedcgd-exact" else (30, 5)
    policy = make_policy(name, PolicyContext(num_devices=v, num_classes=c))
    for r in range(15 if name == "fedcgd-exact" else 40):
        inputs = random_round(rng, v, c)
        decision = policy.schedule(inputs, rng)
        uses_budget = type(policy).uses_budget
        check_decision(decision, inputs, policy=name, server_round=r + 1, uses_budget=uses_budget)


#: Users' policies that break the physics, each in a file outside the project.
CHEATS = """
import numpy as np

from fedcgd_strategy import Policy, decision_from_mask


class Quiet(Policy):
    needs_reports = False


class EveryCandidate(Quiet):
    def schedule(self, inputs, rng):
        return decision_from_mask(inputs, inputs.candidate.copy())


class BareMask(Quiet):
    def schedule(self, inputs, rng):
        return inputs.candidate & np.isfinite(inputs.min_bandwidth_hz)


class ShortMask(Quiet):
    def schedule(self, inputs, rng):
        return decision_from_mask(inputs, np.ones(inputs.num_devices - 1, dtype=bool))


class ZeroesTheBandwidths(Quiet):  # would pass the budget rule on the round it changed
    def schedule(self, inputs, rng):
        inputs.min_bandwidth_hz[:] = 0.0
        return decision_from_mask(inputs, inputs.candidate.copy())


class FailsInRound3(Quiet):
    calls = 0

    def schedule(self, inputs, rng):
        type(self).calls += 1
        if type(self).calls == 3:
            raise RuntimeError("out of ideas")
        return decision_from_mask(inputs, np.zeros(inputs.num_devices, dtype=bool))


class GradientFails(Quiet):
    @property
    def class_gradient(self):
        raise ZeroDivisionError("no uploads")

    def schedule(self, inputs, rng):
        return decision_from_mask(inputs, np.zeros(inputs.num_devices, dtype=bool))
"""


@pytest.fixture(scope="module")
def cheats(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("user") / "cheats.py"
    path.write_text(textwrap.dedent(CHEATS))
    return path


#: The cheats run in one child process (tests/command_batch.py): name -> extra settings.
BATCHED = {
    "EveryCandidate": {},
    "BareMask": {},
    "ShortMask": {"num-devices": 4},
    "ZeroesTheBandwidths": {},
    "FailsInRound3": {"num-server-rounds": 5, "checkpoint-every": 1},  # resumable after round 2
    "GradientFails": {},
    "all": {"policy": "all", "num-server-rounds": 2},  # the built-in reference, no cheat
}


@pytest.fixture(scope="module")
def batched(cheats, tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """Each of BATCHED's runs: its folder and its outcome (exit code, stdout, stderr)."""
    folders = {name: tmp_path_factory.mktemp(name) / "run" for name in BATCHED}
    own = {name: {"num-server-rounds": 3, "result-dir": str(folders[name])} for name in BATCHED}
    configs = [own[n] | {"policy": f"{cheats}:{n}"} | v for n, v in BATCHED.items()]
    done = in_one_process([["inprocess", "--run-config", format_run_config(c)] for c in configs])
    return {name: (folders[name], d) for name, d in zip(BATCHED, done, strict=True)}


def test_a_policy_that_schedules_every_candidate_fails_in_round_1_in_one_line(cheats, batched):
    folder, done = batched["EveryCandidate"]
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 2 and "Traceback" not in done.stderr, err
    assert err[0].startswith(f"failed: policy '{cheats}:EveryCandidate', round 1: scheduled ")
    assert err[1].startswith(
        f"cannot be resumed: {folder} holds no checkpoint (it stopped before its "
        "first checkpoint); to start again in a new folder: "
    )
    assert "MHz budget" in err[0] or "cannot meet the deadline" in err[0]
    status = (folder / "status.json").read_text()
    assert '"state": "failed"' in status and "round 1: scheduled devices" in status
    assert not (folder / "metrics.jsonl").read_text()  # round 1 never happened


def test_the_all_reference_is_exempt_from_the_budget_only(batched):
    without = [p for p in POLICY_NAMES if not type(make_policy(p, PolicyContext(4, 2))).uses_budget]
    assert without == ["all"]
    folder, done = batched["all"]
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"policy_uses_budget": false' in (folder / "config.json").read_text()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("BareMask", "schedule() returned ndarray, not a Decision"),
        (
            "ShortMask",
            "schedule(): decision_from_mask got a mask of shape (3,); it must be a bool mask of "
            "shape (4,), one entry per device (cheats.py:",
        ),
        ("ZeroesTheBandwidths", "raised ValueError: assignment destination is read-only (cheats"),
    ],
)
def test_a_policy_that_returns_no_decision_or_writes_its_inputs_fails_round_1_in_one_line(
    cheats, batched, name, message
):
    # no probe before the start (issue 51): the mistake shows in round 1, with its file and line
    folder, done = batched[name]
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert err[0].startswith(f"failed: policy '{cheats}:{name}', round 1: ") and message in err[0]
    assert '"state": "failed"' in (folder / "status.json").read_text()


def test_the_readme_lists_every_round_inputs_field():
    text = (PROJECT_DIR / "docs" / "bring-your-own.md").read_text()
    section = text[text.index("What `schedule` gets, `RoundInputs`") :]
    section = section[: section.index("**The budget rule**")]
    listed = [line.split("|")[1].strip(" `") for line in section.splitlines() if line[:3] == "| `"]
    assert listed == [f.name for f in dataclasses.fields(RoundInputs)]


@pytest.mark.parametrize(
    ("name", "raised", "said"),
    [
        ("FailsInRound3", 'raise RuntimeError("out of ideas")',
         "round 3: schedule() raised RuntimeError: out of ideas (cheats.py:{} in schedule)"),
        ("GradientFails", 'raise ZeroDivisionError("no uploads")', "round 1: its class_gradient "
         "raised ZeroDivisionError: no uploads (cheats.py:{} in class_gradient)"),
    ],
)  # fmt: skip
def test_what_a_users_policy_raises_mid_run_fails_that_round_in_one_line(
    cheats, batched, name, raised, said
):
    _, done = batched[name]
    err = done.stderr.strip().splitlines()  # (FailsInRound3's rounds 1, 2 warn: none scheduled)
    assert done.returncode == 1 and "Traceback" not in done.stderr, err
    line = [x.strip() for x in CHEATS.splitlines()].index(raised) + 1
    assert err[-2] == f"failed: policy '{cheats}:{name}', " + said.format(line), err
    if name == "FailsInRound3":
        assert err[-1].startswith("to continue after round 2 of 5: "), err[-1]


def test_the_round_inputs_a_policy_gets_are_read_only():
    from fedcgd_strategy.policies import round_inputs

    inputs = round_inputs(
        available=np.ones(3, dtype=bool), min_bandwidth_hz=np.ones(3), gain_lin=np.ones(3),
        total_bandwidth_hz=10.0, batch_size=2, num_classes=2, target_dist=np.array([0.5, 0.5]),
    )  # fmt: skip
    for name in ("candidate", "label_dist", "num_examples", "sigma_v", "min_bandwidth_hz",
                 "gain_lin", "target_dist"):  # fmt: skip
        with pytest.raises(ValueError, match="read-only"):
            getattr(inputs, name)[0] = 0
