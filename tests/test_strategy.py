"""ScheduledStrategy round by round on scripted clients (tests/scripted_strategy.py): the
solver's schedule, FedAvg, failures, timeouts, budgets, every policy, discovery of nodes and
only the work a rule needs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fake_grid import make_contexts
from scripted_strategy import (
    HISTS,
    LOCAL_HISTS,
    NODES,
    SIGMAS,
    SIZES,
    C,
    V,
    build,
    fedavg_by_hand,
    local_delta,
    make_draw,
    run_round,
    scripted_client,
)

from fedcgd_config import keys
from fedcgd_strategy import SchedulingProblem, solve
from fedcgd_strategy.policies import POLICY_NAMES, PolicyContext, make_policy


def assert_fedavg(new, pids) -> None:
    """The aggregate ``new`` is FedAvg of the scripted devices ``pids``, by hand."""
    want = fedavg_by_hand(np.asarray(pids))
    for k in want:
        np.testing.assert_allclose(new[k].numpy(), want[k], rtol=1e-6, atol=1e-7)


def test_schedule_reaches_exactly_the_solver_or_post_training_choice_and_aggregates_fedavg():
    available = [True, True, True, True, False, True]
    min_bw = [3.0, 3.0, 2.0, 2.0, 1.0, 4.0]
    strategy, grid = build("fedcgd-fscd", make_draw(available, min_bw))
    msgs, new = run_round(strategy, grid)

    # The expected schedule from the P1 solver on the same data, built here independently.
    cand = np.array([0, 1, 2, 3, 5])
    p_v = HISTS[cand] / 4.0
    w = SIZES[cand] / SIZES[cand].sum()
    sigma = math.sqrt(float(np.sum(w * SIGMAS[cand] ** 2)))  # eq. (global_est_sigma)
    problem = SchedulingProblem(
        label_dist=p_v, target_dist=np.array([0.5, 0.5]), min_bandwidth_hz=np.array(min_bw)[cand],
        total_bandwidth_hz=10.0, sigma=sigma, class_gradient=1.0, batch_size=4,
    )  # fmt: skip
    expected = cand[solve(problem, "fscd").selected]
    assert expected.size >= 2

    train_nodes = sorted(m.metadata.dst_node_id for m in msgs)
    assert train_nodes == sorted(NODES[p] for p in expected)
    # Device 4 was unavailable: never queried.
    queried = {
        m.metadata.dst_node_id for m in grid.sent if m.metadata.message_type == keys.QUERY_STATS
    }
    assert NODES[4] not in queried and len(queried) == 5

    assert_fedavg(new, expected)
    rec = strategy.last_record
    assert rec is not None
    assert rec.scheduled == expected.tolist()
    assert rec.num_available == 5
    assert rec.bandwidth_used_hz == pytest.approx(float(np.sum(np.array(min_bw)[expected])))
    assert rec.sigma == pytest.approx(sigma)
    # a post-training rule: everybody trains, the scheduled upload
    draw = make_draw([True] * V, [4.0, 4.0, 4.0, 4.0, 4.0, 4.0])
    strategy, grid = build("bn2", draw, protocol="train-all", total_bw=8.0)
    msgs, new = run_round(strategy, grid)
    assert len(msgs) == V  # everybody trains
    # Update norms grow with the partition id: devices 5 and 4 have the largest.
    assert strategy.last_record.scheduled == [4, 5]
    assert_fedavg(new, [4, 5])


def test_ideal_channel_schedules_all_and_updates_g_and_nothing_feasible_keeps_the_model():
    # Ideal channel: all available, B* = 0. FedCGD with G = 0 minimises the sampling term
    # only, so it schedules everybody; the aggregate is FedAvg over all devices.
    draw = make_draw([True] * V, [0.0] * V)
    for name in ("all", "fedcgd-fscd"):
        strategy, grid = build(name, draw, initial_g=0.0)
        msgs, new = run_round(strategy, grid)
        assert len(msgs) == V
        assert_fedavg(new, np.arange(V))
    # FedCGD's eq. (G_est) by hand over all six uploads: grad_v = delta_v / (tau * eta).
    flat = [np.concatenate([d["w"].ravel(), d["b"].ravel()]) for d in map(local_delta, range(V))]
    deltas = np.stack(flat).astype(np.float64) / 0.1
    w = SIZES / SIZES.sum()
    mean = (w[:, None] * deltas).sum(0)
    p_v = HISTS / 4.0
    l1 = np.abs(p_v - 0.5).sum(1)
    keep = l1 > 1e-12
    ratios = np.linalg.norm(deltas - mean, axis=1)[keep] / l1[keep]
    assert strategy.last_record.class_gradient_next == pytest.approx(ratios.max(), rel=1e-5)
    assert strategy.last_record.class_gradient_used == 0.0
    # nothing feasible keeps the model
    draw = make_draw([True] * V, [np.inf] * V)
    strategy, grid = build("fedcgd-fscd", draw)
    msgs, new = run_round(strategy, grid)
    assert msgs == [] and new is None
    assert strategy.last_record.model_kept and strategy.last_record.num_scheduled == 0


def test_failing_devices_are_excluded_and_the_round_goes_on():
    draw = make_draw([True] * V, [0.0] * V)
    overrides = {
        1: {keys.LABEL_HIST: [1, 2, 1]},  # wrong histogram length
        2: {keys.SIGMA: float("nan")},  # NaN sigma
        3: {keys.LABEL_HIST: [-1, 5]},  # negative count
    }
    base = scripted_client(overrides)

    def handler(msg, ctx):
        if ctx.node_config["partition-id"] == 0 and msg.metadata.message_type != keys.QUERY_INFO:
            raise RuntimeError("device crashed")
        return base(msg, ctx)

    strategy, grid = build("all", draw, handler=handler, silent=[NODES[4]], protocol="query")
    _msgs, new = run_round(strategy, grid)
    rec = strategy.last_record
    assert rec is not None
    # Device 4 never answered discovery, so it has no node mapping and is not "available".
    assert rec.scheduled == [5]
    assert rec.failed == [0, 1, 2, 3]
    assert_fedavg(new, [5])


def test_exact_time_limit_reaches_the_solver(monkeypatch):
    import fedcgd_strategy.policies.registry as policies

    seen = {}
    real_solve = policies.solve

    def spy(problem, method, **kwargs):
        seen.update(method=method, **kwargs)
        return real_solve(problem, method, **kwargs)

    monkeypatch.setattr(policies, "solve", spy)
    policy = make_policy(
        "fedcgd-exact", PolicyContext(num_devices=V, num_classes=C, exact_time_limit_s=2.5)
    )
    strategy, grid = build("fedcgd-exact", make_draw([True] * V, [1.0] * V))
    strategy.policy = policy
    run_round(strategy, grid)
    assert seen["method"] == "exact" and seen["milp_time_limit_s"] == 2.5
    assert strategy.last_record.num_scheduled >= 1


BUDGET_DRAW = ([True, True, True, True, False, True], [3.0, 3.0, 2.0, 2.0, 1.0, 4.0])


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_schedules_candidates_within_budget_and_records_plain_wemd(name):
    # Device 4 is unavailable, device 2 crashes: neither may ever be scheduled. Budget 7 Hz.
    base = scripted_client()

    def handler(msg, ctx):
        if ctx.node_config["partition-id"] == 2 and msg.metadata.message_type != keys.QUERY_INFO:
            raise RuntimeError("device crashed")
        return base(msg, ctx)

    available, min_bw = BUDGET_DRAW
    strategy, grid = build(name, make_draw(available, min_bw), handler=handler, total_bw=7.0)
    # Rules that need the channel only (BC, all) are not told about the crash before training.
    channel_only = strategy.protocol == "channel"
    for server_round in (1, 2, 3):
        run_round(strategy, grid, server_round)
        rec = strategy.last_record
        assert rec is not None and rec.round == server_round
        scheduled = np.array(rec.scheduled, dtype=int)
        assert 4 not in rec.scheduled and 2 not in rec.uploaded
        assert rec.num_candidates == (5 if channel_only else 4)
        if not channel_only:
            assert 2 not in rec.scheduled and rec.failed == [2]
        used = float(np.sum(np.array(min_bw)[scheduled]))
        assert rec.bandwidth_used_hz == pytest.approx(used)
        if name != "all":  # "all" ignores the budget by definition (FedAvg reference)
            assert used <= 7.0 + 1e-9
        reported = np.array([v for v in rec.scheduled if v != 2], dtype=int)
        assert rec.uploaded == reported.tolist()
        if reported.size == 0:
            assert math.isnan(rec.wemd)
            continue
        # Plain WEMD (G = 1), computed here from the scripted histograms of the uploads.
        mean = (HISTS[reported] / 4.0).mean(axis=0)
        assert rec.wemd == pytest.approx(float(np.abs(mean - 0.5).sum()), abs=1e-12)
        if not strategy.policy.needs_sigma:  # σ̂ is computed only for FedCGD
            assert math.isnan(rec.sigma) and math.isnan(rec.sampling_term)
            continue
        cand = np.array([0, 1, 3, 5])
        w = SIZES[cand] / SIZES[cand].sum()
        sigma = math.sqrt(float(np.sum(w * SIGMAS[cand] ** 2)))
        assert rec.sigma == pytest.approx(sigma)
        assert rec.sampling_term == pytest.approx(sigma / math.sqrt(4 * scheduled.size))


@pytest.mark.parametrize(
    ("gain", "min_bw", "total_bw", "expected"),
    [
        # gains 6 (device 1) and 5 (device 3) fit 3 + 3 = 6 Hz; the next (4, device 5) does not
        ([1, 6, 3, 5, 2, 4], [3.0] * V, 7.0, [1, 3]),
        # best gains first: 4 + 4 fit (8 Hz), the third (4 Hz) does not: the "stop" rule
        ([6, 5, 4, 3, 2, 1], [4.0, 4.0, 4.0, 1.0, 1.0, 1.0], 10.0, [0, 1]),
    ],
)
def test_best_channel_packs_by_gain_not_by_id(gain, min_bw, total_bw, expected):
    draw = make_draw([True] * V, min_bw, gain=np.array(gain, float) * 1e-9)
    strategy, grid = build("bc", draw, total_bw=total_bw)
    msgs, _ = run_round(strategy, grid)
    assert sorted(m.metadata.dst_node_id for m in msgs) == [NODES[v] for v in expected]
    assert strategy.last_record is not None and strategy.last_record.scheduled == expected


def test_nodes_that_join_later_time_out_leave_or_claim_a_served_partition():
    draw = make_draw([True] * V, [0.0] * V)
    strategy, grid = build("all", draw)
    late = grid.handlers.pop(NODES[5])
    run_round(strategy, grid, 1)
    assert strategy.last_record is not None and strategy.last_record.scheduled == [0, 1, 2, 3, 4]
    grid.handlers[NODES[5]] = late
    run_round(strategy, grid, 2)
    assert strategy.last_record.scheduled == list(range(V))
    grid.silent = {NODES[2]}  # answers nothing from now on: a timeout
    _, new = run_round(strategy, grid, 3)
    assert 2 in strategy.last_record.failed
    assert strategy.last_record.uploaded == [0, 1, 3, 4, 5]
    assert_fedavg(new, [0, 1, 3, 4, 5])
    # a node that leaves is forgotten and a duplicate claimant takes over (a new federation)
    strategy, grid = build("all", draw)
    # A seventh node claims partition 3, already served by NODES[3].
    twin = 5555
    grid.handlers[twin] = grid.handlers[NODES[3]]
    grid.contexts[twin] = make_contexts([twin], {}, V)[twin]
    grid.contexts[twin].node_config["partition-id"] = 3
    run_round(strategy, grid, 1)
    assert strategy.registry.node(3) == NODES[3] and strategy.registry.partition(twin) is None
    assert strategy.last_record is not None and strategy.last_record.uploaded == list(range(V))
    # NODES[3] disconnects: the twin is asked again and serves partition 3 from round 2 on.
    del grid.handlers[NODES[3]]
    msgs, _ = run_round(strategy, grid, 2)
    assert strategy.registry.node(3) == twin
    assert twin in {m.metadata.dst_node_id for m in msgs}
    assert strategy.last_record.uploaded == list(range(V))


def sent_config(grid, kind):
    return [
        m.content.config_records[keys.CONFIG] for m in grid.sent if m.metadata.message_type == kind
    ]


@pytest.mark.parametrize(
    ("name", "protocol", "query_sigma", "train_sigma"),
    [
        ("fedcgd-fscd", "query", True, False),
        ("fedcgd-fscd", "train-all", None, True),
        ("fedcbs", "query", False, False),
        ("bn2", "train-all", None, False),
        ("poc", "train-all", None, False),
        ("bc", "channel", None, False),
        ("all", "channel", None, False),
        ("bc", "query", False, False),
    ],
)
def test_devices_do_only_the_work_the_rule_needs(name, protocol, query_sigma, train_sigma):
    strategy, grid = build(name, make_draw([True] * V, [1.0] * V), protocol=protocol)
    msgs, _ = run_round(strategy, grid)
    assert msgs
    queries = sent_config(grid, keys.QUERY_STATS)
    if query_sigma is None:
        assert queries == []  # no query phase at all
    else:
        assert len(queries) == V and {q[keys.WANT_SIGMA] for q in queries} == {query_sigma}
    assert {c[keys.WANT_SIGMA] for c in sent_config(grid, "train")} == {train_sigma}


@pytest.mark.parametrize("protocol", ["channel", "query", "train-all"])
def test_fedcbs_uses_the_whole_local_distribution_from_discovery(protocol):
    # Same rng seed and state as the strategy: the schedule must be Fed-CBS on LOCAL_HISTS.
    from fedcgd_strategy.selectors import FedCBSState, fedcbs_select

    available, min_bw = [True, True, False, True, True, True], [2.0, 3.0, 1.0, 2.0, 4.0, 1.0]
    strategy, grid = build("fedcbs", make_draw(available, min_bw), protocol=protocol)
    state, rng = FedCBSState(V), np.random.default_rng(0)
    local = LOCAL_HISTS / LOCAL_HISTS.sum(axis=1, keepdims=True)
    for server_round in (1, 2, 3):
        run_round(strategy, grid, server_round)
        bandwidth = np.where(available, min_bw, np.inf)
        expected = fedcbs_select(
            state, np.array(available), local, SIZES.astype(float), bandwidth, 10.0, rng
        )
        assert strategy.last_record is not None
        assert strategy.last_record.scheduled == np.flatnonzero(expected).tolist()
