"""A researcher's own policy: named in the run config by import path, with its own parameters."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from command_batch import in_one_process
from hydra import compose, initialize_config_dir
from run_results import lines, same_model
from test_decision_check import round_of

from experiments.cli import invoke
from experiments.compare.reproduce import CONF_DIR, hydra_overrides, planned_runs
from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import validated_run_config, with_resolved_data_dir
from fedcgd_strategy import RoundInputs
from fedcgd_strategy.policies import PolicyContext, make_policy, resolve_protocol
from server_app.config import fold_policy_params, parse_run_config, read_params

PROJECT = Path(__file__).resolve().parents[1]
PF = "examples.proportional_fair:ProportionalFair"

#: A policy as a researcher writes it, in a folder outside the project: up to k devices at
#: random among the candidates that fit the budget, a required parameter and an optional one.
RANDOM_K = """
from dataclasses import dataclass

import numpy as np

from fedcgd_strategy import Policy, decision_from_mask


@dataclass
class RandomK(Policy):
    k: int
    shuffle: bool = True
    needs_reports = False

    def schedule(self, inputs, rng):
        pool = np.flatnonzero(inputs.candidate & np.isfinite(inputs.min_bandwidth_hz))
        order = rng.permutation(pool) if self.shuffle else pool
        mask = np.zeros(inputs.num_devices, dtype=bool)
        used = 0.0
        for v in order:  # at most k, in random order, while they fit the budget
            need = inputs.min_bandwidth_hz[v]
            if mask.sum() < self.k and used + need <= inputs.total_bandwidth_hz:
                mask[v], used = True, used + need
        return decision_from_mask(inputs, mask)


class NotAPolicy:
    pass


class Unfinished(Policy):
    pass
"""


@pytest.fixture
def user_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("researcher")
    (folder / "my_policies.py").write_text(textwrap.dedent(RANDOM_K))
    return folder


def inputs(bandwidth_hz: list[float], budget_hz: float) -> RoundInputs:
    return round_of(bandwidth_hz, candidate=[True] * len(bandwidth_hz), total=budget_hz)


def test_proportional_fair_by_hand_and_shared_settings_by_name():
    # B* = 1, 2, 4 Hz, B = 5 Hz, window 2. Round 1: nobody served yet, so every priority is
    # infinite and the higher rate (1/B*) goes first: 0 (1 Hz), 1 (3 Hz), 2 does not fit (7).
    # Averages: (0 + (rate - 0) / 2) = [0.5, 0.25, 0]. Round 2: priorities 1/0.5 = 2, 0.5/0.25
    # = 2, inf -> device 2 first (4 Hz), then 0 (5 Hz), then 1 does not fit.
    policy = make_policy(PF, PolicyContext(num_devices=3, num_classes=2), {"window": 2})
    rng = np.random.default_rng(0)
    first = policy.schedule(inputs([1.0, 2.0, 4.0], 5.0), rng)
    assert first.selected.tolist() == [True, True, False]
    assert policy.state_dict() == {"average": [0.5, 0.25, 0.0]}
    second = policy.schedule(inputs([1.0, 2.0, 4.0], 5.0), rng)
    assert second.selected.tolist() == [True, False, True]
    assert policy.state_dict() == {"average": [0.75, 0.125, 0.125]}
    restored = make_policy(PF, PolicyContext(num_devices=3, num_classes=2), {"window": 2})
    restored.load_state_dict(json.loads(json.dumps(policy.state_dict())))
    assert restored.average == policy.average
    assert policy.name == PF and resolve_protocol(type(policy)) == "channel"
    # shared settings reach the constructor by name: "skip" passes over 2 (4 Hz) with B = 4 Hz
    skip = make_policy(PF, PolicyContext(num_devices=3, num_classes=2, pack_rule="skip"))
    assert skip.schedule(inputs([1.0, 2.0, 4.0], 4.0), rng).selected.tolist() == [True, True, False]
    assert skip.pack_rule == "skip" and skip.window == 20.0


def user_run(result_dir: Path | None, policy: str, **extra: object) -> dict:
    overrides = {"num-devices": 6, "num-server-rounds": 3, "channel.availability-prob": 0.8}
    if result_dir is not None:
        overrides["result-dir"] = str(result_dir)
    return with_resolved_data_dir(validated_run_config({**overrides, "policy": policy, **extra}))


def scheduled(result_dir: Path) -> list[list[int]]:
    return [line["scheduled"] for line in lines(result_dir)]


def test_a_policy_outside_the_project_runs_in_process_and_in_compare(user_folder, tmp_path):
    reference = f"{user_folder / 'my_policies.py'}:RandomK"
    run_inprocess(user_run(tmp_path / "a", reference, **{"policy-params.k": 2}))
    run_inprocess(user_run(tmp_path / "b", reference, **{"policy-params.k": 2}))
    rounds = scheduled(tmp_path / "a")
    assert len(rounds) == 3 and all(len(r) <= 2 for r in rounds) and any(rounds)
    assert rounds == scheduled(tmp_path / "b")  # the policy's stream comes from the run seed
    recorded = json.loads((tmp_path / "a" / "config.json").read_text())
    assert recorded["policy"] == reference and recorded["policy_params"] == {"k": 2}
    assert recorded["protocol"] == "channel"
    # compare takes it beside a built-in and gives it its parameters
    out = tmp_path / "compare"
    args = ["compare", "--engine", "inprocess", "--policies", f"all,{reference}", "--out", str(out)]
    settings = "num-devices=4 num-server-rounds=2 policy-params.k=1"
    assert invoke([*args, "--run-config", settings]) == 0
    assert [len(r) for r in scheduled(out / "RandomK" / "seed-0")] == [1, 1]
    assert json.loads((out / "all" / "seed-0" / "config.json").read_text())["policy_params"] == {}
    rows = list(csv.DictReader((out / "table.csv").open()))
    assert {r["policy"] for r in rows} == {"all", "RandomK"}  # its class name, as its folder
    args = ["compare", "--engine", "inprocess", "--policies", "all,bc"]
    args += ["--out", str(tmp_path / "x")]
    assert invoke([*args, "--run-config", "policy-params.k=1"]) == 2  # no policy takes k


BAD_SETTINGS = [
    ("policy='no_such_module:X'", "no module named 'no_such_module'"),
    ("policy='my_policies:Missing'", "has no attribute 'Missing'"),
    ("policy='my_policies:NotAPolicy'", "allowed: a subclass of fedcgd_strategy.Policy"),
    ("policy='my_policies:Unfinished'", "Unfinished does not implement schedule"),
    ("policy='my_policies:RandomK'", "needs a value for 'k': set run-config key policy-par"),
    ("policy='my_policies:RandomK' policy-params.k=1.5", "policy-params.k = 1.5 for policy"),
    ("policy='my_policies:RandomK' policy-params.k=1 policy-params.kk=2", "parameter 'kk'"),
    ("policy='bc' policy-params.window=3", "policy 'bc' takes no parameter 'window'"),
    ("policy='fedcgd-gs' policy-params.method='cd'", "fixes method = 'gs'"),
    ("policy='bc' policy-params.pack-rule='skip'", "comes from run-config key 'pack-rule'"),
    ("policy='bc' policy-params='{window'", "is not a TOML inline table"),
    ("policy='fedcgd'", "allowed: fedcgd-fscd, fedcgd-gs, fedcgd-fscd-gc,"),
    (  # a file whose own import fails: Python's error and the file's line, no PYTHONPATH advice
        "policy='{folder}/bad_import.py:P'",
        "policy' = '{folder}/bad_import.py:P': importing {folder}/bad_import.py raised "
        "ModuleNotFoundError: No module named 'nosuchthing_abc' (bad_import.py:1 in <module>)",
    ),
]


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object, Path]]:
    """Each bad setting's command line, run in one child process (tests/command_batch.py)."""
    folder = tmp_path_factory.mktemp("researcher")
    (folder / "my_policies.py").write_text(textwrap.dedent(RANDOM_K))
    (folder / "bad_import.py").write_text("import nosuchthing_abc\n")
    outs = [tmp_path_factory.mktemp("never") / "out" for _ in BAD_SETTINGS]
    argvs = [
        ["inprocess", "--run-config", f"{s.replace('{folder}', str(folder))} result-dir='{out}'"]
        for (s, _), out in zip(BAD_SETTINGS, outs, strict=True)
    ]
    done = in_one_process(argvs, pythonpath=[folder])
    return {
        settings: (out, result, folder)
        for (settings, _), out, result in zip(BAD_SETTINGS, outs, done, strict=True)
    }


@pytest.mark.parametrize(("settings", "message"), BAD_SETTINGS)
def test_a_bad_policy_setting_fails_before_start_in_one_line(refused, settings, message):
    out, done, folder = refused[settings]
    err = done.stderr.strip().splitlines()
    message = message.replace("{folder}", str(folder))
    assert done.returncode == 2 and len(err) == 1 and message in err[0], done.stderr
    assert not out.exists()


def test_the_proportional_fair_example_checkpoints_and_resumes(tmp_path):
    extra = {"channel.total-bandwidth-hz": 4e6, "policy-params.window": 3, "checkpoint-every": 1}
    whole = tmp_path / "whole"
    run_inprocess(user_run(whole, PF, **{**extra, "num-server-rounds": 5}))
    part = tmp_path / "part"
    run_inprocess(user_run(part, PF, **{**extra, "num-server-rounds": 2}))
    checkpoint = torch.load(part / "checkpoint.pt", weights_only=False)
    assert len(checkpoint["policy_state"]["average"]) == 6  # the averages are in the checkpoint
    run_inprocess(user_run(None, PF, **{**extra, "num-server-rounds": 5, "resume-from": str(part)}))
    assert scheduled(part) == scheduled(whole) and len(scheduled(whole)) == 5
    assert len({len(r) for r in scheduled(whole)}) > 1 or any(scheduled(whole))
    assert same_model(part, whole)


def test_a_hydra_preset_takes_a_reference_and_policy_params_which_travel_as_one_key():
    words = [f"policies=[fedcgd-fscd,'{PF}']", "run.policy-params.window=4"]
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("config", overrides=["experiment=digits_policies", *hydra_overrides(words)])
    assert list(cfg.policies) == ["fedcgd-fscd", PF]
    (_, overrides), *_ = planned_runs(cfg)
    assert read_params(overrides) == {"window": 4}
    config = parse_run_config(validated_run_config({**overrides, "policy": PF}))
    assert config.policy_params == {"window": 4} and config.protocol == "channel"
    # policy-params travel as one declared key: flat, or an inline table, never both
    flat = {"policy": PF, "policy-params.window": 5, "policy-params.note": 'a "b"'}
    folded = fold_policy_params(flat)
    assert set(folded) == {"policy", "policy-params"}
    assert read_params(folded) == {"window": 5, "note": 'a "b"'}
    inline = {"policy-params": "{window = 2.5, on = true}"}
    assert read_params(inline) == {"window": 2.5, "on": True}
    with pytest.raises(ValueError, match="also set in 'policy-params'"):
        read_params({"policy-params": "{window = 2}", "policy-params.window": 3})
