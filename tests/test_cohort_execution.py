"""Cohort execution against the per-device path: the same replies, the same runs.

The oracle is the per-device path (``InProcessGrid(cohorts=False)``, what ``flwr run`` and
deployments do; bit for bit equal to ``flwr run`` in ``test_flwr_run``). Cohort execution must
give every reply field within 1e-5 relative (float32 summation order differs), the same
schedules over whole runs (several policies, tau = 1 and 5, digits and MNIST-1D), the same
outcome with a poisoned device, and fall back to the per-device path where it cannot batch.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from fake_grid import FakeGrid, make_contexts
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from misbehaving import misbehaving

from client_app import cohort
from client_app.app import app as client_app
from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import validated_run_config
from fedcgd_task import keys
from fedcgd_task.models import build_model
from fedcgd_task.settings import default_run_config
from server_app.app import run_federation
from server_app.config import parse_run_config
from server_app.results import METRICS_FILE, MODEL_FILE

MNIST1D = {"dataset": "mnist1d", "mnist1d-samples": 1200, "batch-size": 16}


def replies(run_config: dict, kind: str, *, cohorts: bool, model: str, tau: int) -> list[Message]:
    """Every node's reply to one message of ``kind`` carrying the same model."""
    v = int(run_config["num-devices"])
    nodes = [100 + v_ for v_ in range(v)]
    grid = FakeGrid(
        {n: client_app for n in nodes}, make_contexts(nodes, run_config, v), cohorts=cohorts
    )
    shape = (1, 40) if run_config.get("dataset") == "mnist1d" else (1, 8, 8)
    weights = build_model(model, 10, shape, seed=3).state_dict()
    record = ArrayRecord(weights)
    config = ConfigRecord(
        {
            keys.SERVER_ROUND: 4,
            keys.LOCAL_STEPS: tau,
            keys.LEARNING_RATE: 0.05,
            keys.BATCH_SIZE: int(run_config.get("batch-size", 32)),
            keys.WANT_SIGMA: True,
        }
    )
    messages = [
        grid.create_message(RecordDict({keys.ARRAYS: record, keys.CONFIG: config}), kind, node, "4")
        for node in nodes
    ]
    return list(grid.send_and_receive(messages))


def close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=1e-5, abs=1e-9)


@pytest.mark.parametrize(
    ("data", "model", "tau"),
    [({}, "mlp", 1), ({}, "mlp", 5), (MNIST1D, "cnn1d", 1), (MNIST1D, "cnn1d", 5)],
)
@pytest.mark.parametrize("kind", [keys.QUERY_STATS, "train"])
def test_every_reply_field_matches_the_per_device_path(
    tmp_path: Path, data: dict, model: str, tau: int, kind: str
) -> None:
    run_config = validated_run_config(
        {**data, "model": model, "num-devices": 7, "data-dir": str(tmp_path / "data")}
    )
    alone = replies(run_config, kind, cohorts=False, model=model, tau=tau)
    together = replies(run_config, kind, cohorts=True, model=model, tau=tau)
    assert len(alone) == len(together) == 7
    for a, b in zip(alone, together, strict=True):
        assert not a.has_error() and not b.has_error()
        ma, mb = a.content.metric_records[keys.METRICS], b.content.metric_records[keys.METRICS]
        assert set(ma) == set(mb)
        for key in (keys.PARTITION_ID, keys.NUM_EXAMPLES, keys.LABEL_HIST):
            assert ma[key] == mb[key]
        for key in (keys.SIGMA, keys.TRAIN_LOSS, keys.UPDATE_NORM):
            if key in ma:
                assert close(float(mb[key]), float(ma[key])), key
        if kind == "train":
            wa = a.content.array_records[keys.ARRAYS].to_torch_state_dict()
            wb = b.content.array_records[keys.ARRAYS].to_torch_state_dict()
            assert list(wa) == list(wb)
            for name in wa:
                torch.testing.assert_close(wb[name], wa[name], rtol=1e-5, atol=1e-7)
            assert float(ma[keys.UPDATE_NORM]) > 0


def whole_run(tmp_path: Path, name: str, *, cohorts: bool, **overrides) -> tuple[list, dict]:
    config = validated_run_config(
        {
            "num-devices": 12,
            "num-server-rounds": 6,
            "channel.availability-prob": 0.7,
            "data-dir": str(tmp_path / "data"),
            **overrides,
            "result-dir": str(tmp_path / name),
        }
    )
    run_inprocess(config, cohorts=cohorts)
    lines = [json.loads(x) for x in (tmp_path / name / METRICS_FILE).read_text().splitlines()]
    return lines, torch.load(tmp_path / name / MODEL_FILE)


@pytest.mark.parametrize(
    ("policy", "data", "tau"),
    [
        ("fedcgd-fscd", {}, 1),
        ("fedcgd-fscd", {}, 5),
        ("bc", {}, 5),
        ("poc", {}, 1),
        ("fedcbs", {}, 1),
        ("fedcgd-fscd", {"aggregator": "FedMedian"}, 1),  # a Flower aggregator over cohorts
        ("all", {"aggregator": "FedAdam"}, 2),
        (  # Flower's DP wrapper: clipping, and noise seeded from (seed, round)
            "all",
            {
                "aggregator": "DifferentialPrivacyServerSideFixedClipping",
                "aggregator-params.noise-multiplier": 0.3,
                "aggregator-params.clipping-norm": 0.1,
            },
            2,
        ),
        ("fedcgd-gs", {**MNIST1D, "model": "cnn1d", "channel.deadline-s": 0.004}, 1),
        ("fedcgd-fscd", {**MNIST1D, "model": "cnn1d", "channel.deadline-s": 0.004}, 5),
    ],
)
def test_whole_runs_match_the_per_device_path(
    tmp_path: Path, policy: str, data: dict, tau: int
) -> None:
    settings = {"policy": policy, "local-steps": tau, **data}
    alone, model_alone = whole_run(tmp_path, "alone", cohorts=False, **settings)
    together, model_together = whole_run(tmp_path, "together", cohorts=True, **settings)
    assert [x["scheduled"] for x in together] == [x["scheduled"] for x in alone]
    assert [x["uploaded"] for x in together] == [x["uploaded"] for x in alone]
    assert any(x["num_scheduled"] > 1 for x in alone)
    for a, b in zip(alone, together, strict=True):
        assert b["accuracy"] == pytest.approx(a["accuracy"], abs=1e-9)
        for key in ("sigma", "wemd", "objective", "loss"):
            if isinstance(a.get(key), float):
                assert close(b[key], a[key]), key
            elif isinstance(a.get(key), list):
                assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-9), key
    for name in model_alone:
        torch.testing.assert_close(model_together[name], model_alone[name], rtol=1e-4, atol=1e-6)


def test_a_poisoned_device_is_refused_alike(tmp_path: Path) -> None:
    nodes = [9000 + 13 * i for i in range(6)]
    results = {}
    for cohorts in (False, True):
        run_config = default_run_config()
        run_config.update(
            {
                "num-devices": 6,
                "num-server-rounds": 3,
                "channel.availability-prob": 0.8,
                "local-steps": 2,
                "policy": "all",
                "result-dir": str(tmp_path / f"cohorts-{cohorts}"),
            }
        )
        handler = misbehaving(client_app, "huge-layer", partition=1)
        grid = FakeGrid(
            {n: handler for n in nodes}, make_contexts(nodes, run_config, 6), cohorts=cohorts
        )
        run_federation(grid, parse_run_config(run_config))
        out = tmp_path / f"cohorts-{cohorts}"
        lines = [json.loads(x) for x in (out / METRICS_FILE).read_text().splitlines()]
        results[cohorts] = (lines, torch.load(out / MODEL_FILE))
    (alone, model_alone), (together, model_together) = results[False], results[True]
    assert [x["failed"] for x in together] == [x["failed"] for x in alone]
    assert any(1 in [int(p) for p in x["failed"]] for x in alone)  # the poisoned device
    assert [x["uploaded"] for x in together] == [x["uploaded"] for x in alone]
    assert all(torch.isfinite(t).all() for t in model_together.values())
    for name in model_alone:
        torch.testing.assert_close(model_together[name], model_alone[name], rtol=1e-4, atol=1e-6)


def test_dropout_trains_per_device_and_says_so_once(tmp_path: Path, caplog) -> None:
    cohort._LOGGED.clear()
    model = build_model("cnn", 10, (3, 32, 32))
    assert cohort.training_blockers(model) == [
        "dropout masks come from each device's own seeded stream"
    ]
    assert cohort.training_blockers(build_model("cnn1d", 10, (1, 40))) == []
    run_config = validated_run_config({"num-devices": 5, "data-dir": str(tmp_path / "data")})
    with caplog.at_level(logging.WARNING, logger="client_app.cohort"):
        for _ in range(2):
            together = replies(run_config, "train", cohorts=True, model="mlp", tau=1)
    assert not caplog.records  # the MLP batches
    bn = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 8), torch.nn.BatchNorm1d(8))
    assert "batch normalisation" in cohort.training_blockers(bn)[0]
    with caplog.at_level(logging.WARNING, logger="client_app.cohort"):
        cohort._log_once("cnn", "train", "dropout")
        cohort._log_once("cnn", "train", "dropout")
    assert len(caplog.records) == 1 and "one device at a time" in caplog.records[0].message
    assert len(together) == 5


def test_train_chunks_and_query_chunks_give_the_same_results(tmp_path: Path, monkeypatch) -> None:
    run_config = validated_run_config(
        {**MNIST1D, "model": "cnn1d", "num-devices": 7, "data-dir": str(tmp_path / "data")}
    )
    whole = replies(run_config, "train", cohorts=True, model="cnn1d", tau=2)
    monkeypatch.setattr(cohort, "TRAIN_CHUNK_MAX_DEVICES", 2)
    monkeypatch.setattr(cohort, "QUERY_CHUNK_SAMPLES", 40)  # 2 devices of b = 16 per pass
    chunked = replies(run_config, "train", cohorts=True, model="cnn1d", tau=2)
    for a, b in zip(whole, chunked, strict=True):
        ma, mb = a.content.metric_records[keys.METRICS], b.content.metric_records[keys.METRICS]
        assert close(float(mb[keys.SIGMA]), float(ma[keys.SIGMA]))
        assert close(float(mb[keys.UPDATE_NORM]), float(ma[keys.UPDATE_NORM]))
        wa = a.content.array_records[keys.ARRAYS].to_torch_state_dict()
        wb = b.content.array_records[keys.ARRAYS].to_torch_state_dict()
        for name in wa:
            np.testing.assert_allclose(wb[name].numpy(), wa[name].numpy(), rtol=1e-5, atol=1e-7)


def test_the_train_cohort_reuses_the_query_cohorts_statistics(tmp_path: Path, monkeypatch) -> None:
    run_config = validated_run_config({"num-devices": 6, "data-dir": str(tmp_path / "data")})
    nodes = [100 + v for v in range(6)]
    grid = FakeGrid({n: client_app for n in nodes}, make_contexts(nodes, run_config, 6))
    computed: list[int] = []
    real = cohort.cohort_stats
    monkeypatch.setattr(
        cohort, "cohort_stats", lambda m, ds, **kw: computed.append(len(ds)) or real(m, ds, **kw)
    )

    config = ConfigRecord(
        {keys.SERVER_ROUND: 2, keys.LOCAL_STEPS: 1, keys.LEARNING_RATE: 0.1, keys.BATCH_SIZE: 8}
    )

    def send(record: ArrayRecord, kind: str, to: list[int]) -> list[Message]:
        content = RecordDict({keys.ARRAYS: record, keys.CONFIG: config})
        return list(grid.send_and_receive([grid.create_message(content, kind, n, "2") for n in to]))

    record = ArrayRecord(build_model("mlp", 10, (1, 8, 8), seed=1).state_dict())
    queried = send(record, keys.QUERY_STATS, nodes)
    trained = send(record, "train", nodes[:4])
    assert computed == [6]  # the four trainees' statistics came from the query phase
    for q, t in zip(queried, trained, strict=False):
        mq, mt = q.content.metric_records[keys.METRICS], t.content.metric_records[keys.METRICS]
        assert mt[keys.SIGMA] == mq[keys.SIGMA] and mt[keys.LABEL_HIST] == mq[keys.LABEL_HIST]
    other = ArrayRecord(build_model("mlp", 10, (1, 8, 8), seed=2).state_dict())
    send(other, "train", nodes[:3])  # another model: computed anew
    assert computed == [6, 3]


def test_threads_share_the_query_chunks_with_the_same_results(tmp_path: Path, monkeypatch) -> None:
    run_config = validated_run_config(
        {**MNIST1D, "model": "cnn1d", "num-devices": 9, "data-dir": str(tmp_path / "data")}
    )
    nodes = [100 + v for v in range(9)]
    contexts = make_contexts(nodes, run_config, 9)
    record = ArrayRecord(build_model("cnn1d", 10, (1, 40), seed=4).state_dict())
    config = ConfigRecord(
        {keys.SERVER_ROUND: 1, keys.LOCAL_STEPS: 1, keys.LEARNING_RATE: 0.1, keys.BATCH_SIZE: 16}
    )
    monkeypatch.setattr(cohort, "QUERY_CHUNK_SAMPLES", 32)  # two devices a pass: five passes
    sigmas = {}
    for threads in (0, 1, 2, 3):  # 0: per device
        cohort._KEPT.clear()
        grid = FakeGrid({n: client_app for n in nodes}, contexts, cohorts=threads > 0)
        grid.cohort_threads = max(threads, 1)
        content = RecordDict({keys.ARRAYS: record, keys.CONFIG: config})
        sent = [grid.create_message(content, keys.QUERY_STATS, n, "1") for n in nodes]
        sigmas[threads] = [
            r.content.metric_records[keys.METRICS][keys.SIGMA] for r in grid.send_and_receive(sent)
        ]
    assert sigmas[2] == sigmas[1] and sigmas[3] == sigmas[1]  # the same passes, bit for bit
    assert sigmas[1] == pytest.approx(sigmas[0], rel=1e-5)
    assert len(set(sigmas[0])) == 9


def test_the_first_evaluation_runs_on_one_torch_thread(tmp_path: Path, monkeypatch) -> None:
    import server_app.setup as setup

    seen: list[int] = []
    real = setup.evaluate

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(setup, "evaluate", recording)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        config = {"num-devices": 4, "num-server-rounds": 1, "data-dir": str(tmp_path / "d")}
        run_inprocess(validated_run_config({**config, "result-dir": str(tmp_path / "run")}))
    finally:
        torch.set_num_threads(threads)
    assert seen and seen[0] == 1  # before any message reached a ClientApp
