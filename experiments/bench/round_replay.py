"""The plain side of the round benchmark: a run's rounds replayed in one plain PyTorch process.

:func:`replay_plain` redoes the rounds of a ``flwr run`` (:mod:`experiments.bench.round`) on
the ServerApp's own set-up (:func:`server_app.setup.build_setup`): the same available devices,
sigma-hat on every available device's first batch when the policy needs it, tau SGD steps on the
scheduled devices, FedAvg of the uploaded models and the central evaluation, timing each phase.
:class:`PlainRound` holds one round's timings and outcome, :class:`PlainRun` the whole replay.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class PlainRound:
    """Timings (seconds) and outcome of one replayed round.

    Attributes
    ----------
    round : int
        Server round j.
    num_available, num_scheduled : int
        Devices available (replayed channel) and trained (from the run's ``scheduled``).
    channel_s : float
        Replaying the channel draw.
    sigma_s : float
        sigma-hat (and label histogram) on every available device's first batch (0 for BC).
    train_s : float
        The training phase: load the global model, gather the batches, tau SGD steps, copy
        the weights, for every scheduled device.
    train_local_s : float
        The part of ``train_s`` spent in :func:`fedcgd_task.training.train_local` (the same span as
        the devices' own ``train-time-s``, summed in ``client_train_s``).
    aggregate_s : float
        FedAvg of the uploaded models.
    eval_s : float
        Central evaluation on the test set.
    round_s : float
        The whole round.
    accuracy, loss : float
        Test accuracy and loss after the round.

    """

    round: int
    num_available: int
    num_scheduled: int
    channel_s: float
    sigma_s: float
    train_s: float
    train_local_s: float
    aggregate_s: float
    eval_s: float
    round_s: float
    accuracy: float
    loss: float


@dataclass(frozen=True)
class PlainRun:
    """The plain replay of one run: set-up time and one :class:`PlainRound` per round.

    ``setup_s`` is the ServerApp's set-up (:func:`server_app.setup.build_setup`: data, initial
    model, uplink, policy) plus the devices' partitions.
    """

    policy: str
    threads: int
    setup_s: float
    rounds: list[PlainRound]


def replay_plain(
    run_config: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]], threads: int
) -> PlainRun:
    """Redo a run's rounds in this process: same devices, same batches, same model updates.

    Parameters
    ----------
    run_config : mapping
        The run's full run config (pyproject defaults plus the overrides).
    metrics : sequence of mapping
        The run's ``metrics.jsonl`` lines (``scheduled`` and ``uploaded`` per round are used;
        ``num_available`` is checked against the replayed channel).
    threads : int
        ``torch.set_num_threads`` of this process.

    Returns
    -------
    PlainRun

    Raises
    ------
    RuntimeError
        If the replayed channel gives another number of available devices than the run, or a
        scheduled device was not available.

    """
    import torch

    from client_app.sigma import gradient_spread
    from fedcgd_strategy.aggregation import fedavg
    from fedcgd_task.local_data import local_split
    from fedcgd_task.training import dropout_seed, local_batches, train_local
    from server_app.config import parse_run_config
    from server_app.setup import build_setup

    torch.set_num_threads(threads)
    started = time.perf_counter()
    # The ServerApp's own set-up: seeds, data, initial model, D_w, the uplink, the policy.
    setup = build_setup(parse_run_config(run_config))
    config = setup.config
    settings, training = config.task, config.training
    model = setup.model.to(setup.device)
    splits = [local_split(settings, v) for v in range(settings.num_devices)]
    global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    setup_s = time.perf_counter() - started

    rounds: list[PlainRound] = []
    for line in metrics:
        server_round = int(line["round"])
        seconds: dict[str, Any] = {}  # PlainRound's timing fields (seconds)
        t_round = time.perf_counter()
        draw = setup.cell.draw_round(setup.model_bits)
        available = [int(v) for v in np.flatnonzero(draw.available)]
        seconds["channel_s"] = time.perf_counter() - t_round
        if len(available) != int(line["num_available"]):
            raise RuntimeError(
                f"round {server_round}: the replayed channel has {len(available)} available "
                f"devices, the run {line['num_available']}"
            )
        scheduled = [int(v) for v in line["scheduled"]]
        if not set(scheduled) <= set(available):
            raise RuntimeError(f"round {server_round}: scheduled {scheduled} not in {available}")

        t0 = time.perf_counter()
        if setup.policy.needs_sigma:  # as the devices do
            model.load_state_dict(global_state)
            for v in available:
                split = splits[v]
                batches = local_batches(config.seed, training, len(split), server_round, v)
                np.bincount(split.labels[np.concatenate(batches)], minlength=split.num_classes)
                x_first, y_first = split.tensors(batches[0])
                gradient_spread(model, x_first, y_first)
        seconds["sigma_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        train_local_s = 0.0
        states: dict[int, dict[str, np.ndarray]] = {}
        for v in scheduled:
            split = splits[v]
            model.load_state_dict(global_state)
            batches = local_batches(config.seed, training, len(split), server_round, v)
            x, y = split.tensors(np.concatenate(batches))
            positions = [np.arange(t * len(b), (t + 1) * len(b)) for t, b in enumerate(batches)]
            t1 = time.perf_counter()
            train_local(
                model,
                x,
                y,
                positions,
                training.learning_rate,
                torch_seed=dropout_seed(config.seed, server_round, v),
            )
            train_local_s += time.perf_counter() - t1
            states[v] = {k: t.detach().cpu().numpy().copy() for k, t in model.state_dict().items()}
        seconds["train_s"], seconds["train_local_s"] = time.perf_counter() - t0, train_local_s

        t0 = time.perf_counter()
        uploaded = [int(v) for v in line.get("uploaded", scheduled)]
        if uploaded:
            averaged = fedavg([states[v] for v in uploaded], [len(splits[v]) for v in uploaded])
            global_state = {
                k: torch.from_numpy(np.ascontiguousarray(a)) for k, a in averaged.items()
            }
        seconds["aggregate_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        loss, accuracy = setup.evaluate(global_state)  # the ServerApp's central evaluation
        seconds["eval_s"] = time.perf_counter() - t0
        seconds["round_s"] = time.perf_counter() - t_round
        counts = (len(available), len(scheduled))
        rounds.append(PlainRound(server_round, *counts, accuracy=accuracy, loss=loss, **seconds))
    return PlainRun(
        policy=str(run_config["policy"]), threads=threads, setup_s=setup_s, rounds=rounds
    )
