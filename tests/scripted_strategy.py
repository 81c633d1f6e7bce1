"""ScheduledStrategy on a fake Grid whose scripted numpy clients (no Ray, no torch) answer with
the values below, so that tests compute the expected schedule and aggregate independently."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
from fake_grid import FakeGrid, make_contexts
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from channel import RoundDraw
from fedcgd_config import keys
from fedcgd_config.settings import TrainingSettings
from fedcgd_strategy.flower.strategy import ScheduledStrategy
from fedcgd_strategy.policies import PolicyContext, make_policy
from fedcgd_task.model_record import layout, model_arrays, model_record

V, C = 6, 2
NODES = [1000 + 7 * i for i in range(V)]
# Label histograms of the samples each device uses (b = 4 samples, tau = 1).
HISTS = np.array([[4, 0], [0, 4], [3, 1], [1, 3], [2, 2], [4, 0]])
SIGMAS = np.array([1.0, 2.0, 0.5, 1.5, 1.0, 3.0])
SIZES = np.array([10, 20, 30, 40, 50, 60])
# Class counts of each device's whole local dataset (query.info), unlike its round histogram.
LOCAL_HISTS = np.array([[9, 1], [1, 19], [15, 15], [10, 30], [25, 25], [50, 10]])


#: τ = 1, η = 0.1, b = 4, as Flower passes ``train_config`` to ``configure_train``.
TRAIN_CONFIG = ConfigRecord(
    TrainingSettings(local_steps=1, learning_rate=0.1, batch_size=4).to_config()
)


def global_model() -> dict[str, np.ndarray]:
    return {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3, np.float32)}


def local_delta(pid: int) -> dict[str, np.ndarray]:
    """A distinct, known update per device."""
    return {
        "w": np.full((2, 3), 0.1 * (pid + 1), np.float32),
        "b": np.full(3, -0.01 * (pid + 1), np.float32),
    }


def make_draw(available, min_bw, gain=None) -> RoundDraw:
    available = np.asarray(available, bool)
    return RoundDraw(
        available=available,
        gain_lin=np.asarray(gain if gain is not None else np.linspace(1e-9, 1e-8, V)),
        min_bandwidth_hz=np.asarray(min_bw, float),
        los=np.ones(V, bool),
        distance_2d_m=np.full(V, 50.0),
    )


def scripted_client(overrides: dict[int, dict] | None = None):
    """A ClientApp stand-in; ``overrides[pid]`` replaces metric values (malformed replies)."""
    overrides = overrides or {}

    def handle(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])
        base: dict = {keys.PARTITION_ID: pid, keys.NUM_EXAMPLES: int(SIZES[pid])}
        kind = msg.metadata.message_type
        if kind == keys.QUERY_INFO:
            info = {**base, keys.LOCAL_LABEL_HIST: LOCAL_HISTS[pid].tolist()}
            return Message(RecordDict({keys.METRICS: MetricRecord(info)}), reply_to=msg)
        metrics = {**base, keys.LABEL_HIST: HISTS[pid].tolist()}
        if msg.content.config_records[keys.CONFIG].get(keys.WANT_SIGMA, True):
            metrics[keys.SIGMA] = float(SIGMAS[pid])
        content = RecordDict()
        if kind == "train":
            ref = model_arrays(msg.content.array_records[keys.ARRAYS], layout(global_model()))
            delta = local_delta(pid)
            new = {k: ref[k] + delta[k] for k in ref}
            norm = math.sqrt(sum(float((d.astype(np.float64) ** 2).sum()) for d in delta.values()))
            metrics |= {
                keys.TRAIN_LOSS: 0.5 + 0.1 * pid,
                keys.UPDATE_NORM: norm,
                keys.TRAIN_TIME_S: 0.01,
            }
            content[keys.ARRAYS] = model_record(new)
        metrics.update(overrides.get(pid, {}))
        content[keys.METRICS] = MetricRecord(metrics)
        return Message(content, reply_to=msg)

    return handle


def build(
    policy_name: str, draw: RoundDraw, *, protocol="auto", initial_g=1.0, handler=None, silent=(),
    total_bw=10.0, query_timeout_s=120.0,
):  # fmt: skip
    handler = handler or scripted_client()
    grid = FakeGrid({n: handler for n in NODES}, make_contexts(NODES, {}, V), silent=silent)
    policy = make_policy(policy_name, PolicyContext(V, C, initial_g=initial_g))
    strategy = ScheduledStrategy(
        policy=policy, cell=SimpleNamespace(draw_round=lambda bits: draw), model_bits=1e5,
        total_bandwidth_hz=total_bw, num_devices=V, num_classes=C, protocol=protocol,
        rng=np.random.default_rng(0), target_dist=np.array([0.5, 0.5]),
        query_timeout_s=query_timeout_s, max_update_norm_ratio=10.0,
    )  # fmt: skip
    return strategy, grid


def run_round(strategy, grid, server_round=1):
    arrays = ArrayRecord({k: Array(v) for k, v in global_model().items()})
    msgs = list(strategy.configure_train(server_round, arrays, TRAIN_CONFIG, grid))
    replies = grid.send_and_receive(msgs)
    new, _ = strategy.aggregate_train(server_round, replies)
    return msgs, new


def fedavg_by_hand(pids) -> dict[str, np.ndarray]:
    g = global_model()
    w = SIZES[pids] / SIZES[pids].sum()
    return {
        k: sum(wi * (g[k] + local_delta(p)[k]) for wi, p in zip(w, pids, strict=True)) for k in g
    }
