"""ScheduledStrategy with every policy: budgets, discovery of nodes, only the work a rule needs.

Scripted numpy clients on a fake Grid (tests/scripted_strategy.py: no Ray, no torch); the
schedules expected are computed here independently.
"""

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
    V,
    build,
    make_draw,
    run_round,
    scripted_client,
)

from fedcgd_strategy.policies import POLICY_NAMES
from fedcgd_task import keys

# --- every policy: budget, candidates, recorded terms ------------------------------------------

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


# --- discovery: joins, leaves, duplicate claims ------------------------------------------------


def test_node_that_joins_later_is_discovered_and_scheduled():
    draw = make_draw([True] * V, [0.0] * V)
    strategy, grid = build("all", draw)
    late = grid.handlers.pop(NODES[5])
    run_round(strategy, grid, 1)
    assert strategy.last_record is not None and strategy.last_record.scheduled == [0, 1, 2, 3, 4]
    grid.handlers[NODES[5]] = late
    run_round(strategy, grid, 2)
    assert strategy.last_record.scheduled == list(range(V))


def test_node_that_leaves_is_forgotten_and_a_duplicate_claimant_takes_over():
    draw = make_draw([True] * V, [0.0] * V)
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


# --- no work a rule does not need ----------------------------------------------------------


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
