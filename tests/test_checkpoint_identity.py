"""A checkpoint belongs to its run: another run's is refused, a damaged one too, before any write.

Each case is a hostile resume (another run's checkpoint, an edited aggregator state, a model or
state that does not fit): refused in one line, the folder's files left byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.serverapp.strategy import FedAvg
from task_settings import checkpointed_run_config
from test_aggregators import synthetic_uploads, task_identity  # noqa: F401  (a fixture)

from experiments.cli import invoke
from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import format_run_config
from fedcgd_config.settings import default_run_config
from fedcgd_strategy.flower.aggregators import (
    aggregate_uploads,
    aggregator_state,
    load_aggregator_state,
    make_aggregator,
)
from server_app.checkpoint import (
    CHECKPOINT_FILE,
    CheckpointRefusedError,
    check_identity,
    checkpoint_round,
    load_checkpoint,
    run_identity,
)
from server_app.config import parse_run_config
from server_app.run_folder.results import METRICS_FILE, RUN_FILES

DEVICES, ROUNDS = 6, 2
FIXED_DP = "DifferentialPrivacyServerSideFixedClipping"
ADAPTIVE_DP = "DifferentialPrivacyServerSideAdaptiveClipping"
#: The adaptive wrapper's noise on the clipped count (its default n / 20 is too small for 3
#: uploads at these noise multipliers: Flower refuses it).
COUNT_NOISE = {"clipped-count-stddev": 5.0}


def overrides(**changes: Any) -> dict[str, Any]:
    """The run config's overrides of a small run (6 devices, 2 rounds), ``changes`` applied."""
    return {"num-devices": DEVICES, "num-server-rounds": ROUNDS, **changes}


def run(folder: Path, **changes: Any) -> Path:
    run_inprocess(checkpointed_run_config(folder, **overrides(**changes)))
    return folder


def files(folder: Path) -> dict[str, bytes]:
    """The run's files, byte for byte."""
    return {name: (folder / name).read_bytes() for name in RUN_FILES if (folder / name).exists()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Completed 2-round runs: fedcgd-fscd (seeds 0 and 1; seed 0 with η = 0.05), bc, fedcbs."""
    root = tmp_path_factory.mktemp("runs")
    return {
        "seed0": run(root / "seed0", seed=0),
        "seed1": run(root / "seed1", seed=1),
        "bc": run(root / "bc", seed=0, policy="bc"),
        "lr": run(root / "lr", seed=0, **{"learning-rate": 0.05}),
        "fedcbs": run(root / "fedcbs", seed=0, policy="fedcbs"),
    }


def copy_run(runs: dict[str, Path], name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(runs[name], folder)
    return folder


@pytest.mark.parametrize(
    ("name", "changes", "said"),
    [
        ("seed1", {"seed": 1}, "seed = 0 there, 1 now"),
        ("bc", {"policy": "bc"}, "policy = 'fedcgd-fscd' there, 'bc' now"),
        ("lr", {"learning-rate": 0.05},
         "learning-rate = 0.1 there, 0.05 now"),
    ],
)  # fmt: skip
def test_another_runs_checkpoint_is_refused_in_one_line_naming_what_differs(
    capsys, runs, tmp_path, name, changes, said
):
    folder = copy_run(runs, name, tmp_path)
    shutil.copy(runs["seed0"] / CHECKPOINT_FILE, folder / CHECKPOINT_FILE)  # seed 0, fscd, 0.1
    before = files(folder)
    settings = overrides(**{"num-server-rounds": ROUNDS + 1, "seed": 0, **changes})
    settings |= {"checkpoint-every": 1, "resume-from": str(folder)}  # one round further
    code = invoke(["inprocess", "--run-config", format_run_config(settings)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: run-config key 'resume-from'") and said in err[0], err[0]
    assert files(folder) == before


def test_an_honest_resume_works_on_another_device_and_without_a_recorded_one(runs, tmp_path):
    """``device`` says where a run computes, not what: a resume may change it, and a folder
    written before the setting existed (no ``task.device`` in ``config.json``) resumes."""
    folder = copy_run(runs, "seed1", tmp_path)
    recorded = json.loads((folder / "config.json").read_text())
    del recorded["task"]["device"]
    (folder / "config.json").write_text(json.dumps(recorded))
    config = overrides(seed=1, device="cpu", **{"num-server-rounds": 3, "resume-from": str(folder)})
    run_inprocess(checkpointed_run_config(folder, **config))
    lines = (folder / METRICS_FILE).read_text().splitlines()
    assert [json.loads(x)["round"] for x in lines] == [1, 2, 3]
    # round 3 aggregates nothing (no device feasible): the run completes with the
    # checkpoint's model (Flower's Result then holds no arrays; the saved model is not empty)
    assert json.loads(lines[-1])["num_uploaded"] == 0
    assert json.loads((folder / "status.json").read_text())["state"] == "completed"
    saved = torch.load(folder / "model.pt", weights_only=True)
    assert set(saved) == set(torch.load(folder / CHECKPOINT_FILE, weights_only=False)["model"])


def _short_model(data: dict[str, Any]) -> None:
    key = next(k for k, v in data["model"].items() if v.ndim == 2)
    data["model"][key] = data["model"][key][:-1].clone()  # one output row fewer


def _nan_model(data: dict[str, Any]) -> None:
    key = next(iter(data["model"]))
    data["model"][key] = torch.full_like(data["model"][key], math.nan)


def _settings_of(text: str) -> Callable[[dict[str, Any]], None]:
    """A damage: the identity's settings replaced by ``text`` with its matching digest."""

    def change(data: dict[str, Any]) -> None:
        digest = hashlib.sha256(text.encode()).hexdigest()
        data["identity"] |= {"settings": text, "settings_sha256": digest}

    return change


DAMAGE = {  # the run whose checkpoint is damaged, the damage, what the refusal says
    "model-shape": ("seed0", _short_model, "does not fit the run's model: "),
    "model-keys": ("seed0", lambda d: d["model"].pop(next(iter(d["model"]))),
                   "does not fit the run's model: other arrays (missing "),
    "model-dtype": ("seed0",
                    lambda d: d.update(model={k: x.double() for k, x in d["model"].items()}),
                    "has dtype torch.float64, the model's torch.float32"),
    "policy-state": ("seed0", lambda d: d.update(policy_state={"class-gradient": []}),
                     "its policy state does not fit the run"),
    "class-gradient-nan": ("seed0", lambda d: d.update(policy_state={"class-gradient": [math.nan]}),
                           "class-gradient must be finite"),
    "model-nan": ("seed0", _nan_model, "is not finite"),
    "round-text": ("seed0", lambda d: d.update(round="2"),
                   "round = '2', not a whole number in [1, 100000]"),
    "fedcbs-counts": ("fedcbs", lambda d: d.update(policy_state={"num-devices": 4, "round": 2,
                      "counts": [1, 1, 1, 1]}), "Fed-CBS counts of 4 devices"),
    "generator": ("seed0",
                  lambda d: d.update(cell_rng_state={"bit_generator": "MT19937", "state": {}}),
                  "its cell generator state does not fit the run"),
    "aggregator": ("seed0", lambda d: d.update(aggregator_state={"momentum_vector": None}),
                   "is the default FedAvg"),
    "settings-empty": ("seed0", _settings_of("{}"), "other settings (aggregator = "),
    "settings-list": ("seed0", _settings_of("[[1, 2]]"), "other settings (aggregator = "),
    "settings-deep": ("seed0", _settings_of("[" * 100_000 + "]" * 100_000), "other settings ("),
    "settings-digest": ("seed0", lambda d: d["identity"].update(settings="{}"),
                        "do not match their digest (damaged"),
    "no-identity": ("seed0", lambda d: d.pop("identity"),
                    "has format 1; this version of the app reads format 3"),
}  # fmt: skip


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_checkpoint_that_does_not_fit_the_run_leaves_the_folder_as_it_was(runs, tmp_path, damage):
    """The ServerApp itself (no check before the start): refused before its first write."""
    name, change, phrase = DAMAGE[damage]
    folder = copy_run(runs, name, tmp_path)
    data = torch.load(folder / CHECKPOINT_FILE, weights_only=True)
    change(data)
    torch.save(data, folder / CHECKPOINT_FILE)
    before = files(folder)
    policy = json.loads((folder / "config.json").read_text())["policy"]
    resume = {"num-server-rounds": 3, "resume-from": str(folder)}
    config = checkpointed_run_config(folder, **overrides(policy=policy, **resume))
    with pytest.raises(Exception) as caught:  # the type is checked below
        run_inprocess(config)
    assert files(folder) == before  # status "completed", config, metrics: byte for byte
    message = str(caught.value)
    assert isinstance(caught.value, ValueError), message
    assert "\n" not in message and phrase in message, message
    assert message.startswith(f"run-config key 'resume-from' = '{folder}': checkpoint.pt")


#: A wrapper holding a strategy of its own.
HELD = {"noise-multiplier": 1.0, "clipping-norm": 0.5, "strategy": "FedAvgM",
        "strategy-params": {"server-momentum": 0.9}}  # fmt: skip


def stepped(name: str, params: dict[str, Any], rounds: int = 2):
    """A fresh aggregator after ``rounds`` synthetic rounds, and the round's model."""
    aggregator = make_aggregator(name, params, 3)[0]
    reference, models = synthetic_uploads(3)
    current = reference
    for rnd in range(1, rounds + 1):
        out, reason = aggregate_uploads(aggregator, rnd, models, [1, 2, 3], current, seed=4)
        assert out is not None, reason
        current = out
    return aggregator, current, models


@pytest.mark.parametrize(
    ("name", "params", "setting", "value"),
    [
        ("FedAdam", {"eta": 0.05}, "eta", 10.0),
        ("FedAdam", {"eta": 0.05}, "beta_1", 0.0),
        ("FedAdam", {"eta": 0.05}, "tau", 1e9),
        ("FedYogi", {}, "beta_2", 0.5),
        ("FedAvgM", {"server-momentum": 0.9}, "server_momentum", 0.0),
        ("FedAvgM", {"server-momentum": 0.9}, "server_opt", False),
        (FIXED_DP, {"noise-multiplier": 5.0, "clipping-norm": 0.5}, "noise_multiplier", 0.0),
        (FIXED_DP, {"noise-multiplier": 5.0, "clipping-norm": 0.5}, "clipping_norm", 1e30),
        (ADAPTIVE_DP, {"noise-multiplier": 5.0, **COUNT_NOISE}, "noise_multiplier", 0.0),
        (ADAPTIVE_DP, {"noise-multiplier": 5.0, **COUNT_NOISE}, "clip_norm_lr", 100.0),
        (FIXED_DP, HELD, "strategy.server_learning_rate", 100.0),  # the held strategy's
    ],
)
def test_a_saved_setting_is_refused_and_the_configured_one_stays(name, params, setting, value):
    saved, _, _ = stepped(name, params)
    state = aggregator_state(saved)
    assert setting not in state  # an honest checkpoint holds state only
    fresh = make_aggregator(name, params, 3)[0]
    configured = attrgetter(setting)(fresh)
    reference, _ = synthetic_uploads(3)
    with pytest.raises(ValueError, match=rf"holds .*'{setting}'.*; the run's \w+ keeps"):
        load_aggregator_state(fresh, {**state, setting: value}, reference)
    assert attrgetter(setting)(fresh) == configured


class Summing(FedAvg):
    """A researcher's strategy whose own arrays are state: its state_dict protocol says so."""

    def __init__(self) -> None:
        super().__init__()
        self.total: dict[str, np.ndarray] | None = None

    def aggregate_train(self, server_round, replies):
        arrays, metrics = super().aggregate_train(server_round, replies)
        old = self.total or {}
        self.total = {k: v.numpy() + old.get(k, 0) for k, v in arrays.items()}
        return arrays, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"total": self.total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["total"] is not None and set(state["total"]) != {"w", "b"}:
            raise ValueError("Summing.total has other arrays than the model's")
        self.total = state["total"]


SUMMING = f"{__name__}:Summing"
STATE_PARAMS: dict[str, dict[str, Any]] = {
    "FedAvgM": {"server-momentum": 0.9},
    "FedAdam": {"eta": 0.05},
    ADAPTIVE_DP: {"noise-multiplier": 1.0, **COUNT_NOISE},
    SUMMING: {},
}


@pytest.mark.parametrize(
    ("name", "attribute", "bad", "phrase"),
    [
        ("FedAvgM", "momentum_vector", lambda v: v[:1],
         "momentum_vector is not 2 arrays, one per array"),
        ("FedAvgM", "momentum_vector", lambda v: v[::-1],
         "momentum_vector['w'] has shape [3]; the model's is [2, 3]"),
        ("FedAdam", "m_t", lambda v: {"w": v["w"]}, "m_t is not 2 arrays"),
        ("FedAdam", "m_t", lambda v: {"a": v["w"], "c": v["b"]},
         "m_t has other keys than the model's: ['a', 'c']"),
        ("FedAdam", "v_t", lambda v: {k: x[..., :1] for k, x in v.items()},
         "v_t['w'] has shape [2, 1]"),
        ("FedAdam", "v_t", lambda v: {k: x.astype(np.float64) for k, x in v.items()},
         "has dtype float64; the model's is float32"),
        ("FedAdam", "m_t", lambda v: {k: x * np.nan for k, x in v.items()}, "not finite"),
        (SUMMING, "total", lambda v: {"w": v["w"]}, "Summing.total has other arrays"),
        (ADAPTIVE_DP, "clipping_norm", lambda v: -1.0, "= -1.0; allowed: a finite number > 0"),
        (ADAPTIVE_DP, "clipping_norm", lambda v: math.inf, "allowed: a finite number > 0"),
        (ADAPTIVE_DP, "clipping_norm", lambda v: 10**400, "allowed: a finite number > 0"),
        (ADAPTIVE_DP, "clipping_norm", lambda v: "0.5", "= '0.5'; allowed: a finite number > 0"),
        ("FedAvgM", "momentum_vector", None,
         "holds ['current_arrays']; the run's FedAvgM keeps ['current_arrays', 'mom"),
    ],
)  # fmt: skip
def test_restored_state_must_fit_the_model(name, attribute, bad, phrase):
    """A checkpoint's aggregator state edited (``bad`` None: the attribute left out)."""
    saved, current, _ = stepped(name, STATE_PARAMS[name])
    state = aggregator_state(saved)
    value = state.pop(attribute)
    if bad is not None:
        state[attribute] = bad(value)
    fresh = make_aggregator(name, STATE_PARAMS[name], 3)[0]
    with pytest.raises(ValueError, match=re.escape(phrase)):
        load_aggregator_state(fresh, state, current)


def test_a_researchers_state_is_checkpointed_and_restored_by_its_protocol():
    saved, current, _ = stepped(SUMMING, {})
    state = aggregator_state(saved)
    assert set(state) == {"total"}
    # two rounds of the same uploads 0.01 (i + 1), weights 1, 2, 3: 2 * 0.01 * 14 / 6 each
    np.testing.assert_allclose(state["total"]["w"], np.full((2, 3), 0.14 / 3), rtol=1e-6)
    fresh = make_aggregator(SUMMING, {}, 3)[0]
    load_aggregator_state(fresh, state, current)
    assert all(np.array_equal(fresh.total[k], saved.total[k]) for k in current)
    with pytest.raises(
        ValueError, match=r"holds \['step', 'total'\]; the run's Summing keeps \['total'\]"
    ):
        load_aggregator_state(make_aggregator(SUMMING, {}, 3)[0], {**state, "step": 1.0}, current)


PF = {"policy": "examples.proportional_fair:ProportionalFair"}


@pytest.mark.parametrize(
    ("first", "then", "said"),
    [
        ({**PF, "policy-params.window": 10}, {**PF, "policy-params.window": 5},
         "policy-params.window = 10 there, 5 now"),
        ({"channel.deadline-s": 0.5}, {"channel.deadline-s": 0.25},
         "channel.deadline-s = 0.5 there, 0.25 now"),
        ({"local-steps": 2}, {"local-steps": 3},
         "local-steps = 2 there, 3 now"),
        ({"channel.model-bits": 1000}, {"channel.model-bits": 2000},
         "channel.model-bits = 1000 there, 2000 now"),
        ({"num-devices": 6}, {"num-devices": 7},  # recorded twice (cell, task), said once
         "num-devices = 6 there, 7 now"),
        ({**PF, "policy-params.window": 10, "channel.deadline-s": 0.5},
         {**PF, "seed": 3, "policy-params.window": 5, "channel.deadline-s": 0.25},
         "channel.deadline-s = 0.5 there, 0.25 now; policy-params.window = 10 there, 5 now; "
         "seed = 0 there, 3 now"),
    ],
)  # fmt: skip
def test_a_resume_with_other_settings_names_each_as_the_run_config_does(first, then, said):
    there, now = (parse_run_config({**default_run_config(), **c}) for c in (first, then))
    with pytest.raises(CheckpointRefusedError) as err:
        check_identity(Path("/runs/a"), run_identity(there), now)
    assert str(err.value) == (
        f"run-config key 'resume-from' = '/runs/a': checkpoint.pt was written with other settings "
        f"({said}); resume with the run's own settings (only num-server-rounds may change) from "
        "its own checkpoint"
    )


#: A checkpoint's fields, each of an allowed type.
FIELDS = {"round": 1, "model": {}, "policy_state": {}, "cell_rng_state": {},
          "policy_rng_state": {}, "elapsed_s": 0.0}  # fmt: skip
#: Files that are no checkpoint: what torch.save wrote, what the refusal says.
NOT_CHECKPOINTS = {
    "tensor": (torch.zeros(3), "checkpoint = Tensor, not a dict)"),
    "list": ([1, 2], "checkpoint = list, not a dict)"),
    "none": (None, "checkpoint = NoneType, not a dict)"),
    "empty-dict": ({}, "'round'"),
    "round-tensor": ({"round": torch.tensor(2)}, "round = Tensor, not a whole number"),
    "model-tensor": ({**FIELDS, "model": torch.zeros(2, 2)}, "model = Tensor, not a dict)"),
    # an untagged array: torch refuses it (its message named without escape codes, issue 50)
    "untagged-array": (
        {"round": 1, "policy_state": {"avg": np.arange(3.0)}}, "Weights only load failed"
    ),
    "elapsed-text": ({**FIELDS, "elapsed_s": "1"}, "elapsed_s = '1', not seconds >= 0)"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(NOT_CHECKPOINTS))
def test_a_file_that_is_no_checkpoint_is_refused_in_one_line(tmp_path, name):
    content, said = NOT_CHECKPOINTS[name]
    torch.save(content, tmp_path / CHECKPOINT_FILE)
    with pytest.raises(CheckpointRefusedError) as err:
        load_checkpoint(tmp_path)
    message = str(err.value)
    assert message.startswith(
        f"run-config key 'resume-from' = '{tmp_path}': checkpoint.pt cannot be read (truncated "
        "or not a checkpoint of this app: "
    )
    assert said in message and message.isprintable() and "[1m" not in message, message
    if not isinstance(content, dict):  # the runs table's reading too
        assert checkpoint_round(tmp_path) is None
