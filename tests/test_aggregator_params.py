"""Aggregator parameters are refused in one line naming ``aggregator-params.<key>`` and the
value; a run whose aggregation fails ends ``failed``; ``config.json`` holds what was built."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Context, RecordDict
from flwr.serverapp import strategy as flower_strategies
from test_aggregators import ADAPTIVE, FIXED, V, refused

from experiments.cli import invoke
from experiments.run.run_config import format_run_config
from fedcgd_config.settings import default_run_config
from server_app.app import aggregation_failure_reason, main
from server_app.config import fold_policy_params, parse_run_config
from server_app.run_folder.run_status import read_status
from server_app.setup import build_setup

NAN, INF = float("nan"), float("inf")


def settings(tmp_path: Path, aggregator: str, params: dict[str, Any]) -> dict[str, Any]:
    flat = {f"aggregator-params.{k}": v for k, v in params.items()}
    config = {**default_run_config(), "num-devices": V, "result-dir": str(tmp_path)}
    return fold_policy_params({**config, "aggregator": aggregator, **flat})


class Scaled(flower_strategies.FedAvg):
    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale


# (aggregator, other parameters, the setting, refused values, what Flower's constructor says or
# ours): each refused in one line naming the table and the value
DP_FIXED = {"noise-multiplier": 0.5, "clipping-norm": 1.0}
DP_ADAPTIVE = {"noise-multiplier": 0.0}
REFUSED_VALUES = [
    ("FedTrimmedAvg", {}, "beta", [0.5], "`beta` must be in the range [0, 0.5)"),  # Flower's
    (ADAPTIVE, DP_ADAPTIVE, "target-clipped-quantile", [1.5], "quantile must be in [0, 1]"),
    (FIXED, DP_FIXED, "noise-multiplier", [-1.0], "noise multiplier should be a non-negative"),
    ("FedAdam", {}, "tau", [INF, NAN], "NaN and inf are no setting"),
    (f"{__name__}:Scaled", {}, "scale", [INF], "NaN and inf are no setting"),
    # wrong types
    ("FedAdam", {}, "eta", ["0.1"], "allowed: a float"),
    ("Krum", {}, "num-malicious-nodes", [True, 1.0], "allowed: an int"),
]  # fmt: skip
REFUSED = [(a, {**other, key: v}, key, v, said)
           for a, other, key, values, said in REFUSED_VALUES for v in values]  # fmt: skip


@pytest.mark.parametrize(
    ("aggregator", "params", "key", "value", "said"),
    REFUSED,
    ids=[f"{c[0][:20]}-{c[2]}={c[3]!r}" for c in REFUSED],
)
def test_a_bad_parameter_is_refused_in_one_line_naming_it(
    tmp_path, aggregator, params, key, value, said
):
    text = refused(
        tmp_path, aggregator=aggregator, **{f"aggregator-params.{k}": v for k, v in params.items()}
    )
    assert f"{key} = {value!r}" in text or f"'{key}': {value!r}" in text, text
    assert said in text, text


def test_a_bare_flwr_runs_server_app_refuses_a_bad_parameter_before_anything_starts(tmp_path):
    config = settings(tmp_path / "run", "FedTrimmedAvg", {"beta": 0.5})
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config)
    with pytest.raises(ValueError, match=r"beta.*must be in the range \[0, 0\.5\)"):
        main(None, context)  # no grid is ever asked: the refusal comes first
    assert not (tmp_path / "run").exists()


SKIPPER = """\
from dataclasses import dataclass

from fedcgd_strategy import Policy


@dataclass
class Skipper(Policy):
    pack_rule: str = "skip"
    per_round: int = 1
    label: str = "x"

    def schedule(self, inputs, rng):  # never called: only built here
        raise AssertionError
"""


#: A FedAvg that raises every round: what a diverging or broken strategy does.
DIVERGES = """\
from flwr.serverapp.strategy import FedAvg


class Diverges(FedAvg):
    def aggregate_train(self, server_round, replies):
        raise FloatingPointError("diverged")
"""


def test_a_run_whose_aggregation_fails_every_round_ends_failed_exit_1(capsys, tmp_path):
    (tmp_path / "diverges.py").write_text(DIVERGES)
    folder = tmp_path / "run"
    values = {
        "num-devices": V, "num-server-rounds": 2, "policy": "all", "channel.availability-prob": 1.0,
        "channel.deadline-s": 10.0, "local-steps": 1, "result-dir": str(folder),
        "aggregator": f"{tmp_path / 'diverges.py'}:Diverges",
    }  # fmt: skip
    code = invoke(["inprocess", "--run-config", format_run_config(values)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    failed = [line for line in err if line.startswith("failed: ")]
    assert len(failed) == 1, err
    assert failed[0].startswith("failed: aggregation failed in 2 of the 2 rounds with uploads"), err
    assert "Diverges.aggregate_train raised FloatingPointError: diverged" in failed[0]
    status = read_status(folder)
    assert status is not None and status.state == "failed"
    assert status.reason is not None and status.reason.startswith("aggregation failed in 2 of")


def line(rnd: int, uploaded: int, kept: bool, reason: str | None = None) -> dict[str, Any]:
    return {
        "round": rnd,
        "num_uploaded": uploaded,
        "model_kept": kept,
        "model_kept_reason": reason if kept else None,
    }


@pytest.mark.parametrize(
    ("lines", "failed"),
    [
        # 3 of 4 rounds with uploads kept the model: more than half
        ([line(1, 5, True, "A raised"), line(2, 5, True, "A raised"), line(3, 5, False),
          line(4, 5, True, "A raised")], (3, 4)),
        # exactly half is not more than half
        ([line(1, 5, True, "A raised"), line(2, 5, False), line(3, 5, True, "A raised"),
          line(4, 5, False)], None),
        # rounds without uploads do not count (the no-upload check is another one)
        ([line(1, 0, True, "nothing uploaded"), line(2, 0, True, "nothing uploaded"),
          line(3, 4, True, "too few uploads for Krum: 4 < 5"), line(4, 5, False)], None),
        ([line(1, 0, True, "nothing uploaded"), line(2, 3, True, "too few uploads"),
          line(3, 4, True, "too few uploads")], (2, 2)),
        ([line(1, 5, False)], None),
        ([], None),
    ],
)  # fmt: skip
def test_the_share_of_failed_aggregations_that_fails_a_run(lines, failed):
    reason = aggregation_failure_reason(lines)
    if failed is None:
        assert reason is None
    else:
        assert reason is not None
        assert reason.startswith(f"aggregation failed in {failed[0]} of the {failed[1]} rounds")
        first = next(x for x in lines if x["num_uploaded"] and x["model_kept"])
        assert f"round {first['round']}: {first['model_kept_reason']}" in reason


def recorded_config(tmp_path: Path, aggregator: str, params: dict[str, Any]) -> dict[str, Any]:
    recorded: dict[str, Any] = {}
    config = parse_run_config(settings(tmp_path, aggregator, params))
    build_setup(config, on_settings=recorded.update)
    return json.loads(json.dumps(recorded))  # as config.json holds it


FLWR = "flwr.serverapp.strategy"
GIVEN, DEFAULT = "run-config key 'aggregator-params'", "the class default"


def test_config_json_holds_the_resolved_parameters_and_where_each_came_from(tmp_path, caplog):
    """Every aggregator parameter as built (Flower 1.42's defaults, as the docs show), where each
    came from, a DP wrapper's strategy nested; every policy argument too, and a run-level setting
    that replaces a policy's own default is said, once (a built-in policy's: never)."""
    assert recorded_config(tmp_path / "a", "", {})["aggregator_resolved"] is None
    assert recorded_config(tmp_path / "b", "FedAdam", {"eta": 0.05})["aggregator_resolved"] == {
        "class": f"{FLWR}.fedadam:FedAdam",
        "params": {"eta": 0.05, "eta-l": 0.1, "beta-1": 0.9, "beta-2": 0.99, "tau": 0.001},
        "from": {"eta": GIVEN} | dict.fromkeys(["eta-l", "beta-1", "beta-2", "tau"], DEFAULT),
    }
    params = {"noise-multiplier": 0.3, "clip-norm-lr": 0.1, "strategy": "FedAvgM",
              "strategy-params": {"server-momentum": 0.9}}  # fmt: skip
    dp = recorded_config(tmp_path / "c", ADAPTIVE, params)["aggregator_resolved"]
    assert dp["class"] == f"fedcgd_strategy.flower.aggregators:{ADAPTIVE}"  # our steps
    # Flower derives it from num_sampled_clients = V: V / 20 (Andrew et al.'s advice)
    assert dp["params"]["clipped-count-stddev"] == V / 20
    assert dp["from"]["clipped-count-stddev"] == "Flower's default for num-devices (V / 20)"
    assert (
        dp["from"]["noise-multiplier"] == GIVEN and dp["from"]["target-clipped-quantile"] == DEFAULT
    )
    assert dp["strategy"] == {
        "class": f"{FLWR}.fedavgm:FedAvgM",
        "params": {"server-momentum": 0.9, "server-learning-rate": 1.0},
        "from": {"server-momentum": GIVEN.replace("params'", "params.strategy-params'"),
                 "server-learning-rate": DEFAULT},
    }  # fmt: skip
    fixed = recorded_config(tmp_path / "d", FIXED, DP_FIXED)["aggregator_resolved"]
    assert fixed["strategy"]["class"] == f"{FLWR}.fedavg:FedAvg"
    module = tmp_path / "skipper.py"
    module.write_text(SKIPPER)
    run_config = {
        **default_run_config(), "result-dir": str(tmp_path / "run"), "policy": f"{module}:Skipper",
        "policy-params.per-round": 3,
    }  # fmt: skip
    recorded: dict[str, Any] = {}
    with caplog.at_level("WARNING"):
        build_setup(parse_run_config(fold_policy_params(run_config)), on_settings=recorded.update)
    assert json.loads(json.dumps(recorded))["policy_resolved"] == {
        "pack_rule": {"value": "stop", "from": "run-config key 'pack-rule'"},
        "per_round": {"value": 3, "from": "run-config key 'policy-params'"},
        "label": {"value": "x", "from": "the class default"},
    }
    said = [r.getMessage() for r in caplog.records if "is replaced by" in r.getMessage()]
    assert said == [
        f"policy '{module}:Skipper': its default pack_rule = 'skip' is replaced by run-config "
        "key 'pack-rule' = 'stop'"
    ]
    # Fed-CBS's num_devices = 1 and BC's pack_rule = 'stop' are no user's: no line for them
    for policy in ("fedcbs", "bc"):
        caplog.clear()
        built_in = {**default_run_config(), "result-dir": str(tmp_path / policy), "policy": policy}
        with caplog.at_level("WARNING"):
            build_setup(parse_run_config(built_in | {"pack-rule": "skip"}), on_settings=dict)
        assert [r for r in caplog.records if "is replaced by" in r.getMessage()] == []
    fixed = recorded_config(tmp_path / "gs", "", {})  # a built-in: what its name fixes
    assert fixed["policy_resolved"]["method"] == {
        "value": "fscd",
        "from": "the policy name 'fedcgd-fscd'",
    }
