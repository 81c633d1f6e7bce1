"""One misbehaving device among six costs only itself (real ClientApp, in process): the run
finishes, the device is failed in one line, the model is the oracle's (the device silent
instead, :func:`misbehaving.silent_like`). Plus the screening rules by hand."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
from fake_grid import app_grid, make_contexts
from flwr.app import Message, MetricRecord, RecordDict
from misbehaving import FAULTS, misbehaving, silent_like
from run_results import lines
from task_settings import all_available_run

from fedcgd_config import keys
from fedcgd_config.settings import default_run_config
from fedcgd_strategy.aggregation import array_problem, fedavg, non_finite_arrays
from fedcgd_strategy.flower.discovery import discover_nodes
from fedcgd_strategy.flower.replies import (
    reported_norm_matches,
    round_histogram_problem,
    update_norm,
    update_norm_outliers,
)
from fedcgd_strategy.nodes import NodeRegistry
from server_app.app import run_federation
from server_app.config import parse_run_config
from server_app.run_folder.results import MODEL_FILE

V = 6
FAULTY = 1  # its node id is below the next partition's: it answers discovery first
NODES = [9000 + 13 * i for i in range(V)]
POLICIES = ("all", "fedcgd-fscd")
ROUNDS = 3
#: Faults of a reply's values (the device registers, its corrupted replies are refused).
REPLY_FAULTS = [
    "nan-array", "huge-layer", "max-float-all", "int32-arrays", "float64-arrays",
    "float16-arrays", "fractional-hist", "hist-x3", "fake-uniform-hist", "sigma-1e300",
    "num-examples-1e15", "lie-update-norm", "empty-reply",
]  # fmt: skip
#: Faults after which the device never registers.
NEVER_REGISTERS = ["claim-partition", "raising"]


def run(
    tmp_path: Path, name: str, wrap, *, cohorts: bool = True, **overrides
) -> tuple[list[dict], dict]:
    """A run whose nodes answer as ``wrap(the ClientApp)`` does (cohort execution on unless
    ``cohorts`` is False)."""
    run_config = {**default_run_config(), "num-devices": V, "num-server-rounds": ROUNDS}
    run_config |= {"channel.availability-prob": 0.8, "local-steps": 2, "eval-every": ROUNDS}
    run_config |= {**overrides, "result-dir": str(tmp_path / name)}
    grid = app_grid(make_contexts(NODES, run_config, V), wrap=wrap, cohorts=cohorts)
    run_federation(grid, parse_run_config(run_config))
    return lines(tmp_path / name), torch.load(tmp_path / name / MODEL_FILE)


@functools.cache
def oracle(tmp_root: str, policy: str, fault: str) -> tuple[list[dict], dict]:
    """The run in which the faulty device answers nothing where ``fault`` would corrupt."""
    return run(
        Path(tmp_root), f"oracle-{policy}-{fault}", lambda app: silent_like(app, fault, FAULTY),
        policy=policy,
    )  # fmt: skip


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("misbehaving"))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fault", [*REPLY_FAULTS, *NEVER_REGISTERS])
def test_a_faulty_device_costs_only_itself(tmp_root, policy, fault):
    lines, model = run(
        Path(tmp_root), f"{policy}-{fault}", lambda app: misbehaving(app, fault, FAULTY),
        policy=policy,
    )  # fmt: skip
    assert [x["round"] for x in lines] == list(range(1, ROUNDS + 1))  # the run finished
    # faults of the same message kinds share an oracle: ``silent_like`` reads only those
    same_kinds = next(f for f in FAULTS if FAULTS[f].kinds == FAULTS[fault].kinds)
    oracle_lines, expected = oracle(tmp_root, policy, same_kinds)
    if fault in NEVER_REGISTERS:  # as if absent; the victim partition is served by its own node
        for line in lines:
            assert FAULTY not in line["scheduled"] and FAULTY not in line["uploaded"]
        assert [x["uploaded"] for x in lines] == [x["uploaded"] for x in oracle_lines]
        assert any((FAULTY + 1) % V in x["uploaded"] for x in lines)
    hits = 0
    for line in lines if fault in REPLY_FAULTS else ():
        assert FAULTY not in line["uploaded"]
        if FAULTY in line["scheduled"]:
            assert FAULTY in line["failed"]
        if FAULTY in line["failed"]:
            reason = line["failed_reasons"][str(FAULTY)]
            assert reason and "\n" not in reason  # a one-line reason
            assert fault != "huge-layer" or "update norm" in reason, reason
            hits += 1
    assert hits > 0 or fault in NEVER_REGISTERS, "the faulty device was never asked"
    assert model.keys() == expected.keys()
    for key, value in model.items():
        assert value.dtype == torch.float32, key
        assert torch.isfinite(value).all(), key
        np.testing.assert_allclose(value.numpy(), expected[key].numpy(), atol=1e-6, err_msg=key)


def test_a_node_that_claims_another_partition_cannot_take_it_over():
    run_config = {**default_run_config(), "num-devices": V}
    contexts = make_contexts(NODES, run_config, V)
    grid = app_grid(contexts, wrap=lambda app: misbehaving(app, "claim-partition", FAULTY))
    config = parse_run_config(run_config)
    from fedcgd_task.datasets import load_train_set
    from fedcgd_task.partition import all_partitions

    labels = load_train_set(config.task).labels
    truth = np.stack(
        [np.bincount(labels[rows], minlength=10) for rows in all_partitions(config.task)]
    )
    registry = NodeRegistry(V, 10, truth)
    discover_nodes(grid, registry, 1, 10.0)
    victim = FAULTY + 1
    assert registry.node(victim) == NODES[victim]  # the liar answered first, and was refused
    assert registry.partition(NODES[FAULTY]) is None
    # Without the true counts the first claimant keeps the partition (the old behaviour).
    naive = NodeRegistry(V, 10)
    discover_nodes(grid, naive, 1, 10.0)
    assert naive.node(victim) == NODES[FAULTY]


def test_update_norm_outliers_and_the_round_histogram_rule_by_hand():
    norms = [1.0, 2.0, 3.0, 100.0]
    # Medians of the others: [3, 3, 2, 2]; k = 10 -> only 100 > 20 is refused.
    assert update_norm_outliers(norms, 10.0).tolist() == [False, False, False, True]
    # k = 1.4: 3 > 1.4 * 2 = 2.8 and 100 > 2.8 refused; 2 <= 1.4 * 3 = 4.2 kept.
    assert update_norm_outliers(norms, 1.4).tolist() == [False, False, True, True]
    assert update_norm_outliers(norms, 0.0).tolist() == [False] * 4  # off
    # Two uploads: each is held to the other one.
    assert update_norm_outliers([1.0, 50.0], 10.0).tolist() == [False, True]
    # One upload: the last round's median stands in; without one it passes.
    assert update_norm_outliers([50.0], 10.0, reference=1.0).tolist() == [True]
    assert update_norm_outliers([50.0], 10.0, reference=10.0).tolist() == [False]
    assert update_norm_outliers([50.0], 10.0).tolist() == [False]
    # The absolute bound applies whatever k, even 0.
    assert update_norm_outliers([1.0, np.inf, 4e38], 0.0).tolist() == [False, True, True]
    # Histograms: 5 local samples (3 of class 0, 2 of class 1) read cyclically for tau b = 12:
    # q, r = 2, 2; class 0 appears 6 .. 6 + min(2, 3) = 8 times, class 1 4 .. 6 times.
    said = "allowed with the local class counts reported at discovery:"
    assert round_histogram_problem([5, 7], [3, 2], 12) == f"class 0 has 5 samples; {said} 6 .. 8"
    assert (
        round_histogram_problem([6, 3, 3], [3, 2, 1], 12) == f"class 1 has 3 samples; {said} 4 .. 4"
    )
    assert round_histogram_problem([7, 5], [3, 2], 12) is None
    assert "sums to 13" in round_histogram_problem([8, 5], [3, 2], 12)
    assert "class 0 has 9" in round_histogram_problem([9, 3], [3, 2], 12)
    # A device without class 1 uses its 6 samples of class 0 exactly twice: 12 .. 12.
    assert round_histogram_problem([12, 0], [6, 0], 12) is None
    assert "class 0 has 6 samples" in round_histogram_problem([6, 6], [6, 0], 12)
    assert "12 .. 12" in round_histogram_problem([6, 6], [6, 0], 12)


def test_server_and_client_compute_the_same_update_norm_and_a_reported_one_must_match():
    """One definition on both sides, also for floating buffers (BatchNorm running means), and
    by hand, where integer buffers do not count."""
    ref = {"w": np.zeros(2, np.float32), "n": np.array(3, np.int64)}
    assert update_norm({"w": np.array([3.0, 4.0], np.float32), "n": np.array(7)}, ref) == 5.0
    import torch.nn as nn

    from client_app.device_round import floating_state
    from client_app.device_round import update_norm as client_update_norm

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    before = floating_state(model)
    reference = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    model.train()
    model(torch.randn(8, 3))  # moves the running statistics (buffers), not the weights
    with torch.no_grad():
        model[0].weight.add_(0.5)
    local = {k: v.numpy() for k, v in model.state_dict().items()}
    server = update_norm(local, reference)
    assert client_update_norm(before, model.state_dict()) == pytest.approx(server, rel=1e-12)
    assert reported_norm_matches(client_update_norm(before, model.state_dict()), server)
    # the rule: a reported norm must be that of the upload
    assert reported_norm_matches(5.0, 5.0)
    assert reported_norm_matches(5.0 + 4e-5, 5.0)  # 8e-6 relative: summation order
    assert not reported_norm_matches(5.0 + 6e-5, 5.0)  # 1.2e-5 relative
    assert not reported_norm_matches(1e3, 0.8)
    assert reported_norm_matches(0.0, 5e-10) and not reported_norm_matches(0.0, 2e-9)


def test_an_upload_of_another_dtype_is_named_and_a_non_finite_aggregate_keeps_the_model():
    ref = np.zeros(2, np.float32)
    said = array_problem(np.ones(2, np.complex64), ref)
    assert said == "has dtype complex64; the model's is float32"
    assert array_problem(np.array(["a", "b"]), ref) == "has dtype <U1; the model's is float32"
    assert array_problem([1.0, 2.0], ref) == "is list, not a numeric array"
    out = fedavg([{"w": np.array([1, 3], np.int32)}, {"w": np.ones(2)}], [1, 1], {"w": ref})
    assert out["w"].dtype == np.float32 and out["w"].tolist() == [1.0, 2.0]  # the model's dtype
    # Replies cannot carry inf past the checks, so the last line of defence is tested directly:
    # two finite float64 uploads whose average does not fit float32 (the global model's dtype).
    from scripted_strategy import build

    from fedcgd_config.settings import TrainingSettings
    from fedcgd_strategy.flower.replies import DeviceReport
    from fedcgd_strategy.flower.strategy import RoundInProgress

    reference = {"w": np.zeros(2, np.float32)}
    huge = {"w": np.full(2, 1e39)}
    assert non_finite_arrays(fedavg([huge, huge], [1, 1], reference)) == ["w"]
    strategy, _ = build("all", None)  # type: ignore[arg-type]  # no round is drawn here
    state = RoundInProgress(
        draw=None,  # type: ignore[arg-type]
        training=TrainingSettings(local_steps=1, learning_rate=0.1, batch_size=1),
        reference=reference,
        available=[0, 1],
    )
    uploads = [DeviceReport(v, v, 1, np.array([1, 0]), float("nan"), arrays=huge) for v in (0, 1)]
    arrays, reason = strategy._aggregate(uploads, state)
    assert arrays is None and reason is not None and "not finite" in reason and "w" in reason
    assert strategy._aggregate([], state) == (None, "nothing uploaded")


def test_the_module_level_app_reads_the_fault_from_the_environment(tmp_path, monkeypatch):
    # What `flwr run` loads as `misbehaving:app`: the same fault, chosen by environment variables.
    import misbehaving

    one_round = {"num-server-rounds": 1, "channel.availability-prob": 1.0}
    monkeypatch.setenv("FEDCGD_FAULT", "num-examples-1e15")
    monkeypatch.setenv("FEDCGD_FAULT_PARTITION", str(FAULTY))

    def flower_loads(_app):  # every node runs what `flwr run` loads as `misbehaving:app`
        return misbehaving.app

    lines, _ = run(tmp_path, "env", flower_loads, policy="all", **one_round)
    assert FAULTY in lines[0]["failed"]
    assert "num-examples" in lines[0]["failed_reasons"][str(FAULTY)]
    monkeypatch.delenv("FEDCGD_FAULT")
    lines, _ = run(tmp_path, "plain", flower_loads, policy="all", **one_round)
    assert lines[0]["failed"] == [] and FAULTY in lines[0]["uploaded"]


@pytest.mark.slow
def test_flwr_run_a_device_uploading_1e30_is_refused(tmp_path):
    """Under ``flwr run`` (Ray): the harness as ``misbehaving:app``, fault from the environment."""
    from wrapped_project import run_wrapped

    out = tmp_path / "out"
    extra = {"policy": "all", "channel.deadline-s": 1.0, "local-steps": 2}
    proc = run_wrapped(
        all_available_run(out, 4, 3, extra),
        wrapper=Path(__file__).resolve().parent / "misbehaving.py",
        env={"FEDCGD_FAULT": "huge-layer", "FEDCGD_FAULT_PARTITION": str(FAULTY)},
        num_supernodes=4,
        workdir=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    written = lines(out)
    assert [x["round"] for x in written] == [1, 2, 3]
    asked = [x for x in written if FAULTY in x["scheduled"]]
    assert asked, [x["scheduled"] for x in written]
    for line in asked:
        assert FAULTY not in line["uploaded"]
        assert "update norm" in line["failed_reasons"][str(FAULTY)]
    model = torch.load(out / MODEL_FILE)
    assert all(bool(torch.isfinite(v).all()) and float(v.abs().max()) < 1e3 for v in model.values())


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (keys.SIGMA, 2.5, None),  # sane values: accepted
        (keys.LABEL_HIST, [2**70, 0], "2\\*\\*53"),
        (keys.LABEL_HIST, [0.5, 0.5], "integer class counts"),
        (keys.NUM_EXAMPLES, 2**70, "num-examples"),
        (keys.SIGMA, 10**400, "sigma"),
        (keys.SIGMA, 1e300, "largest float32"),
        (keys.PARTITION_ID, 2**70, "partition-id"),
    ],
)
def test_huge_python_ints_and_floats_are_refused_not_raised(key, value, match):
    from fedcgd_strategy.flower.replies import MalformedReplyError, read_report
    from fedcgd_strategy.flower.simulation import outside_flower

    outside_flower()  # Flower's messages read the task identity a ServerApp sets
    metrics = {keys.PARTITION_ID: 0, keys.NUM_EXAMPLES: 4, keys.LABEL_HIST: [3, 1], key: value}
    request = Message(RecordDict(), dst_node_id=1, message_type="train")
    reply = Message(RecordDict({keys.METRICS: MetricRecord(metrics)}), reply_to=request)
    read = functools.partial(
        read_report, reply, num_devices=2, num_classes=2, registered=0,
        local_counts=np.array([3, 1]), num_samples=4,
    )  # fmt: skip
    if match is None:
        report = read()
        assert report.label_hist.tolist() == [3, 1] and report.sigma == 2.5
        return
    with pytest.raises(MalformedReplyError, match=match):
        read()
