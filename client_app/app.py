"""The Flower ClientApp of a FedCGD device (record keys in :mod:`fedcgd_config.keys`).

``query.info`` (discovery), ``query.stats`` (paper Algorithm 3, lines 6-8) and ``train`` (the
same statistics, then tau SGD steps); a handler's error costs the device its round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from flwr.app import (
    Context,
    Message,
    MetricRecord,
    MetricRecordValues,
    RecordDict,
    UserConfig,
)
from flwr.clientapp import ClientApp

from client_app.device_round import (
    DeviceRound,
    PreTrainingStats,
    device_round,
    device_stats,
    node_split,
    seeded_for,
    state_record,
    train_device,
)
from fedcgd_config import keys

if TYPE_CHECKING:
    from client_app.cohort import Cohorts


def make_app(cohorts: Cohorts | None = None) -> ClientApp:
    """A ClientApp of a FedCGD device; with ``cohorts``, results come from open cohorts."""
    client = ClientApp()
    client.lifespan()(lifespan)
    client.query(keys.QUERY_INFO_ACTION)(query_info)

    def computed(msg: Message, context: Context, compute: Callable[..., Any]) -> Any:
        """The device's round and result: from its open cohort, else computed alone, seeded."""
        if cohorts is not None and (done := cohorts.result_of(msg)) is not None:
            return done
        rnd = device_round(msg, context)
        with seeded_for(rnd):
            return rnd, compute(msg, rnd)

    @client.query(keys.QUERY_STATS_ACTION)
    def query_stats(msg: Message, context: Context) -> Message:
        """Reply with the pre-training statistics at the received model (no training)."""
        metrics = _stats_metrics(*computed(msg, context, device_stats))
        return Message(RecordDict({keys.METRICS: MetricRecord(metrics)}), reply_to=msg)

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        """Compute the pre-training statistics, run tau SGD steps, reply model and metrics."""
        rnd, trained = computed(msg, context, train_device)
        metrics = _stats_metrics(rnd, trained.stats)
        metrics[keys.TRAIN_LOSS] = trained.mean_loss
        metrics[keys.UPDATE_NORM] = trained.update_norm
        metrics[keys.TRAIN_TIME_S] = trained.train_time_s
        weights = state_record(trained.weights)
        content = RecordDict({keys.ARRAYS: weights, keys.METRICS: MetricRecord(metrics)})
        return Message(content, reply_to=msg)

    return client


def lifespan(context: Context) -> Iterator[None]:
    """Limit torch to one intra-op thread while handling messages."""
    torch.set_num_threads(1)
    yield


def node_context(
    run_config: UserConfig, partition_id: int, num_partitions: int, *, node_id: int = 1
) -> Context:
    """The Context of a node of run 1 as Flower's simulation makes it (handlers without Flower)."""
    node: UserConfig = {keys.NODE_PARTITION_ID: partition_id}
    node[keys.NODE_NUM_PARTITIONS] = num_partitions
    return Context(1, node_id, node, RecordDict(), run_config)


def _stats_metrics(rnd: DeviceRound, stats: PreTrainingStats) -> dict[str, MetricRecordValues]:
    """The metric entries shared by the stats and train replies."""
    metrics: dict[str, MetricRecordValues] = {
        keys.PARTITION_ID: int(rnd.partition_id),
        keys.NUM_EXAMPLES: len(rnd.split),
        keys.LABEL_HIST: stats.label_hist,
    }
    if stats.sigma is not None:
        metrics[keys.SIGMA] = float(stats.sigma)
    return metrics


def query_info(msg: Message, context: Context) -> Message:
    """Reply with the node's partition id, local dataset size and its whole class counts."""
    _, split = node_split(context)
    local_hist = [int(c) for c in np.bincount(split.labels, minlength=split.num_classes)]
    metrics: dict[str, MetricRecordValues] = {keys.PARTITION_ID: split.partition_id}
    metrics.update({keys.NUM_EXAMPLES: len(split), keys.LOCAL_LABEL_HIST: local_hist})
    return Message(RecordDict({keys.METRICS: MetricRecord(metrics)}), reply_to=msg)


#: The ClientApp Flower loads (``flwr run``, deployments): every device alone.
app = make_app()
