"""The end of a round: evaluation and checkpoints on due rounds only, one metrics line per round.

The recorder runs on a real set-up (digits, 4 devices) whose model and test set are replaced by a
2-input linear classifier and 4 test points, so that every accuracy and loss is known by hand:

    test points x = (1, 0), (0, 1), (1, 0), (0, 1) with labels 0, 1, 1, 1.
    IDENTITY (logits = x): 3 of 4 right; the three right ones cost softplus(-1), the wrong one
        softplus(1) = 1 + softplus(-1): loss softplus(-1) + 1/4.
    SWAPPED (logits = x reversed): 1 of 4 right: loss softplus(-1) + 3/4.

Rounds 0 and the odd rounds end with IDENTITY, the even rounds with SWAPPED.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord
from run_results import lines
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

import server_app.run_folder.results as results
from fedcgd_config.settings import default_run_config
from fedcgd_strategy.record import RoundRecord
from server_app.checkpoint import CHECKPOINT_FILE, load_checkpoint
from server_app.config import parse_run_config
from server_app.recorder import RoundRecorder
from server_app.run_folder.results import ResultWriter
from server_app.run_folder.run_status import RUNNING, read_status
from server_app.setup import RunSetup, build_setup

SOFTPLUS_MINUS_1 = math.log(1.0 + math.exp(-1.0))  # 0.31326...
IDENTITY = {"1.weight": torch.eye(2), "1.bias": torch.zeros(2)}
SWAPPED = {"1.weight": torch.tensor([[0.0, 1.0], [1.0, 0.0]]), "1.bias": torch.zeros(2)}
ACCURACY = {"identity": 0.75, "swapped": 0.25}
LOSS = {"identity": SOFTPLUS_MINUS_1 + 0.25, "swapped": SOFTPLUS_MINUS_1 + 0.75}
#: The keys of a metrics line, in order (the run's files before the recorder had them so).
LINE_KEYS = (
    "round accuracy loss eval_s wall_time_s num_available num_candidates num_feasible "
    "num_scheduled num_uploaded scheduled uploaded failed disconnected wemd sampling_term "
    "objective sigma class_gradient_used class_gradient_next bandwidth_used_hz "
    "solver_iterations query_s schedule_s train_phase_s aggregate_s client_train_s model_kept "
    "failed_reasons model_kept_reason discovery_failed discovery_s devices_lost lost "
    "dp_clipping_norm dp_noise_std"
).split()


def tiny_setup(tmp_path: Path, **overrides: object) -> RunSetup:
    """A real run set-up with the 2-input classifier and the 4 test points."""
    run_config = default_run_config()
    run_config.update({"num-devices": 4, "result-dir": str(tmp_path / "run"), **overrides})
    setup = build_setup(parse_run_config(run_config))
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]).view(4, 1, 1, 2)
    y = torch.tensor([0, 1, 1, 1])
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 2))
    return dataclasses.replace(setup, model=model, test_tensors=(x, y), device=torch.device("cpu"))


def fake_record(server_round: int) -> RoundRecord:
    """A round's record: 2 of 3 available devices scheduled and uploaded."""
    return RoundRecord(
        round=server_round, num_available=3, num_candidates=3, num_feasible=3, num_scheduled=2,
        num_uploaded=2, scheduled=[0, 2], uploaded=[0, 2], failed=[], disconnected=[], wemd=0.5,
        sampling_term=0.25, objective=0.75, sigma=1.5, class_gradient_used=1.0,
        class_gradient_next=2.0, bandwidth_used_hz=1e6, solver_iterations=3, query_s=0.0,
        schedule_s=0.0, train_phase_s=0.0, aggregate_s=0.0, client_train_s=0.0, model_kept=False,
        failed_reasons={}, model_kept_reason=None, discovery_failed={},
    )  # fmt: skip


def model_of(server_round: int) -> str:
    return "swapped" if server_round % 2 == 0 and server_round > 0 else "identity"


def arrays(name: str) -> ArrayRecord:
    return ArrayRecord(IDENTITY if name == "identity" else SWAPPED)


def fsynced_names(monkeypatch, folder: Path | None = None) -> list[str]:
    """From now on, the name of each file or folder (in ``folder`` or it, when given) that
    ``os.fsync`` is called on, in order; a temporary file's random part left out."""
    real_fsync, names = os.fsync, []

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if folder is None or path == str(folder) or path.startswith(f"{folder}/"):
            names.append(re.sub(r"\.[a-z0-9_]+\.tmp$", ".tmp", Path(path).name))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return names


def test_evaluates_round_0_every_third_and_the_last_and_checkpoints_every_second_after_syncing(
    tmp_path, monkeypatch
):
    setup = tiny_setup(tmp_path, **{"num-server-rounds": 7, "eval-every": 3, "checkpoint-every": 2})
    folder = tmp_path / "run"
    said: list[str] = []
    recorder = RoundRecorder(setup, ResultWriter(folder, 7), said.append)
    events = EventAccumulator(str(folder))
    events.Reload()  # the run's settings for TensorBoard are on disk before the first round
    assert "_hparams_/session_start_info" in events.PluginTagToContent("hparams")
    returned = [recorder(0, arrays(model_of(0)))]
    assert not (folder / CHECKPOINT_FILE).exists()
    names = fsynced_names(monkeypatch)
    after_each: list[int | None] = []
    statuses, per_round = [], []
    for r in range(1, 8):
        setup.policy_rng.random()  # the policy draws in every round: the state moves on
        recorder.add_record(fake_record(r))
        returned.append(recorder(r, arrays(model_of(r))))
        per_round.append(list(names))
        names.clear()
        path = folder / CHECKPOINT_FILE
        after_each.append(load_checkpoint(folder).round if path.exists() else None)
        status = read_status(folder)
        assert status is not None
        statuses.append((status.state, status.last_round, status.num_server_rounds))
        # each round's status is whole JSON, and its line is in the file, synced or not
        assert [x["round"] for x in lines(folder)] == list(range(1, r + 1))

    written = lines(folder)
    assert [x["accuracy"] for x in written] == [None, None, 0.75, None, None, 0.25, 0.75]
    expected_loss = [None, None, LOSS["identity"], None, None, LOSS["swapped"], LOSS["identity"]]
    assert [x["loss"] for x in written] == pytest.approx(expected_loss, abs=1e-6)
    assert all(list(x) == LINE_KEYS for x in written)
    assert written[2]["scheduled"] == [0, 2] and written[2]["objective"] == 0.75
    assert [r for r, m in enumerate(returned) if m is not None] == [0, 3, 6, 7]
    assert isinstance(returned[0], MetricRecord)
    assert returned[6]["accuracy"] == 0.25
    assert returned[6]["loss"] == pytest.approx(SOFTPLUS_MINUS_1 + 0.75, abs=1e-6)
    assert said[0] == "initial model: accuracy 0.7500, loss 0.5633"
    assert said[1].startswith("round    1/7 | acc   -    | scheduled   2/3   available | elapsed")
    assert said[3].startswith("round    3/7 | acc 75.00% | scheduled   2/3   available | elapsed")
    assert said[6].startswith("round    6/7 | acc 25.00% |")
    assert len(said) == 8

    assert after_each == [None, 2, 2, 4, 4, 6, 7]
    assert statuses == [(RUNNING, r, 7) for r in range(1, 8)]
    # the line, the status and the folder first, then the checkpoint's file (before its rename)
    synced = ["metrics.jsonl", "status.json", "run", ".checkpoint.pt.tmp"]
    assert per_round == [[], synced, [], synced, [], synced, synced]
    last = load_checkpoint(folder)
    assert torch.equal(last.model["1.weight"], torch.eye(2))  # round 7 ended with IDENTITY
    assert last.policy_rng_state == setup.policy_rng.bit_generator.state
    assert last.cell_rng_state == setup.cell_rng.bit_generator.state
    assert last.policy_state.keys() == setup.policy.state_dict().keys()


def test_a_record_of_another_round_or_none_raises_and_writes_nothing(tmp_path):
    setup = tiny_setup(tmp_path, **{"num-server-rounds": 3, "checkpoint-every": 1})
    folder = tmp_path / "run"
    recorder = RoundRecorder(setup, ResultWriter(folder, 3), lambda text: None)
    recorder.add_record(fake_record(1))
    recorder(1, arrays("identity"))
    for r, record in ((1, None), (2, fake_record(3)), (2, None)):  # used up, another's, none
        if record is not None:
            recorder.add_record(record)
        with pytest.raises(RuntimeError, match=f"round {r}: the strategy recorded no round"):
            recorder(r, arrays("swapped"))
    assert [x["round"] for x in lines(folder)] == [1]
    assert load_checkpoint(folder).round == 1


def test_a_resumed_run_skips_round_0_and_counts_on_from_the_checkpoint(tmp_path):
    setup = tiny_setup(
        tmp_path, **{"num-server-rounds": 5, "eval-every": 10, "checkpoint-every": 0}
    )
    setup = dataclasses.replace(setup, resume=setup.checkpoint(3, IDENTITY, 0.0))
    said: list[str] = []
    recorder = RoundRecorder(setup, ResultWriter(tmp_path / "run", 5), said.append)
    assert recorder(0, arrays("identity")) is None
    assert said == []
    recorder.add_record(fake_record(4))
    assert recorder(1, arrays("swapped")) is None  # round 4: not due
    recorder.add_record(fake_record(5))
    metrics = recorder(2, arrays("swapped"))  # round 5, the last: due
    assert metrics is not None and metrics["accuracy"] == 0.25
    written = lines(tmp_path / "run")
    assert [(x["round"], x["accuracy"]) for x in written] == [(4, None), (5, 0.25)]
    assert [text[:12] for text in said] == ["round    4/5", "round    5/5"]
    assert not (tmp_path / "run" / CHECKPOINT_FILE).exists()  # checkpoint-every = 0


def test_the_eta_starts_after_round_0_and_leaves_node_discovery_out(monkeypatch, tmp_path):
    """Start-up before the starting model's evaluation, and the first round's node discovery
    (every ClientApp starting), are not round time: ETA = the rounds' own time per round."""
    setup = tiny_setup(tmp_path, **{"num-server-rounds": 11, "checkpoint-every": 0})
    now = [500.0]
    monkeypatch.setattr(results.time, "perf_counter", lambda: now[0])
    said: list[str] = []
    recorder = RoundRecorder(setup, ResultWriter(tmp_path / "run", 11), said.append)
    now[0] += 60.0  # the set-up, the SuperLink, Ray, the nodes connecting
    recorder(0, arrays(model_of(0)))
    now[0] += 20.0 + 3.0  # round 1: node discovery 20 s, the round itself 3 s
    recorder.add_record(dataclasses.replace(fake_record(1), discovery_s=20.0))
    recorder(1, arrays(model_of(1)))
    now[0] += 2.0  # round 2: 2 s per round (round 1 left out from now on), 9 rounds left
    recorder.add_record(fake_record(2))
    recorder(2, arrays(model_of(2)))
    assert said[1].endswith("| elapsed    83.0 s | ETA    30.0 s"), said[1]  # 3 s x 10
    assert said[2].endswith("| elapsed    85.0 s | ETA    18.0 s"), said[2]
    assert lines(tmp_path / "run")[0]["discovery_s"] == 20.0


def test_a_checkpoint_of_the_setup_rebuilds_the_same_state(tmp_path):
    run_config = default_run_config()
    run_config.update({"num-devices": 4, "result-dir": str(tmp_path / "run"), "policy": "bc"})
    config = parse_run_config(run_config)
    settings: list[dict] = []
    first = build_setup(config, on_settings=settings.append)
    first.cell.draw_round(first.model_bits)
    first.policy_rng.random()
    state = {k: v + 1.0 for k, v in first.model.state_dict().items()}
    checkpoint = first.checkpoint(7, state, 1.5)
    again = build_setup(config, checkpoint)

    assert again.round_offset == 7 and first.round_offset == 0
    assert again.cell_rng.bit_generator.state == first.cell_rng.bit_generator.state
    assert again.policy_rng.bit_generator.state == first.policy_rng.bit_generator.state
    for key, value in again.model.state_dict().items():
        assert torch.equal(value, state[key]), key
    a, b = first.cell.draw_round(first.model_bits), again.cell.draw_round(again.model_bits)
    assert np.array_equal(a.available, b.available)
    assert len(settings) == 1
    assert settings[0]["num_parameters"] == first.num_params
    assert settings[0]["model_bits_used"] == first.num_params * 32
    assert settings[0]["target_dist_global"] == pytest.approx(first.target.tolist())
    assert sum(settings[0]["target_dist_global"]) == pytest.approx(1.0)
