"""ScheduledStrategy round by round: the solver's schedule, FedAvg, failures, timeouts, budgets.

Scripted numpy clients on a fake Grid (tests/scripted_strategy.py: no Ray, no torch) answer
with values the test controls, so the expected schedule and aggregate are computed here
independently. Every policy, discovery and the work each rule asks for are in
tests/test_strategy_policies.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scripted_strategy import (
    HISTS,
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

from fedcgd_strategy import SchedulingProblem, solve
from fedcgd_strategy.policies import PolicyContext, make_policy
from fedcgd_task import keys


def assert_fedavg(new, pids) -> None:
    """The aggregate ``new`` is FedAvg of the scripted devices ``pids``, by hand."""
    want = fedavg_by_hand(np.asarray(pids))
    for k in want:
        np.testing.assert_allclose(new[k].numpy(), want[k], rtol=1e-6, atol=1e-7)


def test_schedule_reaches_exactly_the_solver_choice_and_aggregates_fedavg():
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
        label_dist=p_v,
        target_dist=np.array([0.5, 0.5]),
        min_bandwidth_hz=np.array(min_bw)[cand],
        total_bandwidth_hz=10.0,
        sigma=sigma,
        class_gradient=1.0,
        batch_size=4,
    )
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


def test_ideal_channel_everything_scheduled_equals_fedavg():
    # Ideal channel: all available, B* = 0. FedCGD with G = 0 minimises the sampling term
    # only, so it schedules everybody; the aggregate is FedAvg over all devices.
    draw = make_draw([True] * V, [0.0] * V)
    for name in ("fedcgd-fscd", "all"):
        strategy, grid = build(name, draw, initial_g=0.0)
        msgs, new = run_round(strategy, grid)
        assert len(msgs) == V
        assert_fedavg(new, np.arange(V))


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


def test_nothing_feasible_keeps_the_model():
    draw = make_draw([True] * V, [np.inf] * V)
    strategy, grid = build("fedcgd-fscd", draw)
    msgs, new = run_round(strategy, grid)
    assert msgs == [] and new is None
    assert strategy.last_record.model_kept and strategy.last_record.num_scheduled == 0


def test_post_training_policies_train_everyone_and_upload_the_scheduled():
    draw = make_draw([True] * V, [4.0, 4.0, 4.0, 4.0, 4.0, 4.0])
    strategy, grid = build("bn2", draw, protocol="train-all", total_bw=8.0)
    msgs, new = run_round(strategy, grid)
    assert len(msgs) == V  # everybody trains
    # Update norms grow with the partition id: devices 5 and 4 have the largest.
    assert strategy.last_record.scheduled == [4, 5]
    assert_fedavg(new, [4, 5])


def test_fedcgd_updates_g_from_uploads():
    draw = make_draw([True] * V, [0.0] * V)
    strategy, grid = build("fedcgd-fscd", draw, initial_g=0.0)
    run_round(strategy, grid)
    # Eq. (G_est) by hand over all six uploads: grad_v = delta_v / (tau * eta).
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


def test_device_that_times_out_after_discovery_is_excluded():
    draw = make_draw([True] * V, [0.0] * V)
    strategy, grid = build("all", draw)
    run_round(strategy, grid, 1)
    assert strategy.last_record.scheduled == list(range(V))
    grid.silent = {NODES[2]}  # answers nothing from now on: a timeout
    _, new = run_round(strategy, grid, 2)
    assert 2 in strategy.last_record.failed
    assert strategy.last_record.uploaded == [0, 1, 3, 4, 5]
    assert_fedavg(new, [0, 1, 3, 4, 5])


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
