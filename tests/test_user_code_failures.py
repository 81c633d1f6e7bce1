"""User code that fails in any way: the run fails in one line naming the user's file and line.

An exit or ``KeyboardInterrupt`` of a policy, data set, model or import is a failure (only a
signal stops a run); a stuck policy is stopped by the stall alarm; a model that never moved
fails the run; no control characters reach the line (issues 42, 49, 50).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from command_batch import in_one_process
from test_aggregators import ADAPTIVE, dp

from experiments.run.run_config import format_run_config
from server_app.app import unchanged_reason

#: Users' policies that fail in round 1 (no probe before the start since issue 51).
POLICIES = """
import time

import numpy as np

from fedcgd_strategy import Policy, decision_from_mask

class Fails(Policy):
    needs_reports = False

    def schedule(self, inputs, rng):
        self.fail()
        return decision_from_mask(inputs, np.zeros(inputs.num_devices, dtype=bool))

class ExitsZero(Fails):
    def fail(self):
        raise SystemExit(0)

class Interrupts(Fails):
    def fail(self):
        raise KeyboardInterrupt

class Sleeps(Fails):
    def fail(self):
        time.sleep(30)

class Indexes(Fails):
    def fail(self):
        return [][0]

class Colours(Fails):
    def fail(self):
        raise RuntimeError("\\x1b[31mred\\x1b[0m bell\\x07 end")

class ObserveFails(Policy):
    needs_reports = False

    def schedule(self, inputs, rng):
        selected = np.zeros(inputs.num_devices, dtype=bool)
        selected[np.flatnonzero(inputs.candidate & np.isfinite(inputs.min_bandwidth_hz))[:1]] = True
        return decision_from_mask(inputs, selected)

    def observe_uploads(self, updates):
        raise ValueError("no updates wanted\\nsecond line")

"""

#: name -> (extra settings, the failure line's text after ``failed: policy '...', `` (an exit or
#: interrupt: after ``failed: ``, as ``run_status.as_failure`` words it) up to its end).
CASES = {
    "ExitsZero": ({}, "SystemExit: 0 (failing.py:{line} in fail) raised while no stop signal"),
    "Interrupts": ({}, "KeyboardInterrupt (failing.py:{line} in fail) raised while no stop"),
    "Indexes": ({"verbose": True}, "round 1: schedule() raised IndexError: list index out of "
                "range (failing.py:{line} in fail)"),
    "Colours": ({}, "round 1: schedule() raised RuntimeError: red bell? end (failing.py:{line}"),
    "ObserveFails": ({}, "round 1: observe_uploads() raised ValueError: no updates wanted"),
    "Sleeps": ({"stall-limit-s": 8},  # no watchdog per call (issue 51): the run's stall alarm
               "run stalled: no progress in 8 s (stall-limit-s): a policy, an aggregator or the "
               "server's own code did not return; raise stall-limit-s if it needs longer (stuck "
               "at failing.py:{line} in fail)"),
}  # fmt: skip
#: DP that clips every update to nothing: the fixed and the adaptive wrapper; with 40 devices
#: the clipped mean moves the last bits of some weights (about 1 ulp), no more.
FIXED = dp({"clipping-norm": 1e-300, "noise-multiplier": 0.3})
FLAT = {
    "fixed": FIXED,
    "adaptive": dp(
        {"noise-multiplier": 0.0, "clipping-norm": None, "initial-clipping-norm": 1e-300}, ADAPTIVE
    ),
    "fixed-last-bits": {**FIXED, "num-devices": 40},
}
TINY = {"num-devices": 4, "num-server-rounds": 2}


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict[str, tuple[Path, object]]:
    """Every case's run in one child process: name -> (its folder, its CompletedProcess)."""
    module = tmp_path_factory.mktemp("user") / "failing.py"
    module.write_text(textwrap.dedent(POLICIES))
    root = tmp_path_factory.mktemp("runs")
    runs = {name: {"policy": f"{module}:{name}", **extra} for name, (extra, _) in CASES.items()}
    runs |= {name: {"policy": "bc", **extra} for name, extra in FLAT.items()}
    argvs = [["inprocess", "--run-config", format_run_config({**TINY, **extra, "result-dir":
              str(root / name)})] for name, extra in runs.items()]  # fmt: skip
    done = in_one_process(argvs)
    return {name: (root / name, d) for name, d in zip(runs, done, strict=True)}


@pytest.mark.parametrize("name", list(CASES))
def test_what_a_policy_raises_or_a_stuck_one_fails_the_run_in_one_line(ran, name):
    folder, done = ran[name]
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    [line] = [x for x in err if x.startswith("failed: ")]  # one line
    lines = POLICIES.splitlines()  # the line of the class's raise (in its ``fail``)
    raised = lines.index(f"class {name}(Fails):") + 3 if name != "ObserveFails" else 0
    said = CASES[name][1].format(line=raised)
    if name == "Sleeps":
        assert line == f"failed: {said}", line
    elif name in ("ExitsZero", "Interrupts"):
        assert line.startswith(f"failed: {said}"), line
    else:
        assert line.startswith("failed: policy '"), line
        assert line.split("', ", 1)[1].startswith(said), line
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "failed" and status["last_round"] == 0, status
    assert status["reason"] == line.removeprefix("failed: ")


@pytest.mark.parametrize("name", list(FLAT))
def test_a_run_whose_model_never_changed_fails(ran, name):
    folder, done = ran[name]
    assert done.returncode == 1, done.stderr[-2000:]
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "failed" and status["last_round"] == 2, status
    assert status["reason"].startswith(
        "the global model did not move over the 2 rounds with uploads: it changed by less than "
        "float32 resolution"
    )
    assert f"failed: {status['reason']}" in done.stderr
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    assert all(line["num_uploaded"] > 0 and not line["model_kept"] for line in lines)


def test_a_model_moved_by_rounding_alone_is_unchanged_and_a_real_step_is_not():
    eps = torch.finfo(torch.float32).eps  # float32's ulp at 1.0
    start = {"w": torch.full((100,), 1.5), "b": torch.ones(1), "n": torch.tensor(3)}
    ulp = {"w": start["w"] + eps, "b": torch.ones(1), "n": torch.tensor(4)}  # 1 ulp every weight
    assert not torch.equal(ulp["w"], start["w"])
    assert unchanged_reason(0, start, dict(start)) is None  # no round with uploads here
    assert unchanged_reason(1, start, {k: v.clone() for k, v in start.items()})
    assert unchanged_reason(1, start, ulp)  # not bit for bit, still nothing learnt
    # Moved by m ulps each: ||final - start|| = 10 m eps; the bound 4 R eps ||start|| with
    # ||start|| = sqrt(100 * 1.5**2 + 1) = 15.03: 60.1 R eps. 12 ulps: 120 eps.
    twelve = {**start, "w": start["w"] + 12 * eps}
    assert unchanged_reason(3, start, twelve) and unchanged_reason(1, start, twelve) is None
    step = {**start, "w": start["w"] - 1e-3}  # a small learning step
    assert unchanged_reason(1000, start, step) is None
    # Only the floating-point tensors count: "n" (an integer buffer) moved in every case above.
    assert unchanged_reason(1, start, {**start, "n": torch.tensor(9)})


#: The researcher's functions and policy methods that end the process instead of returning.
EXITS = """
import sys

import numpy as np

from fedcgd_strategy import Policy, decision_from_mask

def data_exits():
    sys.exit(0)

def data_interrupts():
    raise KeyboardInterrupt

def data_colours():
    raise RuntimeError("\\x1b[1mbold\\x1b[0m bell\\x07 end")

def model_exits(num_classes, input_shape):
    sys.exit(0)

class Idle(Policy):  # the device that needs the least bandwidth, when it fits
    needs_reports = False

    def schedule(self, inputs, rng):
        need = np.where(inputs.candidate, inputs.min_bandwidth_hz, np.inf)
        fits = need.min() <= inputs.total_bandwidth_hz
        return decision_from_mask(inputs, (need == need.min()) & fits)

class ExitsInStateDict(Idle):
    def state_dict(self):
        sys.exit(0)

class ExitsOnLoad(Idle):
    def load_state_dict(self, state):
        sys.exit(0)
"""


@pytest.fixture(scope="module")
def exited(tmp_path_factory) -> tuple[Path, list]:
    """The runs' root and each command line's outcome (see the test)."""
    user = tmp_path_factory.mktemp("exits")
    (user / "exits.py").write_text(textwrap.dedent(EXITS))
    (user / "exits_at_import.py").write_text("import sys\n\nsys.exit(0)\n")
    root = tmp_path_factory.mktemp("runs")
    runs = [
        ("inprocess", {"dataset": "exits:data_exits", "result-dir": str(root / "a")}),
        ("run", {"dataset": "exits:data_exits", "result-dir": str(root / "b")}),
        ("inprocess", {"dataset": "exits:data_interrupts", "result-dir": str(root / "c")}),
        ("inprocess", {"model": "exits:model_exits", "result-dir": str(root / "d")}),
        ("run", {"policy": "exits_at_import:Any", "result-dir": str(root / "e")}),
        ("inprocess", {"policy": "exits:ExitsInStateDict", "result-dir": str(root / "f")}),
        ("inprocess", {"policy": "exits:ExitsOnLoad", "result-dir": str(root / "g")}),
        ("inprocess", {"policy": "exits:ExitsOnLoad", "resume-from": str(root / "g")}),
        ("inprocess", {"dataset": "exits:data_colours", "result-dir": str(root / "h")}),
    ]
    argvs = [
        [command, "--run-config", format_run_config({**TINY, "checkpoint-every": 1, **extra})]
        for command, extra in runs
    ]
    argvs[6][-1] = argvs[6][-1].replace("num-server-rounds=2", "num-server-rounds=1")
    return root, in_one_process(argvs, pythonpath=[user])


def test_an_exit_or_interrupt_of_the_researchers_code_fails_the_run_naming_its_line(exited):
    root, done = exited
    lines = textwrap.dedent(EXITS).splitlines()

    def at(statement: str, after: str) -> str:
        """``(exits.py:N in fn)``: the line of ``statement`` after the line ``after``."""
        start, function = lines.index(after), after.split()[1].partition("(")[0]
        return f"(exits.py:{lines.index(statement, start) + 1} in {function})"

    what = [
        f"SystemExit: 0 {at('    sys.exit(0)', 'def data_exits():')}",
        f"SystemExit: 0 {at('    sys.exit(0)', 'def data_exits():')}",
        f"KeyboardInterrupt {at('    raise KeyboardInterrupt', 'def data_interrupts():')}",
        f"SystemExit: 0 {at('    sys.exit(0)', 'def model_exits(num_classes, input_shape):')}",
        "SystemExit: 0 (exits_at_import.py:3 in <module>)",
        f"SystemExit: 0 {at('        sys.exit(0)', '    def state_dict(self):')}",
        None,  # ExitsOnLoad's first run: 1 round, completed
        f"SystemExit: 0 {at('        sys.exit(0)', '    def load_state_dict(self, state):')}",
    ]
    assert done[6].returncode == 0, done[6].stderr[-2000:]
    for outcome, said in zip(done[:-1], what, strict=True):
        if said is None:
            continue
        assert outcome.returncode == 1 and "Traceback" not in outcome.stderr, outcome.stderr[-2000:]
        failed = [x for x in outcome.stderr.splitlines() if x.startswith("failed: ")]
        assert len(failed) == 1 and said in failed[0], (said, outcome.stderr[-2000:])
    for name in "abcde":  # stopped before the start: no folder left behind
        assert not (root / name).exists()
    status = json.loads((root / "f" / "status.json").read_text())  # at round 1's checkpoint
    assert (status["state"], status["last_round"]) == ("failed", 1) and what[5] in status["reason"]
    status = json.loads((root / "g" / "status.json").read_text())  # a resume that failed to
    assert (status["state"], status["last_round"]) == ("completed", 1)  # build writes nothing
    # a data set's error line carries no escape codes and names its line
    line = lines.index("def data_colours():") + 2
    assert done[-1].returncode == 2 and "\x1b" not in done[-1].stderr, done[-1].stderr[-2000:]
    said = f"the function raised RuntimeError: bold bell? end (exits.py:{line} in data_colours)"
    assert done[-1].stderr.strip().endswith(said), done[-1].stderr[-2000:]
