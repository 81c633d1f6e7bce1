"""Cohort execution against the per-device path (the oracle): the same replies, the same runs.

Cohort execution sums in another order (batched passes, ``vmap``), so the comparisons run
``layer_cases``' float64 models, where the orders differ by rounding alone, bounded by
:data:`REL` (in float32 a ReLU input within rounding of 0 may flip: ``test_client_sigma``).
Where it cannot batch, or the model mixes a batch's samples, it computes each device alone.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from fake_grid import FakeGrid, app_grid, make_contexts
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from layer_cases import REL64
from misbehaving import misbehaving
from run_results import lines
from run_results import whole_run as run_to
from test_aggregators import dp
from test_misbehaving_devices import run as misbehaving_run

from client_app import cohort, device_round
from client_app.app import make_app
from client_app.cohort import Cohorts
from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import validated_run_config
from fedcgd_config import keys
from fedcgd_task.models import build_model
from server_app.run_folder.results import MODEL_FILE

MNIST1D = {"dataset": "mnist1d", "mnist1d-samples": 1200, "batch-size": 16}
MLP, CNN1D = "layer_cases:mlp_float64", "layer_cases:cnn1d_float64"
CENTRED = "layer_cases:batch_centred_mlp"
#: Relative tolerance between the cohort and the per-device path in float64: REL64 (fewer than
#: 1e4 roundings, layer_cases) times 100 for sigma-hat's expanded square and six rounds.
REL = 100 * REL64


def replies(
    run_config: dict, kind: str, *, cohorts: Cohorts | None, model: str, tau: int
) -> list[Message]:
    """Every node's reply to one message of ``kind`` carrying the same model; ``cohorts``: the
    engine's (the grid opens them, its ClientApp reads them), None: each device alone."""
    v = int(run_config["num-devices"])
    nodes = [100 + v_ for v_ in range(v)]
    grid = FakeGrid(
        {n: make_app(cohorts) for n in nodes}, make_contexts(nodes, run_config, v), cohorts=cohorts
    )
    shape = (1, 40) if run_config.get("dataset") == "mnist1d" else (1, 8, 8)
    weights = build_model(model, 10, shape, seed=3).state_dict()
    config = ConfigRecord(
        {keys.SERVER_ROUND: 4, "local-steps": tau, "learning-rate": 0.05,
         "batch-size": int(run_config.get("batch-size", 32)), keys.WANT_SIGMA: True}
    )  # fmt: skip
    return send(grid, device_round.state_record(weights), kind, nodes, config)


def config_in(tmp_path: Path, values: dict) -> dict:
    return validated_run_config({**values, "data-dir": str(tmp_path / "data")})


def close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=REL, abs=1e-300)


def metrics_of(reply: Message) -> dict:
    return reply.content.metric_records[keys.METRICS]


def weights_of(reply: Message) -> dict[str, torch.Tensor]:
    """The reply's model as it travels: one flat tensor per dtype (every value compared)."""
    return {k: torch.from_numpy(a.numpy()) for k, a in reply.content[keys.ARRAYS].items()}


#: A round's config of the tests that send their own messages (round 2, tau = 1, b = 8).
ROUND_2 = ConfigRecord(
    {keys.SERVER_ROUND: 2, "local-steps": 1, "learning-rate": 0.1, "batch-size": 8}
)


def send(
    grid: FakeGrid, record: ArrayRecord, kind: str, nodes: list[int], config: ConfigRecord = ROUND_2
) -> list[Message]:
    """Every node's reply to one message of ``kind`` carrying ``record`` and ``config``."""
    content = RecordDict({keys.ARRAYS: record, keys.CONFIG: config})
    group = str(config[keys.SERVER_ROUND])
    messages = [grid.create_message(content, kind, n, group) for n in nodes]
    return list(grid.send_and_receive(messages))


@pytest.mark.parametrize(
    ("data", "model", "tau"), [({}, MLP, 1), ({}, MLP, 5), (MNIST1D, CNN1D, 1), (MNIST1D, CNN1D, 5)]
)
@pytest.mark.parametrize("kind", [keys.QUERY_STATS, "train"])
def test_every_reply_field_matches_the_per_device_path(
    tmp_path: Path, data: dict, model: str, tau: int, kind: str, monkeypatch, caplog
) -> None:
    run_config = config_in(tmp_path, {**data, "model": model, "num-devices": 7})
    alone = replies(run_config, kind, cohorts=None, model=model, tau=tau)
    passes = batched_passes(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="client_app.cohort"):
        together = replies(run_config, kind, cohorts=Cohorts(), model=model, tau=tau)
    assert passes == [7] and not caplog.records  # all seven in one batched pass, batched training
    assert len(alone) == len(together) == 7
    for a, b in zip(alone, together, strict=True):
        assert not a.has_error() and not b.has_error()
        ma, mb = metrics_of(a), metrics_of(b)
        assert set(ma) == set(mb)
        for key in (keys.PARTITION_ID, keys.NUM_EXAMPLES, keys.LABEL_HIST):
            assert ma[key] == mb[key]
        for key in (keys.SIGMA, keys.TRAIN_LOSS, keys.UPDATE_NORM):
            if key in ma:
                assert close(float(mb[key]), float(ma[key])), key
        if kind == "train":
            wa, wb = weights_of(a), weights_of(b)
            assert list(wa) == list(wb)
            for name in wa:
                assert wa[name].dtype == torch.float64
                torch.testing.assert_close(wb[name], wa[name], rtol=REL, atol=0.0)
            assert float(ma[keys.UPDATE_NORM]) > 0


def whole_run(tmp_path: Path, name: str, *, cohorts: bool, **overrides) -> tuple[list, dict]:
    values = {"num-devices": 12, "num-server-rounds": 6, "channel.availability-prob": 0.7}
    values |= {"data-dir": str(tmp_path / "data"), "model": MLP, **overrides}
    run_to(tmp_path / name, values, per_device=not cohorts)
    return lines(tmp_path / name), torch.load(tmp_path / name / MODEL_FILE)


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
        # Flower's DP wrapper: clipping, and noise seeded from (seed, round)
        ("all", dp({"noise-multiplier": 0.3, "clipping-norm": 0.1}), 2),
        ("fedcgd-gs", {**MNIST1D, "model": CNN1D, "channel.deadline-s": 0.004}, 1),
        ("fedcgd-fscd", {**MNIST1D, "model": CNN1D, "channel.deadline-s": 0.004}, 5),
        ("fedcgd-fscd", {"model": CENTRED}, 10),  # mixes the batch: sigma-hat per device
    ],
)
def test_whole_runs_match_the_per_device_path(
    tmp_path: Path, policy: str, data: dict, tau: int
) -> None:
    settings = {"policy": policy, "local-steps": tau, **data}
    alone = whole_run(tmp_path, "alone", cohorts=False, **settings)
    together = whole_run(tmp_path, "together", cohorts=True, **settings)
    assert_same_runs(alone, together)
    if data.get("model") == CENTRED:  # the per-device function itself
        assert [x["sigma"] for x in together[0]] == [x["sigma"] for x in alone[0]]


def assert_same_runs(a_run: tuple[list, dict], b_run: tuple[list, dict]) -> None:
    """Two float64 runs (metrics lines, final model) equal up to :data:`REL`: the same schedules
    and uploads, accuracies (counts), and sigma-hat, WEMD, objective, loss and model within REL."""
    (a_lines, a_model), (b_lines, b_model) = a_run, b_run
    assert [x["scheduled"] for x in b_lines] == [x["scheduled"] for x in a_lines]
    assert [x["uploaded"] for x in b_lines] == [x["uploaded"] for x in a_lines]
    assert any(x["num_scheduled"] > 1 for x in a_lines)
    for a, b in zip(a_lines, b_lines, strict=True):
        assert b["accuracy"] == a["accuracy"]  # a count of correct test samples
        for key in ("sigma", "wemd", "objective", "loss"):
            if isinstance(a.get(key), float):
                assert close(b[key], a[key]), key
            elif isinstance(a.get(key), list):
                assert b[key] == pytest.approx(a[key], rel=REL, abs=1e-300), key
    for name in a_model:
        assert a_model[name].dtype == b_model[name].dtype == torch.float64
        torch.testing.assert_close(b_model[name].cpu(), a_model[name], rtol=REL, atol=0.0)


def test_a_poisoned_device_is_refused_alike(tmp_path: Path) -> None:
    wrap = functools.partial(misbehaving, fault="huge-layer", partition=1)
    results = {
        c: misbehaving_run(tmp_path, f"cohorts-{c}", wrap, cohorts=c, policy="all", model=MLP)
        for c in (False, True)
    }
    (alone, model_alone), (together, model_together) = results[False], results[True]
    assert [x["failed"] for x in together] == [x["failed"] for x in alone]
    assert any(1 in [int(p) for p in x["failed"]] for x in alone)  # the poisoned device
    assert [x["uploaded"] for x in together] == [x["uploaded"] for x in alone]
    assert all(torch.isfinite(t).all() for t in model_together.values())
    for name in model_alone:
        torch.testing.assert_close(model_together[name], model_alone[name], rtol=REL, atol=0.0)


def test_chunks_and_threads_give_the_same_results(tmp_path: Path, monkeypatch) -> None:
    run_config = config_in(tmp_path, {**MNIST1D, "model": CNN1D, "num-devices": 9})
    alone = replies(run_config, "train", cohorts=None, model=CNN1D, tau=2)
    monkeypatch.setattr(device_round, "TRAIN_CHUNK_MAX_DEVICES", 2)
    monkeypatch.setattr(cohort, "QUERY_CHUNK_SAMPLES", 32)  # two devices a pass: five passes
    chunked = {
        t: replies(run_config, "train", cohorts=Cohorts(threads=t), model=CNN1D, tau=2)
        for t in (1, 2, 3)
    }

    def sigmas(got: list[Message]) -> list[float]:
        return [float(metrics_of(r)[keys.SIGMA]) for r in got]

    assert sigmas(chunked[2]) == sigmas(chunked[1]) == sigmas(chunked[3])  # bit for bit
    assert sigmas(chunked[1]) == pytest.approx(sigmas(alone), rel=REL)
    assert len(set(sigmas(alone))) == 9
    for a, b in zip(alone, chunked[1], strict=True):
        assert close(float(metrics_of(b)[keys.UPDATE_NORM]), float(metrics_of(a)[keys.UPDATE_NORM]))
        wa, wb = weights_of(a), weights_of(b)
        for name in wa:
            np.testing.assert_allclose(wb[name].numpy(), wa[name].numpy(), rtol=REL, atol=0.0)


def test_the_train_cohort_reuses_the_query_cohorts_statistics_and_an_engine_its_own_app(
    tmp_path: Path, monkeypatch
) -> None:
    run_config = config_in(tmp_path, {"num-devices": 6})
    nodes = [100 + v for v in range(6)]
    grid = app_grid(make_contexts(nodes, run_config, 6))
    computed: list[int] = []
    real = Cohorts.cohort_stats
    monkeypatch.setattr(
        Cohorts, "cohort_stats", lambda self, m, ds: computed.append(len(ds)) or real(self, m, ds)
    )
    record = device_round.state_record(build_model("mlp", 10, (1, 8, 8), seed=1).state_dict())
    queried = send(grid, record, keys.QUERY_STATS, nodes)
    trained = send(grid, record, "train", nodes[:4])
    assert computed == [6]  # the four trainees' statistics came from the query phase
    for q, t in zip(queried, trained, strict=False):
        mq, mt = metrics_of(q), metrics_of(t)
        assert mt[keys.SIGMA] == mq[keys.SIGMA] and mt[keys.LABEL_HIST] == mq[keys.LABEL_HIST]
    other = device_round.state_record(build_model("mlp", 10, (1, 8, 8), seed=2).state_dict())
    send(grid, other, "train", nodes[:3])  # another model: computed anew
    assert computed == [6, 3]
    # No module global links an engine and a ClientApp: while one engine's cohorts are open,
    # Flower's ``app`` and another engine's ClientApp compute every device alone.
    from client_app.app import app as flower_app

    passes = batched_passes(monkeypatch)
    run_config = config_in(tmp_path, {"model": MLP, "num-devices": 6})
    contexts = make_contexts(nodes, run_config, 6)
    record = device_round.state_record(build_model(MLP, 10, (1, 8, 8), seed=1).state_dict())
    engine = Cohorts()
    sigmas = []
    for handler in (flower_app, make_app(Cohorts()), make_app(engine)):
        grid = FakeGrid({n: handler for n in nodes}, contexts, cohorts=engine)
        got = send(grid, record, keys.QUERY_STATS, nodes)
        sigmas.append([metrics_of(r)[keys.SIGMA] for r in got])
    assert passes == [6]  # only the engine's own ClientApp took the batched pass
    assert sigmas[0] == sigmas[1]  # the per-device path, twice
    assert all(close(b, a) for a, b in zip(sigmas[0], sigmas[2], strict=True))


def test_the_first_evaluation_runs_on_one_torch_thread(tmp_path: Path, monkeypatch) -> None:
    import server_app.setup as setup

    seen: list[int] = []
    real = setup.evaluate

    monkeypatch.setattr(
        setup, "evaluate", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k)
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        config = {"num-devices": 4, "num-server-rounds": 1, "data-dir": str(tmp_path / "d")}
        run_inprocess(validated_run_config({**config, "result-dir": str(tmp_path / "run")}))
    finally:
        torch.set_num_threads(threads)
    assert seen and seen[0] == 1  # before any message reached a ClientApp


def batched_passes(monkeypatch) -> list[int]:
    """Count the cohort's batched sigma-hat passes (devices per pass) from now on."""
    passes: list[int] = []
    real = cohort.gradient_spreads

    def counting(model, x, y, *, group_size, **kwargs):
        passes.append(len(y) // group_size)
        return real(model, x, y, group_size=group_size, **kwargs)

    monkeypatch.setattr(cohort, "gradient_spreads", counting)
    return passes


@pytest.mark.parametrize(
    "model",
    [CENTRED, "layer_cases:centred_above_8", "layer_cases:rolled_above_16",
     "layer_cases:centred_under_autograd", "layer_cases:centred_in_float32"],
)  # fmt: skip
def test_a_model_that_mixes_the_batch_gets_the_per_device_sigma_and_says_so(
    tmp_path: Path, model: str, monkeypatch, caplog
) -> None:
    # CENTRED subtracts a hidden layer's batch mean: a batched pass would let each device's
    # sigma-hat see the others' samples. The others mix only the cohort's 7 x 4 samples (not
    # b = 4 or two devices' batch), or only under autograd, or only in float32.
    passes = batched_passes(monkeypatch)
    run_config = config_in(tmp_path, {"model": model, "num-devices": 7, "batch-size": 4})
    engine = Cohorts()
    with caplog.at_level(logging.WARNING, logger="client_app.cohort"):
        alone = replies(run_config, keys.QUERY_STATS, cohorts=None, model=model, tau=1)
        for _ in range(2):  # two deliveries to one engine: one log line
            batched = replies(run_config, keys.QUERY_STATS, cohorts=engine, model=model, tau=1)
            sigma = [metrics_of(r)[keys.SIGMA] for r in (*alone, *batched)]
            assert sigma[7:] == sigma[:7]  # the per-device function itself
    assert passes == []
    said = [r.getMessage() for r in caplog.records if "mixes the samples" in r.getMessage()]
    assert len(said) == 1 and f"sigma-hat of model '{model}' computed one device" in said[0]
    assert "\n" not in said[0]


def bn_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 8), torch.nn.BatchNorm1d(8))


class CountingForward(torch.nn.Module):
    """A Linear model that counts its forward calls (copies share the count)."""

    calls = 0

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CountingForward.calls += 1
        return self.linear(x)


def test_mixed_samples_are_checked_once_per_structure_dropout_and_batchnorm_train_alone(caplog):
    torch.manual_seed(0)
    x = torch.randn(6, 4)
    model = CountingForward()
    verdicts: dict = {}
    assert cohort.sample_mixing(model, x, group_size=3, verdicts=verdicts) is None
    # The batch and the first group repeated as computed; the batch, then each group, in float64.
    assert CountingForward.calls == 5
    other = CountingForward()  # another object of the same structure: the kept verdict
    assert cohort.sample_mixing(other, torch.randn(6, 4), group_size=3, verdicts=verdicts) is None
    assert CountingForward.calls == 5
    assert cohort.sample_mixing(other, x, group_size=3) is None  # nothing kept: checked again
    assert CountingForward.calls == 10
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the copy was float64
    # models that compute each sample apart pass (mlp, cnn1d: test_every_reply_field...; models
    # that mix: the tests above): GroupNorm; BatchNorm in eval mode (its running statistics)
    for model, shape in ((build_model("resnet18gn", 10, (3, 16, 16)), (3, 16, 16)),
                         (bn_model(), (1, 8, 8))):  # fmt: skip
        x = torch.randn(8, *shape, generator=torch.Generator().manual_seed(1))
        assert cohort.sample_mixing(model, x, group_size=4) is None
    # dropout and batch normalisation train per device
    model = build_model("cnn", 10, (3, 32, 32))
    assert device_round.training_blockers(model) == [
        "dropout masks come from each device's own seeded stream"
    ]
    assert device_round.training_blockers(build_model("cnn1d", 10, (1, 40))) == []
    assert "batch normalisation" in device_round.training_blockers(bn_model())[0]
    engine = Cohorts()
    with caplog.at_level(logging.WARNING, logger="client_app.cohort"):
        engine._log_once("cnn", "train", "dropout")
        engine._log_once("cnn", "train", "dropout")
    (record,) = caplog.records  # once per model and kind
    assert "training of model 'cnn'" in record.message, record.message
    assert "one device at a time" in record.message, record.message
