"""Tests of client_app.app: the ClientApp handlers called with hand-built Messages."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from client_app import app as client
from client_app.device_round import node_split, record_state, state_record
from fedcgd_config import keys
from fedcgd_config.settings import TaskSettings, TrainingSettings, default_run_config
from fedcgd_task.datasets.images import load_digits_split
from fedcgd_task.models import build_model
from fedcgd_task.partition import local_split
from fedcgd_task.training import local_batches

RUN_CONFIG: dict[str, Any] = {  # the app's defaults, with a small federation
    **default_run_config(), "seed": 5, "num-devices": 4, "dirichlet-alpha": 0.5, "local-steps": 1,
}  # fmt: skip
TAU, B, LR = 3, 8, 0.2


@pytest.fixture(autouse=True)
def task_identity() -> None:
    """Instruction messages read the process's run / node / task ids; set them as Flower does."""
    TaskIdentity.run_id = 1
    TaskIdentity.node_id = 0
    TaskIdentity.task_id = 0


def context(partition_id: int = 1, num_partitions: int = 4) -> Context:
    return client.node_context(
        dict(RUN_CONFIG), partition_id, num_partitions, node_id=100 + partition_id
    )


def global_state() -> dict[str, torch.Tensor]:
    return build_model("mlp", 10, (1, 8, 8), seed=11).state_dict()


def message(message_type: str, server_round: int = 2) -> Message:
    content = RecordDict({keys.ARRAYS: state_record(global_state())})
    config = {keys.SERVER_ROUND: server_round, "local-steps": TAU, "learning-rate": LR}
    content[keys.CONFIG] = ConfigRecord({**config, "batch-size": B})
    return Message(content=content, dst_node_id=101, message_type=message_type)


def metrics_of(reply: Message) -> MetricRecord:
    assert not reply.has_error()
    return reply.content.metric_records[keys.METRICS]


def test_info_and_stats_replies_and_their_label_hists() -> None:
    reply = client.app(
        Message(RecordDict(), dst_node_id=101, message_type=keys.QUERY_INFO), context()
    )
    m = metrics_of(reply)
    # Dirichlet split of the 1437 digits training images over 4 devices: floor(1437 / 4) = 359.
    assert m[keys.PARTITION_ID] == 1 and m[keys.NUM_EXAMPLES] == 359
    # The whole local class counts, recounted here from the device's rows of the training set.
    rows = local_split(TaskSettings.from_run_config(RUN_CONFIG), 1).indices
    labels = load_digits_split()[0].labels[rows]
    assert m[keys.LOCAL_LABEL_HIST] == [int(np.sum(labels == c)) for c in range(10)]
    assert sum(m[keys.LOCAL_LABEL_HIST]) == 359
    # the stats reply: its contents and the label histogram of the round's batches
    reply = client.app(message(keys.QUERY_STATS), context(3))
    m = metrics_of(reply)
    assert keys.ARRAYS not in reply.content.array_records
    assert m[keys.PARTITION_ID] == 3 and m[keys.NUM_EXAMPLES] == 359
    assert isinstance(m[keys.SIGMA], float) and m[keys.SIGMA] > 0
    assert set(m) == {keys.PARTITION_ID, keys.NUM_EXAMPLES, keys.LABEL_HIST, keys.SIGMA}
    # Independent recount: histogram of the labels at the drawn positions of the local split.
    settings = TaskSettings.from_run_config(RUN_CONFIG)
    split = local_split(settings, 3)
    training = TrainingSettings(local_steps=TAU, learning_rate=LR, batch_size=B)
    rows = np.concatenate(local_batches(settings.seed, training, len(split), 2, 3))
    assert m[keys.LABEL_HIST] == [int(np.sum(split.labels[rows] == c)) for c in range(10)]
    other = metrics_of(client.app(message(keys.QUERY_STATS), context(1)))[keys.LABEL_HIST]
    assert sum(other) == TAU * B and other != m[keys.LABEL_HIST]  # each device its own batches


def test_train_repeats_stats_updates_model_deterministically_and_by_round() -> None:
    stats = metrics_of(client.app(message(keys.QUERY_STATS), context()))
    reply = client.app(message("train"), context())
    again = client.app(message("train"), context()).content.array_records[keys.ARRAYS]
    third = client.app(message("train", server_round=3), context()).content.array_records
    m = metrics_of(reply)
    for key in (keys.PARTITION_ID, keys.NUM_EXAMPLES, keys.LABEL_HIST, keys.SIGMA):
        assert m[key] == stats[key], key
    old_state = global_state()
    new_state = record_state(reply.content.array_records[keys.ARRAYS], old_state)
    assert all(torch.equal(new_state[k], v) for k, v in record_state(again, old_state).items())
    c = record_state(third[keys.ARRAYS], old_state)
    assert any(not torch.equal(new_state[k], c[k]) for k in c)
    squared = sum(
        float(((new_state[k].double() - old_state[k].double()) ** 2).sum()) for k in old_state
    )
    assert squared > 0
    assert m[keys.UPDATE_NORM] == pytest.approx(math.sqrt(squared), rel=1e-6)
    assert m[keys.TRAIN_TIME_S] >= 0 and isinstance(m[keys.TRAIN_LOSS], float)
    # The untrained model is near-uniform over 10 classes: the mean loss over 3 small steps is
    # close to ln 10 = 2.30.
    assert abs(m[keys.TRAIN_LOSS] - math.log(10)) < 0.5


@pytest.mark.parametrize(
    ("node_config", "said"),
    [({"partition-id": 1, "num-partitions": 5}, "partition-id = 1, num-partitions = 5"),
     ({"partition-id": 4, "num-partitions": 4}, "partition-id = 4, num-partitions = 4"),
     ({"partition-id": -1, "num-partitions": 4}, "partition-id = -1, num-partitions = 4"),
     ({"partition-id": "1", "num-partitions": 4}, "partition-id = '1', num-partitions = 4"),
     ({"partition-id": 1}, "partition-id = 1, num-partitions = None")],
)  # fmt: skip
def test_a_node_config_that_does_not_fit_is_one_line_naming_both_keys(node_config, said) -> None:
    with pytest.raises(ValueError) as err:
        node_split(Context(1, 101, node_config, {}, dict(RUN_CONFIG)))
    assert str(err.value) == (
        f"node_config {said}; allowed: ints, num-partitions = run-config num-devices = 4, "
        'partition-id in 0 .. 3 (start the SuperNode with --node-config "partition-id=<v> '
        'num-partitions=<V>")'
    )
    with pytest.raises(ValueError, match="num-partitions = 5"):  # through the ClientApp
        client.app(message(keys.QUERY_STATS), context(num_partitions=5))
