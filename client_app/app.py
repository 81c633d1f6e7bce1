"""The Flower ClientApp of a FedCGD device (Message API).

Message types and what the device answers (record keys from :mod:`fedcgd_task.keys`):

* ``query.info``: metrics {partition-id, num-examples, local-label-hist} (class counts of the
  whole local dataset, reported once: Fed-CBS's class distribution).
* ``query.stats``: given the global model (ArrayRecord ``arrays``) and the round config
  (ConfigRecord ``config``: server-round, local-steps, lr, batch-size), the pre-training
  statistics of paper Algorithm 3, lines 6-8, without training: partition-id, num-examples
  (|D_v|), label-hist (class counts of all tau b samples of this round's batches) and sigma-hat
  (paper eq. (local_est_sigma) at the received model, first batch).
* ``train``: the same statistics (identical to the stats reply of the same round, since the
  batches depend only on seed, round and partition id), then tau SGD steps on those batches;
  replies the updated model under ``arrays`` plus train-loss, update-norm and train-time-s.

The global model is evaluated centrally by the ServerApp, so there is no ``evaluate`` handler.

The module's ``app`` (what Flower loads: ``clientapp = "client_app.app:app"``) is
:func:`make_app` without cohorts; the in-process engine builds its own with the
:class:`~client_app.cohort.Cohorts` it owns, so no module global links the engine and the
handlers.

The partition id comes from ``context.node_config["partition-id"]``; ``num-partitions`` must
equal the run config's ``num-devices``. Errors raised in a handler propagate; Flower turns them
into an error reply, which the server skips. The handlers keep no per-node state; a process
keeps one model skeleton per architecture (:func:`client_app.device_round.process_model`) and
loads each message's weights into it.

The ClientApp sets ``torch.set_num_threads(1)`` when it handles a message (in its lifespan, not
at import of the library modules): in simulation several Ray workers share the machine's cores,
and one intra-op thread each avoids oversubscription.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch
from flwr.app import (
    ArrayRecord,
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
    decoded_state,
    device_round,
    device_stats,
    floating_state,
    node_partition,
    pre_training_stats,
    received_model,
    round_config,
    run_settings,
    train_device,
    update_norm,
)
from fedcgd_task import keys
from fedcgd_task.local_data import local_split

if TYPE_CHECKING:
    from client_app.cohort import Cohorts

#: Intra-op threads per ClientApp process.
CLIENT_NUM_THREADS = 1


def make_app(cohorts: Cohorts | None = None) -> ClientApp:
    """A ClientApp of a FedCGD device; with ``cohorts``, one of the in-process engine's.

    ``cohorts``: the engine's :class:`~client_app.cohort.Cohorts` (its grid opens them around
    each delivery): :func:`query_stats` and :func:`train` take their device's result from its
    open cohort where it has one. None (the module's ``app``, what Flower loads): every message
    is computed for its device alone.
    """
    client = ClientApp()
    client.lifespan()(lifespan)
    client.query(keys.QUERY_INFO_ACTION)(query_info)

    @client.query(keys.QUERY_STATS_ACTION)
    def stats(msg: Message, context: Context) -> Message:
        return query_stats(msg, context, cohorts)

    @client.train()
    def trained(msg: Message, context: Context) -> Message:
        return train(msg, context, cohorts)

    return client


def lifespan(context: Context) -> Iterator[None]:
    """Limit torch to :data:`CLIENT_NUM_THREADS` intra-op thread(s) while handling messages."""
    torch.set_num_threads(CLIENT_NUM_THREADS)
    yield


def node_context(
    run_config: UserConfig, partition_id: int, num_partitions: int, *, node_id: int = 1
) -> Context:
    """The Context of a node of run 1 (empty state), to call the handlers without Flower.

    The one place such a Context is built (the in-process engine, benchmarks and tests use it):
    ``node_config`` holds :data:`fedcgd_task.keys.NODE_PARTITION_ID` and
    :data:`fedcgd_task.keys.NODE_NUM_PARTITIONS` as Flower's simulation sets them.
    """
    return Context(
        run_id=1,
        node_id=node_id,
        node_config={
            keys.NODE_PARTITION_ID: partition_id,
            keys.NODE_NUM_PARTITIONS: num_partitions,
        },
        state=RecordDict(),
        run_config=run_config,
    )


def _stats_metrics(rnd: DeviceRound, stats: PreTrainingStats) -> dict[str, MetricRecordValues]:
    """Return the metric entries shared by the stats and train replies (Python scalars)."""
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
    settings = run_settings(context.run_config)
    partition_id = node_partition(context, settings)
    split = local_split(settings, partition_id)
    local_hist = np.bincount(split.labels, minlength=split.num_classes)
    metrics = MetricRecord(
        {
            keys.PARTITION_ID: partition_id,
            keys.NUM_EXAMPLES: len(split),
            keys.LOCAL_LABEL_HIST: [int(c) for c in local_hist],
        }
    )
    return Message(RecordDict({keys.METRICS: metrics}), reply_to=msg)


def query_stats(msg: Message, context: Context, cohorts: Cohorts | None = None) -> Message:
    """Reply with the pre-training statistics at the received model (no training).

    In an open cohort of ``cohorts`` (:mod:`client_app.cohort`, the in-process engine) the
    statistics were computed with the cohort's other devices; otherwise here, for this device
    alone.
    """
    done = None if cohorts is None else cohorts.stats_of(msg)
    rnd, stats = done if done is not None else _alone(msg, context)
    metrics = MetricRecord(_stats_metrics(rnd, stats))
    return Message(RecordDict({keys.METRICS: metrics}), reply_to=msg)


def _alone(msg: Message, context: Context) -> tuple[DeviceRound, PreTrainingStats]:
    rnd = device_round(msg, context)
    return rnd, device_stats(msg, rnd)


def train(msg: Message, context: Context, cohorts: Cohorts | None = None) -> Message:
    """Compute the pre-training statistics, run tau SGD steps, reply model and metrics.

    In an open cohort of ``cohorts`` (:mod:`client_app.cohort`) the steps ran with the cohort's
    other devices; otherwise here, for this device alone
    (:func:`client_app.device_round.train_device`).
    """
    done = None if cohorts is None else cohorts.trained_of(msg)
    if done is None:
        rnd = device_round(msg, context)
        done = (rnd, train_device(msg, rnd))
    rnd, trained = done
    metrics = _stats_metrics(rnd, trained.stats)
    metrics[keys.TRAIN_LOSS] = trained.mean_loss
    metrics[keys.UPDATE_NORM] = trained.update_norm
    metrics[keys.TRAIN_TIME_S] = trained.train_time_s
    content = RecordDict(
        {keys.ARRAYS: ArrayRecord(trained.weights), keys.METRICS: MetricRecord(metrics)}
    )
    return Message(content, reply_to=msg)


#: The ClientApp Flower loads (``flwr run``, deployments): every device alone.
app = make_app()

__all__ = [
    "PreTrainingStats",
    "app",
    "decoded_state",
    "floating_state",
    "make_app",
    "node_context",
    "node_partition",
    "pre_training_stats",
    "received_model",
    "round_config",
    "update_norm",
]
