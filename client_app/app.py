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

The partition id comes from ``context.node_config["partition-id"]``; ``num-partitions`` must
equal the run config's ``num-devices``. Errors raised in a handler propagate; Flower turns them
into an error reply, which the server skips. The handlers keep no per-node state; a process
keeps one model skeleton per architecture (:func:`process_model`) and loads each message's
weights into it.

The ClientApp sets ``torch.set_num_threads(1)`` when it handles a message (in its lifespan, not
at import of the library modules): in simulation several Ray workers share the machine's cores,
and one intra-op thread each avoids oversubscription.
"""

from __future__ import annotations

import functools
import math
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import (
    Array,
    ArrayRecord,
    Context,
    Message,
    MetricRecord,
    MetricRecordValues,
    RecordDict,
    UserConfig,
)
from flwr.clientapp import ClientApp
from torch import nn

from client_app.sigma import gradient_spread
from fedcgd_task import keys
from fedcgd_task.local_data import LocalSplit, local_split
from fedcgd_task.models import build_model
from fedcgd_task.settings import TaskSettings, TrainingSettings, read_round_config
from fedcgd_task.training import compute_device, dropout_seed, local_batches, train_local

#: Intra-op threads per ClientApp process.
CLIENT_NUM_THREADS = 1

app = ClientApp()


@app.lifespan()
def lifespan(context: Context) -> Iterator[None]:
    """Limit torch to :data:`CLIENT_NUM_THREADS` intra-op thread(s) while handling messages."""
    torch.set_num_threads(CLIENT_NUM_THREADS)
    yield


@dataclass(frozen=True)
class PreTrainingStats:
    """Statistics a device reports before training (identical in stats and train replies).

    Attributes
    ----------
    label_hist : list of int, length C
        Class counts of all samples of this round's tau batches (sums to tau b).
    sigma : float or None
        sigma-hat_v, paper eq. (local_est_sigma); None when the server did not ask for it.

    """

    label_hist: list[int]
    sigma: float | None


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


def node_partition(context: Context, settings: TaskSettings) -> int:
    """Return the node's partition id, checking it against the run config.

    Raises
    ------
    ValueError
        If ``partition-id`` / ``num-partitions`` are missing from node_config, not integers,
        if ``num-partitions`` differs from ``num-devices`` or the id is out of range.

    """
    config = context.node_config
    for key in (keys.NODE_PARTITION_ID, keys.NODE_NUM_PARTITIONS):
        if key not in config:
            raise ValueError(
                f"node_config key '{key}' is missing; start the SuperNode with --node-config "
                f'"{keys.NODE_PARTITION_ID}=<v> {keys.NODE_NUM_PARTITIONS}=<V>"'
            )
        if isinstance(config[key], bool) or not isinstance(config[key], int):
            raise ValueError(f"node_config key '{key}' must be an integer; got {config[key]!r}")
    num_partitions = int(config[keys.NODE_NUM_PARTITIONS])
    if num_partitions != settings.num_devices:
        raise ValueError(
            f"node_config num-partitions ({num_partitions}) must equal run-config num-devices "
            f"({settings.num_devices})"
        )
    partition_id = int(config[keys.NODE_PARTITION_ID])
    if not 0 <= partition_id < num_partitions:
        raise ValueError(
            f"node_config partition-id must be in 0 .. {num_partitions - 1}; got {partition_id}"
        )
    return partition_id


def round_config(msg: Message) -> tuple[int, TrainingSettings, bool]:
    """Read the server round, τ, η, b and whether to compute σ̂ from the ConfigRecord ``config``."""
    if keys.CONFIG not in msg.content.config_records:
        raise ValueError(
            f"message '{msg.metadata.message_type}' lacks the ConfigRecord '{keys.CONFIG}' "
            f"(with {keys.SERVER_ROUND}, {keys.LOCAL_STEPS}, {keys.LEARNING_RATE}, "
            f"{keys.BATCH_SIZE})"
        )
    config = msg.content.config_records[keys.CONFIG]
    want_sigma = config.get(keys.WANT_SIGMA, True)
    if not isinstance(want_sigma, bool):
        raise ValueError(f"ConfigRecord key '{keys.WANT_SIGMA}' must be a bool; got {want_sigma!r}")
    return (*read_round_config(config), want_sigma)


def received_model(msg: Message, settings: TaskSettings, split: LocalSplit) -> nn.Module:
    """Load the message's ArrayRecord into this process's model of the run config's kind."""
    if keys.ARRAYS not in msg.content.array_records:
        raise ValueError(
            f"message '{msg.metadata.message_type}' lacks the ArrayRecord '{keys.ARRAYS}' "
            "(the global model's state_dict)"
        )
    state = decoded_state(msg.content.array_records[keys.ARRAYS])
    model = process_model(settings.model, split.num_classes, split.source.input_shape)
    model.load_state_dict(state, strict=True)  # copies into the existing tensors, in place
    model.zero_grad(set_to_none=True)
    return model


@dataclass
class _DecodedRecord:
    """An ArrayRecord decoded by :func:`decoded_state`: its arrays (weakly) and the result."""

    arrays: list[tuple[str, weakref.ref[Array]]]
    state: OrderedDict[str, torch.Tensor]


#: The last record :func:`decoded_state` decoded (at most one entry).
_LAST_DECODED: list[_DecodedRecord] = []


def decoded_state(record: ArrayRecord) -> OrderedDict[str, torch.Tensor]:
    """``record.to_torch_state_dict()``, decoded once for the messages that share the record.

    Flower's arrays are serialised bytes; decoding one parses its header and copies it. The
    server sends a round's global model in one record to every device it addresses, so where
    the messages reach the ClientApp as objects (the in-process engine) every query and
    training message of a round carries the same :class:`~flwr.app.Array` objects. The last
    decoded record is kept with weak references to its arrays: a record whose arrays are the
    very same objects, under the same names and in the same order, gets the kept result (an
    Array's bytes are set once, when it is built); anything else is decoded. The kept result
    is dropped as soon as one of its arrays is freed, so a process whose messages are
    deserialised one by one (``flwr run``, deployments) holds no extra copy between messages.
    The returned tensors are only read (:func:`received_model` copies them into the model).
    """
    items = list(record.items())
    for kept in _LAST_DECODED:
        if len(kept.arrays) == len(items) and all(
            name == kept_name and ref() is array
            for (name, array), (kept_name, ref) in zip(items, kept.arrays, strict=True)
        ):
            return kept.state
    state = record.to_torch_state_dict()

    def forget(_: weakref.ref[Array]) -> None:
        _LAST_DECODED.clear()

    _LAST_DECODED[:] = [
        _DecodedRecord([(name, weakref.ref(array, forget)) for name, array in items], state)
    ]
    return state


@functools.lru_cache(maxsize=2)
def process_model(name: str, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """One model per process and architecture, on the compute device, reused across messages.

    Building a model costs far more than loading weights into it (ResNet-18-GN: ~160 ms vs
    ~7 ms on one CPU thread), and in simulation a Ray worker serves many messages. Every
    parameter and buffer is overwritten by :func:`received_model` (``strict=True``) and the
    gradients are cleared, so nothing of an earlier message survives; the handlers run one
    message at a time per process.
    """
    return build_model(name, num_classes, input_shape).to(compute_device())


def pre_training_stats(
    model: nn.Module, split: LocalSplit, batches: list[np.ndarray], *, want_sigma: bool = True
) -> PreTrainingStats:
    """Compute the label histogram of the round's batches and (if asked) sigma-hat on the first."""
    used = np.concatenate(batches)
    hist = np.bincount(split.labels[used], minlength=split.num_classes)
    sigma = None
    if want_sigma:
        x_first, y_first = split.tensors(batches[0])
        sigma = float(gradient_spread(model, x_first, y_first).sigma)
    return PreTrainingStats(label_hist=[int(c) for c in hist], sigma=sigma)


def floating_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The floating-point entries of the model's state dict, copied (what an update changes)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if v.is_floating_point()}


def update_norm(before: dict[str, torch.Tensor], model: nn.Module) -> float:
    """Return ||w_new - w_received||_2 over :func:`floating_state` (float64 accumulation).

    The same quantity the server recomputes from the upload
    (:func:`fedcgd_strategy.screening.update_norm`) to check the reported value.
    """
    total = 0.0
    for name, value in floating_state(model).items():
        diff = value.double() - before[name].double()
        total += float((diff * diff).sum())
    return math.sqrt(total)


def _prepare(msg: Message, context: Context) -> tuple[TaskSettings, int, LocalSplit]:
    """Parse the run config, the node's partition id and fetch its (cached) local split."""
    settings = TaskSettings.from_run_config(context.run_config)
    partition_id = node_partition(context, settings)
    return settings, partition_id, local_split(settings, partition_id)


def _round_batches(
    settings: TaskSettings, server_round: int, training: TrainingSettings, split: LocalSplit
) -> list[np.ndarray]:
    """Draw this round's batches with the tau and b the server sent."""
    return local_batches(settings.seed, training, len(split), server_round, split.partition_id)


@dataclass(frozen=True)
class _RoundState:
    """What the stats and train handlers read from a round's message before they differ.

    Attributes
    ----------
    settings : TaskSettings
        The run config.
    partition_id : int
        The node's partition id.
    split : LocalSplit
        The node's (cached) local split.
    server_round : int
        The round the server sent.
    training : TrainingSettings
        The tau, lr and b the server sent.
    model : nn.Module
        The process model holding the received weights.
    batches : list of int arrays
        This round's tau batches (rows of ``split``).
    stats : PreTrainingStats
        The pre-training statistics at the received model.

    """

    settings: TaskSettings
    partition_id: int
    split: LocalSplit
    server_round: int
    training: TrainingSettings
    model: nn.Module
    batches: list[np.ndarray]
    stats: PreTrainingStats


def _round_state(msg: Message, context: Context) -> _RoundState:
    """Read the message and the node's data, load the model and compute the round's statistics."""
    settings, partition_id, split = _prepare(msg, context)
    server_round, training, want_sigma = round_config(msg)
    model = received_model(msg, settings, split)
    batches = _round_batches(settings, server_round, training, split)
    stats = pre_training_stats(model, split, batches, want_sigma=want_sigma)
    return _RoundState(settings, partition_id, split, server_round, training, model, batches, stats)


def _stats_metrics(
    partition_id: int, split: LocalSplit, stats: PreTrainingStats
) -> dict[str, MetricRecordValues]:
    """Return the metric entries shared by the stats and train replies (Python scalars)."""
    metrics: dict[str, MetricRecordValues] = {
        keys.PARTITION_ID: int(partition_id),
        keys.NUM_EXAMPLES: len(split),
        keys.LABEL_HIST: stats.label_hist,
    }
    if stats.sigma is not None:
        metrics[keys.SIGMA] = float(stats.sigma)
    return metrics


@app.query(keys.QUERY_INFO_ACTION)
def query_info(msg: Message, context: Context) -> Message:
    """Reply with the node's partition id, local dataset size and its whole class counts."""
    _, partition_id, split = _prepare(msg, context)
    local_hist = np.bincount(split.labels, minlength=split.num_classes)
    metrics = MetricRecord(
        {
            keys.PARTITION_ID: partition_id,
            keys.NUM_EXAMPLES: len(split),
            keys.LOCAL_LABEL_HIST: [int(c) for c in local_hist],
        }
    )
    return Message(RecordDict({keys.METRICS: metrics}), reply_to=msg)


@app.query(keys.QUERY_STATS_ACTION)
def query_stats(msg: Message, context: Context) -> Message:
    """Reply with the pre-training statistics at the received model (no training)."""
    state = _round_state(msg, context)
    metrics = MetricRecord(_stats_metrics(state.partition_id, state.split, state.stats))
    return Message(RecordDict({keys.METRICS: metrics}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Compute the pre-training statistics, run tau SGD steps, reply model and metrics."""
    state = _round_state(msg, context)
    model = state.model
    before = floating_state(model)
    rows = np.concatenate(state.batches)
    x, y = state.split.tensors(rows)
    # Batches index the gathered rows 0 .. tau b - 1 in order.
    positions = [np.arange(t * len(b), (t + 1) * len(b)) for t, b in enumerate(state.batches)]
    started = time.perf_counter()
    result = train_local(
        model,
        x,
        y,
        positions,
        state.training.learning_rate,
        torch_seed=dropout_seed(state.settings.seed, state.server_round, state.partition_id),
    )
    train_time_s = time.perf_counter() - started
    metrics = _stats_metrics(state.partition_id, state.split, state.stats)
    metrics[keys.TRAIN_LOSS] = float(result.mean_loss)
    metrics[keys.UPDATE_NORM] = update_norm(before, model)
    metrics[keys.TRAIN_TIME_S] = float(train_time_s)
    weights = {name: t.detach().cpu() for name, t in model.state_dict().items()}
    content = RecordDict({keys.ARRAYS: ArrayRecord(weights), keys.METRICS: MetricRecord(metrics)})
    return Message(content, reply_to=msg)


__all__ = [
    "PreTrainingStats",
    "app",
    "decoded_state",
    "node_context",
    "node_partition",
    "pre_training_stats",
    "received_model",
    "round_config",
    "update_norm",
]
