"""The plain side of the round benchmark: a ``flwr run``'s rounds replayed in one PyTorch process.

On the ServerApp's own set-up: the same devices, σ̂ when the policy needs it, τ SGD steps,
FedAvg and the evaluation, each phase timed (:class:`PlainRound`, :class:`PlainRun`).
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

    ``channel_s``: the channel draw; ``sigma_s``: σ̂ and histograms on every available device (0
    for BC); ``train_s``: the scheduled devices' training phase, of which ``train_local_s`` in
    :func:`fedcgd_task.training.train_local` (the devices' ``train-time-s`` span); ``aggregate_s``:
    FedAvg; ``eval_s``: the central evaluation; ``round_s``: the whole round.
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
    """The plain replay of one run: set-up seconds (as the ServerApp's) and one round per round."""

    policy: str
    threads: int
    setup_s: float
    rounds: list[PlainRound]


def replay_plain(
    run_config: Mapping[str, Any], metrics: Sequence[Mapping[str, Any]], threads: int
) -> PlainRun:
    """Redo a run's rounds in this process: same devices, same batches, same model updates.

    ``metrics`` are the run's ``metrics.jsonl`` lines; ``threads`` this process's torch threads.

    Raises
    ------
    RuntimeError
        If the replayed channel gives another number of available devices than the run, or a
        scheduled device was not available.
    """
    import torch

    from client_app.sigma import gradient_spread
    from fedcgd_strategy.aggregation import fedavg
    from fedcgd_task.partition import local_split
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
